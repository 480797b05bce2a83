#include "gpu/model/model.h"

#include "core/metrics/distributions.h"
#include "core/model/memory_estimate.h"
#include "core/model/quant.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/util/mapped_file.h"
#include "core/util/system_memory.h"
#include "gpu/src/model/cpu_kernels_p.h"
#include "gpu/src/model/kv_cache_p.h"
#include "gpu/src/model/model_grad_p.h"
#include "gpu/src/model/model_p.h"
#include "gpu/src/torch_error_p.h"

#include <fmt/format.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;

namespace {

using core::Clock;
using core::msSince;

using detail::JobScope;
using detail::torchType;
using detail::translateTorch;

// y = x W^T + b.
struct Proj
{
    torch::Tensor w; // [out, in], as in the checkpoint; undefined when q holds the weight
    torch::Tensor b; // [out], or undefined
    // The weight kept in ggml blocks (LoadOptions::dequantize off, CPU): its parts by rows, one per
    // block type (q, k and v of one type are one part).
    std::vector<detail::QuantMatrix> q;
};

struct Layer
{
    torch::Tensor inputNorm;    // [hidden]
    Proj qkv;                   // q, k, v rows fused: out = (heads + 2*kvHeads) * headDim
    Proj o;                     // [hidden] x [heads*headDim]
    torch::Tensor qNorm, kNorm; // [headDim] each (Qwen3, Gemma 3), else undefined
    torch::Tensor postNorm;     // [hidden] before the MLP; Gemma: on the attention output
    torch::Tensor preFfNorm;    // [hidden] before the MLP (Gemma), else undefined
    torch::Tensor postFfNorm;   // [hidden] on the MLP output (Gemma), else undefined
    // Sliding-window layer (Gemma): its queries see only the last `window` positions.
    bool sliding = false;
    Proj gateUp; // gate and up rows fused: out = 2 * intermediate
    Proj down;   // [hidden] x [intermediate]
};

} // namespace

struct Model::Impl
{
    core::Checkpoint checkpoint;
    core::ModelConfig config;
    LoadOptions options;
    torch::Device device = torch::kCPU;
    torch::Dtype dtype = torch::kFloat32;
    torch::Dtype kvDtype = torch::kFloat32; // the KV cache's (LoadOptions::kvDtype)
    torch::Tensor embed;                    // [vocab, hidden]; undefined when embedQ holds it
    std::optional<detail::QuantMatrix> embedQ;
    std::vector<Layer> layers;
    torch::Tensor finalNorm; // [hidden]
    Proj lmHead;             // out = vocab (w aliases embed when tied)
    // The CPU kernels (detail::haveRowGemv: CPU, f32 / bf16, AVX-512): one-token products through
    // detail::rowGemv, prompts through teamLinear, attention, norms and activations on the team.
    bool cpuKernels = false;
    std::shared_ptr<detail::RopeTables> rope;
    int context = 0; // positions served
    int64_t deviceBytes = 0;

    torch::Tensor rmsNorm(const torch::Tensor &x, const torch::Tensor &w) const
    {
        if (detail::cpuKernelFits(x) && x.is_contiguous() && !x.requires_grad())
            return detail::rmsNormCpu(x, w, config.rmsNormEps, config.unitOffsetNorm);
        if (x.requires_grad() && w.is_inference()) // (autograd saves w)
            return rmsNorm(x, savable(w));
        const auto xf = x.to(torch::kFloat32);
        const auto var = xf.pow(2).mean(-1, true);
        const auto normed = xf * torch::rsqrt(var + config.rmsNormEps);
        // Gemma2RMSNorm: scale by (1 + w) in f32, then cast back.
        if (config.unitOffsetNorm)
            return (normed * (w.to(torch::kFloat32) + 1.0)).to(x.scalar_type());
        // HF LlamaRMSNorm: normalise in f32, cast back, then scale.
        return w * normed.to(x.scalar_type());
    }

    // cap * tanh(x / cap) (Gemma's soft-capping), or x when there is no cap.
    static torch::Tensor softcap(const torch::Tensor &x, const std::optional<double> &cap)
    {
        return cap ? torch::tanh(x / *cap) * *cap : x;
    }

    // x [t, in] -> [t, out]. One token on the CPU: a row-dot kernel that streams W once (torch's
    // linear re-packed the f32 weight on every call, 37% of a 135M decode profile, and ran bf16
    // through oneDNN at ~4 GB/s).
    torch::Tensor project(const torch::Tensor &x, const Proj &p) const
    {
        if (x.requires_grad()) { // autograd (gradRun): torch's linear on views autograd may save
            if (!p.q.empty())
                throw Error(ErrorCode::InvalidArgument,
                            fmt::format("{}: its weights are held in quantised blocks, which autograd cannot "
                                        "run through; load it dequantised",
                                        checkpoint.path().string()));
            const auto w = savable(p.w);
            return p.b.defined() ? torch::linear(x, w, savable(p.b)) : torch::linear(x, w);
        }
        if (!p.q.empty())
            return detail::quantLinear(x, p.q, p.b);
        if (cpuKernels && x.size(0) == 1)
            return detail::rowGemv(p.w, x.select(0, 0), p.b);
        if (cpuKernels)
            return detail::teamLinear(x, p.w, p.b);
        return p.b.defined() ? torch::linear(x, p.w, p.b) : torch::linear(x, p.w);
    }

