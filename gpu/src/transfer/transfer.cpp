#include "gpu/transfer/transfer.h"

#include "core/metrics/distributions.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "gpu/src/align/kv_map_p.h"
#include "gpu/src/model/kv_cache_p.h"
#include "gpu/src/torch_error_p.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

namespace kvwb::gpu {

using core::Clock;
using core::Error;
using core::ErrorCode;
using core::msSince;
using detail::translateTorch;

namespace {

// Waits for queued device work so the clock measures it (CUDA kernels run asynchronously).
void sync(const torch::Device &d)
{
    if (d.is_cuda())
        torch::cuda::synchronize();
}

} // namespace

struct Converter::Impl
{
    struct Layer
    {
        std::vector<int64_t> sources;
        bool headMatched = false;
        core::TokenFeatures features;    // full maps: inputs beside A's rows (core/store/converter_family.h)
        detail::MapTensors keys, values; // full: one map; head-matched: one per B kv head
    };
    std::vector<Layer> layers; // [B layers]
    core::KeyForm keyForm = core::KeyForm::PreRope;
    int layersA = 0, kvA = 0, hdA = 0, kvB = 0, hdB = 0;
    torch::Device device = torch::kCPU;
    std::shared_ptr<detail::RopeTables> ropeA; // identifies A's caches
    std::shared_ptr<detail::RopeTables> ropeB; // identifies B's caches
    KvCache emptyB;                            // an empty cache of B: forked for convertToHost
    // B itself, for token features that read B's layer 0 (Model::tokenLocalKv); null otherwise
    const Model *target = nullptr;

    // The token features' columns of one layer and kind, [n, extra] f32 on the device: A's rows of
    // earlier tokens (flat [n, k * wA], as the map reads them), B's layer-0 rows b0 [n, 2 wB] and
    // the offsets, laid out as core::TokenFeatures says.
    torch::Tensor featureColumns(const Layer &L, const torch::Tensor &flat, const torch::Tensor &b0,
                                 const std::vector<int32_t> &pairing, int64_t n) const
    {
        const auto plan = core::tokenFeaturePlan(L.features, pairing, n);
        std::vector<torch::Tensor> cols;
        const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
        if (L.features.window > 0) {
            // row n of the padded rows is zeros: the rows before the prompt
            const auto padded = torch::cat({flat, torch::zeros({1, flat.size(1)}, f32)}, 0);
            std::vector<int64_t> idx(plan.windowRows.size());
            for (size_t i = 0; i < idx.size(); ++i)
                idx[i] = plan.windowRows[i] < 0 ? n : plan.windowRows[i];
            const auto rows = torch::from_blob(idx.data(), {int64_t(idx.size())}, torch::kInt64).to(device);
            cols.push_back(padded.index_select(0, rows).view({n, L.features.window * flat.size(1)}));
        }
        if (L.features.targetTokens)
            cols.push_back(b0);
        if (L.features.offsets > 0) {
            std::vector<int64_t> o(plan.offset.begin(), plan.offset.end());
            const auto at = torch::from_blob(o.data(), {n}, torch::kInt64).to(device);
            cols.push_back(torch::one_hot(at, L.features.offsets).to(torch::kFloat32));
        }
        return torch::cat(cols, 1);
    }

    // B's layer-0 K (pre-RoPE) and V of the cache's token ids, token-major [n, 2 wB] f32 on the device.
    torch::Tensor targetTokenRows(const std::vector<int> &ids) const
    {
        if (!target)
            throw Error(ErrorCode::Internal, "token features without model B");
        const HeadMajorKv kv = target->tokenLocalKv(ids);
        const int64_t n = int64_t(ids.size());
        const auto rows = [&](const std::vector<float> &x) {
            return torch::from_blob(const_cast<float *>(x.data()), {kvB, n, hdB}, torch::kFloat32)
                .transpose(0, 1)
                .reshape({n, kvB * hdB});
        };
        return torch::cat({rows(kv.keys), rows(kv.values)}, 1).to(device);
    }

