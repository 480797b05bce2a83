// Experiment file (HDF5, schema kvwb/2): round trips per storage dtype, ragged prompts, token
// ranges, appending, captured-layer subsets, compression, errors naming the dataset at fault, a
// full disk, a writer killed with SIGKILL mid-run, and the HDF5 command-line tools reading what we wrote.
#include "core/store/experiment_file.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"

#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <hdf5.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <poll.h>
#include <random>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace kvwb::core;
namespace core = kvwb::core;
namespace fs = std::filesystem;
using kvwb::test::expectError;

Q_DECLARE_METATYPE(kvwb::core::FloatType)

namespace {

ModelInfo tinyModel(char role, const std::string &weights = "")
{
    ModelInfo m;
    m.role = *core::parseRole(std::string(1, role)); // test helpers name roles by letter
    ModelConfig &c = m.config;
    c.architecture = role == 'a' ? "LlamaForCausalLM" : "Qwen2ForCausalLM";
    c.modelType = role == 'a' ? "llama" : "qwen2";
    // Different geometry per model: the store must not assume A and B agree.
    c.numLayers = role == 'a' ? 2 : 3;
    c.numHeads = 4;
    c.numKvHeads = role == 'a' ? 2 : 1;
    c.headDim = role == 'a' ? 8 : 16;
    c.hiddenSize = c.numHeads * c.headDim;
    c.vocabSize = 32000;
    c.ropeTheta = role == 'a' ? 10000.0 : 1000000.0;
    c.ropeLayout = role == 'a' ? RopeLayout::RotateHalf : RopeLayout::Interleaved;
    c.ropeScaling.type = role == 'a' ? "default" : "linear";
    c.ropeScaling.factor = role == 'a' ? 1.0 : 2.0;
    m.weightsSha256 = weights.empty() ? std::string(64, role) : weights;
    m.tokenizerSha256 = std::string(64, role == 'a' ? '1' : '2');
    m.sourcePath = std::string("/models/") + role;
    return m;
}

ModelInfo tinyModel(ModelRole role, const std::string &weights = "")
{
    return tinyModel(roleName(role)[0], weights);
}

Provenance testProvenance()
{
    Provenance p;
    p.qtVersion = "6.4.2";
    p.torchVersion = "1.13.1";
    p.device = "cpu";
    p.configSha256 = std::string(64, 'c');
    return p;
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

// Deterministic KV value of element i: spread over [-4, 4) with random mantissa bits.
float kvValue(int prompt, int model, int layer, int kind, size_t i)
{
    const uint32_t h = mix(uint32_t(prompt) * 0x9e3779b9u ^ mix(uint32_t(model * 1000 + layer * 10 + kind)) ^
                           mix(uint32_t(i) + 0x1234567u));
    return (float(h & 0xffffff) / 16777216.0f - 0.5f) * 8.0f;
}

int tokensFor(int prompt, int model)
{
    return model == 0 ? 3 + (prompt * 37) % 300 : 1 + (prompt * 53) % 200;
}

// The layers a ModelInfo captures, explicit.
std::vector<int> layersOf(const ModelInfo &m)
{
    if (!m.capturedLayers.empty())
        return m.capturedLayers;
    std::vector<int> all;
    for (int l = 0; l < m.config.numLayers; ++l)
        all.push_back(l);
    return all;
}

// A prompt whose every value derives from (prompt index, model, layer, kind, element); one KV entry
// per captured layer of each model.
PromptRecord makePrompt(int index, const ModelInfo &a, const ModelInfo &b, bool compressible = false,
                        int tokensA = -1, int tokensB = -1)
{
    PromptRecord r;
    r.text = "prompt " + std::to_string(index) + " \xc3\xa9t\xc3\xa9 \xe2\x82\xac";
    r.label = index % 3 == 0 ? "" : "intent_" + std::to_string(index % 3);
    for (int m = 0; m < 2; ++m) {
        const ModelConfig &c = (m == 0 ? a : b).config;
        const std::vector<int> layers = layersOf(m == 0 ? a : b);
        PromptKv &kv = m == 0 ? r.a : r.b;
        const int explicitTokens = m == 0 ? tokensA : tokensB;
        const int tokens = explicitTokens >= 0 ? explicitTokens : tokensFor(index, m);
        for (int t = 0; t < tokens; ++t)
            kv.ids.push_back((index * 1000 + t * 7 + m) % 32000);
        const size_t n = size_t(tokens) * size_t(c.numKvHeads) * size_t(c.headDim);
        for (int layer : layers) {
            std::vector<float> k(n), v(n);
            for (size_t i = 0; i < n; ++i) {
                // Compressible: a few distinct values repeating along headDim.
                k[i] = compressible ? float(i % 4) : kvValue(index, m, layer, 0, i);
                v[i] = compressible ? float(layer) : kvValue(index, m, layer, 1, i);
            }
            kv.keys.push_back(std::move(k));
            kv.values.push_back(std::move(v));
        }
    }
    return r;
}

// Error message of the first element outside tolerance, or "" when all agree.
QString compareKv(const std::vector<float> &got, const std::vector<float> &want, FloatType storage)
{
    if (got.size() != want.size())
        return QStringLiteral("size %1 != %2").arg(got.size()).arg(want.size());
    if (storage == FloatType::F32) {
        if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0)
            return QStringLiteral("f32 data not bit-exact");
        return {};
    }
    // f16: 10 mantissa bits, round to nearest: relative error <= 2^-11 ~ 4.9e-4 (plus subnormals).
    // bf16: 7 mantissa bits: <= 2^-8 ~ 3.9e-3.
    const double rel = storage == FloatType::F16 ? 1e-3 : 8e-3;
    const double floor = storage == FloatType::F16 ? 1e-7 : 1e-30;
    for (size_t i = 0; i < got.size(); ++i)
        if (std::fabs(double(got[i]) - double(want[i])) > rel * std::fabs(double(want[i])) + floor)
            return QStringLiteral("element %1: %2 vs %3").arg(i).arg(got[i]).arg(want[i]);
    return {};
}

// Checks every field of prompt `index` read back from the file against makePrompt(index).
QString checkPrompt(const ExperimentReader &r, int index, const PromptRecord &want)
{
    const PromptInfo got = r.prompt(index);
    if (got.text != want.text)
        return QStringLiteral("prompt %1 text differs").arg(index);
    if (got.label != want.label)
        return QStringLiteral("prompt %1 label differs").arg(index);
    if (got.a.ids != want.a.ids || got.b.ids != want.b.ids)
        return QStringLiteral("prompt %1 ids differ").arg(index);
    const FloatType storage = r.storage().storage;
    for (int m = 0; m < 2; ++m) {
        const PromptKv &kv = m == 0 ? want.a : want.b;
        const ModelRole role = m == 0 ? ModelRole::A : ModelRole::B;
        const std::vector<int> &layers = r.model(role).capturedLayers;
        if (layers.size() != kv.keys.size())
            return QStringLiteral("model %1: file has %2 captured layers, prompt %3")
                .arg(roleName(role))
                .arg(layers.size())
                .arg(kv.keys.size());
        for (size_t i = 0; i < layers.size(); ++i) {
            const int layer = layers[i];
            QString e = compareKv(r.keys(role, layer, index), kv.keys[i], storage);
            if (e.isEmpty())
                e = compareKv(r.values(role, layer, index), kv.values[i], storage);
            if (!e.isEmpty())
                return QStringLiteral("prompt %1 model %2 layer %3: %4")
                    .arg(index)
                    .arg(roleName(role))
                    .arg(layer)
                    .arg(e);
        }
    }
    return {};
}

// Raw HDF5 access for tampering with a closed file.
struct RawFile
{
    hid_t id;
    explicit RawFile(const fs::path &p) : id(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {}
    ~RawFile() { H5Fclose(id); }
};

void setIntAttr(const fs::path &p, const char *object, const char *name, int64_t value)
{
    RawFile f(p);
    QVERIFY(f.id >= 0);
    // (H5Aopen_by_name + H5Awrite fails in HDF5 1.10.8 with "can't locate open attribute".)
    hid_t g = H5Gopen2(f.id, object, H5P_DEFAULT);
    QVERIFY(g >= 0);
    hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    QVERIFY(a >= 0);
    QVERIFY(H5Awrite(a, H5T_NATIVE_INT64, &value) >= 0);
    H5Aclose(a);
    H5Gclose(g);
}

void setStringAttr(const fs::path &p, const char *name, const char *value)
{
    RawFile f(p);
    QVERIFY(f.id >= 0);
    QVERIFY(H5Adelete(f.id, name) >= 0);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, std::strlen(value) + 1);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f.id, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    QVERIFY(a >= 0);
    QVERIFY(H5Awrite(a, type, value) >= 0);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
}

// Sets a 1-D dataset's length; writes `value` at index `at` when at >= 0.
void editDataset1d(const fs::path &p, const char *path, hsize_t length, hssize_t at = -1, int64_t value = 0)
{
    RawFile f(p);
    QVERIFY(f.id >= 0);
    hid_t ds = H5Dopen2(f.id, path, H5P_DEFAULT);
    QVERIFY(ds >= 0);
    QVERIFY(H5Dset_extent(ds, &length) >= 0);
    if (at >= 0) {
        hid_t space = H5Dget_space(ds);
        const hsize_t start = hsize_t(at), count = 1;
        H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
        hid_t mem = H5Screate_simple(1, &count, nullptr);
        QVERIFY(H5Dwrite(ds, H5T_NATIVE_INT64, mem, space, H5P_DEFAULT, &value) >= 0);
        H5Sclose(mem);
        H5Sclose(space);
    }
    H5Dclose(ds);
}

void writeExperiment(const fs::path &path, FloatType storage, int prompts, int compress = 0,
                     bool compressible = false)
{
    ExperimentOptions o;
    o.storage = storage;
    o.compress = compress;
    o.syncToDisk = false;
    const ModelInfo a = tinyModel('a'), b = tinyModel('b');
    ExperimentWriter w = ExperimentWriter::create(path, o, testProvenance(), a, b);
    for (int p = 0; p < prompts; ++p)
        QCOMPARE(w.appendPrompt(makePrompt(p, a, b, compressible)), p);
    w.close();
}

// The SIGKILL child: writes prompts forever, reporting each committed count through `fd`.
[[noreturn]] void killChild(const fs::path &path, int fd, bool syncToDisk)
{
    try {
        ExperimentOptions o;
        o.storage = FloatType::F16;
        o.syncToDisk = syncToDisk; // without fsync the kill lands inside HDF5's writes more often
        o.chunkTokens = 64;        // many chunk boundaries
        const ModelInfo a = tinyModel('a'), b = tinyModel('b');
        ExperimentWriter w = ExperimentWriter::create(path, o, testProvenance(), a, b);
        for (int p = 0;; ++p) {
            w.appendPrompt(makePrompt(p, a, b));
            const int32_t committed = p + 1;
            if (::write(fd, &committed, sizeof committed) != sizeof committed)
                ::_exit(3);
        }
    } catch (...) {
        ::_exit(2);
    }
}

} // namespace

