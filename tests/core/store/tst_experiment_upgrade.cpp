// kvwb upgrade: a kvwb/1 file (made here from a kvwb/2 one by turning every string back into the
// variable-length storage kvwb/1 used and dropping the checksums) is refused by every reader with
// a message naming the command, and reads back after the upgrade exactly as before.
#include "core/ledger/replay_ledger.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/store/experiment_upgrade.h"
#include "core/store/ledger_store.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/legacy_experiment.h"
#include "tests/support/tiny_experiment.h"

#include <QTemporaryDir>
#include <QTest>

#include <hdf5.h>

#include <cstring>
#include <functional>
#include <random>

using namespace kvwb::core;
namespace fs = std::filesystem;
using kvwb::test::expectError;

namespace {

PromptRecord prompt(int index, const ModelInfo &a, const ModelInfo &b)
{
    std::mt19937 rng(uint32_t(index + 1));
    std::normal_distribution<float> normal;
    PromptRecord r;
    r.text = "prompt " + std::to_string(index) + " \xc3\xa9t\xc3\xa9";
    r.label = index % 2 ? "intent" : "";
    for (const ModelInfo *m : {&a, &b}) {
        PromptKv &kv = m == &a ? r.a : r.b;
        const int tokens = 3 + index;
        for (int t = 0; t < tokens; ++t)
            kv.ids.push_back(t + index);
        const size_t n = size_t(tokens) * size_t(m->config.numKvHeads) * size_t(m->config.headDim);
        for (int l = 0; l < m->config.numLayers; ++l) {
            kv.keys.emplace_back(n);
            kv.values.emplace_back(n);
            for (size_t i = 0; i < n; ++i) {
                kv.keys.back()[i] = normal(rng);
                kv.values.back()[i] = normal(rng);
            }
        }
    }
    return r;
}

std::vector<LedgerRow> ledger()
{
    std::vector<LedgerRow> rows(3);
    for (size_t i = 0; i < rows.size(); ++i) {
        LedgerRow &r = rows[i];
        r.requestId = int64_t(i);
        r.arrivalMs = int64_t(i) * 10;
        r.tenant = i == 1 ? "acme, inc.\nsecond line" : "t" + std::to_string(i);
        r.model = ModelRole::B;
        r.intent = "intent " + std::to_string(i);
        r.tierHits = {{TierKind::Exact, false}};
        r.promptTokens = 10;
        r.tokensComputed = 15;
        r.generatedTokens = 5;
        r.ttftMs = 1.5 * double(i);
        r.totalMs = 3.0 * double(i);
    }
    return rows;
}

struct Snapshot
{
    std::vector<std::string> texts;
    std::vector<std::vector<float>> kv;
    std::vector<std::string> tenants;
    std::string settings;
    MetricTable table;
};

Snapshot snapshot(const fs::path &path)
{
    Snapshot s;
    const ExperimentReader r = ExperimentReader::open(path);
    for (int p = 0; p < r.promptCount(); ++p) {
        s.texts.push_back(r.prompt(p).text + "|" + r.prompt(p).label);
        for (ModelRole m : kRoles)
            for (int layer : r.model(m).capturedLayers) {
                s.kv.push_back(r.keys(m, layer, p));
                s.kv.push_back(r.values(m, layer, p));
            }
    }
    for (const LedgerRow &row : loadLedger(path, "run", &s.settings))
        s.tenants.push_back(row.tenant + "/" + row.intent);
    s.table = loadTable(path, "sweep");
    return s;
}

} // namespace

class TestExperimentUpgrade : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void upgradesKvwb1();
    void kvwb2Untouched();
    void notAnExperiment();
};

void TestExperimentUpgrade::upgradesKvwb1()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    const ModelInfo a = kvwb::test::tinyModelInfo('a', 2), b = kvwb::test::tinyModelInfo('b', 2);
    {
        ExperimentOptions o;
        o.storage = FloatType::F16;
        o.syncToDisk = false;
        ExperimentWriter w = ExperimentWriter::create(path, o, Provenance{}, a, b);
        for (int p = 0; p < 3; ++p)
            w.appendPrompt(prompt(p, a, b));
        w.close();
    }
    saveLedger(path, "run", ledger(), R"({"tiers":["exact"]})");
    saveTable(path, "sweep", MetricTable{{"k", "r2"}, {{1, 0.5}, {2, 0.75}}}, "{}");
    const Snapshot before = snapshot(path);

    kvwb::test::downgradeToKvwb1(path);
    for (const auto &read : std::vector<std::function<void()>>{
             [&] { ExperimentReader::open(path); },
             [&] { loadLedger(path, "run"); },
             [&] { loadTable(path, "sweep"); },
         }) {
        const Error e = expectError(read);
        QCOMPARE(e.code(), ErrorCode::Unsupported);
        const std::string msg = e.what();
        QVERIFY2(msg.find("kvwb/1") != std::string::npos &&
                     msg.find("kvwb upgrade " + path.string()) != std::string::npos,
                 e.what());
    }

    const UpgradeResult r = upgradeExperiment(path, false);
    QVERIFY(r.upgraded);
    QCOMPARE(r.fromSchema, std::string("kvwb/1"));
    QCOMPARE(r.checksummedPrompts, 3);
    QCOMPARE(r.stringDatasets,
             17); // the ledger's text columns (three the knowledge tier's, two a fleet's, one the error
                  // bound's, one not_served, one the semantic guards', one the verifier's, the question
                  // and the answer)
    QVERIFY(r.attributes > 40);
    QVERIFY(!fs::exists(fs::path(path.string() + ".upgrade.tmp")));

    const Snapshot after = snapshot(path);
    QVERIFY(after.texts == before.texts);
    QVERIFY(after.kv == before.kv);
    QVERIFY(after.tenants == before.tenants);
    QCOMPARE(after.settings, before.settings);
    QVERIFY(after.table.columns == before.table.columns && after.table.rows == before.table.rows);
    QCOMPARE(ExperimentReader::open(path).schema(), std::string(kExperimentSchema));

    // Appending after the upgrade writes checksums the reader checks.
    {
        ExperimentWriter w = ExperimentWriter::append(path, a, b, false);
        w.appendPrompt(prompt(3, a, b));
        w.close();
    }
    QCOMPARE(ExperimentReader::open(path).values(ModelRole::B, 1, 3).size(), size_t(6 * 4));
    QVERIFY(!upgradeExperiment(path, false).upgraded);
}

void TestExperimentUpgrade::kvwb2Untouched()
{
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    const auto stamp = fs::last_write_time(path);
    const UpgradeResult r = upgradeExperiment(path, false);
    QVERIFY(!r.upgraded);
    QCOMPARE(r.fromSchema, std::string(kExperimentSchema));
    QVERIFY(fs::last_write_time(path) == stamp);
}

void TestExperimentUpgrade::notAnExperiment()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "plain.h5";
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
    const Error e = expectError([&] { upgradeExperiment(path, false); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(std::string(e.what()).find("no schema attribute") != std::string::npos, e.what());
    QCOMPARE(expectError([&] { upgradeExperiment(path.string() + ".missing", false); }).code(),
             ErrorCode::Io);
}

QTEST_GUILESS_MAIN(TestExperimentUpgrade)
#include "tst_experiment_upgrade.moc"
