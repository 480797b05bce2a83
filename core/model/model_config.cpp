#include "core/model/model_config.h"

#include "core/model/json_fields_p.h"
#include "core/util/error.h"
#include "core/util/mapped_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kvwb::core {

using nlohmann::json;

namespace {

using detail::FieldReader;

// Reads rope_scaling or rope_parameters (same keys; the latter may also carry rope_theta).
void readRope(const json &obj, const std::string &source, const char *field, ModelConfig &cfg)
{
    if (!obj.is_object())
        throw Error(ErrorCode::Config,
                    fmt::format("{}: field '{}' must be an object, got {}", source, field, obj.dump()));
    FieldReader r(obj, source, field);
    std::string type;
    const char *typeKey = "rope_type";
    if (auto t = r.optString("rope_type")) {
        type = *t;
    } else if (auto t2 = r.optString("type")) {
        type = *t2;
        typeKey = "type";
    } else {
        type = "default";
    }
    if (auto theta = r.optDouble("rope_theta"))
        cfg.ropeTheta = *theta;

    RopeScaling s;
    s.type = type;
    if (type == "default") {
        // nothing to read
    } else if (type == "linear") {
        s.factor = r.reqDouble("factor");
    } else if (type == "llama3") {
        s.factor = r.reqDouble("factor");
        s.lowFreqFactor = r.reqDouble("low_freq_factor");
        s.highFreqFactor = r.reqDouble("high_freq_factor");
        s.originalMaxPositionEmbeddings = r.reqInt("original_max_position_embeddings");
    } else if (type == "longrope" || type == "su") {
        // Phi-3 / Phi-3.5 (Phi3Config: "su" is the older name). The original context and the
        // attention factor are settled by finishLongRope once the top-level fields are read.
        s.type = "longrope";
        const size_t most = size_t(kMaxHeadDim / 2);
        s.shortFactor = r.optDoubles("short_factor", most).value_or(std::vector<double>{});
        s.longFactor = r.optDoubles("long_factor", most).value_or(std::vector<double>{});
        if (!r.find("short_factor"))
            r.missing("short_factor");
        if (!r.find("long_factor"))
            r.missing("long_factor");
        s.factor = r.optDouble("factor").value_or(1.0);
        s.attentionFactor = r.optDouble("attention_factor").value_or(0.0); // 0: not given
        const auto original = r.optInt("original_max_position_embeddings");
        if (original && *original <= 0) // not "unset": a value that cannot be a context length
            throw Error(
                ErrorCode::Config,
                fmt::format("{}: field '{}.original_max_position_embeddings' must be positive, got {}",
                            source, field, *original));
        s.originalMaxPositionEmbeddings = original.value_or(0);
    } else {
        throw Error(
            ErrorCode::Unsupported,
            fmt::format("{}: field '{}.{}' is '{}', which is not supported (supported: default, linear, "
                        "llama3, longrope)",
                        source, field, typeKey, type));
    }
    cfg.ropeScaling = s;
}

// LongRoPE's original context and attention factor, as transformers' _compute_longrope_parameters:
// with a top-level original_max_position_embeddings (Phi3Config) the scaling factor is
// max_position_embeddings / original; else the original is max_position_embeddings and the factor
// rope_scaling's own. An attention_factor not given is sqrt(1 + ln(factor) / ln(original)).
void finishLongRope(ModelConfig &cfg, std::optional<int> topLevelOriginal)
{
    RopeScaling &s = cfg.ropeScaling;
    if (s.type != "longrope")
        return;
    if (topLevelOriginal && *topLevelOriginal > 0)
        s.originalMaxPositionEmbeddings = *topLevelOriginal;
    if (s.originalMaxPositionEmbeddings > 0)
        s.factor = double(cfg.maxPositionEmbeddings) / double(s.originalMaxPositionEmbeddings);
    else
        s.originalMaxPositionEmbeddings = cfg.maxPositionEmbeddings;
    if (s.attentionFactor == 0.0)
        s.attentionFactor =
            s.factor <= 1.0 || s.originalMaxPositionEmbeddings <= 1
                ? 1.0
                : std::sqrt(1.0 + std::log(s.factor) / std::log(double(s.originalMaxPositionEmbeddings)));
}

constexpr const char *kSupportedModelTypes = "llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text";

// Gemma2Config / Gemma3TextConfig: the fields Gemma adds, with the config class's default where
// config.json leaves one out (Gemma 2 files carry no tie_word_embeddings: it defaults to true).
void readGemma(const json &j, const FieldReader &r, const std::string &source, ModelConfig &cfg)
{
    const bool g3 = cfg.modelType == "gemma3_text";
    cfg.unitOffsetNorm = true;
    cfg.scaleEmbeddings = true;
    cfg.sandwichNorms = true;
    cfg.qkNorm = g3; // Gemma3Attention's q_norm / k_norm
    cfg.tieWordEmbeddings = r.optBool("tie_word_embeddings").value_or(true);
    const bool ab = r.optBool("attention_bias").value_or(false);
    cfg.qkvBias = ab;
    cfg.oBias = ab;
    // Gemma2MLP reads hidden_activation; hidden_act, the older spelling some files also carry, is
    // ignored there and here.
    const std::string act = r.optString("hidden_activation").value_or("gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh")
        throw Error(ErrorCode::Unsupported,
                    fmt::format("{}: field 'hidden_activation' is '{}', which is not supported (supported: "
                                "gelu_pytorch_tanh)",
                                source, act));
    cfg.activation = MlpActivation::GeluTanh;
    cfg.queryPreAttnScalar = r.optDouble("query_pre_attn_scalar").value_or(256.0);
    // A soft-cap left out takes the class default (Gemma 2: 50 and 30; Gemma 3: none); null is off.
    const auto softcap = [&](const char *name, std::optional<double> byDefault) {
        return j.contains(name) ? r.optDouble(name) : byDefault;
    };
    cfg.attnLogitSoftcap = softcap("attn_logit_softcapping", g3 ? std::nullopt : std::optional(50.0));
    cfg.finalLogitSoftcap = softcap("final_logit_softcapping", g3 ? std::nullopt : std::optional(30.0));
    if (j.contains("sliding_window") && j["sliding_window"].is_null())
        throw Error(ErrorCode::Config,
                    fmt::format("{}: field 'sliding_window' is null; {}'s sliding layers need a window",
                                source, cfg.modelType));
    cfg.slidingWindow = r.optInt("sliding_window").value_or(4096);
    if (g3) {
        cfg.ropeLocalTheta = r.optDouble("rope_local_base_freq").value_or(10000.0);
        if (r.optBool("use_bidirectional_attention").value_or(false))
            throw Error(ErrorCode::Unsupported,
                        fmt::format("{}: field 'use_bidirectional_attention' is true (an embedding model); "
                                    "kvwb runs causal decoders only",
                                    source));
    }
    // Sized from num_hidden_layers only once it is within bounds (validate() refuses it otherwise).
    cfg.layerAttention.clear();
    if (cfg.numLayers <= 0 || cfg.numLayers > kMaxLayers)
        return;
    if (const json *types = r.find("layer_types")) { // transformers >= 4.53 names every layer
        if (!types->is_array() || types->size() != size_t(cfg.numLayers))
            r.wrongType("layer_types",
                        fmt::format("a list of num_hidden_layers ({}) strings", cfg.numLayers).c_str(),
                        *types);
        for (size_t i = 0; i < types->size(); ++i) {
            const json &t = (*types)[i];
            if (t == "sliding_attention")
                cfg.layerAttention.push_back(LayerAttention::Sliding);
            else if (t == "full_attention")
                cfg.layerAttention.push_back(LayerAttention::Full);
            else
                throw Error(ErrorCode::Unsupported,
                            fmt::format("{}: field 'layer_types' entry {} is {}, which is not supported "
                                        "(supported: full_attention, sliding_attention)",
                                        source, i, t.dump()));
        }
        return;
    }
    // Older files give the pattern: Gemma 2 alternates, layer 0 sliding; Gemma 3 makes every
    // sliding_window_pattern-th layer (counting from 1) global.
    const int pattern = g3 ? r.optInt("sliding_window_pattern").value_or(6) : 2;
    if (pattern <= 0)
        throw Error(
            ErrorCode::Config,
            fmt::format("{}: field 'sliding_window_pattern' must be positive, got {}", source, pattern));
    for (int i = 0; i < cfg.numLayers; ++i)
        cfg.layerAttention.push_back((i + 1) % pattern != 0 ? LayerAttention::Sliding : LayerAttention::Full);
}

// rope_parameters keyed by layer type (Gemma 3 under transformers >= 5): full_attention is the
// global RoPE (theta and scaling), sliding_attention the sliding layers' base (never scaled).
void readRopePerLayerType(const json &obj, const std::string &source, ModelConfig &cfg)
{
    if (cfg.modelType != "gemma3_text")
        throw Error(ErrorCode::Unsupported,
                    fmt::format("{}: field 'rope_parameters' is keyed by layer type, which kvwb reads for "
                                "gemma3_text only",
                                source));
    FieldReader r(obj, source, "rope_parameters");
    if (const json *full = r.find("full_attention"))
        readRope(*full, source, "rope_parameters.full_attention", cfg);
    if (const json *sliding = r.find("sliding_attention")) {
        ModelConfig local;
        local.ropeTheta = cfg.ropeLocalTheta.value_or(10000.0);
        readRope(*sliding, source, "rope_parameters.sliding_attention", local);
        if (local.ropeScaling.type != "default")
            throw Error(ErrorCode::Unsupported,
                        fmt::format("{}: field 'rope_parameters.sliding_attention' has rope type '{}'; the "
                                    "sliding layers' RoPE is supported unscaled (default) only",
                                    source, local.ropeScaling.type));
        cfg.ropeLocalTheta = local.ropeTheta;
    }
}

// Plain RoPE inverse frequencies, [headDim / 2], in double.
std::vector<double> baseInvFreq(double theta, int headDim)
{
    const int half = headDim / 2;
    std::vector<double> inv(size_t(std::max(half, 0)));
    for (int i = 0; i < half; ++i)
        inv[size_t(i)] = 1.0 / std::pow(theta, double(2 * i) / double(headDim));
    return inv;
}

// The architecture class that config.json's model_type implies; Error(Unsupported) for a
// model_type kvwb does not read.
std::string defaultArchitecture(const std::string &modelType, const std::string &sourceName)
{
    if (modelType == "llama")
        return "LlamaForCausalLM";
    if (modelType == "mistral")
        return "MistralForCausalLM";
    if (modelType == "qwen2")
        return "Qwen2ForCausalLM";
    if (modelType == "qwen3")
        return "Qwen3ForCausalLM";
    if (modelType == "phi3")
        return "Phi3ForCausalLM";
    if (modelType == "gemma2")
        return "Gemma2ForCausalLM";
    if (modelType == "gemma3_text")
        return "Gemma3ForCausalLM";
    if (modelType == "gemma3")
        // Gemma3ForConditionalGeneration: its text model's fields are in text_config (most left to
        // Gemma3TextConfig's defaults) and its weights sit under the multimodal model's prefixes.
        throw Error(ErrorCode::Unsupported,
                    fmt::format("{}: model_type 'gemma3' (Gemma3ForConditionalGeneration, text and vision) "
                                "is not supported: its text model is in field 'text_config'; kvwb reads "
                                "Gemma 3 text checkpoints (model_type gemma3_text, Gemma3ForCausalLM)",
                                sourceName));
    throw Error(ErrorCode::Unsupported, fmt::format("{}: model_type '{}' is not supported (supported: {})",
                                                    sourceName, modelType, kSupportedModelTypes));
}

// cfg.architecture: the model_type's class, which "architectures" (when given) must name.
void readArchitecture(const FieldReader &r, const std::string &sourceName, ModelConfig &cfg)
{
    const std::string defaultArch = defaultArchitecture(cfg.modelType, sourceName);
    cfg.architecture = defaultArch;
    if (const json *arch = r.find("architectures")) {
        if (!arch->is_array() || arch->empty() || !(*arch)[0].is_string())
            r.wrongType("architectures", "a non-empty list of strings", *arch);
        cfg.architecture = (*arch)[0].get<std::string>();
        if (cfg.architecture != defaultArch)
            throw Error(
                ErrorCode::Unsupported,
                fmt::format("{}: architecture '{}' is not supported for model_type '{}' (expected {})",
                            sourceName, cfg.architecture, cfg.modelType, defaultArch));
    }
}

// The sizes: hidden, intermediate, layers, heads, KV heads, head_dim, vocabulary and context.
void readGeometry(const FieldReader &r, const std::string &sourceName, ModelConfig &cfg)
{
    const bool gemma = cfg.modelType == "gemma2" || cfg.modelType == "gemma3_text";
    cfg.hiddenSize = r.reqInt("hidden_size");
    cfg.intermediateSize = r.reqInt("intermediate_size");
    cfg.numLayers = r.reqInt("num_hidden_layers");
    cfg.numHeads = r.reqInt("num_attention_heads");
    cfg.numKvHeads = r.optInt("num_key_value_heads").value_or(cfg.numHeads);
    if (auto hd = r.optInt("head_dim")) {
        cfg.headDim = *hd;
    } else if (gemma) {
        cfg.headDim = 256; // Gemma2Config / Gemma3TextConfig default, not hidden / heads
    } else {
        cfg.headDim =
            headDimFromHidden(cfg.hiddenSize, cfg.numHeads, sourceName,
                              "{}: field 'hidden_size' ({}) is not divisible by 'num_attention_heads' "
                              "({}) and no head_dim is given");
    }
    cfg.vocabSize = r.reqInt("vocab_size");
    cfg.maxPositionEmbeddings = r.reqInt("max_position_embeddings");
}

// Each model type's projection biases, q/k norms and fused projections.
void readProjectionOptions(const FieldReader &r, const std::string &sourceName, ModelConfig &cfg)
{
    if (cfg.modelType == "llama") {
        // LlamaAttention uses attention_bias for all four projections.
        const bool ab = r.optBool("attention_bias").value_or(false);
        cfg.qkvBias = ab;
        cfg.oBias = ab;
        cfg.mlpBias = r.optBool("mlp_bias").value_or(false);
    } else if (cfg.modelType == "qwen2") {
        // Qwen2Attention hard-codes bias=True for q/k/v and bias=False for o; config has no switch.
        cfg.qkvBias = true;
        cfg.oBias = false;
    } else if (cfg.modelType == "qwen3") {
        // Qwen3Attention: attention_bias (default false) for all four projections, q_norm/k_norm
        // always; the MLP has no bias.
        const bool ab = r.optBool("attention_bias").value_or(false);
        cfg.qkvBias = ab;
        cfg.oBias = ab;
        cfg.qkNorm = true;
    } else if (cfg.modelType == "phi3") {
        // Phi3Attention / Phi3MLP: fused projections, no bias; the whole head rotates.
        cfg.fusedProjections = true;
        if (auto f = r.optDouble("partial_rotary_factor"); f && *f != 1.0)
            throw Error(ErrorCode::Unsupported,
                        fmt::format("{}: field 'partial_rotary_factor' is {}: partial RoPE is not supported "
                                    "(only 1.0)",
                                    sourceName, *f));
    }
}

// eos_token_id: one id or a list of them, into cfg.eosTokenIds.
void readEosTokenIds(const FieldReader &r, ModelConfig &cfg)
{
    if (const json *eos = r.find("eos_token_id")) {
        // an id beyond 32 bits must not wrap (4294967532 is not 236)
        const auto id = [&](const json &e) {
            if (!e.is_number_integer())
                r.wrongType("eos_token_id", "an integer or a list of integers", *eos);
            const int64_t x = e.get<int64_t>();
            if (e.is_number_unsigned()
                    ? e.get<uint64_t>() > uint64_t(std::numeric_limits<int>::max())
                    : (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()))
                r.wrongType("eos_token_id", "32-bit integers", *eos);
            return int(x);
        };
        if (eos->is_number_integer()) {
            cfg.eosTokenIds.push_back(id(*eos));
        } else if (eos->is_array()) {
            if (eos->size() > 1024)
                r.wrongType("eos_token_id", "at most 1024 ids", json(eos->size()));
            for (const json &e : *eos)
                cfg.eosTokenIds.push_back(id(e));
        } else {
            r.wrongType("eos_token_id", "an integer or a list of integers", *eos);
        }
    }
}

// rope_scaling, rope_parameters and original_max_position_embeddings, then LongRoPE's defaults.
void readRopeFields(const FieldReader &r, const std::string &sourceName, ModelConfig &cfg)
{
    if (const json *rs = r.find("rope_scaling"))
        readRope(*rs, sourceName, "rope_scaling", cfg);
    // rope_parameters is the newer layout; when both exist it wins (it is what new HF code reads).
    // Gemma 3 under transformers >= 5 keys it by layer type.
    if (const json *rp = r.find("rope_parameters")) {
        if (rp->is_object() && (rp->contains("full_attention") || rp->contains("sliding_attention")))
            readRopePerLayerType(*rp, sourceName, cfg);
        else
            readRope(*rp, sourceName, "rope_parameters", cfg);
    }
    const auto topLevelOriginal = r.optInt("original_max_position_embeddings");
    if (topLevelOriginal && *topLevelOriginal <= 0)
        throw Error(ErrorCode::Config,
                    fmt::format("{}: field 'original_max_position_embeddings' must be positive, got {}",
                                sourceName, *topLevelOriginal));
    finishLongRope(cfg, topLevelOriginal);
}

} // namespace

