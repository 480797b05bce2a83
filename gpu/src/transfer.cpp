#include "gpu/transfer.h"

#include "core/error.h"
#include "gpu/src/clock_p.h"

#include <fmt/format.h>

#include <chrono>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;

namespace {
using detail::Clock;
using detail::msSince;
} // namespace

std::vector<LayerKv> convertCache(const ConverterSet &conv, const KvCache &source, const Model &target)
{
    const auto &cb = target.config();
    if (int(conv.layers.size()) != cb.numLayers)
        throw Error(ErrorCode::Shape, fmt::format("converter set has {} layer maps; model B has {} layers",
                                                  conv.layers.size(), cb.numLayers));
    const int tokens = source.tokens();
    const int widthA = source.numKvHeads() * source.headDim();
    const int widthB = cb.numKvHeads * cb.headDim;
    const KeyForm form = conv.keyForm == core::KeyForm::PreRope ? KeyForm::PreRope : KeyForm::PostRope;
    // A's rows of every layer once, token-major [tokens, widthA]
    std::vector<LayerKv> rowsA;
    for (int l = 0; l < source.numLayers(); ++l)
        rowsA.push_back(source.layerTokenMajor(l, form));
    std::vector<LayerKv> out(size_t(cb.numLayers));
    for (int l = 0; l < cb.numLayers; ++l) {
        const LayerMap &m = conv.layers[size_t(l)];
        const int inputDim = widthA * int(m.sourceLayers.size());
        for (const RidgeSolution *s : {&m.keys, &m.values})
            if (s->inputDim != inputDim || s->outputDim != widthB)
                throw Error(
                    ErrorCode::Shape,
                    fmt::format("layer {} map is [{} -> {}], but A's {} source layer(s) give {} features "
                                "and B's layer takes {}",
                                l, s->inputDim, s->outputDim, m.sourceLayers.size(), inputDim, widthB));
        for (int kv = 0; kv < 2; ++kv) {
            std::vector<float> x(size_t(tokens) * size_t(inputDim));
            for (size_t li = 0; li < m.sourceLayers.size(); ++li) {
                const int src = m.sourceLayers[li];
                if (src < 0 || src >= source.numLayers())
                    throw Error(ErrorCode::Shape, fmt::format("layer {} map reads A layer {}; A has {}", l,
                                                              src, source.numLayers()));
                const auto &rows = kv == 0 ? rowsA[size_t(src)].keys : rowsA[size_t(src)].values;
                for (int t = 0; t < tokens; ++t)
                    std::copy_n(rows.data() + size_t(t) * size_t(widthA), size_t(widthA),
                                x.data() + size_t(t) * size_t(inputDim) + li * size_t(widthA));
            }
            const auto y = (kv == 0 ? m.keys : m.values).apply(x.data(), tokens); // [tokens, kvHeadsB, hdB]
            // token-major -> head-major [kvHeadsB, tokens, hdB]
            std::vector<float> head(y.size());
            for (int t = 0; t < tokens; ++t)
                for (int h = 0; h < cb.numKvHeads; ++h)
                    std::copy_n(y.data() +
                                    (size_t(t) * size_t(cb.numKvHeads) + size_t(h)) * size_t(cb.headDim),
                                size_t(cb.headDim),
                                head.data() + (size_t(h) * size_t(tokens) + size_t(t)) * size_t(cb.headDim));
            (kv == 0 ? out[size_t(l)].keys : out[size_t(l)].values) = std::move(head);
        }
    }
    return out;
}

TransferResult transferGenerate(const Model &source, const Model &target, const ConverterSet &conv,
                                const std::vector<int> &prompt, const GenerateOptions &options)
{
    if (prompt.size() < 2)
        throw Error(ErrorCode::InvalidArgument, "transfer needs a prompt of at least 2 tokens");
    TransferResult r;
    const std::vector<int> prefix(prompt.begin(), prompt.end() - 1);
    auto cacheA = source.newCache();
    const auto t0 = Clock::now();
    source.forward(prefix, cacheA);
    r.sourcePrefillMs = msSince(t0);
    const auto t1 = Clock::now();
    auto cacheB = target.newCache();
    cacheB.assign(prefix, convertCache(conv, cacheA, target),
                  conv.keyForm == core::KeyForm::PreRope ? KeyForm::PreRope : KeyForm::PostRope);
    r.convertMs = msSince(t1);
    r.generation = target.generate(prompt, cacheB, options);
    return r;
}

} // namespace kvwb::gpu
