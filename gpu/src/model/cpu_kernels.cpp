#include "gpu/src/model/cpu_simd_p.h"

#include "gpu/src/model/cpu_kernels_p.h"
#include "gpu/src/model/row_team_p.h"

#include "core/model/quant.h"
#include "core/model/quant_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#ifdef __linux__
#include <dlfcn.h>
#include <sys/mman.h>
#endif

namespace kvwb::gpu::detail {

namespace {

inline float bf16ToFloat(uint16_t v)
{
    const uint32_t bits = uint32_t(v) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

#ifdef KVWB_X86_AVX512
// Rows [r0, r1) of y = W x, one row at a time: each row is one contiguous stream (four rows
// interleaved ran at half the bandwidth here), two accumulator chains; columns past a multiple of
// 32 are summed in scalar f32.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void
bf16GemvRows(const uint16_t *w, const uint16_t *x, float *y, int64_t cols, int64_t r0, int64_t r1)
{
    const int64_t body64 = cols / 64 * 64, body = cols / 32 * 32;
    for (int64_t r = r0; r < r1; ++r) {
        const uint16_t *row = w + r * cols;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t c = 0;
        for (; c < body64; c += 64) {
            a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(row + c),
                                  (__m512bh)_mm512_loadu_si512(x + c));
            a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(row + c + 32),
                                  (__m512bh)_mm512_loadu_si512(x + c + 32));
        }
        for (; c < body; c += 32)
            a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(row + c),
                                  (__m512bh)_mm512_loadu_si512(x + c));
        float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        for (; c < cols; ++c)
            s += bf16ToFloat(row[c]) * bf16ToFloat(x[c]);
        y[r] = s;
    }
}

// The same for f32 rows (fused multiply-adds, two chains of 16 lanes).
__attribute__((target("avx512f,fma"))) void f32GemvRows(const float *w, const float *x, float *y,
                                                        int64_t cols, int64_t r0, int64_t r1)
{
    const int64_t body32 = cols / 32 * 32, body = cols / 16 * 16;
    for (int64_t r = r0; r < r1; ++r) {
        const float *row = w + r * cols;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t c = 0;
        for (; c < body32; c += 32) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(row + c), _mm512_loadu_ps(x + c), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(row + c + 16), _mm512_loadu_ps(x + c + 16), a1);
        }
        for (; c < body; c += 16)
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(row + c), _mm512_loadu_ps(x + c), a0);
        float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        for (; c < cols; ++c)
            s += row[c] * x[c];
        y[r] = s;
    }
}
#endif

#ifdef KVWB_X86_AVX512
#define KVWB_KV_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

// The four 16-lane sums a, b, c, d reduced to [sum a, sum b, sum c, sum d]: a transpose-and-add
// (15 adds and shuffles for four dot products instead of 4 x 8).
__attribute__((target("avx512f"))) inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// 16 lanes of a cache row widened exactly to f32: f32, bf16 (its bits) or f16; lanes outside m are 0.
KVWB_KV_TARGET inline __m512 kvLanes(const float *p, __mmask16 m)
{
    return _mm512_maskz_loadu_ps(m, p);
}
KVWB_KV_TARGET inline __m512 kvLanes(const uint16_t *p, __mmask16 m)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
KVWB_KV_TARGET inline __m512 kvLanes(const c10::Half *p, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

KVWB_KV_TARGET inline __mmask16 headMask(int64_t left)
{
    return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
}

// out[0, hd) += p * row[0, hd) for a row of the cache's type, in f32.
template <class K> KVWB_KV_TARGET inline void axpyRow(float *out, float p, const K *row, int64_t hd)
{
    const __m512 pv = _mm512_set1_ps(p);
    for (int64_t d = 0; d < hd; d += 16) {
        const __mmask16 m = headMask(hd - d);
        _mm512_mask_storeu_ps(out + d, m,
                              _mm512_fmadd_ps(pv, kvLanes(row + d, m), _mm512_maskz_loadu_ps(m, out + d)));
    }
}

// Scores of one query (already K q, f32) scaled, soft-capped and exponentiated in place, the
// softmax's max subtracted; returns 1 / their sum.
inline float softmaxInPlace(float *scores, int64_t n, float scale, float cap)
{
    float hi = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
        float s = scores[j] * scale;
        if (cap > 0)
            s = std::tanh(s / cap) * cap;
        scores[j] = s;
        hi = std::max(hi, s);
    }
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) {
        scores[j] = std::exp(scores[j] - hi);
        sum += scores[j];
    }
    return 1.0f / sum;
}

// One query head over keys [k0, k1) of its kv head: scores = K q (the row kernels), scaled and
// soft-capped, softmax in f32, out = probs V; f32 throughout, out rounded once by the caller. Here
// q and the cache are both bf16 (bits); attendGroup serves an f32 query.
inline void attendHead(const uint16_t *q, const uint16_t *keys, const uint16_t *values, int64_t k0,
                       int64_t k1, int64_t hd, float scale, float cap, float *scores, float *out)
{
    const int64_t n = k1 - k0;
    bf16GemvRows(keys + k0 * hd, q, scores, hd, 0, n);
    const float inv = softmaxInPlace(scores, n, scale, cap);
    std::fill(out, out + hd, 0.0f);
    for (int64_t j = 0; j < n; ++j)
        axpyRow(out, scores[j] * inv, values + (k0 + j) * hd, hd);
}

