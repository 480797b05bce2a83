// The CPU's elementwise kernels: RMSNorm, RoPE, the gated MLP activations and the attention
// softmax, on f32 and bf16 rows (AVX-512 where the CPU has it), each row one thread's loop so the
// result does not depend on the thread count.
#include "gpu/src/model/cpu_simd_p.h"

#include "gpu/src/model/cpu_kernels_p.h"
#include "gpu/src/model/row_team_p.h"

#include <cmath>
#include <cstdint>

namespace kvwb::gpu::detail {

namespace {

template <class T>
void rmsNormRows(const T *x, const T *w, T *out, int64_t rows, int64_t n, float eps, bool unitOffset)
{
    for (int64_t r = 0; r < rows; ++r) {
        const T *xr = x + r * n;
        T *o = out + r * n;
        float ss = 0;
        for (int64_t i = 0; i < n; ++i) {
            const float v = float(xr[i]);
            ss += v * v;
        }
        const float scale = 1.0f / std::sqrt(ss / float(n) + eps);
        for (int64_t i = 0; i < n; ++i) {
            const float normed = float(xr[i]) * scale;
            if (unitOffset)
                o[i] = T(normed * (float(w[i]) + 1.0f));
            else // the normed value is rounded to x's dtype before the weight multiplies it
                o[i] = T(float(w[i]) * float(T(normed)));
        }
    }
}

template <class T>
void ropeHeads(const torch::Tensor &x, const float *cos, const float *sin, T *out, bool rotateHalf,
               bool inverse, int64_t h0, int64_t h1)
{
    const int64_t tokens = x.size(1), d = x.size(2), half = d / 2;
    const int64_t s0 = x.stride(0), s1 = x.stride(1);
    const T *base = x.data_ptr<T>();
    for (int64_t h = h0; h < h1; ++h) {
        for (int64_t t = 0; t < tokens; ++t) {
            const T *in = base + h * s0 + t * s1;
            T *o = out + (h * tokens + t) * d;
            const float *c = cos + t * half, *sn = sin + t * half;
            for (int64_t i = 0; i < half; ++i) {
                const float si = inverse ? -sn[i] : sn[i];
                if (rotateHalf) {
                    const float a = float(in[i]), b = float(in[i + half]);
                    o[i] = T(a * c[i] - b * si);
                    o[i + half] = T(b * c[i] + a * si);
                } else {
                    const float a = float(in[2 * i]), b = float(in[2 * i + 1]);
                    o[2 * i] = T(a * c[i] - b * si);
                    o[2 * i + 1] = T(a * si + b * c[i]);
                }
            }
        }
    }
}

} // namespace

torch::Tensor rmsNormCpu(const torch::Tensor &x, const torch::Tensor &w, double eps, bool unitOffset)
{
    const auto xc = x.contiguous();
    const auto wc = w.to(x.scalar_type()).contiguous();
    const int64_t n = x.size(-1), rows = n > 0 ? x.numel() / n : 0;
    auto out = torch::empty_like(xc);
    // rows over the team for a prompt (one row: not worth a handover); each row one thread's loop
    splitRows(
        rows, kScalarWork * n,
        [&](int64_t r0, int64_t r1) {
            if (x.scalar_type() == torch::kFloat32)
                rmsNormRows(xc.data_ptr<float>() + r0 * n, wc.data_ptr<float>(),
                            out.data_ptr<float>() + r0 * n, r1 - r0, n, float(eps), unitOffset);
            else
                rmsNormRows(xc.data_ptr<c10::BFloat16>() + r0 * n, wc.data_ptr<c10::BFloat16>(),
                            out.data_ptr<c10::BFloat16>() + r0 * n, r1 - r0, n, float(eps), unitOffset);
        },
        4);
    return out;
}

torch::Tensor ropeCpu(const torch::Tensor &x, const torch::Tensor &cos, const torch::Tensor &sin,
                      bool rotateHalf, bool inverse)
{
    TORCH_CHECK(x.dim() == 3 && cos.is_contiguous() && sin.is_contiguous() &&
                    cos.scalar_type() == torch::kFloat32 && cos.size(0) == x.size(1) &&
                    cos.size(1) * 2 == x.size(2),
                "ropeCpu: expected x [heads, tokens, headDim] and cos/sin [tokens, headDim/2] f32");
    auto out = torch::empty({x.size(0), x.size(1), x.size(2)},
                            x.options().memory_format(at::MemoryFormat::Contiguous));
    splitRows(
        x.size(0), kScalarWork * x.size(1) * x.size(2),
        [&](int64_t h0, int64_t h1) {
            if (x.scalar_type() == torch::kFloat32)
                ropeHeads(x, cos.data_ptr<float>(), sin.data_ptr<float>(), out.data_ptr<float>(), rotateHalf,
                          inverse, h0, h1);
            else
                ropeHeads(x, cos.data_ptr<float>(), sin.data_ptr<float>(), out.data_ptr<c10::BFloat16>(),
                          rotateHalf, inverse, h0, h1);
        },
        1);
    return out;
}

namespace {

#ifdef KVWB_X86_AVX512
#define KVWB_VEC_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

// 16 lanes of f32 or bf16 (widened exactly), lanes outside m read as 0.
KVWB_VEC_TARGET inline __m512 load16(const float *p, __mmask16 m)
{
    return _mm512_maskz_loadu_ps(m, p);
}
KVWB_VEC_TARGET inline __m512 load16(const c10::BFloat16 *p, __mmask16 m)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

// f32 -> bf16 bits, rounded to nearest even as c10::BFloat16 rounds finite values.
KVWB_VEC_TARGET inline __m512i bf16Bits(__m512 v)
{
    const __m512i b = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    return _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
}
KVWB_VEC_TARGET inline void store16(float *p, __m512 v, __mmask16 m)
{
    _mm512_mask_storeu_ps(p, m, v);
}
KVWB_VEC_TARGET inline void store16(c10::BFloat16 *p, __m512 v, __mmask16 m)
{
    _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(bf16Bits(v)));
}
// v rounded to T and back (f32: v itself).
KVWB_VEC_TARGET inline __m512 roundVec(__m512 v, const float *)
{
    return v;
}
KVWB_VEC_TARGET inline __m512 roundVec(__m512 v, const c10::BFloat16 *)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(bf16Bits(v), 16));
}

