// What the machine can still give a process: MemAvailable from /proc/meminfo (what the kernel
// estimates can be allocated without swapping), for refusing a load that would not fit instead of
// being killed part-way. Tests inject the figure with KVWB_TEST_MEM_AVAILABLE (bytes), so they do
// not depend on the machine. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>

namespace kvwb::core {

// nullopt when the figure cannot be read (no /proc: the check is skipped, not guessed).
std::optional<int64_t> availableMemoryBytes();

// This process's peak resident memory so far (VmHWM from /proc/self/status), for the commands that
// report what a job cost; nullopt where it cannot be read.
std::optional<int64_t> peakResidentBytes();

} // namespace kvwb::core
