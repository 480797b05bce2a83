// PrefixTree: longest whole-block prefix, handles re-pointed and released exactly when unreferenced,
// only leaves evicted, partial inserts when capacity is short, isolation and invalidation.
#include "core/cache/prefix_tree.h"
#include "core/util/error.h"

#include <QtTest>

#include <map>
#include <numeric>
#include <random>
#include <set>

using namespace kvwb;
using core::PrefixTree;
using core::TierLimits;

namespace {

std::vector<int> seq(int from, int count)
{
    std::vector<int> v(static_cast<size_t>(count));
    std::iota(v.begin(), v.end(), from);
    return v;
}

std::vector<int> cat(std::vector<int> a, const std::vector<int> &b)
{
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

TierLimits limits(core::Eviction e, int64_t maxEntries, int64_t maxBytes = 0, bool shared = false)
{
    TierLimits l;
    l.eviction = e;
    l.maxEntries = maxEntries;
    l.maxBytes = maxBytes;
    l.shareAcrossTenants = shared;
    return l;
}

} // namespace

class TestPrefixTree : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void longestWholeBlockPrefix()
    {
        PrefixTree t(limits(core::Eviction::Lru, 0), 4, 10);
        QCOMPARE(t.blockSize(), 4);
        QCOMPARE(t.insert({"t", "m"}, seq(1, 10), 1, 0), 2); // 2 whole blocks; tokens 9, 10 are not cached
        QCOMPARE(t.cachedTokens(), 8);
        QCOMPARE(t.stats().bytes, 2 * 4 * 10);
        auto m = t.lookup({"t", "m"}, seq(1, 10), 1);
        QCOMPARE(m.tokens, 8);
        QCOMPARE(m.handle, uint64_t(1));
        QCOMPARE(t.lookup({"t", "m"}, seq(1, 7), 1).tokens, 4);  // the second block is partial
        QCOMPARE(t.lookup({"t", "m"}, seq(1, 3), 1).tokens, 0);  // a partial first block never matches
        QCOMPARE(t.lookup({"t", "m"}, seq(2, 10), 1).tokens, 0); // shifted
        QCOMPARE(t.lookup({"t", "m"}, cat(seq(1, 4), seq(50, 8)), 1).tokens, 4);
        QCOMPARE(t.lookup({"t", "m"}, cat(seq(1, 7), {99}), 1).tokens, 4); // one token differs
        QCOMPARE(t.lookup({"t", "m"}, {}, 1).tokens, 0);
        QVERIFY_THROWS_EXCEPTION(core::Error, PrefixTree(limits(core::Eviction::Lru, 0), 0, 10));
    }

    void handlesRepointedAndReleased()
    {
        PrefixTree t(limits(core::Eviction::Lru, 0), 4, 1);
        t.insert({"t", "m"}, seq(1, 8), 1, 0);
        QVERIFY(t.releasedHandles().empty());
        // The same 8 tokens under a newer cache: both blocks move to handle 2, so 1 is released.
        t.insert({"t", "m"}, seq(1, 8), 2, 1);
        QCOMPARE(t.releasedHandles(), std::vector<uint64_t>({1}));
        QVERIFY(t.releasedHandles().empty()); // reported once
        // A branch sharing the first block: that block moves to 3; 2 still holds [5..8].
        t.insert({"t", "m"}, cat(seq(1, 4), seq(20, 4)), 3, 2);
        QVERIFY(t.releasedHandles().empty());
        auto m = t.lookup({"t", "m"}, seq(1, 8), 3);
        QCOMPARE(m.tokens, 8);
        QCOMPARE(m.handle, uint64_t(2));
        m = t.lookup({"t", "m"}, cat(seq(1, 4), seq(20, 4)), 3);
        QCOMPARE(m.handle, uint64_t(3));
        QCOMPARE(t.lookup({"t", "m"}, seq(1, 4), 3).handle, uint64_t(3));
        QCOMPARE(t.stats().entries, 3);
        // A sequence shorter than a block caches nothing: its handle is the caller's to free at once.
        QCOMPARE(t.insert({"t", "m"}, seq(1, 3), 4, 4), 0);
        QCOMPARE(t.releasedHandles(), std::vector<uint64_t>({4}));
        // Invalidation drops every block: 2 and 3 are released together.
        QCOMPARE(t.invalidateModel("m"), 3);
        QCOMPARE(t.releasedHandles(), std::vector<uint64_t>({2, 3}));
        QCOMPARE(t.cachedTokens(), 0);
    }