    // The cache must come from this model: same geometry, device, dtype and RoPE tables (a cache
    // from another model is converted through KvCache::layer/assign, never used directly).
    KvCache::Impl &cacheOf(KvCache &cache) const
    {
        auto *impl = cache.impl();
        if (!impl)
            throw Error(ErrorCode::InvalidArgument, "KV cache is empty: create it with Model::newCache()");
        const core::ModelConfig &c = config;
        if (impl->numLayers != c.numLayers || impl->numKvHeads != c.numKvHeads || impl->headDim != c.headDim)
            throw Error(
                ErrorCode::Shape,
                fmt::format("KV cache geometry [{} layers, {} kv heads, head dim {}] does not match the "
                            "model's [{}, {}, {}]",
                            impl->numLayers, impl->numKvHeads, impl->headDim, c.numLayers, c.numKvHeads,
                            c.headDim));
        if (impl->rope != rope || impl->device != device || impl->dtype != kvDtype)
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format("KV cache belongs to another model (or device/dtype: cache {} {}, model {} {}); "
                            "move K/V between models with KvCache::layer() and assign()",
                            impl->device.str(), c10::toString(impl->dtype), device.str(),
                            c10::toString(kvDtype)));
        return *impl;
    }

    // The rest of a layer after attention: output projection, residual, MLP, residual.
    torch::Tensor finishLayer(const Layer &L, const torch::Tensor &x0, const torch::Tensor &att,
                              bool gelu) const
    {
        auto o = project(att, L.o);
        // Gemma's post_attention_layernorm norms the attention output; Llama's is the MLP's input.
        const bool sandwich = L.preFfNorm.defined();
        auto x = x0 + (sandwich ? rmsNorm(o, L.postNorm) : o);
        auto h2 = rmsNorm(x, sandwich ? L.preFfNorm : L.postNorm);
        const auto gateUp = project(h2, L.gateUp); // [t, 2 * intermediate]
        torch::Tensor act;
        if (cpuKernels && !gateUp.requires_grad()) {
            act = detail::gluCpu(gateUp, gelu);
        } else {
            const int64_t inter = gateUp.size(1) / 2;
            auto gate = gateUp.narrow(1, 0, inter);
            gate = gelu ? torch::gelu(gate, "tanh") : torch::silu(gate);
            act = gate * gateUp.narrow(1, inter, inter);
        }
        auto mlp = project(act, L.down);
        return x + (sandwich ? rmsNorm(mlp, L.postFfNorm) : mlp);
    }

    static torch::Tensor savable(const torch::Tensor &w) { return detail::savable(w); }

    // Error(InvalidArgument) naming the checkpoint unless every weight is dense (autograd cannot run
    // through the quantised kernels).
    void checkDense() const
    {
        if (embedQ ||
            std::any_of(layers.begin(), layers.end(),
                        [](const Layer &L) {
                            return !L.qkv.q.empty() || !L.o.q.empty() || !L.gateUp.q.empty() ||
                                   !L.down.q.empty();
                        }) ||
            !lmHead.q.empty())
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{}: its weights are held in quantised blocks, which autograd cannot run "
                                    "through; load it dequantised (--dequantize, or the Models step's "
                                    "dequantise box)",
                                    checkpoint.path().string()));
    }

    // gradRun's checks: dense weights, prefix K/V of this geometry, tokens within the context.
    void checkGradRun(const std::vector<int> &ids, const std::vector<torch::Tensor> &keys,
                      const std::vector<torch::Tensor> &values) const
    {
        checkDense();
        if (keys.size() != layers.size() || values.size() != layers.size())
            throw Error(ErrorCode::Shape, fmt::format("{} key and {} value layers for the model's {}",
                                                      keys.size(), values.size(), layers.size()));
        const int64_t n = keys.empty() ? 0 : keys[0].size(1);
        for (size_t l = 0; l < layers.size(); ++l)
            for (const auto *t : {&keys[l], &values[l]})
                if (t->dim() != 3 || t->size(0) != config.numKvHeads || t->size(1) != n ||
                    t->size(2) != config.headDim)
                    throw Error(ErrorCode::Shape,
                                fmt::format("layer {} prefix {} is {}; expected [{}, {}, {}]", l,
                                            t == &keys[l] ? "keys" : "values", fmt::join(t->sizes(), " x "),
                                            config.numKvHeads, n, config.headDim));
        if (ids.empty() || n + int64_t(ids.size()) > context)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{} prefix positions and {} tokens: expected 1 or more tokens within the "
                                    "context of {}",
                                    n, ids.size(), context));
    }

    // runChunk's computation through torch's own ops, so autograd records it: ids at positions
    // n.. after a prefix given as tensors keys/values [layers] of [kvHeads, n, headDim] (post-RoPE,
    // which may require grad) -> logits [ids, vocab] f32. Nothing is cached. The caller's
    // JobScope must leave inference mode off.
    torch::Tensor gradRun(const std::vector<int> &ids, const std::vector<torch::Tensor> &keys,
                          const std::vector<torch::Tensor> &values) const
    {
        checkGradRun(ids, keys, values);
        const int64_t t = int64_t(ids.size()), start = keys[0].size(1), total = start + t;
        const int64_t nh = config.numHeads, nkv = config.numKvHeads, hd = config.headDim, rep = nh / nkv;
        std::vector<int64_t> ids64(ids.begin(), ids.end());
        const auto idx = torch::from_blob(ids64.data(), {t}, torch::kInt64).to(device);
        auto x = savable(embed).index_select(0, idx);
        if (config.scaleEmbeddings)
            x = x * torch::scalar_tensor(std::sqrt(double(config.hiddenSize)), x.options());
        const auto positions = torch::TensorOptions().dtype(torch::kInt64).device(device);
        const auto qpos = torch::arange(start, total, positions).unsqueeze(1);
        const auto kpos = torch::arange(0, total, positions).unsqueeze(0);
        const auto fullMask = kpos > qpos; // [t, total], true = masked
        const auto slidingMask = fullMask.logical_or(kpos <= qpos - config.slidingWindow);
        const double scale = 1.0 / std::sqrt(config.queryPreAttnScalar.value_or(double(hd)));
        const bool gelu = config.activation == core::MlpActivation::GeluTanh;
        for (size_t l = 0; l < layers.size(); ++l) {
            const Layer &L = layers[l];
            const auto qkv = project(rmsNorm(x, L.inputNorm), L.qkv);
            auto q = qkv.narrow(1, 0, nh * hd).view({t, nh, hd}).transpose(0, 1);
            auto k = qkv.narrow(1, nh * hd, nkv * hd).view({t, nkv, hd}).transpose(0, 1);
            auto v = qkv.narrow(1, (nh + nkv) * hd, nkv * hd).view({t, nkv, hd}).transpose(0, 1);
            if (L.qNorm.defined()) {
                q = rmsNorm(q.contiguous(), L.qNorm);
                k = rmsNorm(k.contiguous(), L.kNorm);
            }
            q = rope->apply(q, int(l), start, false);
            k = rope->apply(k, int(l), start, false);
            // as the cache holds them: rounded to its dtype (LoadOptions::kvDtype), read in the compute's
            const auto cached = [&](const torch::Tensor &x) { return x.to(kvDtype).to(dtype); };
            const auto K = torch::cat({cached(keys[l]), cached(k)}, 1),
                       V = torch::cat({cached(values[l]), cached(v)}, 1);
            auto scores =
                torch::matmul(q.reshape({nkv, rep * t, hd}), K.transpose(1, 2)).to(torch::kFloat32) *
                scale; // [nkv, rep*t, total]
            scores = softcap(scores, config.attnLogitSoftcap)
                         .view({nkv, rep, t, total})
                         .masked_fill(L.sliding ? slidingMask : fullMask, -INFINITY)
                         .view({nkv, rep * t, total});
            const auto out = torch::matmul(torch::softmax(scores, -1).to(dtype), V); // [nkv, rep*t, hd]
            x = finishLayer(L, x, out.view({nh, t, hd}).transpose(0, 1).reshape({t, nh * hd}), gelu);
        }
        x = rmsNorm(x, finalNorm);
        return softcap(project(x, lmHead).to(torch::kFloat32), config.finalLogitSoftcap);
    }

    // ids at positions cache.length.. -> logits [t or 1, vocab] (f32); appends their K/V to the
    // cache. queries, when given, receives each layer's post-RoPE queries [nh, t, hd] (float32);
    // hidden, when given, the residual stream after hiddenLayer blocks [t, hidden] (float32;
    // 0 = the embeddings). A prompt longer than the prefill chunk runs chunk by chunk (runChunk),
    // each attending to the cache the chunks before it wrote: the same products row by row, with
    // activations bounded by the chunk.
    torch::Tensor run(const std::vector<int> &ids, KvCache::Impl &cache, bool allLogits,
                      std::vector<torch::Tensor> *queries = nullptr, int hiddenLayer = -1,
                      torch::Tensor *hidden = nullptr) const
    {
        const int64_t t = int64_t(ids.size());
        const int64_t chunk = options.prefillChunk > 0 ? options.prefillChunk : core::kPrefillChunk;
        if (t <= chunk)
            return runChunk(ids, cache, allLogits, queries, hiddenLayer, hidden);
        cache.reserve(cache.length + t); // once, not by doubling chunk after chunk
        std::vector<torch::Tensor> logits, hiddens;
        std::vector<std::vector<torch::Tensor>> layerQueries(queries ? layers.size() : 0);
        for (int64_t i0 = 0; i0 < t; i0 += chunk) {
            const int64_t n = std::min(chunk, t - i0);
            const std::vector<int> part(ids.begin() + i0, ids.begin() + i0 + n);
            std::vector<torch::Tensor> q;
            torch::Tensor h;
            auto l =
                runChunk(part, cache, allLogits, queries ? &q : nullptr, hiddenLayer, hidden ? &h : nullptr);
            if (allLogits || i0 + n == t)
                logits.push_back(std::move(l));
            for (size_t j = 0; j < q.size(); ++j)
                layerQueries[j].push_back(std::move(q[j]));
            if (h.defined())
                hiddens.push_back(std::move(h));
        }
        if (queries) {
            queries->clear();
            for (auto &parts : layerQueries)
                queries->push_back(torch::cat(parts, 1));
        }
        if (hidden && !hiddens.empty())
            *hidden = torch::cat(hiddens, 0);
        return logits.size() == 1 ? logits[0] : torch::cat(logits, 0);
    }

    // One chunk of run(): every layer over all of ids at once.
    torch::Tensor runChunk(const std::vector<int> &ids, KvCache::Impl &cache, bool allLogits,
                           std::vector<torch::Tensor> *queries, int hiddenLayer, torch::Tensor *hidden) const
    {
        const int64_t t = int64_t(ids.size());
        const int64_t start = cache.length;
        const int64_t total = start + t;
        if (config.ropeScaling.type == "longrope" && total > context)
            // the divisors in use hold for `context` positions; past them the other set applies
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{} positions exceed the context of {} this model was loaded for "
                                    "(LongRoPE's {} divisors); load it with a larger context",
                                    total, context, config.ropeScaling.useLongFactor ? "long" : "short"));
        const int64_t nh = config.numHeads, nkv = config.numKvHeads, hd = config.headDim;
        const int64_t rep = nh / nkv;
        std::vector<int64_t> ids64(ids.begin(), ids.end());
        auto idx = torch::from_blob(ids64.data(), {t}, torch::kInt64).to(device);
        auto x = embedQ ? detail::quantRows(*embedQ, idx, dtype) : embed.index_select(0, idx); // [t, hidden]
        if (config.scaleEmbeddings) // HF's normalizer: sqrt(hidden) as a tensor of the compute dtype
            x = x * torch::scalar_tensor(std::sqrt(double(config.hiddenSize)), x.options());
        cache.reserve(total);

        // Causal mask for the new queries over the keys from kStart: query i (position start+i) sees
        // key j <= start+i, and in a sliding layer only j > start+i-window. A sliding layer reads
        // only the keys its first query can see (decode: the last `window`), so one token needs no
        // mask in either kind of layer.
        const auto positions = torch::TensorOptions().dtype(torch::kInt64).device(device);
        const int64_t window = config.slidingWindow;
        const auto maskFrom = [&](int64_t kStart, bool sliding) {
            torch::Tensor m;
            if (t > 1) {
                auto qpos = torch::arange(start, total, positions).unsqueeze(1);
                auto kpos = torch::arange(kStart, total, positions).unsqueeze(0);
                m = kpos > qpos; // [t, total - kStart], true = masked
                if (sliding)
                    m = m.logical_or(kpos <= qpos - window);
            }
            return m;
        };
        const int64_t slidingStart = std::max<int64_t>(0, start - window + 1);
        const torch::Tensor fullMask = maskFrom(0, false);
        torch::Tensor slidingMask;
        if (std::any_of(layers.begin(), layers.end(), [](const Layer &L) { return L.sliding; }))
            slidingMask = maskFrom(slidingStart, true);
        // Gemma scales by query_pre_attn_scalar^-0.5, which need not be head_dim.
        const double scale = 1.0 / std::sqrt(config.queryPreAttnScalar.value_or(double(hd)));
        const bool gelu = config.activation == core::MlpActivation::GeluTanh;
        for (size_t l = 0; l < layers.size(); ++l) {
            if (hidden && int(l) == hiddenLayer)
                *hidden = x.to(torch::kFloat32);
            const Layer &L = layers[l];
            auto h = rmsNorm(x, L.inputNorm);
            const auto qkv = project(h, L.qkv);                                   // [t, (nh + 2*nkv) * hd]
            auto q = qkv.narrow(1, 0, nh * hd).view({t, nh, hd}).transpose(0, 1); // [nh, t, hd]
            auto k = qkv.narrow(1, nh * hd, nkv * hd).view({t, nkv, hd}).transpose(0, 1); // [nkv, t, hd]
            auto v = qkv.narrow(1, (nh + nkv) * hd, nkv * hd).view({t, nkv, hd}).transpose(0, 1);
            if (L.qNorm.defined()) { // per head over hd, before RoPE: the cache holds normed keys
                q = rmsNorm(q, L.qNorm);
                k = rmsNorm(k, L.kNorm);
            }
            q = rope->apply(q, int(l), start, false);
            k = rope->apply(k, int(l), start, false);
            if (queries)
                queries->push_back(q.to(torch::kFloat32).contiguous().cpu());
            cache.write(int(l), k, v);
            // The cache holds every position; a sliding layer reads the window's keys only.
            const int64_t kStart = L.sliding ? slidingStart : 0;
            // A cache of another dtype (LoadOptions::kvDtype) is read widened to the compute dtype;
            // the new keys are read back from it, rounded as decode will read them.
            const torch::Tensor &mask = L.sliding ? slidingMask : fullMask; // [t, total - kStart]
            // Long prompts attend in blocks of queries, each over the keys up to its last query
            // only: causal attention needs about half the products of the full [t, keys] square,
            // and a block's scores stay cache-sized ([9, 128, 512] f32 is 2.4 MiB).
            if (t == 1 && cpuKernels) { // one token: one fused loop per head
                auto att = detail::attendOneCpu(q, cache.keys[l], cache.values[l], kStart, total, scale,
                                                config.attnLogitSoftcap.value_or(0.0));
                x = finishLayer(L, x, att, gelu);
                continue;
            }
            auto layerK = cache.keysUpTo(int(l), total).narrow(1, kStart, total - kStart); // [nkv, keys, hd]
            auto layerV = cache.valuesUpTo(int(l), total).narrow(1, kStart, total - kStart);
            if (layerK.scalar_type() != dtype) {
                layerK = layerK.to(dtype);
                layerV = layerV.to(dtype);
            }
            const int64_t queryBlock = core::attentionQueryBlock(nh, total - kStart);
            const int64_t block = t > 2 * queryBlock ? queryBlock : t;
            std::vector<torch::Tensor> parts; // [nh, n, hd] per block
            for (int64_t i0 = 0; i0 < t; i0 += block) {
                const int64_t n = std::min(block, t - i0), keys = start + i0 + n - kStart;
                auto K = layerK.narrow(1, 0, keys); // [nkv, keys, hd]
                auto V = layerV.narrow(1, 0, keys); // [nkv, keys, hd]
                // GQA without copying K/V: query heads h = g*rep + r share kv head g.
                auto qg = q.narrow(1, i0, n).reshape({nkv, rep * n, hd});
                const auto blockMask = mask.defined() ? mask.narrow(0, i0, n).narrow(1, 0, keys) : mask;
                torch::Tensor out; // [nkv, rep*n, hd]
                if (cpuKernels) {  // the CPU kernels: products and softmax over the team
                    const auto probs =
                        detail::attentionSoftmaxCpu(detail::teamMatmulNT(qg, K), blockMask, scale,
                                                    config.attnLogitSoftcap.value_or(0.0), dtype);
                    out = detail::teamMatmulNT(probs, V.transpose(1, 2).contiguous()).to(dtype);
                } else {
                    auto scores = torch::matmul(qg, K.transpose(1, 2)).to(torch::kFloat32) * scale;
                    scores = softcap(scores, config.attnLogitSoftcap); // [nkv, rep*n, keys]
                    if (blockMask.defined())
                        scores = scores.view({nkv, rep, n, keys})
                                     .masked_fill(blockMask, -INFINITY)
                                     .view({nkv, rep * n, keys});
                    out = torch::matmul(torch::softmax(scores, -1).to(dtype), V);
                }
                parts.push_back(out.view({nh, n, hd})); // as heads
            }
            auto att =
                (parts.size() == 1 ? parts[0] : torch::cat(parts, 1)).transpose(0, 1).reshape({t, nh * hd});
            x = finishLayer(L, x, att, gelu);
        }
        if (hidden && hiddenLayer == int(layers.size()))
            *hidden = x.to(torch::kFloat32);
        cache.length = int(total);
        cache.ids.insert(cache.ids.end(), ids.begin(), ids.end());
        if (!allLogits)
            x = x.narrow(0, t - 1, 1);
        x = rmsNorm(x, finalNorm);
        return softcap(project(x, lmHead).to(torch::kFloat32),
                       config.finalLogitSoftcap); // [t or 1, vocab]
    }
};

