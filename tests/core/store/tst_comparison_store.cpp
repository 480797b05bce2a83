// Comparison store (/comparisons/<name> in the experiment file): exact round trips (UTF-8 pieces,
// newlines, a piece holding half a character), replacing, sorted listing, unknown and hidden names,
// bad samples refused naming the field before the file is touched, a hand-edited file refused on load
// naming sample and field, and /converters, /sweeps and /ledgers left as they were by a save.
#include "core/ledger/replay_ledger.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/store/ledger_store.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"
#include "tests/support/tiny_experiment.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

#include <hdf5.h>

#include <cstring>

#include <cmath>
#include <functional>
#include <limits>

using namespace kvwb::core;
namespace fs = std::filesystem;
using kvwb::test::expectError;

namespace {

bool contains(const std::string &haystack, const std::string &needle)
{
    return haystack.find(needle) != std::string::npos;
}

ComparisonPath makePath(const std::vector<std::string> &pieces, int base)
{
    ComparisonPath p;
    for (size_t i = 0; i < pieces.size(); ++i) {
        p.ids.push_back(base + int(i));
        p.pieces.push_back(pieces[i]);
        p.logprobs.push_back(-0.1f * float(i + 1) / 3.0f); // not exactly representable in binary
        p.text += pieces[i];
    }
    p.promptTokens = 7;
    p.ttftMs = 12.345678901234;
    p.decodeTokPerS = 33.3;
    return p;
}

ComparisonSample makeSample(int seed)
{
    ComparisonSample s;
    s.prompt = "Explain caching.\nIn two lines, \"please\", caf\u00e9 " + std::to_string(seed);
    s.converter = "conv-" + std::to_string(seed);
    s.a = makePath({"Caching", " keeps", "\n", " \u65e5\u672c"}, 100);
    s.scratch = makePath({"A", " cache", " stores", "\n\n", " \xf0\x9f\x98\x80"}, 200);
    // " \xf0\x9f" is half of an emoji: byte-level BPE pieces can split a character.
    s.transfer = makePath({"A", " cache", " saves", " \xf0\x9f", "\x98\x80"}, 200);
    s.transfer.reusedTokens = 6;
    s.transfer.kl = {0.0, 1e-7, 2.5, 0.3333333333333333, 7.0};
    s.firstDivergence = 2;
    s.meanKl = 0.1 + seed;
    s.top1 = 0.8;
    s.klNoPrefix = 3.25;
    s.rougeL = 2.0 / 3.0;
    s.sourcePrefillMs = 4.5;
    s.convertMs = 0.75;
    s.gateSignal = "tail_kl";
    s.gateValue = 0.05;
    s.gateThreshold = 0.1;
    s.gatePassed = seed % 2 == 0;
    s.createdUtc = "2024-05-01T12:00:00Z";
    return s;
}

QString comparePaths(const char *name, const ComparisonPath &g, const ComparisonPath &w)
{
    if (g.ids != w.ids)
        return QString("%1.ids differ").arg(name);
    if (g.pieces != w.pieces)
        return QString("%1.pieces differ").arg(name);
    if (g.logprobs != w.logprobs)
        return QString("%1.logprobs differ").arg(name);
    if (g.kl != w.kl)
        return QString("%1.kl differ").arg(name);
    if (g.text != w.text)
        return QString("%1.text differs").arg(name);
    if (g.promptTokens != w.promptTokens || g.reusedTokens != w.reusedTokens || g.ttftMs != w.ttftMs ||
        g.decodeTokPerS != w.decodeTokPerS)
        return QString("%1 scalars differ").arg(name);
    return {};
}

QString compareSamples(const std::vector<ComparisonSample> &got, const std::vector<ComparisonSample> &want)
{
    if (got.size() != want.size())
        return QString("%1 samples, expected %2").arg(got.size()).arg(want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        const ComparisonSample &g = got[i], &w = want[i];
        for (const auto &[name, gp, wp] :
             {std::tuple{"a", &g.a, &w.a}, std::tuple{"scratch", &g.scratch, &w.scratch},
              std::tuple{"transfer", &g.transfer, &w.transfer}}) {
            const QString e = comparePaths(name, *gp, *wp);
            if (!e.isEmpty())
                return QString("sample %1: %2").arg(i).arg(e);
        }
        if (g.prompt != w.prompt || g.converter != w.converter || g.firstDivergence != w.firstDivergence ||
            g.meanKl != w.meanKl || g.top1 != w.top1 || g.klNoPrefix != w.klNoPrefix ||
            g.rougeL != w.rougeL || g.sourcePrefillMs != w.sourcePrefillMs || g.convertMs != w.convertMs ||
            g.gateSignal != w.gateSignal || g.gateValue != w.gateValue ||
            g.gateThreshold != w.gateThreshold || g.gatePassed != w.gatePassed ||
            g.createdUtc != w.createdUtc || g.expectedAnswer != w.expectedAnswer)
            return QString("sample %1: scalar fields differ").arg(i);
    }
    return {};
}

// Replaces /comparisons/<name>/samples (bytes + offsets) with these JSON texts, as a hand edit would.
void rewriteSamples(const fs::path &path, const std::string &name, const std::vector<std::string> &texts)
{
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    QVERIFY(f >= 0);
    const std::string ds = "/comparisons/" + name + "/samples";
    std::string bytes;
    std::vector<int64_t> offsets{0};
    for (const auto &t : texts) {
        bytes += t;
        offsets.push_back(int64_t(bytes.size()));
    }
    const auto write = [&](const std::string &at, hid_t type, hsize_t n, const void *data) {
        QVERIFY(H5Ldelete(f, at.c_str(), H5P_DEFAULT) >= 0);
        const hid_t space = H5Screate_simple(1, &n, nullptr);
        const hid_t d = H5Dcreate2(f, at.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        QVERIFY(d >= 0);
        if (n > 0)
            QVERIFY(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
        H5Dclose(d);
        H5Sclose(space);
    };
    write(ds, H5T_NATIVE_UINT8, bytes.size(), bytes.data());
    write(ds + "_offsets", H5T_NATIVE_INT64, offsets.size(), offsets.data());
    H5Fclose(f);
}

// The JSON texts of a saved list, read through raw HDF5.
std::vector<std::string> rawSamples(const fs::path &path, const std::string &name)
{
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const auto read = [&](const std::string &at, hid_t type, size_t size) {
        const hid_t d = H5Dopen2(f, at.c_str(), H5P_DEFAULT);
        const hid_t space = H5Dget_space(d);
        hsize_t n = 0;
        H5Sget_simple_extent_dims(space, &n, nullptr);
        std::vector<char> out(size_t(n) * size);
        if (n > 0)
            H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
        H5Sclose(space);
        H5Dclose(d);
        return out;
    };
    const std::string ds = "/comparisons/" + name + "/samples";
    const std::vector<char> bytes = read(ds, H5T_NATIVE_UINT8, 1);
    const std::vector<char> raw = read(ds + "_offsets", H5T_NATIVE_INT64, 8);
    std::vector<int64_t> offsets(raw.size() / 8);
    std::memcpy(offsets.data(), raw.data(), raw.size());
    H5Fclose(f);
    std::vector<std::string> out;
    for (size_t i = 1; i < offsets.size(); ++i)
        out.emplace_back(bytes.data() + offsets[i - 1], size_t(offsets[i] - offsets[i - 1]));
    return out;
}

} // namespace

class TestComparisonStore : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void roundTrip();
    void layout();
    void replaceAndList();
    void unknownAndHiddenNames();
    void badSampleRefused_data();
    void badSampleRefused();
    void handEditedFileRefused_data();
    void handEditedFileRefused();
    void otherGroupsUntouched();
    void sampleAsJson();
};

// The JSON form reports export: every field, and split characters made valid text.
void TestComparisonStore::sampleAsJson()
{
    const auto sample = makeSample(0);
    const QByteArray text = QByteArray::fromStdString(comparisonSampleJson(sample));
    QJsonParseError err;
    const QJsonObject o = QJsonDocument::fromJson(text, &err).object();
    QVERIFY2(err.error == QJsonParseError::NoError, qPrintable(err.errorString()));
    QCOMPARE(o["converter"].toString(), QString("conv-0"));
    QCOMPARE(o["first_divergence"].toInt(), 2);
    QCOMPARE(o["mean_kl"].toDouble(), 0.1);
    QCOMPARE(o["gate"].toObject()["passed"].toBool(), true);
    const QJsonObject transfer = o["transfer"].toObject();
    QCOMPARE(transfer["kl"].toArray().size(), 5);
    QCOMPARE(transfer["pieces"].toArray().size(), 5);
    QCOMPARE(transfer["pieces"].toArray()[3].toString(), QString::fromUtf8(" \xEF\xBF\xBD\xEF\xBF\xBD"));
    QCOMPARE(transfer["pieces"].toArray()[2].toString(), QString(" saves"));
    QVERIFY(!o["scratch"].toObject().contains("kl")); // measured on the transfer path only
    QCOMPARE(o["a"].toObject()["text"].toString(), QString::fromStdString(sample.a.text));
    QVERIFY(!o.contains("expected_answer")); // only when the prompt file gave one
    QVERIFY(!answerHits(sample));
    auto answered = sample;
    answered.expectedAnswer = "6338";
    QCOMPARE(QJsonDocument::fromJson(QByteArray::fromStdString(comparisonSampleJson(answered)))
                 .object()["expected_answer"]
                 .toString(),
             QString("6338"));
    // which paths give it: scratch "A cache stores ...", transfer "A cache saves ...", A "Caching keeps ..."
    answered.expectedAnswer = "cache stores";
    const auto hits = answerHits(answered);
    QVERIFY(hits && hits->scratch && !hits->transfer && !hits->a);
    answered.expectedAnswer = "A cache";
    QVERIFY(answerHits(answered)->transfer && !answerHits(answered)->a);
}

void TestComparisonStore::roundTrip()
{
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    QVERIFY(listComparisons(path).empty());
    std::vector<ComparisonSample> samples{makeSample(0), makeSample(1)};
    samples[1].transfer.kl.clear(); // not measured
    samples[1].firstDivergence = -1;
    samples[1].a = {};                     // nothing generated
    samples[1].expectedAnswer = "Biscuit"; // a prompt file's answer; sample 0 has none
    saveComparisons(path, "run_1", samples);
    saveComparisons(path, "empty", {});
    QString e = compareSamples(loadComparisons(path, "run_1"), samples);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    QVERIFY(loadComparisons(path, "empty").empty());
    // Still an experiment file.
    QCOMPARE(ExperimentReader::open(path).promptCount(), 0);
}

void TestComparisonStore::layout()
{
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    saveComparisons(path, "c", {makeSample(0), makeSample(1), makeSample(2)});
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    QVERIFY(f >= 0);
    for (const char *attr : {"schema", "count", "created_utc", "app_version", "git_commit"})
        QVERIFY2(H5Aexists_by_name(f, "/comparisons/c", attr, H5P_DEFAULT) > 0, attr);
    QVERIFY(H5Aexists_by_name(f, "/comparisons", "description", H5P_DEFAULT) > 0);
    H5Fclose(f);
    const std::vector<std::string> texts = rawSamples(path, "c");
    QCOMPARE(texts.size(), size_t(3));
    QVERIFY2(contains(texts[0], "\"first_divergence\":2"), texts[0].c_str());
    QVERIFY2(contains(texts[0], "caf\u00e9"), texts[0].c_str());    // UTF-8 kept as such
    QVERIFY2(contains(texts[0], "[32,240,159]"), texts[0].c_str()); // the half character as bytes
}

void TestComparisonStore::replaceAndList()
{
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    saveComparisons(path, "zeta", {makeSample(0)});
    saveComparisons(path, "alpha", {makeSample(1), makeSample(2)});
    saveComparisons(path, "m-2.b", {});
    QCOMPARE(listComparisons(path), (std::vector<std::string>{"alpha", "m-2.b", "zeta"}));
    const std::vector<ComparisonSample> replaced{makeSample(5)};
    saveComparisons(path, "alpha", replaced);
    QCOMPARE(listComparisons(path), (std::vector<std::string>{"alpha", "m-2.b", "zeta"}));
    QString e = compareSamples(loadComparisons(path, "alpha"), replaced);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    e = compareSamples(loadComparisons(path, "zeta"), {makeSample(0)});
    QVERIFY2(e.isEmpty(), qPrintable(e));
}

void TestComparisonStore::unknownAndHiddenNames()
{
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    saveComparisons(path, "one", {makeSample(0)});
    Error err = expectError([&] { loadComparisons(path, "nope"); });
    QCOMPARE(err.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(err.what(), "'nope'") && contains(err.what(), path.string()) &&
                 contains(err.what(), "one"),
             err.what());
    for (const std::string bad : {".hidden", ".one.partial", "a/b", "", "sp ace"}) {
        err = expectError([&] { saveComparisons(path, bad, {}); });
        QCOMPARE(err.code(), ErrorCode::InvalidArgument);
        QVERIFY2(contains(err.what(), "'" + bad + "'"), err.what());
        err = expectError([&] { loadComparisons(path, bad); });
        QCOMPARE(err.code(), ErrorCode::InvalidArgument);
    }

    // A leftover of an interrupted save is never listed and is removed by the next save.
    {
        const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        QVERIFY(f >= 0);
        const hid_t g = H5Gcreate2(f, "/comparisons/.one.partial", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        QVERIFY(g >= 0);
        H5Gclose(g);
        H5Fclose(f);
    }
    QCOMPARE(listComparisons(path), (std::vector<std::string>{"one"}));
    saveComparisons(path, "two", {});
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    QCOMPARE(H5Lexists(f, "/comparisons/.one.partial", H5P_DEFAULT), htri_t(0));
    H5Fclose(f);
}

void TestComparisonStore::badSampleRefused_data()
{
    QTest::addColumn<QString>("edit");
    QTest::addColumn<QString>("mention");
    QTest::newRow("pieces") << "pieces"
                            << "sample 1 scratch.pieces has 4 entries, expected one per id (5)";
    QTest::newRow("logprobs") << "logprobs"
                              << "sample 1 a.logprobs has 5 entries, expected one per id (4)";
    QTest::newRow("kl length")
        << "kl"
        << "sample 1 transfer.kl has 4 entries, expected none or one per scratch id (5)";
    QTest::newRow("divergence") << "divergence"
                                << "sample 1 first_divergence is 6, expected -1 (identical) to 5";
    QTest::newRow("divergence low") << "divergence low"
                                    << "sample 1 first_divergence is -2";
    QTest::newRow("nan kl") << "nan kl"
                            << "sample 1 transfer.kl[3] is nan";
    QTest::newRow("inf logprob") << "inf logprob"
                                 << "sample 1 scratch.logprobs[0] is -inf";
    QTest::newRow("nan mean") << "nan mean"
                              << "sample 1 mean_kl is nan";
    QTest::newRow("inf ttft") << "inf ttft"
                              << "sample 1 transfer.ttft_ms is inf";
    QTest::newRow("negative tokens") << "negative tokens"
                                     << "sample 1 a.prompt_tokens is -1";
}

void TestComparisonStore::badSampleRefused()
{
    QFETCH(QString, edit);
    QFETCH(QString, mention);
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    const std::vector<ComparisonSample> before{makeSample(9)};
    saveComparisons(path, "keep", before);
    const std::string bytesBefore = kvwb::test::readFile(path);

    std::vector<ComparisonSample> samples{makeSample(0), makeSample(1)};
    ComparisonSample &s = samples[1];
    const std::string e = edit.toStdString();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    if (e == "pieces")
        s.scratch.pieces.pop_back();
    else if (e == "logprobs")
        s.a.logprobs.push_back(-1.0f);
    else if (e == "kl")
        s.transfer.kl.pop_back();
    else if (e == "divergence")
        s.firstDivergence = 6;
    else if (e == "divergence low")
        s.firstDivergence = -2;
    else if (e == "nan kl")
        s.transfer.kl[3] = nan;
    else if (e == "inf logprob")
        s.scratch.logprobs[0] = -std::numeric_limits<float>::infinity();
    else if (e == "nan mean")
        s.meanKl = nan;
    else if (e == "inf ttft")
        s.transfer.ttftMs = inf;
    else if (e == "negative tokens")
        s.a.promptTokens = -1;
    else
        QFAIL("unknown edit");
    const Error err = expectError([&] { saveComparisons(path, "bad", samples); });
    QCOMPARE(err.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(err.what(), mention.toStdString()) && contains(err.what(), path.string()) &&
                 contains(err.what(), "comparisons bad"),
             err.what());
    // Refused before the file was opened for writing.
    QCOMPARE(kvwb::test::readFile(path), bytesBefore);
    QCOMPARE(listComparisons(path), (std::vector<std::string>{"keep"}));
}

void TestComparisonStore::handEditedFileRefused_data()
{
    QTest::addColumn<QString>("from");
    QTest::addColumn<QString>("to");
    QTest::addColumn<QString>("mention");
    QTest::newRow("pieces length") << "\"pieces\":[\"A\","
                                   << "\"pieces\":["
                                   << "sample 0 scratch.pieces has 4 entries";
    QTest::newRow("missing field") << "\"top1\":"
                                   << "\"topone\":"
                                   << "sample 0 top1 is missing";
    QTest::newRow("wrong type") << "\"first_divergence\":2"
                                << "\"first_divergence\":\"2\""
                                << "sample 0 first_divergence is not a 32-bit integer";
    QTest::newRow("divergence range") << "\"first_divergence\":2"
                                      << "\"first_divergence\":99"
                                      << "sample 0 first_divergence is 99";
    QTest::newRow("kl element") << "\"kl\":[0.0,"
                                << "\"kl\":[\"x\","
                                << "sample 0 transfer.kl[0] is not a number";
    QTest::newRow("gate") << "\"passed\":true"
                          << "\"passed\":1"
                          << "sample 0 gate.passed is not true or false";
    QTest::newRow("expected answer type") << "\"created_utc\":"
                                          << "\"expected_answer\":5,\"created_utc\":"
                                          << "sample 0 expected_answer is not";
    QTest::newRow("not json") << "{"
                              << "{{"
                              << "samples entry 0 is not JSON";
}

void TestComparisonStore::handEditedFileRefused()
{
    QFETCH(QString, from);
    QFETCH(QString, to);
    QFETCH(QString, mention);
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    saveComparisons(path, "edited", {makeSample(0)});
    std::vector<std::string> texts = rawSamples(path, "edited");
    QCOMPARE(texts.size(), size_t(1));
    const std::string f = from.toStdString();
    // "pieces" occurs once per path; the scratch path's pieces start with "A".
    const size_t at = texts[0].find(f);
    QVERIFY2(at != std::string::npos, texts[0].c_str());
    texts[0].replace(at, f.size(), to.toStdString());
    rewriteSamples(path, "edited", texts);
    const Error err = expectError([&] { loadComparisons(path, "edited"); });
    QCOMPARE(err.code(), ErrorCode::Format);
    QVERIFY2(contains(err.what(), mention.toStdString()) && contains(err.what(), path.string()), err.what());
}

void TestComparisonStore::otherGroupsUntouched()
{
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    // A full-mode converter for the 1-layer pair: one [4, 4] map each for keys and values.
    ConverterRecord r;
    r.name = "conv";
    r.selection = "all";
    r.lambdaMode = "fixed";
    LayerConverter l;
    l.sourceLayers = {0};
    KvMap m;
    m.inputDim = m.outputDim = 4;
    m.lambda = 0.01;
    for (int i = 0; i < 16; ++i)
        m.weight.push_back(float(i) / 7.0f);
    m.bias = {0.5f, -0.25f, 1.0f / 3.0f, 2.0f};
    l.keys = l.values = {m};
    r.layers = {l};
    saveConverters(path, r);
    LedgerRow row;
    row.requestId = 7;
    row.tenant = "t";
    saveLedger(path, "ledger", {row}, R"({"w": 1})");
    MetricTable t;
    t.columns = {"x", "y"};
    t.rows = {{1.0, 2.0}};
    saveTable(path, "sweep", t, "");

    const auto snapshot = [&] {
        const ConverterRecord c = loadConverters(path, "conv");
        std::string settings;
        const std::vector<LedgerRow> rows = loadLedger(path, "ledger", &settings);
        return std::tuple{listConverters(path),
                          c.layers.at(0).keys.at(0).weight,
                          c.createdUtc,
                          listLedgers(path),
                          rows.size(),
                          rows.at(0).tenant,
                          settings,
                          listTables(path),
                          loadTable(path, "sweep").rows};
    };
    const auto before = snapshot();
    saveComparisons(path, "cmp", {makeSample(0)});
    saveComparisons(path, "cmp", {makeSample(1)});
    QVERIFY(snapshot() == before);
    QCOMPARE(listComparisons(path), (std::vector<std::string>{"cmp"}));
}

QTEST_APPLESS_MAIN(TestComparisonStore)
#include "tst_comparison_store.moc"
