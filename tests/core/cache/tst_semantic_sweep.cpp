// The semantic threshold sweep (core/cache/semantic_sweep.h) on hand-made labelled requests with a
// fixed embedder: exact precision, recall and false-hit rate per threshold, the threshold chosen for
// a target false-hit rate, tenants kept apart, exact repeats left to the exact tier; the lexical
// embedder's IDF weighting; and the named near-miss case of polarity and negation ("is X good" /
// "is X bad"), which a lexical embedder scores as near duplicates.
#include "core/cache/semantic_sweep.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"

#include <QtTest>

#include <cmath>
#include <map>

using namespace kvwb;
using core::LabelledText;

namespace {

// Texts are "name"; vectors are looked up: unit vectors at chosen angles in 2-D.
class TableEmbedder : public core::Embedder
{
public:
    std::map<std::string, std::vector<float>> table;
    int dim() const override { return 2; }
    std::string name() const override { return "table"; }
    std::vector<float> embed(const std::string &text) override { return table.at(text); }
};

std::vector<float> at(double cosToX)
{
    return {float(cosToX), float(std::sqrt(std::max(0.0, 1.0 - cosToX * cosToX)))};
}

double cosine(core::Embedder &e, const std::string &a, const std::string &b)
{
    const auto x = e.embed(a), y = e.embed(b);
    double d = 0;
    for (size_t i = 0; i < x.size(); ++i)
        d += double(x[i]) * y[i];
    return d;
}

// Scores pairs from a table keyed "cached|request"; a missing pair throws, "nan" gives NaN.
class TableVerifier : public core::PairVerifier
{
public:
    std::map<std::string, double> table;
    int calls = 0;
    double score(const std::string &cached, const std::string &request) override
    {
        ++calls;
        return table.at(cached + "|" + request);
    }
    std::string name() const override { return "table-verifier"; }
};

} // namespace

