// A prompt's product with block-quantised rows in integers (core/model/quant_kernels.h, "A
// prompt's product in integers"): rows unpacked 16 at a time into their levels (u8) and
// per-sub-block f32 scales a and offsets c, so that a row's element is a * level + c exactly as
// core::dequantize computes it; then, per token and sub-block, P = sum(level * q) by vpdpbusd (16
// rows in the lanes, 4 levels each) and the token's step (per 256 or 32 elements) times
// sum(a * P + c * S), S the token's sum of q over the sub-block.
// GCC 12's AVX-512 intrinsics start some results from a self-initialised "undefined" vector, which
// its flow analysis reports as uninitialised once they are inlined under target attributes.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "core/model/quant_kernels.h"
#include "core/model/quant_kernels_p.h"

#include "core/model/dtype.h"
#include "core/model/quant.h"
#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVWB_QP_X86 1
#endif

namespace kvwb::core::quant {

namespace {

using u8 = uint8_t;

// Elements per sub-block: one scale (and min) each.
int subBlock(DType t)
{
    return t == DType::Q6_K ? 16 : 32;
}

// The a and c of the sub-blocks in 256 elements (one K-quant super-block, or 8 blocks of 32):
// element = a * level + c, the products core::dequantize forms. Levels as unpacked: Q4_0 0-15 for
// level - 8, Q5_0 0-31 for level - 16, Q8_0 0-255 for level - 128, Q6_K 0-63 for level - 32; Q4_1,
// Q5_1, Q4_K and Q5_K as stored, with their mins in c.
void subBlockScales(DType t, const u8 *b, float *a, float *c)
{
    if (dtypeBlockElements(t) == 32) { // 8 blocks of 32: c is the min, or -d times the level offset
        const int bb = dtypeBlockBytes(t);
        const bool min = t == DType::Q4_1 || t == DType::Q5_1;
        const float offset = t == DType::Q8_0   ? 128.0f
                             : t == DType::Q4_0 ? 8.0f
                                                : 16.0f; // (Q8_0: level + 128 stored)
        for (int s = 0; s < 8; ++s) {
            a[s] = f16At(b + bb * s);
            c[s] = min ? f16At(b + bb * s + 2) : -offset * a[s];
        }
        return;
    }
    if (t == DType::Q4_K || t == DType::Q5_K) {
        const float d = f16At(b), dmin = f16At(b + 2);
        for (int s = 0; s < 8; ++s) {
            u8 sc, m;
            scaleMinK4(s, b + 4, sc, m);
            a[s] = d * float(sc);
            c[s] = -(dmin * float(m));
        }
        return;
    }
    const auto *sc = reinterpret_cast<const int8_t *>(b + 192); // Q6_K: element e has scale e / 16
    const float d = f16At(b + 208);
    for (int s = 0; s < 16; ++s) {
        a[s] = d * float(sc[s]);
        c[s] = -32.0f * a[s];
    }
}

// Rows [r, r + rows) (rows <= 16) of k elements as a panel: levels [k / 4][16 rows][4] and a, c
// [k / sub][16 rows]; rows past `rows` are zero (they add nothing and are not stored).
struct Panel
{
    std::vector<u8> level;
    std::vector<float> a, c;
};

#ifdef KVWB_QP_X86
#define KVWB_QP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))

#define KVWB_QP_AVX512_INL                                                                                   \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma"), always_inline)) inline

// Levels 64 * part .. 64 * part + 63 of one super-block of T, in element order.
template <DType T> KVWB_QP_AVX512_INL __m512i levels64(const u8 *b, int part)
{
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    if constexpr (T == DType::Q4_0 || T == DType::Q4_1 || T == DType::Q5_0 || T == DType::Q5_1 ||
                  T == DType::Q8_0) { // blocks 2 part and 2 part + 1 of the 8 at b
        return detail::blockPairLevels<T>(b + detail::blockBytes<T>() * 2 * part);
    } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
        const __m256i v = _mm256_loadu_si256(
            reinterpret_cast<const __m256i *>(b + (T == DType::Q5_K ? 48 : 16) + 32 * part));
        __m512i q =
            _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), low4);
        if constexpr (T == DType::Q5_K) {
            const __m512i hb =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 16)));
            const __m512i bit =
                _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(char(1 << (2 * part)))),
                                   _mm256_set1_epi8(char(2 << (2 * part))), 1);
            q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hb, bit), q, _mm512_set1_epi8(16));
        }
        return q;
    } else { // Q6_K: half n = part / 2; its elements 0-63 (part even) or 64-127
        const int n = part / 2;
        const __m512i a = _mm512_loadu_si512(b + 64 * n);
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 128 + 32 * n));
        __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
        __m512i lo = _mm512_and_si512(a, low4);
        if (part % 2) {
            hh = _mm512_srli_epi16(hh, 4);
            lo = _mm512_and_si512(_mm512_srli_epi16(a, 4), low4);
        }
        return _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(hh, _mm512_set1_epi8(3)), 4));
    }
}

