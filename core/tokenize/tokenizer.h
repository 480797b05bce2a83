// Tokenizers: byte-level BPE from tokenizer.json, SentencePiece tokenizer.model, llama2.c
// tokenizer.bin, behind one interface.
//
// encode/decode agree byte for byte with the reference implementations (HF tokenizers, sentencepiece,
// llama2.c run.c). Thread-safety: a loaded Tokenizer is immutable; encode/decode are const and may be
// called concurrently.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

struct ModelConfig;

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
    virtual std::string kind() const = 0; // "bpe" | "sentencepiece" | "llama2c"
    // id of an exact piece string, if present.
    virtual std::optional<int> pieceToId(std::string_view piece) const = 0;
};

// The longest text encode() takes: 4 MiB, about a million tokens, past every context kvwb runs;
// longer text is refused (Error(InvalidArgument) naming the tokenizer) before any work is sized
// from it (a tokenizer needs a few hundred bytes per character on the way).
inline constexpr size_t kMaxTextBytes = size_t(4) << 20;
void checkTextSize(std::string_view text, const std::string &tokenizerSource);

// path: tokenizer.json, tokenizer.model, tokenizer.bin, a .gguf file (its tokenizer.ggml.* metadata), or a
// directory holding one of the first three
// (preferred in that order). Error(Io) for unreadable, Error(Tokenizer) naming the file and the
// field/entry at fault for malformed content.
std::unique_ptr<Tokenizer> loadTokenizer(const std::filesystem::path &path);

// Error(Tokenizer) when the tokenizer can produce ids >= the model's vocab size.
void checkTokenizerFitsModel(const Tokenizer &tok, const ModelConfig &config,
                             const std::string &tokenizerSource);

} // namespace kvwb::core
