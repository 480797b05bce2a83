#include "gpu/model/encoder.h"
#include "gpu/model/cross_encoder.h"

#include "core/model/checkpoint.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/error.h"
#include "gpu/src/model/encoder_forward_p.h"
#include "gpu/src/model/model_p.h"
#include "gpu/src/torch_error_p.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;
using detail::JobScope;
using detail::translateTorch;
namespace fs = std::filesystem;

namespace detail {

std::vector<std::pair<std::string, torch::Tensor *>> EncoderWeights::named()
{
    std::vector<std::pair<std::string, torch::Tensor *>> out = {
        {"embeddings.word_embeddings.weight", &word},
        {"embeddings.position_embeddings.weight", &position},
        {"embeddings.token_type_embeddings.weight", &type},
        {"embeddings.LayerNorm.weight", &lnW},
        {"embeddings.LayerNorm.bias", &lnB}};
    for (size_t l = 0; l < layers.size(); ++l) {
        EncoderLayerWeights &L = layers[l];
        const std::string p = fmt::format("encoder.layer.{}.", l);
        const std::pair<const char *, torch::Tensor *> parts[] = {
            {"attention.self.query.weight", &L.qW},
            {"attention.self.query.bias", &L.qB},
            {"attention.self.key.weight", &L.kW},
            {"attention.self.key.bias", &L.kB},
            {"attention.self.value.weight", &L.vW},
            {"attention.self.value.bias", &L.vB},
            {"attention.output.dense.weight", &L.oW},
            {"attention.output.dense.bias", &L.oB},
            {"attention.output.LayerNorm.weight", &L.ln1W},
            {"attention.output.LayerNorm.bias", &L.ln1B},
            {"intermediate.dense.weight", &L.upW},
            {"intermediate.dense.bias", &L.upB},
            {"output.dense.weight", &L.downW},
            {"output.dense.bias", &L.downB},
            {"output.LayerNorm.weight", &L.ln2W},
            {"output.LayerNorm.bias", &L.ln2B}};
        for (const auto &[name, t] : parts)
            out.emplace_back(p + name, t);
    }
    return out;
}

torch::Tensor encoderHidden(const EncoderWeights &w, const core::EncoderConfig &c, const torch::Tensor &ids,
                            const torch::Tensor &mask, const torch::Tensor &types)
{
    const int64_t B = ids.size(0), T = ids.size(1), H = c.hiddenSize, nh = c.numHeads, hd = c.headDim();
    const double eps = c.layerNormEps;
    auto x = w.word.index_select(0, ids.reshape({-1})).view({B, T, H}) +
             w.position.narrow(0, 0, T).unsqueeze(0) +
             (types.defined() ? w.type.index_select(0, types.reshape({-1})).view({B, T, H})
                              : w.type.narrow(0, 0, 1).unsqueeze(0)); // token type 0 unless given
    x = torch::layer_norm(x, {H}, w.lnW, w.lnB, eps);
    // keys a query may not see: the padding after each sequence
    const auto hide = mask.logical_not().view({B, 1, 1, T});
    const double scale = 1.0 / std::sqrt(double(hd));
    for (const EncoderLayerWeights &L : w.layers) {
        auto heads = [&](const torch::Tensor &W, const torch::Tensor &b) {
            return torch::linear(x, W, b).view({B, T, nh, hd}).transpose(1, 2); // [B, nh, T, hd]
        };
        const auto q = heads(L.qW, L.qB), k = heads(L.kW, L.kB), v = heads(L.vW, L.vB);
        auto scores = torch::matmul(q, k.transpose(2, 3)).to(torch::kFloat32) * scale;
        scores = scores.masked_fill(hide, -INFINITY);
        const auto ctx = torch::matmul(torch::softmax(scores, -1).to(q.scalar_type()), v)
                             .transpose(1, 2)
                             .reshape({B, T, H});
        x = torch::layer_norm(torch::linear(ctx, L.oW, L.oB) + x, {H}, L.ln1W, L.ln1B, eps);
        auto f = torch::linear(x, L.upW, L.upB);
        switch (c.activation) {
        case core::EncoderActivation::Gelu:
            f = torch::gelu(f);
            break;
        case core::EncoderActivation::GeluTanh:
            f = torch::gelu(f, "tanh");
            break;
        case core::EncoderActivation::Relu:
            f = torch::relu(f);
            break;
        }
        x = torch::layer_norm(torch::linear(f, L.downW, L.downB) + x, {H}, L.ln2W, L.ln2B, eps);
    }
    return x;
}

std::vector<std::pair<std::string, torch::Tensor *>> CrossEncoderHead::named()
{
    return {{"pooler.dense.weight", &poolW},
            {"pooler.dense.bias", &poolB},
            {"classifier.weight", &clsW},
            {"classifier.bias", &clsB}};
}

torch::Tensor crossEncoderLogits(const EncoderWeights &w, const CrossEncoderHead &head,
                                 const core::EncoderConfig &c, const torch::Tensor &ids,
                                 const torch::Tensor &mask, const torch::Tensor &types)
{
    const auto cls = encoderHidden(w, c, ids, mask, types).select(1, 0);
    return torch::linear(torch::tanh(torch::linear(cls, head.poolW, head.poolB)), head.clsW, head.clsB);
}

torch::Tensor crossEncoderProbability(const torch::Tensor &logits)
{
    return logits.size(1) == 1 ? torch::sigmoid(logits.select(1, 0)) : torch::softmax(logits, 1).select(1, 1);
}

EncodedPair encodePair(const core::Tokenizer &tokenizer, const std::string &a, const std::string &b,
                       size_t limit)
{
    auto x = tokenizer.encode(a, true), y = tokenizer.encode(b, true);
    // x = [CLS] a.. [SEP], y = [CLS] b.. [SEP]: the pair drops y's [CLS]
    const bool xClosed = !x.empty() && tokenizer.isSpecial(x.back());
    const int sep = xClosed ? x.back() : -1;
    if (!y.empty() && tokenizer.isSpecial(y.front()))
        y.erase(y.begin());
    if (xClosed)
        x.pop_back(); // put back after cutting
    if (!y.empty() && tokenizer.isSpecial(y.back()))
        y.pop_back();
    const size_t extra = sep >= 0 ? 2 : 0; // the two [SEP]s
    const size_t budget = limit > extra + 2 ? limit - extra : 2;
    while (x.size() + y.size() > budget) // longest first, never [CLS]
        (y.size() >= x.size() && !y.empty() ? y : x).pop_back();
    EncodedPair p;
    p.ids = x;
    if (sep >= 0)
        p.ids.push_back(sep);
    p.types.assign(p.ids.size(), 0);
    p.ids.insert(p.ids.end(), y.begin(), y.end());
    if (sep >= 0)
        p.ids.push_back(sep);
    p.types.resize(p.ids.size(), 1);
    return p;
}

torch::Tensor poolHidden(const torch::Tensor &hidden, const torch::Tensor &mask, core::Pooling pooling)
{
    const auto m = mask.unsqueeze(-1).to(hidden.scalar_type()); // [B, T, 1]
    switch (pooling) {
    case core::Pooling::Cls:
        return hidden.select(1, 0);
    case core::Pooling::Max:
        return hidden.masked_fill(mask.logical_not().unsqueeze(-1), -INFINITY).amax(1);
    case core::Pooling::Last: {
        const auto last = mask.to(torch::kInt64).sum(1) - 1; // [B]
        return hidden.gather(1, last.view({-1, 1, 1}).expand({-1, 1, hidden.size(2)})).squeeze(1);
    }
    case core::Pooling::Mean:
        break;
    }
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0);
}

} // namespace detail