    // FIFO would evict the oldest block first; the tree only ever loses leaves.
    void onlyLeavesEvicted()
    {
        PrefixTree t(limits(core::Eviction::Fifo, 3), 2, 1);
        t.insert({"t", "m"}, seq(1, 4), 1, 0);                  // a1 a2
        t.insert({"t", "m"}, cat(seq(1, 2), seq(10, 2)), 2, 1); // a1 (shared) b2
        QCOMPARE(t.stats().entries, 3);
        t.insert({"t", "m"}, seq(30, 2), 3, 2); // full: a1 is oldest but inner, so a2 (next oldest) goes
        QCOMPARE(t.stats().evictions, 1);
        QCOMPARE(t.lookup({"t", "m"}, seq(1, 4), 3).tokens, 2);
        QCOMPARE(t.lookup({"t", "m"}, cat(seq(1, 2), seq(10, 2)), 3).tokens, 4);
        QCOMPARE(t.releasedHandles(), std::vector<uint64_t>({1})); // a1 moved to 2, a2 evicted
        t.insert({"t", "m"}, seq(40, 2), 4, 4);                    // b2 goes; a1 is a leaf now
        t.insert({"t", "m"}, seq(50, 2), 5, 5);                    // a1 goes
        QCOMPARE(t.lookup({"t", "m"}, seq(1, 2), 6).tokens, 0);
        QCOMPARE(t.releasedHandles(), std::vector<uint64_t>({2}));
        QCOMPARE(t.stats().evictions, 3);
    }

    // A sequence longer than the capacity: the leading blocks that fit are cached, never a block
    // without its parent; others' leaves make room first.
    void capacityTooSmall()
    {
        PrefixTree t(limits(core::Eviction::Lru, 0, 3 * 4 * 8), 4, 8); // room for 3 blocks (bytes)
        QCOMPARE(t.insert({"t", "m"}, seq(100, 8), 1, 0), 2);
        QCOMPARE(t.insert({"t", "m"}, seq(1, 20), 2, 1), 3); // evicts the other sequence's 2 blocks
        QCOMPARE(t.stats().bytes, 96);
        QCOMPARE(t.lookup({"t", "m"}, seq(1, 20), 2).tokens, 12);
        QCOMPARE(t.lookup({"t", "m"}, seq(100, 8), 2).tokens, 0);
        QCOMPARE(t.releasedHandles(), std::vector<uint64_t>({1}));
        QCOMPARE(t.cachedTokens(), 12);
        PrefixTree tiny(limits(core::Eviction::Lru, 0, 10), 4, 8); // one block is 32 bytes
        QCOMPARE(tiny.insert({"t", "m"}, seq(1, 8), 9, 0), 0);
        QCOMPARE(tiny.releasedHandles(), std::vector<uint64_t>({9}));
    }

    // Random sequences over a small vocabulary (so prefixes are shared) under each policy: capacity
    // holds after every insert, every match is a true prefix whose handle's sequence covers it, and
    // released handles are exactly those no block points at.
    void randomized_data()
    {
        QTest::addColumn<int>("policy");
        QTest::newRow("lru") << int(core::Eviction::Lru);
        QTest::newRow("lfu") << int(core::Eviction::Lfu);
        QTest::newRow("fifo") << int(core::Eviction::Fifo);
    }
    void randomized()
    {
        QFETCH(int, policy);
        std::mt19937_64 rng(uint64_t(policy) + 1);
        PrefixTree t(limits(core::Eviction(policy), 60), 2, 1);
        std::map<uint64_t, std::vector<int>> sequences; // live handles
        std::set<uint64_t> released;
        for (uint64_t h = 1; h <= 3000; ++h) {
            std::vector<int> ids(size_t(rng() % 12));
            for (int &x : ids)
                x = int(rng() % 3);
            const auto m = t.lookup({"t", "m"}, ids, int64_t(h));
            QVERIFY(m.tokens % 2 == 0 && m.tokens <= int(ids.size()));
            if (m.tokens > 0) {
                QVERIFY(sequences.count(m.handle));
                const auto &s = sequences[m.handle];
                QVERIFY(s.size() >= size_t(m.tokens));
                QVERIFY(std::equal(ids.begin(), ids.begin() + m.tokens, s.begin()));
            }
            sequences[h] = ids;
            t.insert({"t", "m"}, ids, h, int64_t(h));
            QVERIFY(t.stats().entries <= 60);
            for (uint64_t r : t.releasedHandles()) {
                QVERIFY(released.insert(r).second);
                QVERIFY(sequences.erase(r) == 1);
            }
        }
        QVERIFY(t.stats().evictions > 0);
        // Every handle still held is referenced: dropping everything releases exactly those.
        t.invalidateModel("m");
        const auto last = t.releasedHandles();
        QCOMPARE(std::set<uint64_t>(last.begin(), last.end()).size(), sequences.size());
        for (uint64_t r : last)
            QVERIFY(sequences.count(r));
    }

