// Private to gpu/: hand-written CPU kernels for the decode step, where LibTorch's own paths are
// slow for one token. Includes torch.
//
// LibTorch 1.13 runs a bf16 [1, in] x [out, in]^T product through oneDNN at ~5 GB/s of weights on
// the AVX-512 BF16 machines we measured; this row-dot kernel (vdpbf16ps, f32 accumulation) streams
// them at memory speed. Thread-safe: pure functions over caller-owned buffers; they split rows
// over torch's intra-op threads.
#pragma once

#include <torch/torch.h>

namespace kvwb::gpu::detail {

// Whether this CPU runs bf16Gemv (AVX-512 BF16, checked once at run time).
bool haveBf16Gemv();

// y = W x (+ bias) for one token: W [out, in] bf16 row-major contiguous, x [in] bf16 contiguous,
// bias [out] bf16 or undefined. Products of bf16 pairs are exact in f32 and are summed in f32;
// the result is rounded to bf16 once, as torch's bf16 linear does. Returns [1, out] bf16.
// Precondition: haveBf16Gemv(), CPU tensors.
torch::Tensor bf16Gemv(const torch::Tensor &w, const torch::Tensor &x, const torch::Tensor &bias);

} // namespace kvwb::gpu::detail