    void checkCaches(const KvCache::Impl &s, const KvCache::Impl &t) const
    {
        if (s.numLayers != layersA || s.numKvHeads != kvA || s.headDim != hdA)
            throw Error(ErrorCode::Shape,
                        fmt::format("source cache [{} layers, {} kv heads, head dim {}] is not "
                                    "model A's [{}, {}, {}]",
                                    s.numLayers, s.numKvHeads, s.headDim, layersA, kvA, hdA));
        if (t.rope != ropeB)
            throw Error(ErrorCode::InvalidArgument,
                        "target cache does not belong to the converter's model B");
    }

    // B's K and V for layer l at positions 0..n-1, [kvB, n, hdB] f32 on the device, keys post-RoPE.
    std::pair<torch::Tensor, torch::Tensor> convertLayer(int l, std::vector<torch::Tensor> &kA,
                                                         std::vector<torch::Tensor> &vA,
                                                         const KvCache::Impl &s, int64_t n,
                                                         torch::Tensor &b0) const
    {
        const Layer &L = layers[size_t(l)];
        auto rows = [&](std::vector<torch::Tensor> &cacheA, int64_t src, bool keys) -> const torch::Tensor & {
            auto &x = cacheA[size_t(src)];
            if (!x.defined()) {
                auto t = (keys ? s.keysUpTo(int(src), n) : s.valuesUpTo(int(src), n)).to(torch::kFloat32);
                if (keys && keyForm == core::KeyForm::PreRope)
                    t = s.rope->apply(t, int(src), 0, true); // on A's device, A's layer tables, f32
                x = t.to(device);                            // [kvA, n, hdA]
            }
            return x;
        };
        std::pair<torch::Tensor, torch::Tensor> out;
        for (int kv = 0; kv < 2; ++kv) {
            const bool keys = kv == 0;
            std::vector<torch::Tensor> parts;
            for (int64_t src : L.sources)
                parts.push_back(rows(keys ? kA : vA, src, keys));
            const auto &maps = keys ? L.keys : L.values;
            torch::Tensor y;
            if (L.headMatched) {
                auto x = torch::cat(parts, 2);  // [kvA, n, k * hdA]
                y = detail::applyMaps(maps, x); // [kvB, n, hdB]
            } else {
                std::vector<torch::Tensor> flat;
                for (auto &p : parts)
                    flat.push_back(p.transpose(0, 1).reshape({n, kvA * hdA}));
                auto x = torch::cat(flat, 1); // [n, k * wA]
                if (L.features.any())         // b0 and the pairing checked by convert()
                    x = torch::cat({x, featureColumns(L, x, b0, s.sourceIndex, n)}, 1);
                y = detail::applyMaps(maps, x.unsqueeze(0))
                        .view({n, kvB, hdB})
                        .transpose(0, 1)
                        .contiguous(); // [kvB, n, hdB]
            }
            if (keys && keyForm == core::KeyForm::PreRope)
                y = ropeB->apply(y, l, 0, false);
            (keys ? out.first : out.second) = y;
        }
        return out;
    }
};

Converter::Converter() = default;
Converter::~Converter() = default;
Converter::Converter(Converter &&) noexcept = default;
Converter &Converter::operator=(Converter &&) noexcept = default;

Converter Converter::create(const core::ConverterRecord &set, const Model &source, const Model &target)
{
    const auto &ca = source.config(), &cb = target.config();
    if (int(set.layers.size()) != cb.numLayers)
        throw Error(ErrorCode::Shape, fmt::format("converter set has {} layer maps; model B has {} layers",
                                                  set.layers.size(), cb.numLayers));
    Converter c;
    c.m_impl = std::make_unique<Impl>();
    Impl &d = *c.m_impl;
    d.keyForm = set.keyForm;
    d.layersA = ca.numLayers;
    d.kvA = ca.numKvHeads;
    d.hdA = ca.headDim;
    d.kvB = cb.numKvHeads;
    d.hdB = cb.headDim;
    d.emptyB = target.newCache();
    d.device = d.emptyB.impl()->device;
    d.ropeB = d.emptyB.impl()->rope;
    d.ropeA = source.newCache().impl()->rope;
    const int widthA = d.kvA * d.hdA, widthB = d.kvB * d.hdB;
    translateTorch("converter upload", [&] {
        for (int l = 0; l < cb.numLayers; ++l) {
            const core::LayerConverter &m = set.layers[size_t(l)];
            Impl::Layer L;
            L.headMatched = m.headMatched;
            L.features = m.features;
            core::checkTokenFeatures(m.features, fmt::format("layer {} map", l));
            if (m.features.any() && (m.headMatched || set.keyForm != core::KeyForm::PreRope))
                throw Error(ErrorCode::Shape, fmt::format("layer {} map has token features, which need full "
                                                          "maps of pre-RoPE keys",
                                                          l));
            if (m.features.targetTokens)
                d.target = &target;
            for (int s : m.sourceLayers) {
                if (s < 0 || s >= ca.numLayers)
                    throw Error(ErrorCode::Shape,
                                fmt::format("layer {} map reads A layer {}; A has {}", l, s, ca.numLayers));
                L.sources.push_back(s);
            }
            if (L.sources.empty())
                throw Error(ErrorCode::Shape, fmt::format("layer {} map has no source layers", l));
            const int blocks = int(L.sources.size());
            const size_t maps = m.headMatched ? size_t(d.kvB) : 1;
            const int in = m.headMatched ? blocks * d.hdA
                                         : int(blocks * widthA + m.features.extraDim(blocks, widthA, widthB)),
                      out = m.headMatched ? d.hdB : widthB;
            if (m.headMatched && d.kvA != d.kvB)
                throw Error(ErrorCode::Shape,
                            fmt::format("layer {} maps are head-matched, but A has {} kv heads "
                                        "and B has {}",
                                        l, d.kvA, d.kvB));
            for (int kv = 0; kv < 2; ++kv) {
                const auto &list = kv == 0 ? m.keys : m.values;
                const char *kind = kv == 0 ? "key" : "value";
                if (list.size() != maps)
                    throw Error(ErrorCode::Shape, fmt::format("layer {} has {} {} maps; expected {}", l,
                                                              list.size(), kind, maps));
                for (size_t h = 0; h < maps; ++h) {
                    const auto &s = list[h];
                    if (s.inputDim != in || s.outputDim != out)
                        throw Error(
                            ErrorCode::Shape,
                            fmt::format("layer {} {} map {} is [{} -> {}], but A's {} source layer(s) give "
                                        "{} features and B's layer takes {}",
                                        l, kind, h, s.inputDim, s.outputDim, blocks, in, out));
                }
                (kv == 0 ? L.keys : L.values) =
                    detail::stackMaps(list, d.device, fmt::format("layer {} {}", l, kind));
            }
            d.layers.push_back(std::move(L));
        }
        return 0;
    });
    return c;
}

namespace {
const Converter::Impl &need(const std::unique_ptr<Converter::Impl> &impl)
{
    if (!impl)
        throw Error(ErrorCode::InvalidArgument, "empty converter: create it with Converter::create()");
    return *impl;
}
} // namespace

core::KeyForm Converter::keyForm() const
{
    return need(m_impl).keyForm;
}

void Converter::convert(const KvCache &source, KvCache &target) const
{
    const Impl &d = need(m_impl);
    if (!source.impl() || !target.impl())
        throw Error(ErrorCode::InvalidArgument, "convert: empty cache: create it with Model::newCache()");
    const KvCache::Impl &s = *source.impl();
    KvCache::Impl &t = *target.impl();
    d.checkCaches(s, t);
    const int64_t n = s.length;
    translateTorch("KV conversion", [&] {
        c10::InferenceMode guard;
        std::vector<torch::Tensor> kA(size_t(d.layersA)), vA(size_t(d.layersA));
        // token features: what they read is checked and computed before the target is touched
        torch::Tensor b0; // B's layer-0 rows
        const bool features = std::any_of(d.layers.begin(), d.layers.end(),
                                          [](const Impl::Layer &L) { return L.features.any(); });
        if (features && !s.sourceIndex.empty() && int64_t(s.sourceIndex.size()) != n)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("source cache pairs {} of its {} positions with A's tokens",
                                    s.sourceIndex.size(), n));
        if (d.target && n > 0)
            b0 = d.targetTokenRows(std::vector<int>(s.ids.begin(), s.ids.begin() + n));
        t.length = 0;
        t.ids.clear();
        t.reserve(n);
        for (int l = 0; l < int(d.layers.size()); ++l) {
            auto [k, v] = d.convertLayer(l, kA, vA, s, n, b0);
            t.keys[size_t(l)].narrow(1, 0, n).copy_(k);
            t.values[size_t(l)].narrow(1, 0, n).copy_(v);
        }
        t.length = int(n);
        t.ids = s.ids;
        sync(d.device);
        return 0;
    });
}