// G query heads (f32, hd apart from q) that share one kv head, over its keys [k0, k1): each cache
// row (f32, or bf16 bits / f16 widened exactly) is read once for the G heads, 4 rows at a time
// (their sums reduced together), and the value sum runs over 64 dimensions at a time with the
// G x 4 sums held in registers. Per score, the same fused multiply-adds over the dimensions in
// order; per output element, out += p_j * v_j in key order, as attendHead does.
template <int G, class K>
KVWB_KV_TARGET void attendGroup(const float *q, const K *keys, const K *values, int64_t k0, int64_t k1,
                                int64_t hd, float scale, float cap, float *scores, float *out)
{
    const int64_t n = k1 - k0;
    const K *kb = keys + k0 * hd;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        __m512 acc[G][4];
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i)
#pragma GCC unroll 4
            for (int r = 0; r < 4; ++r)
                acc[i][r] = _mm512_setzero_ps();
        for (int64_t d = 0; d < hd; d += 16) {
            const __mmask16 m = headMask(hd - d);
            __m512 kv[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; ++r)
                kv[r] = kvLanes(kb + (j + r) * hd + d, m);
#pragma GCC unroll 4
            for (int i = 0; i < G; ++i) {
                const __m512 qv = _mm512_maskz_loadu_ps(m, q + i * hd + d);
#pragma GCC unroll 4
                for (int r = 0; r < 4; ++r)
                    acc[i][r] = _mm512_fmadd_ps(kv[r], qv, acc[i][r]);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i)
            _mm_storeu_ps(scores + i * n + j, reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
    }
    for (; j < n; ++j) {
        __m512 acc[G];
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i)
            acc[i] = _mm512_setzero_ps();
        for (int64_t d = 0; d < hd; d += 16) {
            const __mmask16 m = headMask(hd - d);
            const __m512 kv = kvLanes(kb + j * hd + d, m);
#pragma GCC unroll 4
            for (int i = 0; i < G; ++i)
                acc[i] = _mm512_fmadd_ps(kv, _mm512_maskz_loadu_ps(m, q + i * hd + d), acc[i]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i)
            scores[i * n + j] = _mm512_reduce_add_ps(acc[i]);
    }
    float inv[G];
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i)
        inv[i] = softmaxInPlace(scores + i * n, n, scale, cap);
    const K *vb = values + k0 * hd;
    for (int64_t d0 = 0; d0 < hd; d0 += 64) {
        const int nc = int(std::min<int64_t>(4, (hd - d0 + 15) / 16));
        __mmask16 m[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c)
            m[c] = c < nc ? headMask(hd - d0 - 16 * c) : __mmask16(0);
        __m512 acc[G][4];
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i)
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c)
                acc[i][c] = _mm512_setzero_ps();
        for (int64_t jj = 0; jj < n; ++jj) {
            __m512 v[4];
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c)
                v[c] = kvLanes(vb + jj * hd + d0 + 16 * c, m[c]);
#pragma GCC unroll 4
            for (int i = 0; i < G; ++i) {
                const __m512 pv = _mm512_set1_ps(scores[i * n + jj] * inv[i]);
#pragma GCC unroll 4
                for (int c = 0; c < 4; ++c)
                    acc[i][c] = _mm512_fmadd_ps(pv, v[c], acc[i][c]);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i)
#pragma GCC unroll 4
            for (int c = 0; c < nc; ++c)
                _mm512_mask_storeu_ps(out + i * hd + d0 + 16 * c, m[c], acc[i][c]);
    }
}

// Heads [h, h + g) of one kv head (g <= 4, q f32) through attendGroup<g>.
template <class K>
void attendGroupOf(int g, const float *q, const K *keys, const K *values, int64_t k0, int64_t k1, int64_t hd,
                   float scale, float cap, float *scores, float *out)
{
    switch (g) {
    case 1:
        return attendGroup<1>(q, keys, values, k0, k1, hd, scale, cap, scores, out);
    case 2:
        return attendGroup<2>(q, keys, values, k0, k1, hd, scale, cap, scores, out);
    case 3:
        return attendGroup<3>(q, keys, values, k0, k1, hd, scale, cap, scores, out);
    default:
        return attendGroup<4>(q, keys, values, k0, k1, hd, scale, cap, scores, out);
    }
}
#endif

#ifdef KVWB_X86_AVX512
// row[J], or zeros past the row's NR accumulators.
template <int J, int NR>
__attribute__((target("avx512f"), always_inline)) inline __m512 lane(const __m512 (&row)[NR])
{
    if constexpr (J < NR)
        return row[J];
    else
        return _mm512_setzero_ps();
}

#define KVWB_TILE_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

// c[i][j] = the sum of acc[i][j]'s lanes (+ bias[j]).
template <int MR, int NR>
KVWB_TILE_TARGET __attribute__((always_inline)) inline void storeTile(__m512 (&acc)[MR][NR], float *c,
                                                                      int64_t ldc, const float *bias)
{
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
        const __m128 s = reduce4(lane<0>(acc[i]), lane<1>(acc[i]), lane<2>(acc[i]), lane<3>(acc[i]));
        alignas(16) float out[4];
        _mm_store_ps(out, s);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j)
            c[i * ldc + j] = bias ? out[j] + bias[j] : out[j];
    }
}

