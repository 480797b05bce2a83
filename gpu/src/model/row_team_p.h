// Private to gpu/src/model/'s CPU kernels: the persistent thread team the row kernels, products
// and elementwise loops split their rows over, and splitRows, which splits them. One team per
// process (RowTeam::instance), shared by every file that includes this.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kvwb::gpu::detail {

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
        m_error = nullptr;
        m_epoch.fetch_add(1, std::memory_order_seq_cst);
        if (m_sleepers.load(std::memory_order_seq_cst) > 0)
            m_epoch.notify_all();
        // The workers read ctx until they are done: wait for them even when part 0 throws (an
        // allocation), then rethrow the first failure of any part on the caller.
        std::exception_ptr mine;
        try {
            fn(ctx, 0, parts);
        } catch (...) {
            mine = std::current_exception();
        }
        while (m_pending.load(std::memory_order_acquire) != 0)
            pause();
        if (mine)
            std::rethrow_exception(mine);
        if (m_error)
            std::rethrow_exception(m_error);
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
            if (index < m_parts) {
                try {
                    m_fn(m_ctx, index, m_parts);
                } catch (...) { // handed to the caller, which waits for every worker before it reads this
                    const std::lock_guard lock(m_errorMutex);
                    if (!m_error)
                        m_error = std::current_exception();
                }
            }
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
    std::mutex m_errorMutex;
    std::exception_ptr m_error; // a worker's failure in the current product
};

// The team's thread count for products on this thread (setTeamThreads); 0: torch's intra-op count.
inline thread_local int t_teamThreads = 0;
inline int teamThreads()
{
    return t_teamThreads > 0 ? t_teamThreads : at::get_num_threads();
}

// splitRows' work per element for the scalar loops (norms, RoPE, activations, softmax): a few
// nanoseconds each against a fraction of one for a product's multiply-add, so a prompt's rows are
// split and one token's stay on the calling thread.
constexpr int64_t kScalarWork = 16;

// Splits rows into parts of whole blocks of `block` rows over the team (work: the elements a
// product touches, to skip the handover for small ones); each row is computed by one thread with
// the same arithmetic, so the result does not depend on the thread count.
template <class Body> void splitRows(int64_t rows, int64_t work, const Body &body, int64_t block = 16)
{
    // below ~64k weights (128 KiB of bf16) a product takes a few microseconds: not worth a handover
    constexpr int64_t kMinWork = int64_t(1) << 16;
    const int64_t blocks = (rows + block - 1) / block;
    int parts = int(std::min<int64_t>(teamThreads(), blocks));
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

} // namespace kvwb::gpu::detail
