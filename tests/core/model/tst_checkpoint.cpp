// Checkpoint: HF directories, llama2.c legacy/v1 files, tensor validation, conversion, fingerprints.
#include "core/model/checkpoint.h"
#include "core/model/random_model.h"
#include "core/model/safetensors.h"
#include "core/util/error.h"
#include "core/util/sha256.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <fstream>

using namespace kvwb::core;
namespace fs = std::filesystem;

Q_DECLARE_METATYPE(kvwb::core::ErrorCode)

namespace {

using Weights = std::map<std::string, std::vector<float>>;
using Shapes = std::map<std::string, std::vector<int64_t>>;

using kvwb::test::expectError;

void writeBytes(const fs::path &p, const std::string &bytes)
{
    kvwb::test::writeFile(p, bytes);
}
std::string readBytes(const fs::path &p)
{
    return kvwb::test::readFile(p);
}

// dim 16, hidden 32, 2 layers, 4 heads of 4, 2 KV heads, vocab 11, seq_len 8.
ModelConfig tinyConfig(bool tied)
{
    ModelConfig c;
    c.architecture = "Llama2c";
    c.modelType = "llama2c";
    c.hiddenSize = 16;
    c.intermediateSize = 32;
    c.numLayers = 2;
    c.numHeads = 4;
    c.numKvHeads = 2;
    c.headDim = 4;
    c.vocabSize = 11;
    c.maxPositionEmbeddings = 8;
    c.tieWordEmbeddings = tied;
    return c;
}

Shapes hfShapes(const ModelConfig &c)
{
    const int64_t h = c.hiddenSize, q = int64_t(c.numHeads) * c.headDim,
                  kv = int64_t(c.numKvHeads) * c.headDim, f = c.intermediateSize;
    Shapes s;
    s["model.embed_tokens.weight"] = {c.vocabSize, h};
    s["model.norm.weight"] = {h};
    if (!c.tieWordEmbeddings)
        s["lm_head.weight"] = {c.vocabSize, h};
    for (int i = 0; i < c.numLayers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        s[p + "input_layernorm.weight"] = {h};
        s[p + "post_attention_layernorm.weight"] = {h};
        s[p + "self_attn.q_proj.weight"] = {q, h};
        s[p + "self_attn.k_proj.weight"] = {kv, h};
        s[p + "self_attn.v_proj.weight"] = {kv, h};
        s[p + "self_attn.o_proj.weight"] = {h, q};
        if (c.qkvBias) {
            s[p + "self_attn.q_proj.bias"] = {q};
            s[p + "self_attn.k_proj.bias"] = {kv};
            s[p + "self_attn.v_proj.bias"] = {kv};
        }
        s[p + "mlp.gate_proj.weight"] = {f, h};
        s[p + "mlp.up_proj.weight"] = {f, h};
        s[p + "mlp.down_proj.weight"] = {h, f};
    }
    return s;
}

int64_t numel(const std::vector<int64_t> &shape)
{
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    return n;
}

// Distinct values per tensor so that a misplaced tensor cannot compare equal.
Weights randomWeights(const Shapes &shapes)
{
    Weights w;
    uint32_t state = 12345;
    for (const auto &[name, shape] : shapes) {
        std::vector<float> v(size_t(numel(shape)));
        for (float &x : v) {
            state = state * 1664525u + 1013904223u;
            x = float(int32_t(state >> 8) % 2001 - 1000) / 1000.0f;
        }
        w[name] = std::move(v);
    }
    return w;
}

void writeHfDir(const fs::path &dir, const std::string &configJson, const Shapes &shapes,
                const Weights &weights)
{
    fs::create_directories(dir);
    writeBytes(dir / "config.json", configJson);
    SafetensorsWriter w;
    for (const auto &[name, shape] : shapes)
        w.addF32(name, shape, weights.at(name));
    w.write(dir / "model.safetensors");
}

const char *kTinyHfConfig =
    R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 16,
  "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "vocab_size": 11, "max_position_embeddings": 8, "tie_word_embeddings": false})";

} // namespace

