// Private to gpu/: RoPE tables and rotation for both layouts. Includes torch.
#pragma once

#include "core/model/model_config.h"

#include <torch/torch.h>

#include <mutex>

namespace kvwb::gpu::detail {

// cos/sin tables [positions, headDim/2] float32 on the model's device, grown on demand, one set per
// distinct RoPE in the model (one, or two for Gemma 3: its sliding layers' local base and its
// global layers' scaled one); each layer rotates with its own set. LongRoPE's attention factor
// scales both tables (and the inverse undoes it).
class RopeTables
{
public:
    RopeTables(const core::ModelConfig &config, torch::Device device);
    // Rotates x [heads, tokens, headDim] of layer `layer` whose tokens sit at positions
    // start..start+tokens-1. inverse = true undoes the rotation. Computes in float32 and returns x's
    // dtype.
    torch::Tensor apply(const torch::Tensor &x, int layer, int64_t start, bool inverse);
    core::RopeLayout layout() const { return m_layout; }

private:
    struct Set
    {
        std::vector<float> invFreq; // [headDim/2], float32 like HF's inv_freq buffer
        torch::Tensor cos;          // [capacity, headDim/2] f32
        torch::Tensor sin;          // [capacity, headDim/2] f32
        int64_t capacity = 0;
    };
    // Grows set `set`'s tables to cover `positions` and returns [positions, headDim/2] views of
    // them. The tables are shared by a model and all its caches (and their forks), so growth is
    // locked; the returned views keep their storage alive even if a later call reallocates.
    std::pair<torch::Tensor, torch::Tensor> tables(size_t set, int64_t start, int64_t count);
    std::mutex m_mutex;
    core::RopeLayout m_layout;
    torch::Device m_device;
    float m_scale = 1.0f; // multiplies cos and sin (ModelConfig::ropeAttentionFactor)
    std::vector<Set> m_sets;
    std::vector<size_t> m_setOfLayer; // [layers] index into m_sets
};

} // namespace kvwb::gpu::detail
