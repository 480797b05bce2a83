// Compiled with -ffp-contract=off (core/CMakeLists.txt): dequantRows' multiplies and adds must stay
// separate roundings, as in core::dequantize, where no FMA is available to contract them.
// GCC 12's AVX-512 intrinsics start some results from a self-initialised "undefined" vector, which
// its flow analysis reports as uninitialised once they are inlined under target attributes.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "core/model/quant_kernels.h"

#include "core/model/quant.h"
#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/model/quant_kernels_p.h"

#ifdef KVWB_QK_X86
#include <cpuid.h>
#endif

namespace kvwb::core::quant {

namespace {

using namespace detail;

// ---------------------------------------------------------------------------------------------
// Portable: one block dequantised onto the stack (core::dequantizeBlock), then its dot product.

void dotRowsPortable(DType t, const u8 *w, int64_t r0, int64_t r1, const QuantizedActivation &x, float *y)
{
    const int be = dtypeBlockElements(t), bb = dtypeBlockBytes(t);
    const int64_t k = x.k, nb = k / be, rowBytes = nb * bb;
    float buf[256];
    for (int64_t r = r0; r < r1; ++r) {
        const u8 *row = w + r * rowBytes;
        float acc = 0;
        for (int64_t ib = 0; ib < nb; ++ib) {
            dequantizeBlock(t, reinterpret_cast<const std::byte *>(row + ib * bb), buf);
            float s = 0;
            for (int i = 0; i < be; ++i) {
                const int64_t e = ib * be + i;
                s += buf[i] * (be == 256 ? x.d256[size_t(e / 256)] * float(x.q256[size_t(e)])
                                         : x.d[size_t(e / 32)] * float(x.q[size_t(e)]));
            }
            acc += s;
        }
        y[r - r0] = acc;
    }
}

void dequantRowsPortable(DType t, const u8 *w, int64_t k, int64_t r0, int64_t r1, float *out)
{
    const int be = dtypeBlockElements(t), bb = dtypeBlockBytes(t);
    const int64_t nb = k / be;
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t ib = 0; ib < nb; ++ib)
            dequantizeBlock(t, reinterpret_cast<const std::byte *>(w + (r * nb + ib) * bb),
                            out + (r - r0) * k + ib * be);
}

#ifdef KVWB_QK_X86
// ---------------------------------------------------------------------------------------------
// x86: a block's levels unpacked into "units" of 32 signed bytes in one 256-bit register, each
// with its scale (per 16 elements: Q6_K scales 16 at a time) and its additive min:
// element i of a unit is q[i] * d + mn, exactly as ggml's dequantize_row_* computes it. The
// unpacking uses AVX2 instructions only, so both paths inline it.

struct Unit
{
    __m256i q;
    float d0, d1; // scales of elements 0-15 and 16-31
    float mn;     // added to every element (Q4_1, Q5_1; Q4_K and Q5_K as minus dmin * m)
};

// 16 bytes -> their low nibbles in bytes 0-15 and high nibbles in bytes 16-31 (ggml's order).
KVWB_QK_UNPACK __m256i nibbles16(const u8 *p)
{
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// Byte j is 0xFF where bit j of x is set, else 0.
KVWB_QK_UNPACK __m256i bitsToBytes(uint32_t x)
{
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32(int(x)), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

KVWB_QK_UNPACK void scaleMinK4(int j, const u8 *q, u8 &d, u8 &m)
{
    if (j < 4) {
        d = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        d = u8((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = u8((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Q4_K / Q5_K: the 4-bit levels of sub-blocks 2j (lo) and 2j + 1 (hi) from the 32 bytes at qs + 32j,
// plus 16 where Q5_K's fifth bit is set (hb: its 32 bytes of high bits).
template <bool five> KVWB_QK_UNPACK void levelsK4(const u8 *qs, __m256i hb, int j, __m256i &lo, __m256i &hi)
{
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs + 32 * j));
    lo = _mm256_and_si256(v, low4);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    if constexpr (five) {
        const __m256i sixteen = _mm256_set1_epi8(16);
        const __m256i u1 = _mm256_set1_epi8(char(1 << (2 * j))), u2 = _mm256_set1_epi8(char(2 << (2 * j)));
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, u1), u1), sixteen));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, u2), u2), sixteen));
    }
}

