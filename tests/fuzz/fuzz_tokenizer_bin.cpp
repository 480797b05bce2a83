// llama2.c tokenizer.bin: header, entries, lengths; then encode and decode.
#include "core/tokenize/llama2c_tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        const auto tok = kvwb::core::Llama2cTokenizer::fromBytes(
            std::string_view(reinterpret_cast<const char *>(data), size), "tokenizer.bin");
        const auto ids = tok->encode("hello zebra", true);
        (void)tok->decode(ids, false);
    });
}
