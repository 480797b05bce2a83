// SemanticTier and LexicalEmbedder: thresholds, the nearest entry equal to brute force, isolation,
// evicted/invalidated entries never returned, nearest() without a use.
#include "core/cache/semantic_tier.h"
#include "core/util/error.h"
#include "tests/support/random_vectors.h"

#include <QtTest>

#include <cmath>
#include <limits>
#include <random>

using namespace kvwb;
using core::SemanticTier;
using core::TierLimits;

namespace {

core::CachedResponse response(const std::string &text)
{
    core::CachedResponse r;
    r.text = text;
    return r;
}

using test::dot;
using test::randomUnit;

double norm(const std::vector<float> &v)
{
    return std::sqrt(dot(v, v));
}

TierLimits lru(int64_t maxEntries, bool shared = false)
{
    TierLimits l;
    l.maxEntries = maxEntries;
    l.shareAcrossTenants = shared;
    return l;
}

} // namespace

class TestSemanticTier : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void lexicalEmbedder()
    {
        core::LexicalEmbedder e(512);
        QCOMPARE(e.dim(), 512);
        QCOMPARE(e.name(), std::string("lexical-512"));
        const auto a = e.embed("How do I reset my password?");
        QCOMPARE(a.size(), size_t(512));
        QVERIFY(std::abs(norm(a) - 1.0) < 1e-5);
        QCOMPARE(e.embed("How do I reset my password?"), a);                         // deterministic
        QCOMPARE(core::LexicalEmbedder(512).embed("HOW do i reset my password"), a); // case, punctuation
        const auto zero = e.embed("  ?! ");
        QCOMPARE(norm(zero), 0.0);
        QVERIFY_THROWS_EXCEPTION(core::Error, core::LexicalEmbedder(0));
        // Word order matters through bigrams only: same words, another order, similar but not equal.
        const double reordered = dot(a, e.embed("my password: how do I reset?"));
        QVERIFY(reordered > 0.7 && reordered < 0.999);
    }

    // Paraphrase-like texts land near each other, unrelated ones far; the threshold decides.
    void paraphrasesAndThreshold()
    {
        core::LexicalEmbedder e(512);
        SemanticTier t(lru(0), 512, 0.5);
        t.insert({"t", "m"}, "How do I reset my password?", e.embed("How do I reset my password?"),
                 response("Use the reset link."), 0);
        t.insert({"t", "m"}, "What is the capital of France?", e.embed("What is the capital of France?"),
                 response("Paris."), 0);
        const auto near = e.embed("how can I reset my password");
        const auto hit = t.lookup({"t", "m"}, near, 1);
        QVERIFY(hit);
        QCOMPARE(hit->response.text, std::string("Use the reset link."));
        QCOMPARE(hit->cachedPrompt, std::string("How do I reset my password?"));
        qInfo("paraphrase similarity %.3f", hit->similarity);
        QVERIFY(hit->similarity > 0.5 && hit->similarity < 0.99);
        const auto capital = t.lookup({"t", "m"}, e.embed("what's the capital city of France"), 1);
        QVERIFY(capital);
        QCOMPARE(capital->response.text, std::string("Paris."));
        QVERIFY(!t.lookup({"t", "m"}, e.embed("Recommend a good pasta recipe"), 1));
        t.setThreshold(0.99);
        QCOMPARE(t.threshold(), 0.99);
        QVERIFY(!t.lookup({"t", "m"}, near, 1));
        const auto n = t.nearest({"t", "m"}, near, 1); // no threshold
        QVERIFY(n);
        QCOMPARE(n->similarity, hit->similarity);
        QVERIFY(t.lookup({"t", "m"}, e.embed("How do I reset my password?"), 1)); // identical: 1.0
    }

    // A broken embedder's NaN (or Inf) vector has similarity NaN to everything: no threshold passes
    // on it, whatever the threshold, so it never serves a cached answer.
    void nonFiniteNeverHits()
    {
        core::LexicalEmbedder e(64);
        for (double threshold : {-1.0, 0.0, 0.9}) {
            SemanticTier t(lru(0), 64, threshold);
            t.insert({"t", "m"}, "Is it safe?", e.embed("Is it safe?"), response("Yes."), 0);
            QVERIFY(t.lookup({"t", "m"}, e.embed("Is it safe?"), 1)); // the tier answers at all
            for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
                std::vector<float> v = e.embed("Is it safe?");
                for (size_t i = 0; i < v.size(); i += 3)
                    v[i] = bad;
                QVERIFY2(!t.lookup({"t", "m"}, v, 2), qPrintable(QString("threshold %1").arg(threshold)));
            }
        }
    }

    void shapesAndNormalisation()
    {
        SemanticTier t(lru(0), 8, 0.9);
        const std::vector<float> wrong(7, 0.1f);
        QVERIFY_THROWS_EXCEPTION(core::Error, t.insert({"t", "m"}, "p", wrong, response("r"), 0));
        try {
            t.lookup({"t", "m"}, wrong, 0);
            QFAIL("no error");
        } catch (const core::Error &e) {
            QCOMPARE(e.code(), core::ErrorCode::Shape);
        }
        std::vector<float> v(8, 0.0f);
        v[0] = 3.0f; // not unit length: normalised on the way in
        t.insert({"t", "m"}, "p", v, response("r"), 0);
        std::vector<float> q(8, 0.0f);
        q[0] = 0.5f;
        const auto hit = t.lookup({"t", "m"}, q, 1);
        QVERIFY(hit);
        QVERIFY(std::abs(hit->similarity - 1.0) < 1e-5);
        QVERIFY(!t.nearest({"t", "other"}, q, 1)); // empty namespace
        QVERIFY_THROWS_EXCEPTION(core::Error, SemanticTier(lru(0), 0, 0.5));
    }

    // The tier's nearest entry against brute force on 5k random unit vectors, for random queries
    // (all similarities near 0) and for noisy copies of stored vectors (the cache's case: a
    // paraphrase of a cached prompt): exact at this size (VectorIndex's exact limit; its HNSW
    // recall beyond it is tests/core/cache/tst_vector_index.cpp's).
    void recallAgainstBruteForce()
    {
        const int dim = 64, n = 5000, queries = 500;
        std::mt19937_64 rng(3);
        SemanticTier t(lru(0), dim, -2.0);
        std::vector<std::vector<float>> stored;
        for (int i = 0; i < n; ++i) {
            stored.push_back(randomUnit(rng, dim));
            t.insert({"t", "m"}, std::to_string(i), stored.back(), response(std::to_string(i)), 0);
        }
        for (bool noisy : {false, true}) {
            int agree = 0;
            for (int q = 0; q < queries; ++q) {
                const std::vector<float> query = test::recallQuery(rng, stored, dim, noisy);
                const int best = int(test::bruteNearest(query, stored)); // the tier normalises queries
                const auto hit = t.nearest({"t", "m"}, query, 0);
                QVERIFY(hit);
                agree += hit->response.text == std::to_string(best) ? 1 : 0;
            }
            const double recall = double(agree) / queries;
            qInfo("recall@1 (%s queries): %.3f", noisy ? "noisy-copy" : "random", recall);
            QCOMPARE(agree, queries);
        }
    }

    // Many tenants storing the same embeddings: every hit is the asking tenant's unless shared.
    void tenantIsolation()
    {
        for (bool shared : {false, true}) {
            std::mt19937_64 rng(11);
            std::vector<std::vector<float>> pool;
            for (int i = 0; i < 30; ++i)
                pool.push_back(randomUnit(rng, 16));
            SemanticTier t(lru(120, shared), 16, 0.95);
            int hits = 0, cross = 0;
            for (int i = 0; i < 6000; ++i) {
                const std::string tenant = "tenant" + std::to_string(rng() % 20);
                const size_t p = rng() % pool.size();
                if (auto h = t.lookup({tenant, "m"}, pool[p], i)) {
                    ++hits;
                    const bool own = h->response.text.rfind(tenant + "/", 0) == 0;
                    if (!shared)
                        QVERIFY2(own, h->response.text.c_str());
                    cross += own ? 0 : 1;
                    QCOMPARE(h->cachedPrompt, "p" + std::to_string(p));
                } else {
                    t.insert({tenant, "m"}, "p" + std::to_string(p), pool[p],
                             response(tenant + "/" + std::to_string(p)), i);
                }
                QVERIFY(t.stats().entries <= 120);
            }
            QVERIFY(hits > 0);
            if (shared)
                QVERIFY(cross > 0);
        }
    }

    // Evicted entries are marked deleted and never come back; the graph reuses their labels.
    void evictedNeverReturned()
    {
        std::mt19937_64 rng(5);
        SemanticTier t(lru(10), 32, 0.999);
        std::vector<std::vector<float>> vs;
        for (int i = 0; i < 200; ++i) {
            vs.push_back(randomUnit(rng, 32));
            t.insert({"t", "m"}, std::to_string(i), vs.back(), response(std::to_string(i)), i);
            for (int j = 0; j <= i; ++j) {
                const auto h = t.nearest({"t", "m"}, vs[size_t(j)], i);
                QVERIFY(h);
                const int got = std::stoi(h->response.text);
                QVERIFY2(got > i - 10, qPrintable(QString("%1 at step %2").arg(got).arg(i))); // live only
                if (j > i - 10)
                    QCOMPARE(got, j);
            }
        }
        QCOMPARE(t.stats().evictions, 190);
    }

    void nearestCountsNoUse()
    {
        const auto e = [](int axis) {
            std::vector<float> v(4, 0.0f);
            v[size_t(axis)] = 1.0f;
            return v;
        };
        SemanticTier t(lru(2), 4, 0.9);
        t.insert({"t", "m"}, "a", e(0), response("a"), 0);
        t.insert({"t", "m"}, "b", e(1), response("b"), 1);
        QVERIFY(t.nearest({"t", "m"}, e(0), 2)); // does not refresh a
        t.insert({"t", "m"}, "c", e(2), response("c"), 3);
        QVERIFY(!t.lookup({"t", "m"}, e(0), 4)); // a was least recent
        QVERIFY(t.lookup({"t", "m"}, e(1), 5));  // a use: b is now more recent than c
        t.insert({"t", "m"}, "d", e(3), response("d"), 6);
        QVERIFY(t.lookup({"t", "m"}, e(1), 7));
        QVERIFY(!t.lookup({"t", "m"}, e(2), 7));
    }

    void modelTagAndTtl()
    {
        TierLimits l;
        l.ttlMs = 100;
        SemanticTier t(l, 4, 0.9);
        const std::vector<float> v{1, 0, 0, 0};
        t.insert({"t", "m1"}, "p", v, response("1"), 0, {"doc"});
        t.insert({"t", "m2"}, "p", v, response("2"), 0);
        QVERIFY(!t.lookup({"t", "m3"}, v, 1)); // another fingerprint never hits
        QCOMPARE(t.lookup({"t", "m2"}, v, 1)->response.text, std::string("2"));
        QCOMPARE(t.invalidateTag("doc"), 1);
        QVERIFY(!t.lookup({"t", "m1"}, v, 1));
        QCOMPARE(t.invalidateModel("m2"), 1);
        QVERIFY(!t.nearest({"t", "m2"}, v, 1));
        t.insert({"t", "m1"}, "p", v, response("3"), 50);
        QVERIFY(t.lookup({"t", "m1"}, v, 149));
        QVERIFY(!t.nearest({"t", "m1"}, v, 150));
        QCOMPARE(t.stats().expirations, 1);
    }
};

QTEST_GUILESS_MAIN(TestSemanticTier)
#include "tst_semantic_tier.moc"