// Spans that tile the prompt's text over n tokens and, for B, the A token covering each B token's
// last byte (what capture stores for two tokenizers).
void addAlignment(PromptRecord &r)
{
    const int32_t bytes = int32_t(r.text.size());
    for (PromptKv *kv : {&r.a, &r.b}) {
        const int32_t n = int32_t(kv->ids.size());
        kv->spans.clear();
        for (int32_t i = 0; i < n; ++i) {
            kv->spans.push_back(i * bytes / n);
            kv->spans.push_back((i + 1) * bytes / n);
        }
    }
    const size_t na = r.a.ids.size(), nb = r.b.ids.size();
    r.alignment.clear();
    for (size_t t = 0; t < nb; ++t)
        r.alignment.push_back(int32_t(std::min(na - 1, (t * na) / nb)));
}

class TestExperimentFile : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void roundTrip_data();
    void roundTrip();
    void keyRangeAcrossPrompts();
    void capturedLayersSubset();
    void capturedLayersDefaultAndLegacy();
    void capturedLayersInvalid();
    void appendMatchingModels();
    void appendRefusesOtherModels();
    void compressionShrinksCompressibleData();
    void notHdf5();
    void nonFiniteKvRefused_data();
    void nonFiniteKvRefused();
    void flippedKvBitRefused();
    void variableLengthStringRefused();
    void missingFile();
    void futureSchema();
    void tamperedAttribute();
    void offsetsBeyondDataset();
    void offsetsLengthMismatch();
    void tornPromptIgnoredAndOverwritten();
    void refusesExistingPath();
    void unwritableDirectory();
    void badPromptShape();
    void secondWriterRefused();
    void diskFullKeepsCommittedPrompts();
    void killedWriterLeavesReadableFile();
    void hdf5ToolsListSchema();
    void tokenAlignmentRoundTrip();
    void tokenAlignmentLegacyAndDamage();
};

void TestExperimentFile::roundTrip_data()
{
    QTest::addColumn<FloatType>("storage");
    QTest::addColumn<int>("compress");
    QTest::newRow("f32") << FloatType::F32 << 0;
    QTest::newRow("f32-deflate") << FloatType::F32 << 4;
    QTest::newRow("f16") << FloatType::F16 << 0;
    QTest::newRow("f16-deflate") << FloatType::F16 << 1;
    QTest::newRow("bf16") << FloatType::BF16 << 0;
}

