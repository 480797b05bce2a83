// Private to core/model/quant_kernels.cpp and core/model/quant_dot512.cpp: the block layouts and
// byte reads both need, and the AVX-512 decode kernels quant_dot512.cpp holds.
#pragma once

#include "core/model/dtype.h"
#include "core/model/quant_kernels.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVWB_QK_X86 1
#endif

namespace kvwb::core::quant::detail {

using u8 = uint8_t;

constexpr bool hasMin(DType t)
{
    return t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K;
}

// ggml's block sizes in bytes (dtypeBlockBytes, as constants the loops can fold).
template <DType T> constexpr int blockBytes()
{
    switch (T) {
    case DType::Q4_0:
        return 18;
    case DType::Q4_1:
        return 20;
    case DType::Q5_0:
        return 22;
    case DType::Q5_1:
        return 24;
    case DType::Q8_0:
        return 34;
    case DType::Q4_K:
        return 144;
    case DType::Q5_K:
        return 176;
    case DType::Q6_K:
        return 210;
    default:
        return 0;
    }
}

template <DType T> constexpr int levelsAt() // where a block's 4- or 8-bit levels start
{
    switch (T) {
    case DType::Q4_0:
    case DType::Q8_0:
        return 2;
    case DType::Q4_1:
        return 4;
    case DType::Q5_0:
        return 6;
    default: // Q5_1
        return 8;
    }
}
template <DType T> constexpr bool fifthBit()
{
    return T == DType::Q5_0 || T == DType::Q5_1;
}

#ifdef KVWB_QK_X86
// Blocks b and b + blockBytes<T>() of a 32-element type: their 64 levels as unsigned bytes in element
// order, block b's first (4- and 5-bit levels as they are, Q8_0's plus 128). The decode and the
// prompt kernels both multiply them with vpdpbusd. (Targets a subset of both callers' so it inlines.)
template <DType T>
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline __m512i
blockPairLevels(const u8 *b)
{
    constexpr int at = levelsAt<T>(), bb = blockBytes<T>();
    if constexpr (T == DType::Q8_0) {
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + at));
        const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + bb + at));
        return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                                _mm512_set1_epi8(char(0x80)));
    } else {
        const __m256i n = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + at))),
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + bb + at)), 1);
        const __m512i z = _mm512_castsi256_si512(n);
        const __m512i nn = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 1, 0, 0)); // n0 n0 n1 n1
        // the high nibbles in 128-bit lanes 1 and 3 (16-bit lanes 8-15 and 24-31)
        __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(nn, 0xFF00FF00u, nn, 4), _mm512_set1_epi8(0x0F));
        if constexpr (fifthBit<T>()) {
            uint32_t h0, h1; // qh: bit j is element j's fifth bit
            std::memcpy(&h0, b + at - 4, 4);
            std::memcpy(&h1, b + bb + at - 4, 4);
            u = _mm512_mask_add_epi8(u, __mmask64(uint64_t(h0) | (uint64_t(h1) << 32)), u,
                                     _mm512_set1_epi8(16));
        }
        return u;
    }
}

#define KVWB_QK_UNPACK __attribute__((target("avx2,fma,f16c"), always_inline)) inline
#define KVWB_QK_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVWB_QK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

KVWB_QK_UNPACK float f16(const u8 *p)
{
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

KVWB_QK_UNPACK uint16_t u16(const u8 *p)
{
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

KVWB_QK_UNPACK uint32_t u32(const u8 *p)
{
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

KVWB_QK_UNPACK float hsum8(__m256 a)
{
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}

// dotRows on the AVX-512 path (quant_dot512.cpp): y[r - r0] = row r . x for the eight block types.
void dotRowsAvx512(DType t, const u8 *w, int64_t r0, int64_t r1, const QuantizedActivation &x, float *y);
#endif

} // namespace kvwb::core::quant::detail
