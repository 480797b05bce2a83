// Products and row reads over ggml block-quantised weights kept in their blocks: the engine's CPU
// path holds a GGUF file's Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K matrices as the file
// stores them (4.5-8.5 bits a weight) instead of dequantising them at load.
//
// Three instruction-set paths, chosen at run time: AVX-512 (F, BW, VL, VNNI), AVX2 (with FMA and
// F16C) and a portable one (any CPU). KVWB_QUANT_ISA=portable|avx2|avx512 forces one (tests run
// every path this CPU has; a path the CPU lacks is refused by name). Each path unpacks a block's
// integer levels into registers (the AVX-512 decode kernels are core/model/quant_dot512.cpp, the
// prompt's core/model/quant_prompt.cpp):
// - dotRows (one token, decode): integer dot products of the levels with the activation rounded
//   to 8 bits per 32 elements (QuantizedActivation, as llama.cpp's decode), one scale per block;
//   equal to the double-precision dot product of the dequantised weights with that activation up
//   to f32 rounding (the tests hold every path to a stated bound).
// - promptRows (prompts on AVX-512 VNNI; below): integer products with the prompt's rows rounded
//   as one token's are.
// - dequantRows (the other prompts and embeddings): the floats core::dequantize gives, bit for bit
//   (the same products and sums in the same order), for a product that then runs on f32 tiles with
//   the activation as it is.
//
// Pure functions over caller-owned memory; thread-safe.
#pragma once

#include "core/model/dtype.h"
#include "core/util/enum_names.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace kvwb::core::quant {

enum class Isa
{
    Portable,
    Avx2,
    Avx512
};
// "portable", "avx2", "avx512"
inline constexpr EnumName<Isa> kIsaNames[] = {
    {Isa::Portable, "portable"}, {Isa::Avx2, "avx2"}, {Isa::Avx512, "avx512"}};
KVWB_ENUM_NAMES(Isa, kIsaNames, isaName, parseIsa)
bool isaSupported(Isa isa) noexcept; // this CPU runs the path
Isa detectedIsa() noexcept;          // the best path this CPU runs
// KVWB_QUANT_ISA when set (Error(InvalidArgument) for an unknown name, Error(Unsupported) for a
// path this CPU lacks), else detectedIsa(). Read on every call (cheap).
Isa activeIsa();

// Whether t has kernels here (the eight block types above).
bool hasKernels(DType t) noexcept;

// One activation row as the dot kernels read it, rounded to 8 bits as llama.cpp's decode rounds it:
// - for the 32-element types, per 32 elements: d[b] = max |x| / 127, q[i] = round(x[i] / d[b]) in
//   [-127, 127], xs[b] = d[b] * (sum of the block's q) (the min terms);
// - for the K-quants (when k is a multiple of 256), per 256 elements: d256, q256, and the sums of
//   q256 over each 16 elements (bsum16), so that the scales and mins apply in integers.
// The kernels compute the dot product of the dequantised weights with x^[i] = d * q[i], which
// differs from x[i] by at most d / 2. A block holding a NaN or infinity gets d = NaN, so the
// products are NaN too.
struct QuantizedActivation
{
    int64_t k = 0;
    std::vector<int8_t> q;
    std::vector<float> d, xs; // per 32 elements
    std::vector<int8_t> q256;
    std::vector<float> d256;     // per 256 elements
    std::vector<int16_t> bsum16; // per 16 elements
};
// k must be a multiple of 32. Only the forms asked for are filled (a matrix of one kind of
// type needs one); the 256-element form only where k is a multiple of 256.
void quantizeActivation(const float *x, int64_t k, QuantizedActivation &out, bool blocks32 = true,
                        bool blocks256 = true);
// x^[i], the activation the kernels multiply rows of type t with (tests and references).
double dequantizedActivation(const QuantizedActivation &x, DType t, int64_t i);

// y[r - r0] = row r . x^ for rows [r0, r1) of a matrix of `k`-element rows of type t stored back to
// back (dtypeBytesFor(t, k) bytes each) from w: per 32 weights one integer dot product of the
// levels (AVX-512 VNNI vpdpbusd, AVX2 vpmaddubsw), scaled once; the portable path sums the same
// products in f32. k = x.k must be whole blocks.
void dotRows(DType t, const std::byte *w, int64_t r0, int64_t r1, const QuantizedActivation &x, float *y,
             Isa isa);

// ---- A prompt's product in integers (core/model/quant_prompt.cpp): every block type on AVX-512
// with VNNI, for rows of a multiple of 256 elements. The prompt's rows are rounded to 8 bits as
// one token's are for that type (per 256 elements for the K-quants, per 32 for the others:
// promptBlock); the matrix's rows are unpacked 16 at a time into their integer
// levels, interleaved so that one vpdpbusd multiplies 4 levels of 16 rows with 4 of a token's,
// and each sub-block's sums are scaled in f32 (its scale times the sum, plus its min or offset
// times the token's sum of levels). Elsewhere a prompt's rows dequantise onto f32 tiles
// (dequantRows).
struct PromptActivations
{
    int64_t k = 0, tokens = 0;
    int block = 256;          // elements per step: 256 or 32
    std::vector<int8_t> q;    // [tokens, k]
    std::vector<float> d;     // [tokens, k / block]: each block's step
    std::vector<float> sum16; // [tokens, k / 16]: sums of the levels over 16 elements
    std::vector<float> sum32; // [tokens, k / 32]: over 32
};
// The rounding block promptRows needs for t's rows: 256 for the K-quants, 32 for the others.
int promptBlock(DType t) noexcept;
// tokens rows of k elements (k a multiple of 256) from x [tokens, k], rounded per `block`.
void quantizePrompt(const float *x, int64_t tokens, int64_t k, int block, PromptActivations &out);
// Whether promptRows runs t's rows of k elements on this path.
bool hasPromptRows(DType t, int64_t k, Isa isa) noexcept;
// y[i * ldy + (r - r0)] = row r . x^_i for rows [r0, r1) of the matrix at w and every token i of
// x (rounded per promptBlock(t)): the dot product of the dequantised row with the token's rounded
// activation, to f32 rounding (the tests hold it to dotRows' bound). Error(Unsupported) where
// !hasPromptRows(t, x.k, isa), Error(InvalidArgument) for x rounded per another block.
void promptRows(DType t, const std::byte *w, int64_t r0, int64_t r1, const PromptActivations &x, float *y,
                int64_t ldy, Isa isa);

// Rows [r0, r1) as floats into out[(r - r0) * k ...], equal to core::dequantize of the same bytes.
void dequantRows(DType t, const std::byte *w, int64_t k, int64_t r0, int64_t r1, float *out, Isa isa);

} // namespace kvwb::core::quant