// m[i] = row i's 16 dwords -> m[g] = dword g of rows 0-15 (a 16 x 16 transpose).
KVWB_QP_AVX512_INL void transpose16(__m512i (&m)[16])
{
    __m512i a[16], b[16];
    for (int p = 0; p < 8; ++p) {
        a[2 * p] = _mm512_unpacklo_epi32(m[2 * p], m[2 * p + 1]);
        a[2 * p + 1] = _mm512_unpackhi_epi32(m[2 * p], m[2 * p + 1]);
    }
    for (int q = 0; q < 4; ++q) { // b[4q + c], lane L: rows 4q..4q+3 at dword 4L + c
        b[4 * q + 0] = _mm512_unpacklo_epi64(a[4 * q + 0], a[4 * q + 2]);
        b[4 * q + 1] = _mm512_unpackhi_epi64(a[4 * q + 0], a[4 * q + 2]);
        b[4 * q + 2] = _mm512_unpacklo_epi64(a[4 * q + 1], a[4 * q + 3]);
        b[4 * q + 3] = _mm512_unpackhi_epi64(a[4 * q + 1], a[4 * q + 3]);
    }
    for (int c = 0; c < 4; ++c) {
        const __m512i s0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x88),
                      s1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xDD);
        const __m512i s2 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x88),
                      s3 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xDD);
        m[c] = _mm512_shuffle_i32x4(s0, s2, 0x88);
        m[4 + c] = _mm512_shuffle_i32x4(s1, s3, 0x88);
        m[8 + c] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
        m[12 + c] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
    }
}

// packPanel's levels, vectorised: per 64 elements, 16 rows' levels transposed into the panel.
template <DType T> KVWB_QP_AVX512 void packLevels512(const u8 *w, int64_t k, int64_t r, int rows, u8 *level)
{
    const int bb = dtypeBlockBytes(T) * (256 / dtypeBlockElements(T)); // bytes per 256 elements
    const int64_t nb = k / 256, rowBytes = nb * bb;
    for (int64_t ib = 0; ib < nb; ++ib)
        for (int part = 0; part < 4; ++part) {
            __m512i m[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i)
                m[i] =
                    i < rows ? levels64<T>(w + (r + i) * rowBytes + ib * bb, part) : _mm512_setzero_si512();
            transpose16(m);
            u8 *out = level + (ib * 64 + part * 16) * 64;
#pragma GCC unroll 16
            for (int g = 0; g < 16; ++g)
                _mm512_storeu_si512(out + g * 64, m[g]);
        }
}

