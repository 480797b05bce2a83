#include "core/model/random_model.h"

#include "core/model/byte_level_bpe_json.h"
#include "core/model/dtype.h"
#include "core/model/safetensors.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

namespace kvwb::core {

namespace {

ModelConfig baseConfig()
{
    ModelConfig c;
    c.architecture = "LlamaForCausalLM";
    c.modelType = "llama";
    c.hiddenSize = 64;
    c.intermediateSize = 160;
    c.numLayers = 2;
    c.numHeads = 4;
    c.numKvHeads = 4;
    c.headDim = 16;
    c.vocabSize = 300;
    c.maxPositionEmbeddings = 256;
    c.rmsNormEps = 1e-5;
    c.ropeTheta = 10000.0;
    c.bosTokenId = 256;
    c.eosTokenIds = {257};
    c.torchDtype = "float32";
    return c;
}

// GPT-2's reversible byte -> printable code point table.
std::vector<char32_t> bytesToUnicode()
{
    std::vector<char32_t> table(256);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        table[size_t(b)] = printable ? char32_t(b) : char32_t(256 + n++);
    }
    return table;
}

std::string utf8(char32_t c)
{
    std::string s;
    if (c < 0x80) {
        s += char(c);
    } else if (c < 0x800) {
        s += char(0xc0 | (c >> 6));
        s += char(0x80 | (c & 0x3f));
    } else {
        s += char(0xe0 | (c >> 12));
        s += char(0x80 | ((c >> 6) & 0x3f));
        s += char(0x80 | (c & 0x3f));
    }
    return s;
}

// Qwen3: q/k norms, head_dim given and != hidden / heads (as in every Qwen3), no bias. The -b variant
// (b) is a wider, deeper member of the family with another KV geometry, for cross-model pairs (as
// Qwen3 14B -> 32B).
void applyQwen3Preset(ModelConfig &c, bool b)
{
    c.architecture = "Qwen3ForCausalLM";
    c.modelType = "qwen3";
    c.qkNorm = true;
    c.hiddenSize = b ? 96 : 64;
    c.numLayers = b ? 3 : 2;
    c.numHeads = 4;
    c.numKvHeads = 2;
    c.headDim = b ? 32 : 24;
    c.intermediateSize = b ? 192 : 128;
    c.ropeTheta = 1000000.0;
    c.rmsNormEps = 1e-6;
}

// Phi-3: fused qkv_proj and gate_up_proj, no bias, full RoPE; with LongRoPE when longrope is set.
void applyPhi3Preset(ModelConfig &c, bool longrope)
{
    c.architecture = "Phi3ForCausalLM";
    c.modelType = "phi3";
    c.fusedProjections = true;
    c.numKvHeads = 2;
    if (longrope) {
        // Phi-3-mini-128k's LongRoPE shrunk: an original context of 16 of 256 positions (factor
        // 16, attention factor sqrt(1 + ln 16 / ln 16) = sqrt 2), divisors growing with the
        // wavelength as the released ones do (short 1..1.44, long 1..8.44; exact in f32 for GGUF).
        c.ropeScaling.type = "longrope";
        c.ropeScaling.originalMaxPositionEmbeddings = 16;
        c.ropeScaling.factor = 16.0;
        c.ropeScaling.attentionFactor = std::sqrt(2.0);
        for (int i = 0; i < c.headDim / 2; ++i) {
            c.ropeScaling.shortFactor.push_back(1.0 + i / 16.0);
            c.ropeScaling.longFactor.push_back(1.0 + 1.0625 * i);
        }
    }
}

// Gemma 2: (1 + w) norms, scaled embeddings, GeGLU, the four norms per layer, soft-capping at
// Gemma 2's 50 / 30, alternating sliding layers (0 and 2 slide, 1 is global) with a window of 8
// tokens so that the test prompts cross it, query_pre_attn_scalar = hidden / heads (as Gemma 2 27B)
// != head_dim, tied embeddings.
void applyGemma2Preset(ModelConfig &c)
{
    c.architecture = "Gemma2ForCausalLM";
    c.modelType = "gemma2";
    c.numLayers = 3;
    c.numKvHeads = 2;
    c.headDim = 24;
    c.intermediateSize = 128;
    c.rmsNormEps = 1e-6;
    c.tieWordEmbeddings = true;
    c.unitOffsetNorm = true;
    c.scaleEmbeddings = true;
    c.sandwichNorms = true;
    c.activation = MlpActivation::GeluTanh;
    c.queryPreAttnScalar = 16.0;
    c.attnLogitSoftcap = 50.0;
    c.finalLogitSoftcap = 30.0;
    c.slidingWindow = 8;
    c.layerAttention = {LayerAttention::Sliding, LayerAttention::Full, LayerAttention::Sliding};
}

// Gemma 3: as Gemma 2 plus q/k norms, without soft-capping; sliding layers use
// rope_local_base_freq (10000), global ones rope_theta (1e6). gemma3 has 2 layers (sliding,
// global: sliding_window_pattern 2), MQA with head_dim 32 and query_pre_attn_scalar = head_dim (as
// Gemma 3 1B); gemma3-b (b) is wider and deeper with another KV geometry (4 layers, pattern 3, 2 kv
// heads of 16, query_pre_attn_scalar = hidden / heads as 27B) and linear RoPE scaling 8 on its
// global layers (as 4B and up), for cross-model pairs.
void applyGemma3Preset(ModelConfig &c, bool b)
{
    c.architecture = "Gemma3ForCausalLM";
    c.modelType = "gemma3_text";
    c.hiddenSize = b ? 96 : 64;
    c.numLayers = b ? 4 : 2;
    c.numHeads = 4;
    c.numKvHeads = b ? 2 : 1;
    c.headDim = b ? 16 : 32;
    c.intermediateSize = b ? 192 : 128;
    c.rmsNormEps = 1e-6;
    c.ropeTheta = 1000000.0;
    c.ropeLocalTheta = 10000.0;
    if (b) {
        c.ropeScaling.type = "linear";
        c.ropeScaling.factor = 8.0;
    }
    c.tieWordEmbeddings = true;
    c.unitOffsetNorm = true;
    c.scaleEmbeddings = true;
    c.sandwichNorms = true;
    c.qkNorm = true;
    c.activation = MlpActivation::GeluTanh;
    c.queryPreAttnScalar = b ? 24.0 : 32.0;
    c.slidingWindow = b ? 12 : 8;
    for (int l = 0; l < c.numLayers; ++l)
        c.layerAttention.push_back((l + 1) % (b ? 3 : 2) != 0 ? LayerAttention::Sliding
                                                              : LayerAttention::Full);
}

// SmolLM-135M's geometry (134.5M parameters): 30 layers, hidden 576, 9 heads and 3 kv heads of 64,
// intermediate 1536, vocab 49152, tied embeddings; for engine speed against llama.cpp on a
// memory-bound model (docs/engine.md). The byte tokenizer names 258 ids.
void apply135mPreset(RandomModelSpec &s)
{
    ModelConfig &c = s.config;
    c.hiddenSize = 576;
    c.intermediateSize = 1536;
    c.numLayers = 30;
    c.numHeads = 9;
    c.numKvHeads = 3;
    c.headDim = 64;
    c.vocabSize = 49152;
    c.maxPositionEmbeddings = 2048;
    c.tieWordEmbeddings = true;
    s.weightStd = 0.02;
}

// Qwen3-0.6B, Qwen3-1.7B and Qwen2.5-3B as their config.json files have them (tied embeddings,
// vocabulary 151,936; Qwen2.5: q/k/v bias and two KV heads; Qwen3: q/k norms).
void applyReleasedQwenPreset(RandomModelSpec &s, const std::string &name)
{
    ModelConfig &c = s.config;
    const bool q25 = name == "qwen2.5-3b", small = name == "qwen3-0.6b";
    c.architecture = q25 ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM";
    c.modelType = q25 ? "qwen2" : "qwen3";
    c.qkNorm = !q25;
    c.qkvBias = q25;
    c.hiddenSize = small ? 1024 : 2048;
    c.intermediateSize = small ? 3072 : q25 ? 11008 : 6144;
    c.numLayers = q25 ? 36 : 28;
    c.numHeads = 16;
    c.numKvHeads = q25 ? 2 : 8;
    c.headDim = 128;
    c.vocabSize = 151936;
    c.maxPositionEmbeddings = q25 ? 32768 : 40960;
    c.ropeTheta = 1000000.0;
    c.rmsNormEps = 1e-6;
    c.tieWordEmbeddings = true;
    s.weightStd = 0.02;
    s.streamed = true;
}

// Llama 3.2 1B / 3B (tied embeddings, RoPE scaled by 32) and Llama 3.1 8B (by 8), as their
// config.json files have them: vocabulary 128,256, 8 KV heads, context 131,072.
void applyReleasedLlamaPreset(RandomModelSpec &s, const std::string &name)
{
    ModelConfig &c = s.config;
    const bool one = name == "llama3.2-1b", eight = name == "llama3.1-8b";
    c.hiddenSize = one ? 2048 : eight ? 4096 : 3072;
    c.intermediateSize = eight ? 14336 : 8192;
    c.numLayers = one ? 16 : eight ? 32 : 28;
    c.numHeads = one ? 32 : eight ? 32 : 24;
    c.numKvHeads = 8;
    c.headDim = one ? 64 : 128;
    c.vocabSize = 128256;
    c.maxPositionEmbeddings = 131072;
    c.ropeTheta = 500000.0;
    c.ropeScaling.type = "llama3";
    c.ropeScaling.factor = eight ? 8.0 : 32.0;
    c.ropeScaling.lowFreqFactor = 1.0;
    c.ropeScaling.highFreqFactor = 4.0;
    c.ropeScaling.originalMaxPositionEmbeddings = 8192;
    c.rmsNormEps = 1e-5;
    c.tieWordEmbeddings = !eight;
    s.weightStd = 0.02;
    s.streamed = true;
}

// The demo pair (projects/demo): same tokenizer, different KV geometry. A (a) is small and fast
// (hidden 128, 4 layers, 4 heads, 2 kv heads of 32: 0.9M parameters); B is wider and deeper (hidden
// 256, 6 layers, 4 heads, 2 kv heads of 64: 3.8M). Tied embeddings and bf16 storage keep B under
// 8 MB on disk (7.6 MB).
void applyDemoPreset(ModelConfig &c, bool a)
{
    c.hiddenSize = a ? 128 : 256;
    c.numLayers = a ? 4 : 6;
    c.numHeads = 4;
    c.numKvHeads = 2;
    c.headDim = a ? 32 : 64;
    c.intermediateSize = a ? 384 : 512;
    c.vocabSize = 1024;
    c.maxPositionEmbeddings = 512;
    c.tieWordEmbeddings = true;
    c.bosTokenId = 1;
    c.eosTokenIds = {2};
}

} // namespace