std::vector<HeadMajorKv> Converter::convertToHost(const KvCache &source) const
{
    auto cache = need(m_impl).emptyB.fork();
    convert(source, cache);
    const KeyForm form = m_impl->keyForm;
    std::vector<HeadMajorKv> out;
    for (int l = 0; l < cache.numLayers(); ++l)
        out.push_back(cache.layer(l, form));
    return out;
}

namespace {

// The cache's positions permuted (seeded): row i moves to position perm[i], its key rotated there.
void shufflePositions(KvCache &cache, uint64_t seed)
{
    const int n = cache.tokens();
    std::vector<int> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(seed);
    for (size_t i = perm.size(); i > 1; --i)
        std::swap(perm[i - 1], perm[size_t(rng() % i)]);
    std::vector<HeadMajorKv> layers;
    for (int l = 0; l < cache.numLayers(); ++l) {
        HeadMajorKv kv = cache.layer(l, core::KeyForm::PreRope), out;
        out.keys.resize(kv.keys.size());
        out.values.resize(kv.values.size());
        const size_t hd = size_t(cache.headDim());
        for (int h = 0; h < cache.numKvHeads(); ++h)
            for (int i = 0; i < n; ++i) {
                const size_t from = (size_t(h) * size_t(n) + size_t(i)) * hd,
                             to = (size_t(h) * size_t(n) + size_t(perm[size_t(i)])) * hd;
                std::copy_n(kv.keys.begin() + long(from), hd, out.keys.begin() + long(to));
                std::copy_n(kv.values.begin() + long(from), hd, out.values.begin() + long(to));
            }
        layers.push_back(std::move(out));
    }
    const std::vector<int> ids = cache.tokenIds();
    cache.assign(ids, layers, core::KeyForm::PreRope);
}

} // namespace

