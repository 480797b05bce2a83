#include "core/util/install_layout.h"

#include <system_error>

namespace kvwb::core {

namespace fs = std::filesystem;

fs::path executableDir()
{
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path() : exe.parent_path();
}

std::optional<fs::path> installPrefix()
{
    const fs::path dir = executableDir();
    if (dir.empty())
        return std::nullopt;
    if (dir.filename() == "bin")
        return dir.parent_path();
    if (dir.filename() == "kvwb" && dir.parent_path().filename() == "lib")
        return dir.parent_path().parent_path();
    return std::nullopt;
}

std::optional<fs::path> installedDemoProject()
{
    const auto prefix = installPrefix();
    if (!prefix)
        return std::nullopt;
    const fs::path demo = *prefix / "share" / "kvwb" / "projects" / "demo";
    std::error_code ec;
    if (!fs::is_regular_file(demo / "demo.kvwb", ec))
        return std::nullopt;
    return demo;
}

} // namespace kvwb::core
