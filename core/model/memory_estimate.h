// Memory a model will need before it is loaded: weights at the chosen dtype plus the KV cache for a
// context length. Pure function of the configuration; thread-safe.
#pragma once

#include "core/model/checkpoint.h"
#include "core/model/model_config.h"

#include <cstdint>

namespace kvwb::core {

struct MemoryEstimate
{
    int64_t weightBytes = 0;     // parameters * bytes per element
    int64_t kvBytes = 0;         // K and V for contextTokens tokens, all layers
    int64_t activationBytes = 0; // largest transient buffers of one forward at contextTokens
    int64_t totalBytes() const { return weightBytes + kvBytes + activationBytes; }
};

// bytesPerElement: 4 for f32, 2 for bf16/f16.
MemoryEstimate estimateMemory(const ModelConfig &config, int bytesPerElement, int contextTokens);

// Bytes a checkpoint's weights take once loaded: block-quantised matrices (GGUF Q4_0 ... Q6_K) as
// stored when keepQuantized (the CPU engine runs them in their blocks), every other tensor at
// bytesPerElement.
int64_t heldWeightBytes(const Checkpoint &checkpoint, int bytesPerElement, bool keepQuantized);
// estimateMemory with the checkpoint's held weight bytes in place of parameters * bytesPerElement.
MemoryEstimate estimateMemory(const Checkpoint &checkpoint, int bytesPerElement, int contextTokens,
                              bool keepQuantized);

} // namespace kvwb::core