void TestExperimentFile::roundTrip()
{
    QFETCH(FloatType, storage);
    QFETCH(int, compress);
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, storage, 5, compress);

    const ExperimentReader r = ExperimentReader::open(path);
    QCOMPARE(r.schema(), std::string("kvwb/2"));
    const Provenance &p = r.provenance();
    QCOMPARE(p.qtVersion, std::string("6.4.2"));
    QCOMPARE(p.torchVersion, std::string("1.13.1"));
    QCOMPARE(p.device, std::string("cpu"));
    QCOMPARE(p.configSha256, std::string(64, 'c'));
    QVERIFY(p.hdf5Version.rfind("1.", 0) == 0);
    QVERIFY(!p.appVersion.empty());
    QVERIFY(!p.gitCommit.empty());
    QCOMPARE(p.runId.size(), size_t(32));
    QCOMPARE(p.createdUtc.size(), size_t(20));
    QCOMPARE(p.createdUtc.back(), 'Z');
    for (ModelRole role : kRoles) {
        const ModelInfo want = tinyModel(role), got = r.model(role);
        QCOMPARE(got.role, role);
        QCOMPARE(got.config.architecture, want.config.architecture);
        QCOMPARE(got.config.modelType, want.config.modelType);
        QCOMPARE(got.config.numLayers, want.config.numLayers);
        QCOMPARE(got.config.numKvHeads, want.config.numKvHeads);
        QCOMPARE(got.config.headDim, want.config.headDim);
        QCOMPARE(got.config.hiddenSize, want.config.hiddenSize);
        QCOMPARE(got.config.vocabSize, want.config.vocabSize);
        QCOMPARE(got.config.ropeTheta, want.config.ropeTheta);
        QVERIFY(got.config.ropeLayout == want.config.ropeLayout);
        QVERIFY(got.config.ropeScaling == want.config.ropeScaling);
        QCOMPARE(got.weightsSha256, want.weightsSha256);
        QCOMPARE(got.tokenizerSha256, want.tokenizerSha256);
        QCOMPARE(got.sourcePath, want.sourcePath);
    }
    QVERIFY(r.storage().storage == storage);
    QCOMPARE(r.storage().compress, compress);
    QCOMPARE(r.storage().chunkTokens, 256);
    QVERIFY(r.storage().keyForm == KeyForm::PreRope);

    // Ragged: every prompt has its own length per model, some above one 256-token chunk.
    QCOMPARE(r.promptCount(), 5);
    int64_t totalA = 0, totalB = 0;
    for (int i = 0; i < 5; ++i) {
        const PromptRecord want = makePrompt(i, tinyModel('a'), tinyModel('b'));
        const PromptInfo info = r.prompt(i);
        QCOMPARE(info.a.firstToken, totalA);
        QCOMPARE(info.b.firstToken, totalB);
        totalA += int64_t(want.a.ids.size());
        totalB += int64_t(want.b.ids.size());
        const QString e = checkPrompt(r, i, want);
        QVERIFY2(e.isEmpty(), qPrintable(e));
    }
    QCOMPARE(r.totalTokens(core::ModelRole::A), totalA);
    QCOMPARE(r.totalTokens(core::ModelRole::B), totalB);
    QVERIFY(totalA > 256);
}

void TestExperimentFile::keyRangeAcrossPrompts()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, FloatType::F32, 3);
    const ExperimentReader r = ExperimentReader::open(path);
    const PromptInfo p1 = r.prompt(1);
    for (ModelRole role : kRoles) {
        // The last (up to) 2 rows of prompt 0 and the first 3 of prompt 1.
        const int64_t boundary = (role == ModelRole::A ? p1.a : p1.b).firstToken;
        const int64_t tail = std::min<int64_t>(2, boundary);
        const int64_t first = boundary - tail, count = tail + 3;
        const int rowFloats = role == ModelRole::A ? 2 * 8 : 1 * 16;
        const int layer = 1;
        std::vector<float> expect;
        const std::vector<float> k0 = r.keys(role, layer, 0), k1 = r.keys(role, layer, 1);
        expect.insert(expect.end(), k0.end() - tail * rowFloats, k0.end());
        expect.insert(expect.end(), k1.begin(), k1.begin() + 3 * rowFloats);
        QVERIFY(r.keyRange(role, layer, first, count) == expect);
        std::vector<float> expectV;
        const std::vector<float> v0 = r.values(role, layer, 0), v1 = r.values(role, layer, 1);
        expectV.insert(expectV.end(), v0.end() - tail * rowFloats, v0.end());
        expectV.insert(expectV.end(), v1.begin(), v1.begin() + 3 * rowFloats);
        QVERIFY(r.valueRange(role, layer, first, count) == expectV);
    }
    const Error e =
        expectError([&] { r.keyRange(core::ModelRole::A, 0, r.totalTokens(core::ModelRole::A) - 1, 2); });
    QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    QCOMPARE(expectError([&] { r.prompt(3); }).code(), ErrorCode::InvalidArgument);
}

