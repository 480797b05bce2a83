// Reports: a small experiment file with a converter (metrics, CKA), a sweep, a replay ledger and a
// comparison list is written as JSON (values exact), CSV (headers, row counts; comparison texts with
// quotes, commas and line breaks parse back), self-contained HTML (fingerprints, embedded charts, no
// external references, the first divergence marked, tokens shaded by KL), PDF and Markdown; each chart is
// saved as a PNG under <test binary dir>/screenshots for a person to look at.
#include "core/ledger/prices.h"
#include "core/ledger/replay_ledger.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/store/ledger_store.h"
#include "core/util/error.h"
#include "tests/support/tiny_experiment.h"
#include "ui/report/report_builder.h"
#include "ui/report/report_pages.h"

#include <QApplication>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QSet>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QUrl>

#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QtTest>
#include <tuple>

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

using namespace kvwb;
using namespace kvwb::core;
namespace fs = std::filesystem;

namespace {

ModelInfo model(char role, int layers)
{
    ModelInfo m = kvwb::test::tinyModelInfo(role, layers);
    // distinct leading digits, so a report that shows a fingerprint's start shows which model
    m.weightsSha256 = std::string(role == 'a' ? "aa11" : "bb22") + std::string(60, role);
    return m;
}

constexpr int kLayersA = 4, kLayersB = 6, kKvDim = 4; // kvHeads 1 x headDim 4

PromptKv kv(int tokens, int layers, float seed)
{
    PromptKv p;
    for (int t = 0; t < tokens; ++t)
        p.ids.push_back(t + 3);
    for (int l = 0; l < layers; ++l) {
        std::vector<float> x(size_t(tokens * kKvDim));
        for (size_t i = 0; i < x.size(); ++i)
            x[i] = std::sin(seed + float(i) * 0.1f + float(l));
        p.keys.push_back(x);
        p.values.push_back(x);
    }
    return p;
}

ConverterRecord makeConverter()
{
    ConverterRecord r;
    r.name = "c1";
    r.selection = "proportional";
    r.k = 1;
    r.lambdaMode = "fixed";
    // as family auto leaves it: the candidates it fitted, the second kept
    r.settingsJson =
        R"({"seed": 7, "splits": [0.5, 0.25, 0.25], "auto": {"chosen": 1, "mlp_skipped": "ridge closes )"
        R"(99.5 % of the no-prefix KL gap on the validation prompts", "candidates": [)"
        R"({"family": "ridge", "selection": "proportional", "k": 1, "lambda_mode": "fixed", "valid_kl": )"
        R"(0.5, "valid_kl_no_prefix": 2.0, "valid_gap_closed": 0.75, "valid_top1": 0.8, "fit_seconds": 1.5},)"
        R"({"family": "ridge", "selection": "all", "k": 2, "lambda_mode": "auto", "valid_kl": 0.01, )"
        R"("valid_kl_no_prefix": 2.0, "valid_gap_closed": 0.995, "valid_top1": 0.99, "fit_seconds": 2.5}]},)"
        // then trained through B (objective kl): the KV fit's validation KL, two epochs, the first kept
        R"("objective": "kl", "kl": {"valid_kl_kv_fit": 0.01, "history": [0.008, 0.009], )"
        R"("train_history": [0.02, 0.015], "best_epoch": 1, "valid_kl_no_prefix": 2.0, )"
        R"("valid_gap_closed": 0.996, "valid_gap_closed_kv_fit": 0.995}})";
    r.trainPrompts = {0};
    r.validPrompts = {1};
    r.testPrompts = {2};
    r.trainTokens = 10;
    for (int l = 0; l < kLayersB; ++l) {
        LayerConverter lc;
        lc.targetLayer = l;
        lc.sourceLayers = {l * kLayersA / kLayersB};
        KvMap m;
        m.inputDim = kKvDim;
        m.outputDim = kKvDim;
        m.lambda = 0.01;
        m.weight.assign(size_t(kKvDim * kKvDim), 0.5f);
        m.bias.assign(size_t(kKvDim), 0.0f);
        lc.keys = {m};
        lc.values = {m};
        r.layers.push_back(lc);
    }
    r.layerMetrics.columns = {"layer", "r2_k", "r2_v", "cos_k", "cos_v", "attn_cos"};
    for (int l = 0; l < kLayersB; ++l)
        r.layerMetrics.rows.push_back({double(l), 0.9 - 0.1 * l + 1.0 / 3.0 * 0.01, 0.8 - 0.05 * l,
                                       0.95 - 0.02 * l, 0.9, 0.97 - 0.03 * l});
    r.headMetrics.columns = {"layer", "head", "r2_k", "r2_v", "attn_cos"};
    for (int l = 0; l < kLayersB; ++l)
        r.headMetrics.rows.push_back({double(l), 0.0, 0.9 - 0.1 * l, 0.8 - 0.05 * l, 0.97 - 0.03 * l});
    for (Matrix *m : {&r.ckaKeys, &r.ckaValues}) {
        m->rows = kLayersB;
        m->cols = kLayersA;
        for (int b = 0; b < kLayersB; ++b)
            for (int a = 0; a < kLayersA; ++a)
                m->data.push_back(std::exp(-std::abs(double(b) / kLayersB - double(a) / kLayersA) * 3) *
                                  (m == &r.ckaKeys ? 1.0 : 0.9));
    }
    return r;
}

MetricTable makeSweep()
{
    MetricTable t;
    t.columns = {"k",     "lambda", "train_tokens", "r2_k",  "r2_v",
                 "cos_k", "cos_v",  "rel_k",        "rel_v", "attn_cos"};
    for (double tokens : {256.0, 1024.0})
        for (double k : {1.0, 2.0, 3.0})
            for (double lambda : {1e-3, 1e-1}) {
                const double q = 0.5 + 0.1 * k - lambda + (tokens > 300 ? 0.1 : 0.0);
                t.rows.push_back(
                    {k, lambda, tokens, q, q - 0.05, q + 0.1, q + 0.05, 1 - q, 1.05 - q, q + 0.2});
            }
    return t;
}