// Q6_K: the levels (0-63) of half n of the block at b, 4 units of 32 in element order: the low
// nibbles of ql's first and second 32 bytes, then their high nibbles, each with 2 bits of qh.
KVWB_QK_UNPACK void levelsQ6K(const u8 *b, int n, __m256i (&q)[4])
{
    const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    const u8 *ql = b + 64 * n, *qh = b + 128 + 32 * n;
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql + 32));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qh));
    q[0] = _mm256_or_si256(_mm256_and_si256(a, low4), _mm256_slli_epi16(_mm256_and_si256(h, three), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(c, low4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), three), 4));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), three), 4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), three), 4));
}

template <DType T> constexpr int unitsPerBlock()
{
    return T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K ? 8 : 1;
}

// A block is unpacked a part at a time (a K-quant's 64 or 128 elements: a few registers, used as
// soon as they are made), unitsPerPart<T>() units each.
template <DType T> constexpr int partsPerBlock()
{
    return T == DType::Q4_K || T == DType::Q5_K ? 4 : T == DType::Q6_K ? 2 : 1;
}
template <DType T> constexpr int unitsPerPart()
{
    return unitsPerBlock<T>() / partsPerBlock<T>();
}

// Part `part` of one block of T into its units, in element order.
template <DType T> KVWB_QK_UNPACK void unpack(const u8 *b, int part, Unit *u)
{
    if constexpr (T == DType::Q8_0) {
        const float d = f16(b);
        u[0] = {_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 2)), d, d, 0.0f};
    } else if constexpr (T == DType::Q4_0) {
        const float d = f16(b);
        u[0] = {_mm256_sub_epi8(nibbles16(b + 2), _mm256_set1_epi8(8)), d, d, 0.0f};
    } else if constexpr (T == DType::Q4_1) {
        const float d = f16(b);
        u[0] = {nibbles16(b + 4), d, d, f16(b + 2)};
    } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
        constexpr bool min = T == DType::Q5_1;
        const u8 *qh = b + (min ? 4 : 2);
        const __m256i high = _mm256_and_si256(bitsToBytes(u32(qh)), _mm256_set1_epi8(0x10));
        const __m256i q = _mm256_or_si256(nibbles16(qh + 4), high);
        const float d = f16(b);
        if constexpr (min)
            u[0] = {q, d, d, f16(b + 2)};
        else
            u[0] = {_mm256_sub_epi8(q, _mm256_set1_epi8(16)), d, d, 0.0f};
    } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
        constexpr bool five = T == DType::Q5_K;
        const float d = f16(b), dmin = f16(b + 2);
        const u8 *scales = b + 4;
        const u8 *qs = b + (five ? 48 : 16);
        const __m256i hb = five ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 16)) : __m256i{};
        {
            const int j = part;
            __m256i lo, hi;
            levelsK4<five>(qs, hb, j, lo, hi);
            u8 sc, m;
            scaleMinK4(2 * j, scales, sc, m);
            const float d1 = d * sc, m1 = dmin * m;
            scaleMinK4(2 * j + 1, scales, sc, m);
            const float d2 = d * sc, m2 = dmin * m;
            u[0] = {lo, d1, d1, -m1};
            u[1] = {hi, d2, d2, -m2};
        }
    } else if constexpr (T == DType::Q6_K) {
        const float d = f16(b + 208);
        const auto *sc = reinterpret_cast<const int8_t *>(b + 192);
        const __m256i bias = _mm256_set1_epi8(32);
        {
            const int n = part;
            const int8_t *s = sc + 8 * n;
            __m256i q[4];
            levelsQ6K(b, n, q);
            u[0] = {_mm256_sub_epi8(q[0], bias), d * float(s[0]), d * float(s[1]), 0.0f};
            u[1] = {_mm256_sub_epi8(q[1], bias), d * float(s[2]), d * float(s[3]), 0.0f};
            u[2] = {_mm256_sub_epi8(q[2], bias), d * float(s[4]), d * float(s[5]), 0.0f};
            u[3] = {_mm256_sub_epi8(q[3], bias), d * float(s[6]), d * float(s[7]), 0.0f};
        }
    }
}