// One step of a tile: 16 columns (those of mask m) from column kk, one FMA per accumulator.
template <int MR, int NR>
KVWB_TILE_TARGET __attribute__((always_inline)) inline void
tileStep(__m512 (&acc)[MR][NR], const float *x, int64_t k, const float *w, int64_t kk, __mmask16 m)
{
    __m512 wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j)
        wv[j] = _mm512_maskz_loadu_ps(m, w + j * k + kk);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + i * k + kk);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j)
            acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
}

// c[i][j] = x_i . w_j (+ bias[j]) for MR rows of x and NR rows of w (f32, k columns): MR x NR
// accumulators of 16 lanes, the last partial step masked (zeros add nothing).
template <int MR, int NR>
KVWB_TILE_TARGET inline void tile(const float *x, int64_t k, const float *w, float *c, int64_t ldc,
                                  const float *bias)
{
    __m512 acc[MR][NR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j)
            acc[i][j] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 16 <= k; kk += 16)
        tileStep<MR, NR>(acc, x, k, w, kk, __mmask16(0xffff));
    if (kk < k)
        tileStep<MR, NR>(acc, x, k, w, kk, __mmask16((1u << (k - kk)) - 1));
    storeTile(acc, c, ldc, bias);
}

// bf16 -> f32 (exact: the bf16 bits are the f32's top half).
KVWB_TILE_TARGET void widenBf16(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(
            dst + i,
            _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i))), 16)));
    for (; i < n; ++i)
        dst[i] = bf16ToFloat(src[i]);
}

#define KVWB_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

// One step of a bf16 tile: 32 columns (those of mask m) from column kk, one vdpbf16ps per
// accumulator (two columns' exact products added to each lane in turn).
template <int MR, int NR>
KVWB_BF16_TARGET __attribute__((always_inline)) inline void
bf16TileStep(__m512 (&acc)[MR][NR], const uint16_t *x, int64_t k, const uint16_t *w, int64_t kk, __mmask32 m)
{
    __m512bh wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j)
        wv[j] = (__m512bh)_mm512_maskz_loadu_epi16(m, w + j * k + kk);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
        const auto xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x + i * k + kk);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j)
            acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
}

// tile for bf16 x and w: the products are exact in f32 and summed in f32, two columns per lane
// per instruction (twice the f32 tiles' multiply-adds per instruction).
template <int MR, int NR>
KVWB_BF16_TARGET inline void tile(const uint16_t *x, int64_t k, const uint16_t *w, float *c, int64_t ldc,
                                  const float *bias)
{
    __m512 acc[MR][NR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j)
            acc[i][j] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 32 <= k; kk += 32)
        bf16TileStep<MR, NR>(acc, x, k, w, kk, __mmask32(0xffffffffu));
    if (kk < k)
        bf16TileStep<MR, NR>(acc, x, k, w, kk, __mmask32((uint32_t(1) << (k - kk)) - 1));
    storeTile(acc, c, ldc, bias);
}

#undef KVWB_BF16_TARGET

// One tile of MR rows of x against nr (1-4) rows of w: f32, or bf16 on vdpbf16ps.
template <int MR, class T>
KVWB_TILE_TARGET inline void tileRows(int nr, const T *x, int64_t k, const T *w, float *c, int64_t ldc,
                                      const float *bias)
{
    switch (nr) {
    case 4:
        return tile<MR, 4>(x, k, w, c, ldc, bias);
    case 3:
        return tile<MR, 3>(x, k, w, c, ldc, bias);
    case 2:
        return tile<MR, 2>(x, k, w, c, ldc, bias);
    default:
        return tile<MR, 1>(x, k, w, c, ldc, bias);
    }
}

// Columns [j0, j1) of c [m, ldc] = x [m, k] w^T (+ bias) for x and w [n, k] (row-major): f32 x
// with f32 or bf16 w, or bf16 x and w (bf16Products()); f32 out. Rows of x in chunks that stay in
// L2 while four rows of w at a time (in L1; bf16 rows under f32 x widened to f32 once for the
// chunk, exactly) pass over them; each element is one tile's dot product, whatever the split.
// bf16 x bf16 products are exact in f32, so a bf16 product's sums are those of f32 arithmetic, as
// torch's bf16 matmul accumulates.
template <class TX, class TW>
KVWB_TILE_TARGET void gemmCols(const TX *x, int64_t m, const TW *w, int64_t k, int64_t j0, int64_t j1,
                               float *c, int64_t ldc, const float *bias)
{
    using TT = std::conditional_t<std::is_same_v<TX, float>, float, uint16_t>; // the tiles' w
    // ~256 KiB of x per chunk: 2 MiB L2 holds it and the w rows passing over it
    const int64_t chunk = std::max<int64_t>(4, (int64_t(256) << 10) / (int64_t(sizeof(TX)) * k) / 4 * 4);
    std::vector<float> wide(std::is_same_v<TT, TW> ? 0 : size_t(4 * k));
    for (int64_t m0 = 0; m0 < m; m0 += chunk) {
        const int64_t m1 = std::min(m, m0 + chunk);
        for (int64_t j = j0; j < j1; j += 4) {
            const int nr = int(std::min<int64_t>(4, j1 - j));
            const TT *wj;
            if constexpr (std::is_same_v<TT, TW>) {
                wj = w + j * k;
            } else {
                widenBf16(w + j * k, wide.data(), nr * k);
                wj = wide.data();
            }
            const float *bj = bias ? bias + j : nullptr;
            int64_t i = m0;
            for (; i + 4 <= m1; i += 4)
                tileRows<4>(nr, x + i * k, k, wj, c + i * ldc + j, ldc, bj);
            switch (m1 - i) {
            case 3:
                tileRows<3>(nr, x + i * k, k, wj, c + i * ldc + j, ldc, bj);
                break;
            case 2:
                tileRows<2>(nr, x + i * k, k, wj, c + i * ldc + j, ldc, bj);
                break;
            case 1:
                tileRows<1>(nr, x + i * k, k, wj, c + i * ldc + j, ldc, bj);
                break;
            default:
                break;
            }
        }
    }
}
#undef KVWB_TILE_TARGET
#endif