const char *stopReasonName(StopReason r) noexcept
{
    switch (r) {
    case StopReason::MaxTokens:
        return "max_tokens";
    case StopReason::StopToken:
        return "stop_token";
    case StopReason::ContextFull:
        return "context_full";
    case StopReason::Cancelled:
        return "cancelled";
    }
    return "?";
}

namespace {

// Refuse a load that cannot fit rather than be killed half-way: the weights as they will be
// held, against what the machine has available now (a second model sees what the first left).
// Returns the bytes the weights will be held in.
int64_t checkWeightsFit(const core::Checkpoint &checkpoint, const LoadOptions &options, int64_t elementBytes,
                        bool keepQuantized)
{
    const int64_t held = core::heldWeightBytes(checkpoint, int(elementBytes), keepQuantized);
    if (const auto available = core::availableMemoryBytes(); available && held > *available)
        throw Error(ErrorCode::Device,
                    fmt::format("{}: its weights need about {:.2f} GB in {}, and this machine has {:.2f} "
                                "GB available (MemAvailable){}; not loaded",
                                checkpoint.path().string(), double(held) / 1e9,
                                core::floatTypeName(options.dtype), double(*available) / 1e9,
                                options.dtype == FloatType::F32 ? "; --dtype bf16 halves them" : ""));
    return held;
}

// A weight's name and its shape in the checkpoint.
using Part = std::pair<std::string, std::vector<int64_t>>;

// Reads a checkpoint's weights for Model::load: into tensors of the compute dtype on the device
// (on the CPU, pieces of one packed arena), or kept in their ggml blocks; adds what it holds to
// deviceBytes.
struct WeightLoader
{
    const core::Checkpoint &checkpoint;
    torch::Dtype dtype;
    torch::Device device;
    bool onCpu;
    bool keepQuantized;
    int64_t elementBytes;
    int64_t &deviceBytes;
    detail::PackedArena arena;

