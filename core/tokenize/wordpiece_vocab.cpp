// writeWordPieceVocab and buildWordPieceVocab (declared in wordpiece_tokenizer.h).
#include "core/tokenize/wordpiece_tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace kvwb::core {

namespace fs = std::filesystem;
using nlohmann::json;

void writeWordPieceVocab(const fs::path &dir, const std::vector<std::string> &tokens,
                         const WordPieceOptions &options)
{
    std::unordered_map<std::string_view, size_t> seen;
    std::string vocab;
    for (size_t i = 0; i < tokens.size(); ++i) {
        const std::string &t = tokens[i];
        if (t.empty() || t.find_first_of("\r\n") != std::string::npos)
            throw Error(ErrorCode::InvalidArgument, fmt::format("{}: token {} is empty or holds a line break",
                                                                (dir / "vocab.txt").string(), i));
        if (text::firstInvalidUtf8(t))
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{}: token {} is not valid UTF-8", (dir / "vocab.txt").string(), i));
        if (const auto [it, inserted] = seen.emplace(t, i); !inserted)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{}: token {} \"{}\" repeats token {}", (dir / "vocab.txt").string(), i,
                                    t, it->second));
        vocab += t;
        vocab += '\n';
    }
    if (!seen.contains(options.unkToken))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: the unknown token \"{}\" is not among the {} tokens",
                                (dir / "vocab.txt").string(), options.unkToken, tokens.size()));
    json config = {{"tokenizer_class", "BertTokenizer"},
                   {"do_lower_case", options.lowercase},
                   {"strip_accents", options.stripAccents ? json(*options.stripAccents) : json()},
                   {"tokenize_chinese_chars", options.handleChineseChars},
                   {"do_basic_tokenize", true},
                   {"unk_token", options.unkToken},
                   {"cls_token", options.clsToken},
                   {"sep_token", options.sepToken},
                   {"pad_token", options.padToken},
                   {"mask_token", options.maskToken},
                   {"clean_up_tokenization_spaces", true}};
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
        throw Error(ErrorCode::Io, dir.string() + ": cannot create the directory: " + ec.message());
    writeFileAtomic(dir / "vocab.txt", vocab);
    writeFileAtomic(dir / "tokenizer_config.json", config.dump(2) + "\n");
}

std::vector<std::string> buildWordPieceVocab(const std::vector<std::string> &texts, size_t targetSize,
                                             const WordPieceOptions &options)
{
    std::vector<std::string> vocab = {options.padToken, options.unkToken, options.clsToken, options.sepToken,
                                      options.maskToken};
    std::unordered_map<std::string, size_t> index;
    for (size_t i = 0; i < vocab.size(); ++i)
        if (!index.emplace(vocab[i], i).second)
            throw Error(ErrorCode::InvalidArgument,
                        "buildWordPieceVocab: special token \"" + vocab[i] + "\" is named twice");
    // The normaliser and pre-tokeniser of the tokenizer the vocabulary is for.
    const auto tok = WordPieceTokenizer::fromTokens(vocab, options, "buildWordPieceVocab");
    std::unordered_map<std::string, uint64_t> words;
    for (const std::string &t : texts)
        for (std::string &w : tok->preTokenize(t))
            ++words[std::move(w)];
    std::map<char32_t, bool> chars; // ordered by code point
    std::unordered_map<std::string, uint64_t> counts;
    const size_t maxChars = size_t(std::max(options.maxInputCharsPerWord, 0));
    for (const auto &[w, n] : words) {
        std::vector<size_t> at; // where each character starts
        for (size_t i = 0; i < w.size();) {
            at.push_back(i);
            chars[text::nextCodePoint(w, i)] = true;
        }
        if (at.size() > maxChars)
            continue; // WordPiece gives such a word [UNK] whatever the vocabulary
        counts[w] += n;
        for (size_t k = 1; k + 1 < at.size(); ++k)
            counts[options.continuingPrefix + w.substr(at[k])] += n;
    }
    const auto add = [&](std::string t) {
        if (index.emplace(t, vocab.size()).second)
            vocab.push_back(std::move(t));
    };
    for (const auto &[c, unused] : chars) {
        std::string s;
        text::appendUtf8(s, c);
        add(s);
        add(options.continuingPrefix + s);
    }
    std::vector<std::pair<std::string, uint64_t>> ranked;
    for (auto &[t, n] : counts)
        if (!index.contains(t))
            ranked.emplace_back(t, n);
    std::sort(ranked.begin(), ranked.end(), [](const auto &a, const auto &b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    for (auto &[t, n] : ranked) {
        if (vocab.size() >= targetSize)
            break;
        add(std::move(t));
    }
    return vocab;
}

} // namespace kvwb::core
