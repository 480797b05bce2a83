// llama2.c tokenizer.bin: a flat list of (score, piece) exported from a SentencePiece model, with
// "▁" already turned into " " and BOS/EOS at ids 1 and 2.
//
// File layout (little-endian): int32 max_token_length, then until EOF one entry per id of
// float32 score, int32 byte length, that many bytes. encode/decode follow karpathy/llama2.c run.c
// exactly, including its greedy highest-score pair merging and its byte fallback (id = byte + 3).
//
// Thread-safety: immutable after load; encode/decode may run concurrently.
#pragma once

#include "core/tokenize/tokenizer.h"

#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvwb::core {

class Llama2cTokenizer : public Tokenizer
{
public:
    // Error(Io) if unreadable; Error(Tokenizer) naming the file and entry index when truncated.
    static std::unique_ptr<Llama2cTokenizer> fromFile(const std::filesystem::path &path);
    // bytes: the file's contents; sourceName appears in error messages.
    static std::unique_ptr<Llama2cTokenizer> fromBytes(std::string_view bytes, const std::string &sourceName);

    // run.c encode(): BOS (id 1) when addSpecial, then the " " dummy prefix when text is non-empty,
    // one id per UTF-8 code point (or per byte, as byte + 3, when the code point is not a piece),
    // then merges of the best-scoring adjacent pair until none is in the vocabulary. No EOS.
    std::vector<int> encode(std::string_view text, bool addSpecial) const override;
    // encode()'s ids; the dummy-prefix space is no text of the input (the token carrying it starts
    // at the text's first byte).
    Encoding encodeWithOffsets(std::string_view text, bool addSpecial) const override;
    // run.c decode(): a piece after BOS loses its leading space; "<0xXX>" is the raw byte.
    std::string decode(const std::vector<int> &ids, bool skipSpecial = false) const override;
    std::string piece(int id) const override;
    int vocabSize() const override { return int(m_pieces.size()); }
    std::optional<int> bosId() const override { return kBos; }
    std::optional<int> eosId() const override { return kEos; }
    bool isSpecial(int id) const override { return id >= 0 && id <= kEos && id < vocabSize(); }
    std::string kind() const override { return "llama2c"; }
    std::optional<int> pieceToId(std::string_view piece) const override;

    int maxTokenLength() const { return m_maxTokenLength; }
    float score(int id) const { return m_scores.at(size_t(id)); }

    static constexpr int kBos = 1;
    static constexpr int kEos = 2;

private:
    Llama2cTokenizer() = default;
    std::string m_source;                 // file name, for error messages
    int lookup(std::string_view s) const; // run.c str_lookup: -1 when absent

    int m_maxTokenLength = 0;
    std::vector<std::string> m_pieces;                 // [vocabSize]
    std::vector<float> m_scores;                       // [vocabSize]
    std::unordered_map<std::string_view, int> m_index; // views into m_pieces; first id wins
};

} // namespace kvwb::core
