// The decode kernels of the AVX-512 path (dotRows with Isa::Avx512): the K-quants a super-block at
// a time in 512-bit registers, the 32-element types two blocks a register. Both sum levels in
// integers as the AVX2 path does (core/model/quant_kernels.h).
// GCC 12's AVX-512 intrinsics start some results from a self-initialised "undefined" vector, which
// its flow analysis reports as uninitialised once they are inlined under target attributes.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "core/model/quant_kernels_p.h"

#include <vector>

#ifdef KVWB_QK_X86

namespace kvwb::core::quant::detail {

namespace {

// ---- K-quants on AVX-512 (BW, VNNI): one 32-byte load of a Q4_K / Q5_K row gives 64 levels (two
// sub-blocks: low nibbles, then high) in one 512-bit register, multiplied with the activation's
// 64 levels by one vpmaddubsw, and one vpdpwssd applies both sub-blocks' scales (vpermw spreads
// each sub-block's scale over its 16 lanes) as it accumulates. Q6_K's 128 levels of a half
// block take two registers, and its -32 offset comes from the activation's 16-element sums
// (the scale-weighted sum of the levels times 32) instead of a product per element. The same
// integer sums as the 256-bit path, in other lanes. One row at a time: two or six rows' streams
// at once read from memory at a third of the speed on the 2-core Zen 4 machine measured.

#define KVWB_QK_AVX512_INL                                                                                   \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"), always_inline)) inline

// 32 int16 lanes: a in lanes 0-15, b in 16-31 (vpermw indices).
KVWB_QK_AVX512_INL __m512i halves16(short a, short b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(a)), _mm256_set1_epi16(b), 1);
}

KVWB_QK_AVX512_INL float finishK512(__m512 acc, __m128 accMin)
{
    const __m128 m2 = _mm_add_ps(accMin, _mm_movehl_ps(accMin, accMin));
    return _mm512_reduce_add_ps(acc) + _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
}

// scalesMinsK4 in one register: the 12 bytes at q (and 4 bytes after them, unused) -> bytes 0-7
// the sub-blocks' 6-bit scales, 8-15 their mins.
KVWB_QK_AVX512_INL __m128i scalesMinsK4x(const u8 *q)
{
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(q));
    // low bits: scales 0-3 and mins 0-3 from bytes 0-3 and 4-7 (& 63); scales 4-7 from bytes 8-11's low
    // nibbles, mins 4-7 from their high nibbles
    const __m128i p = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i high = _mm_and_si128(_mm_srli_epi16(p, 4), _mm_set1_epi8(0x0F)); // each byte >> 4
    const __m128i low = _mm_and_si128(_mm_blend_epi32(p, high, 0b1000),
                                      _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
    // bits 4-5 of scales and mins 4-7: the top two bits of bytes 0-3 and 4-7
    const __m128i top =
        _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    return _mm_or_si128(low, _mm_srli_epi16(_mm_and_si128(top, _mm_set1_epi8(char(0xC0))), 2));
}

