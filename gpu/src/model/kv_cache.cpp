#include "gpu/model/kv_cache.h"

#include "core/util/error.h"
#include "gpu/src/model/cpu_kernels_p.h"
#include "gpu/src/model/kv_cache_p.h"
#include "gpu/src/model/model_p.h"
#include "gpu/src/torch_error_p.h"

#include <fmt/format.h>

#include <cmath>

namespace kvwb::gpu {

namespace detail {

RopeTables::RopeTables(const core::ModelConfig &config, torch::Device device)
    : m_layout(config.ropeLayout), m_device(device), m_scale(float(config.ropeAttentionFactor()))
{
    for (int l = 0; l < config.numLayers; ++l) {
        std::vector<float> inv;
        for (double f : config.ropeInvFreq(l))
            inv.push_back(float(f));
        size_t set = 0;
        while (set < m_sets.size() && m_sets[set].invFreq != inv)
            ++set;
        if (set == m_sets.size())
            m_sets.push_back(Set{std::move(inv), {}, {}, 0});
        m_setOfLayer.push_back(set);
    }
}

std::pair<torch::Tensor, torch::Tensor> RopeTables::tables(size_t set, int64_t start, int64_t count)
{
    std::lock_guard lock(m_mutex);
    Set &s = m_sets[set];
    const int64_t positions = start + count;
    if (positions <= s.capacity)
        return {s.cos.narrow(0, start, count), s.sin.narrow(0, start, count)};
    int64_t cap = std::max<int64_t>(positions, std::max<int64_t>(256, s.capacity * 2));
    const int64_t half = int64_t(s.invFreq.size());
    std::vector<float> c(size_t(cap * half)), sn(size_t(cap * half));
    for (int64_t p = 0; p < cap; ++p) {
        for (int64_t i = 0; i < half; ++i) {
            // float32 product, like HF's inv_freq @ position_ids and llama2.c's pos * freq
            const float angle = float(p) * s.invFreq[size_t(i)];
            // LongRoPE multiplies both by its attention factor (HF's cos * attention_scaling)
            c[size_t(p * half + i)] = std::cos(angle) * m_scale;
            sn[size_t(p * half + i)] = std::sin(angle) * m_scale;
        }
    }
    s.cos = torch::from_blob(c.data(), {cap, half}, torch::kFloat32).clone().to(m_device);
    s.sin = torch::from_blob(sn.data(), {cap, half}, torch::kFloat32).clone().to(m_device);
    s.capacity = cap;
    return {s.cos.narrow(0, start, count), s.sin.narrow(0, start, count)};
}

torch::Tensor RopeTables::apply(const torch::Tensor &x, int layer, int64_t start, bool inverse)
{
    if (layer < 0 || size_t(layer) >= m_setOfLayer.size())
        throw core::Error(
            core::ErrorCode::InvalidArgument,
            fmt::format("RoPE of layer {}: the model has {} layers", layer, m_setOfLayer.size()));
    const int64_t t = x.size(1);
    auto [cos, sinTable] = tables(m_setOfLayer[size_t(layer)], start, t); // [t, half] each
    if (inverse && m_scale != 1.0f) {
        // (s R)^-1 = R^T / s: the transposed rotation of the s-scaled tables, divided by s twice
        const float undo = 1.0f / (m_scale * m_scale);
        cos = (cos * undo).contiguous();
        sinTable = (sinTable * undo).contiguous();
    }
    if (detail::cpuKernelFits(x) && x.dim() == 3 && !x.requires_grad()) // (autograd: torch's ops)
        return ropeCpu(x, cos, sinTable, m_layout == core::RopeLayout::RotateHalf, inverse);
    if (x.requires_grad()) { // autograd saves the tables
        cos = detail::savable(cos);
        sinTable = detail::savable(sinTable);
    }
    const auto sin = inverse ? -sinTable : sinTable;
    const auto xf = x.to(torch::kFloat32);
    const int64_t d = x.size(2), half = d / 2;
    torch::Tensor out;
    if (m_layout == core::RopeLayout::RotateHalf) {
        const auto x1 = xf.narrow(2, 0, half), x2 = xf.narrow(2, half, half);
        out = torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, 2);
    } else {
        const auto pairs = xf.view({x.size(0), t, half, 2});
        const auto a = pairs.select(3, 0), b = pairs.select(3, 1);
        out = torch::stack({a * cos - b * sin, a * sin + b * cos}, 3).view({x.size(0), t, d});
    }
    return out.to(x.scalar_type());
}

} // namespace detail

