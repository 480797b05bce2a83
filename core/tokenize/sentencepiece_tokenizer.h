// SentencePiece tokenizer.model (Llama 2, Mistral, TinyLlama...) through libsentencepiece, reached
// via the libkvwb_spm shim (core/tokenize/spm_library.h).
//
// encode/decode are the processor's own; addSpecial prepends BOS when the model defines one (as
// Llama 2's HF tokenizer does; EOS is never added). Control pieces (<s>, </s>) that sentencepiece
// would decode to nothing are rendered as their piece text unless skipSpecial.
//
// Thread-safety: immutable after load; SentencePieceProcessor's const methods are thread-safe, so
// encode/decode may run concurrently. Owns the processor handle.
#pragma once

#include "core/tokenize/tokenizer.h"

#include <filesystem>
#include <memory>
#include <string>

struct kvwb_spm;

namespace kvwb::core {

class SentencePieceTokenizer : public Tokenizer
{
public:
    // Error(Io) if unreadable; Error(Tokenizer) naming the file if sentencepiece rejects it.
    static std::unique_ptr<SentencePieceTokenizer> fromFile(const std::filesystem::path &path);
    // A serialized ModelProto; sourceName appears in error messages in place of a file name.
    static std::unique_ptr<SentencePieceTokenizer> fromBytes(std::string_view bytes,
                                                             const std::string &sourceName);
    ~SentencePieceTokenizer() override;

    std::vector<int> encode(std::string_view text, bool addSpecial) const override;
    // sentencepiece's own offsets (through its normaliser, so exact for NFKC and collapsed
    // whitespace too), each byte-fallback piece narrowed to its byte.
    Encoding encodeWithOffsets(std::string_view text, bool addSpecial) const override;
    std::string decode(const std::vector<int> &ids, bool skipSpecial = false) const override;
    std::string piece(int id) const override;
    int vocabSize() const override;
    std::optional<int> bosId() const override;
    std::optional<int> eosId() const override;
    bool isSpecial(int id) const override; // control and unknown pieces
    std::string kind() const override { return "sentencepiece"; }
    std::optional<int> pieceToId(std::string_view piece) const override;

private:
    SentencePieceTokenizer(kvwb_spm *sp, std::string source);
    kvwb_spm *m_sp = nullptr; // owned; freed through the shim
    std::string m_source;     // file name, for error messages
};

} // namespace kvwb::core