std::vector<LedgerRow> makeLedger()
{
    std::vector<LedgerRow> rows;
    const TierKind answered[] = {TierKind::None,  TierKind::Exact, TierKind::Semantic, TierKind::Prefix,
                                 TierKind::Cross, TierKind::None,  TierKind::Exact,    TierKind::Prefix};
    for (int i = 0; i < 8; ++i) {
        LedgerRow r;
        r.requestId = i;
        r.arrivalMs = i * 100;
        r.tenant = "t0";
        r.model = core::ModelRole::B;
        r.intent = "intent" + std::to_string(i % 3);
        r.answeredBy = answered[i];
        for (TierKind t : {TierKind::Exact, TierKind::Semantic, TierKind::Prefix, TierKind::Cross})
            r.tierHits[t] = t == answered[i];
        r.promptTokens = 40;
        const bool response = answered[i] == TierKind::Exact || answered[i] == TierKind::Semantic;
        r.tokensReused = response ? 40 : (answered[i] == TierKind::None ? 0 : 30);
        r.tokensComputed = response ? 0 : 40 - r.tokensReused + 16;
        r.generatedTokens = response ? 0 : 16;
        r.ttftMs = response ? 0.5 + i * 0.1 : (answered[i] == TierKind::None ? 40.0 + i : 12.0 + i);
        r.totalMs = r.ttftMs + 100;
        rows.push_back(r);
    }
    return rows;
}

ComparisonPath comparisonPath(const std::vector<std::string> &pieces, int base)
{
    ComparisonPath p;
    for (size_t i = 0; i < pieces.size(); ++i) {
        p.ids.push_back(base + int(i));
        p.pieces.push_back(pieces[i]);
        p.logprobs.push_back(-0.25f * float(i + 1));
        p.text += pieces[i];
    }
    p.promptTokens = 9;
    return p;
}

// Texts with commas, quotes, line breaks and non-ASCII characters; scratch and transfer part at
// token 2 (" stores" / " saves").
ComparisonSample makeComparison()
{
    ComparisonSample s;
    s.prompt = "What does a KV cache store?\nAnswer \"briefly\", please.";
    s.converter = "c1";
    s.a = comparisonPath({"Keys", " and", " values,", " per\nlayer"}, 10);
    s.scratch = comparisonPath({"A", " cache", " stores", " \"past\"", " K/V"}, 20);
    s.transfer = comparisonPath({"A", " cache", " saves", " caf\u00e9", " work"}, 20);
    s.transfer.reusedTokens = 8;
    s.transfer.kl = {0.0, 0.01, 2.5, 1.0, 0.125};
    s.a.ttftMs = 11.5;
    s.scratch.ttftMs = 42.25;
    s.transfer.ttftMs = 17.75;
    s.firstDivergence = 2;
    s.meanKl = 0.727;
    s.top1 = 0.6;
    s.klNoPrefix = 3.125;
    s.rougeL = 0.4375;
    s.sourcePrefillMs = 5.5;
    s.convertMs = 1.25;
    s.gateSignal = "tail_kl";
    s.gateValue = 0.0625;
    s.gateThreshold = 0.1;
    s.gatePassed = true;
    s.createdUtc = "2024-05-01T12:00:00Z";
    return s;
}

// RFC 4180 records: quoted fields may hold commas, doubled quotes and line breaks.
std::vector<std::vector<std::string>> parseCsv(const std::string &text)
{
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> row;
    std::string field;
    bool quoted = false, any = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (quoted) {
            if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
                field += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                field += c;
            }
        } else if (c == '"') {
            quoted = true;
            any = true;
        } else if (c == ',') {
            row.push_back(field);
            field.clear();
            any = true;
        } else if (c == '\n') {
            row.push_back(field);
            rows.push_back(row);
            row.clear();
            field.clear();
            any = false;
        } else {
            field += c;
            any = true;
        }
    }
    if (any) {
        row.push_back(field);
        rows.push_back(row);
    }
    return rows;
}

QByteArray readAll(const fs::path &p)
{
    QFile f(QString::fromStdString(p.string()));
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return f.readAll();
}

int countOf(const QByteArray &hay, const QByteArray &needle)
{
    int n = 0;
    for (qsizetype i = hay.indexOf(needle); i >= 0; i = hay.indexOf(needle, i + 1))
        ++n;
    return n;
}

} // namespace