KVWB_QP_AVX512 void packPanel(DType t, const u8 *w, int64_t k, int64_t r, int rows, Panel &p)
{
    const int sub = subBlock(t), subs = 256 / sub, bb = dtypeBlockBytes(t) * (256 / dtypeBlockElements(t));
    const int64_t nb = k / 256, rowBytes = nb * bb;
    p.level.resize(size_t(k * 16));
    p.a.assign(size_t(k / sub * 16), 0.0f);
    p.c.assign(size_t(k / sub * 16), 0.0f);
    if (t == DType::Q4_0)
        packLevels512<DType::Q4_0>(w, k, r, rows, p.level.data());
    else if (t == DType::Q4_1)
        packLevels512<DType::Q4_1>(w, k, r, rows, p.level.data());
    else if (t == DType::Q5_0)
        packLevels512<DType::Q5_0>(w, k, r, rows, p.level.data());
    else if (t == DType::Q5_1)
        packLevels512<DType::Q5_1>(w, k, r, rows, p.level.data());
    else if (t == DType::Q8_0)
        packLevels512<DType::Q8_0>(w, k, r, rows, p.level.data());
    else if (t == DType::Q4_K)
        packLevels512<DType::Q4_K>(w, k, r, rows, p.level.data());
    else if (t == DType::Q5_K)
        packLevels512<DType::Q5_K>(w, k, r, rows, p.level.data());
    else
        packLevels512<DType::Q6_K>(w, k, r, rows, p.level.data());
    float a[16], c[16];
    for (int i = 0; i < rows; ++i)
        for (int64_t ib = 0; ib < nb; ++ib) {
            subBlockScales(t, w + (r + i) * rowBytes + ib * bb, a, c);
            for (int s = 0; s < subs; ++s) {
                p.a[size_t((ib * subs + s) * 16 + i)] = a[s];
                p.c[size_t((ib * subs + s) * 16 + i)] = c[s];
            }
        }
}