// cblas_sgemm of the BLAS LibTorch links (libblas.so.3: OpenBLAS on Debian), looked up at run time
// like openblas_set_num_threads; null where there is none.
using CblasSgemm = void (*)(int order, int transA, int transB, int m, int n, int k, float alpha,
                            const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
CblasSgemm cblasSgemm()
{
#ifdef __linux__
    static const auto f = reinterpret_cast<CblasSgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
    return f;
#else
    return nullptr;
#endif
}

// c [m, ldc] columns [0, n) = x [m, k] w^T for an f32 w [n, k] (row-major), through the BLAS's sgemm.
void sgemmNT(CblasSgemm gemm, const float *x, int64_t m, const float *w, int64_t k, int64_t n, float *c,
             int64_t ldc)
{
    constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
    gemm(kRowMajor, kNoTrans, kTrans, int(m), int(n), int(k), 1.0f, x, int(k), w, int(k), 0.0f, c, int(ldc));
}

// c [m, ldc] columns [0, n) += bias [n], row by row.
void addBias(float *c, int64_t m, int64_t n, int64_t ldc, const float *bias)
{
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
            c[i * ldc + j] += bias[j];
}

// Whether an f32 product of m rows goes through the BLAS: its packed kernels win on long prompts,
// the tiles (no packing) on short ones (m < 256).
bool blasRows(int64_t m)
{
    return m >= 256;
}

// One share of a prompt product: columns [j0, j1) of c = x w^T (+ bias). f32 weights go through
// the BLAS's sgemm on this thread alone where there is one (OpenBLAS's packed kernels ran a
// 512-token f32 prefill ~1.4x faster than the tiles here); bf16, and f32 without a BLAS, through
// the tiles.
template <class TW>
void productShare(const float *x, int64_t m, const TW *w, int64_t k, int64_t j0, int64_t j1, float *c,
                  int64_t ldc, const float *bias)
{
    if constexpr (std::is_same_v<TW, float>) {
        if (const auto gemm = blasRows(m) ? cblasSgemm() : nullptr) {
            sgemmNT(gemm, x, m, w + j0 * k, k, j1 - j0, c + j0, ldc);
            if (bias)
                addBias(c + j0, m, j1 - j0, ldc, bias + j0);
            return;
        }
    }
#ifdef KVWB_X86_AVX512
    gemmCols(x, m, w, k, j0, j1, c, ldc, bias);
#else
    TORCH_CHECK(false, "prompt products: not built for this CPU");
#endif
}

// The same for bf16 x and w on AVX-512 BF16 (bf16Products()).
void productShare(const uint16_t *x, int64_t m, const uint16_t *w, int64_t k, int64_t j0, int64_t j1,
                  float *c, int64_t ldc, const float *bias)
{
#ifdef KVWB_X86_AVX512
    gemmCols(x, m, w, k, j0, j1, c, ldc, bias);
#else
    TORCH_CHECK(false, "prompt products: not built for this CPU");
#endif
}

// Whether bf16 prompt products run on vdpbf16ps tiles (x kept in bf16) rather than widened to f32.
bool bf16Products()
{
#ifdef KVWB_X86_AVX512
    static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    return yes;
#else
    return false;
#endif
}

// Columns of the products per call: fixed, so that each output element comes from the same call
// (same shape, same BLAS kernel path) on any thread count; the team splits whole chunks.
// (sgemm packs x once per call: 128 columns ran a 512-token f32 prefill ~10% faster than 64; the
// tiles read w in 4-row blocks either way.)
int64_t productChunk(bool blas)
{
    return blas ? 128 : 64;
}

// y[i] = x[i] w[i]^T (+ bias) for i < b: x [b, m, k] f32 contiguous, w rows of k (batch stride
// wStride), y [b, m, n] f32; (product, column chunk) pairs split over the team.
template <class TX, class TW>
void teamProducts(int64_t b, const TX *x, int64_t m, const TW *w, int64_t wStride, int64_t n, int64_t k,
                  float *y, const float *bias)
{
    const int64_t chunk = productChunk(std::is_same_v<TW, float> && blasRows(m) && cblasSgemm());
    const int64_t chunks = (n + chunk - 1) / chunk;
    splitRows(
        b * chunks, m * k * chunk,
        [&](int64_t u0, int64_t u1) {
            for (int64_t u = u0; u < u1; ++u) {
                const int64_t i = u / chunks, j0 = u % chunks * chunk, j1 = std::min(n, j0 + chunk);
                productShare(x + i * m * k, m, w + i * wStride, k, j0, j1, y + i * m * n, n, bias);
            }
        },
        1);
}

// y[i] = x[i] w[i]^T (+ bias) as teamProducts, for x [b, m, k] and w (rows of k, batch stride
// wStride) of one dtype: bf16 x and w on the vdpbf16ps tiles (bf16Products()), else x widened to f32.
void tensorProducts(const torch::Tensor &x, int64_t b, int64_t m, const torch::Tensor &w, int64_t wStride,
                    int64_t n, int64_t k, float *y, const float *bias)
{
    if (x.scalar_type() == torch::kBFloat16 && bf16Products()) {
        const auto xb = x.contiguous();
        teamProducts(b, reinterpret_cast<const uint16_t *>(xb.data_ptr()), m,
                     reinterpret_cast<const uint16_t *>(w.data_ptr()), wStride, n, k, y, bias);
        return;
    }
    const auto xc = x.to(torch::kFloat32).contiguous();
    const float *xp = xc.data_ptr<float>();
    if (w.scalar_type() == torch::kBFloat16)
        teamProducts(b, xp, m, reinterpret_cast<const uint16_t *>(w.data_ptr()), wStride, n, k, y, bias);
    else
        teamProducts(b, xp, m, w.data_ptr<float>(), wStride, n, k, y, bias);
}

#ifdef __linux__
struct Mapping
{
    void *base = nullptr;
    size_t bytes = 0;
    ~Mapping()
    {
        if (base)
            munmap(base, bytes);
    }
};
#endif

} // namespace

