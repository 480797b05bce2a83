// What the machine can still give a process: MemAvailable from /proc/meminfo (what the kernel
// estimates can be allocated without swapping), for refusing a load that would not fit instead of
// being killed part-way. Tests inject the figure with KVWB_TEST_MEM_AVAILABLE (bytes), so they do
// not depend on the machine. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kvwb::core {

// nullopt when the figure cannot be read (no /proc: the check is skipped, not guessed).
std::optional<int64_t> availableMemoryBytes();

// This process's peak resident memory so far (VmHWM from /proc/self/status), for the commands that
// report what a job cost; nullopt where it cannot be read.
std::optional<int64_t> peakResidentBytes();

// Refuses a job whose working set (bytes, on top of what is already loaded) would not fit in
// what the machine has available now: Error(Device) "<job> needs about X GB of working memory
// (<what>), and this machine has Y GB available (MemAvailable); not started (<remedy>)" (MB below
// a gigabyte). Nothing
// when the figure cannot be read.
void checkWorkingSet(const std::string &job, int64_t bytes, const std::string &what,
                     const std::string &remedy);

} // namespace kvwb::core