template <DType T> constexpr int blockElements()
{
    return unitsPerBlock<T>() * 32;
}

// ---- AVX2: 8 lanes.

KVWB_QK_UNPACK __m256 widen8(__m128i bytes) // the low 8 signed bytes as floats
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
}

// The scales of a unit's 8 int32 sums (4 elements each): d0 for lanes 0-3, d1 for lanes 4-7.
template <DType T> KVWB_QK_UNPACK __m256 unitScales(const Unit &u, float dx)
{
    if constexpr (T == DType::Q6_K)
        return _mm256_set_m128(_mm_set1_ps(u.d1 * dx), _mm_set1_ps(u.d0 * dx));
    else
        return _mm256_set1_ps(u.d0 * dx);
}

KVWB_QK_UNPACK __m256i sumAvx2(__m256i a, __m256i b)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

// The 32-element types on AVX2, one block (unit) at a time: its 8 int32 sums of |w| times x
// with w's sign (vpmaddubsw, vpmaddwd), scaled once per unit.
template <DType T>
KVWB_QK_AVX2 void dotRowsAvx2(const u8 *w, int64_t r0, int64_t r1, const QuantizedActivation &x, float *y)
{
    constexpr int be = blockElements<T>(), nu = unitsPerBlock<T>();
    const int64_t nb = x.k / be, rowBytes = nb * blockBytes<T>();
    const auto *xq = reinterpret_cast<const __m256i *>(x.q.data());
    for (int64_t r = r0; r < r1; ++r) {
        const u8 *row = w + r * rowBytes;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        float minAcc = 0;
        for (int64_t ib = 0; ib < nb; ++ib) {
            for (int part = 0; part < partsPerBlock<T>(); ++part) {
                Unit u[unitsPerPart<T>()];
                unpack<T>(row + ib * blockBytes<T>(), part, u);
                for (int j = 0; j < unitsPerPart<T>(); ++j) {
                    const int64_t b = ib * nu + part * unitsPerPart<T>() + j; /* the activation's block */
                    /* |w| (128 for a level of -128) times x with w's sign: no level overflows */
                    const __m256i xb = _mm256_loadu_si256(xq + b);
                    const __m256 p =
                        _mm256_cvtepi32_ps(sumAvx2(_mm256_abs_epi8(u[j].q), _mm256_sign_epi8(xb, u[j].q)));
                    const __m256 sc = unitScales<T>(u[j], x.d[size_t(b)]);
                    if (b % 2 == 0) /* two chains: each FMA waits on the one before */
                        acc0 = _mm256_fmadd_ps(sc, p, acc0);
                    else
                        acc1 = _mm256_fmadd_ps(sc, p, acc1);
                    if constexpr (hasMin(T))
                        minAcc += u[j].mn * x.xs[size_t(b)];
                }
            }
        }
        y[r - r0] = hsum8(_mm256_add_ps(acc0, acc1)) + minAcc;
    }
}

