// Converter store (/converters, /sweeps in the experiment file): bit-exact round trips of full-mode
// and head-matched records and of sweep tables (0 rows included), replacing, listing, refusing bad
// records before the file is touched, leftovers of an interrupted save, appending prompts after
// converters exist, read-only files, a file left by a killed capture, and errors naming the dataset.
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"

#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <hdf5.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace kvwb::core;
namespace core = kvwb::core;
namespace fs = std::filesystem;
using kvwb::test::expectError;
using kvwb::test::readFile;

namespace {

constexpr int kPrompts = 4;

// A: 3 layers, 2 kv heads of 4; B: 2 layers, 2 kv heads of 8. Equal kv head counts allow
// head-matched maps; everything else differs so that no dimension can stand in for another.
ModelInfo model(char role)
{
    ModelInfo m;
    m.role = *parseRole(std::string(1, role));
    ModelConfig &c = m.config;
    c.architecture = "LlamaForCausalLM";
    c.modelType = "llama";
    c.numLayers = role == 'a' ? 3 : 2;
    c.numHeads = 4;
    c.numKvHeads = 2;
    c.headDim = role == 'a' ? 4 : 8;
    c.hiddenSize = c.numHeads * c.headDim;
    c.vocabSize = 1000;
    c.ropeTheta = 10000.0;
    c.ropeScaling.type = "default";
    c.ropeScaling.factor = 1.0;
    m.weightsSha256 = std::string(64, role);
    m.tokenizerSha256 = std::string(64, role == 'a' ? '1' : '2');
    m.sourcePath = std::string("/models/") + role;
    return m;
}

uint32_t mix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x7feb352d;
    h ^= h >> 15;
    h *= 0x846ca68b;
    h ^= h >> 16;
    return h;
}

// Deterministic values with all mantissa bits in use, so that any rounding shows.
float value(uint32_t seed, size_t i)
{
    return (float(mix(seed * 0x9e3779b9u ^ mix(uint32_t(i) + 0x1234567u)) & 0xffffff) / 16777216.0f - 0.5f) *
           3.0f;
}

PromptRecord makePrompt(int index)
{
    PromptRecord r;
    r.text = "prompt " + std::to_string(index);
    for (int m = 0; m < 2; ++m) {
        const ModelConfig c = model(m == 0 ? 'a' : 'b').config;
        PromptKv &kv = m == 0 ? r.a : r.b;
        const int tokens = 3 + index + m;
        for (int t = 0; t < tokens; ++t)
            kv.ids.push_back(index * 10 + t);
        const size_t n = size_t(tokens) * size_t(c.numKvHeads) * size_t(c.headDim);
        for (int layer = 0; layer < c.numLayers; ++layer) {
            std::vector<float> k(n), v(n);
            for (size_t i = 0; i < n; ++i) {
                k[i] = value(uint32_t(index * 100 + m * 10 + layer), i);
                v[i] = value(uint32_t(index * 100 + m * 10 + layer + 5000), i);
            }
            kv.keys.push_back(std::move(k));
            kv.values.push_back(std::move(v));
        }
    }
    return r;
}

void writeExperiment(const fs::path &path, int prompts = kPrompts)
{
    ExperimentOptions o;
    o.syncToDisk = false;
    Provenance p;
    p.device = "cpu";
    ExperimentWriter w = ExperimentWriter::create(path, o, p, model('a'), model('b'));
    for (int i = 0; i < prompts; ++i)
        w.appendPrompt(makePrompt(i));
    w.close();
}

KvMap makeMap(int in, int out, uint32_t seed)
{
    KvMap m;
    m.inputDim = in;
    m.outputDim = out;
    m.lambda = 1e-3 * double(seed % 7 + 1) / 3.0; // not exactly representable in binary
    m.weight.resize(size_t(in) * size_t(out));
    for (size_t i = 0; i < m.weight.size(); ++i)
        m.weight[i] = value(seed, i);
    m.bias.resize(size_t(out));
    for (size_t i = 0; i < m.bias.size(); ++i)
        m.bias[i] = value(seed + 77777, i);
    return m;
}

Matrix makeMatrix(int rows, int cols, uint32_t seed)
{
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    for (size_t i = 0; i < size_t(rows) * size_t(cols); ++i)
        m.data.push_back(double(value(seed, i)) / 3.0);
    return m;
}

// Everything set, every layer full-mode (headMatched = false) or every layer head-matched.
ConverterRecord makeRecord(const std::string &name, bool headMatched, uint32_t seed = 1)
{
    const ModelConfig a = model('a').config, b = model('b').config;
    ConverterRecord r;
    r.name = name;
    r.keyForm = headMatched ? KeyForm::PostRope : KeyForm::PreRope;
    r.selection = headMatched ? "topk" : "proportional";
    r.k = headMatched ? 2 : 1;
    r.lambdaMode = headMatched ? "auto" : "fixed";
    r.perHead = headMatched;
    r.settingsJson =
        R"({"seed": )" + std::to_string(seed) +
        R"(, "splits": [0.5, 0.25, 0.25], "note": "caf\u00e9 \"quoted\"", "lambdas": [1e-4, 1e-2]})";
    r.createdUtc = "2025-01-31T12:00:00Z";
    r.appVersion = "0.3.0";
    r.gitCommit = "0123456789abcdef";
    r.trainPrompts = {0, 2};
    r.validPrompts = {1};
    r.testPrompts = {}; // empty lists must survive too
    if (headMatched)
        r.testPrompts = {3};
    r.trainTokens = 123456789012LL;
    const std::vector<std::vector<int>> sources =
        headMatched ? std::vector<std::vector<int>>{{0, 2}, {1}} : std::vector<std::vector<int>>{{0, 1}, {2}};
    for (int l = 0; l < b.numLayers; ++l) {
        LayerConverter lc;
        lc.targetLayer = l;
        lc.sourceLayers = sources[size_t(l)];
        lc.headMatched = headMatched;
        const int s = int(lc.sourceLayers.size());
        const int maps = headMatched ? b.numKvHeads : 1;
        const int in = headMatched ? s * a.headDim : s * a.numKvHeads * a.headDim;
        const int out = headMatched ? b.headDim : b.numKvHeads * b.headDim;
        for (int h = 0; h < maps; ++h) {
            lc.keys.push_back(makeMap(in, out, seed * 1000 + uint32_t(l * 10 + h)));
            lc.values.push_back(makeMap(in, out, seed * 1000 + uint32_t(l * 10 + h + 500)));
        }
        r.layers.push_back(std::move(lc));
    }
    r.layerMetrics.columns = {"layer", "r2_k", "r2_v", "cos_k"};
    for (int l = 0; l < b.numLayers; ++l)
        r.layerMetrics.rows.push_back(
            {double(l), 0.1 * (l + seed), 1.0 / 3.0 + l, double(value(seed, size_t(l)))});
    // Values a metric can legitimately take, which a lossy path would mangle.
    r.layerMetrics.rows[0][3] = std::numeric_limits<double>::quiet_NaN();
    r.layerMetrics.rows[1][3] = -0.0;
    r.headMetrics.columns = {"layer", "head", "r2_k", "r2_v"};
    for (int l = 0; l < b.numLayers; ++l)
        for (int h = 0; h < b.numKvHeads; ++h)
            r.headMetrics.rows.push_back({double(l), double(h), double(value(seed + 1, size_t(l * 2 + h))),
                                          std::numeric_limits<double>::infinity()});
    r.ckaKeys = makeMatrix(b.numLayers, a.numLayers, seed + 10);
    r.ckaValues = makeMatrix(b.numLayers, a.numLayers, seed + 20);
    return r;
}

