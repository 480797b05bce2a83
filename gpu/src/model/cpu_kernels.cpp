#include "gpu/src/model/cpu_kernels_p.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

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

// One persistent team for the row kernels, llama.cpp's design: the caller runs part 0 of a product
// and workers 1..n-1 the others, woken by an epoch counter they spin on between the products of a
// token (~200 per token: a futex wake each would cost more than the product's share). A worker that
// has seen no work for kSpin sleeps on the counter (C++20 atomic wait, a futex), so prefill's
// OpenBLAS threads and other programs get the cores back. It spins with `pause` only: yielding
// every 20 us while spinning cost 2-thread bf16 decode a quarter of its speed (31 vs 41 tok/s on
// the 135M model), each product waiting for a worker inside sched_yield. One product at a time: a
// second caller while one runs computes its product alone (the window's engine thread and a
// test's thread never wait on each other).
class RowTeam
{
public:
    using Fn = void (*)(const void *ctx, int part, int parts);

    static RowTeam &instance()
    {
        static RowTeam *team = new RowTeam; // never destroyed: workers may outlive static destructors
        return *team;
    }

    void run(int parts, Fn fn, const void *ctx)
    {
        std::unique_lock busy(m_busy, std::try_to_lock);
        if (parts <= 1 || !busy.owns_lock()) {
            for (int p = 0; p < parts; ++p)
                fn(ctx, p, parts);
            return;
        }
        grow(parts - 1);
        m_fn = fn;
        m_ctx = ctx;
        m_parts = parts;
        m_pending.store(int(m_workers.size()), std::memory_order_relaxed);
        m_epoch.fetch_add(1, std::memory_order_seq_cst);
        if (m_sleepers.load(std::memory_order_seq_cst) > 0)
            m_epoch.notify_all();
        fn(ctx, 0, parts);
        while (m_pending.load(std::memory_order_acquire) != 0)
            pause();
    }

private:
    static constexpr auto kSpin = std::chrono::milliseconds(2);

    static void pause()
    {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }

    // Called with m_busy held, so no worker is inside a product.
    void grow(int workers)
    {
        while (int(m_workers.size()) < workers) {
            const int index = int(m_workers.size()) + 1;
            m_workers.emplace_back([this, index, seen = m_epoch.load()] { loop(index, seen); });
            m_workers.back().detach();
        }
    }

    void loop(int index, uint32_t seen)
    {
        using Clock = std::chrono::steady_clock;
        for (;;) {
            auto idleSince = Clock::now();
            uint32_t e;
            unsigned spins = 0;
            while ((e = m_epoch.load(std::memory_order_acquire)) == seen) {
                pause();
                if (++spins % 64 != 0)
                    continue;
                const auto now = Clock::now();
                if (now - idleSince > kSpin) {
                    m_sleepers.fetch_add(1, std::memory_order_seq_cst);
                    m_epoch.wait(seen, std::memory_order_seq_cst); // returns at once if it moved
                    m_sleepers.fetch_sub(1, std::memory_order_relaxed);
                    idleSince = Clock::now();
                }
            }
            seen = e;
            if (index < m_parts)
                m_fn(m_ctx, index, m_parts);
            m_pending.fetch_sub(1, std::memory_order_release);
        }
    }

    std::mutex m_busy;
    std::vector<std::thread> m_workers;
    std::atomic<uint32_t> m_epoch{0};
    std::atomic<int> m_pending{0};
    std::atomic<int> m_sleepers{0};
    Fn m_fn = nullptr;
    const void *m_ctx = nullptr;
    int m_parts = 0;
};

// Splits rows into parts of whole blocks of `block` rows over the team (work: the elements a
// product touches, to skip the handover for small ones); each row is computed by one thread with
// the same arithmetic, so the result does not depend on the thread count.
template <class Body> void splitRows(int64_t rows, int64_t work, const Body &body, int64_t block = 16)
{
    // below ~64k weights (128 KiB of bf16) a product takes a few microseconds: not worth a handover
    constexpr int64_t kMinWork = int64_t(1) << 16;
    const int64_t blocks = (rows + block - 1) / block;
    int parts = int(std::min<int64_t>(at::get_num_threads(), blocks));
    if (rows * work < kMinWork)
        parts = 1;
    struct Ctx
    {
        const Body *body;
        int64_t rows, blocks, block;
    } ctx{&body, rows, blocks, block};
    RowTeam::instance().run(
        std::max(parts, 1),
        [](const void *c, int part, int parts) {
            const auto &x = *static_cast<const Ctx *>(c);
            const int64_t b0 = x.blocks * part / parts, b1 = x.blocks * (part + 1) / parts;
            const int64_t r0 = std::min(x.rows, b0 * x.block), r1 = std::min(x.rows, b1 * x.block);
            if (r0 < r1)
                (*x.body)(r0, r1);
        },
        &ctx);
}

