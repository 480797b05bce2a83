// ExactTier: key = namespace + sampling + normalised prompt; hits equal the exact repeats of a
// generated request sequence; tenants and model fingerprints never leak; tags invalidate.
#include "core/cache/exact_tier.h"
#include "core/util/error.h"

#include <QtTest>

#include <random>
#include <set>

using namespace kvwb;
using core::ExactKey;
using core::ExactTier;
using core::TierLimits;

namespace {

core::CachedResponse response(const std::string &text, int64_t requestId = -1)
{
    core::CachedResponse r;
    r.text = text;
    r.outputIds = {1, 2, 3};
    r.requestId = requestId;
    return r;
}

TierLimits lru(int64_t maxEntries, bool shared = false)
{
    TierLimits l;
    l.maxEntries = maxEntries;
    l.shareAcrossTenants = shared;
    return l;
}

} // namespace

class TestExactTier : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void normalise()
    {
        QCOMPARE(core::normalisePrompt("  What is\t a  cat?\n"), std::string("What is a cat?"));
        QCOMPARE(core::normalisePrompt("A,b"), std::string("A,b"));
        QCOMPARE(core::normalisePrompt(" \n "), std::string());
    }

    // Through the CacheTier interface: an answer that descends from an approximate hit is not
    // kept (TierInsert::approximate); the model's own answer is.
    void approximateAnswersAreNotKept()
    {
        ExactTier t(lru(0));
        const std::string prompt = "What is a cat?", sampling = "greedy max=8", none;
        const std::vector<int> tokens = {1, 2};
        const core::TierRequest request{core::TenantScope("alice", "fp"),
                                        core::ModelRole::B,
                                        1,
                                        0,
                                        prompt,
                                        prompt,
                                        tokens,
                                        sampling,
                                        none,
                                        none,
                                        none};
        std::unique_ptr<core::KvPayload> kv;
        t.insert(request, core::TierInsert{response("converted"), kv, true});
        QVERIFY(!t.lookup(request).hit);
        QCOMPARE(t.stats().entries, int64_t(0));
        t.insert(request, core::TierInsert{response("own"), kv});
        const auto found = t.lookup(request);
        QVERIFY(found.hit);
        QCOMPARE(found.response->text, std::string("own"));
    }

    void keyParts()
    {
        ExactTier t(lru(0));
        t.insert({{"alice", "fp"}, "What is  a cat?", "greedy max=64"}, response("a feline"), 0);
        QCOMPARE(t.lookup({{"alice", "fp"}, " What is a cat? ", "greedy max=64"}, 1)->text,
                 std::string("a feline"));
        QVERIFY(!t.lookup({{"alice", "fp"}, "what is a cat?", "greedy max=64"}, 1));  // case kept
        QVERIFY(!t.lookup({{"alice", "fp"}, "What is a cat?", "greedy max=32"}, 1));  // sampling
        QVERIFY(!t.lookup({{"bob", "fp"}, "What is a cat?", "greedy max=64"}, 1));    // tenant
        QVERIFY(!t.lookup({{"alice", "fp2"}, "What is a cat?", "greedy max=64"}, 1)); // model
        // No (sampling, prompt) pair spells another's key.
        t.insert({{"alice", "fp"}, "2 b", "a"}, response("x"), 2);
        QVERIFY(!t.lookup({{"alice", "fp"}, "b", "a2 "}, 3));
        // Bytes: normalised prompt + text + ids.
        ExactTier u(lru(0));
        u.insert({{"t", "m"}, " ab  c ", "s"}, response("hello"), 0);
        QCOMPARE(u.stats().bytes, int64_t(4 + 5 + 3 * sizeof(int)));
    }

    void reinsertReplaces()
    {
        ExactTier t(lru(0));
        const ExactKey k{{"t", "m"}, "p", "s"};
        t.insert(k, response("old"), 0);
        t.insert(k, response("new"), 1);
        QCOMPARE(t.stats().entries, 1);
        QCOMPARE(t.lookup(k, 2)->text, std::string("new"));
    }

    // A generated sequence with repeats: with room for everything, hits are exactly the requests
    // whose (tenant, prompt, sampling) came before.
    void hitsEqualRepeats()
    {
        std::mt19937_64 rng(42);
        ExactTier t(lru(0));
        std::set<std::string> seen;
        int expected = 0, hits = 0;
        for (int i = 0; i < 5000; ++i) {
            const std::string tenant = "t" + std::to_string(rng() % 4);
            const std::string prompt = "question " + std::to_string(rng() % 300);
            const std::string sampling = rng() % 2 ? "greedy" : "t=0.7";
            const ExactKey k{{tenant, "m"}, prompt, sampling};
            expected += seen.insert(tenant + "|" + prompt + "|" + sampling).second ? 0 : 1;
            if (auto r = t.lookup(k, i)) {
                ++hits;
                QCOMPARE(r->text, tenant + ":" + prompt + ":" + sampling);
            } else {
                t.insert(k, response(tenant + ":" + prompt + ":" + sampling, i), i);
            }
        }
        QCOMPARE(hits, expected);
        QCOMPARE(t.stats().entries, int64_t(seen.size()));
        QCOMPARE(hits, 5000 - int(seen.size()));
    }

    // Many tenants, the same prompts, a small LRU store: every hit belongs to the asking tenant; with
    // sharing on, cross-tenant hits happen (on purpose).
    void tenantIsolation()
    {
        for (bool shared : {false, true}) {
            std::mt19937_64 rng(7);
            ExactTier t(lru(150, shared));
            int hits = 0, crossHits = 0;
            for (int i = 0; i < 20000; ++i) {
                const std::string tenant = "tenant" + std::to_string(rng() % 25);
                const ExactKey k{{tenant, "m"}, "prompt " + std::to_string(rng() % 40), "greedy"};
                if (auto r = t.lookup(k, i)) {
                    ++hits;
                    const bool own = r->text.rfind(tenant + "/", 0) == 0;
                    if (!shared)
                        QVERIFY2(own, r->text.c_str());
                    crossHits += own ? 0 : 1;
                } else {
                    t.insert(k, response(tenant + "/" + k.prompt), i);
                }
                QVERIFY(t.stats().entries <= 150);
            }
            QVERIFY(hits > 0);
            if (shared)
                QVERIFY(crossHits > 0);
        }
    }

    void modelAndTagInvalidation()
    {
        ExactTier t(lru(0));
        t.insert({{"t", "m1"}, "a", "s"}, response("1"), 0, {"doc:1"});
        t.insert({{"t", "m1"}, "b", "s"}, response("2"), 0, {"doc:2"});
        t.insert({{"t", "m2"}, "a", "s"}, response("3"), 0, {"doc:1"});
        QVERIFY(!t.lookup({{"t", "m3"}, "a", "s"}, 1)); // a changed fingerprint never hits
        QCOMPARE(t.invalidateTag("doc:1"), 2);
        QVERIFY(!t.lookup({{"t", "m1"}, "a", "s"}, 1));
        QVERIFY(t.lookup({{"t", "m1"}, "b", "s"}, 1));
        QCOMPARE(t.invalidateModel("m1"), 1);
        QVERIFY(!t.lookup({{"t", "m1"}, "b", "s"}, 1));
        QCOMPARE(t.stats().entries, 0);
        QCOMPARE(t.stats().invalidations, 3);
    }

    void ttl()
    {
        TierLimits l;
        l.ttlMs = 1000;
        ExactTier t(l);
        t.insert({{"t", "m"}, "p", "s"}, response("r"), 0);
        QVERIFY(t.lookup({{"t", "m"}, "p", "s"}, 999));
        QVERIFY(!t.lookup({{"t", "m"}, "p", "s"}, 1000));
        QCOMPARE(t.stats().expirations, 1);
        QCOMPARE(t.stats().entries, 0);
    }

    void bytesLimit()
    {
        TierLimits l;
        l.maxBytes = 100;
        ExactTier t(l);
        t.insert({{"t", "m"}, "p", "s"}, response(std::string(200, 'x')), 0); // too large on its own
        QCOMPARE(t.stats().entries, 0);
        QVERIFY(!t.lookup({{"t", "m"}, "p", "s"}, 1));
        for (int i = 0; i < 50; ++i) {
            t.insert({{"t", "m"}, "p" + std::to_string(i), "s"}, response(std::string(size_t(i), 'y')), i);
            QVERIFY(t.stats().bytes <= 100);
        }
    }

    void moveKeepsWorking()
    {
        ExactTier a(lru(1));
        a.insert({{"t", "m"}, "p", "s"}, response("r"), 0);
        ExactTier b(std::move(a));
        QCOMPARE(b.lookup({{"t", "m"}, "p", "s"}, 1)->text, std::string("r"));
        b.insert({{"t", "m"}, "q", "s"}, response("r2"), 2); // evicts through the moved store's callback
        QVERIFY(!b.lookup({{"t", "m"}, "p", "s"}, 3));
        QCOMPARE(b.stats().entries, 1);
    }
};

QTEST_GUILESS_MAIN(TestExactTier)
#include "tst_exact_tier.moc"
