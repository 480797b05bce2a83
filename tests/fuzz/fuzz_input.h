// Shared by the fuzz targets (libFuzzer): the input as a file with the name a reader expects, and
// the one outcome a reader may have besides success - a kvwb::core::Error. Anything else (a crash,
// a sanitizer report, another exception escaping) is a finding.
#pragma once

#include "core/util/error.h"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace kvwb::fuzz {

// dir/<name> holding the input, in a directory of this process's own (rewritten every input).
inline std::filesystem::path inputFile(const uint8_t *data, size_t size, const std::string &name)
{
    static const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("kvwb-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = dir / name;
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char *>(data), std::streamsize(size));
    return path;
}

template <typename F> int expectOnlyKvwbErrors(F &&f)
{
    try {
        f();
    } catch (const core::Error &) {
        // a clean refusal: what a reader must do with bad input
    }
    return 0;
}

} // namespace kvwb::fuzz
