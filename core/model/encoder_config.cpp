#include "core/model/encoder_config.h"

#include "core/model/gguf.h"
#include "core/model/json_fields_p.h"
#include "core/model/model_config.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/sha256.h"
#include "core/util/text_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <mutex>

namespace kvwb::core {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr EnumName<EncoderActivation> kActivationNames[] = {{EncoderActivation::Gelu, "gelu"},
                                                            {EncoderActivation::GeluTanh, "gelu_new"},
                                                            {EncoderActivation::Relu, "relu"}};

} // namespace

const char *encoderActivationName(EncoderActivation a) noexcept
{
    return enumName(kActivationNames, a);
}

int64_t EncoderConfig::parameterCount() const
{
    const int64_t h = hiddenSize, i = intermediateSize;
    const int64_t perLayer = 4 * (h * h + h) + 2 * (h * i) + i + h + 4 * h;
    return int64_t(vocabSize + maxPositions + typeVocabSize) * h + 2 * h + numLayers * perLayer;
}

void EncoderConfig::validate(const std::string &source) const
{
    const auto check = [&](const char *field, int64_t v, int64_t lo, int64_t hi) {
        if (v < lo || v > hi)
            throw Error(ErrorCode::Config,
                        fmt::format("{}: field '{}' is {}; kvwb accepts {}..{}", source, field, v, lo, hi));
    };
    check("vocab_size", vocabSize, 1, kMaxVocab);
    check("hidden_size", hiddenSize, 1, kMaxHidden);
    check("num_hidden_layers", numLayers, 1, kMaxLayers);
    check("num_attention_heads", numHeads, 1, kMaxHeads);
    check("intermediate_size", intermediateSize, 1, kMaxIntermediate);
    check("max_position_embeddings", maxPositions, 1, 1 << 20);
    check("type_vocab_size", typeVocabSize, 1, 1024);
    check("max_seq_length", maxSeqLength, 0, 1 << 20);
    // 0: not given. Below 8 tokens every sentence is cut to its first word or two, so unrelated
    // questions embed alike and every semantic lookup would hit.
    if (maxSeqLength > 0 && maxSeqLength < 8)
        throw Error(ErrorCode::Config,
                    fmt::format("{}: field 'max_seq_length' is {}; kvwb needs at least 8 tokens per sentence",
                                source, maxSeqLength));
    if (hiddenSize % numHeads != 0)
        throw Error(ErrorCode::Config,
                    fmt::format("{}: field 'num_attention_heads' ({}) does not divide hidden_size ({})",
                                source, numHeads, hiddenSize));
    if (!(layerNormEps > 0) || layerNormEps > 1)
        throw Error(ErrorCode::Config,
                    fmt::format("{}: field 'layer_norm_eps' is {}; expected a small positive number", source,
                                layerNormEps));
}

std::string EncoderConfig::toHfJson() const
{
    json j = {{"architectures", {"BertModel"}},
              {"model_type", modelType},
              {"vocab_size", vocabSize},
              {"hidden_size", hiddenSize},
              {"num_hidden_layers", numLayers},
              {"num_attention_heads", numHeads},
              {"intermediate_size", intermediateSize},
              {"max_position_embeddings", maxPositions},
              {"type_vocab_size", typeVocabSize},
              {"layer_norm_eps", layerNormEps},
              {"hidden_act", encoderActivationName(activation)},
              {"position_embedding_type", "absolute"},
              {"pad_token_id", 0},
              {"torch_dtype", "float32"}};
    return j.dump(2) + "\n";
}