int recomputeConverted(const Model &target, KvCache &cache, const core::RecomputePlan &plan)
{
    if (!cache.impl())
        throw Error(ErrorCode::InvalidArgument, "recompute: empty cache: create it with Model::newCache()");
    if (plan.shuffleSeed != 0)
        shufflePositions(cache, plan.shuffleSeed);
    const int n = cache.tokens();
    const auto redo = core::recomputedPositions(n, plan);
    if (redo.empty())
        return 0;
    KvCache::Impl &d = *cache.impl();
    const std::vector<int> ids = cache.tokenIds();
    translateTorch("selective recompute", [&] {
        size_t i = 0;
        while (i < redo.size()) { // one run [begin, end) of consecutive positions at a time
            const int begin = redo[i];
            int end = begin + 1;
            while (i + 1 < redo.size() && redo[i + 1] == end) {
                ++i;
                ++end;
            }
            ++i;
            // the converted positions after the run, kept aside while B writes the run's K/V
            std::vector<torch::Tensor> keys, values;
            {
                c10::InferenceMode guard;
                for (int l = 0; l < d.numLayers; ++l) {
                    keys.push_back(d.keys[size_t(l)].narrow(1, end, n - end).clone());
                    values.push_back(d.values[size_t(l)].narrow(1, end, n - end).clone());
                }
            }
            cache.truncate(begin);
            target.forward(std::vector<int>(ids.begin() + begin, ids.begin() + end), cache);
            c10::InferenceMode guard;
            d.reserve(n);
            for (int l = 0; l < d.numLayers; ++l) {
                d.keys[size_t(l)].narrow(1, end, n - end).copy_(keys[size_t(l)]);
                d.values[size_t(l)].narrow(1, end, n - end).copy_(values[size_t(l)]);
            }
            d.length = n;
            d.ids = ids;
        }
        return 0;
    });
    return int(redo.size());
}