template <DType T>
KVWB_QK_AVX2 void dequantRowsAvx2(const u8 *w, int64_t k, int64_t r0, int64_t r1, float *out)
{
    constexpr int be = blockElements<T>();
    const int64_t nb = k / be, rowBytes = nb * blockBytes<T>();
    for (int64_t r = r0; r < r1; ++r) {
        const u8 *row = w + r * rowBytes;
        float *o = out + (r - r0) * k;
        for (int64_t ib = 0; ib < nb; ++ib) {
            for (int part = 0; part < partsPerBlock<T>(); ++part) {
                Unit u[unitsPerPart<T>()];
                unpack<T>(row + ib * blockBytes<T>(), part, u);
                for (int j = 0; j < unitsPerPart<T>(); ++j) {
                    const int64_t e = ib * be + (part * unitsPerPart<T>() + j) * 32;
                    const __m128i lo = _mm256_castsi256_si128(u[j].q),
                                  hi = _mm256_extracti128_si256(u[j].q, 1);
                    const __m256 d0 = _mm256_set1_ps(u[j].d0), d1 = _mm256_set1_ps(u[j].d1);
                    __m256 v[4] = {
                        _mm256_mul_ps(widen8(lo), d0), _mm256_mul_ps(widen8(_mm_srli_si128(lo, 8)), d0),
                        _mm256_mul_ps(widen8(hi), d1), _mm256_mul_ps(widen8(_mm_srli_si128(hi, 8)), d1)};
                    for (int i = 0; i < 4; ++i) {
                        if constexpr (hasMin(T))
                            v[i] = _mm256_add_ps(v[i], _mm256_set1_ps(u[j].mn));
                        _mm256_storeu_ps(o + e + 8 * i, v[i]);
                    }
                }
            }
        }
    }
}

// ---- K-quants (both paths): llama.cpp's integer scheme. The activation is rounded per 256
// (QuantizedActivation::q256); per 32 (Q4_K, Q5_K) or 16 (Q6_K) weights, vpmaddubsw multiplies the
// unsigned levels with it in pairs and vpmaddwd applies the sub-block's integer scale, so a whole
// super-block sums in int32 and is scaled once; the mins come from the activation's 16-element
// sums. (256-bit instructions: the AVX-512 path runs the same code.)

KVWB_QK_UNPACK void scalesMinsK4(const u8 *scales, uint32_t (&utmp)[4]) // bytes 0-7 scales, 8-15 mins
{
    constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    std::memcpy(utmp, scales, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
}

KVWB_QK_UNPACK float finishK(__m256 acc, __m128 accMin)
{
    const __m128 m2 = _mm_add_ps(accMin, _mm_movehl_ps(accMin, accMin));
    return hsum8(acc) + _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
}

// One super-block of row `b` against the activation's block (levels xq, scale dx, 16-element sums
// bs) into acc (8 lanes, summed at the end) and accMin (the mins' terms, 4 lanes).
template <DType T>
KVWB_QK_UNPACK void superBlockK(const u8 *b, const int8_t *xq, const int16_t *bsum, float dx, __m256 &acc,
                                __m128 &accMin)
{
    __m256i sumi = _mm256_setzero_si256();
    if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
        constexpr bool five = T == DType::Q5_K;
        const float d = f16(b) * dx, dmin = f16(b + 2) * dx;
        uint32_t utmp[4];
        scalesMinsK4(b + 4, utmp);
        const __m256i mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(
            int(utmp[3]), int(utmp[2]), int(utmp[1]), int(utmp[0]))); // 8 scales, 8 mins (int16)
        // mins: sum over sub-blocks of m_j * (sum of the activation's levels in sub-block j)
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(bsum));
        const __m128i sub = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        const __m128i prod = _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), sub);
        accMin = _mm_fmadd_ps(_mm_set1_ps(-dmin), _mm_cvtepi32_ps(prod), accMin);
        const __m128i sc128 = _mm256_castsi256_si128(mins_and_scales);
        const __m256i scales = _mm256_set_m128i(sc128, sc128);
        const u8 *qs = b + (five ? 48 : 16);
        const __m256i hb = five ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 16)) : __m256i{};
        for (int j = 0; j < 4; ++j) {
            const __m256i sl =
                _mm256_shuffle_epi8(scales, _mm256_set1_epi16(short(((4 * j + 1) << 8) | (4 * j))));
            const __m256i sh =
                _mm256_shuffle_epi8(scales, _mm256_set1_epi16(short(((4 * j + 3) << 8) | (4 * j + 2))));
            __m256i lo, hi;
            levelsK4<five>(qs, hb, j, lo, hi);
            const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xq + 64 * j));
            const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xq + 64 * j + 32));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sl, _mm256_maddubs_epi16(lo, xl)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sh, _mm256_maddubs_epi16(hi, xh)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    } else { // Q6_K: levels 0-63, minus 32 through the activation's own pair sums
        const float d = f16(b + 208) * dx;
        const auto *sc = reinterpret_cast<const int8_t *>(b + 192);
        const __m256i m32 = _mm256_set1_epi8(32);
        for (int n = 0; n < 2; ++n) {
            const int8_t *s = sc + 8 * n;
            __m256i q[4];
            levelsQ6K(b, n, q);
            for (int u = 0; u < 4; ++u) {
                const __m256i xv =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xq + 128 * n + 32 * u));
                const __m256i p =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(q[u], xv), _mm256_maddubs_epi16(m32, xv));
                const __m256i scale =
                    _mm256_set_m128i(_mm_set1_epi16(s[2 * u + 1]), _mm_set1_epi16(s[2 * u]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale, p));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
}