namespace {

json readJsonFile(const fs::path &path)
{
    try {
        return json::parse(text::readWholeFile(path));
    } catch (const json::exception &e) {
        throw Error(ErrorCode::Config, fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
    }
}

bool isBertType(const json &j)
{
    if (!j.is_object())
        return false;
    const auto type = j.find("model_type");
    if (type != j.end() && type->is_string() && type->get<std::string>() == "bert")
        return true;
    const auto arch = j.find("architectures");
    if (arch != j.end() && arch->is_array())
        for (const json &a : *arch)
            if (a.is_string() && a.get<std::string>().rfind("Bert", 0) == 0)
                return true;
    return false;
}

EncoderConfig configFromJson(const json &j, const std::string &source)
{
    if (!j.is_object())
        throw Error(ErrorCode::Config, source + ": not a JSON object");
    if (!isBertType(j))
        throw Error(ErrorCode::Config,
                    source + ": field 'model_type' is not bert: kvwb's sentence encoders are BERT-family "
                             "(all-MiniLM, bge, gte, e5)");
    const detail::FieldReader r(j, source);
    EncoderConfig c;
    c.vocabSize = r.reqInt("vocab_size");
    c.hiddenSize = r.reqInt("hidden_size");
    c.numLayers = r.reqInt("num_hidden_layers");
    c.numHeads = r.reqInt("num_attention_heads");
    c.intermediateSize = r.reqInt("intermediate_size");
    c.maxPositions = r.optInt("max_position_embeddings").value_or(512);
    c.typeVocabSize = r.optInt("type_vocab_size").value_or(2);
    c.layerNormEps = r.optDouble("layer_norm_eps").value_or(1e-12);
    const std::string act = r.optString("hidden_act").value_or("gelu");
    if (act == "gelu")
        c.activation = EncoderActivation::Gelu;
    else if (act == "gelu_new" || act == "gelu_pytorch_tanh")
        c.activation = EncoderActivation::GeluTanh;
    else if (act == "relu")
        c.activation = EncoderActivation::Relu;
    else
        throw Error(
            ErrorCode::Config,
            fmt::format("{}: field 'hidden_act' is '{}'; expected gelu, gelu_new or relu", source, act));
    if (const auto pad = r.optInt("pad_token_id"); pad && (*pad < 0 || *pad >= c.vocabSize))
        throw Error(ErrorCode::Config,
                    fmt::format("{}: field 'pad_token_id' is {}, outside the vocabulary of {}", source, *pad,
                                c.vocabSize));
    const std::string pos = r.optString("position_embedding_type").value_or("absolute");
    if (pos != "absolute")
        throw Error(ErrorCode::Config,
                    fmt::format("{}: field 'position_embedding_type' is '{}'; kvwb's encoder has absolute "
                                "positions only",
                                source, pos));
    return c;
}

// modules.json and the Pooling / Normalize modules it names; sentence_bert_config.json.
void readSentenceTransformers(const fs::path &dir, EncoderConfig &c)
{
    c.pooling = Pooling::Mean;
    c.poolingSource = "default (no modules.json)";
    const fs::path modules = dir / "modules.json";
    if (fs::exists(modules)) {
        const json list = readJsonFile(modules);
        if (!list.is_array())
            throw Error(ErrorCode::Config, modules.string() + ": expected a list of modules");
        c.poolingSource = "modules.json";
        bool sawTransformer = false, sawPooling = false;
        for (size_t i = 0; i < list.size(); ++i) {
            const json &m = list[i];
            const std::string where = fmt::format("{}: module {}", modules.string(), i);
            if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
                throw Error(ErrorCode::Config, where + ": field 'type' is missing or not a string");
            const std::string type = m["type"].get<std::string>();
            const std::string path =
                m.contains("path") && m["path"].is_string() ? m["path"].get<std::string>() : "";
            if (path.find("..") != std::string::npos || (!path.empty() && path[0] == '/'))
                throw Error(ErrorCode::Config,
                            where + ": field 'path' '" + path + "' leaves the model directory");
            const std::string kind =
                type.substr(type.rfind('.') == std::string::npos ? 0 : type.rfind('.') + 1);
            if (kind == "Transformer") {
                sawTransformer = true;
            } else if (kind == "Pooling") {
                if (sawPooling)
                    throw Error(ErrorCode::Config, where + ": a second Pooling module (kvwb pools once)");
                sawPooling = true;
                const fs::path cfgPath = dir / path / "config.json";
                const json p = readJsonFile(cfgPath);
                if (p.is_object() && p.contains("word_embedding_dimension") &&
                    (!p["word_embedding_dimension"].is_number_integer() ||
                     p["word_embedding_dimension"].get<int64_t>() != c.hiddenSize))
                    throw Error(
                        ErrorCode::Config,
                        fmt::format("{}: field 'word_embedding_dimension' is {}; the encoder's hidden "
                                    "size is {}",
                                    cfgPath.string(), p["word_embedding_dimension"].dump(), c.hiddenSize));
                const auto flag = [&](const char *name) {
                    return p.is_object() && p.contains(name) && p[name].is_boolean() && p[name].get<bool>();
                };
                std::vector<Pooling> modes;
                if (flag("pooling_mode_cls_token"))
                    modes.push_back(Pooling::Cls);
                if (flag("pooling_mode_mean_tokens"))
                    modes.push_back(Pooling::Mean);
                if (flag("pooling_mode_max_tokens"))
                    modes.push_back(Pooling::Max);
                if (flag("pooling_mode_lasttoken"))
                    modes.push_back(Pooling::Last);
                if (flag("pooling_mode_mean_sqrt_len_tokens") || flag("pooling_mode_weightedmean_tokens"))
                    throw Error(ErrorCode::Config,
                                cfgPath.string() + ": pooling modes mean_sqrt_len and weightedmean are not "
                                                   "supported (mean, cls, max, lasttoken are)");
                if (modes.size() != 1)
                    throw Error(ErrorCode::Config,
                                fmt::format("{}: {} pooling modes set; kvwb takes exactly one of "
                                            "pooling_mode_cls_token, _mean_tokens, _max_tokens, _lasttoken",
                                            cfgPath.string(), modes.size()));
                c.pooling = modes[0];
            } else if (kind == "Normalize") {
                c.normalize = true;
            } else {
                throw Error(ErrorCode::Config,
                            where + ": module type '" + type +
                                "' is not supported (Transformer, Pooling and Normalize are)");
            }
        }
        if (!sawTransformer)
            throw Error(ErrorCode::Config, modules.string() + ": no Transformer module");
    }
    const fs::path st = dir / "sentence_bert_config.json";
    if (fs::exists(st)) {
        const json j = readJsonFile(st);
        if (!j.is_object())
            throw Error(ErrorCode::Config, st.string() + ": not a JSON object");
        const detail::FieldReader r(j, st.string());
        c.maxSeqLength = r.optInt("max_seq_length").value_or(0);
    }
}

EncoderConfig configFromGguf(const GgufFile &g)
{
    const std::string src = g.path().string();
    const auto need = [&](const std::string &key) -> int64_t {
        const auto v = g.integer(key);
        if (!v)
            throw Error(ErrorCode::Config,
                        fmt::format("{}: metadata '{}' is missing or not an integer", src, key));
        if (*v < 0 || *v > (int64_t(1) << 30))
            throw Error(ErrorCode::Config,
                        fmt::format("{}: metadata '{}' is {}, out of range", src, key, *v));
        return *v;
    };
    EncoderConfig c;
    c.hiddenSize = int(need("bert.embedding_length"));
    c.numLayers = int(need("bert.block_count"));
    c.numHeads = int(need("bert.attention.head_count"));
    c.intermediateSize = int(need("bert.feed_forward_length"));
    c.maxPositions = int(need("bert.context_length"));
    c.layerNormEps = g.number("bert.attention.layer_norm_epsilon").value_or(1e-12);
    const GgufTensor *embd = g.tensor("token_embd.weight");
    if (!embd || embd->info.shape.size() != 2)
        throw Error(ErrorCode::Shape, src + ": tensor 'token_embd.weight' is missing or not 2-D");
    c.vocabSize = int(std::min<int64_t>(embd->info.shape[0], int64_t(kMaxVocab) + 1));
    const GgufTensor *types = g.tensor("token_types.weight");
    c.typeVocabSize =
        types && types->info.shape.size() == 2 ? int(std::min<int64_t>(types->info.shape[0], 1025)) : 2;
    const int64_t pooling = g.integer("bert.pooling_type").value_or(1);
    switch (pooling) { // llama.cpp's enum llama_pooling_type
    case 1:
        c.pooling = Pooling::Mean;
        break;
    case 2:
        c.pooling = Pooling::Cls;
        break;
    case 3:
        c.pooling = Pooling::Last;
        break;
    default:
        throw Error(
            ErrorCode::Config,
            fmt::format("{}: metadata 'bert.pooling_type' is {}; expected 1 (mean), 2 (cls) or 3 (last)", src,
                        pooling));
    }
    c.poolingSource = "gguf";
    c.normalize = true; // llama.cpp normalises embeddings (Euclidean) unless told otherwise
    return c;
}

// llama.cpp's names for BERT tensors -> the Hugging Face names kvwb uses.
std::optional<std::string> hfNameOfGguf(const std::string &g)
{
    static const std::map<std::string, std::string> top = {
        {"token_embd.weight", "embeddings.word_embeddings.weight"},
        {"position_embd.weight", "embeddings.position_embeddings.weight"},
        {"token_types.weight", "embeddings.token_type_embeddings.weight"},
        {"token_embd_norm.weight", "embeddings.LayerNorm.weight"},
        {"token_embd_norm.bias", "embeddings.LayerNorm.bias"}};
    if (auto it = top.find(g); it != top.end())
        return it->second;
    static const std::map<std::string, std::string> layer = {
        {"attn_q", "attention.self.query"},
        {"attn_k", "attention.self.key"},
        {"attn_v", "attention.self.value"},
        {"attn_output", "attention.output.dense"},
        {"attn_output_norm", "attention.output.LayerNorm"},
        {"ffn_up", "intermediate.dense"},
        {"ffn_down", "output.dense"},
        {"layer_output_norm", "output.LayerNorm"}};
    if (g.rfind("blk.", 0) != 0)
        return std::nullopt;
    const size_t dot = g.find('.', 4), last = g.rfind('.');
    if (dot == std::string::npos || last <= dot)
        return std::nullopt;
    const std::string index = g.substr(4, dot - 4), base = g.substr(dot + 1, last - dot - 1),
                      suffix = g.substr(last + 1);
    if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos || index.size() > 6)
        return std::nullopt;
    const auto it = layer.find(base);
    if (it == layer.end() || (suffix != "weight" && suffix != "bias"))
        return std::nullopt;
    return "encoder.layer." + index + "." + it->second + "." + suffix;
}

} // namespace