    // held: the bytes the weights will be held in on the CPU (checkWeightsFit), else 0.
    WeightLoader(const core::Checkpoint &checkpoint, torch::Dtype dtype, torch::Device device, bool onCpu,
                 bool keepQuantized, int64_t held, int64_t &deviceBytes)
        : checkpoint(checkpoint), dtype(dtype), device(device), onCpu(onCpu), keepQuantized(keepQuantized),
          elementBytes(int64_t(c10::elementSize(dtype))), deviceBytes(deviceBytes),
          // (each piece is padded to 64 bytes)
          arena(held > 0 ? held + 64 * int64_t(checkpoint.tensorNames().size()) : 0)
    {}

    // An uninitialised tensor of the compute dtype: a piece of the arena on the CPU.
    torch::Tensor denseTensor(const std::vector<int64_t> &shape)
    {
        int64_t n = 1;
        for (int64_t d : shape)
            n *= d;
        torch::Tensor bytes = arena.take(n * elementBytes);
        return torch::from_blob(
            bytes.data_ptr(), shape, [bytes](void *) {}, torch::TensorOptions().dtype(dtype));
    }

    // An uninitialised tensor of the compute dtype on the device.
    torch::Tensor emptyTensor(const std::string &name, const std::vector<int64_t> &shape)
    {
        return translateTorch(name.c_str(), [&] {
            return onCpu ? denseTensor(shape)
                         : torch::empty(shape, torch::TensorOptions().dtype(dtype).device(device));
        });
    }