ModelConfig ModelConfig::fromHfJsonFile(const std::filesystem::path &configJson)
{
    const auto mapped = MappedFile::open(configJson);
    const std::string_view text(reinterpret_cast<const char *>(mapped->data()), size_t(mapped->size()));
    return fromHfJsonText(text, configJson.string());
}

ModelConfig ModelConfig::fromHfJsonText(std::string_view text, const std::string &sourceName)
{
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception &e) {
        throw Error(ErrorCode::Format, fmt::format("{}: not valid JSON: {}", sourceName, e.what()));
    }
    if (!j.is_object())
        throw Error(ErrorCode::Format, fmt::format("{}: config is not a JSON object", sourceName));
    FieldReader r(j, sourceName);

    ModelConfig cfg;
    const auto modelType = r.optString("model_type");
    if (!modelType)
        r.missing("model_type");
    cfg.modelType = *modelType;
    readArchitecture(r, sourceName, cfg);

    readGeometry(r, sourceName, cfg);
    cfg.rmsNormEps = r.optDouble("rms_norm_eps").value_or(1e-6); // HF LlamaConfig's default
    cfg.ropeTheta = r.optDouble("rope_theta").value_or(10000.0);
    cfg.tieWordEmbeddings = r.optBool("tie_word_embeddings").value_or(false);
    readProjectionOptions(r, sourceName, cfg);
    cfg.bosTokenId = r.optInt("bos_token_id");
    readEosTokenIds(r, cfg);
    if (auto dt = r.optString("torch_dtype"))
        cfg.torchDtype = *dt;
    else if (auto dt2 = r.optString("dtype")) // transformers >= 4.56 renamed it
        cfg.torchDtype = *dt2;

    if (cfg.modelType == "gemma2" || cfg.modelType == "gemma3_text")
        readGemma(j, r, sourceName, cfg);
    // Mistral (v0.1: 4096) and Phi-3 (mini: 2047) slide every layer when sliding_window is set
    // (MistralAttention / Phi3Attention's sliding-window mask); null or absent: no window.
    if ((cfg.modelType == "mistral" || cfg.modelType == "phi3") && cfg.numLayers > 0 &&
        cfg.numLayers <= kMaxLayers)
        if (const auto w = r.optInt("sliding_window")) {
            cfg.slidingWindow = *w;
            cfg.layerAttention.assign(size_t(cfg.numLayers), LayerAttention::Sliding);
        }

    readRopeFields(r, sourceName, cfg);

    cfg.validate(sourceName);
    return cfg;
}

