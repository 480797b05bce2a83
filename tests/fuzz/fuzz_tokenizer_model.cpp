// SentencePiece tokenizer.model (protobuf), through the sentencepiece shim, then a round of
// encode and decode.
#include "core/tokenize/sentencepiece_tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const auto path = kvwb::fuzz::inputFile(data, size, "tokenizer.model");
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        const auto tok = kvwb::core::SentencePieceTokenizer::fromFile(path);
        const auto ids = tok->encode("Hello world, it's 42 \xc3\xa9t\xc3\xa9!", true);
        (void)tok->decode(ids, false);
    });
}