// One super-block of a row (at b) against the activation's block (levels xq, scale dx, and the
// sums of its levels in bsum: per 32 elements for Q4_K and Q5_K, per 16 for Q6_K) into acc (16
// lanes, summed at the end) and accMin (the mins' terms, 4 lanes).
template <DType T>
KVWB_QK_AVX512_INL void superBlockK512(const u8 *b, const int8_t *xq, const int16_t *bsum, float dx,
                                       __m512 &acc, __m128 &accMin)
{
    __m512i sumz = _mm512_setzero_si512();
    float d;
    if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
        constexpr bool five = T == DType::Q5_K;
        d = f16(b);
        const float dmin = f16(b + 2);
        const __m128i ms8 = scalesMinsK4x(b + 4); // 8 scales, 8 mins
        // mins: sum over sub-blocks of m_j * (sum of the activation's levels in sub-block j)
        const __m128i prod = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(ms8, 8)),
                                            _mm_loadu_si128(reinterpret_cast<const __m128i *>(bsum)));
        accMin = _mm_fmadd_ps(_mm_set1_ps(-(dmin * dx)), _mm_cvtepi32_ps(prod), accMin);
        const __m512i scales = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(ms8)); // 8 int16 in each 128 bits
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        const u8 *qs = b + (five ? 48 : 16);
        const __m512i hb =
            five ? _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 16)))
                 : __m512i{};
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            const __m512i v =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs + 32 * j)));
            __m512i q = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), low4);
            if constexpr (five) {
                const __m512i bit =
                    _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(char(1 << (2 * j)))),
                                       _mm256_set1_epi8(char(2 << (2 * j))), 1);
                q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hb, bit), q, _mm512_set1_epi8(16));
            }
            // scale 2j in the low 256 bits, 2j + 1 in the high (bytes 4j, 4j + 1 and 4j + 2, 4j + 3)
            const __m512i sc = _mm512_shuffle_epi8(scales, halves16(short(((4 * j + 1) << 8) | (4 * j)),
                                                                    short(((4 * j + 3) << 8) | (4 * j + 2))));
            sumz = _mm512_dpwssd_epi32(sumz, sc, _mm512_maddubs_epi16(q, _mm512_loadu_si512(xq + 64 * j)));
        }
    } else { // Q6_K: levels 0-63; sum(scale * level * x) - 32 * sum over 16s of scale * (sum of x)
        d = f16(b + 208);
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 192)));
        // the offset's terms, subtracted from the sums' low 8 lanes
        sumz = _mm512_zextsi256_si512(_mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32(
                _mm256_madd_epi16(s16, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(bsum))), 5)));
        const __m512i scales = _mm512_castsi256_si512(s16);
        const __m512i low4 = _mm512_set1_epi8(0x0F), three = _mm512_set1_epi8(3);
#pragma GCC unroll 2
        for (int n = 0; n < 2; ++n) {
            const u8 *ql = b + 64 * n, *qh = b + 128 + 32 * n;
            const __m512i a = _mm512_loadu_si512(ql); // ql bytes 0-31 | 32-63
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qh));
            const __m512i h01 = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
            const __m512i h23 = _mm512_srli_epi16(h01, 4);
            const __m512i q01 = _mm512_or_si512(_mm512_and_si512(a, low4),
                                                _mm512_slli_epi16(_mm512_and_si512(h01, three), 4));
            const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), low4),
                                                _mm512_slli_epi16(_mm512_and_si512(h23, three), 4));
            // 16 elements per scale: lanes 0-7, 8-15, 16-23, 24-31 take scales 8n + 0..3 (then 4..7)
            const short s0 = short(8 * n);
            const __m512i i01 = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(short(s0 + 1)), _mm_set1_epi16(s0))),
                _mm256_set_m128i(_mm_set1_epi16(short(s0 + 3)), _mm_set1_epi16(short(s0 + 2))), 1);
            const __m512i sc01 = _mm512_permutexvar_epi16(i01, scales);
            const __m512i sc23 =
                _mm512_permutexvar_epi16(_mm512_add_epi16(i01, _mm512_set1_epi16(4)), scales);
            const int8_t *x = xq + 128 * n;
            sumz = _mm512_dpwssd_epi32(sumz, sc01, _mm512_maddubs_epi16(q01, _mm512_loadu_si512(x)));
            sumz = _mm512_dpwssd_epi32(sumz, sc23, _mm512_maddubs_epi16(q23, _mm512_loadu_si512(x + 64)));
        }
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d * dx), _mm512_cvtepi32_ps(sumz), acc);
}