struct Encoder::Impl
{
    core::EncoderCheckpoint checkpoint;
    core::EncoderConfig config;
    LoadOptions options;
    torch::Device device{torch::kCPU};
    torch::Dtype dtype = torch::kFloat32;
    detail::EncoderWeights weights;
};

Encoder::Encoder() : m_impl(std::make_unique<Impl>()) {}
Encoder::~Encoder() = default;

std::unique_ptr<Encoder> Encoder::load(const core::EncoderCheckpoint &checkpoint, const LoadOptions &options)
{
    checkDeviceSupport(options.device, options.dtype);
    if (options.threads < 0 || options.threads > kMaxThreads)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("threads is {}; expected 0 (all cores) .. {}", options.threads, kMaxThreads));
    JobScope scope(options.threads, false);
    std::unique_ptr<Encoder> e(new Encoder());
    Impl &m = *e->m_impl;
    m.checkpoint = checkpoint;
    m.config = checkpoint.config();
    m.options = options;
    m.device = options.device == Device::Cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
    m.dtype = detail::torchType(options.dtype);
    m.weights.layers.resize(size_t(m.config.numLayers));
    const auto shapes = core::EncoderCheckpoint::requiredTensors(m.config);
    auto named = m.weights.named();
    for (size_t i = 0; i < named.size(); ++i) {
        const auto &[name, shape] = shapes[i];
        const core::TensorRef ref = checkpoint.require(name, shape);
        *named[i].second = translateTorch(name.c_str(), [&] {
            if (core::isBlockQuantized(ref.info->dtype) || ref.info->dtype == core::DType::F64) {
                std::vector<float> values = core::toFloatVector(ref);
                return torch::from_blob(values.data(), shape, torch::kFloat32)
                    .to(m.device, m.dtype, false, true)
                    .contiguous();
            }
            auto cpu = torch::from_blob(const_cast<std::byte *>(ref.data), shape,
                                        detail::torchType(ref.info->dtype));
            return cpu.to(m.device, m.dtype, false, true).contiguous(); // copy: the mapping is read-only
        });
    }
    return e;
}