void KvCache::Impl::reserve(int64_t positions)
{
    if (positions <= capacity)
        return;
    int64_t cap = std::max<int64_t>(positions, std::max<int64_t>(64, capacity * 2));
    if (maxPositions > 0)
        cap = std::max(positions, std::min(cap, maxPositions)); // never allocate past the context
    const auto opts = torch::TensorOptions().dtype(dtype).device(device);
    for (int l = 0; l < numLayers; ++l) {
        auto k = torch::empty({numKvHeads, cap, headDim}, opts);
        auto v = torch::empty({numKvHeads, cap, headDim}, opts);
        if (length > 0) {
            k.narrow(1, 0, length).copy_(keys[size_t(l)].narrow(1, 0, length));
            v.narrow(1, 0, length).copy_(values[size_t(l)].narrow(1, 0, length));
        }
        keys[size_t(l)] = k;
        values[size_t(l)] = v;
    }
    capacity = cap;
}

void KvCache::Impl::write(int layer, const torch::Tensor &k, const torch::Tensor &v)
{
    const int64_t t = k.size(1);
    reserve(length + t);
    keys[size_t(layer)].narrow(1, length, t).copy_(k);
    values[size_t(layer)].narrow(1, length, t).copy_(v);
}

KvCache::KvCache() = default;
KvCache::~KvCache() = default;
KvCache::KvCache(KvCache &&) noexcept = default;
KvCache &KvCache::operator=(KvCache &&) noexcept = default;
KvCache::KvCache(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

namespace {
const KvCache::Impl &need(const KvCache::Impl *impl)
{
    if (!impl)
        throw core::Error(core::ErrorCode::InvalidArgument,
                          "KV cache is empty: create it with Model::newCache()");
    return *impl;
}
} // namespace

bool KvCache::isValid() const
{
    return m_impl != nullptr;
}
int KvCache::numLayers() const
{
    return need(m_impl.get()).numLayers;
}
int KvCache::numKvHeads() const
{
    return need(m_impl.get()).numKvHeads;
}
int KvCache::headDim() const
{
    return need(m_impl.get()).headDim;
}
int KvCache::tokens() const
{
    return m_impl ? m_impl->length : 0;
}

const std::vector<int> &KvCache::tokenIds() const
{
    static const std::vector<int> none;
    return m_impl ? m_impl->ids : none;
}

int64_t KvCache::bytes() const
{
    if (!m_impl)
        return 0;
    const auto &d = *m_impl;
    return 2LL * d.numLayers * d.numKvHeads * d.headDim * d.length * int64_t(torch::elementSize(d.dtype));
}

HeadMajorKv KvCache::layer(int layer, KeyForm form) const
{
    auto [k, v] = read(layer, form, false);
    return HeadMajorKv{std::move(k), std::move(v)};
}
TokenMajorKv KvCache::layerTokenMajor(int layer, KeyForm form) const
{
    auto [k, v] = read(layer, form, true);
    return TokenMajorKv{std::move(k), std::move(v)};
}

std::pair<std::vector<float>, std::vector<float>> KvCache::read(int layer, KeyForm form,
                                                                bool tokenMajor) const
{
    const auto &d = need(m_impl.get());
    if (layer < 0 || layer >= d.numLayers)
        throw core::Error(
            core::ErrorCode::InvalidArgument,
            fmt::format("KV cache layer {} out of range (model has {} layers)", layer, d.numLayers));
    std::pair<std::vector<float>, std::vector<float>> out; // keys, values
    if (d.length == 0)
        return out; // nothing stored yet (storage may not even be allocated)
    return detail::translateTorch("KV cache read", [&] {
        c10::InferenceMode guard;
        // f32 before un-rotating: a bf16 cache is rounded once, not twice
        auto k = d.keysUpTo(layer, d.length).to(torch::kFloat32);
        if (form == KeyForm::PreRope)
            k = d.rope->apply(k, layer, 0, /*inverse=*/true);
        auto v = d.valuesUpTo(layer, d.length);
        if (tokenMajor) { // [kvHeads, tokens, headDim] -> [tokens, kvHeads, headDim]
            k = k.transpose(0, 1);
            v = v.transpose(0, 1);
        }
        auto kf = k.to(torch::kCPU).contiguous();
        auto vf = v.to(torch::kCPU, torch::kFloat32).contiguous();
        out.first.assign(kf.data_ptr<float>(), kf.data_ptr<float>() + kf.numel());
        out.second.assign(vf.data_ptr<float>(), vf.data_ptr<float>() + vf.numel());
        return out;
    });
}

void KvCache::assign(const std::vector<int> &tokenIds, const std::vector<HeadMajorKv> &layers, KeyForm form)
{
    auto &d = const_cast<Impl &>(need(m_impl.get()));
    if (int(layers.size()) != d.numLayers)
        throw core::Error(core::ErrorCode::Shape, fmt::format("KV assign: {} layers given, cache has {}",
                                                              layers.size(), d.numLayers));
    const int64_t n = int64_t(tokenIds.size());
    const size_t expected = size_t(d.numKvHeads) * size_t(n) * size_t(d.headDim);
    for (size_t l = 0; l < layers.size(); ++l) {
        if (layers[l].keys.size() != expected)
            throw core::Error(
                core::ErrorCode::Shape,
                fmt::format("KV assign: layer {} keys hold {} floats, expected [{}, {}, {}] = {}", l,
                            layers[l].keys.size(), d.numKvHeads, n, d.headDim, expected));
        if (layers[l].values.size() != expected)
            throw core::Error(
                core::ErrorCode::Shape,
                fmt::format("KV assign: layer {} values hold {} floats, expected [{}, {}, {}] = {}", l,
                            layers[l].values.size(), d.numKvHeads, n, d.headDim, expected));
    }
    d.length = 0;
    d.ids.clear();
    d.sourceIndex.clear();
    if (n == 0)
        return;
    detail::translateTorch("KV cache write", [&] {
        c10::InferenceMode guard;
        d.reserve(n);
        for (size_t l = 0; l < layers.size(); ++l) {
            auto k = torch::from_blob(const_cast<float *>(layers[l].keys.data()),
                                      {d.numKvHeads, n, d.headDim}, torch::kFloat32)
                         .to(d.device);
            auto v = torch::from_blob(const_cast<float *>(layers[l].values.data()),
                                      {d.numKvHeads, n, d.headDim}, torch::kFloat32)
                         .to(d.device);
            if (form == KeyForm::PreRope && n > 0)
                k = d.rope->apply(k, int(l), 0, /*inverse=*/false);
            d.write(int(l), k.to(d.dtype), v.to(d.dtype));
        }
    });
    d.length = int(n);
    d.ids = tokenIds;
}

void KvCache::truncate(int n)
{
    auto &d = const_cast<Impl &>(need(m_impl.get()));
    if (n < 0 || n > d.length)
        throw core::Error(core::ErrorCode::InvalidArgument,
                          fmt::format("KV truncate to {} tokens: cache holds {}", n, d.length));
    d.length = n;
    d.ids.resize(size_t(n));
    if (d.sourceIndex.size() > size_t(n))
        d.sourceIndex.resize(size_t(n));
}

KvCache KvCache::fork() const
{
    const auto &d = need(m_impl.get());
    return detail::translateTorch("KV cache fork", [&] {
        c10::InferenceMode guard;
        auto copy = std::make_unique<Impl>();
        copy->numLayers = d.numLayers;
        copy->numKvHeads = d.numKvHeads;
        copy->headDim = d.headDim;
        copy->device = d.device;
        copy->dtype = d.dtype;
        copy->rope = d.rope;
        copy->maxPositions = d.maxPositions;
        copy->keys.resize(size_t(d.numLayers));
        copy->values.resize(size_t(d.numLayers));
        copy->reserve(std::max(d.length, 1));
        for (int l = 0; l < d.numLayers; ++l) {
            if (d.length > 0) {
                copy->keys[size_t(l)].narrow(1, 0, d.length).copy_(d.keysUpTo(l, d.length));
                copy->values[size_t(l)].narrow(1, 0, d.length).copy_(d.valuesUpTo(l, d.length));
            }
        }
        copy->length = d.length;
        copy->ids = d.ids;
        copy->sourceIndex = d.sourceIndex;
        return KvCache(std::move(copy));
    });
}

} // namespace kvwb::gpu
