// safetensors: header length, JSON header, dtypes, shapes and data offsets against the file size.
#include "core/model/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const auto path = kvwb::fuzz::inputFile(data, size, "model.safetensors");
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        const auto f = kvwb::core::SafetensorsFile::open(path);
        for (const auto &t : f.tensors())
            (void)f.bytes(t);
    });
}
