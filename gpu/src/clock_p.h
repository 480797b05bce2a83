// Private to gpu/: the monotonic clock every timing in gpu/ (TTFT, prefill, capture, transfer) uses.
#pragma once

#include <chrono>

namespace kvwb::gpu::detail {

using Clock = std::chrono::steady_clock;

inline double msSince(Clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

} // namespace kvwb::gpu::detail
