#include "core/model/gguf_model.h"

#include "core/model/quant.h"
#include "core/util/error.h"
#include "core/util/mapped_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <regex>

namespace kvwb::core {

namespace fs = std::filesystem;

namespace {

struct Arch
{
    const char *gguf;      // general.architecture
    const char *modelType; // ModelConfig::modelType
    const char *hfArch;    // ModelConfig::architecture
    bool permutedQk;       // llama.cpp's converter permuted q/k rows for interleaved RoPE
    bool gemma;            // Gemma's norm names, norms stored as 1 + weight, Gemma's attention keys
};
constexpr Arch kArchs[] = {{"llama", "llama", "LlamaForCausalLM", true, false},
                           {"qwen2", "qwen2", "Qwen2ForCausalLM", false, false},
                           {"qwen3", "qwen3", "Qwen3ForCausalLM", false, false},
                           {"phi3", "phi3", "Phi3ForCausalLM", false, false},
                           {"gemma2", "gemma2", "Gemma2ForCausalLM", false, true},
                           {"gemma3", "gemma3_text", "Gemma3ForCausalLM", false, true}};

// GGUF tensor name suffixes (after "blk.N.") and their HF names (after "model.layers.N.").
struct LayerName
{
    const char *gguf;
    const char *hf;
};
constexpr LayerName kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_gate.bias", "mlp.gate_proj.bias"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_up.bias", "mlp.up_proj.bias"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_down.bias", "mlp.down_proj.bias"},
};
// Gemma's four norms per layer: llama.cpp's ffn_norm is the pre-feed-forward norm there.
constexpr LayerName kGemmaNames[] = {{"post_attention_norm.weight", "post_attention_layernorm.weight"},
                                     {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
                                     {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}};
constexpr LayerName kGlobalNames[] = {{"token_embd.weight", "model.embed_tokens.weight"},
                                      {"output_norm.weight", "model.norm.weight"},
                                      {"output.weight", "lm_head.weight"}};

const Arch *findArch(std::string_view name)
{
    for (const Arch &a : kArchs)
        if (name == a.gguf)
            return &a;
    return nullptr;
}
const Arch *archForModelType(std::string_view modelType)
{
    if (modelType == "gemma3")
        return nullptr; // the multimodal config; only gemma3_text is a model kvwb runs
    if (modelType == "mistral" || modelType == "llama2c")
        return &kArchs[0];
    for (const Arch &a : kArchs)
        if (modelType == a.modelType)
            return &a;
    return nullptr;
}

// general.name as llama.cpp can load it. llama.cpp takes a model whose general.name contains "phi3"
// or "phi-3" (any case) for Microsoft's Phi-3 and looks "</s>", "<unk>", "<s>" and "<|endoftext|>" up
// in the vocabulary with unordered_map::at (src/llama-vocab.cpp, llama_vocab::impl::load, the per
// token attributes), so a file with any other vocabulary fails to load with "error loading model
// vocabulary: unordered_map::at". Without all four tokens the name is written "Phi 3", the way
// llama.cpp's converter spells it, which that test does not match. make-model's checkpoint is a
// temporary directory beside the output ("<out>.hf.kvwb-tmp"): its name is the output's, not that.
std::string ggufModelName(const Checkpoint &from, const fs::path &out, const GgufWriter &w)
{
    std::string name = from.path().filename().string();
    if (name.ends_with(".kvwb-tmp") || name.ends_with(".tmp"))
        name = out.stem().string();
    if (const auto tokens = w.strings("tokenizer.ggml.tokens")) {
        bool all = true;
        for (const char *t : {"</s>", "<unk>", "<s>", "<|endoftext|>"})
            all = all && std::find(tokens->begin(), tokens->end(), t) != tokens->end();
        if (all)
            return name;
    }
    for (;;) {
        std::string lower = name;
        for (char &ch : lower)
            ch = char(std::tolower(static_cast<unsigned char>(ch)));
        size_t at = lower.find("phi3"), len = 4;
        if (at == std::string::npos) {
            at = lower.find("phi-3");
            len = 5;
        }
        if (at == std::string::npos)
            return name;
        name.replace(at, len, name.substr(at, 3) + " 3");
    }
}

std::string archList()
{
    std::string out;
    for (const Arch &a : kArchs)
        out += (out.empty() ? "" : ", ") + std::string(a.gguf);
    return out;
}

// HF name of a GGUF tensor, or "" when kvwb has no use for it.
std::string hfName(const std::string &gguf, const Arch &arch)
{
    for (const LayerName &g : kGlobalNames)
        if (gguf == g.gguf)
            return g.hf;
    static const std::regex layer(R"(blk\.(\d{1,4})\.(.+))");
    std::smatch m;
    if (!std::regex_match(gguf, m, layer))
        return "";
    const std::string rest = m[2].str();
    // Phi-3 keeps gate and up in one ffn_up tensor, gate rows first (HF's gate_up_proj).
    if (std::string_view(arch.gguf) == "phi3" && rest == "ffn_up.weight")
        return fmt::format("model.layers.{}.mlp.gate_up_proj.weight", m[1].str());
    if (arch.gemma)
        for (const LayerName &l : kGemmaNames)
            if (rest == l.gguf)
                return fmt::format("model.layers.{}.{}", m[1].str(), l.hf);
    for (const LayerName &l : kLayerNames)
        if (rest == l.gguf)
            return fmt::format("model.layers.{}.{}", m[1].str(), l.hf);
    return "";
}

std::string ggufName(const std::string &hf, const Arch &arch)
{
    for (const LayerName &g : kGlobalNames)
        if (hf == g.hf)
            return g.gguf;
    static const std::regex layer(R"(model\.layers\.(\d{1,4})\.(.+))");
    std::smatch m;
    if (!std::regex_match(hf, m, layer))
        return "";
    const std::string rest = m[2].str();
    if (std::string_view(arch.gguf) == "phi3" && rest == "mlp.gate_up_proj.weight")
        return fmt::format("blk.{}.ffn_up.weight", m[1].str());
    if (arch.gemma)
        for (const LayerName &l : kGemmaNames)
            if (rest == l.hf)
                return fmt::format("blk.{}.{}", m[1].str(), l.gguf);
    for (const LayerName &l : kLayerNames)
        if (rest == l.hf)
            return fmt::format("blk.{}.{}", m[1].str(), l.gguf);
    return "";
}

// Rows of a [heads * headDim, ...] tensor per head between interleaved pairs (2j, 2j + 1) and
// rotate-half order (j, headDim / 2 + j). toHalf: llama.cpp's layout -> HF's; else the reverse
// (convert_hf_to_gguf.py's permute).
std::vector<std::byte> permuteRows(const std::byte *data, uint64_t bytes, int64_t heads, int64_t headDim,
                                   bool toHalf)
{
    const int64_t rows = heads * headDim, half = headDim / 2;
    const uint64_t rowBytes = bytes / uint64_t(rows);
    std::vector<std::byte> out(bytes);
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < half; ++j)
            for (int s = 0; s < 2; ++s) {
                const int64_t inter = h * headDim + 2 * j + s, halfRow = h * headDim + s * half + j;
                const int64_t from = toHalf ? inter : halfRow, to = toHalf ? halfRow : inter;
                std::memcpy(out.data() + uint64_t(to) * rowBytes, data + uint64_t(from) * rowBytes, rowBytes);
            }
    return out;
}

int reqInt(const GgufFile &f, const std::string &key, int64_t lo, int64_t hi)
{
    const auto v = f.integer(key);
    if (!v)
        throw Error(ErrorCode::Config, fmt::format("{}: metadata '{}' is missing", f.path().string(), key));
    if (*v < lo || *v > hi)
        throw Error(ErrorCode::Config, fmt::format("{}: metadata '{}' is {}, expected {} to {}",
                                                   f.path().string(), key, *v, lo, hi));
    return int(*v);
}

// A float metadata value as the decimal it was written from: GGUF keeps f32, so 1e-5 comes back
// as 9.99999975e-06; the shortest decimal that rounds to the same f32 is what config.json said.
double decimalOf(double f32value)
{
    return std::stod(fmt::format("{:.7g}", f32value));
}

// llama.cpp stores Llama 3.1's RoPE scaling as per-frequency divisors (rope_freqs.weight). Recover
// the rope_scaling it came from: factor is the largest divisor; low/high_freq_factor come from
// kvwb's own keys when kvwb wrote the file, else 1 and 4 (every released Llama 3.x), and the
// original context from rope.scaling.original_context_length, else 8192. Divisors the recovered
// parameters do not reproduce are refused.
void readRopeFreqs(const GgufFile &f, const GgufTensor &t, ModelConfig &c, const std::string &p)
{
    const std::string file = f.path().string();
    const int half = c.headDim / 2;
    if (t.info.dtype != DType::F32 || t.info.shape != std::vector<int64_t>{half})
        throw Error(ErrorCode::Shape,
                    fmt::format("{}: tensor 'rope_freqs.weight' should be F32 [{}]", file, half));
    std::vector<float> div(static_cast<size_t>(half));
    std::memcpy(div.data(), f.data(t), size_t(half) * 4);
    float factor = 1;
    for (float d : div)
        factor = std::max(factor, d);
    factor = float(decimalOf(factor));
    ModelConfig plain = c;
    plain.ropeScaling = RopeScaling{};
    const auto base = plain.ropeInvFreq(0);
    const auto reproduces = [&](const RopeScaling &rs) {
        ModelConfig scaled = c;
        scaled.ropeScaling = rs;
        const auto b = scaled.ropeInvFreq(0);
        for (int i = 0; i < half; ++i)
            if (std::fabs(base[size_t(i)] / b[size_t(i)] - double(div[size_t(i)])) >
                1e-4 * double(div[size_t(i)]))
                return false;
        return true;
    };
    RopeScaling rs;
    rs.type = "llama3";
    rs.factor = factor;
    rs.lowFreqFactor = decimalOf(f.number("kvwb.rope_scaling.low_freq_factor").value_or(1.0));
    rs.highFreqFactor = decimalOf(f.number("kvwb.rope_scaling.high_freq_factor").value_or(4.0));
    rs.originalMaxPositionEmbeddings =
        int(f.integer(p + "rope.scaling.original_context_length").value_or(8192));
    if (!reproduces(rs)) {
        // Without the keys: the frequencies depend on original_context / low and original_context /
        // high only, so low = 1 loses nothing; search the context (powers of two) and high.
        bool found = false;
        for (int ctx = 16; ctx <= (1 << 20) && !found; ctx *= 2)
            for (double high : {4.0, 2.0, 8.0, 16.0}) {
                RopeScaling t = rs;
                t.lowFreqFactor = 1.0;
                t.highFreqFactor = high;
                t.originalMaxPositionEmbeddings = ctx;
                if (reproduces(t)) {
                    rs = t;
                    found = true;
                    break;
                }
            }
        if (!found)
            throw Error(
                ErrorCode::Unsupported,
                fmt::format("{}: rope_freqs.weight (largest divisor {}) is not Llama 3 RoPE scaling for any "
                            "original context of 2^4 to 2^20 tokens and high_freq_factor 2, 4, 8 or 16",
                            file, factor));
    }
    c.ropeScaling = rs;
}

// Gemma 2/3's attention as llama.cpp's loader reads it: the sliding window, the layers that slide
// (Gemma 2 alternates from layer 0; Gemma 3 makes every sixth layer global, or as
// attention.sliding_window_pattern says), the sliding layers' RoPE base (Gemma 3: rope.freq_base_swa,
// else 10000), the soft-caps, and the attention scale (head_dim, or hidden / heads for the 27B
// models, as llama.cpp decides; kvwb's own key when kvwb wrote the file).
void readGemmaKeys(const GgufFile &f, const std::string &p, const Arch &arch, ModelConfig &c)
{
    const std::string file = f.path().string();
    const bool g3 = std::string_view(arch.gguf) == "gemma3";
    c.unitOffsetNorm = true;
    c.scaleEmbeddings = true;
    c.sandwichNorms = true;
    c.activation = MlpActivation::GeluTanh;
    // Gemma 2 without the key slides over 4096 tokens (llama.cpp's default); Gemma 3 without it (or
    // with 0) does not slide at all (its converter leaves the key out for sliding_window_pattern 1).
    const int window = f.find(p + "attention.sliding_window")
                           ? reqInt(f, p + "attention.sliding_window", 0, kMaxPositions)
                           : (g3 ? 0 : 4096);
    if (const auto cap = f.number(p + "attn_logit_softcapping"); cap && *cap > 0)
        c.attnLogitSoftcap = decimalOf(*cap);
    if (const auto cap = f.number(p + "final_logit_softcapping"); cap && *cap > 0)
        c.finalLogitSoftcap = decimalOf(*cap);
    if (g3)
        c.ropeLocalTheta = decimalOf(f.number(p + "rope.freq_base_swa").value_or(10000.0));
    c.layerAttention.clear();
    c.slidingWindow = window;
    if (window == 0) {
        c.layerAttention.assign(size_t(c.numLayers), LayerAttention::Full);
    } else if (const auto *sliding = f.numberArray("kvwb.sliding_layers")) {
        if (sliding->size() != size_t(c.numLayers))
            throw Error(ErrorCode::Config,
                        fmt::format("{}: metadata 'kvwb.sliding_layers' has {} entries for {} layers", file,
                                    sliding->size(), c.numLayers));
        for (double x : *sliding)
            c.layerAttention.push_back(x != 0 ? LayerAttention::Sliding : LayerAttention::Full);
    } else {
        const int pattern = g3 ? (f.find(p + "attention.sliding_window_pattern")
                                      ? reqInt(f, p + "attention.sliding_window_pattern", 1, kMaxLayers)
                                      : 6)
                               : 2;
        for (int l = 0; l < c.numLayers; ++l)
            c.layerAttention.push_back((l + 1) % pattern != 0 ? LayerAttention::Sliding
                                                              : LayerAttention::Full);
    }
    if (const auto q = f.number("kvwb.query_pre_attn_scalar"))
        c.queryPreAttnScalar = decimalOf(*q);
    else if ((!g3 && c.numLayers == 46) || (g3 && c.numLayers == 62))
        c.queryPreAttnScalar = double(c.hiddenSize / c.numHeads); // the 27B models
    else
        c.queryPreAttnScalar = double(c.headDim);
}

// llama.cpp's converter stores Gemma's norm weights as 1 + w (its RMSNorm multiplies by the
// weight); kvwb's Gemma norm adds the 1 itself. Subtracting 1 from the stored f32 is exact for
// stored values of 0.5 and up (Sterbenz; above 2 the result keeps the stored value's spacing), so
// the engine's 1 + w' is the very f32 1 + w that HF computes, though w' itself may differ from w
// in its last bit.
std::shared_ptr<const std::vector<std::byte>> shiftNorm(const GgufModel::Tensor &t, float by,
                                                        const std::string &what)
{
    std::vector<float> v(static_cast<size_t>(t.info.numel()));
    dequantize(t.info.dtype, {t.data, size_t(t.info.bytes)}, t.info.numel(), v.data(), what);
    for (float &x : v)
        x += by;
    auto out = std::make_shared<std::vector<std::byte>>(v.size() * 4);
    std::memcpy(out->data(), v.data(), out->size());
    return out;
}

// LongRoPE (Phi-3 128k) as llama.cpp's converter writes it: the divisors as rope_factors_long /
// rope_factors_short.weight (F32 [headDim/2]), the original context and the attention factor as
// rope.scaling.original_context_length / rope.scaling.attn_factor.
void readLongRope(const GgufFile &f, ModelConfig &c, const std::string &p)
{
    const GgufTensor *lf = f.tensor("rope_factors_long.weight"), *sf = f.tensor("rope_factors_short.weight");
    if (!lf && !sf)
        return;
    const std::string file = f.path().string();
    const int half = c.headDim / 2;
    const auto factors = [&](const GgufTensor *t, const char *name) {
        if (!t)
            throw Error(ErrorCode::Shape, fmt::format("{}: LongRoPE needs tensor '{}' too", file, name));
        if (t->info.dtype != DType::F32 || t->info.shape != std::vector<int64_t>{half})
            throw Error(ErrorCode::Shape,
                        fmt::format("{}: tensor '{}' should be F32 [{}]", file, name, half));
        std::vector<float> v(static_cast<size_t>(half));
        std::memcpy(v.data(), f.data(*t), size_t(half) * 4);
        std::vector<double> out;
        for (float x : v)
            out.push_back(decimalOf(x));
        return out;
    };
    RopeScaling rs;
    rs.type = "longrope";
    rs.longFactor = factors(lf, "rope_factors_long.weight");
    rs.shortFactor = factors(sf, "rope_factors_short.weight");
    rs.originalMaxPositionEmbeddings =
        reqInt(f, p + "rope.scaling.original_context_length", 1, kMaxPositions);
    rs.factor = double(c.maxPositionEmbeddings) / rs.originalMaxPositionEmbeddings;
    const double derived =
        rs.factor <= 1.0 || rs.originalMaxPositionEmbeddings <= 1
            ? 1.0
            : std::sqrt(1.0 + std::log(rs.factor) / std::log(double(rs.originalMaxPositionEmbeddings)));
    // f32 in the file: the derived factor when it is the one written, else the decimal written
    const auto stored = f.number(p + "rope.scaling.attn_factor");
    rs.attentionFactor = !stored || float(*stored) == float(derived) ? derived : decimalOf(*stored);
    c.ropeScaling = rs;
}

} // namespace

