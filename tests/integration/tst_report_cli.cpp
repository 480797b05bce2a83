// `kvwb report` end to end: an experiment file with a converter, a sweep and a ledger built here is
// reported in all four formats (files listed on stdout, JSON parses, HTML self-contained with charts,
// PDF); a bad --format exits 2; a missing experiment and an unwritable output directory exit 1 naming
// the path.
#include "core/ledger/replay_ledger.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/store/ledger_store.h"
#include "core/util/error.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>

using namespace kvwb;
using namespace kvwb::core;
namespace fs = std::filesystem;
using test::runKvwb;

namespace {

QString q(const fs::path &p)
{
    return QString::fromStdString(p.string());
}

ModelInfo model(char role)
{
    ModelInfo m;
    m.role = *core::parseRole(std::string(1, role)); // test helpers name roles by letter
    ModelConfig &c = m.config;
    c.architecture = "LlamaForCausalLM";
    c.modelType = "llama";
    c.numLayers = 2;
    c.numHeads = 2;
    c.numKvHeads = 1;
    c.headDim = 4;
    c.hiddenSize = 8;
    c.vocabSize = 100;
    c.ropeTheta = 10000.0;
    c.ropeScaling.type = "default";
    c.ropeScaling.factor = 1.0;
    m.weightsSha256 = std::string(64, role == 'a' ? 'a' : 'b');
    m.tokenizerSha256 = std::string(64, '1');
    m.sourcePath = std::string("/models/") + role;
    return m;
}

void makeExperiment(const fs::path &path)
{
    ExperimentOptions o;
    o.syncToDisk = false;
    Provenance p;
    p.device = "cpu";
    ExperimentWriter w = ExperimentWriter::create(path, o, p, model('a'), model('b'));
    for (int i = 0; i < 2; ++i) {
        PromptRecord pr;
        pr.text = "prompt";
        for (PromptKv *kv : {&pr.a, &pr.b}) {
            kv->ids = {1, 2, 3};
            kv->keys.assign(2, std::vector<float>(12, 0.25f * float(i + 1)));
            kv->values = kv->keys;
        }
        w.appendPrompt(pr);
    }
    w.close();
    ConverterRecord r;
    r.name = "c1";
    r.selection = "all";
    r.k = 2;
    r.lambdaMode = "fixed";
    for (int l = 0; l < 2; ++l) {
        LayerConverter lc;
        lc.targetLayer = l;
        lc.sourceLayers = {l};
        KvMap m;
        m.inputDim = m.outputDim = 4;
        m.lambda = 0.01;
        m.weight.assign(16, 0.1f);
        m.bias.assign(4, 0.0f);
        lc.keys = {m};
        lc.values = {m};
        r.layers.push_back(lc);
    }
    r.layerMetrics = {{"layer", "r2_k", "r2_v", "attn_cos"}, {{0, 0.75, 0.5, 0.9}, {1, 0.625, 0.25, 0.8}}};
    r.ckaKeys = {2, 2, {1.0, 0.5, 0.5, 1.0}};
    r.ckaValues = r.ckaKeys;
    saveConverters(path, r);
    MetricTable sweep{{"k", "lambda", "train_tokens", "r2_k", "r2_v", "attn_cos"},
                      {{1, 0.01, 64, 0.5, 0.4, 0.9}, {2, 0.01, 64, 0.6, 0.5, 0.92}}};
    saveTable(path, "s1", sweep, "");
    std::vector<LedgerRow> rows(3);
    for (int i = 0; i < 3; ++i) {
        rows[size_t(i)].requestId = i;
        rows[size_t(i)].answeredBy = i == 2 ? TierKind::Exact : TierKind::None;
        rows[size_t(i)].tierHits[TierKind::Exact] = i == 2;
        rows[size_t(i)].promptTokens = 10;
        rows[size_t(i)].tokensReused = i == 2 ? 10 : 0;
        rows[size_t(i)].tokensComputed = i == 2 ? 0 : 14;
        rows[size_t(i)].ttftMs = i == 2 ? 0.2 : 30;
    }
    saveLedger(path, "r1", rows, "");
}

} // namespace

