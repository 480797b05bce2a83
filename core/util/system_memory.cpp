#include "core/util/system_memory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvwb::core {

std::optional<int64_t> availableMemoryBytes()
{
    if (const char *injected = std::getenv("KVWB_TEST_MEM_AVAILABLE")) {
        char *end = nullptr;
        const long long v = std::strtoll(injected, &end, 10);
        if (end != injected && *end == '\0' && v >= 0)
            return int64_t(v);
    }
    std::FILE *f = std::fopen("/proc/meminfo", "re");
    if (!f)
        return std::nullopt;
    std::optional<int64_t> out;
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
        long long kb = 0;
        if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1) {
            out = int64_t(kb) * 1024;
            break;
        }
    }
    std::fclose(f);
    return out;
}

std::optional<int64_t> peakResidentBytes()
{
    std::FILE *f = std::fopen("/proc/self/status", "re");
    if (!f)
        return std::nullopt;
    std::optional<int64_t> out;
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
        long long kb = 0;
        if (std::sscanf(line, "VmHWM: %lld kB", &kb) == 1) {
            out = int64_t(kb) * 1024;
            break;
        }
    }
    std::fclose(f);
    return out;
}

} // namespace kvwb::core