TransferResult transferGenerate(const Model &source, const Model &target, const Converter &converter,
                                const std::vector<int> &prompt, const GenerateOptions &options,
                                KvCache *sourceCache, const core::RecomputePlan &recompute)
{
    if (prompt.size() < 2)
        throw Error(ErrorCode::InvalidArgument, "transfer needs a prompt of at least 2 tokens");
    TransferResult r;
    const std::vector<int> prefix(prompt.begin(), prompt.end() - 1);
    KvCache local;
    KvCache *cacheA = sourceCache;
    if (!cacheA || cacheA->tokenIds() != prefix) {
        if (!cacheA) {
            local = source.newCache();
            cacheA = &local;
        }
        cacheA->clear();
        const auto t0 = Clock::now();
        source.forward(prefix, *cacheA);
        r.sourcePrefillMs = msSince(t0);
    }
    const auto t1 = Clock::now();
    auto cacheB = target.newCache();
    converter.convert(*cacheA, cacheB);
    r.recomputed = recomputeConverted(target, cacheB, recompute);
    r.convertMs = msSince(t1);
    r.generation = target.generate(prompt, cacheB, options);
    r.generation.stats.reusedTokens -= r.recomputed; // B computed those itself
    return r;
}

double Agreement::meanKl() const
{
    return kl.empty() ? 0.0 : std::accumulate(kl.begin(), kl.end(), 0.0) / double(kl.size());
}

double Agreement::top1Rate() const
{
    return top1.empty() ? 0.0 : double(std::accumulate(top1.begin(), top1.end(), 0)) / double(top1.size());
}

namespace {

// The quality gate's attention: queries q [nh, tail + 1, hd] (the tail positions, then the last
// prompt token) over the tail's keys and values k, v [nkv, tail, hd] only, as layer `layer` of the
// model `c` attends (score scale, soft-cap, sliding window; GQA: query head h reads kv head h / rep):
// tail query i sees tail keys 0..i, the last token sees all of them. Returns [nh, tail + 1, hd].
torch::Tensor tailAttention(const torch::Tensor &q, const torch::Tensor &k, const torch::Tensor &v,
                            const core::ModelConfig &c, int layer)
{
    const int64_t nh = q.size(0), rows = q.size(1), hd = q.size(2), keys = k.size(1), rep = nh / k.size(0);
    const auto kk = k.repeat_interleave(rep, 0), vv = v.repeat_interleave(rep, 0);
    auto scores = torch::matmul(q, kk.transpose(1, 2)) /
                  std::sqrt(c.queryPreAttnScalar.value_or(double(hd))); // [nh, tail + 1, tail]
    if (c.attnLogitSoftcap)
        scores = torch::tanh(scores / *c.attnLogitSoftcap) * *c.attnLogitSoftcap;
    const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
    const auto qpos = torch::arange(rows, opts).unsqueeze(1), kpos = torch::arange(keys, opts).unsqueeze(0);
    auto mask = kpos > qpos; // [tail + 1, tail], true = masked
    if (c.isSlidingLayer(layer))
        mask = mask.logical_or(kpos <= qpos - c.slidingWindow);
    scores = scores.masked_fill(mask, -INFINITY);
    // a row with no key in its window (a window of 1 for the last token) reads nothing: zeros
    return torch::matmul(torch::nan_to_num(torch::softmax(scores, -1), 0.0), vv);
}

// KL(p || q) and argmax agreement per row of two logit matrices [rows, vocab].
Agreement compareLogits(const std::vector<float> &ls, const std::vector<float> &lt, size_t rows)
{
    const size_t vocab = ls.size() / rows;
    Agreement a;
    for (size_t i = 0; i < rows; ++i) {
        const float *p = ls.data() + i * vocab, *q = lt.data() + i * vocab;
        a.kl.push_back(core::klDivergence(p, q, vocab));
        a.top1.push_back(std::max_element(p, p + vocab) - p == std::max_element(q, q + vocab) - q ? 1 : 0);
    }
    return a;
}

// The last prompt token and the continuation but its last token: what both paths are fed.
std::vector<int> fedTokens(const std::vector<int> &prompt, const std::vector<int> &continuation)
{
    if (prompt.size() < 2)
        throw Error(ErrorCode::InvalidArgument, "agreement needs a prompt of at least 2 tokens");
    std::vector<int> fed = {prompt.back()};
    if (!continuation.empty())
        fed.insert(fed.end(), continuation.begin(), continuation.end() - 1);
    return fed;
}

std::vector<float> scratchLogits(const Model &target, const std::vector<int> &prompt,
                                 const std::vector<int> &fed)
{
    auto scratch = target.newCache();
    target.forward(std::vector<int>(prompt.begin(), prompt.end() - 1), scratch);
    return target.forward(fed, scratch, true); // [fed, vocab]
}

} // namespace

