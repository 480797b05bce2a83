// VectorIndex: exact search up to its limit (equal to brute force, also on template-sharing text
// embeddings where HNSW loses exact matches), the switch to HNSW beyond it, HNSW's recall on
// random vectors, deletion and label reuse in both modes, capacity growth, errors.
#include "core/cache/semantic_tier.h"
#include "core/cache/vector_index.h"
#include "core/util/error.h"
#include "tests/support/random_vectors.h"

#include <QtTest>

#include <cmath>
#include <random>
#include <string>

using namespace kvwb;
using core::VectorIndex;

namespace {

using test::dot;
using test::randomUnit;

// Questions in the demo's templates about made-up words: what a knowledge graph's recall index
// holds (every entry shares its template with hundreds of others).
std::vector<std::string> templateTexts(int words)
{
    static const char *templates[] = {"What is a {}?",        "What's a {}?",
                                      "Explain {}.",          "Define {} in simple terms.",
                                      "What does '{}' mean?", "Tell me about {}.",
                                      "{}: what is it?",      "Can you describe {}?",
                                      "Meaning of {}?",       "What is meant by the word '{}'?"};
    std::mt19937_64 rng(5);
    std::vector<std::string> out;
    for (int w = 0; w < words; ++w) {
        std::string word;
        const int len = 4 + int(rng() % 6);
        for (int i = 0; i < len; ++i)
            word += char('a' + rng() % 26);
        out.push_back(word);
        for (const char *t : templates) {
            std::string s = t;
            s.replace(s.find("{}"), 2, word);
            out.push_back(s);
        }
    }
    return out;
}

// How many vectors find themselves (or an identical vector) first.
int selfFound(const VectorIndex &index, const std::vector<std::vector<float>> &vs)
{
    int found = 0;
    for (const auto &v : vs) {
        const auto r = index.search(v.data(), 1);
        found += !r.empty() && r[0].first < 1e-4f ? 1 : 0;
    }
    return found;
}

} // namespace

