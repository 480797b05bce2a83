// GGUF: header counts, metadata values, tensor infos against the file size, then the model mapping
// (configuration, tensor names, q/k row permutation), every tensor dequantised, and the tokenizer
// from the metadata with a round of encode and decode.
#include "core/model/gguf.h"
#include "core/model/gguf_model.h"
#include "core/tokenize/gguf_tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const auto path = kvwb::fuzz::inputFile(data, size, "model.gguf");
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        const auto f = kvwb::core::GgufFile::open(path);
        (void)kvwb::core::ggufSummary(f);
        if (kvwb::core::ggufHasTokenizer(f)) {
            try {
                const auto tok = kvwb::core::tokenizerFromGguf(f);
                (void)tok->decode(tok->encode("Hello world, it's 42 \xc3\xa9t\xc3\xa9!", true), false);
            } catch (const kvwb::core::Error &) {
                // a refused tokenizer still lets the model mapping run below
            }
        }
        const auto m = kvwb::core::ggufModel(f);
        for (const auto &[name, t] : m.tensors)
            if (t.info.numel() <= (int64_t(1) << 22)) {
                kvwb::core::TensorRef ref{&t.info, t.data, path};
                (void)kvwb::core::toFloatVector(ref);
            }
    });
}