// e^x in f32 (Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-5 polynomial; ~1 ulp), 0 below
// -87.3 (and for -inf: the masked scores), +inf above 88.7.
KVWB_VEC_TARGET inline __m512 exp16(__m512 x)
{
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512 e = _mm512_scalef_ps(p, n);
    const __mmask16 low = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    const __mmask16 high = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.7f), _CMP_GT_OQ);
    return _mm512_mask_blend_ps(high, _mm512_mask_blend_ps(low, e, _mm512_setzero_ps()),
                                _mm512_set1_ps(INFINITY));
}

// tanh(x) = 1 - 2 / (e^2x + 1): +-1 where e^2x over- or underflows.
KVWB_VEC_TARGET inline __m512 tanh16(__m512 x)
{
    const __m512 e = exp16(_mm512_add_ps(x, x));
    return _mm512_sub_ps(_mm512_set1_ps(1.0f),
                         _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
}

inline __mmask16 tailMask(int64_t left)
{
    return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
}

template <class T>
KVWB_VEC_TARGET void gluRows(const T *gu, T *out, int64_t r0, int64_t r1, int64_t inter, bool gelu)
{
    for (int64_t r = r0; r < r1; ++r) {
        const T *g = gu + r * 2 * inter, *u = g + inter;
        T *o = out + r * inter;
        for (int64_t i = 0; i < inter; i += 16) {
            const __mmask16 m = tailMask(inter - i);
            const __m512 x = load16(g + i, m);
            __m512 a;
            if (gelu) { // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
                const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
                const __m512 z = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f),
                                               _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
                a = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x),
                                  _mm512_add_ps(_mm512_set1_ps(1.0f), tanh16(z)));
            } else { // x / (1 + e^-x)
                a = _mm512_div_ps(
                    x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
            }
            // as torch: the activation rounded to T, then the product
            store16(o + i, _mm512_mul_ps(roundVec(a, o), load16(u + i, m)), m);
        }
    }
}