bool haveRowGemv(torch::Dtype dtype)
{
#ifdef KVWB_X86_AVX512
    // (the prompt kernels' masked byte and word loads need BW and VL: not on Knights Landing)
    static const bool f32 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") &&
                            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    static const bool bf16 = f32 && __builtin_cpu_supports("avx512bf16");
    return dtype == torch::kFloat32 ? f32 : dtype == torch::kBFloat16 ? bf16 : false;
#else
    (void)dtype;
    return false;
#endif
}

torch::Tensor rowGemv(const torch::Tensor &w, const torch::Tensor &x, const torch::Tensor &bias)
{
    const auto dt = w.scalar_type();
    TORCH_CHECK(
        (dt == torch::kBFloat16 || dt == torch::kFloat32) && x.scalar_type() == dt && w.dim() == 2 &&
            w.is_contiguous() && w.device().is_cpu() && x.numel() == w.size(1),
        "rowGemv: expected W [out, in] and x [in] of one dtype (f32 or bf16), contiguous, on the CPU");
    const int64_t rows = w.size(0), cols = w.size(1);
    const auto xc = x.contiguous();
    auto y = torch::empty({1, rows}, w.options().dtype(torch::kFloat32));
#ifdef KVWB_X86_AVX512
    float *yp = y.data_ptr<float>();
    if (dt == torch::kBFloat16) {
        const auto *wp = reinterpret_cast<const uint16_t *>(w.data_ptr());
        const auto *xp = reinterpret_cast<const uint16_t *>(xc.data_ptr());
        splitRows(rows, cols, [&](int64_t r0, int64_t r1) { bf16GemvRows(wp, xp, yp, cols, r0, r1); });
    } else {
        const float *wp = w.data_ptr<float>(), *xp = xc.data_ptr<float>();
        splitRows(rows, cols, [&](int64_t r0, int64_t r1) { f32GemvRows(wp, xp, yp, cols, r0, r1); });
    }
#else
    TORCH_CHECK(false, "rowGemv: not built for this CPU");
#endif
    if (bias.defined())
        y.add_(bias.to(torch::kFloat32));
    return dt == torch::kFloat32 ? y : y.to(dt);
}