// The panel against tokens [t0, t0 + TT): y[(t0 + i) * ldy + lane] for the lanes of `rows`. SUB
// elements per sub-block (one a and c), AB per step of the activation (x.d).
template <int SUB, int AB, int TT>
KVWB_QP_AVX512 void panelTokens(const Panel &p, const PromptActivations &x, int64_t t0, float *y, int64_t ldy,
                                __mmask16 rows)
{
    const int64_t k = x.k, nab = k / AB, subsPerRow = k / SUB;
    constexpr int subs = AB / SUB, groups = SUB / 4;
    const float *sums = SUB == 32 ? x.sum32.data() : x.sum16.data();
    __m512 tot[TT];
#pragma GCC unroll 8
    for (int i = 0; i < TT; ++i)
        tot[i] = _mm512_setzero_ps();
    for (int64_t ab = 0; ab < nab; ++ab) {
        __m512 acc[TT];
#pragma GCC unroll 8
        for (int i = 0; i < TT; ++i)
            acc[i] = _mm512_setzero_ps();
        for (int s = 0; s < subs; ++s) {
            const int64_t js = ab * subs + s;
            __m512i sum[TT];
#pragma GCC unroll 8
            for (int i = 0; i < TT; ++i)
                sum[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int g = 0; g < groups; ++g) {
                const __m512i w = _mm512_loadu_si512(p.level.data() + (js * groups + g) * 64);
                const int8_t *q = x.q.data() + t0 * k + js * SUB + 4 * g;
#pragma GCC unroll 8
                for (int i = 0; i < TT; ++i) {
                    int32_t four;
                    std::memcpy(&four, q + i * k, 4);
                    sum[i] = _mm512_dpbusd_epi32(sum[i], w, _mm512_set1_epi32(four));
                }
            }
            const __m512 a = _mm512_loadu_ps(p.a.data() + js * 16), c = _mm512_loadu_ps(p.c.data() + js * 16);
#pragma GCC unroll 8
            for (int i = 0; i < TT; ++i) {
                acc[i] = _mm512_fmadd_ps(a, _mm512_cvtepi32_ps(sum[i]), acc[i]);
                acc[i] = _mm512_fmadd_ps(c, _mm512_set1_ps(sums[(t0 + i) * subsPerRow + js]), acc[i]);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < TT; ++i)
            tot[i] = _mm512_fmadd_ps(_mm512_set1_ps(x.d[size_t((t0 + i) * nab + ab)]), acc[i], tot[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; ++i)
        _mm512_mask_storeu_ps(y + (t0 + i) * ldy, rows, tot[i]);
}

template <int SUB, int AB>
void panelAll(const Panel &p, const PromptActivations &x, float *y, int64_t ldy, __mmask16 rows)
{
    int64_t t = 0;
    for (; t + 8 <= x.tokens; t += 8)
        panelTokens<SUB, AB, 8>(p, x, t, y, ldy, rows);
    for (; t < x.tokens; ++t)
        panelTokens<SUB, AB, 1>(p, x, t, y, ldy, rows);
}
#endif

} // namespace

int promptBlock(DType t) noexcept
{
    return dtypeBlockElements(t) == 256 ? 256 : 32;
}

void quantizePrompt(const float *x, int64_t tokens, int64_t k, int block, PromptActivations &out)
{
    if (k <= 0 || k % 256 != 0 || tokens < 0 || (block != 256 && block != 32))
        throw Error(ErrorCode::Shape,
                    fmt::format("a prompt of {} rows of {} elements in blocks of {}: not whole "
                                "blocks of 256 elements rounded per 32 or 256",
                                tokens, k, block));
    out.k = k;
    out.tokens = tokens;
    out.block = block;
    out.q.resize(size_t(tokens * k));
    out.d.resize(size_t(tokens * (k / block)));
    out.sum16.resize(size_t(tokens * (k / 16)));
    out.sum32.resize(size_t(tokens * (k / 32)));
    QuantizedActivation one; // the rounding of one token, exactly
    for (int64_t t = 0; t < tokens; ++t) {
        quantizeActivation(x + t * k, k, one, block == 32, block == 256);
        const auto &q = block == 32 ? one.q : one.q256;
        const auto &d = block == 32 ? one.d : one.d256;
        std::copy(q.begin(), q.end(), out.q.begin() + t * k);
        std::copy(d.begin(), d.end(), out.d.begin() + t * (k / block));
        for (int64_t g = 0; g < k / 16; ++g) {
            int sum = 0;
            for (int i = 0; i < 16; ++i)
                sum += q[size_t(g * 16 + i)];
            out.sum16[size_t(t * (k / 16) + g)] = float(sum);
        }
        for (int64_t g = 0; g < k / 32; ++g)
            out.sum32[size_t(t * (k / 32) + g)] =
                out.sum16[size_t(t * (k / 16) + 2 * g)] + out.sum16[size_t(t * (k / 16) + 2 * g + 1)];
    }
}

bool hasPromptRows(DType t, int64_t k, Isa isa) noexcept
{
#ifdef KVWB_QP_X86
    return isa == Isa::Avx512 && isaSupported(isa) && hasKernels(t) && k > 0 && k % 256 == 0;
#else
    (void)t;
    (void)k;
    (void)isa;
    return false;
#endif
}

void promptRows(DType t, const std::byte *w, int64_t r0, int64_t r1, const PromptActivations &x, float *y,
                int64_t ldy, Isa isa)
{
    if (!hasPromptRows(t, x.k, isa))
        throw Error(ErrorCode::Unsupported,
                    fmt::format("no integer prompt product for {} rows of {} elements on the {} path",
                                dtypeName(t), x.k, isaName(isa)));
    if (x.block != promptBlock(t) || x.q.size() != size_t(x.tokens * x.k) ||
        x.d.size() != size_t(x.tokens * (x.k / x.block)) || x.sum16.size() != size_t(x.tokens * (x.k / 16)) ||
        x.sum32.size() != size_t(x.tokens * (x.k / 32)))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{} rows need the prompt rounded by quantizePrompt per {} elements",
                                dtypeName(t), promptBlock(t)));
#ifdef KVWB_QP_X86
    thread_local Panel panel;
    const auto *p = reinterpret_cast<const u8 *>(w);
    for (int64_t r = r0; r < r1; r += 16) {
        const int rows = int(std::min<int64_t>(16, r1 - r));
        packPanel(t, p, x.k, r, rows, panel);
        const auto mask = __mmask16((1u << rows) - 1);
        if (dtypeBlockElements(t) == 32)
            panelAll<32, 32>(panel, x, y + (r - r0), ldy, mask);
        else if (subBlock(t) == 32)
            panelAll<32, 256>(panel, x, y + (r - r0), ldy, mask);
        else
            panelAll<16, 256>(panel, x, y + (r - r0), ldy, mask);
    }
#else
    (void)w;
    (void)r0;
    (void)r1;
    (void)y;
    (void)ldy;
#endif
}

} // namespace kvwb::core::quant