bool sameBits(const std::vector<float> &x, const std::vector<float> &y)
{
    // empty vectors may hold null data, which memcmp must not be given
    return x.size() == y.size() &&
           (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
}

bool sameBits(const std::vector<double> &x, const std::vector<double> &y)
{
    return x.size() == y.size() &&
           (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
}

QString compareTables(const MetricTable &got, const MetricTable &want, const char *what)
{
    if (got.columns != want.columns)
        return QStringLiteral("%1: columns differ").arg(what);
    if (got.rows.size() != want.rows.size())
        return QStringLiteral("%1: %2 rows, expected %3")
            .arg(what)
            .arg(got.rows.size())
            .arg(want.rows.size());
    for (size_t i = 0; i < got.rows.size(); ++i)
        if (!sameBits(got.rows[i], want.rows[i]))
            return QStringLiteral("%1: row %2 differs").arg(what).arg(i);
    return {};
}

QString compareMaps(const std::vector<KvMap> &got, const std::vector<KvMap> &want, const QString &what)
{
    if (got.size() != want.size())
        return QStringLiteral("%1: %2 maps, expected %3").arg(what).arg(got.size()).arg(want.size());
    for (size_t j = 0; j < got.size(); ++j) {
        const KvMap &g = got[j], &w = want[j];
        if (g.inputDim != w.inputDim || g.outputDim != w.outputDim)
            return QStringLiteral("%1 map %2: dims differ").arg(what).arg(j);
        if (std::memcmp(&g.lambda, &w.lambda, sizeof(double)) != 0)
            return QStringLiteral("%1 map %2: lambda differs").arg(what).arg(j);
        if (!sameBits(g.weight, w.weight) || !sameBits(g.bias, w.bias))
            return QStringLiteral("%1 map %2: weight or bias differs").arg(what).arg(j);
        if (g.rank != w.rank || g.hidden != w.hidden || !sameBits(g.down, w.down) || !sameBits(g.up, w.up) ||
            !sameBits(g.hiddenWeight, w.hiddenWeight) || !sameBits(g.hiddenBias, w.hiddenBias) ||
            !sameBits(g.outWeight, w.outWeight))
            return QStringLiteral("%1 map %2: low-rank or MLP part differs").arg(what).arg(j);
    }
    return {};
}

// "" when every field of got equals want bit for bit.
QString compareRecords(const ConverterRecord &got, const ConverterRecord &want)
{
    if (got.name != want.name || got.keyForm != want.keyForm || got.selection != want.selection ||
        got.k != want.k || got.lambdaMode != want.lambdaMode || got.perHead != want.perHead ||
        got.family != want.family || std::memcmp(&got.fitSeconds, &want.fitSeconds, sizeof(double)) != 0 ||
        std::memcmp(&got.convertMsPer1k, &want.convertMsPer1k, sizeof(double)) != 0)
        return QStringLiteral("fit settings differ");
    if (got.settingsJson != want.settingsJson)
        return QStringLiteral("settings JSON differs: %1").arg(QString::fromStdString(got.settingsJson));
    if (got.createdUtc != want.createdUtc || got.appVersion != want.appVersion ||
        got.gitCommit != want.gitCommit)
        return QStringLiteral("provenance differs");
    if (got.trainPrompts != want.trainPrompts || got.validPrompts != want.validPrompts ||
        got.testPrompts != want.testPrompts || got.trainTokens != want.trainTokens)
        return QStringLiteral("prompt split differs");
    if (got.layers.size() != want.layers.size())
        return QStringLiteral("%1 layers, expected %2").arg(got.layers.size()).arg(want.layers.size());
    for (size_t l = 0; l < got.layers.size(); ++l) {
        const LayerConverter &g = got.layers[l], &w = want.layers[l];
        if (g.targetLayer != w.targetLayer || g.sourceLayers != w.sourceLayers ||
            g.headMatched != w.headMatched || g.features != w.features)
            return QStringLiteral("layer %1: target, sources, mode or token features differ").arg(l);
        QString e = compareMaps(g.keys, w.keys, QStringLiteral("layer %1 keys").arg(l));
        if (e.isEmpty())
            e = compareMaps(g.values, w.values, QStringLiteral("layer %1 values").arg(l));
        if (!e.isEmpty())
            return e;
    }
    QString e = compareTables(got.layerMetrics, want.layerMetrics, "layer metrics");
    if (e.isEmpty())
        e = compareTables(got.headMetrics, want.headMetrics, "head metrics");
    if (!e.isEmpty())
        return e;
    for (const auto &[g, w, what] : {std::tuple{&got.ckaKeys, &want.ckaKeys, "cka_keys"},
                                     std::tuple{&got.ckaValues, &want.ckaValues, "cka_values"}})
        if (g->rows != w->rows || g->cols != w->cols || !sameBits(g->data, w->data))
            return QStringLiteral("%1 differs").arg(what);
    return {};
}

bool contains(const std::string &haystack, const std::string &needle)
{
    return haystack.find(needle) != std::string::npos;
}

// Raw HDF5 access for simulating other writers and tampering with a closed file.
struct RawFile
{
    hid_t id;
    explicit RawFile(const fs::path &p) : id(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {}
    ~RawFile() { H5Fclose(id); }
};

bool linkExists(const fs::path &p, const char *path)
{
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const bool yes = f >= 0 && H5Lexists(f, path, H5P_DEFAULT) > 0;
    H5Fclose(f);
    return yes;
}

// A record made invalid in one way, and what the error must name.
ConverterRecord brokenRecord(const QString &which)
{
    ConverterRecord r = makeRecord("broken", false, 3);
    if (which == QLatin1String("weight size"))
        r.layers[1].keys[0].weight.pop_back();
    else if (which == QLatin1String("bias size"))
        r.layers[0].values[0].bias.push_back(1.0f);
    else if (which == QLatin1String("layer count"))
        r.layers.pop_back();
    else if (which == QLatin1String("target layer"))
        r.layers[1].targetLayer = 0;
    else if (which == QLatin1String("source order"))
        r.layers[0].sourceLayers = {1, 0};
    else if (which == QLatin1String("source range"))
        r.layers[1].sourceLayers = {3};
    else if (which == QLatin1String("input dim")) // one source layer more than the maps take
        r.layers[1].sourceLayers = {1, 2};
    else if (which == QLatin1String("map count"))
        r.layers[0].keys.push_back(r.layers[0].keys[0]);
    else if (which == QLatin1String("head maps")) { // head-matched needs one map per B kv head
        r = makeRecord("broken", true, 3);
        r.layers[1].values.pop_back();
    } else if (which == QLatin1String("metrics row"))
        r.layerMetrics.rows[1].pop_back();
    else if (which == QLatin1String("cka size"))
        r.ckaValues.data.pop_back();
    else if (which == QLatin1String("settings json"))
        r.settingsJson = "{\"seed\": ";
    else if (which == QLatin1String("prompt index"))
        r.testPrompts = {kPrompts};
    else if (which == QLatin1String("empty name"))
        r.name = "";
    else if (which == QLatin1String("hidden name"))
        r.name = ".broken.partial";
    else if (which == QLatin1String("slash name"))
        r.name = "a/b";
    else if (which == QLatin1String("space name"))
        r.name = "a b";
    return r;
}

} // namespace

class TestConverterStore : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void roundTripFullAndHeadMatched();
    void roundTripLowRankAndMlp();
    void layerCheckpointRoundTrip();
    void tokenFeaturesRoundTripAndPlan();
    void replaceExisting();
    void listSortedAndEmpty();
    void groupsCreatedOnDemand();
    void missingName();
    void invalidRecordRejected_data();
    void invalidRecordRejected();
    void sweepTableRoundTrip();
    void appendAfterConverters();
    void interruptedSaveHiddenAndCleaned();
    void readOnlyFile();
    void refusedWhileCaptureWrites();
    void killedCaptureRecovered();
    void diskFullKeepsOldRecord();
    void killedSaveLeavesOldOrNew();
    void inconsistentShapesAreFormatErrors();
    void metricTableLookup();
    void hdf5ToolsReadTables();
};

void TestConverterStore::roundTripFullAndHeadMatched()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    const ConverterRecord full = makeRecord("full-v1", false);
    const ConverterRecord heads = makeRecord("heads_2.b", true, 2);
    saveConverters(path, full);
    saveConverters(path, heads);
    QCOMPARE(listConverters(path), (std::vector<std::string>{"full-v1", "heads_2.b"}));
    QString e = compareRecords(loadConverters(path, "full-v1"), full);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    e = compareRecords(loadConverters(path, "heads_2.b"), heads);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    // Metrics only: the same record with every map's weight and bias left empty.
    ConverterRecord lean = heads;
    for (auto &layer : lean.layers)
        for (auto *maps : {&layer.keys, &layer.values})
            for (auto &m : *maps) {
                m.weight.clear();
                m.bias.clear();
            }
    e = compareRecords(loadConverters(path, "heads_2.b", ConverterParts::MetricsOnly), lean);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    // The captured KV is untouched and the file still opens as an experiment.
    const ExperimentReader r = ExperimentReader::open(path);
    QCOMPARE(r.promptCount(), kPrompts);
    QVERIFY(r.keys(core::ModelRole::B, 1, 3) == makePrompt(3).b.keys[1]);
}