class TestVectorIndex : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    // Exact search equals brute force, nearest first with its true distance; HNSW over the same
    // template-sharing embeddings misses some exact matches (printed, not asserted: it is
    // hnswlib's behaviour, and the reason the exact search is the default).
    void exactOnTemplateEmbeddings()
    {
        core::LexicalEmbedder e;
        std::vector<std::vector<float>> vs;
        for (const auto &t : templateTexts(200))
            vs.push_back(e.embed(t));
        VectorIndex exact(e.dim(), 16, 16, 200, 128, "test index");
        VectorIndex hnsw(e.dim(), 16, 16, 200, 128, "test index", 0);
        for (size_t i = 0; i < vs.size(); ++i) {
            exact.add(vs[i].data(), i);
            hnsw.add(vs[i].data(), i);
        }
        QVERIFY(exact.exact());
        QVERIFY(!hnsw.exact());
        QCOMPARE(exact.size(), vs.size());
        QCOMPARE(selfFound(exact, vs), int(vs.size()));
        qInfo("%zu template embeddings: exact finds %d first, HNSW (M 16, ef 128) %d", vs.size(),
              selfFound(exact, vs), selfFound(hnsw, vs));

        // Queries that are no entry: the 5 nearest are brute force's 5 nearest.
        const auto queries = templateTexts(230);
        for (size_t q = 200 * 11; q < queries.size(); q += 3) {
            const auto v = e.embed(queries[q]);
            std::vector<std::pair<double, size_t>> brute;
            for (size_t i = 0; i < vs.size(); ++i)
                brute.emplace_back(1.0 - dot(v, vs[i]), i);
            std::sort(brute.begin(), brute.end());
            const auto got = exact.search(v.data(), 5);
            QCOMPARE(got.size(), size_t(5));
            for (size_t r = 0; r < 5; ++r)
                QVERIFY2(std::abs(double(got[r].first) - brute[r].first) < 1e-5, queries[q].c_str());
            QVERIFY(got[0].second == brute[0].second || std::abs(brute[0].first - brute[1].first) < 1e-5);
        }
    }

    // Past the limit the index builds its HNSW graph from what it holds and keeps answering.
    void switchesToHnswPastTheLimit()
    {
        std::mt19937_64 rng(1);
        VectorIndex index(32, 4, 16, 200, 128, "test index", 50);
        std::vector<std::vector<float>> vs;
        for (size_t i = 0; i < 120; ++i) {
            vs.push_back(randomUnit(rng, 32));
            index.add(vs.back().data(), i);
            QCOMPARE(index.exact(), i < 50);
        }
        QVERIFY(index.capacity() >= 120);
        QCOMPARE(selfFound(index, vs), 120);
    }

    // Deleted labels never come back; adding a deleted label replaces its vector; in both modes.
    void deletionAndReuse()
    {
        for (size_t limit : {size_t(1000), size_t(0)}) {
            std::mt19937_64 rng(2);
            VectorIndex index(16, 8, 16, 200, 128, "test index", limit);
            std::vector<std::vector<float>> vs;
            for (size_t i = 0; i < 40; ++i) {
                vs.push_back(randomUnit(rng, 16));
                index.add(vs.back().data(), i);
            }
            index.markDeleted(7);
            QCOMPARE(index.size(), size_t(39));
            for (const auto &[d, label] : index.search(vs[7].data(), 40))
                QVERIFY(label != 7);
            const auto fresh = randomUnit(rng, 16);
            index.add(fresh.data(), 7);
            QCOMPARE(index.size(), size_t(40));
            const auto r = index.search(fresh.data(), 1);
            QCOMPARE(r.at(0).second, size_t(7));
            QVERIFY(r[0].first < 1e-5f);
            QVERIFY_THROWS_EXCEPTION(core::Error, index.markDeleted(500)); // never added
            index.markDeleted(3);
            QVERIFY_THROWS_EXCEPTION(core::Error, index.markDeleted(3)); // already deleted
        }
        VectorIndex empty(4, 1, 16, 200, 128, "test index");
        const float q[4] = {1, 0, 0, 0};
        QVERIFY(empty.search(q, 3).empty());
        VectorIndex one(4, 1, 16, 200, 128, "test index");
        one.add(q, 1000); // beyond the capacity: grown
        QVERIFY(one.capacity() > 1000);
        QCOMPARE(one.search(q, 3).size(), size_t(1));
        QVERIFY_THROWS_EXCEPTION(core::Error, VectorIndex(0, 1, 16, 200, 128, "test index"));
    }

    // HNSW (M 16, ef_construction 200, ef 128) against brute force on 5k random unit vectors:
    // recall@1 for random queries (all similarities near 0) and for noisy copies of stored vectors
    // (the cache's case: a paraphrase of a cached prompt).
    void hnswRecallOnRandomVectors()
    {
        const int dim = 64, n = 5000, queries = 500;
        std::mt19937_64 rng(3);
        VectorIndex index(dim, 256, 16, 200, 128, "test index", 0);
        std::vector<std::vector<float>> stored;
        for (int i = 0; i < n; ++i) {
            stored.push_back(randomUnit(rng, dim));
            index.add(stored.back().data(), size_t(i));
        }
        for (bool noisy : {false, true}) {
            int agree = 0;
            for (int q = 0; q < queries; ++q) {
                const std::vector<float> query = test::recallQuery(rng, stored, dim, noisy);
                const size_t best = test::bruteNearest(query, stored);
                agree += index.search(query.data(), 1).at(0).second == best ? 1 : 0;
            }
            const double recall = double(agree) / queries;
            qInfo("HNSW recall@1 (%s queries): %.3f", noisy ? "noisy-copy" : "random", recall);
            QVERIFY(recall >= 0.95);
        }
    }
};

QTEST_APPLESS_MAIN(TestVectorIndex)
#include "tst_vector_index.moc"