bool isBuiltinEmbedder(const std::string &spec)
{
    return spec == "lexical" || spec == "lexical-idf" || spec == "model";
}

bool isEncoderModel(const fs::path &path)
{
    std::error_code ec;
    if (fs::is_regular_file(path, ec) && GgufFile::looksLikeGguf(path)) {
        try {
            const auto arch = GgufFile::open(path).string("general.architecture");
            return arch && *arch == "bert";
        } catch (const Error &) {
            return false;
        }
    }
    const fs::path cfg = fs::is_directory(path, ec) ? path / "config.json" : path;
    if (cfg.filename() != "config.json" || !fs::is_regular_file(cfg, ec))
        return false;
    try {
        return isBertType(json::parse(text::readWholeFile(cfg)));
    } catch (const std::exception &) {
        return false;
    }
}

struct EncoderCheckpoint::Impl
{
    fs::path path;
    EncoderConfig config;
    std::optional<WeightSet> weights;
    std::optional<GgufFile> gguf;
    std::map<std::string, const GgufTensor *> ggufByHf;
    std::string prefix; // "bert." when the safetensors names carry it
    std::optional<fs::path> tokenizer;
    mutable std::mutex fingerprintMutex;
    mutable std::optional<std::string> fingerprint;
};

EncoderCheckpoint EncoderCheckpoint::open(const fs::path &path)
{
    EncoderCheckpoint ck;
    ck.m_impl = std::make_shared<Impl>();
    Impl &m = *ck.m_impl;
    std::error_code ec;
    if (!fs::exists(path, ec))
        throw Error(ErrorCode::Io, path.string() + ": no such file or directory");
    if (fs::is_regular_file(path, ec) && GgufFile::looksLikeGguf(path)) {
        m.path = path;
        m.gguf = GgufFile::open(path);
        const auto arch = m.gguf->string("general.architecture");
        if (!arch || *arch != "bert")
            throw Error(ErrorCode::Config,
                        fmt::format("{}: metadata 'general.architecture' is '{}'; expected bert",
                                    path.string(), arch.value_or("")));
        m.config = configFromGguf(*m.gguf);
        for (const GgufTensor &t : m.gguf->tensors())
            if (auto hf = hfNameOfGguf(t.info.name))
                m.ggufByHf[*hf] = &t;
        m.tokenizer = path;
    } else {
        const fs::path dir = fs::is_directory(path, ec) ? path : path.parent_path();
        m.path = dir;
        const fs::path cfgPath = dir / "config.json";
        if (!fs::exists(cfgPath))
            throw Error(ErrorCode::Io,
                        cfgPath.string() + ": missing (an encoder directory holds config.json)");
        m.config = configFromJson(readJsonFile(cfgPath), cfgPath.string());
        readSentenceTransformers(dir, m.config);
        m.weights = WeightSet::open(dir);
        if (m.weights->contains("bert.embeddings.word_embeddings.weight"))
            m.prefix = "bert.";
        if (fs::exists(dir / "tokenizer.json"))
            m.tokenizer = dir / "tokenizer.json";
        else if (fs::exists(dir / "vocab.txt"))
            m.tokenizer = dir;
    }
    m.config.validate(m.path.string());
    for (const auto &[name, shape] : requiredTensors(m.config))
        (void)ck.require(name, shape);
    return ck;
}