// The low-rank and MLP families keep their parts (factors; hidden weight, bias, output weight), their
// cost fields and, loaded without maps, their ranks and widths; a map of another family than the
// record's is refused before the file is touched.
void TestConverterStore::roundTripLowRankAndMlp()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    const auto fill = [](std::vector<float> &v, size_t n, uint32_t seed) {
        v.resize(n);
        for (size_t i = 0; i < n; ++i)
            v[i] = value(seed, i);
    };
    ConverterRecord lowRank = makeRecord("low", true, 3);
    lowRank.family = ConverterFamily::LowRank;
    lowRank.fitSeconds = 1.25;
    lowRank.convertMsPer1k = 0.3;
    ConverterRecord mlp = makeRecord("mlp", false, 4);
    mlp.family = ConverterFamily::Mlp;
    mlp.fitSeconds = 12.5;
    uint32_t seed = 100;
    for (auto &layer : lowRank.layers)
        for (auto *maps : {&layer.keys, &layer.values})
            for (auto &m : *maps) {
                m.weight.clear();
                m.rank = 3;
                fill(m.down, size_t(m.inputDim) * 3, seed++);
                fill(m.up, size_t(3 * m.outputDim), seed++);
            }
    for (auto &layer : mlp.layers)
        for (auto *maps : {&layer.keys, &layer.values})
            for (auto &m : *maps) {
                m.hidden = 5;
                fill(m.hiddenWeight, size_t(m.inputDim) * 5, seed++);
                fill(m.hiddenBias, 5, seed++);
                fill(m.outWeight, size_t(5 * m.outputDim), seed++);
            }
    saveConverters(path, lowRank);
    saveConverters(path, mlp);
    for (const ConverterRecord *want : {&lowRank, &mlp}) {
        const ConverterRecord got = loadConverters(path, want->name);
        const QString e = compareRecords(got, *want);
        QVERIFY2(e.isEmpty(), qPrintable(e));
        QCOMPARE(got.parameterCount(), want->parameterCount());
        const ConverterRecord lean = loadConverters(path, want->name, ConverterParts::MetricsOnly);
        QCOMPARE(lean.family, want->family);
        QCOMPARE(lean.layers[0].keys[0].rank, want->layers[0].keys[0].rank);
        QCOMPARE(lean.layers[0].keys[0].hidden, want->layers[0].keys[0].hidden);
        QVERIFY(lean.layers[0].keys[0].down.empty() && lean.layers[0].keys[0].hiddenWeight.empty());
        QCOMPARE(lean.parameterCount(), want->parameterCount());
    }
    // parameters: a full map of 3 layers x 2 heads x 4 = 24 inputs to 16 outputs at rank 3 holds
    // 3 x (24 + 16) + 16; the same map as an MLP of width 5 holds 24 x 16 + 16 + 5 x (24 + 1 + 16)
    KvMap one;
    one.inputDim = 24;
    one.outputDim = 16;
    one.rank = 3;
    QCOMPARE(one.parameterCount(), int64_t(3 * 40 + 16));
    one.rank = 0;
    one.hidden = 5;
    QCOMPARE(one.parameterCount(), int64_t(24 * 16 + 16 + 5 * 41));
    // one ridge map in an MLP record: refused, the stored record untouched
    ConverterRecord mixed = mlp;
    mixed.layers[1].values[0].hidden = 0;
    mixed.layers[1].values[0].hiddenWeight.clear();
    mixed.layers[1].values[0].hiddenBias.clear();
    mixed.layers[1].values[0].outWeight.clear();
    core::Error err = expectError([&] { saveConverters(path, mixed); });
    QCOMPARE(err.code(), ErrorCode::InvalidArgument);
    QVERIFY2(QString(err.what()).contains("layer 1 values map 0 is a ridge map in a mlp converter"),
             err.what());
    QString e = compareRecords(loadConverters(path, "mlp"), mlp);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    // a low-rank map whose factors do not match its rank
    ConverterRecord badRank = lowRank;
    badRank.layers[0].keys[1].up.pop_back();
    err = expectError([&] { saveConverters(path, badRank); });
    QCOMPARE(err.code(), ErrorCode::InvalidArgument);
    QVERIFY2(QString(err.what()).contains("layer 0 keys map 1 up has 23 floats"), err.what());
}

