// Where kvwb's own files lie relative to the running executable, so an installed copy finds them
// wherever it was installed (no absolute path compiled in). The installed layout (packaging/):
//   <prefix>/bin/kvwb                          the front end
//   <prefix>/lib/kvwb/kvwb-engine              the engine, beside
//   <prefix>/lib/kvwb/libkvwb_spm.so           the SentencePiece shim (core/tokenize/spm_library.cpp)
//   <prefix>/share/kvwb/projects/demo          the demo project
// The build tree keeps kvwb, kvwb-engine and libkvwb_spm.so side by side in build/ and the demo
// project in the source tree. Thread-safety: functions of the process, safe from any thread.
#pragma once

#include <filesystem>
#include <optional>

namespace kvwb::core {

// The running executable's directory (from /proc/self/exe); empty when that is unreadable.
std::filesystem::path executableDir();

// The install prefix when the running executable sits in an installed layout: <prefix> for
// <prefix>/bin/<exe> and for <prefix>/lib/kvwb/<exe>; nullopt otherwise (e.g. the build tree).
std::optional<std::filesystem::path> installPrefix();

// <prefix>/share/kvwb/projects/demo when running installed and that folder holds demo.kvwb.
std::optional<std::filesystem::path> installedDemoProject();

} // namespace kvwb::core