template <DType T>
KVWB_QK_AVX2 void dotRowsK(const u8 *w, int64_t r0, int64_t r1, const QuantizedActivation &x, float *y)
{
    constexpr int bb = blockBytes<T>();
    const int64_t nb = x.k / 256, rowBytes = nb * bb;
    const int8_t *xq = x.q256.data();
    const float *dx = x.d256.data();
    const int16_t *bs = x.bsum16.data();
    int64_t r = r0;
    for (; r < r1; ++r) {
        __m256 acc = _mm256_setzero_ps();
        __m128 accMin = _mm_setzero_ps();
        for (int64_t ib = 0; ib < nb; ++ib)
            superBlockK<T>(w + r * rowBytes + ib * bb, xq + ib * 256, bs + ib * 16, dx[ib], acc, accMin);
        y[r - r0] = finishK(acc, accMin);
    }
}

// ---- AVX-512: 16 lanes.

KVWB_QK_AVX512 inline __m512 widen16(__m128i bytes)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
}

template <DType T>
KVWB_QK_AVX512 void dequantRowsAvx512(const u8 *w, int64_t k, int64_t r0, int64_t r1, float *out)
{
    constexpr int be = blockElements<T>();
    const int64_t nb = k / be, rowBytes = nb * blockBytes<T>();
    for (int64_t r = r0; r < r1; ++r) {
        const u8 *row = w + r * rowBytes;
        float *o = out + (r - r0) * k;
        for (int64_t ib = 0; ib < nb; ++ib) {
            for (int part = 0; part < partsPerBlock<T>(); ++part) {
                Unit u[unitsPerPart<T>()];
                unpack<T>(row + ib * blockBytes<T>(), part, u);
                for (int j = 0; j < unitsPerPart<T>(); ++j) {
                    const int64_t e = ib * be + (part * unitsPerPart<T>() + j) * 32;
                    __m512 v0 =
                        _mm512_mul_ps(widen16(_mm256_castsi256_si128(u[j].q)), _mm512_set1_ps(u[j].d0));
                    __m512 v1 =
                        _mm512_mul_ps(widen16(_mm256_extracti128_si256(u[j].q, 1)), _mm512_set1_ps(u[j].d1));
                    if constexpr (hasMin(T)) {
                        v0 = _mm512_add_ps(v0, _mm512_set1_ps(u[j].mn));
                        v1 = _mm512_add_ps(v1, _mm512_set1_ps(u[j].mn));
                    }
                    _mm512_storeu_ps(o + e, v0);
                    _mm512_storeu_ps(o + e + 16, v1);
                }
            }
        }
    }
}