class TestReportBuilder : public QObject
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
        ExperimentOptions o;
        o.syncToDisk = false;
        Provenance p;
        p.device = "cpu";
        p.qtVersion = "6.4.2";
        p.torchVersion = "1.13.0";
        p.configSha256 = std::string(64, 'c');
        ExperimentWriter w =
            ExperimentWriter::create(m_experiment, o, p, model('a', kLayersA), model('b', kLayersB));
        for (int i = 0; i < 3; ++i) {
            PromptRecord pr;
            pr.text = "prompt " + std::to_string(i);
            pr.a = kv(5 + i, kLayersA, float(i));
            pr.b = kv(6 + i, kLayersB, float(i) + 0.5f);
            w.appendPrompt(pr);
        }
        w.close();
        saveConverters(m_experiment, makeConverter());
        saveTable(m_experiment, "sweep1", makeSweep(), R"({"ks": [1, 2, 3], "lambdas": [0.001, 0.1]})");
        saveLedger(m_experiment, "replay1", makeLedger(),
                   R"({"tiers": ["exact", "semantic", "prefix", "cross"]})");
        ComparisonSample identical = makeComparison();
        identical.transfer = identical.scratch;
        identical.transfer.kl.assign(identical.scratch.ids.size(), 0.0);
        identical.firstDivergence = -1;
        identical.expectedAnswer = "past K/V"; // a prompt file's answer; the others have none
        // Byte-level pieces that split one character; the divergence falls on its second half.
        ComparisonSample split = makeComparison();
        split.scratch = comparisonPath({"Hi", " \xf0\x9f", "\x98\x80"}, 30);
        split.transfer = comparisonPath({"Hi", " \xf0\x9f", "\x98\x81"}, 30);
        split.transfer.kl = {0.0, 0.0, 0.5};
        split.firstDivergence = 2;
        saveComparisons(m_experiment, "cmp1", {makeComparison(), identical, split});
    }

    void collectsEverything()
    {
        const ui::ReportData d = ui::collectReport(m_experiment);
        QCOMPARE(d.prompts, 3);
        QCOMPARE(d.tokensA, int64_t(5 + 6 + 7));
        QCOMPARE(d.modelB.config.numLayers, kLayersB);
        QCOMPARE(d.converters.size(), size_t(1));
        QVERIFY(d.converters[0].layers[0].keys[0].weight.empty()); // weights dropped
        QCOMPARE(d.converters[0].layers[0].keys[0].inputDim, kKvDim);
        QCOMPARE(d.sweeps.size(), size_t(1));
        QCOMPARE(d.ledgers.size(), size_t(1));
        QCOMPARE(d.ledgers[0].summary.requests, int64_t(8));
        QCOMPARE(d.configSha256.size(), size_t(64));
        QVERIFY(d.environment.threads > 0);
        QVERIFY(!d.environment.cpuModel.empty());
        // Same file, same settings: same hash (the environment is not part of it).
        QCOMPARE(ui::collectReport(m_experiment).configSha256, d.configSha256);
    }

    void jsonAndCsv()
    {
        ui::ReportData d = ui::collectReport(m_experiment);
        const fs::path out = fs::path(m_dir.path().toStdString()) / "out-csv";
        const auto files = ui::writeCsvJson(d, out);
        QVERIFY(files.size() >= 8);
        QJsonParseError err;
        const QJsonDocument doc = QJsonDocument::fromJson(readAll(out / "report.json"), &err);
        QVERIFY2(err.error == QJsonParseError::NoError, qPrintable(err.errorString()));
        const QJsonObject root = doc.object();
        QCOMPARE(root["configuration"].toObject()["sha256"].toString().toStdString(), d.configSha256);
        const ConverterRecord want = makeConverter();
        const QJsonObject conv = root["converters"].toArray()[0].toObject();
        const QJsonArray rows = conv["layer_metrics"].toObject()["rows"].toArray();
        QCOMPARE(rows.size(), qsizetype(kLayersB));
        for (int l = 0; l < kLayersB; ++l)
            for (int c = 0; c < int(want.layerMetrics.columns.size()); ++c)
                QCOMPARE(rows[l].toArray()[c].toDouble(),
                         want.layerMetrics.rows[size_t(l)][size_t(c)]); // exact
        QCOMPARE(conv["cka_keys"].toObject()["data"].toArray()[2].toArray()[1].toDouble(),
                 want.ckaKeys.data[2 * kLayersA + 1]);
        QCOMPARE(root["models"].toObject()["a"].toObject()["weights_sha256"].toString().toStdString(),
                 model('a', kLayersA).weightsSha256);
        const QJsonObject ledger = root["ledgers"].toArray()[0].toObject();
        QCOMPARE(ledger["rows"].toArray().size(), qsizetype(8));
        QCOMPARE(ledger["summary"].toObject()["requests"].toInt(), 8);

        struct Expect
        {
            const char *file;
            const char *header;
            int rows;
        };
        const Expect expect[] = {
            {"converter_c1_layers.csv", "layer,r2_k,r2_v,cos_k,cos_v,attn_cos", kLayersB},
            {"converter_c1_heads.csv", "layer,head,r2_k,r2_v,attn_cos", kLayersB},
            {"converter_c1_cka_keys.csv", "b_layer,a_layer_0,a_layer_1,a_layer_2,a_layer_3", kLayersB},
            {"converter_c1_cka_values.csv", "b_layer,a_layer_0,a_layer_1,a_layer_2,a_layer_3", kLayersB},
            {"sweep_sweep1.csv", "k,lambda,train_tokens,r2_k,r2_v,cos_k,cos_v,rel_k,rel_v,attn_cos", 12},
            {"ledger_replay1.csv", nullptr, 8},
            {"ledger_replay1_tiers.csv",
             "tier,requests,hits,false_hits,tokens_reused,tokens_computed,ttft_ms_p50,"
             "ttft_ms_p95,ttft_ms_p99",
             5},
            {"models.csv", "field,a,b", -1},
            {"environment.csv", "field,experiment_file,this_report", -1},
        };
        for (const auto &e : expect) {
            const QByteArray text = readAll(out / "csv" / e.file);
            QVERIFY2(!text.isEmpty(), e.file);
            const QList<QByteArray> lines = text.trimmed().split('\n');
            if (e.header)
                QCOMPARE(lines.first(), QByteArray(e.header));
            if (e.rows >= 0)
                QVERIFY2(lines.size() == e.rows + 1, e.file);
        }
        // CSV numbers are exact too: 0.9 - 0.1 * 1 + 0.01 / 3 is not a short decimal
        const QList<QByteArray> layerLines = readAll(out / "csv" / "converter_c1_layers.csv").split('\n');
        QCOMPARE(layerLines[2].split(',')[1].toDouble(), want.layerMetrics.rows[1][1]);
        for (const auto &entry : fs::directory_iterator(out / "csv"))
            QVERIFY2(entry.path().extension() != ".tmp", "temporary file left behind");
    }

    void htmlPdfMarkdown()
    {
        ui::ReportData d = ui::collectReport(m_experiment);
        const fs::path out = fs::path(m_dir.path().toStdString()) / "out-docs";
        ui::writeHtml(d, out);
        const QByteArray html = readAll(out / "report.html");
        QVERIFY(html.startsWith("<!DOCTYPE html>"));
        QVERIFY(html.contains(QByteArray::fromStdString(model('a', kLayersA).weightsSha256)));
        QVERIFY(html.contains(QByteArray::fromStdString(model('b', kLayersB).weightsSha256)));
        QVERIFY(html.contains(QByteArray::fromStdString(d.configSha256)));
        // layers, 2 CKA, 2 per-head, 2 sweep (vs k, vs tokens), 3 replay
        QVERIFY2(countOf(html, "data:image/png;base64,") >= 10,
                 qPrintable(QString::number(countOf(html, "data:image/png;base64,"))));
        QVERIFY(!html.contains("src=\"http"));
        QVERIFY(!html.contains("href=\"http"));
        QVERIFY(!html.contains("<link"));
        QVERIFY(!html.contains("<script"));

        ui::writePdf(d, out);
        const QByteArray pdf = readAll(out / "report.pdf");
        QVERIFY(pdf.startsWith("%PDF"));
        QVERIFY2(pdf.size() > 50 * 1024, qPrintable(QString::number(pdf.size())));

        const auto mdFiles = ui::writeMarkdown(d, out);
        const QByteArray md = readAll(out / "report.md");
        QVERIFY(md.startsWith("# KV Workbench report"));
        QVERIFY(md.contains("| layer | r2_k | r2_v | cos_k | cos_v | attn_cos |"));
        QVERIFY(md.contains("## Sweep sweep1"));
        QVERIFY(md.contains("## Replay ledger replay1"));
        QVERIFY(md.contains("](charts/converter_c1_layers.png)"));
        // the family auto chose, beside what it was chosen over
        QVERIFY(md.contains("Family choice (auto)"));
        QVERIFY2(
            md.contains(
                "| ridge | proportional (k = 1), lambda fixed | 0.5000 | 2.0000 | 75.0 % | 0.800 | 1.5 s |"),
            md.constData());
        QVERIFY(md.contains(
            "| kept: ridge | all (k = 2), lambda auto | 0.0100 | 2.0000 | 99.5 % | 0.990 | 2.5 s |"));
        QVERIFY(md.contains("The MLP was not fitted: ridge closes 99.5 % of the no-prefix KL gap"));
        QVERIFY(html.contains("Family choice (auto)"));
        QVERIFY(md.contains("KL objective: the maps trained through model B"));
        QVERIFY2(md.contains("| kept: 1 | 0.0200 | 0.0080 |") &&
                     md.contains("| 0 (the KV fit) | - | 0.0100 |") && md.contains("| 2 | 0.0150 | 0.0090 |"),
                 md.constData());
        QVERIFY(md.contains("kept: 99.6 % of the gap closed (the KV fit: 99.5 %)"));
        QVERIFY(mdFiles.size() >= 11);
        for (const auto &f : mdFiles)
            QVERIFY2(fs::exists(f), f.c_str());
        QVERIFY(d.warnings.empty());
    }

    // The HTML in a real browser (headless Chromium from Debian): the whole page and each section
    // screenshotted (none blank), with no console message; the PDF
    // on A4 and on Letter rendered page by page (poppler's pdftoppm): each page of its paper's shape and
    // nothing drawn in its outermost 3 mm, where content running past the printable area would show.
    void rendersInABrowserAndOnPaper()
    {
        const QString chromium = QStandardPaths::findExecutable("chromium-headless-shell");
        const QString pdftoppm = QStandardPaths::findExecutable("pdftoppm");
        QVERIFY2(!chromium.isEmpty() && !pdftoppm.isEmpty(),
                 "chromium-headless-shell and pdftoppm are needed: ./packaging/setup.sh installs them "
                 "(chromium-headless-shell, poppler-utils)");
        ui::ReportData d = ui::collectReport(m_experiment);
        const fs::path out = fs::path(m_dir.path().toStdString()) / "out-render";
        ui::writeHtml(d, out);
        const QString html = QString::fromUtf8(readAll(out / "report.html"));
        QStringList ids;
        for (const auto &m : QRegularExpression("<h2 id=\"([^\"]+)\">").globalMatch(html))
            ids << m.captured(1);
        QVERIFY2(ids.size() >= 6, qPrintable(ids.join(", ")));
        QVERIFY(ids.contains("summary") && ids.contains("configuration"));
        const QString shots = QCoreApplication::applicationDirPath() + "/screenshots";
        QDir().mkpath(shots);
        // Chromium on a file: its log (every console message is a line with ":CONSOLE") and its
        // screenshot of the first 1280 x 900 pixels.
        const auto browse = [&](const QString &file, const QString &png) {
            QFile::remove(png);
            QProcess p;
            p.start(chromium,
                    {"--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
                     "--window-size=1280,900", "--screenshot=" + png, QUrl::fromLocalFile(file).toString()});
            if (!p.waitForFinished(120000) || p.exitCode() != 0)
                return QString("chromium failed on %1").arg(file);
            for (const QString &line : QString::fromUtf8(p.readAllStandardError()).split('\n'))
                if (line.contains(":CONSOLE"))
                    return file + ": " + line;
            const QImage img = QImage(png).convertToFormat(QImage::Format_RGB32);
            if (img.isNull() || img.width() != 1280)
                return "no screenshot " + png;
            QSet<QRgb> colours; // not blank
            for (int y = 0; y < img.height() && colours.size() < 3; y += 7)
                for (int x = 0; x < img.width(); x += 7)
                    colours.insert(img.pixel(x, y));
            return colours.size() >= 3 ? QString() : png + " is blank";
        };
        QString fault =
            browse(QString::fromStdString((out / "report.html").string()), shots + "/report_page.png");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        // Each section on its own, with the report's head (its CSS): headless Chromium paints only the
        // top of a page in a screenshot, so a link into the page would show nothing.
        const qsizetype body = html.indexOf("<body>");
        QVERIFY(body > 0);
        const QString head = html.left(body + 6);
        for (qsizetype i = 0; i < ids.size(); ++i) {
            const qsizetype from = html.indexOf("<h2 id=\"" + ids[i] + "\">");
            const qsizetype to =
                i + 1 < ids.size() ? html.indexOf("<h2 id=\"" + ids[i + 1] + "\">") : html.indexOf("</body>");
            QVERIFY(from > 0 && to > from);
            const QString file =
                QString::fromStdString((out / ("section-" + ids[i].toStdString() + ".html")).string());
            QFile f(file);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write((head + html.mid(from, to - from) + "</body></html>\n").toUtf8());
            f.close();
            fault = browse(file, shots + "/report_section_" + ids[i] + ".png");
            QVERIFY2(fault.isEmpty(), qPrintable(fault));
        }

        for (const auto &[paper, name, ratio] : {std::tuple{ui::PaperSize::A4, "a4", 210.0 / 297.0},
                                                 {ui::PaperSize::Letter, "letter", 8.5 / 11.0}}) {
            d.paper = paper;
            const fs::path dir = out / name;
            ui::writePdf(d, dir);
            QProcess p;
            p.start(pdftoppm, {"-r", "40", "-png", QString::fromStdString((dir / "report.pdf").string()),
                               QString::fromStdString((dir / "page").string())});
            QVERIFY(p.waitForFinished(120000));
            QCOMPARE(p.exitCode(), 0);
            int pages = 0;
            const int band = int(std::lround(3.0 / 25.4 * 40)); // 3 mm at 40 dpi
            for (const auto &f : fs::directory_iterator(dir)) {
                if (f.path().extension() != ".png")
                    continue;
                ++pages;
                QImage img(QString::fromStdString(f.path().string()));
                QVERIFY(!img.isNull());
                QVERIFY2(std::abs(double(img.width()) / img.height() - ratio) < 0.01,
                         qPrintable(QString("%1: %2 x %3").arg(name).arg(img.width()).arg(img.height())));
                img = img.convertToFormat(QImage::Format_RGB32);
                for (int y = 0; y < img.height(); ++y)
                    for (int x = 0; x < img.width(); ++x) {
                        if (x >= band && x < img.width() - band && y >= band && y < img.height() - band)
                            continue;
                        const QRgb c = img.pixel(x, y);
                        QVERIFY2(
                            qRed(c) > 240 && qGreen(c) > 240 && qBlue(c) > 240,
                            qPrintable(QString("%1: content at the edge of %2 at %3,%4")
                                           .arg(name, QString::fromStdString(f.path().filename().string()))
                                           .arg(x)
                                           .arg(y)));
                    }
                if (pages <= 2) // the first pages for a person to look at
                    img.save(shots + QString("/report_pdf_%1_%2.png").arg(name).arg(pages));
            }
            QVERIFY2(pages >= 5, qPrintable(QString::number(pages)));
        }
    }

    // Page one is a summary (the pair, each converter's gap closed with its interval, each replay's
    // savings and false hits); settings are tables, never raw JSON; the environment and the hashes
    // come last; a replay that was stopped says PARTIAL wherever its numbers appear.
    void summaryFirstSettingsAsTables()
    {
        const fs::path copy = fs::path(m_dir.path().toStdString()) / "summary.h5";
        fs::copy_file(m_experiment, copy, fs::copy_options::overwrite_existing);
        saveLedger(copy, "stopped", makeLedger(), R"({"cancelled": true, "tiers": ["exact"]})");
        ui::ReportData d = ui::collectReport(copy);
        const fs::path out = fs::path(m_dir.path().toStdString()) / "out-summary";
        ui::writeMarkdown(d, out);
        const QByteArray md = readAll(out / "report.md");
        QVERIFY(md.indexOf("## ") == md.indexOf("## Summary"));
        const int summary = md.indexOf("## Summary"), models = md.indexOf("## Models");
        const QByteArray page1 = md.mid(summary, models - summary);
        QVERIFY2(
            page1.contains("| what | measured |") &&
                page1.contains("| model A (source) | LlamaForCausalLM, 4 layers") &&
                page1.contains("| converter c1 | ridge;") &&
                page1.contains("KL gap closed vs no prefix 0.767 [0.767, 0.767] over 3 compared prompts") &&
                page1.contains("| replay replay1 | ") && page1.contains("hit rate ") &&
                page1.contains("without caching (saving ") &&
                page1.contains("| replay stopped | PARTIAL (stopped before the workload's end): "),
            page1.constData());
        QVERIFY(md.indexOf("## Environment") > md.indexOf("## Replay ledger replay1"));
        QVERIFY(md.indexOf("## Configuration") > md.indexOf("## Environment"));
        QVERIFY(!md.contains("Settings: {"));
        QVERIFY(md.contains("| setting | value |"));
        QVERIFY(md.contains("| tiers | exact, semantic, prefix, cross |"));
        QVERIFY(md.contains("| ks | 1, 2, 3 |"));
        QVERIFY(md.contains("## Replay ledger stopped (partial)"));
        QVERIFY(md.contains("PARTIAL: this replay was stopped after"));
        QVERIFY(!md.contains("## Replay ledger replay1 (partial)"));
    }

    // A replay with guards and a verifier: the ledger's section says what each held back, the false
    // hits it prevented and the hits it lost, and report.json keeps each row's guard and verdict.
    void semanticChecksSection()
    {
        const fs::path copy = fs::path(m_dir.path().toStdString()) / "checks.h5";
        fs::copy_file(m_experiment, copy, fs::copy_options::overwrite_existing);
        auto rows = makeLedger();
        rows[0].semanticGuard = core::SemanticGuard::Negation; // a miss: the guard held a wrong candidate
        rows[0].guardedSameIntent = 0;
        rows[5].semanticGuard = core::SemanticGuard::Number; // a right one lost
        rows[5].guardedSameIntent = 1;
        rows[1].verifier = core::VerifierVerdict::Reject; // rejected a right candidate
        rows[1].verifierScore = 0.25;
        rows[1].verifierMs = 2;
        rows[1].verifiedSameIntent = 1;
        rows[2].verifier = core::VerifierVerdict::Pass; // the semantic hit, verified
        rows[2].verifierScore = 0.875;
        rows[2].verifierMs = 4;
        rows[2].verifiedSameIntent = 1;
        saveLedger(copy, "checked", rows, R"({"tiers": ["exact", "semantic", "prefix", "cross"]})");
        saveLedger(copy, "unchecked", makeLedger(), R"({"tiers": ["exact"]})");
        ui::ReportData d = ui::collectReport(copy);
        const fs::path out = fs::path(m_dir.path().toStdString()) / "out-checks";
        ui::writeMarkdown(d, out);
        ui::writeCsvJson(d, out);
        const QByteArray md = readAll(out / "report.md");
        QCOMPARE(countOf(md, "### Semantic candidates held back"), 1); // the unchecked ledger has none
        const int at = md.indexOf("## Replay ledger checked");
        QVERIFY(at >= 0 && md.indexOf("### Semantic candidates held back") > at);
        QVERIFY2(
            md.contains("| guard: negation | 1 | - | - |") && md.contains("| guard: number | 1 | - | - |") &&
                md.contains("| guards, all | 2 | 1 | 1 |") &&
                md.contains(
                    "| verifier: judged 2, passed 1, rejected 1 (0 failed; 3.00 ms a pair) | 1 | 0 | 1 |"),
            md.constData());
        const QJsonArray ledgers =
            QJsonDocument::fromJson(readAll(out / "report.json")).object()["ledgers"].toArray();
        QJsonObject checked;
        for (const auto &l : ledgers)
            if (l.toObject()["name"].toString() == "checked")
                checked = l.toObject();
        const QJsonArray jrows = checked["rows"].toArray();
        QCOMPARE(jrows[0].toObject()["semantic_guard"].toString(), QString("negation"));
        QCOMPARE(jrows[1].toObject()["verifier"].toString(), QString("reject"));
        QCOMPARE(jrows[1].toObject()["verifier_score"].toDouble(), 0.25);
        QCOMPARE(jrows[2].toObject()["verified_same_intent"].toInt(), 1);
        QCOMPARE(jrows[3].toObject()["verifier"].toString(), QString(""));
    }

    // The PDF keeps each heading, chart and table label on the page of what it introduces: none is
    // stranded at a page's foot, and without the page breaks keepWithNext put in some were (so the
    // test cannot pass on a document that never needed moving); a second pass moves nothing.
    void pdfKeepsHeadingsWithWhatFollows()
    {
        ui::ReportData d = ui::collectReport(m_experiment);
        QSizeF page;
        const auto doc = ui::layoutPdf(d, &page);
        QVERIFY(page.height() > 900 && page.height() < 1100); // A4 less margins at 96 dpi
        const QStringList stranded = ui::report::strandedBlocks(*doc);
        QVERIFY2(stranded.isEmpty(), qPrintable(stranded.join(" | ")));
        QCOMPARE(ui::report::keepWithNext(*doc), 0);
        const int pages = doc->pageCount();
        int breaks = 0;
        for (QTextBlock b = doc->begin(); b.isValid(); b = b.next()) {
            QTextBlockFormat f = b.blockFormat();
            if (!(f.pageBreakPolicy() & QTextFormat::PageBreak_AlwaysBefore))
                continue;
            f.setPageBreakPolicy(QTextFormat::PageBreak_Auto);
            QTextCursor(b).setBlockFormat(f);
            ++breaks;
        }
        QVERIFY(breaks >= 1);
        const QStringList before = ui::report::strandedBlocks(*doc);
        QVERIFY2(!before.isEmpty(), "the test report never needed a block moved");
        qInfo("%d pages (%d without the %d break(s)); stranded without them: %s", pages, doc->pageCount(),
              breaks, qPrintable(before.join(" | ")));
        QVERIFY(pages <= doc->pageCount() + breaks);
    }

    void comparisonSamples()
    {
        ui::ReportData d = ui::collectReport(m_experiment);
        QCOMPARE(d.comparisons.size(), size_t(1));
        QCOMPARE(d.comparisons[0].name, std::string("cmp1"));
        QCOMPARE(d.comparisons[0].samples.size(), size_t(3));
        QCOMPARE(d.comparisons[0].samples[0].transfer.text, makeComparison().transfer.text);
        // The converter and the gate behind the samples are part of the hashed configuration.
        QVERIFY2(
            d.configJson.find(R"("comparisons":{"cmp1":{"converters":["c1"],"gates":["tail_kl 0.1"]}})") !=
                std::string::npos,
            d.configJson.c_str());
        const ComparisonSample want = makeComparison();

        const fs::path out = fs::path(m_dir.path().toStdString()) / "out-cmp";
        ui::writeCsvJson(d, out);
        const QByteArray csvBytes = readAll(out / "csv" / "comparisons.csv");
        const auto rows = parseCsv(csvBytes.toStdString());
        QCOMPARE(rows.size(), size_t(4));
        for (const auto &r : rows)
            QCOMPARE(r.size(), rows[0].size());
        const auto col = [&](const char *name) {
            const auto it = std::find(rows[0].begin(), rows[0].end(), name);
            return size_t(it - rows[0].begin());
        };
        QCOMPARE(rows[1][col("list")], std::string("cmp1"));
        QCOMPARE(rows[1][col("prompt")], want.prompt);
        QCOMPARE(rows[1][col("a_text")], want.a.text);
        QCOMPARE(rows[1][col("scratch_text")], want.scratch.text);
        QCOMPARE(rows[1][col("transfer_text")], want.transfer.text);
        QCOMPARE(rows[1][col("first_divergence")], std::string("2"));
        QCOMPARE(rows[2][col("first_divergence")], std::string("-1"));
        QCOMPARE(std::stod(rows[1][col("mean_kl")]), want.meanKl);
        QCOMPARE(std::stod(rows[1][col("kl_no_prefix")]), want.klNoPrefix);
        QCOMPARE(std::stod(rows[1][col("ttft_ms_transfer")]), want.transfer.ttftMs);
        QCOMPARE(rows[1][col("gate_passed")], std::string("1"));
        QCOMPARE(rows[1][col("expected_answer")], std::string());
        QCOMPARE(rows[1][col("answer_transfer")], std::string()); // no answer given: empty
        QCOMPARE(rows[2][col("expected_answer")], std::string("past K/V"));
        QCOMPARE(rows[2][col("answer_scratch")], std::string("1"));
        QCOMPARE(rows[2][col("answer_transfer")], std::string("1"));
        QCOMPARE(rows[2][col("answer_a")], std::string("0"));

        QJsonParseError err;
        const QJsonDocument doc = QJsonDocument::fromJson(readAll(out / "report.json"), &err);
        QVERIFY2(err.error == QJsonParseError::NoError, qPrintable(err.errorString()));
        const QJsonObject list = doc.object()["comparisons"].toArray()[0].toObject();
        QCOMPARE(list["name"].toString(), QString("cmp1"));
        const QJsonObject sample = list["samples"].toArray()[0].toObject();
        QCOMPARE(sample["transfer"].toObject()["text"].toString(),
                 QString::fromStdString(want.transfer.text));
        QCOMPARE(sample["transfer"].toObject()["kl"].toArray()[2].toDouble(), 2.5);
        QCOMPARE(sample["mean_kl"].toDouble(), want.meanKl);
        QCOMPARE(sample["first_divergence"].toInt(), 2);
        QCOMPARE(sample["gate"].toObject()["signal"].toString(), QString("tail_kl"));

        ui::writeHtml(d, out);
        const QByteArray html = readAll(out / "report.html");
        QVERIFY(html.contains("<h2 id=\"comparison-samples\">Comparison samples</h2>"));
        QVERIFY(html.contains("What does a KV cache store?\nAnswer &quot;briefly&quot;, please."));
        QVERIFY(html.contains("Keys and values, per\nlayer"));
        // The diverging token, bold, underlined and boxed in black text (readable on the deep red of a
        // high KL, never a solid red block), in scratch and (shaded red: KL 2.5) in transfer.
        const std::string mark =
            "<b><u class=\"divergence\" style=\"text-decoration:underline;color:#000000;outline:2px solid "
            "#b00000\">";
        QVERIFY(html.contains(mark + " stores</u></b>"));
        QVERIFY(html.contains(
            mark + "<span style=\"background-color:#ff0000\" title=\"KL 2.5 nats\"> saves</span></u></b>"));
        QVERIFY(html.contains("<span style=\"background-color:#ffffff\" title=\"KL 0 nats\">A</span>"));
        QVERIFY(
            html.contains("<span style=\"background-color:#ff8080\" title=\"KL 1 nats\"> caf\u00e9</span>"));
        QCOMPARE(countOf(html, "class=\"divergence\""), 4); // the identical sample marks nothing
        // The split character is marked and shaded whole (its two pieces' largest KL).
        QVERIFY(html.contains(
            "<span style=\"background-color:#ffbfbf\" title=\"KL 0.5 nats\"> \xf0\x9f\x98\x81</span>"));
        QVERIFY(html.contains("KL to scratch 0.727 nats (no-prefix floor 3.125 nats)"));
        QVERIFY(html.contains("TTFT scratch 42.25 ms vs transfer 17.75 ms"));
        QVERIFY(html.contains("ROUGE-L 0.4375"));
        QVERIFY(html.contains("top-1 agreement 60.0%"));
        QVERIFY(html.contains("gate tail_kl = 0.0625 vs threshold 0.1: passed"));
        QVERIFY(html.contains("none (identical continuations)"));
        QVERIFY(
            html.contains("Expected answer \u201cpast K/V\u201d given by scratch yes, transfer yes, A no."));
        QCOMPARE(countOf(html, "Expected answer"), 1);

        const auto md = readAll(ui::writeMarkdown(d, out).front());
        QVERIFY(md.contains("## Comparison samples"));
        QVERIFY(md.contains("A cache\u00ab stores\u00bb \"past\" K/V"));
        QVERIFY(md.contains("A cache\u00ab saves\u00bb caf\u00e9 work"));
        QVERIFY(md.contains("Keys and values, per\nlayer"));
        QVERIFY(md.contains("What does a KV cache store?\nAnswer \"briefly\", please."));
        QVERIFY(md.contains("KL to scratch 0.727 nats"));
        QVERIFY(md.contains("Hi\u00ab \xf0\x9f\x98\x80\u00bb"));

        ui::writePdf(d, out);
        QVERIFY(readAll(out / "report.pdf").startsWith("%PDF"));
    }

    void unwritableDirectoryNamed()
    {
        ui::ReportData d = ui::collectReport(m_experiment);
        const fs::path blocker = fs::path(m_dir.path().toStdString()) / "a-file";
        std::ofstream(blocker) << "x";
        try {
            ui::writeCsvJson(d, blocker / "out");
            QFAIL("expected an error");
        } catch (const Error &e) {
            QVERIFY2(std::string(e.what()).find("a-file") != std::string::npos, e.what());
        }
    }

    void missingExperimentNamed()
    {
        try {
            ui::collectReport("/nonexistent/none.h5");
            QFAIL("expected an error");
        } catch (const Error &e) {
            QCOMPARE(e.code(), ErrorCode::Io);
            QVERIFY2(std::string(e.what()).find("none.h5") != std::string::npos, e.what());
        }
    }

    // Every chart as a PNG, for a person to look at.
    void screenshots()
    {
        ui::ReportData d = ui::collectReport(m_experiment);
        const auto charts = ui::renderCharts(d);
        QVERIFY(charts.size() >= 10);
        const QString dir = QCoreApplication::applicationDirPath() + "/screenshots";
        QVERIFY(QDir().mkpath(dir));
        for (const auto &c : charts) {
            QVERIFY(!c.image.isNull());
            QVERIFY(c.image.width() >= 400);
            QVERIFY(c.image.save(dir + "/report_" + QString::fromStdString(c.id) + ".png"));
        }
    }

    // Ledgers stored by `kvwb knowledge evaluate --save`: one Knowledge reuse section per evaluation,
    // a row per arm with its quality, the knowledge tier's time by step and the break-even reuse.
    // Every ledger billed at every built-in price preset: in the Markdown (a table under the ledger)
    // and in report.json (ledgers[].prices), the numbers comparePrices gives for the same rows.
    void ledgerUnderEachPricePreset()
    {
        ui::ReportData d = ui::collectReport(m_experiment);
        const fs::path out = fs::path(m_dir.path().toStdString()) / "out-prices";
        ui::writeMarkdown(d, out);
        ui::writeCsvJson(d, out);
        const QByteArray md = readAll(out / "report.md");
        const auto presets = core::builtinPricePresets();
        const auto want = core::comparePrices(makeLedger(), presets);
        QCOMPARE(countOf(md, "### Under each price preset"), int(d.ledgers.size()));
        for (const auto &w : want) {
            const std::string row =
                fmt::format("| {} | {} {} | {:.6f} | {:.6f} | {:.1f}% |", w.preset, w.provider, w.model,
                            w.costUsd, w.costUsdNoCache, w.savingPercent);
            QVERIFY2(md.contains(QByteArray::fromStdString(row)), row.c_str());
        }
        const QJsonObject root = QJsonDocument::fromJson(readAll(out / "report.json")).object();
        const QJsonArray ledgers = root["ledgers"].toArray();
        QVERIFY(!ledgers.isEmpty());
        const QJsonArray prices = ledgers[0].toObject()["prices"].toArray();
        QCOMPARE(prices.size(), qsizetype(presets.size()));
        QCOMPARE(prices[0].toObject()["preset"].toString().toStdString(), want[0].preset);
        QCOMPARE(prices[0].toObject()["cost_usd"].toDouble(), want[0].costUsd);
    }

    void knowledgeSection()
    {
        const std::string evaluation =
            R"("evaluation": {"time_ms": {"retrieval": 1.5, "rendering": 40.25}, "build": {"modules": 7, )"
            R"("tokens": 210, "ms": 33.0}, "break_even_reuse": {"tokens": 1.25, "ms": 2.5}})";
        saveLedger(m_experiment, "ev.no-cache", makeLedger(),
                   R"({"knowledge_evaluation": "ev", "arm": "no cache", "word_f1": 0.25, "rouge_l": 0.5, )"
                   R"("rouge_l_vs_full": 0.75, "profile_fit": 0.875, "model_s": 3.5, )" +
                       evaluation + "}");
        saveLedger(m_experiment, "ev.knowledge-tier", makeLedger(),
                   R"({"knowledge_evaluation": "ev", "arm": "knowledge tier", "word_f1": 0.125, )"
                   R"("rouge_l": 0.5, "rouge_l_vs_full": 0.5, "profile_fit": 0.625, "model_s": 1.25, )" +
                       evaluation + "}");
        ui::ReportData d = ui::collectReport(m_experiment);
        const fs::path out = fs::path(m_dir.path().toStdString()) / "out-knowledge";
        ui::writeMarkdown(d, out);
        const QByteArray md = readAll(out / "report.md");
        QCOMPARE(countOf(md, "## Knowledge reuse"), 1);
        QVERIFY(md.contains("### Evaluation ev"));
        QVERIFY2(md.contains("| no cache | 8 |"), md.constData());
        QVERIFY(md.contains("| 3.50 |"));
        QVERIFY(md.contains("| 0.250 | 0.500 | 0.750 | 0.875 |"));
        QVERIFY(md.contains("| knowledge tier | 8 |"));
        QVERIFY(md.contains("| 0.125 | 0.500 | 0.500 | 0.625 |"));
        QVERIFY(md.contains("| rendering | 40.2 |") || md.contains("| rendering | 40.3 |"));
        QVERIFY(md.contains("Graph: 7 modules built from 210 tokens in 33 ms; break-even reuse per node 1.25 "
                            "(tokens), 2.50 (time)."));
        // the section comes before the ledgers it summarises
        QVERIFY(md.indexOf("## Knowledge reuse") < md.indexOf("## Replay ledger ev.no-cache"));
    }
};

QTEST_MAIN(TestReportBuilder)
#include "tst_report_builder.moc"