torch::Tensor attendOneCpu(const torch::Tensor &q, const torch::Tensor &keys, const torch::Tensor &values,
                           int64_t k0, int64_t k1, double scale, double softcap)
{
    const auto dt = q.scalar_type(), kt = keys.scalar_type();
    TORCH_CHECK((dt == torch::kFloat32 || dt == torch::kBFloat16) &&
                    (kt == torch::kFloat32 || kt == torch::kBFloat16 || kt == torch::kHalf) &&
                    values.scalar_type() == kt && q.dim() == 3 && q.size(1) == 1 && keys.dim() == 3 &&
                    keys.is_contiguous() && values.is_contiguous() && keys.sizes() == values.sizes() &&
                    q.size(2) == keys.size(2) && q.size(0) % keys.size(0) == 0 && 0 <= k0 && k0 < k1 &&
                    k1 <= keys.size(1),
                "attendOneCpu: expected q [heads, 1, hd] (f32 or bf16) and K/V [kvHeads, capacity, hd] (f32, "
                "bf16 or f16)");
    const int64_t nh = q.size(0), nkv = keys.size(0), cap = keys.size(1), hd = q.size(2), rep = nh / nkv;
    // q meets the cache in its own type when they share one, else widened to f32.
    const bool native = dt == kt;
    const auto qc = native ? q.contiguous() : q.to(torch::kFloat32).contiguous();
    auto out = torch::empty({1, nh * hd}, q.options().dtype(torch::kFloat32));
#ifdef KVWB_X86_AVX512
    float *op = out.data_ptr<float>();
    const int64_t n = k1 - k0;
    const int64_t work = 2 * n * hd; // heads over the team once the keys outweigh a handover
    if (native && dt == torch::kBFloat16) {
        const auto *qp = reinterpret_cast<const uint16_t *>(qc.data_ptr());
        const auto *kp = reinterpret_cast<const uint16_t *>(keys.data_ptr());
        const auto *vp = reinterpret_cast<const uint16_t *>(values.data_ptr());
        splitRows(
            nh, work,
            [&](int64_t h0, int64_t h1) {
                std::vector<float> scores(static_cast<size_t>(n));
                for (int64_t h = h0; h < h1; ++h) {
                    const int64_t g = h / rep;
                    attendHead(qp + h * hd, kp + g * cap * hd, vp + g * cap * hd, k0, k1, hd, float(scale),
                               float(softcap), scores.data(), op + h * hd);
                }
            },
            1);
        return out.to(dt);
    }
    // an f32 query: the heads of one kv head in groups of up to 4, each cache row read once a group
    const float *qf = qc.data_ptr<float>();
    const int64_t groupsPerKv = (rep + 3) / 4;
    const auto groups = [&](auto *kp, auto *vp) {
        return [=, &op](int64_t u0, int64_t u1) {
            std::vector<float> scores(static_cast<size_t>(4 * n));
            for (int64_t u = u0; u < u1; ++u) {
                const int64_t g = u / groupsPerKv, h = g * rep + (u % groupsPerKv) * 4;
                const int size = int(std::min<int64_t>(4, (g + 1) * rep - h));
                attendGroupOf(size, qf + h * hd, kp + g * cap * hd, vp + g * cap * hd, k0, k1, hd,
                              float(scale), float(softcap), scores.data(), op + h * hd);
            }
        };
    };
    const int64_t units = nkv * groupsPerKv;
    if (kt == torch::kFloat32)
        splitRows(units, work * (rep / groupsPerKv), groups(keys.data_ptr<float>(), values.data_ptr<float>()),
                  1);
    else if (kt == torch::kBFloat16)
        splitRows(units, work * (rep / groupsPerKv),
                  groups(reinterpret_cast<const uint16_t *>(keys.data_ptr()),
                         reinterpret_cast<const uint16_t *>(values.data_ptr())),
                  1);
    else
        splitRows(units, work * (rep / groupsPerKv),
                  groups(keys.data_ptr<c10::Half>(), values.data_ptr<c10::Half>()), 1);
#else
    TORCH_CHECK(false, "attendOneCpu: not built for this CPU");
#endif
    return dt == torch::kFloat32 ? out : out.to(dt);
}

PackedArena::PackedArena(int64_t capacity)
{
#ifdef __linux__
    constexpr size_t kHuge = size_t(2) << 20;
    if (capacity <= 0)
        return;
    auto map = std::make_shared<Mapping>();
    const size_t bytes = (size_t(capacity) + kHuge - 1) / kHuge * kHuge + kHuge; // + one to align the start
    void *raw = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return;
    map->base = raw;
    map->bytes = bytes;
    m_next = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) / kHuge * kHuge);
    madvise(m_next, size_t(capacity), MADV_HUGEPAGE);
    m_left = capacity;
    m_map = map;
#else
    (void)capacity;
#endif
}

torch::Tensor PackedArena::take(int64_t n)
{
    const int64_t need = padded(n);
    if (!m_map || need > m_left)
        return torch::empty({n}, torch::kUInt8);
    char *p = m_next;
    m_next += need;
    m_left -= need;
    auto map = m_map;
    return torch::from_blob(
        p, {n}, [map](void *) {}, torch::TensorOptions().dtype(torch::kUInt8));
}

namespace {

// Sets a library's thread count through its C setter and getter, looked up at run time by name;
// returns the count before, 0 where the process has no such library.
int setThreadsVia(const char *setter, const char *getter, int n)
{
#ifdef __linux__
    using Set = void (*)(int);
    using Get = int (*)();
    const auto set = reinterpret_cast<Set>(dlsym(RTLD_DEFAULT, setter));
    const auto get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, getter));
    if (!set || !get)
        return 0;
    const int before = get();
    if (n > 0 && before != n)
        set(n);
    return before;
#else
    (void)setter;
    (void)getter;
    (void)n;
    return 0;
#endif
}

} // namespace

int setBlasThreads(int n)
{
    return setThreadsVia("openblas_set_num_threads", "openblas_get_num_threads", n);
}

int setOmpThreads(int n)
{
    (void)at::get_num_threads(); // torch's once-per-thread set-up first, or it would undo this later
    return setThreadsVia("omp_set_num_threads", "omp_get_max_threads", n);
}