class TestCheckpoint : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    // Phi-3's fused projections are shown split: each view is its row block of the fused tensor.
    void phi3FusedViews()
    {
        QTemporaryDir tmp;
        const std::filesystem::path dir = tmp.path().toStdString() + "/phi3";
        writeRandomHfModel(dir, randomModelPreset("phi3"));
        const Checkpoint ck = Checkpoint::open(dir);
        const ModelConfig &c = ck.config();
        const int64_t h = c.hiddenSize, q = int64_t(c.numHeads) * c.headDim,
                      kv = int64_t(c.numKvHeads) * c.headDim, inter = c.intermediateSize;
        const auto rows = [&](const std::string &name, int64_t first, int64_t count) {
            const std::vector<float> all = toFloatVector(ck.require(name, {}));
            return std::vector<float>(all.begin() + first * h, all.begin() + (first + count) * h);
        };
        const std::string p = "model.layers.1.";
        QCOMPARE(toFloatVector(ck.require(p + "self_attn.q_proj.weight", {q, h})),
                 rows(p + "self_attn.qkv_proj.weight", 0, q));
        QCOMPARE(toFloatVector(ck.require(p + "self_attn.k_proj.weight", {kv, h})),
                 rows(p + "self_attn.qkv_proj.weight", q, kv));
        QCOMPARE(toFloatVector(ck.require(p + "self_attn.v_proj.weight", {kv, h})),
                 rows(p + "self_attn.qkv_proj.weight", q + kv, kv));
        QCOMPARE(toFloatVector(ck.require(p + "mlp.gate_proj.weight", {inter, h})),
                 rows(p + "mlp.gate_up_proj.weight", 0, inter));
        QCOMPARE(toFloatVector(ck.require(p + "mlp.up_proj.weight", {inter, h})),
                 rows(p + "mlp.gate_up_proj.weight", inter, inter));

        // A phi3 config over split (Llama-layout) weights: the fused tensor is named as missing.
        RandomModelSpec split = randomModelPreset("phi3");
        split.config.fusedProjections = false;
        const std::filesystem::path other = tmp.path().toStdString() + "/split";
        writeRandomHfModel(other, split);
        const Error e = expectError([&] { Checkpoint::open(other); });
        QCOMPARE(e.code(), ErrorCode::Shape);
        QVERIFY2(std::string(e.what()).find("model.layers.0.self_attn.qkv_proj.weight' is missing") !=
                     std::string::npos,
                 e.what());
    }

    // A streamed random model (the real-geometry presets' writer) on a small geometry: every tensor
    // the engine needs with its shape and dtype, the same bytes for a seed, other values for
    // another, norms around 1 and matrices at the preset's spread.
    void streamedRandomModel()
    {
        QTemporaryDir tmp;
        const fs::path root = tmp.path().toStdString();
        RandomModelSpec spec = randomModelPreset("qwen3");
        spec.streamed = true;
        writeRandomHfModel(root / "a", spec, "BF16");
        writeRandomHfModel(root / "b", spec, "BF16");
        spec.seed = 2;
        writeRandomHfModel(root / "c", spec, "BF16");
        const std::string a = kvwb::test::readFile(root / "a" / "model.safetensors");
        QVERIFY(a == kvwb::test::readFile(root / "b" / "model.safetensors"));
        QVERIFY(a != kvwb::test::readFile(root / "c" / "model.safetensors"));
        const auto ck = Checkpoint::open(root / "a");
        const ModelConfig &c = ck.config();
        QCOMPARE(c.torchDtype, std::string("bfloat16"));
        const auto q = ck.require("model.layers.1.self_attn.q_proj.weight", {});
        QCOMPARE(q.info->dtype, DType::BF16);
        QCOMPARE(q.info->shape, (std::vector<int64_t>{int64_t(c.numHeads) * c.headDim, c.hiddenSize}));
        const auto norm = toFloatVector(ck.require("model.layers.0.self_attn.k_norm.weight", {}));
        QCOMPARE(int(norm.size()), c.headDim);
        double mean = 0;
        for (float x : norm)
            mean += x / double(norm.size());
        QVERIFY2(std::abs(mean - 1.0) < 0.1, qPrintable(QString::number(mean)));
        const auto up = toFloatVector(ck.require("model.layers.0.mlp.up_proj.weight", {}));
        double sq = 0;
        for (float x : up)
            sq += double(x) * x / double(up.size());
        QVERIFY2(std::abs(std::sqrt(sq) - spec.weightStd) < 0.01, qPrintable(QString::number(std::sqrt(sq))));
    }

    void llama2cRoundTrip_data()
    {
        QTest::addColumn<int>("version");
        QTest::addColumn<bool>("tied");
        QTest::newRow("legacy shared") << 0 << true;
        QTest::newRow("legacy separate classifier") << 0 << false;
        QTest::newRow("v1 shared") << 1 << true;
        QTest::newRow("v1 separate classifier") << 1 << false;
    }
    void llama2cRoundTrip()
    {
        QFETCH(int, version);
        QFETCH(bool, tied);
        QTemporaryDir tmp;
        const fs::path bin = fs::path(tmp.path().toStdString()) / "model.bin";
        const ModelConfig cfg = tinyConfig(tied);
        const Shapes shapes = hfShapes(cfg);
        const Weights weights = randomWeights(shapes);
        writeLlama2c(bin, cfg, weights, version);

        const Checkpoint ck = Checkpoint::open(bin);
        QCOMPARE(ck.format(), version == 0 ? CheckpointFormat::Llama2cLegacy : CheckpointFormat::Llama2cV1);
        const ModelConfig &c = ck.config();
        QCOMPARE(c.modelType, std::string("llama2c"));
        QCOMPARE(c.architecture, std::string("Llama2c"));
        QCOMPARE(c.ropeLayout, RopeLayout::Interleaved);
        QCOMPARE(c.hiddenSize, 16);
        QCOMPARE(c.intermediateSize, 32);
        QCOMPARE(c.numLayers, 2);
        QCOMPARE(c.numHeads, 4);
        QCOMPARE(c.numKvHeads, 2);
        QCOMPARE(c.headDim, 4);
        QCOMPARE(c.vocabSize, 11);
        QCOMPARE(c.maxPositionEmbeddings, 8);
        QCOMPARE(c.tieWordEmbeddings, tied);
        QCOMPARE(c.ropeTheta, 10000.0);
        QCOMPARE(c.rmsNormEps, 1e-5);
        QCOMPARE(c.bosTokenId, std::optional<int>(1));
        QCOMPARE(c.eosTokenIds, std::vector<int>{2});

        std::vector<std::string> expectedNames;
        uint64_t bytes = 0;
        for (const auto &[name, shape] : shapes) {
            expectedNames.push_back(name);
            bytes += uint64_t(numel(shape)) * 4;
            const TensorRef ref = ck.require(name, shape);
            QCOMPARE(ref.info->dtype, DType::F32);
            QCOMPARE(ref.file, bin);
            QVERIFY2(toFloatVector(ref) == weights.at(name), name.c_str());
        }
        QCOMPARE(ck.tensorNames(), expectedNames);
        QCOMPARE(ck.contains("lm_head.weight"), !tied);
        QCOMPARE(ck.weightBytes(), bytes);
        const uint64_t header = version == 0 ? 28 : 256;
        const uint64_t freqCis = version == 0 ? 8 * 4 * 4 : 0; // 2 arrays of seq_len * head_size / 2 floats
        QCOMPARE(uint64_t(fs::file_size(bin)), header + bytes + freqCis);
    }

    // Offsets checked against a hand-built file, independent of writeLlama2c: float k of the file
    // holds the value k, so every tensor's first element says where the reader found it.
    void llama2cLegacyHandBuiltOffsets()
    {
        QTemporaryDir tmp;
        const fs::path bin = fs::path(tmp.path().toStdString()) / "hand.bin";
        // dim 4, hidden 8, 1 layer, 2 heads (head size 2), 1 kv head, vocab 3 (negative: separate), seq 2.
        const int32_t header[7] = {4, 8, 1, 2, 1, -3, 2};
        const int floats = 3 * 4 + 4 + 16 + 8 + 8 + 16 + 4 + 32 + 32 + 32 + 4 + 2 + 2 + 3 * 4;
        std::string bytes(reinterpret_cast<const char *>(header), 28);
        for (int k = 0; k < floats; ++k) {
            const float v = float(k);
            bytes.append(reinterpret_cast<const char *>(&v), 4);
        }
        writeBytes(bin, bytes);
        const Checkpoint ck = Checkpoint::open(bin);
        QVERIFY(!ck.config().tieWordEmbeddings);
        const auto first = [&](const std::string &name) { return toFloatVector(ck.require(name, {}))[0]; };
        QCOMPARE(first("model.embed_tokens.weight"), 0.0f);
        QCOMPARE(first("model.layers.0.input_layernorm.weight"), 12.0f);
        QCOMPARE(first("model.layers.0.self_attn.q_proj.weight"), 16.0f);
        QCOMPARE(first("model.layers.0.self_attn.k_proj.weight"), 32.0f);
        QCOMPARE(first("model.layers.0.self_attn.v_proj.weight"), 40.0f);
        QCOMPARE(first("model.layers.0.self_attn.o_proj.weight"), 48.0f);
        QCOMPARE(first("model.layers.0.post_attention_layernorm.weight"), 64.0f);
        QCOMPARE(first("model.layers.0.mlp.gate_proj.weight"), 68.0f);
        QCOMPARE(first("model.layers.0.mlp.down_proj.weight"), 100.0f);
        QCOMPARE(first("model.layers.0.mlp.up_proj.weight"), 132.0f);
        QCOMPARE(first("model.norm.weight"), 164.0f);
        QCOMPARE(first("lm_head.weight"), 172.0f); // after 2 + 2 freq_cis floats
        QCOMPARE(ck.require("model.layers.0.self_attn.k_proj.weight", {}).info->shape,
                 (std::vector<int64_t>{2, 4}));
    }

    void llama2cV1HandBuiltOffsets()
    {
        QTemporaryDir tmp;
        const fs::path bin = fs::path(tmp.path().toStdString()) / "hand1.bin";
        const uint32_t magic = 0x616b3432;
        const int32_t version = 1;
        const int32_t params[7] = {4, 8, 1, 2, 1, 3, 2};
        std::string bytes(256, '\0');
        std::memcpy(bytes.data(), &magic, 4);
        std::memcpy(bytes.data() + 4, &version, 4);
        std::memcpy(bytes.data() + 8, params, 28);
        bytes[36] = 1;                                     // shared classifier
        QCOMPARE(bytes.substr(0, 4), std::string("24ka")); // "ak42" as a little-endian uint32
        const int floats = 4 + 4 + 4 + 12 + 16 + 8 + 8 + 16 + 32 + 32 + 32;
        for (int k = 0; k < floats; ++k) {
            const float v = float(k);
            bytes.append(reinterpret_cast<const char *>(&v), 4);
        }
        writeBytes(bin, bytes);
        const Checkpoint ck = Checkpoint::open(bin);
        QVERIFY(ck.config().tieWordEmbeddings);
        QVERIFY(!ck.contains("lm_head.weight"));
        const auto first = [&](const std::string &name) { return toFloatVector(ck.require(name, {}))[0]; };
        QCOMPARE(first("model.layers.0.input_layernorm.weight"), 0.0f);
        QCOMPARE(first("model.layers.0.post_attention_layernorm.weight"), 4.0f);
        QCOMPARE(first("model.norm.weight"), 8.0f);
        QCOMPARE(first("model.embed_tokens.weight"), 12.0f);
        QCOMPARE(first("model.layers.0.self_attn.q_proj.weight"), 24.0f);
        QCOMPARE(first("model.layers.0.self_attn.k_proj.weight"), 40.0f);
        QCOMPARE(first("model.layers.0.self_attn.v_proj.weight"), 48.0f);
        QCOMPARE(first("model.layers.0.self_attn.o_proj.weight"), 56.0f);
        QCOMPARE(first("model.layers.0.mlp.gate_proj.weight"), 72.0f);
        QCOMPARE(first("model.layers.0.mlp.down_proj.weight"), 104.0f);
        QCOMPARE(first("model.layers.0.mlp.up_proj.weight"), 136.0f);
    }

    void llama2cBadFiles_data()
    {
        QTest::addColumn<QString>("mutation");
        QTest::addColumn<ErrorCode>("code");
        QTest::addColumn<QString>("phrase");
        QTest::newRow("truncated header")
            << "truncate-header" << ErrorCode::Format << "shorter than the 28-byte";
        QTest::newRow("truncated weights") << "truncate-weights" << ErrorCode::Format << "but the file has";
        QTest::newRow("extra bytes") << "append" << ErrorCode::Format << "bytes but the file has";
        QTest::newRow("zero dim") << "zero-dim" << ErrorCode::Format << "dim is 0";
        QTest::newRow("heads do not divide dim")
            << "bad-heads" << ErrorCode::Format << "not divisible by n_heads";
        QTest::newRow("v1 version 2") << "v2" << ErrorCode::Unsupported << "version 2";
        QTest::newRow("v1 truncated header") << "v1-short" << ErrorCode::Format << "256-byte";
        QTest::newRow("a text file") << "text" << ErrorCode::Format
                                     << "not a model: the file starts with text";
    }
    void llama2cBadFiles()
    {
        QFETCH(QString, mutation);
        QFETCH(ErrorCode, code);
        QFETCH(QString, phrase);
        QTemporaryDir tmp;
        const fs::path bin = fs::path(tmp.path().toStdString()) / "bad.bin";
        const ModelConfig cfg = tinyConfig(true);
        const bool v1 = mutation.startsWith("v");
        writeLlama2c(bin, cfg, randomWeights(hfShapes(cfg)), v1 ? 1 : 0);
        std::string bytes = readBytes(bin);
        const size_t full = bytes.size();
        const int32_t zero = 0, two = 2, five = 5;
        if (mutation == "truncate-header")
            bytes.resize(20);
        else if (mutation == "truncate-weights")
            bytes.resize(bytes.size() - 4);
        else if (mutation == "append")
            bytes += "abcd";
        else if (mutation == "zero-dim")
            std::memcpy(bytes.data(), &zero, 4);
        else if (mutation == "bad-heads")
            std::memcpy(bytes.data() + 12, &five, 4);
        else if (mutation == "v2")
            std::memcpy(bytes.data() + 4, &two, 4);
        else if (mutation == "v1-short")
            bytes.resize(100);
        else if (mutation == "text")
            bytes = "These are my notes about the models I want to compare.\nSee README.\n";
        writeBytes(bin, bytes);
        const Error e = expectError([&] { Checkpoint::open(bin); });
        const std::string msg = e.what();
        QVERIFY2(e.code() == code, msg.c_str());
        QVERIFY2(msg.rfind(bin.string() + ": ", 0) == 0, msg.c_str());
        QVERIFY2(msg.find(phrase.toStdString()) != std::string::npos, msg.c_str());
        if (mutation == "append")
            QVERIFY2(msg.find("implies " + std::to_string(full) + " bytes but the file has " +
                              std::to_string(full + 4) + " bytes") != std::string::npos,
                     msg.c_str());
    }

    void hfDirectory()
    {
        QTemporaryDir tmp;
        const fs::path dir = fs::path(tmp.path().toStdString()) / "hf";
        const ModelConfig cfg = ModelConfig::fromHfJsonText(kTinyHfConfig, "t");
        const Shapes shapes = hfShapes(cfg);
        const Weights weights = randomWeights(shapes);
        writeHfDir(dir, kTinyHfConfig, shapes, weights);
        for (const fs::path &p : {dir, dir / "config.json", dir / "model.safetensors"}) {
            const Checkpoint ck = Checkpoint::open(p);
            QCOMPARE(ck.format(), CheckpointFormat::HfSafetensors);
            QCOMPARE(ck.config(), cfg);
            QCOMPARE(ck.tensorNames().size(), shapes.size());
            QCOMPARE(toFloatVector(ck.require("lm_head.weight", {11, 16})), weights.at("lm_head.weight"));
        }
        const Checkpoint ck = Checkpoint::open(dir);
        QVERIFY(!ck.tokenizerPath());
        writeBytes(dir / "tokenizer.model", "x");
        QCOMPARE(ck.tokenizerPath(), std::optional<fs::path>(dir / "tokenizer.model"));
        writeBytes(dir / "tokenizer.json", "{}");
        QCOMPARE(ck.tokenizerPath(), std::optional<fs::path>(dir / "tokenizer.json"));

        const Error e = expectError([&] { ck.require("model.layers.0.self_attn.q_proj.weight", {16, 17}); });
        QCOMPARE(e.code(), ErrorCode::Shape);
        QVERIFY2(std::string(e.what()).find("has shape [16, 16], expected [16, 17]") != std::string::npos,
                 e.what());
    }

    void hfSharded()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        const ModelConfig cfg = ModelConfig::fromHfJsonText(kTinyHfConfig, "t");
        const Shapes shapes = hfShapes(cfg);
        const Weights weights = randomWeights(shapes);
        writeBytes(dir / "config.json", kTinyHfConfig);
        SafetensorsWriter a, b;
        std::string index = R"({"weight_map": {)";
        bool firstEntry = true;
        for (const auto &[name, shape] : shapes) {
            const bool inA = name.find("layers.1.") == std::string::npos;
            (inA ? a : b).addF32(name, shape, weights.at(name));
            index += (firstEntry ? "\"" : ",\"") + name + "\": \"" +
                     (inA ? "a.safetensors" : "b.safetensors") + "\"";
            firstEntry = false;
        }
        index += "}}";
        a.write(dir / "a.safetensors");
        b.write(dir / "b.safetensors");
        writeBytes(dir / "model.safetensors.index.json", index);
        const Checkpoint ck = Checkpoint::open(dir);
        QCOMPARE(ck.require("model.layers.1.mlp.up_proj.weight", {32, 16}).file, dir / "b.safetensors");
        QCOMPARE(ck.fingerprint(), sha256Files({dir / "a.safetensors", dir / "b.safetensors"}));
    }

    // Gemma's extra norms are required tensors: a gemma3_text config over weights without them
    // names the first one missing.
    void gemmaNorms_data()
    {
        QTest::addColumn<bool>("sandwich");
        QTest::addColumn<bool>("qkNorm");
        QTest::addColumn<QString>("missing");
        QTest::newRow("complete") << true << true << "";
        QTest::newRow("no feed-forward norms")
            << false << true << "model.layers.0.pre_feedforward_layernorm.weight";
        QTest::newRow("no q/k norms") << true << false << "model.layers.0.self_attn.q_norm.weight";
    }
    void gemmaNorms()
    {
        QFETCH(bool, sandwich);
        QFETCH(bool, qkNorm);
        QFETCH(QString, missing);
        QTemporaryDir tmp;
        const std::filesystem::path dir = tmp.path().toStdString() + "/gemma3";
        RandomModelSpec spec = randomModelPreset("gemma3");
        spec.config.sandwichNorms = sandwich; // what the weights hold; config.json says gemma3_text
        spec.config.qkNorm = qkNorm;
        writeRandomHfModel(dir, spec);
        if (missing.isEmpty()) {
            const Checkpoint ck = Checkpoint::open(dir);
            QVERIFY(ck.contains("model.layers.1.post_feedforward_layernorm.weight"));
            int64_t stored = 0; // parameterCount counts exactly the tensors a Gemma 3 checkpoint holds
            for (const std::string &name : ck.tensorNames())
                stored += numel(ck.require(name, {}).info->shape);
            QCOMPARE(ck.config().parameterCount(), stored);
            return;
        }
        const Error e = expectError([&] { Checkpoint::open(dir); });
        QCOMPARE(e.code(), ErrorCode::Shape);
        QVERIFY2(std::string(e.what()).find(missing.toStdString() + "' is missing") != std::string::npos,
                 e.what());
    }

    void validateTensors_data()
    {
        QTest::addColumn<QString>("config");
        QTest::addColumn<QString>("fault"); // "shape:<name>", "drop:<name>", "dtype:<name>", "" for none
        QTest::addColumn<QString>("phrase");
        const QString llama = kTinyHfConfig;
        const QString tied =
            QString(kTinyHfConfig).replace("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
        const QString qwen = QString(kTinyHfConfig)
                                 .replace("\"llama\"", "\"qwen2\"")
                                 .replace("LlamaForCausalLM", "Qwen2ForCausalLM");
        QTest::newRow("complete") << llama << ""
                                  << "";
        QTest::newRow("tied ignores extra lm_head") << tied << ""
                                                    << "";
        QTest::newRow("misshapen k_proj")
            << llama << "shape:model.layers.1.self_attn.k_proj.weight"
            << "tensor 'model.layers.1.self_attn.k_proj.weight' has shape [16, 16], expected [8, 16]";
        QTest::newRow("missing o_proj") << llama << "drop:model.layers.0.self_attn.o_proj.weight"
                                        << "tensor 'model.layers.0.self_attn.o_proj.weight' is missing";
        QTest::newRow("missing lm_head") << llama << "drop:lm_head.weight"
                                         << "tensor 'lm_head.weight' is missing";
        QTest::newRow("integer dtype") << llama << "dtype:model.norm.weight"
                                       << "tensor 'model.norm.weight' has dtype I32";
        QTest::newRow("qwen2 without q bias") << qwen << "drop:model.layers.0.self_attn.q_proj.bias"
                                              << "tensor 'model.layers.0.self_attn.q_proj.bias' is missing";
        QTest::newRow("qwen2 complete") << qwen << ""
                                        << "";
    }
    void validateTensors()
    {
        QFETCH(QString, config);
        QFETCH(QString, fault);
        QFETCH(QString, phrase);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        ModelConfig cfg = ModelConfig::fromHfJsonText(config.toStdString(), "t");
        // Tied checkpoints written by HF often still carry lm_head.weight: include it to prove it is ignored.
        ModelConfig shapesFor = cfg;
        shapesFor.tieWordEmbeddings = false;
        Shapes shapes = hfShapes(shapesFor);
        const std::string name = fault.section(':', 1).toStdString();
        if (fault.startsWith("shape:"))
            shapes[name] = {16, 16};
        if (fault.startsWith("drop:"))
            shapes.erase(name);
        const Weights weights = randomWeights(shapes);
        fs::create_directories(dir);
        writeBytes(dir / "config.json", config.toStdString());
        SafetensorsWriter w;
        for (const auto &[n, shape] : shapes) {
            if (fault.startsWith("dtype:") && n == name) {
                const std::vector<int32_t> ints(size_t(numel(shape)), 1);
                w.add(n, DType::I32, shape, std::as_bytes(std::span(ints)));
            } else {
                w.addF32(n, shape, weights.at(n));
            }
        }
        w.write(dir / "model.safetensors");
        if (fault.isEmpty()) {
            const Checkpoint ck = Checkpoint::open(dir);
            QCOMPARE(ck.config().qkvBias, cfg.qkvBias);
            return;
        }
        const Error e = expectError([&] { Checkpoint::open(dir); });
        const std::string msg = e.what();
        QCOMPARE(e.code(), ErrorCode::Shape);
        QVERIFY2(msg.find((dir / "model.safetensors").string() + ": ") == 0, msg.c_str());
        QVERIFY2(msg.find(phrase.toStdString()) != std::string::npos, msg.c_str());
    }

    // q/k rows of an interleaved checkpoint become HF rotate-half order: per head, new row j < d/2
    // is old row 2j and new row d/2 + j is old row 2j + 1, i.e. [0, 2, 1, 3] for head_dim 4.
    void convertToHfPermutes()
    {
        QTemporaryDir tmp;
        const fs::path root = tmp.path().toStdString();
        const ModelConfig cfg = tinyConfig(true);
        const Shapes shapes = hfShapes(cfg);
        Weights weights = randomWeights(shapes);
        for (int layer = 0; layer < 2; ++layer) {
            for (const char *proj : {"q_proj", "k_proj"}) {
                auto &w = weights["model.layers." + std::to_string(layer) + ".self_attn." + proj + ".weight"];
                for (size_t i = 0; i < w.size(); ++i)
                    w[i] = float((i / 16) * 100 + i % 16 + layer * 10000); // row * 100 + column
            }
        }
        writeLlama2c(root / "m.bin", cfg, weights, 0);
        writeBytes(root / "tokenizer.bin", "fake tokenizer");
        const Checkpoint src = Checkpoint::open(root / "m.bin");
        convertToHf(src, root / "hf");
        QVERIFY(fs::exists(root / "hf" / "tokenizer.bin"));
        QCOMPARE(readBytes(root / "hf" / "tokenizer.bin"), std::string("fake tokenizer"));

        const Checkpoint hf = Checkpoint::open(root / "hf");
        QCOMPARE(hf.config().modelType, std::string("llama"));
        QCOMPARE(hf.config().architecture, std::string("LlamaForCausalLM"));
        QCOMPARE(hf.config().ropeLayout, RopeLayout::RotateHalf);
        QVERIFY(hf.config().tieWordEmbeddings);
        QVERIFY(!hf.contains("lm_head.weight"));
        QCOMPARE(hf.config().numKvHeads, 2);
        const std::vector<int> qOrder{0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
        const std::vector<int> kOrder{0, 2, 1, 3, 4, 6, 5, 7};
        for (int layer = 0; layer < 2; ++layer) {
            const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
            const auto q = toFloatVector(hf.require(p + "q_proj.weight", {16, 16}));
            const auto k = toFloatVector(hf.require(p + "k_proj.weight", {8, 16}));
            for (int r = 0; r < 16; ++r)
                for (int col = 0; col < 16; ++col)
                    QCOMPARE(q[size_t(r * 16 + col)], float(qOrder[size_t(r)] * 100 + col + layer * 10000));
            for (int r = 0; r < 8; ++r)
                QCOMPARE(k[size_t(r * 16 + 3)], float(kOrder[size_t(r)] * 100 + 3 + layer * 10000));
            // v and o are untouched.
            QCOMPARE(toFloatVector(hf.require(p + "v_proj.weight", {})), weights.at(p + "v_proj.weight"));
            QCOMPARE(toFloatVector(hf.require(p + "o_proj.weight", {})), weights.at(p + "o_proj.weight"));
        }
        QCOMPARE(toFloatVector(hf.require("model.embed_tokens.weight", {11, 16})),
                 weights.at("model.embed_tokens.weight"));
    }

    void convertToHfSeparateClassifier()
    {
        QTemporaryDir tmp;
        const fs::path root = tmp.path().toStdString();
        const ModelConfig cfg = tinyConfig(false);
        const Weights weights = randomWeights(hfShapes(cfg));
        writeLlama2c(root / "m.bin", cfg, weights, 1);
        convertToHf(Checkpoint::open(root / "m.bin"), root / "hf");
        const Checkpoint hf = Checkpoint::open(root / "hf");
        QVERIFY(!hf.config().tieWordEmbeddings);
        QCOMPARE(toFloatVector(hf.require("lm_head.weight", {11, 16})), weights.at("lm_head.weight"));
        QVERIFY(!hf.tokenizerPath());
    }

    void fingerprint()
    {
        QTemporaryDir tmp;
        const fs::path bin = fs::path(tmp.path().toStdString()) / "m.bin";
        const ModelConfig cfg = tinyConfig(true);
        writeLlama2c(bin, cfg, randomWeights(hfShapes(cfg)), 0);
        const std::string a = Checkpoint::open(bin).fingerprint();
        const Checkpoint ck = Checkpoint::open(bin);
        QCOMPARE(ck.fingerprint(), a);
        QCOMPARE(ck.fingerprint(), a); // cached
        QCOMPARE(a, sha256Files({bin}));
        QCOMPARE(a.size(), size_t(64));
        std::string bytes = readBytes(bin);
        bytes[bytes.size() / 2] ^= 0x01; // one bit of one weight
        writeBytes(bin, bytes);
        QVERIFY(Checkpoint::open(bin).fingerprint() != a);
    }

    void writeLlama2cRejectsBadInput()
    {
        QTemporaryDir tmp;
        const fs::path bin = fs::path(tmp.path().toStdString()) / "m.bin";
        const ModelConfig cfg = tinyConfig(true);
        Weights w = randomWeights(hfShapes(cfg));
        w["model.layers.1.mlp.up_proj.weight"].pop_back();
        Error e = expectError([&] { writeLlama2c(bin, cfg, w, 0); });
        QCOMPARE(e.code(), ErrorCode::InvalidArgument);
        QVERIFY2(std::string(e.what()).find("'model.layers.1.mlp.up_proj.weight'") != std::string::npos,
                 e.what());
        QVERIFY(!fs::exists(bin));
        e = expectError([&] { writeLlama2c(bin, cfg, randomWeights(hfShapes(cfg)), 2); });
        QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    }

    void missingPath()
    {
        const Error e = expectError([] { Checkpoint::open("/nonexistent/kvwb/model.bin"); });
        QCOMPARE(e.code(), ErrorCode::Io);
        QVERIFY(std::string(e.what()).find("/nonexistent/kvwb/model.bin") != std::string::npos);
    }

    void formatNames()
    {
        QCOMPARE(std::string(checkpointFormatName(CheckpointFormat::HfSafetensors)),
                 std::string("hf-safetensors"));
        QCOMPARE(std::string(checkpointFormatName(CheckpointFormat::Llama2cLegacy)),
                 std::string("llama2c-legacy"));
        QCOMPARE(std::string(checkpointFormatName(CheckpointFormat::Llama2cV1)), std::string("llama2c-v1"));
    }
};

QTEST_GUILESS_MAIN(TestCheckpoint)
#include "tst_checkpoint.moc"