// One layer of an MLP fit in its own checkpoint file: read back bit for bit with its family, fit key
// and stats; the file is written whole (no temporary left) and a file that is not a checkpoint, a
// layer of another family or a missing file are refused with the file named.
void TestConverterStore::layerCheckpointRoundTrip()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "layer-001.h5";
    ConverterRecord mlp = makeRecord("mlp", false, 9);
    LayerCheckpoint c;
    c.layer = mlp.layers[1];
    uint32_t seed = 500;
    for (auto *maps : {&c.layer.keys, &c.layer.values})
        for (auto &m : *maps) {
            m.hidden = 3;
            for (auto [part, n] :
                 {std::pair{&m.hiddenWeight, size_t(m.inputDim) * 3}, std::pair{&m.hiddenBias, size_t(3)},
                  std::pair{&m.outWeight, size_t(3 * m.outputDim)}}) {
                part->resize(n);
                for (size_t i = 0; i < n; ++i)
                    (*part)[i] = value(seed, i);
                ++seed;
            }
        }
    c.family = ConverterFamily::Mlp;
    c.fitKey = R"({"seed":1})";
    c.statsJson = R"({"epochs":4})";
    saveLayerCheckpoint(path, c);
    QVERIFY(!fs::exists(fs::path(path.string() + ".tmp")));
    const LayerCheckpoint got = loadLayerCheckpoint(path);
    QCOMPARE(got.family, ConverterFamily::Mlp);
    QCOMPARE(got.fitKey, c.fitKey);
    QCOMPARE(got.statsJson, c.statsJson);
    QCOMPARE(got.layer.targetLayer, 1);
    QCOMPARE(got.layer.sourceLayers, c.layer.sourceLayers);
    QString e = compareMaps(got.layer.keys, c.layer.keys, "keys");
    e += compareMaps(got.layer.values, c.layer.values, "values");
    QVERIFY2(e.isEmpty(), qPrintable(e));

    LayerCheckpoint ridge = c; // the layer's maps are MLP maps, the checkpoint says ridge
    ridge.family = ConverterFamily::Ridge;
    core::Error err = expectError([&] { saveLayerCheckpoint(path, ridge); });
    QCOMPARE(err.code(), ErrorCode::InvalidArgument);
    QVERIFY2(QString(err.what()).contains("the layer's maps are mlp, not ridge"), err.what());

    const fs::path exp = fs::path(dir.path().toStdString()) / "exp.h5"; // an experiment, not a checkpoint
    writeExperiment(exp);
    err = expectError([&] { loadLayerCheckpoint(exp); });
    QCOMPARE(err.code(), ErrorCode::Format);
    QVERIFY2(QString(err.what()).contains("attribute schema of / is 'kvwb/2'"), err.what());
    err = expectError([&] { loadLayerCheckpoint(fs::path(dir.path().toStdString()) / "absent.h5"); });
    QVERIFY2(QString(err.what()).contains("absent.h5"), err.what());
}

// Token features: stored per layer (absent in older files: none), the maps' widths grow by exactly
// extraDim, a record whose maps do not is refused, as are features on head-matched maps or post-RoPE
// keys; the plan of which rows each position reads, the offsets, and the flag's spelling.
void TestConverterStore::tokenFeaturesRoundTripAndPlan()
{
    const auto refused = [](ErrorCode code, const char *text, const std::function<void()> &f) {
        const Error e = expectError(f);
        QCOMPARE(e.code(), code);
        QVERIFY2(std::string(e.what()).find(text) != std::string::npos, e.what());
    };
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    const ModelConfig a = model('a').config, b = model('b').config;
    ConverterRecord r = makeRecord("tf", false, 4);
    const TokenFeatures features{2, true, 4};
    for (auto &l : r.layers) {
        l.features = features;
        const int s = int(l.sourceLayers.size()), wa = a.numKvHeads * a.headDim,
                  wb = b.numKvHeads * b.headDim;
        const int in = int(s * wa + features.extraDim(s, wa, wb));
        QCOMPARE(in, s * wa + 2 * s * wa + 2 * wb + 4);
        l.keys = {makeMap(in, wb, 7)};
        l.values = {makeMap(in, wb, 8)};
    }
    saveConverters(path, r);
    QString e = compareRecords(loadConverters(path, "tf"), r);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    QCOMPARE(loadConverters(path, "tf", ConverterParts::MetricsOnly).layers[1].features, features);
    // a record without features reads back without them
    saveConverters(path, makeRecord("plain", false, 5));
    QVERIFY(!loadConverters(path, "plain").layers[0].features.any());

    ConverterRecord narrow = r; // the maps one feature short
    narrow.layers[0].features.offsets = 3;
    refused(ErrorCode::InvalidArgument, "layer 0 keys map 0 is [inputDim, outputDim]",
            [&] { saveConverters(path, narrow); });
    ConverterRecord postRope = r;
    postRope.keyForm = KeyForm::PostRope;
    refused(ErrorCode::InvalidArgument, "token features, which need pre-RoPE keys",
            [&] { saveConverters(path, postRope); });
    ConverterRecord badWindow = r;
    badWindow.layers[1].features.window = 5;
    refused(ErrorCode::InvalidArgument, "window 5 is outside 0..4", [&] { saveConverters(path, badWindow); });

    // B positions 0..6 paired with A tokens 0 0 1 1 1 2 3: runs [0,1] [2,4] [5] [6]
    const std::vector<int32_t> pairing = {0, 0, 1, 1, 1, 2, 3};
    const auto plan = tokenFeaturePlan(TokenFeatures{2, false, 3}, pairing, 7);
    // window 1: the last position of the run before; window 2: the last position of the one before that
    QCOMPARE(plan.windowRows, (std::vector<int32_t>{-1, -1, -1, -1, 1, -1, 1, -1, 1, -1, 4, 1, 5, 4}));
    QCOMPARE(plan.offset, (std::vector<int32_t>{0, 1, 0, 1, 2, 0, 0}));
    // the same tokenizer: every position its own run
    const auto same = tokenFeaturePlan(TokenFeatures{1, false, 4}, {}, 3);
    QCOMPARE(same.windowRows, (std::vector<int32_t>{-1, 0, 1}));
    QCOMPARE(same.offset, (std::vector<int32_t>{0, 0, 0}));
    refused(ErrorCode::InvalidArgument, "2 paired positions for 3 tokens", [&] {
        tokenFeaturePlan(TokenFeatures{1, false, 0}, {0, 1}, 3);
    });

    QCOMPARE(parseTokenFeatures("all"), std::optional<TokenFeatures>(TokenFeatures{1, true, 4}));
    QCOMPARE(parseTokenFeatures("none"), std::optional<TokenFeatures>(TokenFeatures{}));
    QCOMPARE(parseTokenFeatures("offsets=8,b"), std::optional<TokenFeatures>(TokenFeatures{0, true, 8}));
    QCOMPARE(parseTokenFeatures("window"), std::optional<TokenFeatures>(TokenFeatures{1, false, 0}));
    for (const char *bad : {"", "b,b", "window=5", "offsets=1", "offsets=65", "x", "b,", "window=-1", "b=2"})
        QVERIFY2(!parseTokenFeatures(bad), bad);
    for (const TokenFeatures &f : {TokenFeatures{}, TokenFeatures{1, true, 4}, TokenFeatures{3, false, 2}})
        QCOMPARE(parseTokenFeatures(tokenFeaturesText(f)), std::optional<TokenFeatures>(f));
    QCOMPARE(tokenFeaturesText(TokenFeatures{1, true, 4}), std::string("b,window=1,offsets=4"));
    QCOMPARE(describeTokenFeatures(TokenFeatures{1, true, 4}), std::string("window 1, B tokens, offsets 4"));
}