std::string ModelConfig::toHfJson() const
{
    nlohmann::ordered_json j;
    const bool llama = modelType == "llama" || modelType == "llama2c";
    j["architectures"] = {llama && architecture == "Llama2c" ? std::string("LlamaForCausalLM")
                                                             : architecture};
    j["model_type"] = llama ? std::string("llama") : modelType;
    j["hidden_size"] = hiddenSize;
    j["intermediate_size"] = intermediateSize;
    j["num_hidden_layers"] = numLayers;
    j["num_attention_heads"] = numHeads;
    j["num_key_value_heads"] = numKvHeads;
    j["head_dim"] = headDim;
    j["vocab_size"] = vocabSize;
    j["max_position_embeddings"] = maxPositionEmbeddings;
    j["rms_norm_eps"] = rmsNormEps;
    j["rope_theta"] = ropeTheta;
    if (ropeScaling.type == "default") {
        j["rope_scaling"] = nullptr;
    } else if (ropeScaling.type == "longrope") {
        // Phi3Config's layout: three keys, the original context at the top level.
        nlohmann::ordered_json rs;
        rs["type"] = "longrope";
        rs["short_factor"] = ropeScaling.shortFactor;
        rs["long_factor"] = ropeScaling.longFactor;
        ModelConfig derived = *this;
        derived.ropeScaling.attentionFactor = 0.0;
        finishLongRope(derived, ropeScaling.originalMaxPositionEmbeddings);
        if (derived.ropeScaling.attentionFactor != ropeScaling.attentionFactor)
            rs["attention_factor"] = ropeScaling.attentionFactor;
        j["rope_scaling"] = rs;
        j["original_max_position_embeddings"] = ropeScaling.originalMaxPositionEmbeddings;
    } else {
        nlohmann::ordered_json rs;
        rs["rope_type"] = ropeScaling.type;
        rs["factor"] = ropeScaling.factor;
        if (ropeScaling.type == "llama3") {
            rs["low_freq_factor"] = ropeScaling.lowFreqFactor;
            rs["high_freq_factor"] = ropeScaling.highFreqFactor;
            rs["original_max_position_embeddings"] = ropeScaling.originalMaxPositionEmbeddings;
        }
        j["rope_scaling"] = rs;
    }
    j["tie_word_embeddings"] = tieWordEmbeddings;
    if (llama) {
        // HF Llama has one switch for all four attention projections; qkv-only bias is Qwen2's.
        j["attention_bias"] = qkvBias || oBias;
        j["mlp_bias"] = mlpBias;
    } else if (modelType == "qwen3") {
        j["attention_bias"] = qkvBias || oBias;
    } else if (modelType == "mistral" || modelType == "phi3") {
        if (std::find(layerAttention.begin(), layerAttention.end(), LayerAttention::Sliding) !=
            layerAttention.end())
            j["sliding_window"] = slidingWindow;
        else
            j["sliding_window"] = nullptr;
    } else if (modelType == "gemma2" || modelType == "gemma3_text") {
        j["attention_bias"] = qkvBias || oBias;
        j["hidden_activation"] = activation == MlpActivation::GeluTanh ? "gelu_pytorch_tanh" : "silu";
        j["query_pre_attn_scalar"] = queryPreAttnScalar.value_or(256.0);
        // null, not absent: an absent soft-cap means Gemma 2's default of 50 / 30
        j["attn_logit_softcapping"] = attnLogitSoftcap ? nlohmann::ordered_json(*attnLogitSoftcap) : nullptr;
        j["final_logit_softcapping"] =
            finalLogitSoftcap ? nlohmann::ordered_json(*finalLogitSoftcap) : nullptr;
        j["sliding_window"] = slidingWindow;
        nlohmann::ordered_json types = nlohmann::ordered_json::array();
        for (int l = 0; l < numLayers; ++l)
            types.push_back(isSlidingLayer(l) ? "sliding_attention" : "full_attention");
        j["layer_types"] = types;
        if (modelType == "gemma3_text") {
            j["rope_local_base_freq"] = ropeLocalTheta.value_or(ropeTheta);
            // transformers < 4.53 reads the pattern, not layer_types: written when one fits
            for (int p = 1; p <= numLayers + 1; ++p) {
                bool fits = true;
                for (int l = 0; l < numLayers && fits; ++l)
                    fits = isSlidingLayer(l) == ((l + 1) % p != 0);
                if (fits) {
                    j["sliding_window_pattern"] = p;
                    break;
                }
            }
        }
    }
    if (bosTokenId)
        j["bos_token_id"] = *bosTokenId;
    else
        j["bos_token_id"] = nullptr;
    if (eosTokenIds.size() == 1)
        j["eos_token_id"] = eosTokenIds[0];
    else if (eosTokenIds.empty())
        j["eos_token_id"] = nullptr;
    else
        j["eos_token_id"] = eosTokenIds;
    if (!torchDtype.empty())
        j["torch_dtype"] = torchDtype;
    return j.dump(2) + "\n";
}