const core::EncoderConfig &Encoder::config() const
{
    return m_impl->config;
}

const core::EncoderCheckpoint &Encoder::checkpoint() const
{
    return m_impl->checkpoint;
}

namespace {

void checkSequence(const std::vector<int> &ids, const core::EncoderConfig &c)
{
    if (ids.empty())
        throw Error(ErrorCode::InvalidArgument, "encoder: a sequence with no tokens");
    if (int64_t(ids.size()) > c.maxPositions)
        throw Error(ErrorCode::InvalidArgument, fmt::format("encoder: {} tokens; the model has {} positions",
                                                            ids.size(), c.maxPositions));
    for (int id : ids)
        if (id < 0 || id >= c.vocabSize)
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format("encoder: token id {} is outside the vocabulary (0..{})", id, c.vocabSize - 1));
}

} // namespace

std::vector<float> Encoder::hiddenStates(const std::vector<int> &ids) const
{
    checkSequence(ids, m_impl->config);
    JobScope scope(m_impl->options.threads, false);
    return translateTorch("encoder", [&] {
        const auto t = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()), torch::kInt64)
                           .view({1, -1})
                           .to(m_impl->device);
        const auto mask = torch::ones_like(t, torch::kBool);
        const auto h = detail::encoderHidden(m_impl->weights, m_impl->config, t, mask)
                           .to(torch::kFloat32)
                           .contiguous()
                           .cpu();
        return std::vector<float>(h.data_ptr<float>(), h.data_ptr<float>() + h.numel());
    });
}

std::vector<std::vector<float>> Encoder::embed(const std::vector<std::vector<int>> &batch,
                                               bool normalise) const
{
    if (batch.empty())
        return {};
    size_t T = 0;
    for (const auto &ids : batch) {
        checkSequence(ids, m_impl->config);
        T = std::max(T, ids.size());
    }
    JobScope scope(m_impl->options.threads, false);
    return translateTorch("encoder", [&] {
        const int64_t B = int64_t(batch.size());
        std::vector<int64_t> flat(size_t(B) * T, 0);
        std::vector<uint8_t> keep(size_t(B) * T, 0);
        for (size_t b = 0; b < batch.size(); ++b)
            for (size_t i = 0; i < batch[b].size(); ++i) {
                flat[b * T + i] = batch[b][i];
                keep[b * T + i] = 1;
            }
        const auto ids = torch::tensor(flat, torch::kInt64).view({B, int64_t(T)}).to(m_impl->device);
        const auto mask = torch::tensor(std::vector<int64_t>(keep.begin(), keep.end()), torch::kInt64)
                              .view({B, int64_t(T)})
                              .to(m_impl->device) != 0;
        auto pooled = detail::poolHidden(detail::encoderHidden(m_impl->weights, m_impl->config, ids, mask),
                                         mask, m_impl->config.pooling)
                          .to(torch::kFloat32);
        if (normalise)
            pooled = torch::nn::functional::normalize(pooled,
                                                      torch::nn::functional::NormalizeFuncOptions().dim(1));
        pooled = pooled.contiguous().cpu();
        std::vector<std::vector<float>> out;
        const int64_t H = pooled.size(1);
        for (int64_t b = 0; b < B; ++b)
            out.emplace_back(pooled.data_ptr<float>() + b * H, pooled.data_ptr<float>() + (b + 1) * H);
        return out;
    });
}

