// Private to gpu/: hand-written CPU kernels for decode, where LibTorch's own paths are slow for
// one token, and for a prompt's products, attention and elementwise loops, which LibTorch ran on
// thread pools of its own beside the team (docs/engine.md, Threads). Includes torch.
//
// LibTorch 1.13 runs a [1, in] x [out, in]^T product through oneDNN (bf16) at ~4 GB/s and OpenBLAS
// (f32) at ~7-11 GB/s of weights on the AVX-512 machines we measured; the row-dot kernels here
// (vdpbf16ps / FMA, f32 accumulation) stream them at up to ~19 GB/s from huge pages. RMSNorm and
// RoPE are one loop each here instead of 6-8 torch kernels of a few microseconds each (~120 per
// token on a 30-layer model), with the same float arithmetic. Thread-safe: pure functions over
// caller-owned tensors; the matrix kernels split rows over one persistent team of threads (as many
// as torch's intra-op thread count of the calling thread).
#pragma once

#include "core/model/dtype.h"

#include <torch/torch.h>

#include <vector>

namespace kvwb::gpu::detail {

// Whether this CPU runs rowGemv (and the other kernels here) for dtype (f32: AVX-512 F, BW and VL
// and FMA; bf16: also AVX-512 BF16), checked once at run time.
bool haveRowGemv(torch::Dtype dtype);

// y = W x (+ bias) for one token: W [out, in] row-major contiguous, x [in], bias [out] or
// undefined, all f32 or all bf16, on the CPU. Each row is one dot product accumulated in f32
// (bf16 pairs multiply exactly in f32); a bf16 result is rounded once, as torch's bf16 linear
// rounds. Returns [1, out] of W's dtype. Precondition: haveRowGemv(W's dtype).
torch::Tensor rowGemv(const torch::Tensor &w, const torch::Tensor &x, const torch::Tensor &bias);

// Attention of one query token: q [heads, 1, hd] (post-RoPE), keys/values [kvHeads, capacity, hd]
// contiguous (the cache's layout), over positions [k0, k1); GQA head h reads kv head h / (heads /
// kvHeads). Scores scaled by `scale`, soft-capped when softcap > 0 (Gemma 2), softmax and the
// value sum in f32; returns [1, heads * hd] of q's dtype, rounded once. Replaces ~10 torch ops
// per layer (two bmm through oneDNN among them) in decode. Heads split over the team for long
// caches. Precondition: haveRowGemv(q's dtype).
torch::Tensor attendOneCpu(const torch::Tensor &q, const torch::Tensor &keys, const torch::Tensor &values,
                           int64_t k0, int64_t k1, double scale, double softcap);

// One anonymous mapping advised MADV_HUGEPAGE (2 MiB pages where transparent huge pages are on
// "madvise" or "always") handed out in 64-byte-aligned pieces, for weights written once in place
// as they load. Streaming a 135M model's weights once per token ran at ~10 GB/s on 4 KiB pages and
// ~19 GB/s on 2 MiB ones here: the hardware prefetcher stops at every 4 KiB page boundary. The
// mapping lives as long as any piece. Not thread-safe (one loader).
class PackedArena
{
public:
    explicit PackedArena(int64_t capacity); // bytes (pieces' alignment padding included)
    // An uninitialised uint8 tensor of n bytes: a piece of the mapping, or of the heap once the
    // mapping is used up (or where there is none).
    torch::Tensor take(int64_t n);
    static int64_t padded(int64_t n) { return (n + 63) / 64 * 64; }

private:
    std::shared_ptr<void> m_map;
    char *m_next = nullptr;
    int64_t m_left = 0;
};

// Sets the BLAS's own thread count (OpenBLAS keeps a pool that torch's thread setting does not
// reach) when n > 0; returns the count it had, 0 where the BLAS has no such setting.
int setBlasThreads(int n);

// Sets the OpenMP thread count of the calling thread's parallel regions (torch's parallel_for
// reads it) when n > 0; returns the count it had, 0 where OpenMP is not in the process.
int setOmpThreads(int n);

// The row team's thread count for the products this thread starts, until set again; returns the
// count it had. 0 (the default): torch's intra-op thread count. A model job sets its count here
// and runs torch's own ops on one thread (Model's JobScope): torch's OpenMP threads and the team
// would otherwise take turns on the same cores between every two products.
int setTeamThreads(int n);

// y = x W^T (+ bias) for a prompt: x [t, in], W [out, in] contiguous, bias [out] or undefined,
// all of one dtype (f32 or bf16) on the CPU; returns [t, out] of that dtype. W's rows are split
// over the row team in fixed column chunks; each output element is one dot product of a 4 x 4
// register tile (FMA; bf16 widened exactly to f32; bias added in f32, one rounding), or of one
// sgemm call for f32 prompts of 256 rows or more, so a prompt's logits are the same bits on any
// thread count. Precondition: haveRowGemv(W's dtype). Neither LibTorch's bf16 linear (oneDNN) nor its f32 one
// (OpenBLAS) scaled a 64-token product of a 135M model to two threads beside torch's own
// OpenMP threads (2-thread prefill at ~1.05x of one thread).
torch::Tensor teamLinear(const torch::Tensor &x, const torch::Tensor &w, const torch::Tensor &bias);

// y[i] = x[i] w[i]^T for x [b, m, k] and w [b, n, k] whose rows are dense (stride k; any batch
// stride: a narrow of the KV cache), f32 or bf16; returns f32 [b, m, n], the columns of all b
// products split over the team as one. Prefill attention: scores = Q K^T, and probs V as
// probs (V^T)^T.
torch::Tensor teamMatmulNT(const torch::Tensor &x, const torch::Tensor &w);

// Whether rmsNormCpu / ropeCpu take x: a CPU f32 or bf16 tensor whose last dimension is dense.
bool cpuKernelFits(const torch::Tensor &x);

// HF RMSNorm over the last dimension of a contiguous x [..., n] with weight w [n] of x's dtype:
// mean of squares and the scale in f32; Llama: w * (x * rsqrt(var + eps)).to(dtype); unitOffset
// (Gemma): (x * rsqrt(var + eps) * (w + 1)).to(dtype). Returns a new tensor like x.
torch::Tensor rmsNormCpu(const torch::Tensor &x, const torch::Tensor &w, double eps, bool unitOffset);

// Rotates x [heads, tokens, headDim] (any strides with a dense last dimension) by cos/sin
// [tokens, headDim/2] f32 contiguous: rotate-half pairs (i, i + half) or interleaved pairs
// (2i, 2i + 1); inverse rotates by -angle. In f32, rounded once to x's dtype. Returns a new
// contiguous tensor.
torch::Tensor ropeCpu(const torch::Tensor &x, const torch::Tensor &cos, const torch::Tensor &sin,
                      bool rotateHalf, bool inverse);

// The gated MLP's activation for a prompt: gateUp [t, 2 * intermediate] (gate | up, f32 or bf16,
// on the CPU) -> act(gate) * up [t, intermediate], act SiLU or GELU (tanh), in f32 with the
// activation rounded to the dtype before the product, as torch's two ops round. Rows over the team.
torch::Tensor gluCpu(const torch::Tensor &gateUp, bool gelu);

// Prompt attention's probabilities: scores [g, r, keys] contiguous f32 (Q K^T), scaled, soft-capped
// when softcap > 0, masked where mask [queries, keys] (bool, true = masked; row i of scores uses
// mask row i % queries, GQA's heads stacked over the queries) is set, softmax per row in f32;
// returns dtype (f32: scores itself, overwritten). Rows over the team.
torch::Tensor attentionSoftmaxCpu(torch::Tensor scores, const torch::Tensor &mask, double scale,
                                  double softcap, torch::Dtype dtype);

// A weight matrix kept in ggml's blocks (core/model/quant_kernels.h): `rows` rows of `cols`
// elements of `type`, back to back in `bytes` (uint8, on the CPU).
struct QuantMatrix
{
    core::DType type = core::DType::Q8_0;
    int64_t rows = 0, cols = 0;
    torch::Tensor bytes;
};

// y = x W^T (+ bias) for x [t, in] (f32 or bf16, on the CPU) and W stacked from `w`'s parts by
// rows (a fused q|k|v or gate|up projection whose parts may differ in type); bias [sum of rows] or
// undefined. Returns [t, sum of rows] of x's dtype, rounded once. One token: the fused dot kernels
// (core::quant::dotRows, x rounded to 8 bits per 32 elements as llama.cpp's decode rounds it) over
// the row team, the rows never dequantised; a prompt: each 64-row chunk
// dequantised once (the floats of core::dequantize, bit for bit) and multiplied on the f32 tiles or
// the BLAS as an f32 weight would be. The path is core::quant::activeIsa()'s; any CPU runs it.
torch::Tensor quantLinear(const torch::Tensor &x, const std::vector<QuantMatrix> &w,
                          const torch::Tensor &bias);

// Rows `ids` (int64 on the CPU, each in [0, w.rows)) of w as floats: [n, cols] of dtype (the
// embedding lookup of a quantised token table).
torch::Tensor quantRows(const QuantMatrix &w, const torch::Tensor &ids, torch::Dtype dtype);

} // namespace kvwb::gpu::detail
