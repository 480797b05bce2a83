// The monotonic clock every timing in kvwb (TTFT, prefill, capture, transfer, job wall times) uses,
// and milliseconds since a point of it; and the wall clock's Unix milliseconds (when a knowledge
// module was built). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>

namespace kvwb::core {

using Clock = std::chrono::steady_clock;

inline double msSince(Clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

inline int64_t unixMsNow()
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

} // namespace kvwb::core
