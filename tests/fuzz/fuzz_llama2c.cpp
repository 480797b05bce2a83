// llama2.c checkpoints: the header (legacy and v1), the tensor table it implies against the size.
#include "core/model/checkpoint.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const auto path = kvwb::fuzz::inputFile(data, size, "model.bin");
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        const auto ck = kvwb::core::Checkpoint::open(path);
        for (const auto &name : ck.tensorNames())
            (void)name;
    });
}