void TestConverterStore::replaceExisting()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    saveConverters(path, makeRecord("c", false, 1));
    saveConverters(path, makeRecord("other", true, 5));
    ConverterRecord replacement = makeRecord("c", true, 9); // another mode, other shapes
    replacement.layerMetrics.rows.clear();
    replacement.ckaKeys = Matrix{};
    saveConverters(path, replacement);
    QCOMPARE(listConverters(path), (std::vector<std::string>{"c", "other"}));
    QString e = compareRecords(loadConverters(path, "c"), replacement);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    e = compareRecords(loadConverters(path, "other"), makeRecord("other", true, 5));
    QVERIFY2(e.isEmpty(), qPrintable(e));
    // Nothing else, hidden or not, is left in the group.
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    QVERIFY(f >= 0);
    H5G_info_t info{};
    const herr_t status = H5Gget_info_by_name(f, "/converters", &info, H5P_DEFAULT);
    H5Fclose(f);
    QVERIFY(status >= 0);
    QCOMPARE(info.nlinks, hsize_t(2));
}

void TestConverterStore::listSortedAndEmpty()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    QVERIFY(listConverters(path).empty());
    QVERIFY(listTables(path).empty());
    for (const char *name : {"zeta", "Alpha", "beta-2", "beta.1", "0_first"})
        saveConverters(path, makeRecord(name, false));
    QCOMPARE(listConverters(path),
             (std::vector<std::string>{"0_first", "Alpha", "beta-2", "beta.1", "zeta"}));
    QVERIFY(listTables(path).empty());
}

void TestConverterStore::groupsCreatedOnDemand()
{
    // A file whose /converters and /sweeps groups are gone (edited by hand, or older than them).
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    {
        RawFile f(path);
        QVERIFY(f.id >= 0);
        QVERIFY(H5Ldelete(f.id, "/converters", H5P_DEFAULT) >= 0);
        QVERIFY(H5Ldelete(f.id, "/sweeps", H5P_DEFAULT) >= 0);
    }
    QVERIFY(listConverters(path).empty());
    QVERIFY(listTables(path).empty());
    QCOMPARE(expectError([&] { loadConverters(path, "x"); }).code(), ErrorCode::InvalidArgument);
    saveConverters(path, makeRecord("x", false));
    saveTable(path, "t", MetricTable{{"a"}, {{1.0}}}, "{}");
    QCOMPARE(listConverters(path), std::vector<std::string>{"x"});
    QCOMPARE(listTables(path), std::vector<std::string>{"t"});
    const QString e = compareRecords(loadConverters(path, "x"), makeRecord("x", false));
    QVERIFY2(e.isEmpty(), qPrintable(e));
}

void TestConverterStore::missingName()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    saveConverters(path, makeRecord("present", false));
    Error e = expectError([&] { loadConverters(path, "absent"); });
    QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(e.what(), path.string()) && contains(e.what(), "'absent'") &&
                 contains(e.what(), "present"),
             e.what());
    e = expectError([&] { loadTable(path, "absent"); });
    QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(e.what(), path.string()) && contains(e.what(), "'absent'"), e.what());
    // Hidden and malformed names are refused, not looked up.
    for (const char *bad : {".present.partial", "", "../present", "a/b"}) {
        e = expectError([&] { loadConverters(path, bad); });
        QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    }
    // Not an experiment at all.
    const fs::path text = fs::path(dir.path().toStdString()) / "notes.h5";
    kvwb::test::writeFile(text, "not hdf5");
    QCOMPARE(expectError([&] { listConverters(text); }).code(), ErrorCode::Format);
    QCOMPARE(expectError([&] { listConverters(fs::path(dir.path().toStdString()) / "missing.h5"); }).code(),
             ErrorCode::Io);
}

void TestConverterStore::invalidRecordRejected_data()
{
    QTest::addColumn<QString>("which");
    QTest::addColumn<QStringList>("mentions"); // fragments the message must contain
    QTest::newRow("weight size") << QStringLiteral("weight size")
                                 << QStringList{QStringLiteral("converter broken"), QStringLiteral("layer 1"),
                                                QStringLiteral("keys map 0 weight")};
    QTest::newRow("bias size") << QStringLiteral("bias size")
                               << QStringList{QStringLiteral("layer 0"), QStringLiteral("values map 0 bias")};
    QTest::newRow("layer count") << QStringLiteral("layer count")
                                 << QStringList{QStringLiteral("converter broken"),
                                                QStringLiteral("1 layers"), QStringLiteral("model b (2)")};
    QTest::newRow("target layer") << QStringLiteral("target layer")
                                  << QStringList{QStringLiteral("layer 1"), QStringLiteral("target_layer 0")};
    QTest::newRow("source order") << QStringLiteral("source order")
                                  << QStringList{QStringLiteral("layer 0"), QStringLiteral("source_layers")};
    QTest::newRow("source range") << QStringLiteral("source range")
                                  << QStringList{QStringLiteral("layer 1"),
                                                 QStringLiteral("source_layers entry 0 (3)")};
    QTest::newRow("input dim") << QStringLiteral("input dim")
                               << QStringList{QStringLiteral("layer 1 keys map 0"), QStringLiteral("[8, 16]"),
                                              QStringLiteral("[16, 16]")};
    QTest::newRow("map count") << QStringLiteral("map count")
                               << QStringList{QStringLiteral("layer 0"), QStringLiteral("2 keys maps")};
    QTest::newRow("head maps") << QStringLiteral("head maps")
                               << QStringList{QStringLiteral("layer 1"),
                                              QStringLiteral("1 values maps, expected 2")};
    QTest::newRow("metrics row") << QStringLiteral("metrics row")
                                 << QStringList{QStringLiteral("layer metrics row 1"),
                                                QStringLiteral("3 values")};
    QTest::newRow("cka size") << QStringLiteral("cka size")
                              << QStringList{QStringLiteral("cka_values"), QStringLiteral("2 x 3")};
    QTest::newRow("settings json") << QStringLiteral("settings json")
                                   << QStringList{QStringLiteral("converter broken"),
                                                  QStringLiteral("settings")};
    QTest::newRow("prompt index") << QStringLiteral("prompt index")
                                  << QStringList{QStringLiteral("test_prompts entry 0 (4)")};
    QTest::newRow("empty name") << QStringLiteral("empty name") << QStringList{QStringLiteral("name ''")};
    QTest::newRow("hidden name") << QStringLiteral("hidden name")
                                 << QStringList{QStringLiteral("'.broken.partial'"), QStringLiteral("'.'")};
    QTest::newRow("slash name") << QStringLiteral("slash name") << QStringList{QStringLiteral("'a/b'")};
    QTest::newRow("space name") << QStringLiteral("space name") << QStringList{QStringLiteral("'a b'")};
}

