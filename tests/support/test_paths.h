// Paths tests need: the source tree and the built kvwb executables (passed by CTest's environment):
// kvwb, the light front end that the integration tests run, and kvwb-engine, the whole program it
// execs for the window and the subcommands that need the engine.
#pragma once

#include <filesystem>
#include <string>

namespace kvwb::test {

std::filesystem::path sourceDir();        // KVWB_SOURCE_DIR
std::filesystem::path kvwbBinary();       // KVWB_BINARY
std::filesystem::path kvwbEngineBinary(); // KVWB_ENGINE_BINARY
// Whether those are the headless programs (KVWB_HEADLESS=1 in CTest's environment): no window and
// no report writer.
bool headlessBuild();
// Writes text to path (creating parent directories); throws std::runtime_error on failure.
void writeFile(const std::filesystem::path &path, const std::string &text);
std::string readFile(const std::filesystem::path &path);

} // namespace kvwb::test
