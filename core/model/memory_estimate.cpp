#include "core/model/memory_estimate.h"

#include <algorithm>

namespace kvwb::core {

MemoryEstimate estimateMemory(const ModelConfig &config, int bytesPerElement, int contextTokens)
{
    MemoryEstimate e;
    e.weightBytes = config.parameterCount() * bytesPerElement;
    e.kvBytes = config.kvBytesPerToken(bytesPerElement) * int64_t(contextTokens);
    // One prefill of T tokens holds, at its peak, the residual stream and the MLP intermediate
    // [T, intermediate] (x3: gate, up, product), attention scores [heads, T, T] in f32, and logits
    // [1, vocab] in f32.
    const int64_t t = contextTokens;
    const int64_t mlp = 3 * t * config.intermediateSize * bytesPerElement;
    const int64_t scores = int64_t(config.numHeads) * t * t * 4;
    const int64_t stream = 4 * t * config.hiddenSize * bytesPerElement;
    e.activationBytes = mlp + scores + stream + int64_t(config.vocabSize) * 4;
    return e;
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
                              bool keepQuantized)
{
    MemoryEstimate e = estimateMemory(checkpoint.config(), bytesPerElement, contextTokens);
    e.weightBytes = heldWeightBytes(checkpoint, bytesPerElement, keepQuantized);
    return e;
}

} // namespace kvwb::core
