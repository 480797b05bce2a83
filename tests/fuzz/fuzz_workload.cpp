// Workload JSONL: malformed lines are skipped with warnings, never a crash.
#include "core/workload/workload.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        (void)kvwb::core::parseWorkloadJsonl(std::string_view(reinterpret_cast<const char *>(data), size),
                                             "workload.jsonl");
    });
}
