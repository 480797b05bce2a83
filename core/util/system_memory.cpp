#include "core/util/system_memory.h"

#include "core/util/error.h"

#include <fmt/format.h>

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

namespace {

// GB to two decimals, or MB to one below a gigabyte (a tiny model's figures would read 0.00 GB).
std::string sizeText(int64_t bytes)
{
    return bytes >= 1000000000 ? fmt::format("{:.2f} GB", double(bytes) / 1e9)
                               : fmt::format("{:.1f} MB", double(bytes) / 1e6);
}

} // namespace

void checkWorkingSet(const std::string &job, int64_t bytes, const std::string &what,
                     const std::string &remedy)
{
    const auto available = availableMemoryBytes();
    if (!available || bytes <= *available)
        return;
    throw Error(ErrorCode::Device,
                fmt::format("{} needs about {} of working memory ({}), and this machine has {} available "
                            "(MemAvailable); not started{}",
                            job, sizeText(bytes), what, sizeText(*available),
                            remedy.empty() ? std::string() : " (" + remedy + ")"));
}

} // namespace kvwb::core