std::vector<std::string> randomModelPresetNames()
{
    return {"tiny",          "gqa",         "qwen2",       "qwen3",      "qwen3-b",    "phi3",
            "phi3-longrope", "gemma2",      "gemma3",      "gemma3-b",   "smollm",     "llama3",
            "bias",          "10m",         "135m",        "demo-a",     "demo-b",     "qwen3-0.6b",
            "qwen3-1.7b",    "llama3.2-1b", "llama3.2-3b", "qwen2.5-3b", "llama3.1-8b"};
}

RandomModelSpec randomModelPreset(const std::string &name)
{
    RandomModelSpec s;
    s.config = baseConfig();
    ModelConfig &c = s.config;
    if (name == "tiny") {
        // defaults
    } else if (name == "gqa") {
        c.numKvHeads = 2;
        c.numLayers = 3;
    } else if (name == "qwen2") {
        c.architecture = "Qwen2ForCausalLM";
        c.modelType = "qwen2";
        c.numKvHeads = 2;
        c.qkvBias = true;
        c.ropeTheta = 1000000.0;
        c.rmsNormEps = 1e-6;
    } else if (name == "qwen3" || name == "qwen3-b") {
        applyQwen3Preset(c, name == "qwen3-b");
    } else if (name == "phi3" || name == "phi3-longrope") {
        applyPhi3Preset(c, name == "phi3-longrope");
    } else if (name == "gemma2") {
        applyGemma2Preset(c);
    } else if (name == "gemma3" || name == "gemma3-b") {
        applyGemma3Preset(c, name == "gemma3-b");
    } else if (name == "smollm") {
        c.tieWordEmbeddings = true;
        c.numHeads = 8;
        c.numKvHeads = 2;
        c.headDim = 8;
    } else if (name == "llama3") {
        c.numKvHeads = 2;
        c.headDim = 32; // head_dim given explicitly and != hidden / heads
        c.ropeTheta = 500000.0;
        c.ropeScaling.type = "llama3";
        c.ropeScaling.factor = 8.0;
        c.ropeScaling.lowFreqFactor = 1.0;
        c.ropeScaling.highFreqFactor = 4.0;
        c.ropeScaling.originalMaxPositionEmbeddings = 64; // small, so the test prompts cross bands
    } else if (name == "bias") {
        // Llama with attention_bias (q/k/v and o) and mlp_bias
        c.numKvHeads = 2;
        c.qkvBias = true;
        c.oBias = true;
        c.mlpBias = true;
    } else if (name == "10m") {
        c.hiddenSize = 384;
        c.intermediateSize = 1024;
        c.numLayers = 4;
        c.numHeads = 6;
        c.numKvHeads = 6;
        c.headDim = 64;
        c.vocabSize = 4096;
        c.maxPositionEmbeddings = 2048;
        s.weightStd = 0.03;
    } else if (name == "135m") {
        apply135mPreset(s);
    } else if (name == "qwen3-0.6b" || name == "qwen3-1.7b" || name == "qwen2.5-3b") {
        applyReleasedQwenPreset(s, name);
    } else if (name == "llama3.2-1b" || name == "llama3.2-3b" || name == "llama3.1-8b") {
        applyReleasedLlamaPreset(s, name);
    } else if (name == "demo-a" || name == "demo-b") {
        applyDemoPreset(c, name == "demo-a");
    } else {
        throw Error(ErrorCode::InvalidArgument, "unknown model preset '" + name + "'");
    }
    return s;
}