    // The tensor's values converted into dst (of the compute dtype, on the device); its file pages
    // are released once copied.
    void loadInto(const std::string &name, const std::vector<int64_t> &shape, torch::Tensor dst)
    {
        const core::TensorRef ref = checkpoint.require(name, shape);
        translateTorch(name.c_str(), [&] {
            if (core::isBlockQuantized(ref.info->dtype)) { // GGUF blocks: dequantised one tensor at a time
                std::vector<float> values = core::toFloatVector(ref);
                dst.copy_(torch::from_blob(values.data(), shape, torch::kFloat32));
            } else { // (the mapping is read-only and may be unaligned for the dtype: copied, not viewed)
                dst.copy_(
                    torch::from_blob(const_cast<std::byte *>(ref.data), shape, torchType(ref.info->dtype)));
            }
            return 0;
        });
        core::MappedFile::releasePages(ref.data, size_t(ref.info->bytes));
        deviceBytes += dst.numel() * elementBytes;
    }

    torch::Tensor tensor(const std::string &name, std::vector<int64_t> shape)
    {
        torch::Tensor t = emptyTensor(name, shape);
        loadInto(name, shape, t);
        return t;
    }

    // Whether the weight is kept in its blocks.
    bool quantized(const std::string &name, const std::vector<int64_t> &shape)
    {
        return keepQuantized && core::isBlockQuantized(checkpoint.require(name, shape).info->dtype);
    }

    // Matrices' blocks stacked by rows into one packed buffer, straight off the file (whose pages
    // are then released), their scales checked; all of one type.
    detail::QuantMatrix quantMatrix(const std::vector<Part> &parts)
    {
        std::vector<core::TensorRef> refs;
        int64_t bytes = 0, rows = 0;
        for (const auto &[name, shape] : parts) {
            refs.push_back(checkpoint.require(name, shape));
            core::checkScales(refs.back().info->dtype, {refs.back().data, size_t(refs.back().info->bytes)},
                              name);
            bytes += int64_t(refs.back().info->bytes);
            rows += shape[0];
        }
        return translateTorch(parts[0].first.c_str(), [&] {
            detail::QuantMatrix q{refs[0].info->dtype, rows, parts[0].second[1], arena.take(bytes)};
            auto *out = static_cast<std::byte *>(q.bytes.data_ptr());
            for (const core::TensorRef &ref : refs) {
                std::memcpy(out, ref.data, size_t(ref.info->bytes));
                out += ref.info->bytes;
                core::MappedFile::releasePages(ref.data, size_t(ref.info->bytes));
            }
            deviceBytes += bytes;
            return q;
        });
    }

    // The matrices of one projection stacked by rows: kept in blocks when every one of them is
    // quantised (adjacent parts of one type in one buffer), else as one tensor of the compute dtype.
    Proj stacked(const std::vector<Part> &parts, torch::Tensor b)
    {
        Proj p;
        p.b = std::move(b);
        if (std::all_of(parts.begin(), parts.end(),
                        [&](const Part &x) { return quantized(x.first, x.second); })) {
            for (size_t i = 0; i < parts.size();) {
                const core::DType type = checkpoint.require(parts[i].first, {}).info->dtype;
                size_t j = i + 1;
                while (j < parts.size() && checkpoint.require(parts[j].first, {}).info->dtype == type)
                    ++j;
                p.q.push_back(quantMatrix({parts.begin() + long(i), parts.begin() + long(j)}));
                i = j;
            }
            return p;
        }
        int64_t rows = 0;
        for (const auto &part : parts)
            rows += part.second[0];
        if (parts.size() == 1) {
            p.w = tensor(parts[0].first, parts[0].second);
        } else {
            torch::Tensor whole = emptyTensor(parts[0].first, {rows, parts[0].second[1]});
            int64_t at = 0;
            for (const auto &[name, shape] : parts) {
                loadInto(name, shape, whole.narrow(0, at, shape[0]));
                at += shape[0];
            }
            p.w = whole;
        }
        return p;
    }

    // Layer l's norms and projections, q|k|v and gate|up fused.
    Layer layer(const core::ModelConfig &c, int l)
    {
        const int64_t h = c.hiddenSize, q = int64_t(c.numHeads) * c.headDim,
                      kv = int64_t(c.numKvHeads) * c.headDim, inter = c.intermediateSize;
        const std::string p = fmt::format("model.layers.{}.", l);
        Layer L;
        L.inputNorm = tensor(p + "input_layernorm.weight", {h});
        {
            torch::Tensor b;
            if (c.qkvBias)
                b = torch::cat({tensor(p + "self_attn.q_proj.bias", {q}),
                                tensor(p + "self_attn.k_proj.bias", {kv}),
                                tensor(p + "self_attn.v_proj.bias", {kv})});
            L.qkv = stacked({{p + "self_attn.q_proj.weight", {q, h}},
                             {p + "self_attn.k_proj.weight", {kv, h}},
                             {p + "self_attn.v_proj.weight", {kv, h}}},
                            b);
        }
        L.o = stacked({{p + "self_attn.o_proj.weight", {h, q}}},
                      c.oBias ? tensor(p + "self_attn.o_proj.bias", {h}) : torch::Tensor());
        if (c.qkNorm) {
            L.qNorm = tensor(p + "self_attn.q_norm.weight", {c.headDim});
            L.kNorm = tensor(p + "self_attn.k_norm.weight", {c.headDim});
        }
        L.postNorm = tensor(p + "post_attention_layernorm.weight", {h});
        if (c.sandwichNorms) {
            L.preFfNorm = tensor(p + "pre_feedforward_layernorm.weight", {h});
            L.postFfNorm = tensor(p + "post_feedforward_layernorm.weight", {h});
        }
        L.sliding = c.isSlidingLayer(l);
        {
            torch::Tensor b;
            if (c.mlpBias)
                b = torch::cat(
                    {tensor(p + "mlp.gate_proj.bias", {inter}), tensor(p + "mlp.up_proj.bias", {inter})});
            L.gateUp = stacked(
                {{p + "mlp.gate_proj.weight", {inter, h}}, {p + "mlp.up_proj.weight", {inter, h}}}, b);
        }
        L.down = stacked({{p + "mlp.down_proj.weight", {h, inter}}},
                         c.mlpBias ? tensor(p + "mlp.down_proj.bias", {h}) : torch::Tensor());
        return L;
    }
};

} // namespace