void TestExperimentFile::capturedLayersSubset()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    ExperimentOptions o;
    o.syncToDisk = false;
    ModelInfo a = tinyModel('a'), b = tinyModel('b');
    a.capturedLayers = {1};
    b.capturedLayers = {0, 2};
    {
        ExperimentWriter w = ExperimentWriter::create(path, o, testProvenance(), a, b);
        QCOMPARE(w.capturedLayers(core::ModelRole::A), std::vector<int>({1}));
        QCOMPARE(w.capturedLayers(core::ModelRole::B), std::vector<int>({0, 2}));
        for (int p = 0; p < 2; ++p)
            QCOMPARE(w.appendPrompt(makePrompt(p, a, b)), p);
    }
    {
        // The same subset appends; a different one (here: all layers) is refused, naming both.
        ExperimentWriter w = ExperimentWriter::append(path, a, b, false);
        QCOMPARE(w.appendPrompt(makePrompt(2, a, b)), 2);
    }
    ModelInfo allB = tinyModel('b');
    const Error refused = expectError([&] { ExperimentWriter::append(path, a, allB, false); });
    QCOMPARE(refused.code(), ErrorCode::Config);
    const std::string msg = refused.what();
    QVERIFY2(msg.find("model b") != std::string::npos, refused.what());
    QVERIFY2(msg.find("(0, 1, 2)") != std::string::npos, refused.what());
    QVERIFY2(msg.find("(0, 2)") != std::string::npos, refused.what());

    // Datasets keep the real layer index; uncaptured layers have none (checked before a reader
    // holds the file open: HDF5 refuses a read-write open then).
    {
        RawFile f(path);
        QVERIFY(f.id >= 0);
        QVERIFY(H5Lexists(f.id, "/kv/b/layer_002", H5P_DEFAULT) > 0);
        QVERIFY(H5Lexists(f.id, "/kv/b/layer_001", H5P_DEFAULT) <= 0);
        QVERIFY(H5Lexists(f.id, "/kv/a/layer_000", H5P_DEFAULT) <= 0);
    }
    const ExperimentReader r = ExperimentReader::open(path);
    QCOMPARE(r.promptCount(), 3);
    QCOMPARE(r.model(core::ModelRole::A).capturedLayers, std::vector<int>({1}));
    QCOMPARE(r.model(core::ModelRole::B).capturedLayers, std::vector<int>({0, 2}));
    for (int i = 0; i < 3; ++i) {
        const QString e = checkPrompt(r, i, makePrompt(i, a, b));
        QVERIFY2(e.isEmpty(), qPrintable(e));
    }
    // A token range of a captured layer, across the prompt 0/1 boundary, by its real index.
    const int64_t boundary = r.prompt(1).b.firstToken;
    std::vector<float> expect;
    const std::vector<float> k0 = r.keys(core::ModelRole::B, 2, 0), k1 = r.keys(core::ModelRole::B, 2, 1);
    expect.insert(expect.end(), k0.end() - 16, k0.end());
    expect.insert(expect.end(), k1.begin(), k1.begin() + 2 * 16);
    QVERIFY(r.keyRange(core::ModelRole::B, 2, boundary - 1, 3) == expect);
    QCOMPARE(r.valueRange(core::ModelRole::B, 2, 0, r.totalTokens(core::ModelRole::B)).size(),
             size_t(r.totalTokens(core::ModelRole::B)) * 16);

    const Error notCaptured = expectError([&] { r.keys(core::ModelRole::B, 1, 0); });
    QCOMPARE(notCaptured.code(), ErrorCode::InvalidArgument);
    QVERIFY2(std::string(notCaptured.what()).find("layer 1 of model b was not captured (captured: 0, 2)") !=
                 std::string::npos,
             notCaptured.what());
    QCOMPARE(expectError([&] { r.valueRange(core::ModelRole::A, 0, 0, 1); }).code(),
             ErrorCode::InvalidArgument);
    const Error outOfRange = expectError([&] { r.keys(core::ModelRole::B, 3, 0); });
    QCOMPARE(outOfRange.code(), ErrorCode::InvalidArgument);
    QVERIFY2(std::string(outOfRange.what()).find("has no layer 3") != std::string::npos, outOfRange.what());
}

void TestExperimentFile::capturedLayersDefaultAndLegacy()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, FloatType::F32, 2);
    QCOMPARE(ExperimentReader::open(path).model(core::ModelRole::B).capturedLayers,
             std::vector<int>({0, 1, 2}));
    // A file written before captured_layers existed stores every layer.
    {
        RawFile f(path);
        QVERIFY(f.id >= 0);
        QVERIFY(H5Adelete_by_name(f.id, "/models/b", "captured_layers", H5P_DEFAULT) >= 0);
    }
    const ExperimentReader r = ExperimentReader::open(path);
    QCOMPARE(r.model(core::ModelRole::B).capturedLayers, std::vector<int>({0, 1, 2}));
    const QString e = checkPrompt(r, 1, makePrompt(1, tinyModel('a'), tinyModel('b')));
    QVERIFY2(e.isEmpty(), qPrintable(e));
}

void TestExperimentFile::capturedLayersInvalid()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    ExperimentOptions o;
    o.syncToDisk = false;
    ModelInfo b = tinyModel('b');
    b.capturedLayers = {0, 3};
    const Error e =
        expectError([&] { ExperimentWriter::create(path, o, testProvenance(), tinyModel('a'), b); });
    QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    QVERIFY2(std::string(e.what()).find("model b") != std::string::npos, e.what());
    QVERIFY2(std::string(e.what()).find("layer 3") != std::string::npos, e.what());
    b.capturedLayers = {2, 0};
    QCOMPARE(
        expectError([&] { ExperimentWriter::create(path, o, testProvenance(), tinyModel('a'), b); }).code(),
        ErrorCode::InvalidArgument);
    b.capturedLayers = {1, 1};
    QCOMPARE(
        expectError([&] { ExperimentWriter::create(path, o, testProvenance(), tinyModel('a'), b); }).code(),
        ErrorCode::InvalidArgument);
    ModelInfo a = tinyModel('a');
    a.capturedLayers = {-1};
    QCOMPARE(
        expectError([&] { ExperimentWriter::create(path, o, testProvenance(), a, tinyModel('b')); }).code(),
        ErrorCode::InvalidArgument);
    QVERIFY(!fs::exists(path));
}

void TestExperimentFile::appendMatchingModels()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, FloatType::BF16, 2);
    const ModelInfo a = tinyModel('a'), b = tinyModel('b');
    {
        ExperimentWriter w = ExperimentWriter::append(path, a, b, false);
        QCOMPARE(w.promptCount(), 2);
        QCOMPARE(w.appendPrompt(makePrompt(2, a, b)), 2);
        QCOMPARE(w.appendPrompt(makePrompt(3, a, b)), 3);
    } // destructor closes
    const ExperimentReader r = ExperimentReader::open(path);
    QCOMPARE(r.promptCount(), 4);
    QVERIFY(r.storage().storage == FloatType::BF16);
    for (int i = 0; i < 4; ++i) {
        const QString e = checkPrompt(r, i, makePrompt(i, a, b));
        QVERIFY2(e.isEmpty(), qPrintable(e));
    }
}

void TestExperimentFile::appendRefusesOtherModels()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, FloatType::F32, 1);
    const std::string other(64, 'f');
    const Error e =
        expectError([&] { ExperimentWriter::append(path, tinyModel('a'), tinyModel('b', other), false); });
    QCOMPARE(e.code(), ErrorCode::Config);
    const std::string msg = e.what();
    QVERIFY2(msg.find(other) != std::string::npos, e.what());
    QVERIFY2(msg.find(std::string(64, 'b')) != std::string::npos, e.what());
    QVERIFY2(msg.find(path.string()) != std::string::npos, e.what());
    // The refused file is untouched.
    QCOMPARE(ExperimentReader::open(path).promptCount(), 1);
}

void TestExperimentFile::compressionShrinksCompressibleData()
{
    QTemporaryDir dir;
    const fs::path plain = fs::path(dir.path().toStdString()) / "plain.h5";
    const fs::path packed = fs::path(dir.path().toStdString()) / "packed.h5";
    writeExperiment(plain, FloatType::F32, 6, 0, true);
    writeExperiment(packed, FloatType::F32, 6, 4, true);
    const auto plainSize = fs::file_size(plain), packedSize = fs::file_size(packed);
    QVERIFY2(packedSize * 4 < plainSize,
             qPrintable(QStringLiteral("plain %1 bytes, deflated %2").arg(plainSize).arg(packedSize)));
    const ExperimentReader r = ExperimentReader::open(packed);
    QCOMPARE(r.storage().compress, 4);
    const QString e = checkPrompt(r, 5, makePrompt(5, tinyModel('a'), tinyModel('b'), true));
    QVERIFY2(e.isEmpty(), qPrintable(e));
}