std::map<std::string, std::vector<float>> randomWeights(const RandomModelSpec &spec)
{
    const ModelConfig &c = spec.config;
    c.validate("random model spec");
    std::mt19937_64 rng(spec.seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::map<std::string, std::vector<float>> w;
    auto matrix = [&](const std::string &name, int64_t rows, int64_t cols) {
        std::vector<float> v(size_t(rows * cols));
        for (float &x : v)
            x = float(spec.weightStd) * normal(rng);
        w[name] = std::move(v);
    };
    // Gemma's norms scale by (1 + w): their weights sit around 0, not 1.
    const float normCentre = c.unitOffsetNorm ? 0.0f : 1.0f;
    auto norm = [&](const std::string &name, int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float &x : v)
            x = normCentre + 0.1f * normal(rng);
        w[name] = std::move(v);
    };
    auto bias = [&](const std::string &name, int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float &x : v)
            x = 0.1f * normal(rng);
        w[name] = std::move(v);
    };
    const int64_t h = c.hiddenSize, q = int64_t(c.numHeads) * c.headDim,
                  kv = int64_t(c.numKvHeads) * c.headDim;
    // Embeddings are larger than the matrices so that logits differ clearly between tokens. Gemma
    // multiplies them by sqrt(hidden): they are drawn that much smaller, or the scaled token
    // embedding would outweigh every attention output (each normed to ~1 by post_attention_layernorm)
    // and B's logits would not depend on the context at all.
    {
        const float std = c.scaleEmbeddings ? float(1.0 / std::sqrt(double(h))) : 1.0f;
        std::vector<float> e(size_t(c.vocabSize) * size_t(h));
        for (float &x : e)
            x = std * normal(rng);
        w["model.embed_tokens.weight"] = std::move(e);
    }
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        norm(p + "input_layernorm.weight", h);
        matrix(p + "self_attn.q_proj.weight", q, h);
        matrix(p + "self_attn.k_proj.weight", kv, h);
        matrix(p + "self_attn.v_proj.weight", kv, h);
        matrix(p + "self_attn.o_proj.weight", h, q);
        if (c.qkvBias) {
            bias(p + "self_attn.q_proj.bias", q);
            bias(p + "self_attn.k_proj.bias", kv);
            bias(p + "self_attn.v_proj.bias", kv);
        }
        if (c.oBias)
            bias(p + "self_attn.o_proj.bias", h);
        if (c.qkNorm) {
            norm(p + "self_attn.q_norm.weight", c.headDim);
            norm(p + "self_attn.k_norm.weight", c.headDim);
        }
        norm(p + "post_attention_layernorm.weight", h);
        if (c.sandwichNorms) {
            norm(p + "pre_feedforward_layernorm.weight", h);
            norm(p + "post_feedforward_layernorm.weight", h);
        }
        matrix(p + "mlp.gate_proj.weight", c.intermediateSize, h);
        matrix(p + "mlp.up_proj.weight", c.intermediateSize, h);
        matrix(p + "mlp.down_proj.weight", h, c.intermediateSize);
        if (c.mlpBias) {
            bias(p + "mlp.gate_proj.bias", c.intermediateSize);
            bias(p + "mlp.up_proj.bias", c.intermediateSize);
            bias(p + "mlp.down_proj.bias", h);
        }
    }
    norm("model.norm.weight", h);
    if (!c.tieWordEmbeddings)
        matrix("lm_head.weight", c.vocabSize, h);
    return w;
}

