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

// A long prompt runs through the layers this many tokens at a time (llama.cpp's ubatch), each
// chunk attending to the cache written so far: its activations, mask and scores are bounded by the
// chunk, not the prompt. gpu::LoadOptions::prefillChunk overrides it.
constexpr int kPrefillChunk = 2048;

// Attention of a prompt chunk runs in blocks of queries, each over the keys up to its last query:
// the largest block (at most 128, at least 16) whose f32 scores for queryHeads heads over `keys`
// keys stay within 64 MiB ([16 heads, 128, 8,192 keys] is exactly that). A chunk of at most twice
// the block runs as one block.
int64_t attentionQueryBlock(int64_t queryHeads, int64_t keys);

// bytesPerElement: 4 for f32, 2 for bf16/f16; kvBytesPerElement the KV cache's (0 = the same).
// The activations are those of one prefill chunk (kPrefillChunk or prefillChunk tokens) over
// contextTokens keys.
MemoryEstimate estimateMemory(const ModelConfig &config, int bytesPerElement, int contextTokens,
                              int kvBytesPerElement = 0, int prefillChunk = kPrefillChunk);

// Bytes one request of `tokens` positions holds while it runs on a loaded model: its KV cache at
// kvBytesPerElement (0 = bytesPerElement), one host f32 copy of it (what capture writes and the
// converters read) and one prefill chunk's activations. What capture, compare and replay check
// against the memory the machine has left before they start (core::checkWorkingSet).
int64_t requestWorkingSetBytes(const ModelConfig &config, int bytesPerElement, int kvBytesPerElement,
                               int tokens, int prefillChunk = kPrefillChunk);

// Bytes a checkpoint's weights take once loaded: block-quantised matrices (GGUF Q4_0 ... Q6_K) as
// stored when keepQuantized (the CPU engine runs them in their blocks), every other tensor at
// bytesPerElement.
int64_t heldWeightBytes(const Checkpoint &checkpoint, int bytesPerElement, bool keepQuantized);
// estimateMemory with the checkpoint's held weight bytes in place of parameters * bytesPerElement.
MemoryEstimate estimateMemory(const Checkpoint &checkpoint, int bytesPerElement, int contextTokens,
                              bool keepQuantized, int kvBytesPerElement = 0);

} // namespace kvwb::core