void ModelConfig::validate(const std::string &source) const
{
    const auto positive = [&](const char *field, double v) {
        if (!(v > 0))
            throw Error(ErrorCode::Config,
                        fmt::format("{}: field '{}' must be positive, got {}", source, field, v));
    };
    // Every float a model file gives is finite and inside the range docs/model-formats.md states
    // ("Float fields"): (lo, hi] when lo is open, else [lo, hi]. +inf or 1e308 epsilon, RoPE base or
    // scaling factor would load and generate garbage.
    const auto floatIn = [&](const char *field, double v, double lo, double hi, bool loOpen) {
        const bool ok = std::isfinite(v) && (loOpen ? v > lo : v >= lo) && v <= hi;
        if (!ok)
            throw Error(ErrorCode::Config, fmt::format("{}: field '{}' is {}; kvwb accepts {}{}, {}]", source,
                                                       field, v, loOpen ? "(" : "[", lo, hi));
    };
    const auto factor = [&](const char *field, double v) { floatIn(field, v, 0, 1e4, true); };
    // Stated limits (docs/model-formats.md), checked before anything is sized from them: a 500-byte
    // config must not make the loader list two billion layers' tensors.
    const auto atMost = [&](const char *field, int64_t v, int64_t limit) {
        if (v > limit)
            throw Error(ErrorCode::Config, fmt::format("{}: field '{}' is {}, more than kvwb's limit of {}",
                                                       source, field, v, limit));
    };
    atMost("hidden_size", hiddenSize, kMaxHidden);
    atMost("intermediate_size", intermediateSize, kMaxIntermediate);
    atMost("num_hidden_layers", numLayers, kMaxLayers);
    atMost("num_attention_heads", numHeads, kMaxHeads);
    atMost("num_key_value_heads", numKvHeads, kMaxHeads);
    atMost("head_dim", headDim, kMaxHeadDim);
    atMost("vocab_size", vocabSize, kMaxVocab);
    atMost("max_position_embeddings", maxPositionEmbeddings, kMaxPositions);
    positive("hidden_size", hiddenSize);
    positive("intermediate_size", intermediateSize);
    positive("num_hidden_layers", numLayers);
    positive("num_attention_heads", numHeads);
    positive("num_key_value_heads", numKvHeads);
    positive("head_dim", headDim);
    positive("vocab_size", vocabSize);
    positive("max_position_embeddings", maxPositionEmbeddings);
    floatIn("rms_norm_eps", rmsNormEps, 0, 0.1, true);
    floatIn("rope_theta", ropeTheta, 1, 1e9, false);
    if (numHeads % numKvHeads != 0)
        throw Error(
            ErrorCode::Config,
            fmt::format(
                "{}: field 'num_attention_heads' ({}) is not a multiple of 'num_key_value_heads' ({})",
                source, numHeads, numKvHeads));
    if (headDim % 2 != 0)
        throw Error(ErrorCode::Config,
                    fmt::format("{}: field 'head_dim' ({}) must be even for RoPE", source, headDim));
    if (ropeScaling.type == "longrope") {
        const size_t half = size_t(headDim / 2);
        for (const auto &[name, f] : {std::pair{"rope_scaling.short_factor", &ropeScaling.shortFactor},
                                      std::pair{"rope_scaling.long_factor", &ropeScaling.longFactor}}) {
            if (f->size() != half)
                throw Error(ErrorCode::Config,
                            fmt::format("{}: field '{}' has {} entries; head_dim {} needs {}", source, name,
                                        f->size(), headDim, half));
            for (double x : *f)
                factor(name, x);
        }
        factor("rope_scaling.attention_factor", ropeScaling.attentionFactor);
        positive("original_max_position_embeddings", ropeScaling.originalMaxPositionEmbeddings);
    }
    if (ropeScaling.type != "default") {
        factor("rope_scaling.factor", ropeScaling.factor);
        if (ropeScaling.type == "llama3") {
            factor("rope_scaling.low_freq_factor", ropeScaling.lowFreqFactor);
            factor("rope_scaling.high_freq_factor", ropeScaling.highFreqFactor);
            positive("rope_scaling.original_max_position_embeddings",
                     ropeScaling.originalMaxPositionEmbeddings);
            if (ropeScaling.highFreqFactor <= ropeScaling.lowFreqFactor)
                throw Error(
                    ErrorCode::Config,
                    fmt::format("{}: field 'rope_scaling.high_freq_factor' ({}) must exceed low_freq_factor "
                                "({})",
                                source, ropeScaling.highFreqFactor, ropeScaling.lowFreqFactor));
        }
    }
    if (queryPreAttnScalar)
        floatIn("query_pre_attn_scalar", *queryPreAttnScalar, 0, 1e6, true);
    if (attnLogitSoftcap)
        factor("attn_logit_softcapping", *attnLogitSoftcap);
    if (finalLogitSoftcap)
        factor("final_logit_softcapping", *finalLogitSoftcap);
    if (ropeLocalTheta)
        floatIn("rope_local_base_freq", *ropeLocalTheta, 1, 1e9, false);
    if (!layerAttention.empty() && layerAttention.size() != size_t(numLayers))
        throw Error(ErrorCode::Config, fmt::format("{}: field 'layer_types' has {} entries for {} layers",
                                                   source, layerAttention.size(), numLayers));
    if (std::find(layerAttention.begin(), layerAttention.end(), LayerAttention::Sliding) !=
        layerAttention.end())
        positive("sliding_window", slidingWindow);
    for (int eos : eosTokenIds) {
        if (eos < 0 || eos >= vocabSize)
            throw Error(ErrorCode::Config,
                        fmt::format("{}: field 'eos_token_id' has id {}, outside the vocabulary "
                                    "0..{}",
                                    source, eos, vocabSize - 1));
    }
    if (bosTokenId && (*bosTokenId < 0 || *bosTokenId >= vocabSize))
        throw Error(ErrorCode::Config,
                    fmt::format("{}: field 'bos_token_id' is {}, outside the vocabulary 0..{}", source,
                                *bosTokenId, vocabSize - 1));
}