Model::Model() : m_impl(std::make_unique<Impl>()) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::filesystem::path &path, const LoadOptions &options,
                                   const ProgressFn &progress)
{
    return load(core::Checkpoint::open(path), options, progress);
}

std::unique_ptr<Model> Model::load(const core::Checkpoint &checkpoint, const LoadOptions &options,
                                   const ProgressFn &progress)
{
    checkDeviceSupport(options.device, options.dtype);
    if (options.threads < 0 || options.threads > kMaxThreads)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("threads is {}; expected 0 (all cores) .. {}", options.threads, kMaxThreads));
    JobScope scope(options.threads, false); // weight conversions: torch's threads
    std::unique_ptr<Model> model(new Model());
    Impl &m = *model->m_impl;
    m.checkpoint = checkpoint;
    m.config = checkpoint.config();
    m.options = options;
    if (options.context < 0 || options.context > m.config.maxPositionEmbeddings)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("context {} is outside 1..{} (the model's max_position_embeddings)",
                                options.context, m.config.maxPositionEmbeddings));
    if (options.context > 0 && m.config.ropeScaling.type == "longrope")
        m.config.ropeScaling.useLongFactor =
            options.context > m.config.ropeScaling.originalMaxPositionEmbeddings;
    m.context = options.context > 0 ? options.context : m.config.contextLimit();
    m.device = options.device == Device::Cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
    m.dtype = torchType(options.dtype);
    // A KV cache of f16 is storage only (attention widens it), so the CPU takes it too.
    m.kvDtype = torchType(options.kvDtype.value_or(options.dtype));
    if (options.prefillChunk < 0)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("prefill chunk is {}; expected 0 (the default, {}) or more tokens",
                                options.prefillChunk, core::kPrefillChunk));
    // Weights kept in their blocks: the CPU, unless asked to dequantise. On the CPU every weight is
    // written once into one packed mapping sized for all of them as held (detail::PackedArena), not
    // copied to the heap and then again into huge pages: a 0.6B bf16 model peaked at its weights
    // plus the embedding twice.
    const bool onCpu = options.device == Device::Cpu;
    const bool keepQuantized = onCpu && !options.dequantize;
    const int64_t elementBytes = int64_t(c10::elementSize(m.dtype));
    int64_t held = 0;
    if (onCpu)
        held = checkWeightsFit(checkpoint, options, elementBytes, keepQuantized);
    const core::ModelConfig &c = m.config;
    const int64_t h = c.hiddenSize;
    WeightLoader w(checkpoint, m.dtype, m.device, onCpu, keepQuantized, held, m.deviceBytes);
    auto report = [&](double f, const std::string &stage) { return !progress || progress(f, stage); };
    m.cpuKernels = m.device.is_cpu() && detail::haveRowGemv(m.dtype);

    const int total = c.numLayers + 2;
    if (!report(0.0, "embeddings"))
        return nullptr;
    if (w.quantized("model.embed_tokens.weight", {c.vocabSize, h}))
        m.embedQ = w.quantMatrix({{"model.embed_tokens.weight", {c.vocabSize, h}}});
    else
        m.embed = w.tensor("model.embed_tokens.weight", {c.vocabSize, h});
    for (int l = 0; l < c.numLayers; ++l) {
        if (!report(double(l + 1) / total, fmt::format("layer {}/{}", l + 1, c.numLayers)))
            return nullptr;
        m.layers.push_back(w.layer(c, l));
    }
    if (!report(double(total - 1) / total, "output"))
        return nullptr;
    m.finalNorm = w.tensor("model.norm.weight", {h});
    if (!c.tieWordEmbeddings)
        m.lmHead = w.stacked({{"lm_head.weight", {c.vocabSize, h}}}, torch::Tensor());
    else if (m.embedQ)
        m.lmHead.q = {*m.embedQ};
    else
        m.lmHead.w = m.embed;
    m.rope = std::make_shared<detail::RopeTables>(c, m.device);
    report(1.0, "ready");
    return model;
}

const core::ModelConfig &Model::config() const
{
    return m_impl->config;
}
const core::Checkpoint &Model::checkpoint() const
{
    return m_impl->checkpoint;
}
const LoadOptions &Model::options() const
{
    return m_impl->options;
}
int64_t Model::deviceBytes() const
{
    return m_impl->deviceBytes;
}
FloatType Model::kvDtype() const
{
    return m_impl->options.kvDtype.value_or(m_impl->options.dtype);
}

int Model::contextLimit() const
{
    return m_impl->context;
}

KvCache Model::newCache() const
{
    auto impl = std::make_unique<KvCache::Impl>();
    impl->numLayers = m_impl->config.numLayers;
    impl->numKvHeads = m_impl->config.numKvHeads;
    impl->headDim = m_impl->config.headDim;
    impl->device = m_impl->device;
    impl->dtype = m_impl->kvDtype;
    impl->rope = m_impl->rope;
    impl->maxPositions = m_impl->context;
    impl->keys.resize(size_t(impl->numLayers));
    impl->values.resize(size_t(impl->numLayers));
    return KvCache(std::move(impl));
}

static void checkIds(const std::vector<int> &ids, const core::ModelConfig &c)
{
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= c.vocabSize)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("token id {} at position {} is outside the model's vocabulary [0, {})",
                                    ids[i], i, c.vocabSize));
    }
}

// Error(InvalidArgument) "<what>: no tokens" for none, then checkIds.
static void checkTokens(const char *what, const std::vector<int> &ids, const core::ModelConfig &c)
{
    if (ids.empty())
        throw Error(ErrorCode::InvalidArgument, fmt::format("{}: no tokens", what));
    checkIds(ids, c);
}