    void tenantIsolation()
    {
        for (bool shared : {false, true}) {
            std::mt19937_64 rng(9);
            PrefixTree t(limits(core::Eviction::Lru, 200, 0, shared), 4, 1);
            std::map<uint64_t, std::string> owner;
            int hits = 0, cross = 0;
            for (uint64_t h = 1; h <= 4000; ++h) {
                const std::string tenant = "tenant" + std::to_string(rng() % 15);
                const auto ids = seq(int(rng() % 5) * 100, 4 * int(1 + rng() % 4)); // the same few sequences
                const auto m = t.lookup({tenant, "m"}, ids, int64_t(h));
                if (m.tokens > 0) {
                    ++hits;
                    const bool own = owner.at(m.handle) == tenant;
                    if (!shared)
                        QVERIFY(own);
                    cross += own ? 0 : 1;
                }
                owner[h] = tenant;
                t.insert({tenant, "m"}, ids, h, int64_t(h));
                t.releasedHandles();
            }
            QVERIFY(hits > 0);
            if (shared)
                QVERIFY(cross > 0);
        }
    }

    void modelAndTags()
    {
        PrefixTree t(limits(core::Eviction::Lru, 0), 2, 1);
        t.insert({"t", "m1"}, seq(1, 4), 1, 0, {"doc:a"});
        QCOMPARE(t.lookup({"t", "m2"}, seq(1, 4), 1).tokens, 0); // another fingerprint never hits
        t.insert({"t", "m2"}, seq(1, 4), 2, 1);
        t.insert({"t", "m1"}, cat(seq(1, 2), seq(7, 2)), 3, 2, {"doc:b"}); // shares [1,2] (tagged doc:a)
        // doc:a's blocks go with their dependents, whatever those are tagged.
        QCOMPARE(t.invalidateTag("doc:a"), 3);
        QCOMPARE(t.lookup({"t", "m1"}, seq(1, 4), 3).tokens, 0);
        QCOMPARE(t.lookup({"t", "m2"}, seq(1, 4), 3).tokens, 4);
        QCOMPARE(t.releasedHandles(), std::vector<uint64_t>({1, 3}));
        QCOMPARE(t.invalidateModel("m2"), 2);
        QCOMPARE(t.releasedHandles(), std::vector<uint64_t>({2}));
        QCOMPARE(t.stats().invalidations, 5);
    }

    void ttl()
    {
        TierLimits l;
        l.ttlMs = 100;
        PrefixTree t(l, 2, 1);
        t.insert({"t", "m"}, seq(1, 4), 1, 0);
        t.insert({"t", "m"}, seq(1, 6), 2, 50); // the first two blocks keep their insertion time (0)
        QCOMPARE(t.lookup({"t", "m"}, seq(1, 6), 99).tokens, 6);
        QCOMPARE(t.lookup({"t", "m"}, seq(1, 6), 100).tokens, 0); // the root block expired: all of it
        QCOMPARE(t.stats().expirations, 3);
        QCOMPARE(t.releasedHandles(), std::vector<uint64_t>({1, 2}));
    }
};

QTEST_GUILESS_MAIN(TestPrefixTree)
#include "tst_prefix_tree.moc"
