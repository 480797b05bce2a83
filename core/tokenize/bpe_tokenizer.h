// BPE tokenizer read from a Hugging Face tokenizer.json (the "tokenizers" library's serialisation).
//
// Covers the byte-level family (GPT-2, Llama 3, Qwen2, SmolLM) and the SentencePiece-style BPE
// files (Llama 2's tokenizer.json with byte_fallback). Pipeline, as in HF tokenizers: split out
// added tokens, normalize, split out normalized added tokens, pre-tokenize, BPE each pre-token,
// then the post-processor's `single` template when addSpecial. Components we do not implement
// are rejected at load time with Error(Unsupported) naming the file and the component type, so a
// loaded tokenizer never silently tokenizes differently from the reference.
//
// Thread-safety: immutable after construction; encode/decode/preTokenize may run concurrently
// (PCRE2 match data is allocated per call). Owns its compiled regexes.
#pragma once

#include "core/tokenize/tokenizer.h"

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

class BpeTokenizer : public Tokenizer
{
public:
    // Error(Io) if unreadable; Error(Tokenizer) naming the file and field for malformed content;
    // Error(Unsupported) for a model/normalizer/pre-tokenizer/decoder type we do not implement.
    static std::unique_ptr<BpeTokenizer> fromJsonFile(const std::filesystem::path &path);
    // sourceName appears in error messages in place of a file name.
    static std::unique_ptr<BpeTokenizer> fromJsonText(std::string_view json, const std::string &sourceName);
    ~BpeTokenizer() override;

    std::vector<int> encode(std::string_view text, bool addSpecial) const override;
    std::string decode(const std::vector<int> &ids, bool skipSpecial = false) const override;
    std::string piece(int id) const override;
    int vocabSize() const override;
    std::optional<int> bosId() const override;
    std::optional<int> eosId() const override;
    bool isSpecial(int id) const override;
    std::string kind() const override { return "bpe"; }
    std::optional<int> pieceToId(std::string_view piece) const override;

    // Normalizer + pre-tokenizer only (no added-token split, no BPE), as HF's
    // `pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))`: the pre-tokens in the
    // model's alphabet (byte-level pieces come back mapped, e.g. "Ġworld"). For tests and
    // diagnostics.
    std::vector<std::string> preTokenize(std::string_view text) const;

    struct Impl;

private:
    explicit BpeTokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

} // namespace kvwb::core
