// Labelled pair files (core/workload/labelled_pairs.h): every format reads the same pairs, bad lines
// are skipped with file:line, a header without its columns and a file without one pair are
// refused; the validation split never puts a text on both sides and is seeded; the precision/recall
// curve, average precision and the threshold for a target precision are exact on hand-built
// scores, and a NaN score never passes a threshold in any of them.
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/workload/labelled_pairs.h"
#include "tests/support/expect_error.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <set>

using namespace kvwb;
using core::LabelledPair;

namespace {

std::vector<std::pair<std::string, bool>> flat(const core::LabelledPairsFile &f)
{
    std::vector<std::pair<std::string, bool>> out;
    for (const auto &p : f.pairs)
        out.emplace_back(p.a + "|" + p.b, p.duplicate);
    return out;
}

} // namespace

class TestLabelledPairs : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void everyFormatReadsTheSamePairs()
    {
        const std::vector<std::pair<std::string, bool>> want = {
            {"How do I cook rice?|What is the way to cook rice?", true},
            {"Is aspirin safe?|Is aspirin not safe?", false}};
        const auto plain = core::parseLabelledPairs("How do I cook rice?\tWhat is the way to cook "
                                                    "rice?\t1\nIs aspirin safe?\tIs aspirin not safe?\t0\n",
                                                    "p.tsv", false);
        QCOMPARE(plain.format, std::string("tsv"));
        QVERIFY(flat(plain) == want);
        QCOMPARE(plain.duplicates, size_t(1));
        const auto glue =
            core::parseLabelledPairs("label\tsentence1\tsentence2\r\n1\tHow do I cook rice?\tWhat is the "
                                     "way to cook rice?\r\n0\tIs aspirin safe?\tIs aspirin not safe?\r\n",
                                     "g.tsv", false);
        QCOMPARE(glue.format, std::string("tsv-header"));
        QVERIFY(flat(glue) == want);
        const auto mrpc =
            core::parseLabelledPairs("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t7\t8\tHow do I cook "
                                     "rice?\tWhat is the way to cook "
                                     "rice?\n0\t9\t10\tIs aspirin safe?\tIs aspirin not safe?\n",
                                     "m.tsv", false);
        QVERIFY(flat(mrpc) == want);
        const auto quora =
            core::parseLabelledPairs("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\tHow do I "
                                     "cook rice?\t\"What is the way to "
                                     "cook rice?\"\t1\n1\t3\t4\tIs aspirin safe?\tIs aspirin not safe?\t0\n",
                                     "q.tsv", false);
        QCOMPARE(quora.format, std::string("quora-tsv"));
        QVERIFY(flat(quora) == want);
        const auto jsonl = core::parseLabelledPairs(
            "{\"question1\": \"How do I cook rice?\", \"question2\": \"What is the way to cook rice?\", "
            "\"is_duplicate\": 1}\n\n{\"a\": \"Is aspirin safe?\", \"b\": \"Is aspirin not safe?\", "
            "\"label\": false}\n",
            "j.jsonl", true);
        QCOMPARE(jsonl.format, std::string("jsonl"));
        QVERIFY(flat(jsonl) == want);
        // a quote inside a plain TSV is text
        const auto quoted = core::parseLabelledPairs("\"Quoted\" start\tanother\t0\n", "p.tsv", false);
        QCOMPARE(quoted.pairs.at(0).a, std::string("\"Quoted\" start"));
    }

    void badLinesAreNamedAndSkipped()
    {
        const auto f =
            core::parseLabelledPairs("a b\tc d\t1\nonly one field\nx\t\t1\nsame\tsame\t1\ne\tf\tmaybe\n"
                                     "g\th\t0\n",
                                     "pairs.tsv", false);
        QCOMPARE(f.pairs.size(), size_t(2));
        QCOMPARE(f.lines, size_t(6));
        QCOMPARE(f.warnings.total(), size_t(4));
        const auto &m = f.warnings.messages();
        QCOMPARE(m[0], std::string("pairs.tsv:2: 1 fields, expected 3 (text, text, label)"));
        QCOMPARE(m[1], std::string("pairs.tsv:3: the second text is empty"));
        QCOMPARE(m[2],
                 std::string("pairs.tsv:4: both texts are the same (an exact repeat, not a labelled pair)"));
        QCOMPARE(m[3], std::string("pairs.tsv:5: label \"maybe\" is not 0 or 1"));
        const auto j = core::parseLabelledPairs(
            "{\"a\": \"x\", \"b\": \"y\", \"label\": 1}\nnot json\n{\"a\": \"x\"}\n", "p.jsonl", true);
        QCOMPARE(j.warnings.messages()[0], std::string("p.jsonl:2: not a JSON object"));
        QVERIFY(QString::fromStdString(j.warnings.messages()[1]).startsWith("p.jsonl:3: expected two texts"));
    }

    void refusals()
    {
        auto e = test::expectError(
            [] { (void)core::parseLabelledPairs("question1\tlabel\nx\t1\n", "h.tsv", false); });
        QCOMPARE(e.code(), core::ErrorCode::Format);
        QCOMPARE(std::string(e.what()),
                 std::string("h.tsv:1: the header names no second text (question2, sentence2)"));
        e = test::expectError([] { (void)core::parseLabelledPairs("", "empty.tsv", false); });
        QCOMPARE(std::string(e.what()),
                 std::string("empty.tsv: no labelled pair could be read (the file is empty)"));
        e = test::expectError([] { (void)core::parseLabelledPairs("x\ty\t7\n", "bad.tsv", false); });
        QCOMPARE(std::string(e.what()), std::string("bad.tsv: no labelled pair could be read; first problem: "
                                                    "bad.tsv:1: label \"7\" is not 0 or 1"));
        e = test::expectError([] { (void)core::parseLabelledPairs("x\t\xff\t1\n", "b.tsv", false); });
        QCOMPARE(std::string(e.what()), std::string("b.tsv: byte 2 is not UTF-8"));
        e = test::expectError([] { (void)core::readLabelledPairs("/nonexistent/pairs.tsv"); });
        QCOMPARE(e.code(), core::ErrorCode::Io);
        QTemporaryDir tmp;
        const std::filesystem::path file = tmp.path().toStdString() + "/p.jsonl";
        core::writeFileAtomic(file, "{\"a\": \"x\", \"b\": \"y\", \"label\": 1}\n");
        QCOMPARE(core::readLabelledPairs(file).format, std::string("jsonl"));
    }

    void splitKeepsEachTextOnOneSide()
    {
        std::vector<LabelledPair> pairs;
        for (int i = 0; i < 200; ++i) // chains of shared texts: q<i> with q<i+1> for i in a group of 4
            pairs.push_back({"Question " + std::to_string(i),
                             "Question " + std::to_string(i % 4 == 3 ? i - 3 : i + 1), i % 2 == 0,
                             "labelled"});
        const auto s = core::splitPairsByText(pairs, 0.25, 7);
        QCOMPARE(s.train.size() + s.validation.size(), pairs.size());
        QCOMPARE(s.validation.size(), size_t(52)); // whole groups of 4 pairs until 50 are reached
        std::set<std::string> trained;
        for (const auto &p : s.train)
            trained.insert({p.a, p.b});
        for (const auto &p : s.validation) {
            QVERIFY2(!trained.count(p.a), p.a.c_str());
            QVERIFY2(!trained.count(p.b), p.b.c_str());
        }
        // case and spacing do not hide a shared text
        const std::vector<LabelledPair> cased = {{"How to COOK rice?", "x", true, ""},
                                                 {"how to cook  rice", "y", false, ""}};
        const auto c = core::splitPairsByText(cased, 0.5, 1);
        QVERIFY(c.validation.size() == 2 || c.validation.empty());
        const auto again = core::splitPairsByText(pairs, 0.25, 7);
        QCOMPARE(again.validation.front().a, s.validation.front().a); // seeded
        QCOMPARE(test::expectError([&] { (void)core::splitPairsByText(pairs, 1.0, 1); }).code(),
                 core::ErrorCode::InvalidArgument);
    }

    void curveAndThresholds()
    {
        // scores high to low: dup, dup, non, dup, non, non
        const std::vector<LabelledPair> pairs = {{"a", "b", true, ""},  {"c", "d", true, ""},
                                                 {"e", "f", false, ""}, {"g", "h", true, ""},
                                                 {"i", "j", false, ""}, {"k", "l", false, ""}};
        const std::vector<double> sims = {0.9, 0.8, 0.7, 0.6, 0.5, 0.4};
        const auto curve = core::precisionRecallCurve(pairs, sims);
        QCOMPARE(curve.size(), size_t(6));
        QCOMPARE(curve[1].threshold, 0.8);
        QCOMPARE(curve[1].precision, 1.0);
        QCOMPARE(curve[1].recall, 2.0 / 3);
        QCOMPARE(curve[3].precision, 0.75);
        QCOMPARE(curve[3].recall, 1.0);
        QCOMPARE(curve[3].served, size_t(4));
        QCOMPARE(core::averagePrecision(pairs, sims), (1.0 + 1.0 + 0.75) / 3);
        const auto at9 = core::thresholdForPrecision(pairs, sims, 0.9);
        QCOMPARE(at9.threshold, 0.8);
        QCOMPARE(at9.recall, 2.0 / 3);
        const auto none = core::thresholdForPrecision(pairs, sims, 1.1);
        QVERIFY(std::isinf(none.threshold));
        QCOMPARE(none.recall, 0.0);
        // ties: one threshold passes both
        const auto tied = core::precisionRecallCurve(pairs, {0.9, 0.9, 0.9, 0.1, 0.1, 0.1});
        QCOMPARE(tied.size(), size_t(2));
        QCOMPARE(tied[0].served, size_t(3));
        // thinning keeps the ends
        const auto thin = core::precisionRecallCurve(pairs, sims, 3);
        QCOMPARE(thin.size(), size_t(3));
        QCOMPARE(thin.front().threshold, 0.9);
        QCOMPARE(thin.back().threshold, 0.4);
    }

    void nanNeverPasses()
    {
        const double nan = std::nan("");
        const std::vector<LabelledPair> pairs = {
            {"a", "b", false, ""}, {"c", "d", true, ""}, {"e", "f", false, ""}};
        const std::vector<double> sims = {nan, 0.5, 0.2};
        const auto curve = core::precisionRecallCurve(pairs, sims);
        QCOMPARE(curve.size(), size_t(2)); // the NaN pair is never served
        QCOMPARE(curve.front().threshold, 0.5);
        QCOMPARE(curve.front().precision, 1.0);
        QCOMPARE(curve.back().served, size_t(2));
        QCOMPARE(core::averagePrecision(pairs, sims), 1.0);
        QCOMPARE(core::thresholdForPrecision(pairs, sims, 0.9).threshold, 0.5);
        const auto s = core::separation(pairs, sims); // NaN ranks lowest: below the duplicate
        QCOMPARE(s.auc, 1.0);
        QCOMPARE(s.thresholdAtPrecision90, 0.5);
        const auto allNan = core::precisionRecallCurve(pairs, {nan, nan, nan});
        QVERIFY(allNan.empty());
        QCOMPARE(core::thresholdForPrecision(pairs, {nan, nan, nan}, 0.5).recall, 0.0);
    }
};

QTEST_APPLESS_MAIN(TestLabelledPairs)
#include "tst_labelled_pairs.moc"