namespace {

std::string stemOf(const fs::path &path)
{
    fs::path p = path;
    if (p.filename() == "config.json")
        p = p.parent_path();
    if (p.filename().empty())
        p = p.parent_path();
    return p.stem().string();
}

// Vectors embedded with and without a prefix differ, so their names do (a store keeps entries
// per embedder name): "-p" and the prefix's FNV-1a hash.
std::string prefixTag(const std::string &prefix)
{
    if (prefix.empty())
        return {};
    uint32_t h = 2166136261u;
    for (unsigned char c : prefix)
        h = (h ^ c) * 16777619u;
    return fmt::format("-p{:08x}", h);
}

// An embedder whose weights hold NaN or Inf (or whose configuration breaks its arithmetic) gives
// non-finite vectors, and a similarity of NaN must never count as a match: it is refused when it
// loads, by name, on a probe sentence that reaches its normalisation, attention and pooling.
void refuseNonFiniteProbe(core::Embedder &embedder, const fs::path &path)
{
    const std::vector<float> v = embedder.embed("Is it safe to drink 2 litres of water a day, or not?");
    if (!std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); }))
        throw Error(ErrorCode::Config, path.string() +
                                           ": the embedder gives non-finite values (NaN or Inf) for a probe "
                                           "sentence; its weights or configuration are broken");
}

} // namespace

EncoderEmbedder::EncoderEmbedder(const fs::path &path, const LoadOptions &options, std::string prefix)
    : m_prefix(std::move(prefix))
{
    const auto ck = core::EncoderCheckpoint::open(path);
    const auto tok = ck.tokenizerPath();
    if (!tok)
        throw Error(ErrorCode::Config, ck.path().string() +
                                           ": no tokenizer (tokenizer.json or vocab.txt) beside the "
                                           "encoder");
    m_tokenizer = core::loadTokenizer(*tok);
    if (m_tokenizer->vocabSize() > ck.config().vocabSize)
        throw Error(ErrorCode::Tokenizer,
                    fmt::format("{}: the tokenizer has {} ids; the encoder's vocabulary {}", tok->string(),
                                m_tokenizer->vocabSize(), ck.config().vocabSize));
    m_encoder = Encoder::load(ck, options);
    m_name = fmt::format("encoder-{}-{}{}", stemOf(path), dim(), prefixTag(m_prefix));
    refuseNonFiniteProbe(*this, path);
}

EncoderEmbedder::~EncoderEmbedder() = default;

int EncoderEmbedder::dim() const
{
    return m_encoder->config().hiddenSize;
}

std::string EncoderEmbedder::name() const
{
    return m_name;
}

const Encoder &EncoderEmbedder::encoder() const
{
    return *m_encoder;
}

const core::Tokenizer &EncoderEmbedder::tokenizer() const
{
    return *m_tokenizer;
}

std::vector<float> EncoderEmbedder::embed(const std::string &text)
{
    auto ids = m_tokenizer->encode(m_prefix + text, true);
    const size_t limit = size_t(m_encoder->config().sequenceLimit());
    if (ids.size() > limit) { // keep the start, end in the closing special token ([SEP])
        const int last = ids.back();
        ids.resize(limit);
        if (m_tokenizer->isSpecial(last))
            ids.back() = last;
    }
    if (ids.empty())
        return std::vector<float>(size_t(dim()), 0.0f);
    return m_encoder->embed({ids}, true)[0];
}

DecoderEmbedder::DecoderEmbedder(const fs::path &path, const LoadOptions &options, std::string prefix)
    : m_prefix(std::move(prefix))
{
    const auto ck = core::Checkpoint::open(path);
    const auto tok = ck.tokenizerPath();
    if (!tok)
        throw Error(ErrorCode::Config, path.string() + ": no tokenizer beside the model");
    m_tokenizer = core::loadTokenizer(*tok);
    core::checkTokenizerFitsModel(*m_tokenizer, ck.config(), tok->string());
    m_model = Model::load(ck, options);
    m_name = fmt::format("decoder-last-{}-{}{}", stemOf(path), dim(), prefixTag(m_prefix));
    refuseNonFiniteProbe(*this, path);
}

DecoderEmbedder::~DecoderEmbedder() = default;

int DecoderEmbedder::dim() const
{
    return m_model->config().hiddenSize;
}

std::string DecoderEmbedder::name() const
{
    return m_name;
}

std::vector<float> DecoderEmbedder::embed(const std::string &text)
{
    auto ids = m_tokenizer->encode(m_prefix + text, true);
    const auto eos = m_tokenizer->eosId();
    const size_t limit = size_t(m_model->contextLimit());
    if (ids.size() + (eos ? 1 : 0) > limit)
        ids.resize(limit - (eos ? 1 : 0));
    if (eos && (ids.empty() || ids.back() != *eos))
        ids.push_back(*eos); // Qwen3-Embedding pools the state at the appended end-of-text token
    if (ids.empty())
        return std::vector<float>(size_t(dim()), 0.0f);
    auto v = m_model->lastHiddenState(ids);
    normaliseInPlace(v);
    return v;
}

