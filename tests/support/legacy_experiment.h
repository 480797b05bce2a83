// Test helper: turns a kvwb/2 experiment file back into what kvwb/1 wrote (every string attribute
// and every bytes + offsets string list outside /prompts variable-length, no /kv/<m>/crc32, schema
// kvwb/1), for the tests of kvwb upgrade. Aborts when an HDF5 call fails.
#pragma once

#include <filesystem>

namespace kvwb::test {

void downgradeToKvwb1(const std::filesystem::path &path);

} // namespace kvwb::test