bool ModelConfig::isSlidingLayer(int layer) const
{
    return layer >= 0 && size_t(layer) < layerAttention.size() &&
           layerAttention[size_t(layer)] == LayerAttention::Sliding;
}

std::vector<double> ModelConfig::ropeInvFreq(int layer) const
{
    if (ropeLocalTheta && isSlidingLayer(layer)) // Gemma3RotaryEmbedding's local copy: no scaling
        return baseInvFreq(*ropeLocalTheta, headDim);
    std::vector<double> inv = baseInvFreq(ropeTheta, headDim);
    if (ropeScaling.type == "longrope") {
        // 1 / (ext_i * theta^(2i/d)) with the set the loaded model uses
        const auto &ext = ropeScaling.useLongFactor ? ropeScaling.longFactor : ropeScaling.shortFactor;
        for (size_t i = 0; i < inv.size() && i < ext.size(); ++i)
            inv[i] /= ext[i];
    } else if (ropeScaling.type == "linear") {
        for (double &f : inv)
            f /= ropeScaling.factor;
    } else if (ropeScaling.type == "llama3") {
        // Same arithmetic as transformers' _compute_llama3_parameters.
        const double factor = ropeScaling.factor;
        const double low = ropeScaling.lowFreqFactor;
        const double high = ropeScaling.highFreqFactor;
        const double oldCtx = ropeScaling.originalMaxPositionEmbeddings;
        const double lowFreqWavelen = oldCtx / low;
        const double highFreqWavelen = oldCtx / high;
        for (double &f : inv) {
            const double wavelen = 2.0 * std::numbers::pi / f;
            const double scaled = wavelen > lowFreqWavelen ? f / factor : f;
            const bool medium = !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen);
            if (medium) {
                const double smooth = (oldCtx / wavelen - low) / (high - low);
                f = (1.0 - smooth) * scaled / factor + smooth * scaled;
            } else {
                f = scaled;
            }
        }
    }
    return inv;
}