// The type switch, once per call.
template <template <DType> class F, class... A> void byType(DType t, A &&...a)
{
    switch (t) {
    case DType::Q4_0:
        return F<DType::Q4_0>::run(a...);
    case DType::Q4_1:
        return F<DType::Q4_1>::run(a...);
    case DType::Q5_0:
        return F<DType::Q5_0>::run(a...);
    case DType::Q5_1:
        return F<DType::Q5_1>::run(a...);
    case DType::Q8_0:
        return F<DType::Q8_0>::run(a...);
    case DType::Q4_K:
        return F<DType::Q4_K>::run(a...);
    case DType::Q5_K:
        return F<DType::Q5_K>::run(a...);
    case DType::Q6_K:
        return F<DType::Q6_K>::run(a...);
    default:
        return;
    }
}

template <DType T> struct Dot2
{
    static void run(const u8 *w, int64_t r0, int64_t r1, const QuantizedActivation &x, float *y)
    {
        if constexpr (unitsPerBlock<T>() == 8)
            dotRowsK<T>(w, r0, r1, x, y);
        else
            dotRowsAvx2<T>(w, r0, r1, x, y);
    }
};
template <DType T> struct Deq2
{
    static void run(const u8 *w, int64_t k, int64_t r0, int64_t r1, float *out)
    {
        dequantRowsAvx2<T>(w, k, r0, r1, out);
    }
};
template <DType T> struct Deq512
{
    static void run(const u8 *w, int64_t k, int64_t r0, int64_t r1, float *out)
    {
        dequantRowsAvx512<T>(w, k, r0, r1, out);
    }
};
#endif // KVWB_QK_X86

void checkArgs(DType t, int64_t k)
{
    if (!hasKernels(t))
        throw Error(ErrorCode::Unsupported, fmt::format("no quantised kernels for dtype {}", dtypeName(t)));
    if (k <= 0 || k % dtypeBlockElements(t) != 0)
        throw Error(ErrorCode::Shape, fmt::format("rows of {} elements are not whole {} blocks of {}", k,
                                                  dtypeName(t), dtypeBlockElements(t)));
}

} // namespace

bool isaSupported(Isa isa) noexcept
{
#ifdef KVWB_QK_X86
    static const bool f16c = [] { // (clang's __builtin_cpu_supports knows no "f16c"): CPUID.1:ECX bit 29
        unsigned a = 0, b = 0, c = 0, d = 0;
        return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
    }();
    static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                               __builtin_cpu_supports("avx512vnni");
    switch (isa) {
    case Isa::Portable:
        return true;
    case Isa::Avx2:
        return avx2;
    case Isa::Avx512:
        return avx512;
    }
    return false;
#else
    return isa == Isa::Portable;
#endif
}

Isa detectedIsa() noexcept
{
    return isaSupported(Isa::Avx512) ? Isa::Avx512 : isaSupported(Isa::Avx2) ? Isa::Avx2 : Isa::Portable;
}

Isa activeIsa()
{
    const char *env = std::getenv("KVWB_QUANT_ISA");
    if (!env || !*env)
        return detectedIsa();
    const auto isa = parseIsa(env);
    if (!isa)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("KVWB_QUANT_ISA is '{}'; expected portable, avx2 or avx512", env));
    if (!isaSupported(*isa))
        throw Error(ErrorCode::Unsupported,
                    fmt::format("KVWB_QUANT_ISA is {}, which this CPU does not run (it runs {})", env,
                                isaName(detectedIsa())));
    return *isa;
}

bool hasKernels(DType t) noexcept
{
    return isBlockQuantized(t);
}

namespace {

// x rounded to levels of d = max |x| / 127 (half away from zero, as lroundf); d = NaN and levels 0
// when the block holds a NaN or infinity. Returns d.
float roundBlock(const float *x, int n, int8_t *q)
{
    float amax = 0;
    bool finite = true;
    for (int i = 0; i < n; ++i) {
        amax = std::max(amax, std::fabs(x[i]));
        finite = finite && std::isfinite(x[i]);
    }
    if (!finite) {
        std::fill(q, q + n, int8_t(0));
        return std::numeric_limits<float>::quiet_NaN();
    }
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; ++i) {
        const float v = x[i] * id;
        q[i] = int8_t(std::clamp(int(v + (v >= 0 ? 0.5f : -0.5f)), -127, 127));
    }
    return d;
}

} // namespace

