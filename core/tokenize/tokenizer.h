// Tokenizers: byte-level BPE from tokenizer.json, SentencePiece tokenizer.model, llama2.c
// tokenizer.bin, BERT WordPiece (tokenizer.json or vocab.txt), behind one interface.
//
// encode/decode agree byte for byte with the reference implementations (HF tokenizers, sentencepiece,
// llama2.c run.c). Thread-safety: a loaded Tokenizer is immutable; encode/decode are const and may be
// called concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvwb::core {

struct ModelConfig;

// A token's bytes [begin, end) in the text it was encoded from. A token that stands for no text (BOS
// or EOS added by the post-processor, the dummy-prefix space a tokenizer adds on its own) has an
// empty span: at 0 before the text, at the text's end after it.
struct TokenSpan
{
    int32_t begin = 0;
    int32_t end = 0;
    bool empty() const { return end <= begin; }
    bool operator==(const TokenSpan &) const = default;
};

// ids as encode() returns them, with one span per id. exact is false when the tokenizer's
// normalizer changed the text in a way the spans could not follow (NFKC on compatibility
// characters, lower-casing): from the first such token on, the spans are spread over the rest of
// the text in proportion to the tokens' decoded lengths.
struct Encoding
{
    std::vector<int> ids;
    std::vector<TokenSpan> spans; // [ids.size()]
    bool exact = true;
};

class Tokenizer
{
public:
    virtual ~Tokenizer() = default;

    // addSpecial: add what the tokenizer's post-processor adds (BOS for Llama, nothing for GPT-2).
    virtual std::vector<int> encode(std::string_view text, bool addSpecial) const = 0;
    // Concatenated bytes of the tokens. Special tokens are rendered as their text unless skipSpecial.
    virtual std::string decode(const std::vector<int> &ids, bool skipSpecial = false) const = 0;
    // The vocabulary entry for id as stored (e.g. "Ġthe", "▁the", "<0x0A>"); empty if out of range.
    virtual std::string piece(int id) const = 0;
    // Number of ids (max id + 1).
    virtual int vocabSize() const = 0;
    virtual std::optional<int> bosId() const = 0;
    virtual std::optional<int> eosId() const = 0;
    virtual bool isSpecial(int id) const = 0;
    virtual std::string kind() const = 0; // "bpe" | "sentencepiece" | "llama2c" | "wordpiece"
    // id of an exact piece string, if present.
    virtual std::optional<int> pieceToId(std::string_view piece) const = 0;

    // encode() with each token's byte span in text. Each byte token of a character split over byte
    // pieces covers its own byte; a "▁" or leading-space token covers the space it stands for (none
    // when the tokenizer added it); a merge across words covers all of them. The default works
    // for any tokenizer whose decode() gives the text back: it decodes the tokens one by one and
    // follows the text (tokenizer.json BPE); SentencePiece and llama2.c override it.
    virtual Encoding encodeWithOffsets(std::string_view text, bool addSpecial) const;
};

namespace detail {
// The matching behind encodeWithOffsets: ids with, per id, the bytes it decodes to ("surface");
// the first `leading` and last `trailing` ids were added by the post-processor (no text). The
// surfaces, in order, spell syntheticPrefix + text up to what the tokenizer normalised: a token
// whose surface has a space the text lacks at that point gets the rest of its surface, a special
// token absent from the text an empty span, whitespace the tokenizer dropped is skipped; anything
// else ends exact matching (Encoding::exact false, the rest spread in proportion).
Encoding matchSurfaces(std::string_view text, std::vector<int> ids, const std::vector<std::string> &surfaces,
                       size_t leading, size_t trailing, std::string_view syntheticPrefix,
                       const Tokenizer &tok);
// How many ids the post-processor put before and after plain (the ids of encode(text, false)) in
// full (encode(text, true)): {leading, trailing}; every special id at either end when plain is not
// a contiguous part of full.
std::pair<size_t, size_t> addedAround(const std::vector<int> &full, const std::vector<int> &plain,
                                      const Tokenizer &tok);
} // namespace detail

// The longest text encode() takes: 4 MiB, about a million tokens, past every context kvwb runs;
// longer text is refused (Error(InvalidArgument) naming the tokenizer) before any work is sized
// from it (a tokenizer needs a few hundred bytes per character on the way).
inline constexpr size_t kMaxTextBytes = size_t(4) << 20;
void checkTextSize(std::string_view text, const std::string &tokenizerSource);

// path: tokenizer.json (BPE, or WordPiece when its model.type says so), tokenizer.model,
// tokenizer.bin, a BERT vocab.txt (with tokenizer_config.json beside it), a .gguf file (its
// tokenizer.ggml.* metadata), or a directory holding one of tokenizer.json, tokenizer.model,
// tokenizer.bin, vocab.txt (preferred in that order). Error(Io) for unreadable, Error(Tokenizer) naming the
// file and the field/entry at fault for malformed content.
std::unique_ptr<Tokenizer> loadTokenizer(const std::filesystem::path &path);

// Error(Tokenizer) when the tokenizer can produce ids >= the model's vocab size.
void checkTokenizerFitsModel(const Tokenizer &tok, const ModelConfig &config,
                             const std::string &tokenizerSource);

} // namespace kvwb::core
