#include "core/model/model_config.h"

#include "core/util/error.h"
#include "core/util/mapped_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <numbers>

namespace kvwb::core {

const char *ropeLayoutName(RopeLayout l) noexcept
{
    return l == RopeLayout::Interleaved ? "interleaved" : "rotate_half";
}

std::optional<RopeLayout> parseRopeLayout(std::string_view name) noexcept
{
    if (name == "rotate_half")
        return RopeLayout::RotateHalf;
    if (name == "interleaved")
        return RopeLayout::Interleaved;
    return std::nullopt;
}

using nlohmann::json;

namespace {

// Reads fields of one JSON object and reports faults as "SOURCE: field 'prefix.name' ...".
class FieldReader
{
public:
    FieldReader(const json &obj, const std::string &source, std::string prefix = {})
        : m_obj(obj), m_source(source), m_prefix(std::move(prefix))
    {}

    std::string fieldName(const char *name) const { return m_prefix.empty() ? name : m_prefix + "." + name; }

    // Missing and JSON null both mean "not given": HF writes null for unset optional fields.
    const json *find(const char *name) const
    {
        const auto it = m_obj.find(name);
        return it == m_obj.end() || it->is_null() ? nullptr : &*it;
    }

    [[noreturn]] void missing(const char *name) const
    {
        throw Error(ErrorCode::Config, fmt::format("{}: field '{}' is missing", m_source, fieldName(name)));
    }
    [[noreturn]] void wrongType(const char *name, const char *expected, const json &v) const
    {
        throw Error(ErrorCode::Config, fmt::format("{}: field '{}' must be {}, got {}", m_source,
                                                   fieldName(name), expected, v.dump()));
    }

    std::optional<int> optInt(const char *name) const
    {
        const json *v = find(name);
        if (!v)
            return std::nullopt;
        if (!v->is_number_integer())
            wrongType(name, "an integer", *v);
        if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int>::max()))
            wrongType(name, "a 32-bit integer", *v);
        const int64_t x = v->get<int64_t>();
        if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
            wrongType(name, "a 32-bit integer", *v);
        return int(x);
    }
    int reqInt(const char *name) const
    {
        const auto v = optInt(name);
        if (!v)
            missing(name);
        return *v;
    }
    std::optional<double> optDouble(const char *name) const
    {
        const json *v = find(name);
        if (!v)
            return std::nullopt;
        if (!v->is_number())
            wrongType(name, "a number", *v);
        return v->get<double>();
    }
    double reqDouble(const char *name) const
    {
        const auto v = optDouble(name);
        if (!v)
            missing(name);
        return *v;
    }
    std::optional<bool> optBool(const char *name) const
    {
        const json *v = find(name);
        if (!v)
            return std::nullopt;
        if (!v->is_boolean())
            wrongType(name, "true or false", *v);
        return v->get<bool>();
    }
    std::optional<std::string> optString(const char *name) const
    {
        const json *v = find(name);
        if (!v)
            return std::nullopt;
        if (!v->is_string())
            wrongType(name, "a string", *v);
        return v->get<std::string>();
    }

private:
    const json &m_obj;
    const std::string &m_source;
    std::string m_prefix;
};

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
    } else {
        throw Error(
            ErrorCode::Unsupported,
            fmt::format("{}: field '{}.{}' is '{}', which is not supported (supported: default, linear, "
                        "llama3)",
                        source, field, typeKey, type));
    }
    cfg.ropeScaling = s;
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
    std::string defaultArch;
    if (cfg.modelType == "llama")
        defaultArch = "LlamaForCausalLM";
    else if (cfg.modelType == "mistral")
        defaultArch = "MistralForCausalLM";
    else if (cfg.modelType == "qwen2")
        defaultArch = "Qwen2ForCausalLM";
    else if (cfg.modelType == "qwen3")
        defaultArch = "Qwen3ForCausalLM";
    else if (cfg.modelType == "phi3")
        defaultArch = "Phi3ForCausalLM";
    else
        throw Error(
            ErrorCode::Unsupported,
            fmt::format(
                "{}: model_type '{}' is not supported (supported: llama, mistral, qwen2, qwen3, phi3)",
                sourceName, cfg.modelType));
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

    cfg.hiddenSize = r.reqInt("hidden_size");
    cfg.intermediateSize = r.reqInt("intermediate_size");
    cfg.numLayers = r.reqInt("num_hidden_layers");
    cfg.numHeads = r.reqInt("num_attention_heads");
    cfg.numKvHeads = r.optInt("num_key_value_heads").value_or(cfg.numHeads);
    if (auto hd = r.optInt("head_dim")) {
        cfg.headDim = *hd;
    } else {
        if (cfg.numHeads <= 0 || cfg.hiddenSize % cfg.numHeads != 0)
            throw Error(
                ErrorCode::Config,
                fmt::format("{}: field 'hidden_size' ({}) is not divisible by 'num_attention_heads' ({}) and "
                            "no head_dim is given",
                            sourceName, cfg.hiddenSize, cfg.numHeads));
        cfg.headDim = cfg.hiddenSize / cfg.numHeads;
    }
    cfg.vocabSize = r.reqInt("vocab_size");
    cfg.maxPositionEmbeddings = r.reqInt("max_position_embeddings");
    cfg.rmsNormEps = r.optDouble("rms_norm_eps").value_or(1e-6); // HF LlamaConfig's default
    cfg.ropeTheta = r.optDouble("rope_theta").value_or(10000.0);
    cfg.tieWordEmbeddings = r.optBool("tie_word_embeddings").value_or(false);
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
    cfg.bosTokenId = r.optInt("bos_token_id");
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
    if (auto dt = r.optString("torch_dtype"))
        cfg.torchDtype = *dt;
    else if (auto dt2 = r.optString("dtype")) // transformers >= 4.56 renamed it
        cfg.torchDtype = *dt2;

    if (const json *rs = r.find("rope_scaling"))
        readRope(*rs, sourceName, "rope_scaling", cfg);
    // rope_parameters is the newer layout; when both exist it wins (it is what new HF code reads).
    if (const json *rp = r.find("rope_parameters"))
        readRope(*rp, sourceName, "rope_parameters", cfg);

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
    positive("rms_norm_eps", rmsNormEps);
    positive("rope_theta", ropeTheta);
    if (numHeads % numKvHeads != 0)
        throw Error(
            ErrorCode::Config,
            fmt::format(
                "{}: field 'num_attention_heads' ({}) is not a multiple of 'num_key_value_heads' ({})",
                source, numHeads, numKvHeads));
    if (headDim % 2 != 0)
        throw Error(ErrorCode::Config,
                    fmt::format("{}: field 'head_dim' ({}) must be even for RoPE", source, headDim));
    if (ropeScaling.type != "default") {
        positive("rope_scaling.factor", ropeScaling.factor);
        if (ropeScaling.type == "llama3") {
            positive("rope_scaling.low_freq_factor", ropeScaling.lowFreqFactor);
            positive("rope_scaling.high_freq_factor", ropeScaling.highFreqFactor);
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

std::vector<double> ModelConfig::ropeInvFreq() const
{
    const int half = headDim / 2;
    std::vector<double> inv(size_t(std::max(half, 0)));
    for (int i = 0; i < half; ++i)
        inv[size_t(i)] = 1.0 / std::pow(ropeTheta, double(2 * i) / double(headDim));
    if (ropeScaling.type == "linear") {
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