std::vector<std::string> ggufArchitectures()
{
    std::vector<std::string> out;
    for (const Arch &a : kArchs)
        out.push_back(a.gguf);
    return out;
}

GgufModel ggufModel(const GgufFile &f)
{
    const std::string file = f.path().string();
    GgufModel m;
    const auto archName = f.string("general.architecture");
    if (!archName)
        throw Error(ErrorCode::Config, file + ": metadata 'general.architecture' is missing");
    const Arch *arch = findArch(*archName);
    if (!arch)
        throw Error(ErrorCode::Unsupported,
                    fmt::format("{}: GGUF architecture '{}' is not supported (supported: {})", file,
                                *archName, archList()));
    m.architecture = *archName;
    const std::string p = *archName + ".";
    ModelConfig &c = m.config;
    c.modelType = arch->modelType;
    c.architecture = arch->hfArch;
    c.hiddenSize = reqInt(f, p + "embedding_length", 1, kMaxHidden);
    c.numLayers = reqInt(f, p + "block_count", 1, kMaxLayers);
    if (const GgufValue *ff = f.find(p + "feed_forward_length"); ff && ff->isArray())
        throw Error(
            ErrorCode::Unsupported,
            fmt::format("{}: metadata '{}feed_forward_length' differs per layer, which kvwb does not support",
                        file, p));
    c.intermediateSize = reqInt(f, p + "feed_forward_length", 1, kMaxIntermediate);
    c.numHeads = reqInt(f, p + "attention.head_count", 1, kMaxHeads);
    c.numKvHeads = f.find(p + "attention.head_count_kv")
                       ? reqInt(f, p + "attention.head_count_kv", 1, kMaxHeads)
                       : c.numHeads;
    if (f.find(p + "attention.key_length")) {
        c.headDim = reqInt(f, p + "attention.key_length", 2, kMaxHeadDim);
    } else {
        c.headDim =
            headDimFromHidden(c.hiddenSize, c.numHeads, file,
                              "{}: embedding_length {} is not divisible by head_count {} and there is "
                              "no attention.key_length");
    }
    if (f.find(p + "attention.value_length") &&
        reqInt(f, p + "attention.value_length", 1, kMaxHeadDim) != c.headDim)
        throw Error(ErrorCode::Unsupported,
                    fmt::format("{}: attention.value_length differs from attention.key_length ({})", file,
                                c.headDim));
    if (f.find(p + "rope.dimension_count") &&
        reqInt(f, p + "rope.dimension_count", 1, kMaxHeadDim) != c.headDim)
        throw Error(
            ErrorCode::Unsupported,
            fmt::format("{}: rope.dimension_count {} is not the head size {}: partial RoPE is not supported",
                        file, *f.integer(p + "rope.dimension_count"), c.headDim));
    c.maxPositionEmbeddings =
        f.find(p + "context_length") ? reqInt(f, p + "context_length", 1, kMaxPositions) : 2048;
    c.rmsNormEps = decimalOf(f.number(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
    c.ropeTheta = decimalOf(f.number(p + "rope.freq_base").value_or(10000.0));
    if (const auto type = f.string(p + "rope.scaling.type"); type && *type != "none") {
        if (*type != "linear")
            throw Error(
                ErrorCode::Unsupported,
                fmt::format("{}: rope.scaling.type '{}' is not supported (none, linear)", file, *type));
        c.ropeScaling.type = "linear";
        c.ropeScaling.factor = decimalOf(f.number(p + "rope.scaling.factor").value_or(1.0));
    }
    c.ropeLayout = RopeLayout::RotateHalf;
    c.torchDtype = "float32";
    if (arch->gemma) {
        readGemmaKeys(f, p, *arch, c);
    } else if (const auto w = f.integer(p + "attention.sliding_window"); w && *w > 0) {
        // Phi-3's window (llama.cpp reads it too); in a llama file, a Mistral window kvwb wrote
        c.slidingWindow = reqInt(f, p + "attention.sliding_window", 1, kMaxPositions);
        c.layerAttention.assign(size_t(c.numLayers), LayerAttention::Sliding);
    }

    // Tensors under HF names.
    for (const GgufTensor &t : f.tensors()) {
        if (t.info.name == "rope_freqs.weight")
            continue;
        if (t.info.name == "rope_factors_long.weight" || t.info.name == "rope_factors_short.weight")
            continue; // LongRoPE, read below
        const std::string hf = hfName(t.info.name, *arch);
        if (hf.empty())
            throw Error(ErrorCode::Unsupported,
                        fmt::format("{}: tensor '{}' is not one kvwb knows for architecture '{}'", file,
                                    t.info.name, *archName));
        GgufModel::Tensor mt;
        mt.info = t.info;
        mt.info.name = hf;
        mt.data = f.data(t);
        m.tensors.emplace(hf, std::move(mt));
    }
    if (arch->gemma)
        for (auto &[name, t] : m.tensors)
            if (name.ends_with("norm.weight")) {
                auto shifted = shiftNorm(t, -1.0f, file + ": tensor '" + name + "'");
                t.info.dtype = DType::F32;
                t.info.bytes = shifted->size();
                t.data = shifted->data();
                m.owned.push_back(std::move(shifted));
            }
    const auto has = [&](const std::string &n) { return m.tensors.count(n) > 0; };
    const auto embed = m.tensors.find("model.embed_tokens.weight");
    if (embed == m.tensors.end() || embed->second.info.shape.size() != 2)
        throw Error(ErrorCode::Shape, file + ": tensor 'token_embd.weight' is missing or not a matrix");
    c.vocabSize = int(std::min<int64_t>(embed->second.info.shape[0], int64_t(kMaxVocab) + 1));
    c.tieWordEmbeddings = !has("lm_head.weight");
    c.qkvBias = has("model.layers.0.self_attn.q_proj.bias");
    c.oBias = has("model.layers.0.self_attn.o_proj.bias");
    c.mlpBias = has("model.layers.0.mlp.gate_proj.bias");
    c.qkNorm = has("model.layers.0.self_attn.q_norm.weight");
    c.fusedProjections = std::string_view(arch->gguf) == "phi3";
    if (c.modelType == "qwen2" && !c.qkvBias)
        throw Error(ErrorCode::Shape, file + ": a qwen2 model needs tensor 'blk.0.attn_q.bias'");
    if (c.modelType == "qwen3" && !c.qkNorm)
        throw Error(ErrorCode::Shape, file + ": a qwen3 model needs tensor 'blk.0.attn_q_norm.weight'");
    if (const auto b = f.integer("tokenizer.ggml.bos_token_id"); b && *b >= 0 && *b < c.vocabSize)
        c.bosTokenId = int(*b);
    if (const auto e = f.integer("tokenizer.ggml.eos_token_id"); e && *e >= 0 && *e < c.vocabSize)
        c.eosTokenIds = {int(*e)};
    readLongRope(f, c, p);
    c.validate(file);
    if (const GgufTensor *rf = f.tensor("rope_freqs.weight"))
        readRopeFreqs(f, *rf, c, p);

    if (arch->permutedQk) {
        for (int l = 0; l < c.numLayers; ++l)
            for (const char *proj : {"q_proj", "k_proj"})
                for (const char *kind : {"weight", "bias"}) {
                    const auto it =
                        m.tensors.find(fmt::format("model.layers.{}.self_attn.{}.{}", l, proj, kind));
                    if (it == m.tensors.end())
                        continue;
                    const int64_t heads = proj[0] == 'q' ? c.numHeads : c.numKvHeads;
                    const TensorInfo &ti = it->second.info;
                    if (ti.shape.empty() || ti.shape[0] != heads * c.headDim)
                        throw Error(ErrorCode::Shape,
                                    fmt::format("{}: tensor '{}' has {} rows, expected {}", file, ti.name,
                                                ti.shape.empty() ? 0 : ti.shape[0], heads * c.headDim));
                    auto rows = std::make_shared<const std::vector<std::byte>>(
                        permuteRows(it->second.data, ti.bytes, heads, c.headDim, true));
                    // the file's pages of the tensor are not read again: drop them (0.37 GB at the
                    // load's peak for a Llama-3.2-3B Q8_0 file)
                    MappedFile::releasePages(it->second.data, size_t(ti.bytes));
                    it->second.data = rows->data();
                    m.owned.push_back(std::move(rows));
                }
    }
    return m;
}

GgufSummary ggufSummary(const GgufFile &f)
{
    GgufSummary s;
    s.version = f.version();
    s.architecture = f.string("general.architecture").value_or("");
    s.name = f.string("general.name").value_or("");
    for (const GgufTensor &t : f.tensors()) {
        const std::string type = ggmlTypeName(t.ggmlType);
        auto it = std::find_if(s.types.begin(), s.types.end(), [&](const auto &x) { return x.type == type; });
        if (it == s.types.end()) {
            s.types.push_back({type, 0, 0});
            it = s.types.end() - 1;
        }
        ++it->tensors;
        it->bytes += t.info.bytes;
        s.elements += uint64_t(t.info.numel());
    }
    return s;
}

std::vector<std::string> writeGguf(const Checkpoint &from, const fs::path &out, DType weightType,
                                   GgufWriter w)
{
    const ModelConfig &c = from.config();
    const Arch *arch = archForModelType(c.modelType);
    if (!arch)
        throw Error(ErrorCode::Unsupported,
                    fmt::format("{}: model_type '{}' has no GGUF architecture kvwb writes ({})",
                                from.path().string(), c.modelType, archList()));
    if (c.ropeScaling.type != "default" && c.ropeScaling.type != "linear" && c.ropeScaling.type != "llama3" &&
        c.ropeScaling.type != "longrope")
        throw Error(
            ErrorCode::Unsupported,
            fmt::format("{}: RoPE scaling '{}' is not written to GGUF (default, linear, llama3, longrope)",
                        from.path().string(), c.ropeScaling.type));
    if (weightType != DType::F32 && weightType != DType::F16 && weightType != DType::BF16 &&
        !isBlockQuantized(weightType))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("GGUF weights cannot be {}", dtypeName(weightType)));
    const std::string p = std::string(arch->gguf) + ".";
    w.setString("general.architecture", arch->gguf);
    w.setString("general.name", ggufModelName(from, out, w));
    w.setU32("general.alignment", 32);
    w.setU32(p + "context_length", uint32_t(c.maxPositionEmbeddings));
    w.setU32(p + "embedding_length", uint32_t(c.hiddenSize));
    w.setU32(p + "block_count", uint32_t(c.numLayers));
    w.setU32(p + "feed_forward_length", uint32_t(c.intermediateSize));
    w.setU32(p + "attention.head_count", uint32_t(c.numHeads));
    w.setU32(p + "attention.head_count_kv", uint32_t(c.numKvHeads));
    w.setU32(p + "attention.key_length", uint32_t(c.headDim));
    w.setU32(p + "attention.value_length", uint32_t(c.headDim));
    w.setU32(p + "rope.dimension_count", uint32_t(c.headDim));
    w.setF32(p + "rope.freq_base", float(c.ropeTheta));
    w.setF32(p + "attention.layer_norm_rms_epsilon", float(c.rmsNormEps));
    if (c.ropeScaling.type == "linear") {
        w.setString(p + "rope.scaling.type", "linear");
        w.setF32(p + "rope.scaling.factor", float(c.ropeScaling.factor));
    } else if (c.ropeScaling.type == "llama3") {
        // As llama.cpp's converter: the divisors per frequency as rope_freqs.weight. The two band
        // factors have no llama.cpp key; kvwb's own keys carry them so the file reads back exactly.
        ModelConfig plain = c;
        plain.ropeScaling = RopeScaling{};
        const auto a = plain.ropeInvFreq(0), b = c.ropeInvFreq(0);
        std::vector<float> div;
        for (size_t i = 0; i < a.size(); ++i)
            div.push_back(float(a[i] / b[i]));
        w.setU32(p + "rope.scaling.original_context_length",
                 uint32_t(c.ropeScaling.originalMaxPositionEmbeddings));
        w.setF32("kvwb.rope_scaling.low_freq_factor", float(c.ropeScaling.lowFreqFactor));
        w.setF32("kvwb.rope_scaling.high_freq_factor", float(c.ropeScaling.highFreqFactor));
        w.addTensor("rope_freqs.weight", DType::F32, {int64_t(div.size())},
                    quantize(DType::F32, div, "rope_freqs"));
    } else if (c.ropeScaling.type == "longrope") {
        w.setU32(p + "rope.scaling.original_context_length",
                 uint32_t(c.ropeScaling.originalMaxPositionEmbeddings));
        w.setF32(p + "rope.scaling.attn_factor", float(c.ropeScaling.attentionFactor));
        for (const auto &[name, v] : {std::pair{"rope_factors_long", &c.ropeScaling.longFactor},
                                      std::pair{"rope_factors_short", &c.ropeScaling.shortFactor}}) {
            const std::vector<float> f32(v->begin(), v->end());
            w.addTensor(std::string(name) + ".weight", DType::F32, {int64_t(f32.size())},
                        quantize(DType::F32, f32, name));
        }
    }
    if (!arch->gemma && std::find(c.layerAttention.begin(), c.layerAttention.end(),
                                  LayerAttention::Sliding) != c.layerAttention.end())
        w.setU32(p + "attention.sliding_window", uint32_t(c.slidingWindow));
    if (arch->gemma) {
        if (c.slidingWindow > 0)
            w.setU32(p + "attention.sliding_window", uint32_t(c.slidingWindow));
        if (c.attnLogitSoftcap)
            w.setF32(p + "attn_logit_softcapping", float(*c.attnLogitSoftcap));
        if (c.finalLogitSoftcap)
            w.setF32(p + "final_logit_softcapping", float(*c.finalLogitSoftcap));
        if (c.ropeLocalTheta)
            w.setF32(p + "rope.freq_base_swa", float(*c.ropeLocalTheta));
        // Not in llama.cpp's keys (it decides both from the architecture and size): kvwb's own, so
        // any geometry reads back exactly.
        w.setF32("kvwb.query_pre_attn_scalar", float(c.queryPreAttnScalar.value_or(double(c.headDim))));
        std::vector<int32_t> sliding;
        for (int l = 0; l < c.numLayers; ++l)
            sliding.push_back(c.isSlidingLayer(l) ? 1 : 0);
        w.setI32s("kvwb.sliding_layers", std::move(sliding));
    }
    // The file's own RoPE layout: llama.cpp's llama architecture rotates interleaved pairs.
    const bool wantInterleaved = arch->permutedQk;
    const bool haveInterleaved = c.ropeLayout == RopeLayout::Interleaved;
    if (haveInterleaved && !arch->permutedQk)
        throw Error(ErrorCode::Unsupported,
                    fmt::format("{}: interleaved-RoPE weights only fit the llama architecture",
                                from.path().string()));
    std::vector<std::string> notes;
    for (const std::string &name : from.tensorNames()) {
        if (c.tieWordEmbeddings && name == "lm_head.weight")
            continue;
        const std::string g = ggufName(name, *arch);
        if (g.empty())
            throw Error(ErrorCode::Unsupported,
                        fmt::format("{}: tensor '{}' has no GGUF name", from.path().string(), name));
        const TensorRef ref = from.require(name, {});
        std::vector<float> values = toFloatVector(ref);
        const std::vector<int64_t> &shape = ref.info->shape;
        if (wantInterleaved && !haveInterleaved) {
            const bool isQ = name.find(".self_attn.q_proj.") != std::string::npos;
            const bool isK = name.find(".self_attn.k_proj.") != std::string::npos;
            if (isQ || isK) {
                const auto bytes =
                    permuteRows(reinterpret_cast<const std::byte *>(values.data()), values.size() * 4,
                                isQ ? c.numHeads : c.numKvHeads, c.headDim, false);
                std::memcpy(values.data(), bytes.data(), bytes.size());
            }
        }
        if (arch->gemma && name.ends_with("norm.weight"))
            for (float &x : values)
                x += 1.0f; // stored as llama.cpp's converter stores Gemma norms
        DType type = shape.size() == 2 ? weightType : DType::F32;
        if (type != DType::F32 && shape.back() % dtypeBlockElements(type) != 0) {
            // llama-quantize's fallbacks for a K-quant whose rows are not whole 256-element
            // super-blocks (SmolLM's 576 columns): a 32-element type of about the same size
            const DType fallback = type == DType::Q4_K   ? DType::Q5_0
                                   : type == DType::Q5_K ? DType::Q5_1
                                   : type == DType::Q6_K ? DType::Q8_0
                                                         : DType::F32;
            const DType kept = shape.back() % dtypeBlockElements(fallback) == 0 ? fallback : DType::F32;
            notes.push_back(fmt::format("{}: rows of {} are not whole {} blocks; kept as {}", g, shape.back(),
                                        dtypeName(type), dtypeName(kept)));
            type = kept;
        }
        w.addTensor(g, type, shape, quantize(type, values, g));
    }
    w.write(out);
    return notes;
}

} // namespace kvwb::core