#ifdef KVWB_X86_AVX512
// out[0, hd) += p * row[0, hd) for a bf16 or f32 row, in f32.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void axpyRow(float *out, float p,
                                                                         const uint16_t *row, int64_t hd)
{
    const __m512 pv = _mm512_set1_ps(p);
    for (int64_t d = 0; d < hd; d += 16) {
        const __mmask16 m = hd - d >= 16 ? __mmask16(0xffff) : __mmask16((1u << (hd - d)) - 1);
        const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + d));
        const __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
        _mm512_mask_storeu_ps(out + d, m, _mm512_fmadd_ps(pv, v, _mm512_maskz_loadu_ps(m, out + d)));
    }
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void axpyRow(float *out, float p,
                                                                         const float *row, int64_t hd)
{
    const __m512 pv = _mm512_set1_ps(p);
    for (int64_t d = 0; d < hd; d += 16) {
        const __mmask16 m = hd - d >= 16 ? __mmask16(0xffff) : __mmask16((1u << (hd - d)) - 1);
        _mm512_mask_storeu_ps(
            out + d, m,
            _mm512_fmadd_ps(pv, _mm512_maskz_loadu_ps(m, row + d), _mm512_maskz_loadu_ps(m, out + d)));
    }
}

// One query head over keys [k0, k1) of its kv head: scores = K q (the row kernels), scaled and
// soft-capped, softmax in f32, out = probs V; f32 throughout, out rounded once by the caller.
template <class T>
void attendHead(const T *q, const T *keys, const T *values, int64_t k0, int64_t k1, int64_t hd, float scale,
                float cap, float *scores, float *out)
{
    const int64_t n = k1 - k0;
    if constexpr (std::is_same_v<T, uint16_t>)
        bf16GemvRows(keys + k0 * hd, q, scores, hd, 0, n);
    else
        f32GemvRows(keys + k0 * hd, q, scores, hd, 0, n);
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
    const float inv = 1.0f / sum;
    std::fill(out, out + hd, 0.0f);
    for (int64_t j = 0; j < n; ++j)
        axpyRow(out, scores[j] * inv, values + (k0 + j) * hd, hd);
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
    const auto dt = q.scalar_type();
    TORCH_CHECK((dt == torch::kFloat32 || dt == torch::kBFloat16) && keys.scalar_type() == dt &&
                    values.scalar_type() == dt && q.dim() == 3 && q.size(1) == 1 && keys.dim() == 3 &&
                    keys.is_contiguous() && values.is_contiguous() && keys.sizes() == values.sizes() &&
                    q.size(2) == keys.size(2) && q.size(0) % keys.size(0) == 0 && 0 <= k0 && k0 < k1 &&
                    k1 <= keys.size(1),
                "attendOneCpu: expected q [heads, 1, hd] and K/V [kvHeads, capacity, hd] of one dtype");
    const int64_t nh = q.size(0), nkv = keys.size(0), cap = keys.size(1), hd = q.size(2), rep = nh / nkv;
    const auto qc = q.contiguous();
    auto out = torch::empty({1, nh * hd}, q.options().dtype(torch::kFloat32));
#ifdef KVWB_X86_AVX512
    float *op = out.data_ptr<float>();
    const int64_t n = k1 - k0;
    const auto body = [&](int64_t h0, int64_t h1) {
        std::vector<float> scores(static_cast<size_t>(n));
        for (int64_t h = h0; h < h1; ++h) {
            const int64_t g = h / rep;
            if (dt == torch::kBFloat16) {
                const auto *qp = reinterpret_cast<const uint16_t *>(qc.data_ptr()) + h * hd;
                const auto *kp = reinterpret_cast<const uint16_t *>(keys.data_ptr()) + g * cap * hd;
                const auto *vp = reinterpret_cast<const uint16_t *>(values.data_ptr()) + g * cap * hd;
                attendHead(qp, kp, vp, k0, k1, hd, float(scale), float(softcap), scores.data(), op + h * hd);
            } else {
                const float *qp = qc.data_ptr<float>() + h * hd;
                const float *kp = keys.data_ptr<float>() + g * cap * hd;
                const float *vp = values.data_ptr<float>() + g * cap * hd;
                attendHead(qp, kp, vp, k0, k1, hd, float(scale), float(softcap), scores.data(), op + h * hd);
            }
        }
    };
    splitRows(nh, 2 * n * hd, body, 1); // heads over the team once the keys outweigh a handover
#else
    TORCH_CHECK(false, "attendOneCpu: not built for this CPU");
#endif
    return dt == torch::kFloat32 ? out : out.to(dt);
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