const EncoderConfig &EncoderCheckpoint::config() const
{
    return m_impl->config;
}

const fs::path &EncoderCheckpoint::path() const
{
    return m_impl->path;
}

bool EncoderCheckpoint::isGguf() const
{
    return m_impl->gguf.has_value();
}

bool EncoderCheckpoint::contains(const std::string &name) const
{
    if (m_impl->gguf)
        return m_impl->ggufByHf.count(name) > 0;
    return m_impl->weights->contains(m_impl->prefix + name) || m_impl->weights->contains(name);
}

TensorRef EncoderCheckpoint::require(const std::string &name, const std::vector<int64_t> &shape) const
{
    TensorRef ref;
    if (m_impl->gguf) {
        const auto it = m_impl->ggufByHf.find(name);
        if (it == m_impl->ggufByHf.end())
            throw Error(ErrorCode::Shape,
                        fmt::format("{}: tensor for '{}' is missing", m_impl->path.string(), name));
        ref = TensorRef{&it->second->info, m_impl->gguf->data(*it->second), m_impl->path};
    } else {
        // the encoder's names carry the prefix; a classifier head's (classifier.*) does not
        const bool prefixed = m_impl->prefix.empty() || m_impl->weights->contains(m_impl->prefix + name) ||
                              !m_impl->weights->contains(name);
        ref = m_impl->weights->get(prefixed ? m_impl->prefix + name : name);
    }
    if (!shape.empty() && ref.info->shape != shape)
        throw Error(ErrorCode::Shape,
                    fmt::format("{}: tensor '{}' has shape [{}], expected [{}]", ref.file.string(),
                                ref.info->name, fmt::join(ref.info->shape, ", "), fmt::join(shape, ", ")));
    return ref;
}

