#include "gpu/src/model/cpu_kernels_p.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#ifdef __linux__
#include <sys/mman.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KVWB_X86_AVX512 1
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
    static const bool f32 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    static const bool bf16 = f32 && __builtin_cpu_supports("avx512bf16") &&
                             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
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
    // 256 rows of 576 are 288 KiB of bf16: enough that a thread's share outweighs waking it.
    if (dt == torch::kBFloat16) {
        const auto *wp = reinterpret_cast<const uint16_t *>(w.data_ptr());
        const auto *xp = reinterpret_cast<const uint16_t *>(xc.data_ptr());
        at::parallel_for(0, rows, 256,
                         [&](int64_t r0, int64_t r1) { bf16GemvRows(wp, xp, yp, cols, r0, r1); });
    } else {
        const float *wp = w.data_ptr<float>(), *xp = xc.data_ptr<float>();
        at::parallel_for(0, rows, 256,
                         [&](int64_t r0, int64_t r1) { f32GemvRows(wp, xp, yp, cols, r0, r1); });
    }
#else
    TORCH_CHECK(false, "rowGemv: not built for this CPU");
#endif
    if (bias.defined())
        y.add_(bias.to(torch::kFloat32));
    return dt == torch::kFloat32 ? y : y.to(dt);
}

void packWeights(const std::vector<torch::Tensor *> &tensors)
{
#ifdef __linux__
    constexpr size_t kHuge = size_t(2) << 20, kAlign = 64;
    size_t total = 0;
    for (const torch::Tensor *t : tensors)
        if (t->defined() && t->device().is_cpu())
            total += (size_t(t->nbytes()) + kAlign - 1) / kAlign * kAlign;
    if (total < kHuge / 2) // not even half a huge page: nothing to gain
        return;
    auto map = std::make_shared<Mapping>();
    const size_t bytes = (total + kHuge - 1) / kHuge * kHuge + kHuge; // + one to align the start
    void *raw = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return;
    map->base = raw;
    map->bytes = bytes;
    auto *p = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) / kHuge * kHuge);
    madvise(p, total, MADV_HUGEPAGE); // advice only: without THP the pages stay ordinary ones
    for (torch::Tensor *t : tensors) {
        if (!t->defined() || !t->device().is_cpu())
            continue;
        // each tensor's deleter holds the mapping: it is unmapped with the last of them
        auto packed = torch::from_blob(
            p, t->sizes(), [map](void *) {}, t->options());
        packed.copy_(*t);
        *t = packed;
        p += (size_t(packed.nbytes()) + kAlign - 1) / kAlign * kAlign;
    }
#else
    (void)tensors;
#endif
}

bool cpuKernelFits(const torch::Tensor &x)
{
    return x.device().is_cpu() &&
           (x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16) && x.dim() >= 1 &&
           x.stride(-1) == 1;
}

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
               bool inverse)
{
    const int64_t heads = x.size(0), tokens = x.size(1), d = x.size(2), half = d / 2;
    const int64_t s0 = x.stride(0), s1 = x.stride(1);
    const T *base = x.data_ptr<T>();
    for (int64_t h = 0; h < heads; ++h) {
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
    if (x.scalar_type() == torch::kFloat32)
        rmsNormRows(xc.data_ptr<float>(), wc.data_ptr<float>(), out.data_ptr<float>(), rows, n, float(eps),
                    unitOffset);
    else
        rmsNormRows(xc.data_ptr<c10::BFloat16>(), wc.data_ptr<c10::BFloat16>(), out.data_ptr<c10::BFloat16>(),
                    rows, n, float(eps), unitOffset);
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
    if (x.scalar_type() == torch::kFloat32)
        ropeHeads(x, cos.data_ptr<float>(), sin.data_ptr<float>(), out.data_ptr<float>(), rotateHalf,
                  inverse);
    else
        ropeHeads(x, cos.data_ptr<float>(), sin.data_ptr<float>(), out.data_ptr<c10::BFloat16>(), rotateHalf,
                  inverse);
    return out;
}

} // namespace kvwb::gpu::detail
