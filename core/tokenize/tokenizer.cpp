#include "core/tokenize/tokenizer.h"

#include "core/model/gguf.h"
#include "core/model/model_config.h"
#include "core/tokenize/bpe_tokenizer.h"
#include "core/tokenize/gguf_tokenizer.h"
#include "core/tokenize/llama2c_tokenizer.h"
#include "core/tokenize/sentencepiece_tokenizer.h"
#include "core/tokenize/wordpiece_tokenizer.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <system_error>

namespace kvwb::core {

namespace fs = std::filesystem;

namespace {

enum class Kind
{
    Json,
    SentencePiece,
    Llama2c,
    WordPieceVocab
};

// By extension first (tokenizer.json, *.model, *.bin, vocab.txt), so renamed copies still load.
std::optional<Kind> kindOfFile(const fs::path &p)
{
    const std::string ext = p.extension().string();
    if (ext == ".json")
        return Kind::Json;
    if (ext == ".model")
        return Kind::SentencePiece;
    if (ext == ".bin")
        return Kind::Llama2c;
    if (ext == ".txt")
        return Kind::WordPieceVocab;
    return std::nullopt;
}

// tokenizer.json's model.type ("BPE" when absent, as HF reads it), from a parse that keeps nothing
// else (a 10 MB vocabulary is lexed, not stored). nullopt when the text is not a JSON object: the
// BPE loader then reports what is wrong with it.
std::optional<std::string> jsonModelType(std::string_view text)
{
    using nlohmann::json;
    json root;
    try {
        root = json::parse(
            text.begin(), text.end(),
            [](int depth, json::parse_event_t event, json &parsed) {
                if (event != json::parse_event_t::key)
                    return true;
                if (depth == 1)
                    return parsed == "model";
                return depth == 2 && parsed == "type";
            },
            false);
    } catch (const json::exception &) {
        return std::nullopt;
    }
    if (!root.is_object())
        return std::nullopt;
    if (!root.contains("model") || !root.at("model").is_object() || !root.at("model").contains("type"))
        return std::string("BPE");
    const json &t = root.at("model").at("type");
    return t.is_string() ? t.get<std::string>() : std::string();
}

} // namespace

std::unique_ptr<Tokenizer> loadTokenizer(const fs::path &path)
{
    std::error_code ec;
    fs::path file = path;
    if (fs::is_directory(path, ec)) {
        // tokenizer.json is the authoritative HF file when both it and tokenizer.model (or a BERT
        // vocab.txt) exist.
        bool found = false;
        for (const char *name : {"tokenizer.json", "tokenizer.model", "tokenizer.bin", "vocab.txt"}) {
            if (fs::is_regular_file(path / name, ec)) {
                file = path / name;
                found = true;
                break;
            }
        }
        if (!found)
            throw Error(
                ErrorCode::Io,
                path.string() +
                    ": directory holds no tokenizer.json, tokenizer.model, tokenizer.bin or vocab.txt");
    } else if (!fs::exists(path, ec)) {
        throw Error(ErrorCode::Io, path.string() + ": no such file or directory");
    }
    if (file.extension() == ".gguf" || GgufFile::looksLikeGguf(file))
        return tokenizerFromGguf(GgufFile::open(file));
    const auto kind = kindOfFile(file);
    if (!kind)
        throw Error(ErrorCode::Tokenizer, file.string() +
                                              ": cannot tell the tokenizer format from the name (expected "
                                              "tokenizer.json, tokenizer.model, tokenizer.bin or vocab.txt)");
    switch (*kind) {
    case Kind::Json: {
        const std::string text = text::readWholeFile(file);
        if (jsonModelType(text) == "WordPiece")
            return WordPieceTokenizer::fromJsonText(text, file.string());
        return BpeTokenizer::fromJsonText(text, file.string());
    }
    case Kind::WordPieceVocab:
        return WordPieceTokenizer::fromVocabDirectory(file);
    case Kind::SentencePiece:
        return SentencePieceTokenizer::fromFile(file);
    case Kind::Llama2c:
        return Llama2cTokenizer::fromFile(file);
    }
    throw Error(ErrorCode::Internal, "unreachable tokenizer kind");
}

void checkTextSize(std::string_view text, const std::string &tokenizerSource)
{
    if (text.size() > kMaxTextBytes)
        throw Error(ErrorCode::InvalidArgument, tokenizerSource + ": a text of " +
                                                    std::to_string(text.size()) +
                                                    " bytes is more than a tokenizer takes (" +
                                                    std::to_string(kMaxTextBytes >> 20) + " MiB)");
}

void checkTokenizerFitsModel(const Tokenizer &tok, const ModelConfig &config,
                             const std::string &tokenizerSource)
{
    // A model may have more embedding rows than the tokenizer has ids (padded for efficiency, e.g.
    // Qwen2's 151936 rows for 151665 ids); the other way round would index past the embedding.
    if (tok.vocabSize() > config.vocabSize)
        throw Error(ErrorCode::Tokenizer,
                    tokenizerSource + ": tokenizer has " + std::to_string(tok.vocabSize()) +
                        " ids but the model's vocab_size is " + std::to_string(config.vocabSize));
    // tokenizer.bin has no entry count of its own: run.c reads exactly vocab_size entries. A file
    // cut at an entry boundary would otherwise load a prefix of the vocabulary and tokenize wrongly.
    if (tok.kind() == "llama2c" && tok.vocabSize() != config.vocabSize)
        throw Error(ErrorCode::Tokenizer,
                    tokenizerSource + ": tokenizer.bin has " + std::to_string(tok.vocabSize()) +
                        " entries but the model's vocab_size is " + std::to_string(config.vocabSize) +
                        " (truncated or for another model)");
}

Encoding Tokenizer::encodeWithOffsets(std::string_view text, bool addSpecial) const
{
    std::vector<int> full = encode(text, addSpecial);
    std::pair<size_t, size_t> added{0, 0};
    if (addSpecial)
        added = detail::addedAround(full, encode(text, false), *this);
    const size_t first = added.first, end = full.size() - added.second;
    // A token's surface: what it adds to the decoded text after the token before it. Decoders
    // change the first token (a Strip or Metaspace decoder drops its leading space), so each token
    // is decoded after its predecessor and the predecessor's own decoding cut off; where that is
    // not a prefix (a decoder that looks further back), the whole prefix is decoded.
    std::vector<std::string> surfaces(full.size());
    for (size_t i = first; i < end; ++i) {
        if (i == first) {
            surfaces[i] = decode({full[i]});
            continue;
        }
        const std::string one = decode({full[i - 1]}), both = decode({full[i - 1], full[i]});
        if (both.compare(0, one.size(), one) == 0) {
            surfaces[i] = both.substr(one.size());
            continue;
        }
        const std::vector<int> upTo(full.begin() + std::ptrdiff_t(first), full.begin() + std::ptrdiff_t(i));
        std::vector<int> with = upTo;
        with.push_back(full[i]);
        const std::string before = decode(upTo), after = decode(with);
        surfaces[i] =
            after.compare(0, before.size(), before) == 0 ? after.substr(before.size()) : decode({full[i]});
    }
    return detail::matchSurfaces(text, std::move(full), surfaces, added.first, added.second, "", *this);
}

namespace detail {

std::pair<size_t, size_t> addedAround(const std::vector<int> &full, const std::vector<int> &plain,
                                      const Tokenizer &tok)
{
    if (plain.size() <= full.size()) {
        const auto it = std::search(full.begin(), full.end(), plain.begin(), plain.end());
        if (it != full.end() || plain.empty()) {
            const size_t lead = plain.empty() ? full.size() : size_t(it - full.begin());
            return {lead, full.size() - lead - plain.size()};
        }
    }
    size_t lead = 0, trail = 0;
    while (lead < full.size() && tok.isSpecial(full[lead]))
        ++lead;
    while (trail + lead < full.size() && tok.isSpecial(full[full.size() - 1 - trail]))
        ++trail;
    return {lead, trail};
}

namespace {
bool isWhitespace(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
} // namespace

Encoding matchSurfaces(std::string_view text, std::vector<int> ids, const std::vector<std::string> &surfaces,
                       size_t leading, size_t trailing, std::string_view syntheticPrefix,
                       const Tokenizer &tok)
{
    Encoding e;
    const size_t n = ids.size();
    e.ids = std::move(ids);
    e.spans.resize(n);
    const int32_t textEnd = int32_t(text.size());
    leading = std::min(leading, n);
    trailing = std::min(trailing, n - leading);
    for (size_t i = n - trailing; i < n; ++i)
        e.spans[i] = {textEnd, textEnd};
    // Positions are in the stream the tokens spell, syntheticPrefix + text; orig() maps one back
    // to the text (the prefix is no text: its bytes map to 0).
    const std::string stream = std::string(syntheticPrefix) + std::string(text);
    const size_t prefix = syntheticPrefix.size();
    const auto orig = [&](size_t s) { return int32_t(s > prefix ? s - prefix : 0); };
    size_t c = 0;
    const size_t end = n - trailing;
    for (size_t i = leading; i < end; ++i) {
        const std::string &s = surfaces[i];
        if (s.empty()) {
            e.spans[i] = {orig(c), orig(c)};
            continue;
        }
        bool matched = false;
        for (int attempt = 0; attempt < 2 && !matched; ++attempt) {
            if (stream.compare(c, s.size(), s) == 0) {
                e.spans[i] = {orig(c), orig(c + s.size())};
                c += s.size();
                matched = true;
            } else if (s[0] == ' ' && (c >= stream.size() || stream[c] != ' ') &&
                       stream.compare(c, s.size() - 1, s, 1) == 0) {
                // a space the tokenizer added (a prefix space, or one a decoder leaves on a token
                // after a special one): the token covers the rest of its surface
                e.spans[i] = {orig(c), orig(c + s.size() - 1)};
                c += s.size() - 1;
                matched = true;
            } else if (tok.isSpecial(e.ids[i])) {
                e.spans[i] = {orig(c), orig(c)}; // a special token that is not in the text
                matched = true;
            } else if (attempt == 0 && c < stream.size() && isWhitespace(stream[c])) {
                // whitespace the normaliser dropped (Strip) or collapsed to one space
                size_t r = c;
                while (r < stream.size() && isWhitespace(stream[r]))
                    ++r;
                c = isWhitespace(s[0]) ? std::max(c, r - 1) : r;
            } else {
                break;
            }
        }
        if (matched)
            continue;
        // The normaliser changed the text: spread the remaining tokens over the remaining text in
        // proportion to their surfaces.
        e.exact = false;
        size_t total = 0;
        for (size_t j = i; j < end; ++j)
            total += surfaces[j].size();
        const size_t rest = stream.size() - c;
        size_t done = 0;
        for (size_t j = i; j < end; ++j) {
            const size_t b = total ? c + done * rest / total : c;
            done += surfaces[j].size();
            const size_t en = total ? c + done * rest / total : c;
            e.spans[j] = {orig(b), orig(en)};
        }
        break;
    }
    return e;
}

} // namespace detail

} // namespace kvwb::core