template <DType T>
KVWB_QK_AVX512 void dotRowsK512(const u8 *w, int64_t r0, int64_t r1, const QuantizedActivation &x, float *y)
{
    constexpr int bb = blockBytes<T>();
    const int64_t nb = x.k / 256, rowBytes = nb * bb;
    const int8_t *xq = x.q256.data();
    const float *dx = x.d256.data();
    // Q4_K and Q5_K take the activation's sums per 32 elements (their sub-blocks), once per call
    constexpr int sums = T == DType::Q6_K ? 16 : 8;
    thread_local std::vector<int16_t> bsum32;
    const int16_t *bs = x.bsum16.data();
    if constexpr (sums == 8) {
        bsum32.resize(size_t(x.k / 32));
        for (size_t i = 0; i < bsum32.size(); ++i)
            bsum32[i] = int16_t(bs[2 * i] + bs[2 * i + 1]);
        bs = bsum32.data();
    }
    for (int64_t r = r0; r < r1; ++r) {
        __m512 acc = _mm512_setzero_ps();
        __m128 accMin = _mm_setzero_ps();
        for (int64_t ib = 0; ib < nb; ++ib)
            superBlockK512<T>(w + r * rowBytes + ib * bb, xq + ib * 256, bs + ib * sums, dx[ib], acc, accMin);
        y[r - r0] = finishK512(acc, accMin);
    }
}

// ---- The 32-element types on AVX-512 (BW, VL, VNNI): two blocks' 64 levels in one register as
// unsigned bytes (4- and 5-bit levels as they are, Q8_0's levels + 128), one vpdpbusd with the
// activation's 64 levels. The types without a min subtract 8, 16 or 128 times the activation's
// sums: the activation's 4-element sums times the offset, once per call, start each row's sums,
// so a row pays nothing for it. The scales (and Q4_1 / Q5_1's mins) of 8 blocks are converted
// together (inserted one by one: a gather instruction ran at half the speed); the blocks past the
// last 8 take the same path one at a time in 256-bit registers. The integer sums per block are the
// per-block path's, so the two differ by f32 rounding only.

template <DType T> constexpr int levelOffset()
{
    return T == DType::Q4_0 ? 8 : T == DType::Q5_0 ? 16 : T == DType::Q8_0 ? 128 : 0;
}
// Block b's 32 levels, unsigned, in element order.
template <DType T> KVWB_QK_AVX512_INL __m256i levels32(const u8 *b)
{
    constexpr int at = levelsAt<T>();
    if constexpr (T == DType::Q8_0) {
        return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + at)),
                                _mm256_set1_epi8(char(0x80)));
    } else {
        const __m128i n = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + at));
        __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(n, 4), n), _mm256_set1_epi8(0x0F));
        if constexpr (fifthBit<T>())
            u = _mm256_mask_add_epi8(u, __mmask32(u32(b + at - 4)), u, _mm256_set1_epi8(16));
        return u;
    }
}

// The 16-bit values at p, p + stride, ..., p + 7 stride in one register (the inserts' lane numbers
// must be constants).
template <int stride> KVWB_QK_AVX512_INL __m128i halves8(const u8 *p)
{
    __m128i v = _mm_cvtsi32_si128(int(u16(p)));
    v = _mm_insert_epi16(v, u16(p + 1 * stride), 1);
    v = _mm_insert_epi16(v, u16(p + 2 * stride), 2);
    v = _mm_insert_epi16(v, u16(p + 3 * stride), 3);
    v = _mm_insert_epi16(v, u16(p + 4 * stride), 4);
    v = _mm_insert_epi16(v, u16(p + 5 * stride), 5);
    v = _mm_insert_epi16(v, u16(p + 6 * stride), 6);
    return _mm_insert_epi16(v, u16(p + 7 * stride), 7);
}