void TestExperimentFile::nonFiniteKvRefused_data()
{
    QTest::addColumn<float>("bad");
    QTest::addColumn<FloatType>("storage");
    QTest::newRow("nan f32") << std::numeric_limits<float>::quiet_NaN() << FloatType::F32;
    QTest::newRow("inf f16") << std::numeric_limits<float>::infinity() << FloatType::F16;
    QTest::newRow("-inf bf16") << -std::numeric_limits<float>::infinity() << FloatType::BF16;
}

// KV that is not finite is refused on the way out, with the dataset, token, model, layer and prompt
// named: fitting never sees it (a NaN layer used to fit a 100% NaN converter with exit 0).
void TestExperimentFile::nonFiniteKvRefused()
{
    QFETCH(float, bad);
    QFETCH(FloatType, storage);
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "e.h5";
    ExperimentOptions o;
    o.storage = storage;
    o.syncToDisk = false;
    const ModelInfo a = tinyModel('a'), b = tinyModel('b');
    {
        ExperimentWriter w = ExperimentWriter::create(path, o, testProvenance(), a, b);
        w.appendPrompt(makePrompt(0, a, b));
        PromptRecord p = makePrompt(1, a, b);
        p.b.values.back()[5] = bad; // model B, its last captured layer, prompt 1
        w.appendPrompt(p);
        w.close();
    }
    const ExperimentReader r = ExperimentReader::open(path);
    const int layer = r.model(ModelRole::B).capturedLayers.back();
    QVERIFY(!r.keys(ModelRole::B, layer, 1).empty());   // the keys are fine
    QVERIFY(!r.values(ModelRole::B, layer, 0).empty()); // so is prompt 0
    const auto e = expectError([&] { r.values(ModelRole::B, layer, 1); });
    QCOMPARE(e.code(), ErrorCode::Format);
    const QString msg = QString::fromUtf8(e.what());
    QVERIFY2(msg.contains("e.h5") &&
                 msg.contains(QString("/kv/b/layer_%1/values").arg(layer, 3, 10, QChar('0'))) &&
                 msg.contains("prompt 1") && msg.contains(QString("layer %1").arg(layer)) &&
                 msg.contains("finite"),
             e.what());
    // a range over both prompts meets it too
    expectError([&] { r.valueRange(ModelRole::B, layer, 0, r.totalTokens(ModelRole::B)); });
}

void TestExperimentFile::notHdf5()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "notes.h5";
    kvwb::test::writeFile(path, "this is not HDF5, just some text long enough to have a header\n");
    const Error e = expectError([&] { ExperimentReader::open(path); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(std::string(e.what()).find(path.string()) != std::string::npos, e.what());
    QCOMPARE(expectError([&] { ExperimentWriter::append(path, tinyModel('a'), tinyModel('b')); }).code(),
             ErrorCode::Format);
}

// One flipped bit in a stored value (still finite, so only the checksum can see it) is refused
// naming the dataset, model, layer and prompt; the other prompts still read.
void TestExperimentFile::flippedKvBitRefused()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "e.h5";
    writeExperiment(path, FloatType::F32, 3);
    int64_t row = 0;
    size_t rowBytes = 0;
    std::vector<float> before;
    {
        const ExperimentReader r = ExperimentReader::open(path);
        row = r.prompt(1).b.firstToken;
        const ModelConfig &c = r.model(ModelRole::B).config;
        rowBytes = size_t(c.numKvHeads) * size_t(c.headDim) * sizeof(float);
        before = r.values(ModelRole::B, 0, 0);
    }
    {
        RawFile f(path);
        const hid_t ds = H5Dopen2(f.id, "/kv/b/layer_000/values", H5P_DEFAULT);
        QVERIFY(ds >= 0);
        const hsize_t origin[3] = {0, 0, 0};
        hsize_t bytes = 0;
        QVERIFY(H5Dget_chunk_storage_size(ds, origin, &bytes) >= 0);
        QVERIFY(bytes > row * rowBytes);
        std::vector<uint8_t> chunk(bytes);
        uint32_t filters = 0;
        QVERIFY(H5Dread_chunk(ds, H5P_DEFAULT, origin, &filters, chunk.data()) >= 0);
        chunk[size_t(row) * rowBytes] ^= 1; // the lowest mantissa bit of prompt 1's first value
        QVERIFY(H5Dwrite_chunk(ds, H5P_DEFAULT, filters, origin, bytes, chunk.data()) >= 0);
        H5Dclose(ds);
    }
    const ExperimentReader r = ExperimentReader::open(path);
    QVERIFY(r.values(ModelRole::B, 0, 0) == before);
    QVERIFY(!r.keys(ModelRole::B, 0, 1).empty());
    for (const auto &read : std::vector<std::function<void()>>{
             [&] { r.values(ModelRole::B, 0, 1); },
             [&] { r.valueRange(ModelRole::B, 0, row + 1, 1); }, // inside the prompt, not at the flip
         }) {
        const Error e = expectError(read);
        QCOMPARE(e.code(), ErrorCode::Format);
        const std::string msg = e.what();
        for (const char *part : {"/kv/b/layer_000/values", "CRC-32", "model b", "layer 0", "prompt 1"})
            QVERIFY2(msg.find(part) != std::string::npos, e.what());
    }
}

// A kvwb/2 file never holds a variable-length string (HDF5 reads them from its global heap without
// checking the stored sizes): one found is refused by its type, never read.
void TestExperimentFile::variableLengthStringRefused()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "e.h5";
    writeExperiment(path, FloatType::F16, 1);
    {
        RawFile f(path);
        const hid_t g = H5Gopen2(f.id, "/models/a", H5P_DEFAULT);
        QVERIFY(H5Adelete(g, "rope_layout") >= 0);
        const hid_t type = H5Tcopy(H5T_C_S1);
        H5Tset_size(type, H5T_VARIABLE);
        const hid_t space = H5Screate(H5S_SCALAR);
        const hid_t a = H5Acreate2(g, "rope_layout", type, space, H5P_DEFAULT, H5P_DEFAULT);
        const char *value = "rotate_half";
        QVERIFY(H5Awrite(a, type, &value) >= 0);
        H5Aclose(a);
        H5Sclose(space);
        H5Tclose(type);
        H5Gclose(g);
    }
    const Error e = expectError([&] { ExperimentReader::open(path); });
    QCOMPARE(e.code(), ErrorCode::Format);
    const std::string msg = e.what();
    QVERIFY2(msg.find("rope_layout") != std::string::npos && msg.find("/models/a") != std::string::npos &&
                 msg.find("variable-length") != std::string::npos,
             e.what());
}

void TestExperimentFile::missingFile()
{
    const Error e = expectError([&] { ExperimentReader::open("/nonexistent/exp.h5"); });
    QCOMPARE(e.code(), ErrorCode::Io);
    QVERIFY2(std::string(e.what()).find("/nonexistent/exp.h5") != std::string::npos, e.what());
}