// The queries run() collected, one vector per layer.
static std::vector<std::vector<float>> queryVectors(const std::vector<torch::Tensor> &q)
{
    std::vector<std::vector<float>> out;
    for (const auto &t : q)
        out.emplace_back(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    return out;
}

std::vector<float> Model::forward(const std::vector<int> &ids, KvCache &cache, bool allLogits) const
{
    return forward(ids, cache, allLogits, nullptr);
}

std::vector<float> Model::forward(const std::vector<int> &ids, KvCache &cache, bool allLogits,
                                  std::vector<std::vector<float>> *queries) const
{
    checkTokens("forward", ids, m_impl->config);
    auto &ci = m_impl->cacheOf(cache);
    JobScope scope(m_impl->options.threads, m_impl->cpuKernels);
    std::vector<torch::Tensor> q;
    auto logits = translateTorch("forward", [&] {
        return m_impl->run(ids, ci, allLogits, queries ? &q : nullptr).contiguous().cpu();
    });
    if (queries)
        *queries = queryVectors(q);
    return std::vector<float>(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
}

std::vector<std::vector<float>> Model::queries(const std::vector<int> &ids, KvCache &cache) const
{
    checkTokens("queries", ids, m_impl->config);
    auto &ci = m_impl->cacheOf(cache);
    JobScope scope(m_impl->options.threads, m_impl->cpuKernels);
    std::vector<torch::Tensor> q;
    translateTorch("forward", [&] { return m_impl->run(ids, ci, false, &q); });
    return queryVectors(q);
}

HeadMajorKv Model::tokenLocalKv(const std::vector<int> &ids) const
{
    checkTokens("tokenLocalKv", ids, m_impl->config);
    const Impl &d = *m_impl;
    JobScope scope(d.options.threads, d.cpuKernels);
    return translateTorch("token-local KV", [&] {
        c10::InferenceMode guard;
        const int64_t t = int64_t(ids.size()), nh = d.config.numHeads, nkv = d.config.numKvHeads,
                      hd = d.config.headDim;
        std::vector<int64_t> ids64(ids.begin(), ids.end());
        auto idx = torch::from_blob(ids64.data(), {t}, torch::kInt64).to(d.device);
        auto x = d.embedQ ? detail::quantRows(*d.embedQ, idx, d.dtype) : d.embed.index_select(0, idx);
        if (d.config.scaleEmbeddings)
            x = x * torch::scalar_tensor(std::sqrt(double(d.config.hiddenSize)), x.options());
        const Layer &L = d.layers.front();
        const auto qkv = d.project(d.rmsNorm(x, L.inputNorm), L.qkv);
        auto k = qkv.narrow(1, nh * hd, nkv * hd).view({t, nkv, hd}).transpose(0, 1);
        auto v = qkv.narrow(1, (nh + nkv) * hd, nkv * hd).view({t, nkv, hd}).transpose(0, 1);
        if (L.kNorm.defined())
            k = d.rmsNorm(k.contiguous(), L.kNorm);
        // rounded as the cache stores them, then widened
        const auto host = [&](const torch::Tensor &y) {
            auto c = y.to(d.kvDtype).to(torch::kFloat32).contiguous().cpu();
            return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
        };
        HeadMajorKv out;
        out.keys = host(k);
        out.values = host(v);
        return out;
    });
}

std::vector<float> Model::meanHiddenState(const std::vector<int> &ids, int layer) const
{
    if (ids.empty())
        throw Error(ErrorCode::InvalidArgument, "meanHiddenState: no tokens");
    if (layer < 0 || layer > m_impl->config.numLayers)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("hidden-state layer {} is outside 0..{}", layer, m_impl->config.numLayers));
    checkIds(ids, m_impl->config);
    auto cache = newCache();
    auto &ci = m_impl->cacheOf(cache);
    JobScope scope(m_impl->options.threads, m_impl->cpuKernels);
    torch::Tensor h;
    return translateTorch("hidden state", [&] {
        m_impl->run(ids, ci, false, nullptr, layer, &h);
        auto mean = h.mean(0).contiguous().cpu(); // [hidden]
        return std::vector<float>(mean.data_ptr<float>(), mean.data_ptr<float>() + mean.numel());
    });
}

std::vector<float> Model::lastHiddenState(const std::vector<int> &ids) const
{
    checkTokens("lastHiddenState", ids, m_impl->config);
    auto cache = newCache();
    auto &ci = m_impl->cacheOf(cache);
    JobScope scope(m_impl->options.threads, m_impl->cpuKernels);
    torch::Tensor h;
    return translateTorch("hidden state", [&] {
        m_impl->run(ids, ci, false, nullptr, m_impl->config.numLayers, &h);
        const auto last = m_impl->rmsNorm(h.narrow(0, h.size(0) - 1, 1).to(m_impl->dtype), m_impl->finalNorm)
                              .to(torch::kFloat32)
                              .contiguous()
                              .cpu(); // [1, hidden]
        return std::vector<float>(last.data_ptr<float>(), last.data_ptr<float>() + last.numel());
    });
}

int sampleToken(const float *logits, int vocab, const SamplingOptions &o, uint64_t step, float *logprob)
{
    // log-softmax of the unmodified distribution, for the reported logprob
    const float maxLogit = *std::max_element(logits, logits + vocab);
    const double logZ = core::logSumExp(logits, size_t(vocab));
    int chosen = 0;
    if (o.temperature <= 0.0) {
        chosen = int(std::max_element(logits, logits + vocab) - logits); // first max wins ties
    } else {
        std::vector<int> order(static_cast<size_t>(vocab));
        std::iota(order.begin(), order.end(), 0);
        size_t keep = static_cast<size_t>(vocab);
        if (o.topK > 0)
            keep = std::min(keep, static_cast<size_t>(o.topK));
        // ties broken by lower id, so results do not depend on the sort implementation
        auto better = [&](int a, int b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        };
        std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(keep), order.end(), better);
        std::vector<double> p(keep);
        double z = 0;
        for (size_t i = 0; i < keep; ++i) {
            p[i] = std::exp((double(logits[order[i]]) - maxLogit) / o.temperature);
            z += p[i];
        }
        if (o.topP < 1.0) { // smallest prefix whose mass reaches top_p (at least one token)
            double acc = 0;
            size_t n = 0;
            while (n < keep) {
                acc += p[n] / z;
                ++n;
                if (acc >= o.topP)
                    break;
            }
            keep = n;
            p.resize(keep);
        }
        // splitmix64 of (seed, step): each step's draw is reproducible on its own
        uint64_t s = o.seed + 0x9e3779b97f4a7c15ULL * (step + 1);
        s = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ULL;
        s = (s ^ (s >> 27)) * 0x94d049bb133111ebULL;
        s ^= s >> 31;
        std::mt19937_64 rng(s);
        std::discrete_distribution<size_t> dist(p.begin(), p.end());
        chosen = order[dist(rng)];
    }
    if (logprob)
        *logprob = float(double(logits[chosen]) - logZ);
    return chosen;
}

GenerateResult Model::generate(const std::vector<int> &prompt, const GenerateOptions &options,
                               const TokenFn &onToken, const std::atomic_bool *cancel) const
{
    KvCache cache = newCache();
    return generate(prompt, cache, options, onToken, cancel);
}