template <DType T>
KVWB_QK_AVX512 void dotRows32x512(const u8 *w, int64_t r0, int64_t r1, const QuantizedActivation &x, float *y)
{
    constexpr int bb = blockBytes<T>(), offset = levelOffset<T>();
    const int64_t nb = x.k / 32, n8 = nb / 8 * 8, rowBytes = nb * bb;
    const int8_t *xq = x.q.data();
    const float *dx = x.d.data(), *xs = x.xs.data();
    // -offset times the activation's 4-element sums (zero for the types with a min)
    thread_local std::vector<int32_t> start;
    start.assign(size_t(x.k / 4), 0);
    if constexpr (offset != 0)
        for (int64_t i = 0; i < x.k; i += 32) {
            const __m256i s =
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(char(offset)),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xq + i)));
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(start.data() + i / 4),
                                _mm256_sub_epi32(_mm256_setzero_si256(), s));
        }
    const int32_t *st = start.data();
    __m512i pairLanes[4]; // lanes 0-7 take block 2p's scale, 8-15 block 2p + 1's
    for (int p = 0; p < 4; ++p)
        pairLanes[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * p)),
                                          _mm256_set1_epi32(2 * p + 1), 1);
    for (int64_t r = r0; r < r1; ++r) {
        const u8 *row = w + r * rowBytes;
        __m512 acc = _mm512_setzero_ps();
        __m256 accMin = _mm256_setzero_ps();
        for (int64_t ib = 0; ib < n8; ib += 8) {
            const u8 *b = row + ib * bb;
            const __m256 s8 = _mm256_mul_ps(_mm256_cvtph_ps(halves8<bb>(b)), _mm256_loadu_ps(dx + ib));
            if constexpr (hasMin(T))
                accMin =
                    _mm256_fmadd_ps(_mm256_cvtph_ps(halves8<bb>(b + 2)), _mm256_loadu_ps(xs + ib), accMin);
            const __m512 s16 = _mm512_castps256_ps512(s8);
#pragma GCC unroll 4
            for (int p = 0; p < 4; ++p) {
                const int64_t e = (ib + 2 * p) * 32;
                const __m512i sum =
                    _mm512_dpbusd_epi32(_mm512_loadu_si512(st + e / 4), blockPairLevels<T>(b + 2 * p * bb),
                                        _mm512_loadu_si512(xq + e));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_permutexvar_ps(pairLanes[p], s16), acc);
            }
        }
        __m256 tail = _mm256_setzero_ps();
        float tailMin = 0;
        for (int64_t ib = n8; ib < nb; ++ib) {
            const u8 *b = row + ib * bb;
            const __m256i sum = _mm256_dpbusd_epi32(
                _mm256_loadu_si256(reinterpret_cast<const __m256i *>(st + ib * 8)), levels32<T>(b),
                _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xq + ib * 32)));
            tail = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(f16(b) * dx[ib]), tail);
            if constexpr (hasMin(T))
                tailMin += f16(b + 2) * xs[ib];
        }
        y[r - r0] = _mm512_reduce_add_ps(acc) + hsum8(_mm256_add_ps(tail, accMin)) + tailMin;
    }
}

} // namespace

void dotRowsAvx512(DType t, const u8 *w, int64_t r0, int64_t r1, const QuantizedActivation &x, float *y)
{
    switch (t) {
    case DType::Q4_0:
        return dotRows32x512<DType::Q4_0>(w, r0, r1, x, y);
    case DType::Q4_1:
        return dotRows32x512<DType::Q4_1>(w, r0, r1, x, y);
    case DType::Q5_0:
        return dotRows32x512<DType::Q5_0>(w, r0, r1, x, y);
    case DType::Q5_1:
        return dotRows32x512<DType::Q5_1>(w, r0, r1, x, y);
    case DType::Q8_0:
        return dotRows32x512<DType::Q8_0>(w, r0, r1, x, y);
    case DType::Q4_K:
        return dotRowsK512<DType::Q4_K>(w, r0, r1, x, y);
    case DType::Q5_K:
        return dotRowsK512<DType::Q5_K>(w, r0, r1, x, y);
    case DType::Q6_K:
        return dotRowsK512<DType::Q6_K>(w, r0, r1, x, y);
    default:
        return;
    }
}

} // namespace kvwb::core::quant::detail

#endif // KVWB_QK_X86
