// Run archives (.zip): the manifest and every entry as the import streams them.
#include "core/settings/run_archive.h"
#include "tests/fuzz/fuzz_input.h"

#include <filesystem>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const auto path = kvwb::fuzz::inputFile(data, size, "fuzz.zip");
    const auto into = path.parent_path() / "into";
    std::filesystem::remove_all(into);
    const int rc = kvwb::fuzz::expectOnlyKvwbErrors([&] {
        (void)kvwb::core::readArchiveManifest(path);
        (void)kvwb::core::importRunArchive(path, into);
    });
    std::filesystem::remove_all(into);
    return rc;
}