std::string byteLevelTokenizerJson()
{
    using nlohmann::json;
    const auto table = bytesToUnicode();
    json vocab = json::object();
    for (int b = 0; b < 256; ++b)
        vocab[utf8(table[size_t(b)])] = b;
    vocab["<|begin_of_text|>"] = 256;
    vocab["<|end_of_text|>"] = 257;
    json j = byteLevelBpeJson({.addedTokens = json::array({addedTokenJson(256, "<|begin_of_text|>", true),
                                                           addedTokenJson(257, "<|end_of_text|>", true)}),
                               .normalizer = nullptr,
                               .preTokenizer = byteLevelPreTokenizerJson(true),
                               .postProcessor = bosTemplateJson("<|begin_of_text|>", 256),
                               .vocab = std::move(vocab)});
    // HF's tokenizers writes these two of a BPE model as null (GGUF's tokenizer.json leaves them out)
    j["model"]["continuing_subword_prefix"] = nullptr;
    j["model"]["end_of_word_suffix"] = nullptr;
    return j.dump(1);
}

namespace {

// One tensor of a streamed model: what it is and how its values are drawn.
struct PlannedTensor
{
    std::string name;
    std::vector<int64_t> shape;
    float centre = 0, std = 0; // values centre + std * N(0, 1)
    uint64_t count = 0;        // elements: the product of shape
};

// The tensors of randomWeights(), in its order, without their values.
std::vector<PlannedTensor> tensorPlan(const RandomModelSpec &spec)
{
    const ModelConfig &c = spec.config;
    const int64_t h = c.hiddenSize, q = int64_t(c.numHeads) * c.headDim,
                  kv = int64_t(c.numKvHeads) * c.headDim, ff = c.intermediateSize;
    const float normCentre = c.unitOffsetNorm ? 0.0f : 1.0f, w = float(spec.weightStd);
    std::vector<PlannedTensor> out;
    const auto add = [&](std::string name, std::vector<int64_t> shape, float centre, float std) {
        uint64_t count = 1;
        for (int64_t d : shape)
            count *= uint64_t(d);
        out.push_back({std::move(name), std::move(shape), centre, std, count});
    };
    add("model.embed_tokens.weight", {c.vocabSize, h}, 0.0f,
        c.scaleEmbeddings ? float(1.0 / std::sqrt(double(h))) : 1.0f);
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {h}, normCentre, 0.1f);
        add(p + "self_attn.q_proj.weight", {q, h}, 0.0f, w);
        add(p + "self_attn.k_proj.weight", {kv, h}, 0.0f, w);
        add(p + "self_attn.v_proj.weight", {kv, h}, 0.0f, w);
        add(p + "self_attn.o_proj.weight", {h, q}, 0.0f, w);
        if (c.qkvBias) {
            add(p + "self_attn.q_proj.bias", {q}, 0.0f, 0.1f);
            add(p + "self_attn.k_proj.bias", {kv}, 0.0f, 0.1f);
            add(p + "self_attn.v_proj.bias", {kv}, 0.0f, 0.1f);
        }
        if (c.oBias)
            add(p + "self_attn.o_proj.bias", {h}, 0.0f, 0.1f);
        if (c.qkNorm) {
            add(p + "self_attn.q_norm.weight", {c.headDim}, normCentre, 0.1f);
            add(p + "self_attn.k_norm.weight", {c.headDim}, normCentre, 0.1f);
        }
        add(p + "post_attention_layernorm.weight", {h}, normCentre, 0.1f);
        if (c.sandwichNorms) {
            add(p + "pre_feedforward_layernorm.weight", {h}, normCentre, 0.1f);
            add(p + "post_feedforward_layernorm.weight", {h}, normCentre, 0.1f);
        }
        add(p + "mlp.gate_proj.weight", {ff, h}, 0.0f, w);
        add(p + "mlp.up_proj.weight", {ff, h}, 0.0f, w);
        add(p + "mlp.down_proj.weight", {h, ff}, 0.0f, w);
        if (c.mlpBias) {
            add(p + "mlp.gate_proj.bias", {ff}, 0.0f, 0.1f);
            add(p + "mlp.up_proj.bias", {ff}, 0.0f, 0.1f);
            add(p + "mlp.down_proj.bias", {h}, 0.0f, 0.1f);
        }
    }
    add("model.norm.weight", {h}, normCentre, 0.1f);
    if (!c.tieWordEmbeddings)
        add("lm_head.weight", {c.vocabSize, h}, 0.0f, w);
    return out;
}