void TestExperimentFile::futureSchema()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, FloatType::F32, 1);
    setStringAttr(path, "schema", "kvwb/3");
    const Error e = expectError([&] { ExperimentReader::open(path); });
    QCOMPARE(e.code(), ErrorCode::Unsupported);
    const std::string msg = e.what();
    QVERIFY2(msg.find("kvwb/3") != std::string::npos && msg.find(path.string()) != std::string::npos,
             e.what());
}

void TestExperimentFile::tamperedAttribute()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, FloatType::F16, 2);
    setIntAttr(path, "/models/a", "num_kv_heads", 3);
    const Error e = expectError([&] { ExperimentReader::open(path); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(std::string(e.what()).find("/kv/a/layer_000/keys") != std::string::npos, e.what());
}

void TestExperimentFile::offsetsBeyondDataset()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, FloatType::F32, 2);
    const int64_t total = ExperimentReader::open(path).totalTokens(core::ModelRole::B);
    // Prompt 1 of model b now claims 1000 more tokens than were written.
    editDataset1d(path, "/prompts/b/offsets", 3, 2, total + 1000);
    const Error e = expectError([&] { ExperimentReader::open(path); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(std::string(e.what()).find("/prompts/b/offsets") != std::string::npos, e.what());
}

void TestExperimentFile::offsetsLengthMismatch()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, FloatType::F32, 3);
    // Two prompts shorter than the other offsets datasets: not a torn append (at most one).
    editDataset1d(path, "/prompts/a/offsets", 2);
    const Error e = expectError([&] { ExperimentReader::open(path); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(std::string(e.what()).find("/prompts/") != std::string::npos, e.what());
    QVERIFY2(std::string(e.what()).find("offsets") != std::string::npos, e.what());

    // ids shorter than the offsets say.
    const fs::path path2 = fs::path(dir.path().toStdString()) / "exp2.h5";
    writeExperiment(path2, FloatType::F32, 3);
    editDataset1d(path2, "/prompts/a/ids", 10);
    const Error e2 = expectError([&] { ExperimentReader::open(path2); });
    QCOMPARE(e2.code(), ErrorCode::Format);
    QVERIFY2(std::string(e2.what()).find("/prompts/a/ids") != std::string::npos, e2.what());
}

void TestExperimentFile::tornPromptIgnoredAndOverwritten()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, FloatType::F32, 2);
    const int64_t total = ExperimentReader::open(path).totalTokens(core::ModelRole::A);
    // What a writer killed between extending /prompts/a/offsets and the others leaves behind:
    // model a's ids grown by 50 and its offsets by one entry.
    editDataset1d(path, "/prompts/a/ids", hsize_t(total + 50));
    editDataset1d(path, "/prompts/a/offsets", 4, 3, total + 50);
    QCOMPARE(ExperimentReader::open(path).promptCount(), 2);

    const ModelInfo a = tinyModel('a'), b = tinyModel('b');
    {
        ExperimentWriter w = ExperimentWriter::append(path, a, b, false);
        QCOMPARE(w.totalTokens(core::ModelRole::A), total);
        QCOMPARE(w.appendPrompt(makePrompt(2, a, b)), 2);
        w.close();
    }
    const ExperimentReader r = ExperimentReader::open(path);
    QCOMPARE(r.promptCount(), 3);
    for (int i = 0; i < 3; ++i) {
        const QString e = checkPrompt(r, i, makePrompt(i, a, b));
        QVERIFY2(e.isEmpty(), qPrintable(e));
    }
}

void TestExperimentFile::refusesExistingPath()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, FloatType::F32, 1);
    const Error e = expectError([&] {
        ExperimentWriter::create(path, ExperimentOptions{}, testProvenance(), tinyModel('a'), tinyModel('b'));
    });
    QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    QCOMPARE(ExperimentReader::open(path).promptCount(), 1);
}

void TestExperimentFile::unwritableDirectory()
{
    QTemporaryDir dir;
    // A parent that is a regular file fails for every user, root included.
    const fs::path blocker = fs::path(dir.path().toStdString()) / "blocker";
    kvwb::test::writeFile(blocker, "x");
    const fs::path path = blocker / "exp.h5";
    const Error e = expectError([&] {
        ExperimentWriter::create(path, ExperimentOptions{}, testProvenance(), tinyModel('a'), tinyModel('b'));
    });
    QCOMPARE(e.code(), ErrorCode::Io);
    QVERIFY2(std::string(e.what()).find(path.string()) != std::string::npos, e.what());

    if (::geteuid() != 0) { // permissions do not stop root
        const fs::path ro = fs::path(dir.path().toStdString()) / "ro";
        fs::create_directory(ro);
        fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
        const Error e2 = expectError([&] {
            ExperimentWriter::create(ro / "exp.h5", ExperimentOptions{}, testProvenance(), tinyModel('a'),
                                     tinyModel('b'));
        });
        fs::permissions(ro, fs::perms::owner_all);
        QCOMPARE(e2.code(), ErrorCode::Io);
    }
}

void TestExperimentFile::badPromptShape()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    ExperimentOptions o;
    o.syncToDisk = false;
    const ModelInfo a = tinyModel('a'), b = tinyModel('b');
    ExperimentWriter w = ExperimentWriter::create(path, o, testProvenance(), a, b);
    PromptRecord p = makePrompt(0, a, b);
    p.b.values[2].pop_back();
    QCOMPARE(expectError([&] { w.appendPrompt(p); }).code(), ErrorCode::Shape);
    // Validation happens before any write: the writer is still usable.
    QCOMPARE(w.appendPrompt(makePrompt(0, a, b)), 0);
}

void TestExperimentFile::secondWriterRefused()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    ExperimentOptions o;
    o.syncToDisk = false;
    const ModelInfo a = tinyModel('a'), b = tinyModel('b');
    ExperimentWriter w = ExperimentWriter::create(path, o, testProvenance(), a, b);
    w.appendPrompt(makePrompt(0, a, b));
    // Appending would clear the running writer's flags (crash recovery): the writer lock stops it.
    const Error e = expectError([&] { ExperimentWriter::append(path, a, b, false); });
    QCOMPARE(e.code(), ErrorCode::Io);
    QVERIFY2(std::string(e.what()).find("another") != std::string::npos, e.what());
    QCOMPARE(w.appendPrompt(makePrompt(1, a, b)), 1);
    w.close();
    ExperimentWriter again = ExperimentWriter::append(path, a, b, false);
    QCOMPARE(again.promptCount(), 2);
}