int headDimFromHidden(int hiddenSize, int numHeads, const std::string &source,
                      fmt::format_string<const std::string &, int, int> message)
{
    if (numHeads <= 0 || hiddenSize % numHeads != 0)
        throw Error(ErrorCode::Config,
                    fmt::vformat(message, fmt::make_format_args(source, hiddenSize, numHeads)));
    return hiddenSize / numHeads;
}

int ModelConfig::contextLimit() const
{
    if (ropeScaling.type == "longrope" && !ropeScaling.useLongFactor)
        return std::min(maxPositionEmbeddings, ropeScaling.originalMaxPositionEmbeddings);
    return maxPositionEmbeddings;
}

double ModelConfig::ropeAttentionFactor() const
{
    return ropeScaling.type == "longrope" ? ropeScaling.attentionFactor : 1.0;
}

int64_t ModelConfig::parameterCount() const
{
    const int64_t h = hiddenSize, q = int64_t(numHeads) * headDim, kv = int64_t(numKvHeads) * headDim;
    const int64_t inter = intermediateSize, v = vocabSize;
    int64_t layer = 2 * h;               // input_layernorm + post_attention_layernorm
    layer += h * q + 2 * h * kv + q * h; // q, k, v, o weights
    if (qkvBias)
        layer += q + 2 * kv;
    if (oBias)
        layer += h;
    layer += 3 * h * inter; // gate, up, down
    if (mlpBias)
        layer += 2 * inter + h;
    if (qkNorm)
        layer += 2 * int64_t(headDim);
    if (sandwichNorms)
        layer += 2 * h; // pre_feedforward_layernorm + post_feedforward_layernorm
    int64_t total = v * h + int64_t(numLayers) * layer + h;
    if (!tieWordEmbeddings)
        total += v * h;
    return total;
}

int64_t ModelConfig::kvBytesPerToken(int bytesPerElement) const
{
    return 2 * int64_t(numLayers) * numKvHeads * headDim * bytesPerElement;
}

} // namespace kvwb::core