GenerateResult Model::generate(const std::vector<int> &prompt, KvCache &cache, const GenerateOptions &options,
                               const TokenFn &onToken, const std::atomic_bool *cancel) const
{
    const core::ModelConfig &c = m_impl->config;
    if (prompt.empty())
        throw Error(ErrorCode::InvalidArgument, "generate: the prompt has no tokens");
    const auto &so = options.sampling;
    if (!(so.temperature >= 0 && std::isfinite(so.temperature))) // NaN must not quietly mean greedy
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("generate: temperature is {}; expected a finite number >= 0", so.temperature));
    if (!(so.topP > 0 && so.topP <= 1))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("generate: top_p is {}; expected (0, 1]", so.topP));
    if (so.topK < 0)
        throw Error(ErrorCode::InvalidArgument, fmt::format("generate: top_k is {}; expected >= 0", so.topK));
    if (options.maxTokens < 0)
        throw Error(ErrorCode::InvalidArgument, "generate: max tokens must be >= 0");
    checkIds(prompt, c);
    auto &ci = m_impl->cacheOf(cache);
    const int limit = m_impl->context > 0 ? m_impl->context : std::numeric_limits<int>::max();
    if (int(prompt.size()) > limit)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("prompt has {} tokens; the model's context is {}{}", prompt.size(), limit,
                                c.ropeScaling.type == "longrope" && !c.ropeScaling.useLongFactor
                                    ? " (LongRoPE's original context: load it with a larger context to use "
                                      "its long factors)"
                                    : ""));
    JobScope scope(m_impl->options.threads, m_impl->cpuKernels);

    GenerateResult r;
    r.stats.promptTokens = int(prompt.size());
    // Reuse the longest common prefix of cache and prompt, keeping at least one token to compute.
    size_t common = 0;
    while (common < ci.ids.size() && common < prompt.size() && ci.ids[common] == prompt[common])
        ++common;
    common = std::min(common, prompt.size() - 1);
    cache.truncate(int(common));
    r.stats.reusedTokens = int(common);
    r.stats.prefillTokens = int(prompt.size() - common);

    // Reserve the whole run now: growing by doubling mid-decode would briefly hold 3x the cache.
    translateTorch("KV cache reserve", [&] {
        ci.reserve(std::min<int64_t>(limit, int64_t(prompt.size()) + options.maxTokens));
        return 0;
    });
    std::vector<int> stops = options.stopTokens;
    if (options.stopAtEos)
        stops.insert(stops.end(), c.eosTokenIds.begin(), c.eosTokenIds.end());

    const auto t0 = Clock::now();
    std::vector<int> rest(prompt.begin() + std::ptrdiff_t(common), prompt.end());
    auto logits = translateTorch("prefill", [&] { return m_impl->run(rest, ci, false).contiguous().cpu(); });
    r.stats.prefillMs = msSince(t0);
    r.stats.prefillTokPerS = r.stats.prefillMs > 0 ? r.stats.prefillTokens / (r.stats.prefillMs / 1000.0) : 0;
    if (options.maxTokens == 0) {
        r.stopReason = StopReason::MaxTokens;
        r.stats.ttftMs = r.stats.prefillMs;
        return r;
    }
    Clock::time_point tFirst;
    double callbackMs = 0; // time spent in onToken, excluded from decode throughput
    for (int step = 0;; ++step) {
        float lp = 0;
        const float *row = logits.data_ptr<float>();
        if (!std::all_of(row, row + c.vocabSize, [](float v) { return std::isfinite(v); }))
            throw Error(ErrorCode::Device,
                        m_impl->options.dtype == FloatType::F32
                            ? fmt::format("logits at generation step {} are not finite in f32: the model's "
                                          "weights hold NaN or Inf, or its activations overflow",
                                          step)
                            : fmt::format("logits at generation step {} are not finite (overflow in {}?); "
                                          "try f32 (--dtype f32 / --compute-dtype f32)",
                                          step, floatTypeName(m_impl->options.dtype)));
        const int next =
            sampleToken(logits.data_ptr<float>(), c.vocabSize, options.sampling, uint64_t(step), &lp);
        if (step == 0) {
            tFirst = Clock::now();
            r.stats.ttftMs = msSince(t0);
        }
        r.outputIds.push_back(next);
        r.logprobs.push_back(lp);
        const auto tCallback = Clock::now();
        const bool keepGoing = !onToken || onToken(next, lp);
        callbackMs += msSince(tCallback);
        if (!keepGoing || (cancel && cancel->load())) {
            r.stopReason = StopReason::Cancelled;
            break;
        }
        if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
            r.stopReason = StopReason::StopToken;
            break;
        }
        if (int(r.outputIds.size()) >= options.maxTokens) {
            r.stopReason = StopReason::MaxTokens;
            break;
        }
        if (ci.length >= limit) {
            r.stopReason = StopReason::ContextFull;
            break;
        }
        logits = translateTorch("decode", [&] { return m_impl->run({next}, ci, false).contiguous().cpu(); });
    }
    r.stats.generatedTokens = int(r.outputIds.size());
    r.stats.decodeMs = std::max(0.0, msSince(tFirst) - callbackMs);
    const int decoded = r.stats.generatedTokens - 1; // the first token came from the prefill
    r.stats.decodeTokPerS = decoded > 0 && r.stats.decodeMs > 0 ? decoded / (r.stats.decodeMs / 1000.0) : 0;
    return r;
}

torch::Tensor detail::ModelAccess::logitsAfter(const Model &model, std::vector<torch::Tensor> keys,
                                               const std::vector<torch::Tensor> &values, core::KeyForm form,
                                               const std::vector<int> &ids)
{
    const Model::Impl &d = *model.m_impl;
    checkIds(ids, d.config);
    JobScope scope(d.options.threads, false, /*inference=*/false); // torch's ops: torch's threads
    return translateTorch("B's forward for autograd", [&] {
        std::vector<torch::Tensor> vals(values.size());
        for (size_t l = 0; l < keys.size(); ++l) // the prefix where B runs (autograd carries it back)
            keys[l] = keys[l].to(d.device);
        for (size_t l = 0; l < values.size(); ++l)
            vals[l] = values[l].to(d.device);
        if (form == core::KeyForm::PreRope)
            for (size_t l = 0; l < keys.size() && l < d.layers.size(); ++l)
                if (keys[l].dim() == 3 && keys[l].size(1) > 0)
                    keys[l] = d.rope->apply(keys[l], int(l), 0, /*inverse=*/false);
        return d.gradRun(ids, keys, vals);
    });
}

void detail::ModelAccess::checkDense(const Model &model)
{
    model.m_impl->checkDense();
}

} // namespace kvwb::gpu