int setTeamThreads(int n)
{
    const int before = t_teamThreads;
    t_teamThreads = n;
    return before;
}

torch::Tensor teamMatmulNT(const torch::Tensor &x, const torch::Tensor &w)
{
    const auto dt = x.scalar_type();
    TORCH_CHECK((dt == torch::kBFloat16 || dt == torch::kFloat32) && w.scalar_type() == dt && x.dim() == 3 &&
                    w.dim() == 3 && x.size(0) == w.size(0) && x.size(2) == w.size(2) && w.stride(2) == 1 &&
                    w.stride(1) == w.size(2) && x.device().is_cpu() && w.device().is_cpu() &&
                    std::max({x.size(1), w.size(1), x.size(2)}) <= INT32_MAX,
                "teamMatmulNT: expected x [b, m, k] and w [b, n, k] (dense rows) of one dtype (f32 or bf16) "
                "on the CPU");
    const int64_t b = x.size(0), m = x.size(1), n = w.size(1), k = x.size(2), wStride = w.stride(0);
    auto y = torch::empty({b, m, n}, x.options().dtype(torch::kFloat32));
    tensorProducts(x, b, m, w, wStride, n, k, y.data_ptr<float>(), nullptr);
    return y;
}

torch::Tensor teamLinear(const torch::Tensor &x, const torch::Tensor &w, const torch::Tensor &bias)
{
    const auto dt = w.scalar_type();
    TORCH_CHECK((dt == torch::kBFloat16 || dt == torch::kFloat32) && x.scalar_type() == dt && w.dim() == 2 &&
                    x.dim() == 2 && w.is_contiguous() && w.device().is_cpu() && x.size(1) == w.size(1) &&
                    std::max({x.size(0), w.size(0), w.size(1)}) <= INT32_MAX &&
                    (!bias.defined() || bias.numel() == w.size(0)),
                "teamLinear: expected x [t, in] and W [out, in] of one dtype (f32 or bf16), W contiguous, "
                "on the CPU");
    const int64_t m = x.size(0), n = w.size(0), k = w.size(1);
    auto y = torch::empty({m, n}, w.options().dtype(torch::kFloat32));
    const auto bf = bias.defined() ? bias.to(torch::kFloat32).contiguous() : torch::Tensor();
    const float *bp = bf.defined() ? bf.data_ptr<float>() : nullptr;
    tensorProducts(x, 1, m, w, 0, n, k, y.data_ptr<float>(), bp);
    return dt == torch::kFloat32 ? y : y.to(dt);
}

bool cpuKernelFits(const torch::Tensor &x)
{
    return x.device().is_cpu() &&
           (x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16) && x.dim() >= 1 &&
           x.stride(-1) == 1;
}

namespace {

// Rows per prompt-product chunk of a quantised weight: dequantised once into a thread's scratch
// (64 x 14,336 f32 is 3.5 MiB at 8B geometry), then multiplied as an f32 weight. Fixed, so each
// output element comes from the same call on any thread count.
constexpr int64_t kQuantChunk = 64;

// c [m, ldc] columns [0, n) = x [m, k] w^T (+ bias) for an f32 w [n, k] on this thread: the f32
// tiles (and the BLAS for long prompts) where the CPU runs them, else the BLAS, else plain loops.
void f32Share(const float *x, int64_t m, const float *w, int64_t k, int64_t n, float *c, int64_t ldc,
              const float *bias)
{
    if (haveRowGemv(torch::kFloat32))
        return productShare(x, m, w, k, 0, n, c, ldc, bias);
    if (const auto gemm = cblasSgemm()) {
        sgemmNT(gemm, x, m, w, k, n, c, ldc);
    } else {
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                float s = 0;
                for (int64_t e = 0; e < k; ++e)
                    s += x[i * k + e] * w[j * k + e];
                c[i * ldc + j] = s;
            }
    }
    if (bias)
        addBias(c, m, n, ldc, bias);
}

} // namespace