void TestConverterStore::invalidRecordRejected()
{
    QFETCH(QString, which);
    QFETCH(QStringList, mentions);
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    const ConverterRecord kept = makeRecord("kept", false);
    saveConverters(path, kept);
    saveConverters(path, makeRecord("broken", true, 4)); // the broken record would replace this one
    const std::vector<std::string> before = listConverters(path);
    const std::string bytes = readFile(path);

    const Error e = expectError([&] { saveConverters(path, brokenRecord(which)); });
    QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(e.what(), path.string()), e.what());
    for (const QString &m : mentions)
        QVERIFY2(contains(e.what(), m.toStdString()), e.what());

    // Refused before the file was opened for writing: not one byte differs.
    QVERIFY(readFile(path) == bytes);
    QCOMPARE(listConverters(path), before);
    QString diff = compareRecords(loadConverters(path, "kept"), kept);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
    diff = compareRecords(loadConverters(path, "broken"), makeRecord("broken", true, 4));
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
}

void TestConverterStore::sweepTableRoundTrip()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    MetricTable lambdas;
    lambdas.columns = {"lambda", "r2_k", "r2_v"};
    for (int i = 0; i < 5; ++i)
        lambdas.rows.push_back({std::pow(10.0, -i), double(value(9, size_t(i))), 1.0 / (i + 3)});
    const std::string lambdaSettings = R"({"swept": "lambda", "values": [1, 0.1, 0.01, 0.001, 0.0001]})";
    saveTable(path, "lambda-sweep", lambdas, lambdaSettings);
    MetricTable noRows; // a sweep that produced nothing keeps its columns
    noRows.columns = {"k", "r2"};
    saveTable(path, "empty_rows", noRows, "");
    saveTable(path, "nothing", MetricTable{}, "{}"); // 0 x 0
    QCOMPARE(listTables(path), (std::vector<std::string>{"empty_rows", "lambda-sweep", "nothing"}));
    QVERIFY(listConverters(path).empty());

    std::string settings;
    QString e = compareTables(loadTable(path, "lambda-sweep", &settings), lambdas, "lambda-sweep");
    QVERIFY2(e.isEmpty(), qPrintable(e));
    QCOMPARE(settings, lambdaSettings);
    e = compareTables(loadTable(path, "empty_rows", &settings), noRows, "empty_rows");
    QVERIFY2(e.isEmpty(), qPrintable(e));
    QCOMPARE(settings, std::string());
    const MetricTable nothing = loadTable(path, "nothing");
    QVERIFY(nothing.columns.empty() && nothing.rows.empty());

    // Replace, and refuse a ragged table without touching the file.
    lambdas.rows.pop_back();
    saveTable(path, "lambda-sweep", lambdas, "{}");
    e = compareTables(loadTable(path, "lambda-sweep", &settings), lambdas, "lambda-sweep");
    QVERIFY2(e.isEmpty(), qPrintable(e));
    QCOMPARE(settings, std::string("{}"));
    const std::string bytes = readFile(path);
    MetricTable ragged = lambdas;
    ragged.rows[2].push_back(0.0);
    Error err = expectError([&] { saveTable(path, "lambda-sweep", ragged, "{}"); });
    QCOMPARE(err.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(err.what(), "table lambda-sweep row 2"), err.what());
    err = expectError([&] { saveTable(path, "lambda-sweep", lambdas, "not json"); });
    QCOMPARE(err.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(err.what(), "settings"), err.what());
    QCOMPARE(expectError([&] { saveTable(path, ".hidden", lambdas, "{}"); }).code(),
             ErrorCode::InvalidArgument);
    QVERIFY(readFile(path) == bytes);
}

void TestConverterStore::appendAfterConverters()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, 2);
    ConverterRecord rec = makeRecord("before-append", false);
    rec.trainPrompts = {0}; // the file has 2 prompts so far
    rec.testPrompts = {};
    saveConverters(path, rec);
    saveTable(path, "sweep", MetricTable{{"x"}, {{1.5}, {2.5}}}, "{}");
    {
        // SWMR append on a file that has objects created without SWMR.
        ExperimentWriter w = ExperimentWriter::append(path, model('a'), model('b'), false);
        QCOMPARE(w.promptCount(), 2);
        QCOMPARE(w.appendPrompt(makePrompt(2)), 2);
        QCOMPARE(w.appendPrompt(makePrompt(3)), 3);
        w.close();
    }
    {
        const ExperimentReader r = ExperimentReader::open(path);
        QCOMPARE(r.promptCount(), 4);
        for (int p = 0; p < 4; ++p) {
            const PromptRecord want = makePrompt(p);
            QCOMPARE(r.prompt(p).text, want.text);
            QVERIFY(r.prompt(p).b.ids == want.b.ids);
            for (int l = 0; l < 3; ++l)
                QVERIFY(r.values(core::ModelRole::A, l, p) == want.a.values[size_t(l)]);
        }
    }
    QString e = compareRecords(loadConverters(path, "before-append"), rec);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    QCOMPARE(listTables(path), std::vector<std::string>{"sweep"});
    // And converters can be saved again afterwards, now naming the new prompts.
    const ConverterRecord after = makeRecord("after-append", true);
    saveConverters(path, after);
    e = compareRecords(loadConverters(path, "after-append"), after);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    QCOMPARE(ExperimentReader::open(path).promptCount(), 4);
}