void TestExperimentFile::diskFullKeepsCommittedPrompts()
{
    // A file-size limit makes write() fail with EFBIG, like a full disk, for this process only.
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    const ModelInfo a = tinyModel('a'), b = tinyModel('b');
    rlimit saved{};
    QVERIFY(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    auto *oldHandler = std::signal(SIGXFSZ, SIG_IGN);
    int committed = 0;
    bool failed = false;
    {
        ExperimentOptions o;
        ExperimentWriter w = ExperimentWriter::create(path, o, testProvenance(), a, b);
        w.appendPrompt(makePrompt(0, a, b));
        committed = 1;
        rlimit limited = saved;
        limited.rlim_cur = rlim_t(fs::file_size(path) + 200 * 1024);
        QVERIFY(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
        for (int p = 1; p < 200 && !failed; ++p) {
            try {
                w.appendPrompt(makePrompt(p, a, b));
                committed = p + 1;
            } catch (const Error &e) {
                failed = true;
                QCOMPARE(e.code(), ErrorCode::Io);
                QVERIFY2(std::string(e.what()).find(path.string()) != std::string::npos, e.what());
            }
        }
        if (failed)
            QCOMPARE(expectError([&] { w.appendPrompt(makePrompt(99, a, b)); }).code(), ErrorCode::Io);
    } // closing may fail too: the destructor swallows it
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, oldHandler);
    QVERIFY(failed);
    QVERIFY(committed >= 2);

    {
        const ExperimentReader r = ExperimentReader::open(path);
        QCOMPARE(r.promptCount(), committed);
        for (int i = 0; i < committed; ++i) {
            const QString e = checkPrompt(r, i, makePrompt(i, a, b));
            QVERIFY2(e.isEmpty(), qPrintable(e));
        }
    } // HDF5 refuses to open a file for writing that the process has open for reading
    // Once space is back, appending resumes from the committed end.
    {
        ExperimentWriter w = ExperimentWriter::append(path, a, b, false);
        QCOMPARE(w.appendPrompt(makePrompt(committed, a, b)), committed);
    }
    const ExperimentReader r2 = ExperimentReader::open(path);
    QCOMPARE(r2.promptCount(), committed + 1);
    const QString e = checkPrompt(r2, committed, makePrompt(committed, a, b));
    QVERIFY2(e.isEmpty(), qPrintable(e));
}

void TestExperimentFile::killedWriterLeavesReadableFile()
{
    const ModelInfo a = tinyModel('a'), b = tinyModel('b');
    // Several rounds, killing after a different number of prompts and a different delay each time,
    // so the kill lands in different phases of appendPrompt.
    std::mt19937 rng(std::random_device{}());
    for (int round = 0; round < 6; ++round) {
        QTemporaryDir dir;
        const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
        int fds[2];
        QVERIFY(::pipe(fds) == 0);
        const pid_t pid = ::fork();
        QVERIFY(pid >= 0);
        if (pid == 0) {
            ::close(fds[0]);
            killChild(path, fds[1], round % 2 == 0);
        }
        ::close(fds[1]);
        const int wanted = 3 + round % 3;
        int32_t reported = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
        while (reported < wanted && std::chrono::steady_clock::now() < deadline) {
            pollfd pfd{fds[0], POLLIN, 0};
            if (::poll(&pfd, 1, 1000) <= 0)
                continue;
            int32_t v = 0;
            if (::read(fds[0], &v, sizeof v) != sizeof v)
                break; // child died
            reported = v;
        }
        ::usleep(useconds_t(rng() % 5000));
        ::kill(pid, SIGKILL);
        int status = 0;
        ::waitpid(pid, &status, 0);
        // Counts the child reported before it died are committed too.
        int32_t v = 0;
        while (::read(fds[0], &v, sizeof v) == sizeof v)
            reported = v;
        ::close(fds[0]);
        QVERIFY2(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                 qPrintable(QStringLiteral("child exited early, status %1").arg(status)));
        QVERIFY2(reported >= wanted, qPrintable(QStringLiteral("only %1 prompts reported").arg(reported)));

        int count = 0;
        {
            const ExperimentReader r = ExperimentReader::open(path);
            count = r.promptCount();
            // Where did the kill land? Rows past the committed end = killed inside appendPrompt.
            hsize_t rows[3] = {0, 0, 0};
            const hid_t raw = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT);
            if (raw >= 0) {
                const hid_t ds = H5Dopen2(raw, "/kv/b/layer_002/values", H5P_DEFAULT);
                const hid_t space = H5Dget_space(ds);
                H5Sget_simple_extent_dims(space, rows, nullptr);
                H5Sclose(space);
                H5Dclose(ds);
                H5Fclose(raw);
            }
            qInfo(
                "round %d (fsync %s): reported %d, visible %d, uncommitted rows in the last KV dataset: %lld",
                round, round % 2 == 0 ? "on" : "off", reported, count,
                (long long)rows[0] - (long long)r.totalTokens(core::ModelRole::B));
            // A prompt committed but not yet reported may be visible too.
            QVERIFY2(count == reported || count == reported + 1,
                     qPrintable(QStringLiteral("reported %1, file has %2").arg(reported).arg(count)));
            for (int i = 0; i < count; ++i) {
                const QString e = checkPrompt(r, i, makePrompt(i, a, b));
                QVERIFY2(e.isEmpty(), qPrintable(e));
            }
        }
        {
            ExperimentWriter w = ExperimentWriter::append(path, a, b, false);
            QCOMPARE(w.appendPrompt(makePrompt(count, a, b)), count);
            w.close();
        }
        const ExperimentReader r = ExperimentReader::open(path);
        QCOMPARE(r.promptCount(), count + 1);
        for (int i = 0; i <= count; ++i) {
            const QString e = checkPrompt(r, i, makePrompt(i, a, b));
            QVERIFY2(e.isEmpty(), qPrintable(e));
        }
    }
}

void TestExperimentFile::hdf5ToolsListSchema()
{
    const QString h5ls = QStandardPaths::findExecutable(QStringLiteral("h5ls"));
    const QString h5dump = QStandardPaths::findExecutable(QStringLiteral("h5dump"));
    if (h5ls.isEmpty() || h5dump.isEmpty())
        QSKIP("h5ls/h5dump not installed (Debian package hdf5-tools)");
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    writeExperiment(path, FloatType::F16, 2, 1);
    const auto run = [](const QString &program, const QStringList &args) {
        QProcess p;
        p.start(program, args);
        p.waitForFinished(60000);
        return QString::fromUtf8(p.readAllStandardOutput()) + QString::fromUtf8(p.readAllStandardError());
    };
    const QString file = QString::fromStdString(path.string());
    const QString ls = run(h5ls, {QStringLiteral("-r"), file});
    QVERIFY2(ls.contains(QStringLiteral("/kv/a/layer_000/keys")), qPrintable(ls));
    QVERIFY2(ls.contains(QStringLiteral("/prompts/b/offsets")), qPrintable(ls));
    const QString dump = run(h5dump, {QStringLiteral("-A"), file});
    QVERIFY2(dump.contains(QStringLiteral("ATTRIBUTE \"schema\"")), qPrintable(dump.left(4000)));
    QVERIFY2(dump.contains(QStringLiteral("\"kvwb/2\"")), qPrintable(dump.left(4000)));
    QVERIFY2(dump.contains(QStringLiteral("DATASET \"keys\"")), qPrintable(dump.left(4000)));
    QVERIFY2(dump.contains(QStringLiteral("\"pre_rope\"")), qPrintable(dump.left(4000)));
    // The half type is a real IEEE binary16 float to HDF5, not an opaque blob.
    const QString keys = run(
        h5dump, {QStringLiteral("-H"), QStringLiteral("-d"), QStringLiteral("/kv/a/layer_000/keys"), file});
    QVERIFY2(keys.contains(QStringLiteral("16-bit")) || keys.contains(QStringLiteral("H5T_IEEE_F16")) ||
                 keys.contains(QStringLiteral("SIZE 2")),
             qPrintable(keys));
}

