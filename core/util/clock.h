// The monotonic clock every timing in kvwb (TTFT, prefill, capture, transfer, job wall times) uses,
// and milliseconds since a point of it. Thread-safe.
#pragma once

#include <chrono>

namespace kvwb::core {

using Clock = std::chrono::steady_clock;

inline double msSince(Clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

} // namespace kvwb::core