class TestReportCli : public QObject
{
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    fs::path m_experiment;

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_experiment = fs::path(m_dir.path().toStdString()) / "exp.h5";
        makeExperiment(m_experiment);
    }

    void allFormats()
    {
        const fs::path out = fs::path(m_dir.path().toStdString()) / "report";
        const auto r = runKvwb({"report", "--experiment", q(m_experiment), "--out", q(out)});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        for (const char *f : {"report.json", "report.md", "report.html", "report.pdf", "csv/sweep_s1.csv",
                              "csv/converter_c1_layers.csv", "csv/ledger_r1.csv"}) {
            QVERIFY2(fs::exists(out / f), f);
            QVERIFY2(r.out.contains(QByteArray::fromStdString((out / f).string())), f);
        }
        const QJsonDocument doc =
            QJsonDocument::fromJson(QByteArray::fromStdString(test::readFile(out / "report.json")));
        QVERIFY(doc.isObject());
        QCOMPARE(doc.object()["models"].toObject()["b"].toObject()["weights_sha256"].toString(),
                 QString(64, 'b'));
        const std::string html = test::readFile(out / "report.html");
        QVERIFY(html.find("data:image/png;base64,") != std::string::npos);
        QVERIFY(html.find("src=\"http") == std::string::npos);
        QVERIFY(test::readFile(out / "report.pdf").rfind("%PDF", 0) == 0);
    }

    void oneFormat()
    {
        const fs::path out = fs::path(m_dir.path().toStdString()) / "md-only";
        const auto r =
            runKvwb({"report", "--experiment", q(m_experiment), "--out", q(out), "--format", "md"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(fs::exists(out / "report.md"));
        QVERIFY(!fs::exists(out / "report.html"));
        QVERIFY(!fs::exists(out / "report.json"));
    }

    void badFormatExits2()
    {
        const auto r = runKvwb({"report", "--experiment", q(m_experiment), "--out", m_dir.path() + "/x",
                                "--format", "html,docx"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("docx"), r.err.constData());
    }

    // --paper letter lays the PDF out on US Letter pages (612 x 792 points); an unknown paper is usage.
    void paperSize()
    {
        const QString out = m_dir.path() + "/letter";
        auto r = runKvwb({"report", "--experiment", q(m_experiment), "--out", out, "--format", "pdf",
                          "--paper", "letter"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QFile pdf(out + "/report.pdf");
        QVERIFY(pdf.open(QIODevice::ReadOnly));
        const QByteArray bytes = pdf.readAll();
        const auto box =
            QRegularExpression(R"(/MediaBox \[0 0 ([0-9.]+) ([0-9.]+)\])").match(QString::fromLatin1(bytes));
        QVERIFY(box.hasMatch());
        QCOMPARE(std::lround(box.captured(1).toDouble()), 612L);
        QCOMPARE(std::lround(box.captured(2).toDouble()), 792L);
        r = runKvwb(
            {"report", "--experiment", q(m_experiment), "--out", m_dir.path() + "/b5", "--paper", "b5"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.err.contains("--paper: 'b5' is not a4 or letter"));
    }

    void missingExperimentExits1()
    {
        const auto r =
            runKvwb({"report", "--experiment", m_dir.path() + "/absent.h5", "--out", m_dir.path() + "/y"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("absent.h5"), r.err.constData());
    }

    void unwritableOutExits1()
    {
        const fs::path blocker = fs::path(m_dir.path().toStdString()) / "plain-file";
        std::ofstream(blocker) << "x";
        const auto r = runKvwb(
            {"report", "--experiment", q(m_experiment), "--out", q(blocker / "out"), "--format", "csv"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("plain-file"), r.err.constData());
    }
};

QTEST_GUILESS_MAIN(TestReportCli)
#include "tst_report_cli.moc"
