// This build's version and git commit (set by CMake), for the provenance every file kvwb writes
// records. Thread-safety: constants.
#pragma once

namespace kvwb::core {

const char *appVersion() noexcept; // e.g. "0.1.0"; "unknown" outside a CMake build
const char *gitCommit() noexcept;  // abbreviated commit hash, "unknown" without git

} // namespace kvwb::core
