#include "core/model/memory_estimate.h"

#include <algorithm>

namespace kvwb::core {

int64_t attentionQueryBlock(int64_t queryHeads, int64_t keys)
{
    constexpr int64_t kBudget = int64_t(64) << 20; // bytes of f32 scores per block
    const int64_t fit = kBudget / (4 * std::max<int64_t>(1, queryHeads) * std::max<int64_t>(1, keys));
    return std::clamp<int64_t>(fit, 16, 128);
}

MemoryEstimate estimateMemory(const ModelConfig &config, int bytesPerElement, int contextTokens,
                              int kvBytesPerElement, int prefillChunk)
{
    MemoryEstimate e;
    e.weightBytes = config.parameterCount() * bytesPerElement;
    e.kvBytes = config.kvBytesPerToken(kvBytesPerElement > 0 ? kvBytesPerElement : bytesPerElement) *
                int64_t(contextTokens);
    // One prefill chunk of c tokens over T keys holds, at its peak, the residual stream and q|k|v
    // [c, hidden] (x4), the MLP intermediate [c, intermediate] (x3: gate, up, product), one layer's
    // keys and values widened to the compute dtype [T, kv] (a cache of another type), one query
    // block's scores and
    // probabilities [heads, block, T] in f32, the causal mask [c, T] (bool) and the logits
    // [1, vocab] in f32.
    const int64_t t = contextTokens;
    const int64_t c = std::min<int64_t>(t, prefillChunk > 0 ? prefillChunk : kPrefillChunk);
    const int64_t heads = config.numHeads;
    const int64_t mlp = 3 * c * config.intermediateSize * bytesPerElement;
    const int64_t queryBlock = attentionQueryBlock(heads, t); // as the engine blocks a chunk
    const int64_t block = c > 2 * queryBlock ? queryBlock : c;
    const int64_t scores = 2 * heads * block * t * 4;
    // a cache of another type is read widened, one layer at a time; one of the compute type is read in place
    const bool widened = kvBytesPerElement > 0 && kvBytesPerElement != bytesPerElement;
    const int64_t keys = widened ? 2 * t * int64_t(config.numKvHeads) * config.headDim * bytesPerElement : 0;
    const int64_t stream = 4 * c * config.hiddenSize * bytesPerElement;
    e.activationBytes = mlp + scores + keys + stream + c * t + int64_t(config.vocabSize) * 4;
    return e;
}

int64_t requestWorkingSetBytes(const ModelConfig &config, int bytesPerElement, int kvBytesPerElement,
                               int tokens, int prefillChunk)
{
    const auto e = estimateMemory(config, bytesPerElement, tokens, kvBytesPerElement, prefillChunk);
    return e.kvBytes + config.kvBytesPerToken(4) * int64_t(tokens) + e.activationBytes;
}

int64_t heldWeightBytes(const Checkpoint &checkpoint, int bytesPerElement, bool keepQuantized)
{
    int64_t total = 0;
    for (const auto &name : checkpoint.tensorNames()) {
        const TensorRef ref = checkpoint.require(name, {});
        total += keepQuantized && isBlockQuantized(ref.info->dtype) ? int64_t(ref.info->bytes)
                                                                    : ref.info->numel() * bytesPerElement;
    }
    return total;
}

MemoryEstimate estimateMemory(const Checkpoint &checkpoint, int bytesPerElement, int contextTokens,
                              bool keepQuantized, int kvBytesPerElement)
{
    MemoryEstimate e = estimateMemory(checkpoint.config(), bytesPerElement, contextTokens, kvBytesPerElement);
    e.weightBytes = heldWeightBytes(checkpoint, bytesPerElement, keepQuantized);
    return e;
}

} // namespace kvwb::core
