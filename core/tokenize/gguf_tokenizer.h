// The tokenizer a GGUF file carries in its metadata (tokenizer.ggml.*), and the other way round.
//
// Reading: "gpt2" (byte-level BPE: tokens, merges, token types, the pre-tokenizer by its llama.cpp
// name in tokenizer.ggml.pre) becomes the tokenizer.json it stands for and loads through
// BpeTokenizer; "llama" (SentencePiece-style: tokens, scores, token types) becomes a SentencePiece
// BPE model (byte fallback when the vocabulary has byte pieces, a dummy-prefix space as
// tokenizer.ggml.add_space_prefix says, no whitespace collapsing: llama.cpp's SPM tokenizer) and
// loads through SentencePieceTokenizer; "bert" (llama.cpp's WordPiece vocabulary: "▁" marks a
// word-initial token, a continuing piece has no "##", [CLS]-style tokens are kept) becomes the
// BertTokenizerFast tokenizer.json it stands for and loads through WordPieceTokenizer. Other
// tokenizer models and pre-tokenizer names are refused (Error(Unsupported) naming the file, the
// value and what is supported).
//
// Writing: a tokenizer.json (byte-level BPE with one of those pre-tokenizers) or a SentencePiece
// BPE tokenizer.model as those keys, the way llama.cpp's convert_hf_to_gguf.py writes them.
//
// Thread-safety: pure functions.
#pragma once

#include "core/model/gguf.h"
#include "core/tokenize/tokenizer.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kvwb::core {

// Whether the file has tokenizer metadata at all (tokenizer.ggml.model).
bool ggufHasTokenizer(const GgufFile &file);
std::unique_ptr<Tokenizer> tokenizerFromGguf(const GgufFile &file);
// The same tokenizer as the file it stands for: {"tokenizer.json", JSON text} or
// {"tokenizer.model", a serialized SentencePiece ModelProto} ("bert": a WordPiece tokenizer.json),
// for `kvwb convert` to HF.
struct GgufTokenizerFile
{
    std::string name;
    std::string bytes;
};
GgufTokenizerFile ggufTokenizerFile(const GgufFile &file);

// The llama.cpp pre-tokenizer names kvwb reads, for messages and docs.
std::vector<std::string> ggufPreTokenizerNames();

// Sets tokenizer.ggml.* (and the BOS/EOS ids) from tokenizer.json or tokenizer.model. The token
// list is padded with unused "[PAD<id>]" tokens up to vocabSize (the model's embedding rows), as
// convert_hf_to_gguf.py does: llama.cpp refuses a token_embd with more rows than tokens.
// Error(Unsupported) naming the file for a tokenizer GGUF cannot express the same way.
void writeTokenizerToGguf(const std::filesystem::path &tokenizerFile, GgufWriter &out, int vocabSize = 0);
// Every tokenizer.* key of `from`, as it is.
void copyTokenizerMetadata(const GgufFile &from, GgufWriter &out);

} // namespace kvwb::core
