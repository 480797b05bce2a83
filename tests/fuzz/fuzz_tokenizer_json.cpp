// tokenizer.json: the whole pipeline (model, added tokens, normalizers, pre-tokenizers, decoders,
// post-processor), then a round of encode and decode.
#include "core/tokenize/bpe_tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        const auto tok = kvwb::core::BpeTokenizer::fromJsonText(
            std::string_view(reinterpret_cast<const char *>(data), size), "tokenizer.json");
        const auto ids = tok->encode("Hello world, it's 42 \xc3\xa9t\xc3\xa9!", true);
        (void)tok->decode(ids, false);
    });
}
