#include "gpu/src/model/cpu_kernels_p.h"

#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KVWB_X86_BF16 1
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

#ifdef KVWB_X86_BF16
// Rows [r0, r1) of y = W x. Four rows at a time share each load of x and keep four independent
// accumulator chains in flight; a row's tail past a multiple of 32 columns is summed in scalar f32.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void
bf16GemvRows(const uint16_t *w, const uint16_t *x, float *y, int64_t cols, int64_t r0, int64_t r1)
{
    const int64_t body = cols / 32 * 32;
    const auto tail = [&](const uint16_t *row) {
        float s = 0;
        for (int64_t c = body; c < cols; ++c)
            s += bf16ToFloat(row[c]) * bf16ToFloat(x[c]);
        return s;
    };
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
        const uint16_t *w0 = w + r * cols, *w1 = w0 + cols, *w2 = w1 + cols, *w3 = w2 + cols;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t c = 0; c < body; c += 32) {
            const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + c);
            a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(w0 + c), xv);
            a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(w1 + c), xv);
            a2 = _mm512_dpbf16_ps(a2, (__m512bh)_mm512_loadu_si512(w2 + c), xv);
            a3 = _mm512_dpbf16_ps(a3, (__m512bh)_mm512_loadu_si512(w3 + c), xv);
        }
        y[r] = _mm512_reduce_add_ps(a0) + tail(w0);
        y[r + 1] = _mm512_reduce_add_ps(a1) + tail(w1);
        y[r + 2] = _mm512_reduce_add_ps(a2) + tail(w2);
        y[r + 3] = _mm512_reduce_add_ps(a3) + tail(w3);
    }
    for (; r < r1; ++r) {
        const uint16_t *row = w + r * cols;
        __m512 a = _mm512_setzero_ps();
        for (int64_t c = 0; c < body; c += 32)
            a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_loadu_si512(row + c),
                                 (__m512bh)_mm512_loadu_si512(x + c));
        y[r] = _mm512_reduce_add_ps(a) + tail(row);
    }
}
#endif

} // namespace

bool haveBf16Gemv()
{
#ifdef KVWB_X86_BF16
    static const bool have = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl");
    return have;
#else
    return false;
#endif
}

torch::Tensor bf16Gemv(const torch::Tensor &w, const torch::Tensor &x, const torch::Tensor &bias)
{
    TORCH_CHECK(w.scalar_type() == torch::kBFloat16 && x.scalar_type() == torch::kBFloat16 && w.dim() == 2 &&
                    w.is_contiguous() && w.device().is_cpu() && x.numel() == w.size(1),
                "bf16Gemv: expected W [out, in] and x [in], bf16, contiguous, on the CPU");
    const int64_t rows = w.size(0), cols = w.size(1);
    const auto xc = x.contiguous();
    auto y = torch::empty({1, rows}, w.options().dtype(torch::kFloat32));
#ifdef KVWB_X86_BF16
    const auto *wp = reinterpret_cast<const uint16_t *>(w.data_ptr());
    const auto *xp = reinterpret_cast<const uint16_t *>(xc.data_ptr());
    float *yp = y.data_ptr<float>();
    // 256 rows of 576 bf16 are 288 KiB: big enough that a thread's share outweighs waking it.
    at::parallel_for(0, rows, 256, [&](int64_t r0, int64_t r1) { bf16GemvRows(wp, xp, yp, cols, r0, r1); });
#else
    TORCH_CHECK(false, "bf16Gemv: not built for this CPU");
#endif
    if (bias.defined())
        y.add_(bias.to(torch::kFloat32));
    return y.to(torch::kBFloat16);
}

} // namespace kvwb::gpu::detail
