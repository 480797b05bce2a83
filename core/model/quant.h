// ggml's block-quantised weight formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 in blocks of 32; the
// K-quants Q4_K, Q5_K, Q6_K in super-blocks of 256), as GGUF files store them: conversion to float
// and back.
//
// dequantize reproduces ggml's dequantize_row_* bit for bit (the f16 scales are widened, then every
// product is one float multiply as in ggml; checked against gguf-py on llama-quantize's files).
// quantize writes valid blocks of each format with a simple round-to-nearest scheme from each
// block's range (not llama-quantize's search for the best scales), so its error is somewhat above
// llama-quantize's. Pure functions; thread-safe.
#pragma once

#include "core/model/dtype.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvwb::core {

// Bytes of n elements of type t: n * dtypeSize for plain types, n / block * blockBytes for
// quantised ones. Error(Shape) naming `what` when n is not a whole number of blocks.
uint64_t dtypeBytesFor(DType t, int64_t n, const std::string &what);

// n elements from `bytes` (exactly dtypeBytesFor(t, n) bytes) into out[0..n). Handles F32, F16,
// BF16 and every quantised type; Error(Shape) for other types. A block whose scale decodes to a
// NaN or infinity is reported (Error(Format) naming `what` and the block) rather than spread.
void dequantize(DType t, std::span<const std::byte> bytes, int64_t n, float *out, const std::string &what);

// Error(Format) naming `what` and the block when a block's scale (or min) is not a finite f16, for
// every block of `bytes` (whole blocks of a quantised t), without decoding them: the check
// dequantize makes, for weights the engine keeps quantised (core/model/quant_kernels.h).
void checkScales(DType t, std::span<const std::byte> bytes, const std::string &what);

// One block of quantised type t (dtypeBlockBytes(t) bytes) into dtypeBlockElements(t) floats,
// unchecked (checkScales first); as dequantize.
void dequantizeBlock(DType t, const std::byte *block, float *out) noexcept;

// The f16 at p as a float (unaligned), and the 6-bit scale and min of sub-block j (0-7) of a
// Q4_K / Q5_K super-block's 12 scale bytes (ggml's get_scale_min_k4): the block readers' pieces.
float f16At(const uint8_t *p) noexcept;
void scaleMinK4(int j, const uint8_t *scales, uint8_t &scale, uint8_t &min) noexcept;

// n floats as type t (F32, F16, BF16 or a quantised type); n must be a whole number of blocks.
std::vector<std::byte> quantize(DType t, std::span<const float> values, const std::string &what);

} // namespace kvwb::core