template <class T>
KVWB_VEC_TARGET void softmaxRows(float *s, T *out, int64_t r0, int64_t r1, int64_t keys, int64_t queries,
                                 float scale, float cap, const bool *mask)
{
    const __m512 sv = _mm512_set1_ps(scale), cv = _mm512_set1_ps(cap), inf = _mm512_set1_ps(-INFINITY);
    const __m512 invCap = _mm512_set1_ps(cap > 0 ? 1.0f / cap : 0.0f);
    for (int64_t r = r0; r < r1; ++r) {
        float *row = s + r * keys;
        const bool *mk = mask ? mask + (r % queries) * keys : nullptr;
        __m512 hi = inf;
        for (int64_t j = 0; j < keys; j += 16) {
            const __mmask16 m = tailMask(keys - j);
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), sv);
            if (cap > 0)
                v = _mm512_mul_ps(tanh16(_mm512_mul_ps(v, invCap)), cv);
            if (mk) {
                const __m128i bytes = _mm_maskz_loadu_epi8(m, mk + j);
                v = _mm512_mask_blend_ps(
                    _mm512_test_epi32_mask(_mm512_cvtepu8_epi32(bytes), _mm512_cvtepu8_epi32(bytes)), v, inf);
            }
            _mm512_mask_storeu_ps(row + j, m, v);
            hi = _mm512_mask_max_ps(hi, m, hi, v);
        }
        const __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(hi));
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < keys; j += 16) {
            const __mmask16 m = tailMask(keys - j);
            const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + j), top));
            _mm512_mask_storeu_ps(row + j, m, e);
            sum = _mm512_mask_add_ps(sum, m, sum, e);
        }
        const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
        T *o = out + r * keys;
        for (int64_t j = 0; j < keys; j += 16) {
            const __mmask16 m = tailMask(keys - j);
            store16(o + j, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), inv), m);
        }
    }
}
#undef KVWB_VEC_TARGET
#endif

} // namespace

torch::Tensor gluCpu(const torch::Tensor &gateUp, bool gelu)
{
    TORCH_CHECK(gateUp.dim() == 2 && gateUp.size(1) % 2 == 0 && cpuKernelFits(gateUp),
                "gluCpu: expected gate|up [t, 2 * intermediate] f32 or bf16 on the CPU");
    const auto gu = gateUp.contiguous();
    const int64_t rows = gu.size(0), inter = gu.size(1) / 2;
    auto out = torch::empty({rows, inter}, gu.options());
#ifdef KVWB_X86_AVX512
    splitRows(
        rows, kScalarWork * inter,
        [&](int64_t r0, int64_t r1) {
            if (gu.scalar_type() == torch::kFloat32)
                gluRows(gu.data_ptr<float>(), out.data_ptr<float>(), r0, r1, inter, gelu);
            else
                gluRows(gu.data_ptr<c10::BFloat16>(), out.data_ptr<c10::BFloat16>(), r0, r1, inter, gelu);
        },
        1);
#else
    TORCH_CHECK(false, "gluCpu: not built for this CPU");
#endif
    return out;
}

torch::Tensor attentionSoftmaxCpu(torch::Tensor scores, const torch::Tensor &mask, double scale,
                                  double softcap, torch::Dtype dtype)
{
    TORCH_CHECK(scores.dim() == 3 && scores.scalar_type() == torch::kFloat32 && scores.is_contiguous() &&
                    scores.device().is_cpu() && (dtype == torch::kFloat32 || dtype == torch::kBFloat16),
                "attentionSoftmaxCpu: expected contiguous f32 scores [g, r, keys] on the CPU");
    const int64_t g = scores.size(0), r = scores.size(1), keys = scores.size(2);
    torch::Tensor m;
    int64_t queries = r;
    if (mask.defined()) {
        TORCH_CHECK(mask.dim() == 2 && mask.size(1) == keys && mask.size(0) > 0 && r % mask.size(0) == 0 &&
                        mask.scalar_type() == torch::kBool,
                    "attentionSoftmaxCpu: expected a bool mask [queries, keys]");
        m = mask.contiguous();
        queries = m.size(0);
    }
    auto out = dtype == torch::kFloat32 ? scores : torch::empty({g, r, keys}, scores.options().dtype(dtype));
    const bool *mp = m.defined() ? m.data_ptr<bool>() : nullptr;
#ifdef KVWB_X86_AVX512
    splitRows(
        g * r, kScalarWork * keys,
        [&](int64_t r0, int64_t r1) {
            if (dtype == torch::kFloat32)
                softmaxRows(scores.data_ptr<float>(), out.data_ptr<float>(), r0, r1, keys, queries,
                            float(scale), float(softcap), mp);
            else
                softmaxRows(scores.data_ptr<float>(), out.data_ptr<c10::BFloat16>(), r0, r1, keys, queries,
                            float(scale), float(softcap), mp);
        },
        4);
#else
    TORCH_CHECK(false, "attentionSoftmaxCpu: not built for this CPU");
#endif
    return out;
}

} // namespace kvwb::gpu::detail