void TestExperimentFile::tokenAlignmentRoundTrip()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    const ModelInfo a = tinyModel('a'), b = tinyModel('b');
    ExperimentOptions o;
    o.syncToDisk = false;
    std::vector<PromptRecord> want;
    {
        ExperimentWriter w = ExperimentWriter::create(path, o, testProvenance(), a, b);
        QVERIFY(w.storesAlignment());
        want.push_back(makePrompt(0, a, b)); // no spans, no alignment (given as ids)
        want.push_back(makePrompt(1, a, b));
        addAlignment(want.back());
        want.push_back(makePrompt(2, a, b, false, 5, 5));
        addAlignment(want.back());
        want.back().alignment.clear(); // spans, but one tokenisation: no alignment
        for (const auto &p : want)
            w.appendPrompt(p);
    }
    {
        ExperimentWriter w = ExperimentWriter::append(path, a, b, false);
        QVERIFY(w.storesAlignment());
        want.push_back(makePrompt(3, a, b));
        addAlignment(want.back());
        w.appendPrompt(want.back());
    }
    {
        const ExperimentReader r = ExperimentReader::open(path);
        QVERIFY(r.storesAlignment());
        QCOMPARE(r.promptCount(), 4);
        for (int i = 0; i < 4; ++i) {
            const QString e = checkPrompt(r, i, want[size_t(i)]);
            QVERIFY2(e.isEmpty(), qPrintable(e));
            const PromptInfo got = r.prompt(i);
            QCOMPARE(got.a.spans, want[size_t(i)].a.spans);
            QCOMPARE(got.b.spans, want[size_t(i)].b.spans);
            QCOMPARE(got.alignment, want[size_t(i)].alignment);
        }
        QVERIFY(r.prompt(0).alignment.empty() && r.prompt(0).b.spans.empty());
        QVERIFY(!r.prompt(1).alignment.empty());
    } // closed: the file is appended to below

    // bad shapes are refused before anything is written
    ExperimentWriter w = ExperimentWriter::append(path, a, b, false);
    PromptRecord bad = makePrompt(4, a, b);
    addAlignment(bad);
    bad.alignment.pop_back();
    QCOMPARE(expectError([&] { w.appendPrompt(bad); }).code(), ErrorCode::Shape);
    addAlignment(bad);
    bad.alignment[1] = int32_t(bad.a.ids.size());
    const Error e = expectError([&] { w.appendPrompt(bad); });
    QCOMPARE(e.code(), ErrorCode::Shape);
    QVERIFY2(std::string(e.what()).find("alignment[1]") != std::string::npos, e.what());
    addAlignment(bad);
    bad.b.spans.pop_back();
    QCOMPARE(expectError([&] { w.appendPrompt(bad); }).code(), ErrorCode::Shape);
    QCOMPARE(w.promptCount(), 4);
}

void TestExperimentFile::tokenAlignmentLegacyAndDamage()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "exp.h5";
    const ModelInfo a = tinyModel('a'), b = tinyModel('b');
    ExperimentOptions o;
    o.syncToDisk = false;
    PromptRecord p = makePrompt(1, a, b);
    addAlignment(p);
    {
        ExperimentWriter w = ExperimentWriter::create(path, o, testProvenance(), a, b);
        w.appendPrompt(p);
    }
    const int64_t tokensB = ExperimentReader::open(path).totalTokens(ModelRole::B);
    // an A index past the prompt's A tokens
    const fs::path damaged = fs::path(dir.path().toStdString()) / "damaged.h5";
    fs::copy_file(path, damaged);
    editDataset1d(damaged, "/prompts/b/align", hsize_t(tokensB), 2, int64_t(p.a.ids.size()));
    {
        const ExperimentReader r = ExperimentReader::open(damaged);
        const Error e = expectError([&] { r.prompt(0); });
        QCOMPARE(e.code(), ErrorCode::Format);
        QVERIFY2(std::string(e.what()).find("/prompts/b/align row 2") != std::string::npos, e.what());
    }
    // shorter than the prompts it should cover
    fs::remove(damaged);
    fs::copy_file(path, damaged);
    editDataset1d(damaged, "/prompts/b/align", hsize_t(tokensB - 1));
    QCOMPARE(expectError([&] { ExperimentReader::open(damaged); }).code(), ErrorCode::Format);
    // the alignment without the spans
    fs::remove(damaged);
    fs::copy_file(path, damaged);
    {
        RawFile f(damaged);
        QVERIFY(H5Ldelete(f.id, "/prompts/a/spans", H5P_DEFAULT) >= 0);
    }
    const Error missing = expectError([&] { ExperimentReader::open(damaged); });
    QCOMPARE(missing.code(), ErrorCode::Format);
    QVERIFY2(std::string(missing.what()).find("/prompts/a/spans") != std::string::npos, missing.what());

    // a file from before alignments: none of the three datasets; it reads, and appends drop them
    {
        RawFile f(path);
        for (const char *name : {"/prompts/a/spans", "/prompts/b/spans", "/prompts/b/align"})
            QVERIFY(H5Ldelete(f.id, name, H5P_DEFAULT) >= 0);
    }
    {
        ExperimentWriter w = ExperimentWriter::append(path, a, b, false);
        QVERIFY(!w.storesAlignment());
        PromptRecord q = makePrompt(2, a, b);
        addAlignment(q);
        QCOMPARE(w.appendPrompt(q), 1);
    }
    const ExperimentReader r = ExperimentReader::open(path);
    QVERIFY(!r.storesAlignment());
    QCOMPARE(r.promptCount(), 2);
    for (int i = 0; i < 2; ++i) {
        const PromptInfo info = r.prompt(i);
        QVERIFY(info.alignment.empty() && info.a.spans.empty() && info.b.spans.empty());
    }
    const QString e = checkPrompt(r, 1, makePrompt(2, a, b));
    QVERIFY2(e.isEmpty(), qPrintable(e));
}

QTEST_GUILESS_MAIN(TestExperimentFile)
#include "tst_experiment_file.moc"