void TestConverterStore::interruptedSaveHiddenAndCleaned()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    saveConverters(path, makeRecord("a", false));
    {
        // What a save killed half-way leaves: a hidden, incomplete group (and one of a table).
        RawFile f(path);
        QVERIFY(f.id >= 0);
        const hid_t g = H5Gcreate2(f.id, "/converters/.b.partial", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        QVERIFY(g >= 0);
        const hid_t layers = H5Gcreate2(g, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        QVERIFY(layers >= 0);
        H5Gclose(layers);
        H5Gclose(g);
        const hsize_t dims[2] = {0, 1};
        const hid_t space = H5Screate_simple(2, dims, nullptr);
        const hid_t ds = H5Dcreate2(f.id, "/sweeps/.t.partial", H5T_IEEE_F64LE, space, H5P_DEFAULT,
                                    H5P_DEFAULT, H5P_DEFAULT);
        QVERIFY(ds >= 0);
        H5Dclose(ds);
        H5Sclose(space);
    }
    QCOMPARE(listConverters(path), std::vector<std::string>{"a"});
    QVERIFY(listTables(path).empty());
    QCOMPARE(expectError([&] { loadConverters(path, ".b.partial"); }).code(), ErrorCode::InvalidArgument);
    QVERIFY(linkExists(path, "/converters/.b.partial"));

    saveConverters(path, makeRecord("c", true));
    QVERIFY(!linkExists(path, "/converters/.b.partial"));
    QVERIFY(!linkExists(path, "/converters/.c.partial"));
    QCOMPARE(listConverters(path), (std::vector<std::string>{"a", "c"}));
    QVERIFY(linkExists(path, "/sweeps/.t.partial")); // each save cleans its own group
    saveTable(path, "t", MetricTable{{"x"}, {{1.0}}}, "{}");
    QVERIFY(!linkExists(path, "/sweeps/.t.partial"));
    QCOMPARE(listTables(path), std::vector<std::string>{"t"});
    const QString e = compareRecords(loadConverters(path, "a"), makeRecord("a", false));
    QVERIFY2(e.isEmpty(), qPrintable(e));
}

void TestConverterStore::readOnlyFile()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    const ConverterRecord rec = makeRecord("ro", true);
    saveConverters(path, rec);
    const MetricTable table{{"a", "b"}, {{1, 2}, {3, 4}}};
    saveTable(path, "t", table, "{\"x\": 1}");
    fs::permissions(path, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    const std::string bytes = readFile(path);
    QCOMPARE(listConverters(path), std::vector<std::string>{"ro"});
    QCOMPARE(listTables(path), std::vector<std::string>{"t"});
    QString e = compareRecords(loadConverters(path, "ro"), rec);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    e = compareTables(loadTable(path, "t"), table, "t");
    QVERIFY2(e.isEmpty(), qPrintable(e));
    if (::geteuid() != 0) { // root may write anyway
        const Error err = expectError([&] { saveConverters(path, makeRecord("new", false)); });
        QCOMPARE(err.code(), ErrorCode::Io);
        QVERIFY2(contains(err.what(), path.string()), err.what());
    }
    QVERIFY(readFile(path) == bytes);
}

void TestConverterStore::refusedWhileCaptureWrites()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    ExperimentOptions o;
    o.syncToDisk = false;
    ExperimentWriter w = ExperimentWriter::create(path, o, Provenance{}, model('a'), model('b'));
    for (int i = 0; i < kPrompts; ++i)
        w.appendPrompt(makePrompt(i));
    const Error e = expectError([&] { saveConverters(path, makeRecord("x", false)); });
    QCOMPARE(e.code(), ErrorCode::Io);
    QVERIFY2(contains(e.what(), "writing this file"), e.what());
    w.close();
    saveConverters(path, makeRecord("x", false));
    QCOMPARE(listConverters(path), std::vector<std::string>{"x"});
}

void TestConverterStore::killedCaptureRecovered()
{
    // A capture killed mid-run leaves the superblock's "open for writing" flags set; a plain
    // read-write open refuses such a file.
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    const pid_t pid = ::fork();
    QVERIFY(pid >= 0);
    if (pid == 0) {
        const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
        H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
        const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, fapl);
        ::_exit(f >= 0 ? 0 : 1); // no close: the flags stay set
    }
    int status = 0;
    QCOMPARE(::waitpid(pid, &status, 0), pid);
    QVERIFY(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    QVERIFY(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT) < 0);

    const ConverterRecord rec = makeRecord("after-crash", false);
    saveConverters(path, rec);
    const QString e = compareRecords(loadConverters(path, "after-crash"), rec);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    ExperimentWriter w = ExperimentWriter::append(path, model('a'), model('b'), false);
    QCOMPARE(w.appendPrompt(makePrompt(kPrompts)), kPrompts);
    w.close();
    QCOMPARE(ExperimentReader::open(path).promptCount(), kPrompts + 1);
    QCOMPARE(listConverters(path), std::vector<std::string>{"after-crash"});
}

