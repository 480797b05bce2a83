// Project files (.kvwb): every section and field.
#include "core/settings/project.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const auto path = kvwb::fuzz::inputFile(data, size, "fuzz.kvwb");
    return kvwb::fuzz::expectOnlyKvwbErrors([&] { (void)kvwb::core::Project::load(path); });
}
