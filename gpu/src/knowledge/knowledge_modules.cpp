// Knowledge modules through the public model and cache calls only (no tensors here): the module's
// rows are spliced on the host and assigned back, which the cache re-rotates.
#include "gpu/knowledge/knowledge_modules.h"

#include "core/util/clock.h"
#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;

core::KnowledgeModule computeModule(const Model &b, const std::vector<int> &prefixIds,
                                    const std::vector<int> &textIds, const std::string &nodeId, int64_t nowMs)
{
    if (textIds.empty())
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("concept '{}': the knowledge text has no tokens", nodeId));
    const size_t total = prefixIds.size() + textIds.size();
    if (total > size_t(b.contextLimit()))
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("concept '{}': {} prefix + {} knowledge tokens exceed the model's {} positions",
                        nodeId, prefixIds.size(), textIds.size(), b.contextLimit()));
    std::vector<int> ids = prefixIds;
    ids.insert(ids.end(), textIds.begin(), textIds.end());
    KvCache cache = b.newCache();
    const auto t0 = core::Clock::now();
    b.forward(ids, cache);
    core::KnowledgeModule m;
    m.computeMs = core::msSince(t0);
    m.nodeId = nodeId;
    m.ids = textIds;
    m.builtMs = nowMs;
    const size_t P = prefixIds.size(), n = textIds.size(), T = total;
    const size_t H = size_t(cache.numKvHeads()), D = size_t(cache.headDim());
    for (int l = 0; l < cache.numLayers(); ++l) {
        const HeadMajorKv all = cache.layer(l, core::KeyForm::PreRope); // [H, T, D]
        HeadMajorKv out;
        out.keys.resize(H * n * D);
        out.values.resize(H * n * D);
        for (size_t h = 0; h < H; ++h) {
            std::copy_n(all.keys.data() + (h * T + P) * D, n * D, out.keys.data() + h * n * D);
            std::copy_n(all.values.data() + (h * T + P) * D, n * D, out.values.data() + h * n * D);
        }
        m.layers.push_back(std::move(out));
    }
    return m;
}

double placeModule(const Model &b, KvCache &cache, const core::KnowledgeModule &m, int boundary)
{
    const auto &c = b.config();
    const size_t n = m.ids.size();
    if (int(m.layers.size()) != c.numLayers || cache.numKvHeads() != c.numKvHeads)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("the module of '{}' has {} layers; the model has {}", m.nodeId,
                                m.layers.size(), c.numLayers));
    const size_t H = size_t(cache.numKvHeads()), D = size_t(cache.headDim());
    for (const auto &l : m.layers)
        if (l.keys.size() != H * n * D || l.values.size() != H * n * D)
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format(
                    "the module of '{}' is not of this model's geometry ({} kv heads x {} tokens x {})",
                    m.nodeId, H, n, D));
    if (boundary < 0 || size_t(boundary) > n)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("boundary recomputation of {} tokens: the module of '{}' has {}", boundary,
                                m.nodeId, n));
    const size_t P = size_t(cache.tokens()), T = P + n;
    if (T > size_t(b.contextLimit()))
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format(
                "placing the module of '{}' ({} tokens) after {} would exceed the model's {} positions",
                m.nodeId, n, P, b.contextLimit()));
    std::vector<HeadMajorKv> layers;
    for (int l = 0; l < c.numLayers; ++l) {
        const HeadMajorKv own = cache.layer(l, core::KeyForm::PreRope); // [H, P, D]
        const HeadMajorKv &mod = m.layers[size_t(l)];
        HeadMajorKv joined;
        joined.keys.resize(H * T * D);
        joined.values.resize(H * T * D);
        for (size_t h = 0; h < H; ++h) {
            std::copy_n(own.keys.data() + h * P * D, P * D, joined.keys.data() + h * T * D);
            std::copy_n(own.values.data() + h * P * D, P * D, joined.values.data() + h * T * D);
            std::copy_n(mod.keys.data() + h * n * D, n * D, joined.keys.data() + (h * T + P) * D);
            std::copy_n(mod.values.data() + h * n * D, n * D, joined.values.data() + (h * T + P) * D);
        }
        layers.push_back(std::move(joined));
    }
    std::vector<int> ids = cache.tokenIds();
    ids.insert(ids.end(), m.ids.begin(), m.ids.end());
    cache.assign(ids, layers, core::KeyForm::PreRope);
    if (boundary == 0)
        return 0;
    cache.truncate(int(T) - boundary);
    const auto t0 = core::Clock::now();
    b.forward(std::vector<int>(m.ids.end() - boundary, m.ids.end()), cache);
    return core::msSince(t0);
}

} // namespace kvwb::gpu