void quantizeActivation(const float *x, int64_t k, QuantizedActivation &out, bool blocks32, bool blocks256)
{
    if (k <= 0 || k % 32 != 0)
        throw Error(ErrorCode::Shape,
                    fmt::format("an activation of {} elements is not whole blocks of 32", k));
    out.k = k;
    out.q.resize(blocks32 ? size_t(k) : 0);
    out.d.resize(blocks32 ? size_t(k / 32) : 0);
    out.xs.resize(blocks32 ? size_t(k / 32) : 0);
    if (blocks32)
        for (int64_t b = 0; b < k / 32; ++b) {
            int8_t *q = out.q.data() + b * 32;
            const float d = roundBlock(x + b * 32, 32, q);
            int sum = 0;
            for (int i = 0; i < 32; ++i)
                sum += q[i];
            out.d[size_t(b)] = d;
            out.xs[size_t(b)] = d * float(sum);
        }
    const bool k256 = blocks256 && k % 256 == 0;
    out.q256.resize(k256 ? size_t(k) : 0);
    out.d256.resize(k256 ? size_t(k / 256) : 0);
    out.bsum16.resize(k256 ? size_t(k / 16) : 0);
    if (k256)
        for (int64_t b = 0; b < k / 256; ++b) {
            int8_t *q = out.q256.data() + b * 256;
            out.d256[size_t(b)] = roundBlock(x + b * 256, 256, q);
            for (int g = 0; g < 16; ++g) {
                int sum = 0;
                for (int i = 0; i < 16; ++i)
                    sum += q[g * 16 + i];
                out.bsum16[size_t(b * 16 + g)] = int16_t(sum);
            }
        }
}

double dequantizedActivation(const QuantizedActivation &x, DType t, int64_t i)
{
    if (dtypeBlockElements(t) == 256)
        return double(x.d256[size_t(i / 256)]) * x.q256[size_t(i)];
    return double(x.d[size_t(i / 32)]) * x.q[size_t(i)];
}

void dotRows(DType t, const std::byte *w, int64_t r0, int64_t r1, const QuantizedActivation &x, float *y,
             Isa isa)
{
    checkArgs(t, x.k);
    const bool k256 = dtypeBlockElements(t) == 256;
    if (k256 ? x.q256.size() != size_t(x.k) : x.q.size() != size_t(x.k))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("the activation was not rounded in {}-element blocks for {} rows",
                                k256 ? 256 : 32, dtypeName(t)));
    const auto *p = reinterpret_cast<const u8 *>(w);
#ifdef KVWB_QK_X86
    if (isa == Isa::Avx512 && isaSupported(isa))
        return detail::dotRowsAvx512(t, p, r0, r1, x, y);
    if (isa == Isa::Avx2 && isaSupported(isa))
        return byType<Dot2>(t, p, r0, r1, x, y);
#endif
    dotRowsPortable(t, p, r0, r1, x, y);
}

void dequantRows(DType t, const std::byte *w, int64_t k, int64_t r0, int64_t r1, float *out, Isa isa)
{
    checkArgs(t, k);
    const auto *p = reinterpret_cast<const u8 *>(w);
#ifdef KVWB_QK_X86
    if (isa == Isa::Avx512 && isaSupported(isa))
        return byType<Deq512>(t, p, k, r0, r1, out);
    if (isa == Isa::Avx2 && isaSupported(isa))
        return byType<Deq2>(t, p, k, r0, r1, out);
#endif
    dequantRowsPortable(t, p, k, r0, r1, out);
}

} // namespace kvwb::core::quant