void normaliseInPlace(std::vector<float> &v)
{
    double norm = 0;
    for (float x : v)
        norm += double(x) * x;
    if (norm > 0)
        for (float &x : v)
            x = float(x / std::sqrt(norm));
}

std::unique_ptr<core::Embedder> loadEmbedderModel(const fs::path &path, const LoadOptions &options,
                                                  const std::string &prefix)
{
    if (core::isEncoderModel(path))
        return std::make_unique<EncoderEmbedder>(path, options, prefix);
    return std::make_unique<DecoderEmbedder>(path, options, prefix);
}

// ---- the cross-encoder ----

struct CrossEncoder::Impl
{
    std::unique_ptr<Encoder> encoder; // its weights and config
    detail::CrossEncoderHead head;
    std::unique_ptr<core::Tokenizer> tokenizer;
    std::string name;
    int labels = 1;
    std::optional<double> threshold;
};

CrossEncoder::CrossEncoder(const fs::path &path, const LoadOptions &options)
    : m_impl(std::make_unique<Impl>())
{
    Impl &m = *m_impl;
    const auto ck = core::EncoderCheckpoint::open(path);
    const auto info = core::crossEncoderInfo(path);
    m.labels = info.labels;
    m.threshold = info.recordedThreshold;
    const auto tok = ck.tokenizerPath();
    if (!tok)
        throw Error(ErrorCode::Config, ck.path().string() +
                                           ": no tokenizer (tokenizer.json or vocab.txt) beside the "
                                           "cross-encoder");
    m.tokenizer = core::loadTokenizer(*tok);
    if (m.tokenizer->vocabSize() > ck.config().vocabSize)
        throw Error(ErrorCode::Tokenizer,
                    fmt::format("{}: the tokenizer has {} ids; the encoder's vocabulary {}", tok->string(),
                                m.tokenizer->vocabSize(), ck.config().vocabSize));
    if (ck.config().typeVocabSize < 2)
        throw Error(ErrorCode::Config,
                    ck.path().string() +
                        ": field 'type_vocab_size' is below 2: a pair needs two token types");
    m.encoder = Encoder::load(ck, options);
    const auto &c = ck.config();
    const torch::Device device =
        options.device == Device::Cuda ? torch::Device(torch::kCUDA, 0) : torch::kCPU;
    const auto shapes = core::crossEncoderHeadTensors(c, m.labels);
    auto named = m.head.named();
    for (size_t i = 0; i < named.size(); ++i) {
        const auto ref = ck.require(shapes[i].first, shapes[i].second);
        std::vector<float> values = core::toFloatVector(ref);
        *named[i].second = translateTorch(shapes[i].first.c_str(), [&] {
            return torch::from_blob(values.data(), shapes[i].second, torch::kFloat32)
                .to(device, detail::torchType(options.dtype), false, true)
                .contiguous();
        });
    }
    m.name = "cross-" + stemOf(path);
}

CrossEncoder::~CrossEncoder() = default;

double CrossEncoder::score(const std::string &cached, const std::string &request)
{
    Impl &m = *m_impl;
    const Encoder::Impl &e = *m.encoder->m_impl;
    JobScope scope(e.options.threads, false);
    const auto p = detail::encodePair(*m.tokenizer, cached, request, size_t(e.config.sequenceLimit()));
    return translateTorch("cross-encoder", [&] {
        const auto n = int64_t(p.ids.size());
        const auto ids =
            torch::tensor(std::vector<int64_t>(p.ids.begin(), p.ids.end())).view({1, n}).to(e.device);
        const auto types =
            torch::tensor(std::vector<int64_t>(p.types.begin(), p.types.end())).view({1, n}).to(e.device);
        const auto mask = torch::ones({1, n}, torch::kBool).to(e.device);
        const auto logits = detail::crossEncoderLogits(e.weights, m.head, e.config, ids, mask, types);
        return detail::crossEncoderProbability(logits.to(torch::kFloat32))[0].item<double>();
    });
}

std::string CrossEncoder::name() const
{
    return m_impl->name;
}

int CrossEncoder::labels() const
{
    return m_impl->labels;
}

std::optional<double> CrossEncoder::recordedThreshold() const
{
    return m_impl->threshold;
}

bool isCrossEncoderModel(const fs::path &path)
{
    try {
        return core::crossEncoderInfo(path).labels > 0;
    } catch (const std::exception &) {
        return false;
    }
}

} // namespace kvwb::gpu
