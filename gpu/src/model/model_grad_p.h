// Private to gpu/: model B's forward through torch's autograd, for training a converter on what B does
// with the cache it writes (the KL objective, gpu/src/align/kl_fit.cpp). The same computation as
// Model::forward after a cache, in torch's own ops (the CPU kernels and the quantised ones record no
// gradients), with the prefix K/V given as tensors that may require grad. Includes torch.
#pragma once

#include "core/model/kv_types.h"
#include "gpu/model/model.h"

#include <torch/torch.h>

#include <vector>

namespace kvwb::gpu::detail {

struct ModelAccess
{
    // Logits [ids, vocab] float32 of ids at positions n.. after a prefix of n positions given per layer
    // as keys/values [kvHeads, n, headDim] (float32 or the compute dtype, on any device: moved to the
    // model's; keys in `form`: pre-RoPE keys get B's rotation at 0..n-1 here), every K/V rounded to the
    // cache's dtype as Model::forward reads them. Autograd records every step, so the loss's
    // backward reaches the prefix tensors; nothing is cached. Runs on the calling thread with the
    // model's threads, outside inference mode. Error(InvalidArgument) naming the checkpoint when its
    // weights are held in quantised blocks (load it dequantised), or ids empty or past the context;
    // Error(Shape) for prefix tensors of another geometry.
    static torch::Tensor logitsAfter(const Model &model, std::vector<torch::Tensor> keys,
                                     const std::vector<torch::Tensor> &values, core::KeyForm form,
                                     const std::vector<int> &ids);
    // logitsAfter's first check alone: Error(InvalidArgument) naming the checkpoint unless every weight
    // is dense (a fit checks it before the work that precedes the training).
    static void checkDense(const Model &model);
};

} // namespace kvwb::gpu::detail
