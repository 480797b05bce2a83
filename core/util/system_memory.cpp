#include "core/util/system_memory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvwb::core {

namespace {

// The first "<key>: <n> kB" line of a /proc file, in bytes.
std::optional<int64_t> procKilobytes(const char *path, const char *format)
{
    std::FILE *f = std::fopen(path, "re");
    if (!f)
        return std::nullopt;
    std::optional<int64_t> out;
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
        long long kb = 0;
        if (std::sscanf(line, format, &kb) == 1) {
            out = int64_t(kb) * 1024;
            break;
        }
    }
    std::fclose(f);
    return out;
}

} // namespace

std::optional<int64_t> availableMemoryBytes()
{
    if (const char *injected = std::getenv("KVWB_TEST_MEM_AVAILABLE")) {
        char *end = nullptr;
        const long long v = std::strtoll(injected, &end, 10);
        if (end != injected && *end == '\0' && v >= 0)
            return int64_t(v);
    }
    return procKilobytes("/proc/meminfo", "MemAvailable: %lld kB");
}

std::optional<int64_t> peakResidentBytes()
{
    return procKilobytes("/proc/self/status", "VmHWM: %lld kB");
}

} // namespace kvwb::core
