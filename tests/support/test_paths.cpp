#include "tests/support/test_paths.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kvwb::test {

std::filesystem::path sourceDir()
{
    const char *p = std::getenv("KVWB_SOURCE_DIR");
    return p ? std::filesystem::path(p) : std::filesystem::current_path();
}

std::filesystem::path kvwbBinary()
{
    const char *p = std::getenv("KVWB_BINARY");
    return p ? std::filesystem::path(p) : std::filesystem::path("kvwb");
}

std::filesystem::path kvwbEngineBinary()
{
    const char *p = std::getenv("KVWB_ENGINE_BINARY");
    return p ? std::filesystem::path(p) : kvwbBinary().parent_path() / "kvwb-engine";
}

bool headlessBuild()
{
    const char *p = std::getenv("KVWB_HEADLESS");
    return p && std::string(p) == "1";
}

void writeFile(const std::filesystem::path &path, const std::string &text)
{
    if (path.has_parent_path())
        std::filesystem::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(text.data(), std::streamsize(text.size()));
    if (!out)
        throw std::runtime_error("cannot write " + path.string());
}

std::string readFile(const std::filesystem::path &path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error("cannot read " + path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

} // namespace kvwb::test