class TestSemanticSweep : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void exactCounts()
    {
        TableEmbedder e;
        e.table = {{"base", {1, 0}},
                   {"dup95", at(0.95)},
                   {"miss90", at(0.90)},
                   {"dup70", at(0.70)},
                   {"other", {0, 1}}};
        // tenant t: base (A), dup95 (A, nearest base at 0.95: correct), miss90 (B, nearest dup95 at
        // cos(acos .95 - acos .90) ~ 0.998: wrong), dup70 (A, nearest miss90: ~0.93, wrong intent B)
        const std::vector<LabelledText> rs = {
            {"t", "base", "A"},  {"t", "dup95", "A"}, {"t", "miss90", "B"},
            {"t", "dup70", "A"}, {"u", "dup95", "A"}, // another tenant: nothing before it
            {"t", "base", "A"},                       // an exact repeat
            {"t", "other", ""}};                      // unlabelled
        const auto s = core::sweepSemantic(rs, e, 0.0, {0.5, 0.96, 0.99});
        QCOMPARE(s.scored, int64_t(3));    // dup95, miss90, dup70 of t
        QCOMPARE(s.shouldHit, int64_t(2)); // dup95 and dup70 have an earlier A
        QCOMPARE(s.exactSkipped, int64_t(1));
        QCOMPARE(int(s.nearest.size()), 3);
        QVERIFY(std::abs(s.nearest[0] - 0.95) < 1e-6);
        QCOMPARE(s.nearestCorrect, (std::vector<bool>{true, false, false}));
        // 0.5: all three hit, one correct
        QCOMPARE(s.points[0].hits, int64_t(3));
        QCOMPARE(s.points[0].correctHits, int64_t(1));
        QVERIFY(std::abs(s.points[0].precision - 1.0 / 3) < 1e-12);
        QVERIFY(std::abs(s.points[0].recall - 0.5) < 1e-12);
        QVERIFY(std::abs(s.points[0].falseHitRate - 2.0 / 3) < 1e-12);
        // 0.96: only miss90 (0.998) hits, wrongly
        QCOMPARE(s.points[1].hits, int64_t(1));
        QCOMPARE(s.points[1].correctHits, int64_t(0));
        QCOMPARE(s.points[1].falseHitRate, 1.0);
        // target 0: no threshold with a hit meets it
        QVERIFY(!s.atTarget);
        const auto loose = core::sweepSemantic(rs, e, 0.7, {0.5, 0.96, 0.99});
        QVERIFY(loose.atTarget);
        QCOMPARE(loose.atTarget->threshold, 0.5);
        // exact repeats scored on request
        QCOMPARE(core::sweepSemantic(rs, e, 0.1, {0.5}, true).scored, int64_t(4));
    }

    // The verifier's sweep judges every candidate at or above the similarity threshold once, with
    // (nearest, request) in the replay's order; a NaN or a throw never passes; recall is over the
    // similarity sweep's should-hit requests.
    void verifierSweepOverCandidates()
    {
        TableEmbedder e;
        e.table = {{"base", {1, 0}},    {"dup95", at(0.95)}, {"miss90", at(0.90)},
                   {"dup70", at(0.70)}, {"far", {0, 1}},     {"far2", at(0.05)}};
        const std::vector<LabelledText> rs = {{"t", "base", "A"},  {"t", "dup95", "A"}, {"t", "miss90", "B"},
                                              {"t", "dup70", "A"}, {"t", "far", "C"},   {"t", "far2", "C"}};
        const auto s = core::sweepSemantic(rs, e, 0.1, {0.5});
        QCOMPARE(s.scored, int64_t(5));
        QCOMPARE(s.shouldHit, int64_t(3)); // dup95, dup70, far2
        QCOMPARE(s.scoredRequest, (std::vector<size_t>{1, 2, 3, 4, 5}));
        QCOMPARE(s.nearestRequest, (std::vector<size_t>{0, 1, 2, 3, 4})); // far's nearest: dup70
        TableVerifier v;
        v.table = {
            {"base|dup95", 0.9}, {"dup95|miss90", 0.6}, {"miss90|dup70", std::nan("")}, {"far|far2", 0.3}};
        // far (nearest dup70 at cos ~0.71) is a candidate at 0.5 whose pair the table lacks: it throws
        const auto vs = core::sweepVerifier(rs, s, v, 0.5, 0.0, {0.0, 0.5, 0.7, 0.95});
        QCOMPARE(v.calls, 5);
        QCOMPARE(vs.candidates, int64_t(5));
        QCOMPARE(vs.correctCandidates, int64_t(2)); // dup95 and far2
        QCOMPARE(vs.errors, int64_t(2));            // NaN and the throw
        QCOMPARE(vs.shouldHit, int64_t(3));
        // 0.0: every scored candidate passes (3), correct 2; the failed two never do
        QCOMPARE(vs.points[0].hits, int64_t(3));
        QCOMPARE(vs.points[0].correctHits, int64_t(2));
        QVERIFY(std::abs(vs.points[0].recall - 2.0 / 3) < 1e-12);
        // 0.5: dup95 and miss90
        QCOMPARE(vs.points[1].hits, int64_t(2));
        QCOMPARE(vs.points[1].correctHits, int64_t(1));
        // 0.7: dup95 alone, right: the lowest threshold meeting target 0
        QCOMPARE(vs.points[2].hits, int64_t(1));
        QCOMPARE(vs.points[2].precision, 1.0);
        QVERIFY(vs.atTarget);
        QCOMPARE(vs.atTarget->threshold, 0.7);
        QCOMPARE(vs.points[3].hits, int64_t(0));
        // a higher similarity threshold sends fewer candidates
        v.calls = 0;
        const auto tight = core::sweepVerifier(rs, s, v, 0.96, 0.1, {0.5});
        QCOMPARE(tight.candidates, int64_t(2)); // miss90 (0.991) and far2 (0.999)
        QCOMPARE(v.calls, 2);
        QCOMPARE(int(core::sweepVerifier(rs, s, v, 0.5, 0.1).points.size()), 100); // 0.00 .. 0.99
        QCOMPARE(test::expectError([&] {
                     core::sweepVerifier(rs, s, v, 0.5, 0.1, {0.5, 0.4});
                 }).code(),
                 core::ErrorCode::InvalidArgument);
        QCOMPARE(test::expectError([&] { core::sweepVerifier(rs, s, v, 1.5, 0.1); }).code(),
                 core::ErrorCode::InvalidArgument);
        QCOMPARE(test::expectError([&] { core::sweepVerifier({rs[0]}, s, v, 0.5, 0.1); }).code(),
                 core::ErrorCode::InvalidArgument); // a sweep of other requests
    }

    void badArguments()
    {
        TableEmbedder e;
        QCOMPARE(test::expectError([&] { core::sweepSemantic({}, e, 1.5); }).code(),
                 core::ErrorCode::InvalidArgument);
        QCOMPARE(test::expectError([&] {
                     core::sweepSemantic({}, e, 0.1, {0.9, 0.8});
                 }).code(),
                 core::ErrorCode::InvalidArgument);
        QCOMPARE(test::expectError([&] {
                     core::sweepSemantic({}, e, 0.1, {0.5, 1.5});
                 }).code(),
                 core::ErrorCode::InvalidArgument);
        QCOMPARE(int(core::sweepSemantic({}, e, 0.1).points.size()), 50); // 0.50 .. 0.99
        // An embedder that gives NaN is refused by name, not reported as "0 hits, precision 1".
        e.table = {{"a", {1, 0}}, {"b", {std::nanf(""), 0}}};
        const auto nan = test::expectError([&] {
            core::sweepSemantic({{"t", "a", "A"}, {"t", "b", "A"}}, e, 0.1, {0.5});
        });
        QCOMPARE(nan.code(), core::ErrorCode::Config);
        QVERIFY2(
            QString(nan.what()).contains("embedder table: non-finite value in the embedding of request 2"),
            nan.what());
    }

    void idfWeighsDownSharedWords()
    {
        core::LexicalEmbedder plain, idf;
        QCOMPARE(plain.name(), std::string("lexical-512"));
        std::vector<std::string> docs;
        for (const char *w : {"cat", "dog", "car", "bus", "tree", "lake", "bird", "ship"})
            docs.push_back(std::string("What is the meaning of a ") + w + "?");
        idf.fitIdf(docs);
        QCOMPARE(idf.name(), std::string("lexical-idf-512"));
        const double before = cosine(plain, docs[0], docs[1]), after = cosine(idf, docs[0], docs[1]);
        QVERIFY2(after < before - 0.2, qPrintable(QString("%1 -> %2").arg(before).arg(after)));
        // the margin between a paraphrase that keeps the concept and another concept in the same
        // frame grows
        const double plainMargin = cosine(plain, docs[0], "Define a cat.") - cosine(plain, docs[0], docs[1]);
        const double idfMargin = cosine(idf, docs[0], "Define a cat.") - cosine(idf, docs[0], docs[1]);
        QVERIFY2(idfMargin > plainMargin + 0.1,
                 qPrintable(QString("%1 -> %2").arg(plainMargin).arg(idfMargin)));
        // deterministic and unit length
        const auto v = idf.embed(docs[2]);
        QCOMPARE(v, idf.embed(docs[2]));
        double n = 0;
        for (float x : v)
            n += double(x) * x;
        QVERIFY(std::abs(n - 1.0) < 1e-5);
    }

    // The named near-miss case: the same words with the polarity reversed or negated ask something
    // else. A lexical embedder puts them close (most features are shared), so at the default
    // threshold the sweep counts them as false hits: the case a real embedding model must handle.
    void polarityAndNegationNearMisses()
    {
        const std::vector<std::pair<std::string, std::string>> pairs = {
            {"Is coffee good for your health?", "Is coffee bad for your health?"},
            {"Why is Python so popular?", "Why is Python so unpopular?"},
            {"Is it safe to swim after eating?", "Is it not safe to swim after eating?"},
            {"Is a cat faster than a dog?", "Is a dog faster than a cat?"},
            {"Should I buy a house before I marry?", "Should I marry before I buy a house?"}};
        std::vector<LabelledText> rs;
        for (size_t i = 0; i < pairs.size(); ++i) {
            rs.push_back({"t" + std::to_string(i), pairs[i].first, "p" + std::to_string(i)});
            rs.push_back({"t" + std::to_string(i), pairs[i].second, "n" + std::to_string(i)});
        }
        core::LexicalEmbedder lexical;
        const auto s = core::sweepSemantic(rs, lexical, 0.1, {0.8});
        QCOMPARE(s.scored, int64_t(5));
        QCOMPARE(s.shouldHit, int64_t(0));
        QCOMPARE(s.points[0].correctHits, int64_t(0));
        QVERIFY2(s.points[0].hits >= 4, qPrintable(QString::number(s.points[0].hits))); // false hits at 0.8
        QCOMPARE(s.points[0].falseHitRate, 1.0);
        QVERIFY(!s.atTarget);
    }
};

QTEST_GUILESS_MAIN(TestSemanticSweep)
#include "tst_semantic_sweep.moc"