Agreement teacherForcedAgreement(const Model &source, const Model &target, const Converter &converter,
                                 const std::vector<int> &prompt, const std::vector<int> &continuation,
                                 const core::RecomputePlan &recompute)
{
    const auto fed = fedTokens(prompt, continuation);
    const auto ls = scratchLogits(target, prompt, fed);
    auto cacheA = source.newCache();
    source.forward(std::vector<int>(prompt.begin(), prompt.end() - 1), cacheA);
    auto transfer = target.newCache();
    converter.convert(cacheA, transfer);
    recomputeConverted(target, transfer, recompute);
    return compareLogits(ls, target.forward(fed, transfer, true), fed.size());
}

Agreement noPrefixAgreement(const Model &target, const std::vector<int> &prompt,
                            const std::vector<int> &continuation)
{
    const auto fed = fedTokens(prompt, continuation);
    const auto ls = scratchLogits(target, prompt, fed);
    auto empty = target.newCache();
    return compareLogits(ls, target.forward(fed, empty, true), fed.size());
}

std::vector<Agreement> handoffAgreement(const Model &source, const Model &target, const Converter &converter,
                                        const std::vector<int> &tokens, int handoff,
                                        const std::vector<std::pair<int, int>> &spans)
{
    const int n = int(tokens.size());
    if (handoff < 1 || handoff >= n)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("hand-off after {} of {} tokens: it needs 1 .. {}", handoff, n, n - 1));
    int last = handoff;
    for (const auto &[begin, end] : spans) {
        if (begin <= last || end <= begin || end > n)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("span [{}, {}) of a {}-token conversation must be non-empty, after the "
                                    "hand-off at {} and after the span before it",
                                    begin, end, n, handoff));
        last = end - 1; // the next span's first predicting position (its begin - 1) may be this end - 1
    }
    // Feeds tokens[from ..] into cache span by span: logits only at the positions predicting a span.
    const auto run = [&](KvCache &cache, int from) {
        std::vector<std::vector<float>> out;
        int cursor = from;
        for (const auto &[begin, end] : spans) {
            if (begin - 1 > cursor)
                target.forward(std::vector<int>(tokens.begin() + cursor, tokens.begin() + begin - 1), cache);
            out.push_back(target.forward(
                std::vector<int>(tokens.begin() + begin - 1, tokens.begin() + end - 1), cache, true));
            cursor = end - 1;
        }
        return out;
    };
    auto scratch = target.newCache();
    const auto ls = run(scratch, 0);
    auto cacheA = source.newCache();
    source.forward(std::vector<int>(tokens.begin(), tokens.begin() + handoff), cacheA);
    auto transfer = target.newCache();
    converter.convert(cacheA, transfer);
    const auto lt = run(transfer, handoff);
    std::vector<Agreement> out;
    for (size_t i = 0; i < spans.size(); ++i)
        out.push_back(compareLogits(ls[i], lt[i], size_t(spans[i].second - spans[i].first)));
    return out;
}