std::optional<fs::path> EncoderCheckpoint::tokenizerPath() const
{
    return m_impl->tokenizer;
}

std::string EncoderCheckpoint::fingerprint() const
{
    std::lock_guard lock(m_impl->fingerprintMutex);
    if (!m_impl->fingerprint)
        m_impl->fingerprint =
            sha256Files(m_impl->gguf ? std::vector<fs::path>{m_impl->path} : m_impl->weights->files());
    return *m_impl->fingerprint;
}

std::vector<std::pair<std::string, std::vector<int64_t>>>
EncoderCheckpoint::requiredTensors(const EncoderConfig &c)
{
    const int64_t h = c.hiddenSize, i = c.intermediateSize;
    std::vector<std::pair<std::string, std::vector<int64_t>>> out = {
        {"embeddings.word_embeddings.weight", {c.vocabSize, h}},
        {"embeddings.position_embeddings.weight", {c.maxPositions, h}},
        {"embeddings.token_type_embeddings.weight", {c.typeVocabSize, h}},
        {"embeddings.LayerNorm.weight", {h}},
        {"embeddings.LayerNorm.bias", {h}}};
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string p = fmt::format("encoder.layer.{}.", l);
        for (const char *qkv : {"query", "key", "value"}) {
            out.push_back({p + "attention.self." + qkv + ".weight", {h, h}});
            out.push_back({p + "attention.self." + qkv + ".bias", {h}});
        }
        out.push_back({p + "attention.output.dense.weight", {h, h}});
        out.push_back({p + "attention.output.dense.bias", {h}});
        out.push_back({p + "attention.output.LayerNorm.weight", {h}});
        out.push_back({p + "attention.output.LayerNorm.bias", {h}});
        out.push_back({p + "intermediate.dense.weight", {i, h}});
        out.push_back({p + "intermediate.dense.bias", {i}});
        out.push_back({p + "output.dense.weight", {h, i}});
        out.push_back({p + "output.dense.bias", {h}});
        out.push_back({p + "output.LayerNorm.weight", {h}});
        out.push_back({p + "output.LayerNorm.bias", {h}});
    }
    return out;
}

