// The BERT encoder's forward as plain torch ops, shared by inference (encoder.cpp) and by the demo
// embedder's contrastive training (gpu/src/train/embedder_trainer.cpp), which needs its gradients.
#pragma once

#include "core/model/encoder_config.h"

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace kvwb::gpu::detail {

struct EncoderLayerWeights
{
    torch::Tensor qW, qB, kW, kB, vW, vB, oW, oB, ln1W, ln1B, upW, upB, downW, downB, ln2W, ln2B;
};

struct EncoderWeights
{
    torch::Tensor word, position, type, lnW, lnB;
    std::vector<EncoderLayerWeights> layers;

    // Every tensor under its Hugging Face name (EncoderCheckpoint::requiredTensors order).
    std::vector<std::pair<std::string, torch::Tensor *>> named();
};

// ids [B, T] int64, mask [B, T] bool (true: a real token). Returns the last layer's states [B, T, H].
torch::Tensor encoderHidden(const EncoderWeights &w, const core::EncoderConfig &c, const torch::Tensor &ids,
                            const torch::Tensor &mask);
// [B, H] pooled over the tokens mask keeps.
torch::Tensor poolHidden(const torch::Tensor &hidden, const torch::Tensor &mask, core::Pooling pooling);

} // namespace kvwb::gpu::detail
