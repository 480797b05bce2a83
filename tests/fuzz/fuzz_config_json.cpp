// config.json: every field, its type and range, the stated limits.
#include "core/model/model_config.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        const auto c = kvwb::core::ModelConfig::fromHfJsonText(
            std::string_view(reinterpret_cast<const char *>(data), size), "config.json");
        (void)c.ropeInvFreq(0);
        (void)c.ropeInvFreq(c.numLayers - 1);
        (void)c.toHfJson();
    });
}