GateResult qualityGate(const Model &target, const Converter &converter, const KvCache &sourceCache,
                       int lastToken, int tail, GateSignal signal, double threshold)
{
    const int n = sourceCache.tokens();
    if (n < 2)
        throw Error(ErrorCode::InvalidArgument, "the quality gate needs at least 2 converted positions");
    GateResult g;
    g.tail = std::clamp(tail, 1, n - 1);
    g.signal = signal;
    g.threshold = threshold;
    const auto t0 = Clock::now();
    auto cache = target.newCache();
    converter.convert(sourceCache, cache);
    const int start = n - g.tail;
    // what the conversion put at the tail positions, post-RoPE [kvB, tail, hdB] per layer
    std::vector<std::pair<torch::Tensor, torch::Tensor>> converted;
    for (int l = 0; l < cache.numLayers(); ++l)
        converted.push_back(
            {cache.impl()->keys[size_t(l)].narrow(1, start, g.tail).to(torch::kFloat32).clone(),
             cache.impl()->values[size_t(l)].narrow(1, start, g.tail).to(torch::kFloat32).clone()});
    // the last token on the fully converted cache: what the transfer path would predict
    auto full = cache.fork();
    const auto logitsFull = target.forward({lastToken}, full); // [1, vocab]
    const size_t vocab = logitsFull.size();
    // the tail recomputed by B, then the last token
    cache.truncate(start);
    std::vector<int> ids(sourceCache.tokenIds().begin() + start, sourceCache.tokenIds().end());
    ids.push_back(lastToken);
    std::vector<std::vector<float>> queries; // [layers] of [heads, tail + 1, headDim], post-RoPE
    const auto logits = target.forward(ids, cache, true, &queries); // [tail + 1, vocab]
    double nll = 0;
    for (int i = 0; i < g.tail; ++i) // position i predicts ids[i + 1]
        nll -= core::logSoftmax(logits.data() + size_t(i) * vocab, vocab)[size_t(ids[size_t(i) + 1])];
    g.nll = nll / g.tail;
    g.tailKl = core::klDivergence(logits.data() + size_t(g.tail) * vocab, logitsFull.data(), vocab);
    g.kvCos = translateTorch("quality gate", [&] {
        c10::InferenceMode guard;
        double sum = 0;
        for (int l = 0; l < cache.numLayers(); ++l)
            for (int kv = 0; kv < 2; ++kv) {
                auto own = (kv == 0 ? cache.impl()->keys : cache.impl()->values)[size_t(l)]
                               .narrow(1, start, g.tail)
                               .to(torch::kFloat32)
                               .transpose(0, 1)
                               .reshape({g.tail, -1});
                auto conv = (kv == 0 ? converted[size_t(l)].first : converted[size_t(l)].second)
                                .transpose(0, 1)
                                .reshape({g.tail, -1});
                sum += torch::cosine_similarity(own, conv, 1).mean().item<double>();
            }
        return sum / (2.0 * cache.numLayers());
    });
    // B's queries of the tail and the last token (from the recompute above, so no extra pass) read
    // the tail's K/V twice: B's own and the converted. The positions before the tail hold converted
    // K/V in both caches, so they are left out of both softmaxes rather than diluting the difference.
    g.attnCos = translateTorch("quality gate attention", [&] {
        c10::InferenceMode guard;
        const auto &c = target.config();
        const auto device = cache.impl()->device;
        const int64_t nh = c.numHeads, hd = c.headDim, q = g.tail + 1;
        double sum = 0;
        for (int l = 0; l < cache.numLayers(); ++l) {
            auto query = torch::from_blob(queries[size_t(l)].data(), {nh, q, hd}).to(device);
            auto own = [&](const std::vector<torch::Tensor> &kv) {
                return kv[size_t(l)].narrow(1, start, g.tail).to(torch::kFloat32); // [kvB, tail, hdB]
            };
            const auto mine = tailAttention(query, own(cache.impl()->keys), own(cache.impl()->values), c, l);
            const auto conv =
                tailAttention(query, converted[size_t(l)].first, converted[size_t(l)].second, c, l);
            auto rows = [&](const torch::Tensor &x) { return x.transpose(0, 1).reshape({q, nh * hd}); };
            sum += torch::cosine_similarity(rows(mine), rows(conv), 1).mean().item<double>();
        }
        return sum / double(cache.numLayers());
    });
    switch (signal) {
    case GateSignal::KvCos:
        g.value = g.kvCos;
        g.passed = g.kvCos >= threshold;
        break;
    case GateSignal::TailKl:
        g.value = g.tailKl;
        g.passed = g.tailKl <= threshold;
        break;
    case GateSignal::Nll:
        g.value = g.nll;
        g.passed = g.nll <= threshold;
        break;
    case GateSignal::AttnCos:
        g.value = g.attnCos;
        g.passed = g.attnCos >= threshold;
        break;
    }
    g.ms = msSince(t0);
    return g;
}

} // namespace kvwb::gpu