namespace {

// weights[name], which must hold exactly the shape's number of floats (Error(InvalidArgument) naming
// the writer and the tensor).
const std::vector<float> &checkedWeight(const std::map<std::string, std::vector<float>> &weights,
                                        const std::string &name, const std::vector<int64_t> &shape,
                                        const char *writer)
{
    const auto it = weights.find(name);
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    if (it == weights.end() || int64_t(it->second.size()) != n)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: tensor '{}' is {}; expected {} floats", writer, name,
                                it == weights.end() ? "missing" : std::to_string(it->second.size()), n));
    return it->second;
}

} // namespace

void writeEncoderHf(const fs::path &dir, const EncoderConfig &cfg,
                    const std::map<std::string, std::vector<float>> &weights)
{
    cfg.validate(dir.string());
    SafetensorsWriter w;
    for (const auto &[name, shape] : EncoderCheckpoint::requiredTensors(cfg))
        w.addF32(name, shape, checkedWeight(weights, name, shape, "writeEncoderHf"));
    std::error_code ec;
    fs::create_directories(dir / "1_Pooling", ec);
    if (ec)
        throw Error(ErrorCode::Io,
                    fmt::format("{}: cannot create directory: {}", dir.string(), ec.message()));
    w.write(dir / "model.safetensors");
    writeFileAtomic(dir / "config.json", cfg.toHfJson());
    json modules = json::array(
        {{{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
         {{"idx", 1},
          {"name", "1"},
          {"path", "1_Pooling"},
          {"type", "sentence_transformers.models.Pooling"}}});
    if (cfg.normalize) {
        fs::create_directories(dir / "2_Normalize", ec);
        modules.push_back({{"idx", 2},
                           {"name", "2"},
                           {"path", "2_Normalize"},
                           {"type", "sentence_transformers.models.Normalize"}});
    }
    writeFileAtomic(dir / "modules.json", modules.dump(2) + "\n");
    const json pooling = {{"word_embedding_dimension", cfg.hiddenSize},
                          {"pooling_mode_cls_token", cfg.pooling == Pooling::Cls},
                          {"pooling_mode_mean_tokens", cfg.pooling == Pooling::Mean},
                          {"pooling_mode_max_tokens", cfg.pooling == Pooling::Max},
                          {"pooling_mode_mean_sqrt_len_tokens", false},
                          {"pooling_mode_lasttoken", cfg.pooling == Pooling::Last}};
    writeFileAtomic(dir / "1_Pooling" / "config.json", pooling.dump(2) + "\n");
    const json st = {{"max_seq_length", cfg.sequenceLimit()}, {"do_lower_case", false}};
    writeFileAtomic(dir / "sentence_bert_config.json", st.dump(2) + "\n");
}

CrossEncoderInfo crossEncoderInfo(const fs::path &path)
{
    const fs::path dir = fs::is_directory(path) ? path : path.parent_path();
    const fs::path file = dir / "config.json";
    const json j = readJsonFile(file);
    bool pairClassifier = false;
    if (const auto arch = j.find("architectures"); arch != j.end() && arch->is_array())
        for (const json &a : *arch)
            if (a.is_string() && a.get<std::string>().find("ForSequenceClassification") != std::string::npos)
                pairClassifier = true;
    if (!pairClassifier)
        throw Error(ErrorCode::Config, file.string() +
                                           ": field 'architectures' names no *ForSequenceClassification "
                                           "model: not a cross-encoder");
    CrossEncoderInfo info;
    info.labels = 2; // HF's default
    if (const auto it = j.find("id2label"); it != j.end() && it->is_object() && !it->empty())
        info.labels = int(it->size());
    if (const auto it = j.find("num_labels"); it != j.end() && it->is_number_integer())
        info.labels = it->get<int>();
    if (info.labels < 1 || info.labels > 1000)
        throw Error(ErrorCode::Config, fmt::format("{}: field 'num_labels' is {}; expected 1..1000",
                                                   file.string(), info.labels));
    std::error_code ec;
    if (fs::exists(dir / "train_log.json", ec)) {
        try {
            const json log = json::parse(text::readWholeFile(dir / "train_log.json"));
            const json &t = log.at("evaluation").at("trained").at("at_precision_0_9").at("threshold");
            if (t.is_number())
                info.recordedThreshold = t.get<double>();
        } catch (const std::exception &) {
            // no recorded threshold: the caller's default applies
        }
    }
    return info;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> crossEncoderHeadTensors(const EncoderConfig &c,
                                                                                  int labels)
{
    const int64_t H = c.hiddenSize, L = labels;
    return {{"pooler.dense.weight", {H, H}},
            {"pooler.dense.bias", {H}},
            {"classifier.weight", {L, H}},
            {"classifier.bias", {L}}};
}

void writeCrossEncoderHf(const fs::path &dir, const EncoderConfig &cfg, int labels,
                         const std::map<std::string, std::vector<float>> &weights)
{
    cfg.validate(dir.string());
    SafetensorsWriter w;
    auto all = EncoderCheckpoint::requiredTensors(cfg);
    for (auto &t : crossEncoderHeadTensors(cfg, labels))
        all.push_back(t);
    for (const auto &[name, shape] : all)
        w.addF32(name.rfind("classifier.", 0) == 0 ? name : "bert." + name, shape,
                 checkedWeight(weights, name, shape, "writeCrossEncoderHf"));
    std::error_code ec;
    fs::create_directories(dir, ec);
    w.write(dir / "model.safetensors");
    json j = json::parse(cfg.toHfJson());
    j["architectures"] = {"BertForSequenceClassification"};
    j["num_labels"] = labels;
    json id2label = json::object(), label2id = json::object();
    for (int i = 0; i < labels; ++i) {
        id2label[std::to_string(i)] = "LABEL_" + std::to_string(i);
        label2id["LABEL_" + std::to_string(i)] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
    writeFileAtomic(dir / "config.json", j.dump(2) + "\n");
}

} // namespace kvwb::core
