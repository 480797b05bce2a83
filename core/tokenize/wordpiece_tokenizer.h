// BERT WordPiece tokenizer (all-MiniLM, bge, gte, e5 and kvwb's own embedder), exact against Hugging
// Face tokenizers' BertNormalizer + BertPreTokenizer + WordPiece + TemplateProcessing/BertProcessing +
// WordPiece decoder.
//
// Pipeline, as in HF tokenizers: split out the added tokens ([CLS], [SEP], ... matched in the raw
// text), then per remaining segment
//  - normalise: clean_text (drop U+0000, U+FFFD and control characters Cc/Cf/Co except \t \n \r;
//    White_Space characters become ' '), handle_chinese_chars (' ' around each CJK ideograph),
//    strip_accents (NFD, then Mn marks dropped; unset = follow lowercase), lowercase (each
//    character's full lower-case mapping, no final-sigma context: Rust's char::to_lowercase);
//  - pre-tokenise: split on White_Space; every punctuation character (Unicode P*, or ASCII 33-47,
//    58-64, 91-96, 123-126) is a word of its own;
//  - WordPiece each word: greedy longest match first, pieces after the first with the continuing
//    prefix ("##"); a word of more than max_input_chars_per_word characters (100), or one that cannot
//    be matched to the end, is one [UNK];
// and addSpecial wraps the ids in the post-processor's tokens ([CLS] ... [SEP]).
//
// Offsets follow every character through the normaliser (as HF's NormalizedString does), so a
// token's span is the original bytes it came from ("Café" -> "cafe" spans all 5 bytes) and
// Encoding::exact stays true.
//
// Sources: tokenizer.json whose model.type is "WordPiece"; a directory (or its vocab.txt) with
// vocab.txt (one token per line, id = line number - 1) and an optional tokenizer_config.json (HF
// BertTokenizer's do_lower_case, strip_accents, tokenize_chinese_chars, unk/cls/sep/pad/mask
// tokens); GGUF "bert" vocabularies come through gguf_tokenizer.h as the tokenizer.json they stand for.
//
// Thread-safety: immutable after construction; encode/decode may run concurrently. The free
// functions below (kvwb's own vocabularies: the demo's sentence embedder ships one; implemented in
// wordpiece_vocab.cpp) are pure, and writeWordPieceVocab writes only the files it names.
#pragma once

#include "core/tokenize/tokenizer.h"

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

// BertNormalizer's flags, the WordPiece model's parameters and the special tokens (HF BertTokenizer's
// defaults).
struct WordPieceOptions
{
    bool lowercase = true;
    std::optional<bool> stripAccents; // unset: strip when lowercase (HF's None)
    bool cleanText = true;
    bool handleChineseChars = true;
    std::string continuingPrefix = "##";
    int maxInputCharsPerWord = 100; // in characters (code points)
    std::string unkToken = "[UNK]";
    std::string clsToken = "[CLS]";
    std::string sepToken = "[SEP]";
    std::string padToken = "[PAD]";
    std::string maskToken = "[MASK]";

    bool stripsAccents() const { return stripAccents.value_or(lowercase); }
};

class WordPieceTokenizer : public Tokenizer
{
public:
    // tokenizer.json. Error(Io) if unreadable; Error(Tokenizer) naming the file and the field at
    // fault; Error(Unsupported) for a normalizer, pre-tokenizer, post-processor or decoder type other
    // than BertNormalizer, BertPreTokenizer, TemplateProcessing/BertProcessing, WordPiece (or null).
    static std::unique_ptr<WordPieceTokenizer> fromJsonFile(const std::filesystem::path &path);
    // sourceName appears in error messages in place of a file name.
    static std::unique_ptr<WordPieceTokenizer> fromJsonText(std::string_view json,
                                                            const std::string &sourceName);
    // A directory holding vocab.txt (and maybe tokenizer_config.json), or the vocab.txt itself.
    // Error(Tokenizer) naming the file and line (a duplicate token, invalid UTF-8) or field (a
    // special token that is not in the vocabulary; the unknown token must be).
    static std::unique_ptr<WordPieceTokenizer> fromVocabDirectory(const std::filesystem::path &path);
    // tokens[id]; the five special tokens are those of options present in tokens (unk required).
    static std::unique_ptr<WordPieceTokenizer> fromTokens(std::vector<std::string> tokens,
                                                          const WordPieceOptions &options,
                                                          const std::string &sourceName);
    ~WordPieceTokenizer() override;

    std::vector<int> encode(std::string_view text, bool addSpecial) const override;
    // Spans through the normaliser: exact is always true (see above). Added prefix/suffix tokens
    // have empty spans at 0 and at the text's end; an [UNK] covers its whole word.
    Encoding encodeWithOffsets(std::string_view text, bool addSpecial) const override;
    // HF's WordPiece decoder: a piece with the continuing prefix is joined to the one before it
    // (prefix removed), any other piece after the first gets a space before it; with cleanup (the
    // default) " ." " ?" " !" " ," " n't" " 'm" " 's" " 've" " 're" lose their space. skipSpecial
    // drops the special tokens ([CLS], [SEP], [PAD], [MASK], [UNK] when they are special).
    std::string decode(const std::vector<int> &ids, bool skipSpecial = false) const override;
    std::string piece(int id) const override; // HF form: "the", "##ing", "[CLS]"
    int vocabSize() const override;
    std::optional<int> bosId() const override; // the first token addSpecial puts before the text ([CLS])
    std::optional<int> eosId() const override; // the last one it puts after it ([SEP])
    bool isSpecial(int id) const override;
    std::string kind() const override { return "wordpiece"; }
    std::optional<int> pieceToId(std::string_view piece) const override;

    // The ids an encoder needs to build its batches.
    int unkId() const;
    std::optional<int> padId() const;
    std::optional<int> clsId() const;
    std::optional<int> sepId() const;
    std::optional<int> maskId() const;
    const WordPieceOptions &options() const;

    // Normaliser + pre-tokeniser only: the words WordPiece would see (added tokens not split out).
    std::vector<std::string> preTokenize(std::string_view text) const;

    struct Impl;

private:
    explicit WordPieceTokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

// Writes dir/vocab.txt (tokens[id], one per line) and dir/tokenizer_config.json (the options as HF
// BertTokenizer reads them), creating dir. Error(InvalidArgument) for an empty token, one holding a
// line break, a duplicate, or an unknown token that is not in tokens; Error(Io) naming the file.
void writeWordPieceVocab(const std::filesystem::path &dir, const std::vector<std::string> &tokens,
                         const WordPieceOptions &options = {});

// A WordPiece vocabulary for texts, of at most targetSize tokens: the five special tokens
// ([PAD] [UNK] [CLS] [SEP] [MASK], options' names, at ids 0-4), every character of the normalised,
// pre-tokenised words and its continuing form ("a", "##a"; by code point), then, by count (ties by
// byte order), whole words and continuing suffix pieces ("##ing": the tail of a word from its second
// character on, counted once per word occurrence, at least 2 characters). Characters are always
// kept, so the result may exceed targetSize when the texts have more than about targetSize / 2
// distinct characters. Deterministic: the same texts give the same list.
std::vector<std::string> buildWordPieceVocab(const std::vector<std::string> &texts, size_t targetSize,
                                             const WordPieceOptions &options = {});

} // namespace kvwb::core
