// Private to gpu/: the torch-side state of a KvCache. Includes torch.
#pragma once

#include "gpu/model/kv_cache.h"
#include "gpu/src/model/rope_p.h"

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace kvwb::gpu {

struct KvCache::Impl
{
    int numLayers = 0;
    int numKvHeads = 0;
    int headDim = 0;
    torch::Device device = torch::kCPU;
    torch::Dtype dtype = torch::kFloat32;
    std::shared_ptr<detail::RopeTables> rope;
    // Per layer, preallocated and grown by doubling so decode does not copy the cache each step.
    std::vector<torch::Tensor> keys;   // [layers] x [kvHeads, capacity, headDim], post-RoPE
    std::vector<torch::Tensor> values; // [layers] x [kvHeads, capacity, headDim]
    int64_t capacity = 0;              // positions allocated
    int64_t maxPositions = 0;          // growth stops here (the model's context; 0 = unbounded)
    int length = 0;                    // positions filled
    std::vector<int> ids;              // [length]
    // A paired source cache (gpu/transfer/cross_tokenizer.h pairedSourceCache): the A token whose
    // row each position holds, [length]; empty: position t holds token t. Read by token-feature
    // converters (which positions share an A token); nothing else keeps it up to date.
    std::vector<int32_t> sourceIndex;

    void reserve(int64_t positions);
    // Appends k, v [kvHeads, t, headDim] for one layer at positions length..length+t-1 (the caller
    // advances `length` once all layers are written).
    void write(int layer, const torch::Tensor &k, const torch::Tensor &v);
    torch::Tensor keysUpTo(int layer, int64_t n) const { return keys[size_t(layer)].narrow(1, 0, n); }
    torch::Tensor valuesUpTo(int layer, int64_t n) const { return values[size_t(layer)].narrow(1, 0, n); }
};

} // namespace kvwb::gpu