// A tensor's own seed: the model's seed and its name (FNV-1a), so any tensor can be drawn alone.
uint64_t tensorSeed(uint64_t seed, const std::string &name)
{
    uint64_t x = 1469598103934665603ull ^ (seed * 0x9E3779B97F4A7C15ull);
    for (const char ch : name)
        x = (x ^ uint64_t(static_cast<unsigned char>(ch))) * 1099511628211ull;
    return x;
}

// model.safetensors written tensor by tensor: one chunk of values in memory at a time.
void writeStreamedSafetensors(const std::filesystem::path &path, const RandomModelSpec &spec, DType dtype)
{
    const auto plan = tensorPlan(spec);
    const size_t elementBytes = dtype == DType::F32 ? 4 : 2;
    nlohmann::json header = nlohmann::json::object();
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t offset = 0;
    for (const PlannedTensor &t : plan) {
        header[t.name] = {{"dtype", dtypeName(dtype)},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.count * elementBytes}}};
        offset += t.count * elementBytes;
    }
    AtomicFile out(path);
    out.write(safetensorsPreamble(header.dump()));
    constexpr size_t kChunk = size_t(1) << 20;
    std::vector<float> values(kChunk);
    std::vector<uint16_t> half(kChunk);
    for (const PlannedTensor &t : plan) {
        uint64_t left = t.count;
        std::mt19937_64 rng(tensorSeed(spec.seed, t.name));
        std::normal_distribution<float> normal(0.0f, 1.0f);
        while (left > 0) {
            const size_t n = size_t(std::min<uint64_t>(left, kChunk));
            for (size_t i = 0; i < n; ++i)
                values[i] = t.centre + t.std * normal(rng);
            if (dtype == DType::F32) {
                out.write(std::as_bytes(std::span<const float>(values.data(), n)));
            } else {
                for (size_t i = 0; i < n; ++i)
                    half[i] = dtype == DType::F16 ? floatToHalf(values[i]) : floatToBf16(values[i]);
                out.write(std::as_bytes(std::span<const uint16_t>(half.data(), n)));
            }
            left -= n;
        }
    }
    out.commit();
}

} // namespace

