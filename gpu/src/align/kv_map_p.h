// Private to gpu/: the one evaluation of converter maps (core::KvMap, every family) that scoring
// (gpu::applyKvMap, gpu::convertRows), the transfer's Converter and the MLP trainer share, so a
// converter scores exactly as it converts. Maps of one list (one per B kv head when head-matched)
// are stacked and evaluated as one batch.
//
// Thread-safety: plain tensors; used by one thread at a time, like the models they serve.
#pragma once

#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"

#include <torch/torch.h>

#include <vector>

namespace kvwb::gpu::detail {

// A list of maps stacked along a leading maps axis, f32 on one device. Which parts are defined
// follows the family (core/store/converter_store.h KvMap).
struct MapTensors
{
    torch::Tensor weight;     // [maps, in, out]; undefined for low-rank
    torch::Tensor bias;       // [maps, 1, out]
    torch::Tensor down, up;   // [maps, in, rank], [maps, rank, out]; low-rank only
    torch::Tensor w1, b1, w2; // [maps, in, hidden], [maps, 1, hidden], [maps, hidden, out]; MLP only
    int64_t inputDim = 0, outputDim = 0;
};

// Copies maps (one shape and family, checked: Error(Shape) naming `what`) to device.
MapTensors stackMaps(const std::vector<core::KvMap> &maps, const torch::Device &device,
                     const std::string &what);

// y [maps, n, out] for x [maps, n, in] (f32, on the maps' device).
torch::Tensor applyMaps(const MapTensors &m, const torch::Tensor &x);

// The maps back as values (f32 on the host): what the MLP trainer returns after training.
std::vector<core::KvMap> unstackMaps(const MapTensors &m, const std::vector<core::KvMap> &like);

// What gpu::convertRows feeds the maps of one kind of a layer (its arguments, checked the same way,
// Error(Shape) or Error(InvalidArgument) naming the layer): x [maps, tokens, in] f32 on the CPU, a
// copy: [1, tokens, A's rows side by side then the token features] for full maps, [kvA, tokens,
// blocks * hdA] head-matched. Defined in alignment_scores.cpp.
torch::Tensor mapInput(const core::LayerConverter &map, bool keys, const std::vector<const float *> &source,
                       int64_t tokens, int kvHeadsA, int headDimA, int kvHeadsB, int headDimB,
                       const float *extra);
// mapInput's x of every layer's maps of one kind for one prompt of the file, [layers]: A's rows of each
// source layer read once, the token features from the file (what scoring and the KL objective feed
// the maps; defined in alignment_scores.cpp).
std::vector<torch::Tensor> promptMapInputs(const core::ExperimentReader &f,
                                           const std::vector<core::LayerConverter> &layers, int prompt,
                                           bool keys, int64_t tokens);
// applyMaps' output for mapInput's x -> B's token-major rows [tokens, kvB * hdB].
torch::Tensor mapOutputRows(const core::LayerConverter &map, const torch::Tensor &y);

} // namespace kvwb::gpu::detail
