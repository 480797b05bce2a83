// BERT WordPiece (core/tokenize/wordpiece_tokenizer.h): the bytes as a WordPiece tokenizer.json
// (model, normalizer, pre-tokenizer, post-processor, decoder, added tokens) or, when they are not
// JSON, as the lines of a vocab.txt, loaded or refused with kvwb::core::Error, then a round of
// encode and decode; and the same bytes as text through a fixed WordPiece tokenizer, whose every
// token span must lie inside the text.
#include "core/tokenize/wordpiece_tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace kvwb::core;
    const std::string_view bytes(reinterpret_cast<const char *>(data), size);
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        static const auto fixed = WordPieceTokenizer::fromTokens(
            buildWordPieceVocab({"The quick brown fox jumps",
                                 "Caf\xc3\xa9 na\xc3\xafve \xe5\x8c\x97\xe4\xba\xac",
                                 "don't stop: tokenization, 42!"},
                                200),
            WordPieceOptions{}, "fixed vocab");
        const Encoding enc = fixed->encodeWithOffsets(bytes, true);
        for (const TokenSpan &s : enc.spans)
            if (s.begin < 0 || s.end < s.begin || size_t(s.end) > bytes.size())
                std::abort(); // a span outside the text it came from
        (void)fixed->decode(enc.ids, true);

        std::unique_ptr<WordPieceTokenizer> tok;
        if (!bytes.empty() && bytes.front() == '{') {
            tok = WordPieceTokenizer::fromJsonText(bytes, "tokenizer.json");
        } else {
            std::vector<std::string> lines;
            size_t at = 0;
            while (at <= bytes.size() && lines.size() < 100000) {
                const size_t nl = bytes.find('\n', at);
                lines.emplace_back(
                    bytes.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at));
                if (nl == std::string_view::npos)
                    break;
                at = nl + 1;
            }
            tok = WordPieceTokenizer::fromTokens(std::move(lines), WordPieceOptions{}, "vocab.txt");
        }
        const auto ids = tok->encode("Hello world, it's 42 \xc3\xa9t\xc3\xa9!", true);
        (void)tok->decode(ids, false);
    });
}