void writeRandomHfModel(const std::filesystem::path &dir, const RandomModelSpec &spec,
                        const std::string &dtype, const std::string &tokenizer)
{
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
        throw Error(ErrorCode::Io, dir.string() + ": cannot create directory: " + ec.message());
    const auto st = parseDType(dtype);
    if (!st || (*st != DType::F32 && *st != DType::F16 && *st != DType::BF16))
        throw Error(ErrorCode::InvalidArgument,
                    "unsupported weight dtype '" + dtype + "' (F32, F16 or BF16)");
    ModelConfig c = spec.config;
    c.torchDtype = *st == DType::F32 ? "float32" : *st == DType::F16 ? "float16" : "bfloat16";
    const std::string tokenizerJson = tokenizer.empty() ? byteLevelTokenizerJson() : tokenizer;
    auto writeText = [](const std::filesystem::path &p, const std::string &text) {
        std::ofstream out(p, std::ios::binary | std::ios::trunc);
        out << text;
        if (!out)
            throw Error(ErrorCode::Io, p.string() + ": cannot write");
    };
    if (spec.streamed) {
        if (c.fusedProjections)
            throw Error(ErrorCode::InvalidArgument, "a streamed random model has separate projections");
        writeStreamedSafetensors(dir / "model.safetensors", spec, *st);
        writeText(dir / "config.json", c.toHfJson());
        writeText(dir / "tokenizer.json", tokenizerJson);
        return;
    }
    auto weights = randomWeights(spec);
    if (c.fusedProjections) { // Phi-3's layout: row blocks q, k, v and gate, up of one tensor each
        const auto fuse = [&](const std::string &p, const char *fused, std::vector<const char *> parts) {
            std::vector<float> all;
            for (const char *part : parts) {
                auto node = weights.extract(p + part);
                all.insert(all.end(), node.mapped().begin(), node.mapped().end());
            }
            weights[p + fused] = std::move(all);
        };
        for (int l = 0; l < c.numLayers; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".";
            fuse(p, "self_attn.qkv_proj.weight",
                 {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"});
            fuse(p, "mlp.gate_up_proj.weight", {"mlp.gate_proj.weight", "mlp.up_proj.weight"});
        }
    }
    SafetensorsWriter writer;
    writer.setMetadata("format", "pt");
    for (const auto &[name, values] : weights) {
        std::vector<int64_t> shape;
        const bool isMatrix =
            name.ends_with("_proj.weight") || name == "lm_head.weight" || name == "model.embed_tokens.weight";
        if (isMatrix) {
            int64_t cols = c.hiddenSize;
            if (name.ends_with("o_proj.weight"))
                cols = int64_t(c.numHeads) * c.headDim;
            else if (name.ends_with("down_proj.weight"))
                cols = c.intermediateSize;
            shape = {int64_t(values.size()) / cols, cols};
        } else {
            shape = {int64_t(values.size())};
        }
        if (*st == DType::F32) {
            writer.addF32(name, shape, values);
        } else {
            std::vector<uint16_t> half(values.size());
            for (size_t i = 0; i < values.size(); ++i)
                half[i] = *st == DType::F16 ? floatToHalf(values[i]) : floatToBf16(values[i]);
            writer.add(name, *st, shape, std::as_bytes(std::span(half)));
        }
    }
    writer.write(dir / "model.safetensors");
    writeText(dir / "config.json", c.toHfJson());
    writeText(dir / "tokenizer.json", tokenizerJson);
}

} // namespace kvwb::core