torch::Tensor quantLinear(const torch::Tensor &x, const std::vector<QuantMatrix> &w,
                          const torch::Tensor &bias)
{
    const auto dt = x.scalar_type();
    TORCH_CHECK((dt == torch::kFloat32 || dt == torch::kBFloat16) && x.dim() == 2 && x.device().is_cpu() &&
                    !w.empty(),
                "quantLinear: expected x [t, in] (f32 or bf16) on the CPU and at least one weight part");
    const int64_t m = x.size(0), k = x.size(1);
    std::vector<int64_t> offset; // first output column of each part
    int64_t n = 0;
    for (const QuantMatrix &p : w) {
        TORCH_CHECK(p.cols == k && p.bytes.device().is_cpu() && p.bytes.is_contiguous() &&
                        p.bytes.numel() == int64_t(core::dtypeBytesFor(p.type, p.rows * p.cols, "weight")),
                    "quantLinear: a weight part's columns or bytes do not match x [t, ", k, "]");
        offset.push_back(n);
        n += p.rows;
    }
    TORCH_CHECK(!bias.defined() || bias.numel() == n, "quantLinear: bias of ", bias.numel(), " for ", n,
                " rows");
    const auto isa = core::quant::activeIsa();
    const auto xc = x.to(torch::kFloat32).contiguous();
    const float *xp = xc.data_ptr<float>();
    auto y = torch::empty({m, n}, x.options().dtype(torch::kFloat32));
    float *yp = y.data_ptr<float>();
    const auto bf = bias.defined() ? bias.to(torch::kFloat32).contiguous() : torch::Tensor();
    const float *bp = bf.defined() ? bf.data_ptr<float>() : nullptr;
    if (m == 1) {
        // reused (no allocation per token); the team reads the caller's through this reference (a
        // thread_local named in the lambda would be each worker's own, empty one)
        thread_local core::quant::QuantizedActivation callerXq;
        core::quant::QuantizedActivation &xq = callerXq;
        const bool any256 = std::any_of(
            w.begin(), w.end(), [](const QuantMatrix &p) { return core::dtypeBlockElements(p.type) == 256; });
        const bool any32 = std::any_of(
            w.begin(), w.end(), [](const QuantMatrix &p) { return core::dtypeBlockElements(p.type) == 32; });
        core::quant::quantizeActivation(xp, k, xq, any32, any256);
        splitRows(n, k, [&](int64_t r0, int64_t r1) {
            for (size_t i = 0; i < w.size(); ++i) {
                const int64_t a = std::max(r0, offset[i]), b = std::min(r1, offset[i] + w[i].rows);
                if (a < b)
                    core::quant::dotRows(w[i].type, static_cast<const std::byte *>(w[i].bytes.data_ptr()),
                                         a - offset[i], b - offset[i], xq, yp + a, isa);
            }
        });
        if (bp)
            addBias(yp, 1, n, n, bp);
    } else {
        struct Chunk
        {
            size_t part;
            int64_t j0, j1;
        };
        std::vector<Chunk> chunks;
        for (size_t i = 0; i < w.size(); ++i)
            for (int64_t j0 = 0; j0 < w[i].rows; j0 += kQuantChunk)
                chunks.push_back({i, j0, std::min(w[i].rows, j0 + kQuantChunk)});
        // quantised rows of a multiple of 256 on AVX-512 VNNI multiply the prompt in integers, its
        // rows rounded to 8 bits as one token's are (per 256 or 32 elements); the others
        // dequantise each chunk onto the f32 tiles
        core::quant::PromptActivations xs256, xs32;
        for (const QuantMatrix &p : w) {
            if (!core::quant::hasPromptRows(p.type, k, isa))
                continue;
            auto &xs = core::quant::promptBlock(p.type) == 256 ? xs256 : xs32;
            if (xs.tokens == 0)
                core::quant::quantizePrompt(xp, m, k, core::quant::promptBlock(p.type), xs);
        }
        splitRows(
            int64_t(chunks.size()), m * k * kQuantChunk,
            [&](int64_t u0, int64_t u1) {
                thread_local std::vector<float> scratch;
                for (int64_t u = u0; u < u1; ++u) {
                    const Chunk &c = chunks[size_t(u)];
                    const QuantMatrix &p = w[c.part];
                    const auto *bytes = static_cast<const std::byte *>(p.bytes.data_ptr());
                    const int64_t col = offset[c.part] + c.j0;
                    if (core::quant::hasPromptRows(p.type, k, isa)) {
                        core::quant::promptRows(p.type, bytes, c.j0, c.j1,
                                                core::quant::promptBlock(p.type) == 256 ? xs256 : xs32,
                                                yp + col, n, isa);
                        if (bp)
                            addBias(yp + col, m, c.j1 - c.j0, n, bp + col);
                        continue;
                    }
                    scratch.resize(size_t(kQuantChunk * k));
                    core::quant::dequantRows(p.type, bytes, k, c.j0, c.j1, scratch.data(), isa);
                    f32Share(xp, m, scratch.data(), k, c.j1 - c.j0, yp + col, n, bp ? bp + col : nullptr);
                }
            },
            1);
    }
    return dt == torch::kFloat32 ? y : y.to(dt);
}

torch::Tensor quantRows(const QuantMatrix &w, const torch::Tensor &ids, torch::Dtype dtype)
{
    TORCH_CHECK(ids.scalar_type() == torch::kInt64 && ids.dim() == 1 && ids.device().is_cpu(),
                "quantRows: expected ids [n] int64 on the CPU");
    const auto ic = ids.contiguous();
    const int64_t n = ic.numel();
    const int64_t *ip = ic.data_ptr<int64_t>();
    auto out = torch::empty({n, w.cols}, torch::TensorOptions().dtype(torch::kFloat32));
    const auto isa = core::quant::activeIsa();
    for (int64_t i = 0; i < n; ++i) {
        TORCH_CHECK(ip[i] >= 0 && ip[i] < w.rows, "quantRows: id ", ip[i], " outside [0, ", w.rows, ")");
        core::quant::dequantRows(w.type, static_cast<const std::byte *>(w.bytes.data_ptr()), w.cols, ip[i],
                                 ip[i] + 1, out.data_ptr<float>() + i * w.cols, isa);
    }
    return dtype == torch::kFloat32 ? out : out.to(dtype);
}

} // namespace kvwb::gpu::detail
