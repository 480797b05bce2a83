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

#ifdef KVWB_QK_X86
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