void TestConverterStore::diskFullKeepsOldRecord()
{
    // A file-size limit makes write() fail with EFBIG, like a full disk, for this process only. The
    // limit is stepped through the whole save, so it fails at every stage: each time the file must
    // hold the old record or the new one, and the next save must succeed.
    QTemporaryDir dir;
    const ConverterRecord old = makeRecord("c", false, 1);
    const ConverterRecord replacement = makeRecord("c", true, 2);
    uintmax_t growth = 0;
    {
        const fs::path scratch = fs::path(dir.path().toStdString()) / "scratch.h5";
        writeExperiment(scratch);
        saveConverters(scratch, old);
        const uintmax_t before = fs::file_size(scratch);
        saveConverters(scratch, replacement);
        growth = fs::file_size(scratch) - before;
    }
    rlimit saved{};
    QVERIFY(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    auto *oldHandler = std::signal(SIGXFSZ, SIG_IGN);
    int failures = 0;
    const int steps = 16;
    for (int step = 0; step <= steps; ++step) {
        const fs::path path = fs::path(dir.path().toStdString()) / ("exp" + std::to_string(step) + ".h5");
        writeExperiment(path);
        saveConverters(path, old);
        rlimit limited = saved;
        limited.rlim_cur = rlim_t(fs::file_size(path) + growth * uintmax_t(step) / uintmax_t(steps));
        QVERIFY(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
        bool failed = false;
        try {
            saveConverters(path, replacement);
        } catch (const Error &e) {
            failed = true;
            ++failures;
            QCOMPARE(e.code(), ErrorCode::Io);
            QVERIFY2(contains(e.what(), path.string()), e.what());
        }
        ::setrlimit(RLIMIT_FSIZE, &saved);

        QCOMPARE(listConverters(path), std::vector<std::string>{"c"});
        const ConverterRecord got = loadConverters(path, "c");
        const QString asOld = compareRecords(got, old), asNew = compareRecords(got, replacement);
        QVERIFY2(failed ? (asOld.isEmpty() || asNew.isEmpty()) : asNew.isEmpty(),
                 qPrintable(QStringLiteral("step %1: %2 / %3").arg(step).arg(asOld, asNew)));
        QCOMPARE(ExperimentReader::open(path).promptCount(), kPrompts);
        saveConverters(path, replacement);
        const QString e = compareRecords(loadConverters(path, "c"), replacement);
        QVERIFY2(e.isEmpty(), qPrintable(e));
    }
    std::signal(SIGXFSZ, oldHandler);
    QVERIFY(failures > 0);
}

void TestConverterStore::killedSaveLeavesOldOrNew()
{
    // A child replaces /converters/c over and over (seed i, alternating modes) until SIGKILL lands
    // somewhere inside a save; the file must then hold a complete record of one of those seeds,
    // take the next save, and still take appended prompts.
    std::mt19937 rng(12345);
    for (int round = 0; round < 6; ++round) {
        QTemporaryDir dir;
        const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
        writeExperiment(path);
        int fds[2];
        QVERIFY(::pipe(fds) == 0);
        const pid_t pid = ::fork();
        QVERIFY(pid >= 0);
        if (pid == 0) {
            ::close(fds[0]);
            try {
                for (uint32_t seed = 1;; ++seed) {
                    saveConverters(path, makeRecord("c", seed % 2 == 0, seed));
                    if (::write(fds[1], &seed, sizeof seed) != sizeof seed)
                        ::_exit(3);
                }
            } catch (...) {
                ::_exit(2);
            }
        }
        ::close(fds[1]);
        // Let a few saves complete, then kill at a random moment of a later one.
        uint32_t seen = 0, seed = 0;
        while (seen < 2 + uint32_t(round) && ::read(fds[0], &seed, sizeof seed) == sizeof seed)
            ++seen;
        ::usleep(useconds_t(std::uniform_int_distribution<int>(0, 20000)(rng)));
        ::kill(pid, SIGKILL);
        int status = 0;
        QCOMPARE(::waitpid(pid, &status, 0), pid);
        QVERIFY2(WIFSIGNALED(status), "the saving child died before it was killed");
        while (::read(fds[0], &seed, sizeof seed) == sizeof seed)
            ++seen;
        ::close(fds[0]);
        QVERIFY(seen >= 2);

        QCOMPARE(listConverters(path), std::vector<std::string>{"c"});
        const ConverterRecord got = loadConverters(path, "c");
        // The last reported save, or the one after it if the kill came after its final flush.
        const QString asReported = compareRecords(got, makeRecord("c", seen % 2 == 0, seen));
        const QString asNext = compareRecords(got, makeRecord("c", (seen + 1) % 2 == 0, seen + 1));
        QVERIFY2(
            asReported.isEmpty() || asNext.isEmpty(),
            qPrintable(
                QStringLiteral("round %1, %2 saves: %3 / %4").arg(round).arg(seen).arg(asReported, asNext)));
        const ConverterRecord next = makeRecord("c", true, 1000);
        saveConverters(path, next);
        const QString e = compareRecords(loadConverters(path, "c"), next);
        QVERIFY2(e.isEmpty(), qPrintable(e));
        ExperimentWriter w = ExperimentWriter::append(path, model('a'), model('b'), false);
        QCOMPARE(w.appendPrompt(makePrompt(kPrompts)), kPrompts);
        w.close();
        QCOMPARE(ExperimentReader::open(path).promptCount(), kPrompts + 1);
    }
}

void TestConverterStore::inconsistentShapesAreFormatErrors()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    saveConverters(path, makeRecord("x", false));
    saveTable(path, "t", MetricTable{{"a", "b"}, {{1, 2}}}, "{}");
    {
        RawFile f(path);
        QVERIFY(f.id >= 0);
        // keys_bias [1, 3] where keys_weight says [1, 16, 16]
        QVERIFY(H5Ldelete(f.id, "/converters/x/layers/1/keys_bias", H5P_DEFAULT) >= 0);
        const hsize_t dims[2] = {1, 3};
        const hid_t space = H5Screate_simple(2, dims, nullptr);
        const hid_t ds = H5Dcreate2(f.id, "/converters/x/layers/1/keys_bias", H5T_IEEE_F32LE, space,
                                    H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        QVERIFY(ds >= 0);
        H5Dclose(ds);
        // one column name short
        const hid_t t = H5Dopen2(f.id, "/sweeps/t", H5P_DEFAULT);
        QVERIFY(H5Adelete(t, "columns") >= 0);
        const hsize_t one = 1;
        const hid_t aspace = H5Screate_simple(1, &one, nullptr);
        const hid_t str = H5Tcopy(H5T_C_S1);
        H5Tset_size(str, 8); // fixed-size strings are read too
        const hid_t attr = H5Acreate2(t, "columns", str, aspace, H5P_DEFAULT, H5P_DEFAULT);
        QVERIFY(attr >= 0);
        const char name[8] = "a";
        QVERIFY(H5Awrite(attr, str, name) >= 0);
        H5Aclose(attr);
        H5Tclose(str);
        H5Sclose(aspace);
        H5Dclose(t);
        H5Sclose(space);
    }
    Error e = expectError([&] { loadConverters(path, "x"); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(contains(e.what(), "/converters/x/layers/1/keys_bias") && contains(e.what(), "[1, 3]"),
             e.what());
    e = expectError([&] { loadTable(path, "t"); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(contains(e.what(), "/sweeps/t") && contains(e.what(), "1 columns"), e.what());
    {
        // A missing layer group.
        RawFile f(path);
        QVERIFY(H5Ldelete(f.id, "/converters/x/layers/0", H5P_DEFAULT) >= 0);
    }
    e = expectError([&] { loadConverters(path, "x"); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(contains(e.what(), "/converters/x/layers lacks layer 0"), e.what());
}

void TestConverterStore::metricTableLookup()
{
    const MetricTable t{{"layer", "r2_k"}, {{0, 0.5}, {1, 0.75}}};
    QCOMPARE(t.column("r2_k"), 1);
    QCOMPARE(t.column("nope"), -1);
    QCOMPARE(t.at(1, "r2_k"), 0.75);
    Error e = expectError([&] { t.at(0, "nope"); });
    QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(e.what(), "'nope'") && contains(e.what(), "layer, r2_k"), e.what());
    QCOMPARE(expectError([&] { t.at(2, "layer"); }).code(), ErrorCode::InvalidArgument);
}

void TestConverterStore::hdf5ToolsReadTables()
{
    const QString h5dump = QStandardPaths::findExecutable(QStringLiteral("h5dump"));
    if (h5dump.isEmpty())
        QSKIP("h5dump not installed (Debian package hdf5-tools)");
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path);
    saveConverters(path, makeRecord("x", true));
    saveTable(path, "empty", MetricTable{{"k", "r2"}, {}}, "{}");
    const auto dump = [&](const QString &object) {
        QProcess p;
        p.start(h5dump, {QStringLiteral("-d"), object, QString::fromStdString(path.string())});
        p.waitForFinished(60000);
        return QString::fromUtf8(p.readAllStandardOutput()) + QString::fromUtf8(p.readAllStandardError());
    };
    QString out = dump(QStringLiteral("/converters/x/metrics/layers"));
    QVERIFY2(out.contains(QStringLiteral("\"r2_k\"")) && out.contains(QStringLiteral("( 2, 4 )")),
             qPrintable(out));
    out = dump(QStringLiteral("/sweeps/empty"));
    QVERIFY2(out.contains(QStringLiteral("\"r2\"")) && out.contains(QStringLiteral("( 0, 2 )")),
             qPrintable(out));
    out = dump(QStringLiteral("/converters/x/layers/1/values_weight"));
    QVERIFY2(out.contains(QStringLiteral("( 2, 4, 8 )")), qPrintable(out));
}

QTEST_GUILESS_MAIN(TestConverterStore)
#include "tst_converter_store.moc"
