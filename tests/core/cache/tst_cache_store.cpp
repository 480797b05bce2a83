// CacheStore: each eviction policy picks the right victims, limits hold after every insert, TTL,
// namespaces, invalidation, dependents (only leaves evicted) and the onRemove contract.
#include "core/cache/cache_store.h"
#include "core/util/error.h"

#include <QtTest>

#include <algorithm>
#include <map>
#include <random>
#include <set>

using namespace kvwb;
using core::CacheStore;
using core::Eviction;
using core::TierLimits;

namespace {

core::EntryScope scope(const std::string &tenant = "t", const std::string &fp = "m",
                       std::vector<std::string> tags = {})
{
    return core::EntryScope{tenant, fp, std::move(tags)};
}

TierLimits limits(Eviction e, int64_t maxEntries, int64_t maxBytes = 0, int64_t ttlMs = 0)
{
    TierLimits l;
    l.eviction = e;
    l.maxEntries = maxEntries;
    l.maxBytes = maxBytes;
    l.ttlMs = ttlMs;
    return l;
}

} // namespace

class TestCacheStore : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void names()
    {
        for (Eviction e : {Eviction::Lru, Eviction::Lfu, Eviction::Fifo, Eviction::Ttl})
            QCOMPARE(core::parseEviction(core::evictionName(e)), std::optional<Eviction>(e));
        QCOMPARE(std::string(core::evictionName(Eviction::Lfu)), std::string("lfu"));
        QVERIFY(!core::parseEviction("LRU"));
    }

    void badLimits()
    {
        auto code = [](TierLimits l) {
            try {
                CacheStore s(l);
            } catch (const core::Error &e) {
                return int(e.code());
            }
            return 0;
        };
        QCOMPARE(code(limits(Eviction::Lru, -1)), int(core::ErrorCode::InvalidArgument));
        QCOMPARE(code(limits(Eviction::Lru, 0, -5)), int(core::ErrorCode::InvalidArgument));
        QCOMPARE(code(limits(Eviction::Lru, 0, 0, -1)), int(core::ErrorCode::InvalidArgument));
        QCOMPARE(code(limits(Eviction::Ttl, 10)), int(core::ErrorCode::InvalidArgument));
        QCOMPARE(code(limits(Eviction::Ttl, 10, 0, 100)), 0);
        CacheStore s(limits(Eviction::Lru, 0));
        QVERIFY_THROWS_EXCEPTION(core::Error, s.insert(scope(), -1, 0));
        QVERIFY_THROWS_EXCEPTION(core::Error, s.namespaceOf("a\x1f"
                                                            "b",
                                                            "m"));
    }

    void lru()
    {
        std::vector<CacheStore::EntryId> removed;
        CacheStore s(limits(Eviction::Lru, 3), [&](CacheStore::EntryId id) { removed.push_back(id); });
        const auto a = *s.insert(scope(), 1, 0), b = *s.insert(scope(), 1, 1), c = *s.insert(scope(), 1, 2);
        QVERIFY(s.touch(a, "t", "m", 3)); // b is now the least recent
        const auto d = *s.insert(scope(), 1, 4);
        QCOMPARE(removed, std::vector<CacheStore::EntryId>({b}));
        QVERIFY(s.touch(c, "t", "m", 5));
        s.insert(scope(), 1, 6); // a (used at 3) goes before c (5) and d (4)
        QCOMPARE(removed, std::vector<CacheStore::EntryId>({b, a}));
        QVERIFY(s.contains(c) && s.contains(d));
        QCOMPARE(s.stats().evictions, 2);
        QCOMPARE(s.stats().entries, 3);
        QCOMPARE(s.stats().inserts, 5);
    }

    void lfuTiesByRecency()
    {
        std::vector<CacheStore::EntryId> removed;
        CacheStore s(limits(Eviction::Lfu, 3), [&](CacheStore::EntryId id) { removed.push_back(id); });
        const auto a = *s.insert(scope(), 1, 0), b = *s.insert(scope(), 1, 1), c = *s.insert(scope(), 1, 2);
        s.touch(a, "t", "m", 3);
        s.touch(a, "t", "m", 4); // a: 3 uses
        s.touch(b, "t", "m", 5); // b: 2 uses, last at 5
        s.touch(c, "t", "m", 6); // c: 2 uses, last at 6
        const auto d = *s.insert(scope(), 1, 7);
        QCOMPARE(removed, std::vector<CacheStore::EntryId>({b})); // tie 2-2: b less recent
        s.insert(scope(), 1, 8);                                  // d has 1 use
        QCOMPARE(removed, std::vector<CacheStore::EntryId>({b, d}));
        QVERIFY(s.contains(a) && s.contains(c));
    }

    void fifo()
    {
        std::vector<CacheStore::EntryId> removed;
        CacheStore s(limits(Eviction::Fifo, 2), [&](CacheStore::EntryId id) { removed.push_back(id); });
        const auto a = *s.insert(scope(), 1, 0), b = *s.insert(scope(), 1, 1);
        s.touch(a, "t", "m", 2); // uses do not matter
        s.insert(scope(), 1, 3);
        QCOMPARE(removed, std::vector<CacheStore::EntryId>({a}));
        s.insert(scope(), 1, 4);
        QCOMPARE(removed, std::vector<CacheStore::EntryId>({a, b}));
    }

    void ttlPolicy()
    {
        std::vector<CacheStore::EntryId> removed;
        CacheStore s(limits(Eviction::Ttl, 3, 0, 100),
                     [&](CacheStore::EntryId id) { removed.push_back(id); });
        const auto a = *s.insert(scope(), 1, 0), b = *s.insert(scope(), 1, 10), c = *s.insert(scope(), 1, 20);
        s.touch(a, "t", "m", 25);
        s.insert(scope(), 1, 30); // full: a expires soonest (at 100), whatever its uses
        QCOMPARE(removed, std::vector<CacheStore::EntryId>({a}));
        QCOMPARE(s.stats().evictions, 1);
        QVERIFY(s.touch(b, "t", "m", 109)); // alive while now < 10 + 100
        QVERIFY(!s.touch(b, "t", "m", 110));
        QCOMPARE(s.stats().expirations, 1);
        QVERIFY(!s.contains(b));
        QCOMPARE(s.expire(120), 1); // c (inserted at 20)
        QVERIFY(!s.contains(c));
        QCOMPARE(s.stats().entries, 1);
    }

    void ttlWithEveryPolicy_data()
    {
        QTest::addColumn<int>("policy");
        QTest::newRow("lru") << int(Eviction::Lru);
        QTest::newRow("lfu") << int(Eviction::Lfu);
        QTest::newRow("fifo") << int(Eviction::Fifo);
        QTest::newRow("ttl") << int(Eviction::Ttl);
    }
    void ttlWithEveryPolicy()
    {
        QFETCH(int, policy);
        int removed = 0;
        CacheStore s(limits(Eviction(policy), 0, 0, 50), [&](CacheStore::EntryId) { ++removed; });
        const auto a = *s.insert(scope(), 1, 0);
        const auto b = *s.insert(scope(), 1, 40);
        QVERIFY(s.touch(a, "t", "m", 49)); // a use does not extend the lifetime
        QVERIFY(!s.touch(a, "t", "m", 50));
        s.insert(scope(), 1, 95); // inserting removes expired entries first: b (40 + 50 <= 95)
        QVERIFY(!s.contains(b));
        QCOMPARE(s.stats().expirations, 2);
        QCOMPARE(s.stats().evictions, 0);
        QCOMPARE(removed, 2);
    }

    void bytes()
    {
        std::vector<CacheStore::EntryId> removed;
        CacheStore s(limits(Eviction::Lru, 0, 100), [&](CacheStore::EntryId id) { removed.push_back(id); });
        const auto a = *s.insert(scope(), 40, 0), b = *s.insert(scope(), 40, 1);
        s.insert(scope(), 40, 2);
        QCOMPARE(removed, std::vector<CacheStore::EntryId>({a}));
        QCOMPARE(s.stats().bytes, 80);
        QVERIFY(!s.insert(scope(), 101, 3)); // larger than the store: not kept, nothing evicted
        QCOMPARE(removed.size(), size_t(1));
        QCOMPARE(s.stats().inserts, 3);
        s.resize(b, 70, 4); // 70 + 40 > 100: the other entry goes
        QCOMPARE(removed.size(), size_t(2));
        QCOMPARE(s.stats().bytes, 70);
        s.resize(b, 150, 5); // cannot fit at all: the entry itself goes
        QVERIFY(!s.contains(b));
        QCOMPARE(s.stats().bytes, 0);
        QCOMPARE(s.stats().evictions, 3);
    }

    void namespaces()
    {
        CacheStore s(limits(Eviction::Lru, 0));
        QCOMPARE(s.namespaceOf("alice", "fp1"), std::string("alice\x1f"
                                                            "fp1"));
        const auto id = *s.insert(scope("alice", "fp1"), 1, 0);
        QVERIFY(s.touch(id, "alice", "fp1", 1));
        QVERIFY(!s.touch(id, "bob", "fp1", 1));
        QVERIFY(!s.touch(id, "alice", "fp2", 1));
        QVERIFY(!s.touch(id, "", "fp1", 1));

        TierLimits shared = limits(Eviction::Lru, 0);
        shared.shareAcrossTenants = true;
        CacheStore t(shared);
        QCOMPARE(t.namespaceOf("alice", "fp1"), std::string("\x1f"
                                                            "fp1"));
        const auto sid = *t.insert(scope("alice", "fp1"), 1, 0);
        QVERIFY(t.touch(sid, "bob", "fp1", 1));
        QVERIFY(!t.touch(sid, "bob", "fp2", 1)); // the fingerprint still separates
    }

    void invalidation()
    {
        std::set<CacheStore::EntryId> removed;
        CacheStore s(limits(Eviction::Lru, 0), [&](CacheStore::EntryId id) { removed.insert(id); });
        const auto a = *s.insert(scope("t", "m1", {"x"}), 1, 0);
        const auto b = *s.insert(scope("t", "m1", {"y"}), 1, 0);
        const auto c = *s.insert(scope("u", "m2", {"x", "y", "x"}), 1, 0);
        const auto d = *s.insert(scope("u", "m2"), 1, 0);
        QCOMPARE(s.invalidateTag("x"), 2);
        QCOMPARE(removed, std::set<CacheStore::EntryId>({a, c}));
        QCOMPARE(s.invalidateTag("x"), 0);
        QCOMPARE(s.invalidateTag("nope"), 0);
        QCOMPARE(s.invalidateModel("m1"), 1);
        QCOMPARE(removed, std::set<CacheStore::EntryId>({a, b, c}));
        QVERIFY(s.contains(d));
        QCOMPARE(s.invalidateModel("m9"), 0);
        QCOMPARE(s.stats().invalidations, 3);
        s.erase(d);
        QCOMPARE(removed.size(), size_t(4));
        QCOMPARE(s.stats().invalidations, 3);
        QCOMPARE(s.stats().entries, 0);
        s.insert(scope(), 1, 0);
        s.clear();
        QCOMPARE(removed.size(), size_t(5));
    }

    void staleIdsNeverMatchNewEntries()
    {
        CacheStore s(limits(Eviction::Lru, 1));
        const auto a = *s.insert(scope(), 1, 0);
        const auto b = *s.insert(scope(), 1, 1); // reuses a's slot
        QVERIFY(a != b);
        QVERIFY(!s.contains(a));
        QVERIFY(!s.touch(a, "t", "m", 2));
        QVERIFY(s.contains(b));
    }

    // Dependents: an inner entry is never evicted (FIFO would pick it first otherwise).
    void onlyLeavesEvicted()
    {
        std::vector<CacheStore::EntryId> removed;
        CacheStore s(limits(Eviction::Fifo, 3), [&](CacheStore::EntryId id) { removed.push_back(id); });
        const auto p = *s.insert(scope(), 1, 0);
        const auto c1 = *s.insert(scope(), 1, 1, p);
        const auto c2 = *s.insert(scope(), 1, 2, p);
        s.insert(scope(), 1, 3); // p is oldest but inner: c1 goes
        QCOMPARE(removed, std::vector<CacheStore::EntryId>({c1}));
        s.insert(scope(), 1, 4); // c2 goes, and p is a leaf again
        s.insert(scope(), 1, 5); // now p (oldest) goes
        QCOMPARE(removed, std::vector<CacheStore::EntryId>({c1, c2, p}));
        // A chain longer than the store does not fit; nothing is evicted for it.
        CacheStore t(limits(Eviction::Lru, 2));
        const auto x = *t.insert(scope(), 1, 0);
        const auto y = *t.insert(scope(), 1, 1, x);
        QVERIFY(!t.insert(scope(), 1, 2, y));
        QVERIFY(t.contains(x) && t.contains(y));
        QVERIFY_THROWS_EXCEPTION(core::Error, t.insert(scope("other"), 1, 3, y));
        QVERIFY_THROWS_EXCEPTION(core::Error, t.insert(scope(), 1, 3, 12345));
    }

    void removingAParentRemovesDependentsFirst()
    {
        std::vector<CacheStore::EntryId> removed;
        CacheStore s(limits(Eviction::Lru, 0, 0, 100),
                     [&](CacheStore::EntryId id) { removed.push_back(id); });
        const auto p = *s.insert(scope("t", "m", {"doc"}), 1, 0);
        const auto c = *s.insert(scope(), 1, 50, p);
        const auto g = *s.insert(scope(), 1, 60, c);
        QCOMPARE(s.expire(100), 3); // p expired: its dependents go too, deepest first
        QCOMPARE(removed, std::vector<CacheStore::EntryId>({g, c, p}));
        const auto p2 = *s.insert(scope("t", "m", {"doc"}), 1, 200);
        s.insert(scope(), 1, 200, p2);
        QCOMPARE(s.invalidateTag("doc"), 2);
        QCOMPARE(s.stats().entries, 0);
    }

    // Random sizes, scopes, uses and dependents under every policy: the limits hold after every call
    // and the stats add up.
    void randomizedLimits_data() { ttlWithEveryPolicy_data(); }
    void randomizedLimits()
    {
        QFETCH(int, policy);
        std::mt19937_64 rng(uint64_t(policy) + 7);
        TierLimits l = limits(Eviction(policy), 200, 5000, policy == int(Eviction::Ttl) ? 3000 : 0);
        std::set<CacheStore::EntryId> live;
        int64_t removedCount = 0;
        CacheStore s(l, [&](CacheStore::EntryId id) {
            QVERIFY(live.erase(id) == 1);
            ++removedCount;
        });
        std::vector<CacheStore::EntryId> ids;
        for (int i = 0; i < 20000; ++i) {
            const int64_t now = i;
            const int op = int(rng() % 10);
            if (op < 6) {
                const std::string tenant = "t" + std::to_string(rng() % 5);
                CacheStore::EntryId parent = 0;
                if (op == 5 && !ids.empty()) {
                    const auto cand = ids[rng() % ids.size()];
                    if (s.contains(cand) && s.touch(cand, "t0", "m", now))
                        parent = cand; // only t0's entries can be parents of t0's
                }
                const auto id = s.insert(scope(parent ? "t0" : tenant), int64_t(rng() % 100), now, parent);
                if (id) {
                    live.insert(*id);
                    ids.push_back(*id);
                }
            } else if (op < 9 && !ids.empty()) {
                s.touch(ids[rng() % ids.size()], "t" + std::to_string(rng() % 5), "m", now);
            } else if (!ids.empty()) {
                s.erase(ids[rng() % ids.size()]);
            }
            const auto st = s.stats();
            QVERIFY2(st.entries <= l.maxEntries, qPrintable(QString::number(st.entries)));
            QVERIFY2(st.bytes <= l.maxBytes, qPrintable(QString::number(st.bytes)));
            QCOMPARE(st.entries, int64_t(live.size()));
        }
        const auto st = s.stats();
        QVERIFY(st.evictions > 0);
        QCOMPARE(st.inserts - removedCount, st.entries);
    }

    // 1M entries must be practical: O(log n) per operation. Not a timed assertion, just a size that
    // would take minutes with an O(n) eviction scan.
    void million()
    {
        CacheStore s(limits(Eviction::Lfu, 500000));
        std::vector<CacheStore::EntryId> ids;
        ids.reserve(1000000);
        for (int i = 0; i < 1000000; ++i) {
            ids.push_back(*s.insert(scope("t" + std::to_string(i % 7)), 10, i));
            if (i % 3 == 0)
                s.touch(ids[size_t(i) / 2], "t" + std::to_string((i / 2) % 7), "m", i);
        }
        QCOMPARE(s.stats().entries, 500000);
        QCOMPARE(s.stats().evictions, 500000);
    }
};

QTEST_GUILESS_MAIN(TestCacheStore)
#include "tst_cache_store.moc"
