#include "core/tokenize/wordpiece_tokenizer.h"

#include "core/tokenize/tokenizer_json_p.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <climits>
#include <map>
#include <unordered_map>

namespace kvwb::core {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using tokenize_detail::fail;
using tokenize_detail::unsupported;

// ---------------------------------------------------------------------------------------------
// Characters, as HF's BertNormalizer and BertPreTokenizer classify them (Rust char methods and the
// unicode_categories crate; ICU gives the same Unicode properties).

// White_Space (Rust's char::is_whitespace): \t \n \v \f \r, space, U+0085, U+00A0, U+2028, U+3000...
bool isWhitespace(char32_t c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x80 && u_isUWhiteSpace(UChar32(c)));
}

// Cc, Cf, Co (unicode_categories' is_other; unassigned code points are kept), \t \n \r excepted.
bool isControl(char32_t c)
{
    if (c == '\t' || c == '\n' || c == '\r')
        return false;
    if (c < 0x80)
        return c < 0x20 || c == 0x7F;
    return (U_GET_GC_MASK(UChar32(c)) & (U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CO_MASK)) != 0;
}

bool isPunctuation(char32_t c)
{
    if (c < 0x80)
        return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
    return (U_GET_GC_MASK(UChar32(c)) & U_GC_P_MASK) != 0;
}

// The ranges of tokenizers' normalizers/bert.rs, 0x2B920 (not the CJK block's 0x2B820) included.
bool isChineseChar(char32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
           (c >= 0x2B920 && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Rust's char::is_alphanumeric (Alphabetic or a number), for single_word added tokens.
bool isWordChar(char32_t c)
{
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    return u_hasBinaryProperty(UChar32(c), UCHAR_ALPHABETIC) ||
           (U_GET_GC_MASK(UChar32(c)) & U_GC_N_MASK) != 0;
}

// A character of the normalised text and the bytes [begin, end) of the original text it came from.
struct NChar
{
    char32_t c;
    uint32_t begin;
    uint32_t end;
};

const icu::Normalizer2 &nfd()
{
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2 *n = icu::Normalizer2::getNFDInstance(err);
    if (U_FAILURE(err) || !n)
        throw Error(ErrorCode::Internal, std::string("ICU NFD is unavailable: ") + u_errorName(err));
    return *n;
}

void appendCodePoints(const icu::UnicodeString &s, const NChar &from, std::vector<NChar> &out)
{
    for (int32_t i = 0; i < s.length();) {
        const UChar32 c = s.char32At(i);
        out.push_back({char32_t(c), from.begin, from.end});
        i += U16_LENGTH(c);
    }
}

// Full lower-case mapping of one character without context (Rust's char::to_lowercase: "İ" is
// "i̇", a lone "Σ" is "σ").
void appendLower(const NChar &ch, std::vector<NChar> &out)
{
    const char32_t c = ch.c;
    if (c < 0x80) {
        out.push_back({(c >= 'A' && c <= 'Z') ? c + 32 : c, ch.begin, ch.end});
        return;
    }
    UChar src[2], dst[8];
    int32_t n = 0;
    U16_APPEND_UNSAFE(src, n, UChar32(c));
    UErrorCode err = U_ZERO_ERROR;
    const int32_t len = u_strToLower(dst, 8, src, n, "", &err);
    if (U_FAILURE(err) || len <= 0) {
        out.push_back(ch);
        return;
    }
    for (int32_t i = 0; i < len;) {
        UChar32 cp;
        U16_NEXT(dst, i, len, cp);
        out.push_back({char32_t(cp), ch.begin, ch.end});
    }
}

std::string toUtf8(const std::vector<NChar> &chars, size_t b, size_t e)
{
    std::string s;
    for (size_t i = b; i < e; ++i)
        text::appendUtf8(s, chars[i].c);
    return s;
}

// Heterogeneous lookup: vocabulary probes are string_views into a scratch buffer.
struct StringHash
{
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Index = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

bool boolOr(const json &obj, const char *key, bool fallback, const std::string &source,
            const std::string &path)
{
    if (!obj.is_object() || !obj.contains(key) || obj.at(key).is_null())
        return fallback;
    if (!obj.at(key).is_boolean())
        fail(source, (path.empty() ? "" : path + ".") + key + " is not true or false");
    return obj.at(key).get<bool>();
}

std::string stringOr(const json &obj, const char *key, const std::string &fallback, const std::string &source,
                     const std::string &path)
{
    if (!obj.is_object() || !obj.contains(key) || obj.at(key).is_null())
        return fallback;
    const json &v = obj.at(key);
    // tokenizer_config.json writes special tokens either as strings or as AddedToken objects
    if (v.is_object() && v.contains("content") && v.at("content").is_string())
        return v.at("content").get<std::string>();
    if (!v.is_string())
        fail(source, (path.empty() ? "" : path + ".") + key + " is not a string");
    return v.get<std::string>();
}

std::string typeOf(const json &obj, const std::string &source, const std::string &path)
{
    if (!obj.is_object() || !obj.contains("type") || !obj.at("type").is_string())
        fail(source, path + ".type is missing or not a string");
    return obj.at("type").get<std::string>();
}

int tokenIdOf(const json &v, const std::string &source, const std::string &where)
{
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT32_MAX)) ||
        (!v.is_number_unsigned() && (v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)))
        fail(source, where + " is " + v.dump() + ", not a token id");
    return v.get<int>();
}

} // namespace

// ---------------------------------------------------------------------------------------------

struct WordPieceTokenizer::Impl
{
    struct AddedToken
    {
        std::string content;
        int id = 0;
        bool special = false;
        bool normalized = false; // matched in the normalised text (content normalised too)
        bool lstrip = false, rstrip = false, singleWord = false;
        std::vector<char32_t> normContent; // normalized tokens: the content through the normaliser
    };
    // A piece of the input after the added tokens are split out: plain text, or an added token.
    struct Segment
    {
        int added = -1; // index into added, or -1 for text
        uint32_t begin = 0, end = 0;
    };

    std::string source;
    WordPieceOptions opt;
    bool preTokenizer = true;     // BertPreTokenizer; false: a segment is one word
    bool wordPieceDecoder = true; // false: tokens joined with spaces (no decoder)
    std::string decoderPrefix = "##";
    bool cleanup = true;
    std::vector<std::string> pieces; // [vocabSize] the token of each id (an added token's content wins)
    Index vocab;                     // the model's vocabulary, for WordPiece
    std::vector<AddedToken> added;
    std::vector<uint8_t> special; // [vocabSize]
    std::vector<int> prefixIds, suffixIds;
    int unk = 0;
    std::optional<int> cls, sep, pad, mask;

    std::vector<NChar> normalize(std::string_view text, uint32_t offset) const;
    void splitAdded(std::string_view text, std::vector<Segment> &out) const;
    void encodeText(std::string_view text, uint32_t offset, std::vector<int> &ids,
                    std::vector<TokenSpan> *spans) const;
    void encodeWords(const std::vector<NChar> &chars, size_t b, size_t e, std::vector<int> &ids,
                     std::vector<TokenSpan> *spans) const;
    void wordPiece(const std::vector<NChar> &chars, size_t b, size_t e, std::vector<int> &ids,
                   std::vector<TokenSpan> *spans) const;
    Encoding run(std::string_view text, bool addSpecial, bool withSpans) const;

    std::optional<int> idOf(std::string_view token) const
    {
        for (const auto &a : added)
            if (a.content == token)
                return a.id;
        if (const auto it = vocab.find(token); it != vocab.end())
            return it->second;
        return std::nullopt;
    }
    // Checks and indexes pieces/added after a loader filled them.
    void finish();
};

// clean_text, handle_chinese_chars, strip_accents, lowercase: the order of tokenizers' BertNormalizer.
std::vector<NChar> WordPieceTokenizer::Impl::normalize(std::string_view text, uint32_t offset) const
{
    std::vector<NChar> chars;
    chars.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        const size_t b = i;
        const char32_t c = text::nextCodePoint(text, i);
        const NChar ch{c, uint32_t(offset + b), uint32_t(offset + i)};
        if (opt.cleanText) {
            if (c == 0 || c == 0xFFFD || isControl(c))
                continue;
            if (isWhitespace(c)) {
                chars.push_back({U' ', ch.begin, ch.end});
                continue;
            }
        }
        if (opt.handleChineseChars && isChineseChar(c)) {
            chars.push_back({U' ', ch.begin, ch.end});
            chars.push_back(ch);
            chars.push_back({U' ', ch.begin, ch.end});
            continue;
        }
        chars.push_back(ch);
    }
    if (opt.stripsAccents()) {
        const icu::Normalizer2 &n = nfd();
        std::vector<NChar> d;
        d.reserve(chars.size());
        icu::UnicodeString tmp;
        for (const NChar &ch : chars) {
            if (ch.c >= 0xC0 && n.getDecomposition(UChar32(ch.c), tmp))
                appendCodePoints(tmp, ch, d);
            else
                d.push_back(ch);
        }
        // NFD's canonical ordering: each run of non-starters sorted by combining class (stable)
        for (size_t i = 0; i < d.size();) {
            if (d[i].c < 0x300 || u_getCombiningClass(UChar32(d[i].c)) == 0) {
                ++i;
                continue;
            }
            size_t j = i;
            while (j < d.size() && d[j].c >= 0x300 && u_getCombiningClass(UChar32(d[j].c)) != 0)
                ++j;
            std::stable_sort(d.begin() + std::ptrdiff_t(i), d.begin() + std::ptrdiff_t(j),
                             [](const NChar &x, const NChar &y) {
                                 return u_getCombiningClass(UChar32(x.c)) < u_getCombiningClass(UChar32(y.c));
                             });
            i = j;
        }
        std::erase_if(d, [](const NChar &ch) {
            return ch.c >= 0x300 && (U_GET_GC_MASK(UChar32(ch.c)) & U_GC_MN_MASK) != 0;
        });
        chars = std::move(d);
    }
    if (opt.lowercase) {
        std::vector<NChar> l;
        l.reserve(chars.size());
        for (const NChar &ch : chars)
            appendLower(ch, l);
        chars = std::move(l);
    }
    return chars;
}

// HF AddedVocabulary on the raw text: leftmost-longest match of the tokens that are not
// normalised; single_word tokens must not touch a word character; lstrip/rstrip take the
// whitespace beside the token into it.
void WordPieceTokenizer::Impl::splitAdded(std::string_view s, std::vector<Segment> &out) const
{
    size_t textStart = 0, i = 0;
    while (i < s.size()) {
        const AddedToken *best = nullptr;
        int bestIndex = -1;
        for (size_t k = 0; k < added.size(); ++k) {
            const AddedToken &t = added[k];
            if (t.normalized || t.content.empty() || t.content.size() > s.size() - i)
                continue;
            if ((!best || t.content.size() > best->content.size()) &&
                s.compare(i, t.content.size(), t.content) == 0) {
                best = &t;
                bestIndex = int(k);
            }
        }
        if (best && best->singleWord) {
            const size_t e = i + best->content.size();
            bool touches = false;
            if (i > 0) {
                size_t p = i - 1;
                while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80)
                    --p;
                size_t q = p;
                touches |= isWordChar(text::nextCodePoint(s, q));
            }
            if (e < s.size()) {
                size_t q = e;
                touches |= isWordChar(text::nextCodePoint(s, q));
            }
            if (touches)
                best = nullptr;
        }
        if (!best) {
            i += text::utf8SeqLen(static_cast<unsigned char>(s[i]));
            continue;
        }
        size_t b = i, e = i + best->content.size();
        if (best->lstrip)
            while (b > textStart && isWhitespace(char32_t(static_cast<unsigned char>(s[b - 1]))))
                --b;
        if (best->rstrip)
            while (e < s.size() && isWhitespace(char32_t(static_cast<unsigned char>(s[e]))))
                ++e;
        if (b > textStart)
            out.push_back({-1, uint32_t(textStart), uint32_t(b)});
        out.push_back({bestIndex, uint32_t(b), uint32_t(e)});
        textStart = i = e;
    }
    if (textStart < s.size())
        out.push_back({-1, uint32_t(textStart), uint32_t(s.size())});
}

void WordPieceTokenizer::Impl::encodeText(std::string_view text, uint32_t offset, std::vector<int> &ids,
                                          std::vector<TokenSpan> *spans) const
{
    const std::vector<NChar> chars = normalize(text, offset);
    bool anyNormalized = false;
    for (const auto &a : added)
        anyNormalized |= a.normalized && !a.normContent.empty();
    if (!anyNormalized) {
        encodeWords(chars, 0, chars.size(), ids, spans);
        return;
    }
    // normalised added tokens: leftmost-longest over the normalised characters
    size_t textStart = 0, i = 0;
    while (i < chars.size()) {
        const AddedToken *best = nullptr;
        for (const auto &t : added) {
            const size_t n = t.normContent.size();
            if (!t.normalized || n == 0 || n > chars.size() - i || (best && n <= best->normContent.size()))
                continue;
            bool same = true;
            for (size_t k = 0; k < n && same; ++k)
                same = chars[i + k].c == t.normContent[k];
            if (same)
                best = &t;
        }
        if (best && best->singleWord) {
            const size_t e = i + best->normContent.size();
            if ((i > 0 && isWordChar(chars[i - 1].c)) || (e < chars.size() && isWordChar(chars[e].c)))
                best = nullptr;
        }
        if (!best) {
            ++i;
            continue;
        }
        size_t b = i, e = i + best->normContent.size();
        if (best->lstrip)
            while (b > textStart && isWhitespace(chars[b - 1].c))
                --b;
        if (best->rstrip)
            while (e < chars.size() && isWhitespace(chars[e].c))
                ++e;
        encodeWords(chars, textStart, b, ids, spans);
        ids.push_back(best->id);
        if (spans) {
            uint32_t lo = UINT32_MAX, hi = 0;
            for (size_t k = b; k < e; ++k)
                lo = std::min(lo, chars[k].begin), hi = std::max(hi, chars[k].end);
            spans->push_back({int32_t(lo), int32_t(hi)});
        }
        textStart = i = e;
    }
    encodeWords(chars, textStart, chars.size(), ids, spans);
}

// BertPreTokenizer: White_Space separates words and is dropped; each punctuation character is a
// word of its own.
void WordPieceTokenizer::Impl::encodeWords(const std::vector<NChar> &chars, size_t b, size_t e,
                                           std::vector<int> &ids, std::vector<TokenSpan> *spans) const
{
    if (!preTokenizer) {
        if (e > b)
            wordPiece(chars, b, e, ids, spans);
        return;
    }
    size_t start = b;
    for (size_t i = b; i < e; ++i) {
        const char32_t c = chars[i].c;
        const bool ws = isWhitespace(c);
        if (!ws && !isPunctuation(c))
            continue;
        if (i > start)
            wordPiece(chars, start, i, ids, spans);
        if (!ws)
            wordPiece(chars, i, i + 1, ids, spans);
        start = i + 1;
    }
    if (e > start)
        wordPiece(chars, start, e, ids, spans);
}

// tokenizers' WordPiece::tokenize: greedy longest match first from the word's start; a piece that
// does not start the word carries the continuing prefix; no match anywhere makes the whole word
// one [UNK], as does a word longer than max_input_chars_per_word.
void WordPieceTokenizer::Impl::wordPiece(const std::vector<NChar> &chars, size_t b, size_t e,
                                         std::vector<int> &ids, std::vector<TokenSpan> *spans) const
{
    const auto spanOf = [&](size_t from, size_t to) {
        uint32_t lo = UINT32_MAX, hi = 0;
        for (size_t k = from; k < to; ++k)
            lo = std::min(lo, chars[k].begin), hi = std::max(hi, chars[k].end);
        return TokenSpan{int32_t(lo), int32_t(hi)};
    };
    const size_t n = e - b;
    if (n > size_t(std::max(opt.maxInputCharsPerWord, 0))) {
        ids.push_back(unk);
        if (spans)
            spans->push_back(spanOf(b, e));
        return;
    }
    // the word's UTF-8 and where each character starts in it
    std::string word;
    std::vector<size_t> at(n + 1);
    for (size_t k = 0; k < n; ++k) {
        at[k] = word.size();
        text::appendUtf8(word, chars[b + k].c);
    }
    at[n] = word.size();
    const size_t firstId = ids.size();
    std::string probe;
    size_t start = 0;
    while (start < n) {
        size_t end = n;
        int found = -1;
        for (; end > start; --end) {
            const std::string_view sub(word.data() + at[start], at[end] - at[start]);
            std::string_view key = sub;
            if (start > 0) {
                probe.assign(opt.continuingPrefix);
                probe.append(sub);
                key = probe;
            }
            if (const auto it = vocab.find(key); it != vocab.end()) {
                found = it->second;
                break;
            }
        }
        if (found < 0) {
            ids.resize(firstId);
            if (spans)
                spans->resize(firstId);
            ids.push_back(unk);
            if (spans)
                spans->push_back(spanOf(b, e));
            return;
        }
        ids.push_back(found);
        if (spans)
            spans->push_back(spanOf(b + start, b + end));
        start = end;
    }
}

Encoding WordPieceTokenizer::Impl::run(std::string_view text, bool addSpecial, bool withSpans) const
{
    checkTextSize(text, source);
    if (const auto bad = text::firstInvalidUtf8(text))
        throw Error(ErrorCode::InvalidArgument, "text is not valid UTF-8 at byte " + std::to_string(*bad));
    Encoding out;
    std::vector<TokenSpan> *spans = withSpans ? &out.spans : nullptr;
    if (addSpecial) {
        out.ids = prefixIds;
        if (spans)
            spans->assign(prefixIds.size(), TokenSpan{0, 0});
    }
    std::vector<Segment> segments;
    splitAdded(text, segments);
    for (const Segment &seg : segments) {
        if (seg.added >= 0) {
            out.ids.push_back(added[size_t(seg.added)].id);
            if (spans)
                spans->push_back({int32_t(seg.begin), int32_t(seg.end)});
            continue;
        }
        encodeText(text.substr(seg.begin, seg.end - seg.begin), seg.begin, out.ids, spans);
    }
    if (addSpecial) {
        out.ids.insert(out.ids.end(), suffixIds.begin(), suffixIds.end());
        if (spans)
            spans->insert(spans->end(), suffixIds.size(),
                          TokenSpan{int32_t(text.size()), int32_t(text.size())});
    }
    return out;
}

void WordPieceTokenizer::Impl::finish()
{
    const auto unkIt = vocab.find(opt.unkToken);
    if (unkIt == vocab.end())
        fail(source, "the unknown token \"" + opt.unkToken + "\" is not in the vocabulary");
    unk = unkIt->second;
    if (opt.maxInputCharsPerWord < 0)
        fail(source, "max_input_chars_per_word is negative");
    special.assign(pieces.size(), 0);
    for (auto &a : added) {
        if (a.special)
            special[size_t(a.id)] = 1;
        if (a.normalized) {
            // the content as the normaliser would leave it, so that it matches normalised text
            const std::vector<NChar> n = normalize(a.content, 0);
            a.normContent.clear();
            for (const NChar &c : n)
                a.normContent.push_back(c.c);
        }
    }
    for (const std::vector<int> *list : {&prefixIds, &suffixIds})
        for (int id : *list)
            if (id < 0 || size_t(id) >= pieces.size())
                fail(source, "the post-processor adds id " + std::to_string(id) + ", outside the " +
                                 std::to_string(pieces.size()) + " tokens");
    const auto named = [&](const std::string &name) -> std::optional<int> {
        return name.empty() ? std::nullopt : idOf(name);
    };
    cls = prefixIds.empty() ? named(opt.clsToken) : std::optional<int>(prefixIds.front());
    sep = suffixIds.empty() ? named(opt.sepToken) : std::optional<int>(suffixIds.back());
    if (!pad)
        pad = named(opt.padToken);
    mask = named(opt.maskToken);
}

// ---------------------------------------------------------------------------------------------
// Loading

namespace {

using Impl = WordPieceTokenizer::Impl;

// model.type (WordPiece) and model's unk_token, continuing_subword_prefix, max_input_chars_per_word.
void readModelOptions(WordPieceOptions &opt, const json &model, const std::string &src)
{
    const std::string type = typeOf(model, src, "model");
    if (type != "WordPiece")
        unsupported(src, "model.type \"" + type + "\" is not WordPiece");
    opt.unkToken = stringOr(model, "unk_token", "[UNK]", src, "model");
    opt.continuingPrefix = stringOr(model, "continuing_subword_prefix", "##", src, "model");
    if (model.contains("max_input_chars_per_word") && !model.at("max_input_chars_per_word").is_null()) {
        const json &m = model.at("max_input_chars_per_word");
        if (!m.is_number_integer() || m.get<int64_t>() < 0 || m.get<int64_t>() > INT32_MAX)
            fail(src, "model.max_input_chars_per_word is " + m.dump() + ", not a count of characters");
        opt.maxInputCharsPerWord = m.get<int>();
    }
}

// model.vocab and added_tokens into d.vocab, d.added and d.pieces (every id from 0 up named).
void readVocabulary(Impl &d, const json &model, const json &root)
{
    const std::string &src = d.source;
    if (!model.contains("vocab") || !model.at("vocab").is_object())
        fail(src, "model.vocab is missing or not an object of token -> id");
    const json &vocab = model.at("vocab");
    const json addedList = root.value("added_tokens", json::array());
    if (!addedList.is_array())
        fail(src, "added_tokens is not an array");
    // Every id from 0 to the largest is some token's: the largest id is checked against the number
    // of entries before anything is sized from it.
    const size_t entries = vocab.size() + addedList.size();
    std::map<int, std::string> byId;
    for (const auto &[tok, idJson] : vocab.items()) {
        const std::string where = "model.vocab[\"" + tok + "\"]";
        const int id = tokenIdOf(idJson, src, where);
        if (size_t(id) >= entries)
            fail(src, where + " is " + std::to_string(id) + ", outside the " + std::to_string(entries) +
                          " entries of model.vocab and added_tokens");
        if (const auto bad = text::firstInvalidUtf8(tok))
            fail(src, where + " is not valid UTF-8");
        if (const auto [it, inserted] = byId.emplace(id, tok); !inserted)
            fail(src, where + " has id " + std::to_string(id) + ", which \"" + it->second + "\" has too");
        d.vocab.emplace(tok, id);
    }
    for (size_t i = 0; i < addedList.size(); ++i) {
        const json &a = addedList[i];
        const std::string where = "added_tokens[" + std::to_string(i) + "]";
        if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a.at("content").is_string())
            fail(src, where + " lacks an id or a content string");
        Impl::AddedToken t;
        t.id = tokenIdOf(a.at("id"), src, where + ".id");
        if (size_t(t.id) >= entries)
            fail(src, where + ".id is " + std::to_string(t.id) + ", outside the " + std::to_string(entries) +
                          " entries of model.vocab and added_tokens");
        t.content = a.at("content").get<std::string>();
        t.special = boolOr(a, "special", false, src, where);
        t.normalized = boolOr(a, "normalized", !t.special, src, where);
        t.lstrip = boolOr(a, "lstrip", false, src, where);
        t.rstrip = boolOr(a, "rstrip", false, src, where);
        t.singleWord = boolOr(a, "single_word", false, src, where);
        byId[t.id] = t.content; // an added token's content names its id
        d.added.push_back(std::move(t));
    }
    if (!byId.empty() && size_t(byId.rbegin()->first) >= byId.size())
        fail(src, "ids run to " + std::to_string(byId.rbegin()->first) + " but only " +
                      std::to_string(byId.size()) + " are given (model.vocab and added_tokens leave gaps)");
    d.pieces.reserve(byId.size());
    for (auto &[id, tok] : byId)
        d.pieces.push_back(std::move(tok));
}

// The normalizer section (null: none): BertNormalizer's options.
void readNormalizer(WordPieceOptions &opt, const json &norm, const std::string &src)
{
    if (!norm.is_null()) {
        const std::string t = typeOf(norm, src, "normalizer");
        if (t != "BertNormalizer")
            unsupported(src, "normalizer type \"" + t +
                                 "\" is not supported with WordPiece (only BertNormalizer)");
        opt.cleanText = boolOr(norm, "clean_text", true, src, "normalizer");
        opt.handleChineseChars = boolOr(norm, "handle_chinese_chars", true, src, "normalizer");
        opt.lowercase = boolOr(norm, "lowercase", true, src, "normalizer");
        if (norm.contains("strip_accents") && !norm.at("strip_accents").is_null())
            opt.stripAccents = boolOr(norm, "strip_accents", false, src, "normalizer");
    } else {
        opt.cleanText = opt.handleChineseChars = opt.lowercase = false;
        opt.stripAccents = false;
    }
}

// The pre_tokenizer and decoder sections (null: none).
void readPreTokenizerAndDecoder(Impl &d, const json &pre, const json &dec)
{
    const std::string &src = d.source;
    if (!pre.is_null()) {
        const std::string t = typeOf(pre, src, "pre_tokenizer");
        if (t != "BertPreTokenizer")
            unsupported(src, "pre_tokenizer type \"" + t +
                                 "\" is not supported with WordPiece (only BertPreTokenizer)");
    } else {
        d.preTokenizer = false;
    }
    if (!dec.is_null()) {
        const std::string t = typeOf(dec, src, "decoder");
        if (t != "WordPiece")
            unsupported(src, "decoder type \"" + t + "\" is not supported with WordPiece (only WordPiece)");
        d.decoderPrefix = stringOr(dec, "prefix", "##", src, "decoder");
        d.cleanup = boolOr(dec, "cleanup", true, src, "decoder");
    } else {
        d.wordPieceDecoder = false;
    }
}

// A TemplateProcessing post-processor's single template: the special tokens before the sequence
// into d.prefixIds, those after it into d.suffixIds.
void readTemplateProcessing(Impl &d, const json &post)
{
    const std::string &src = d.source;
    const auto idOf = [&](const std::string &tok, const std::string &where) {
        const auto id = d.idOf(tok);
        if (!id)
            fail(src, where + " names \"" + tok + "\", which is not in the vocabulary");
        return *id;
    };
    const json single = post.value("single", json());
    if (!single.is_array())
        fail(src, "post_processor.single is missing or not an array");
    const json specials = post.value("special_tokens", json::object());
    bool seenSequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
        const json &item = single[i];
        const std::string where = "post_processor.single[" + std::to_string(i) + "]";
        if (item.is_object() && item.contains("Sequence")) {
            seenSequence = true;
            continue;
        }
        if (!item.is_object() || !item.contains("SpecialToken") || !item.at("SpecialToken").contains("id") ||
            !item.at("SpecialToken").at("id").is_string())
            fail(src, where + " is neither a Sequence nor a SpecialToken with an id");
        const std::string name = item.at("SpecialToken").at("id").get<std::string>();
        std::vector<int> ids;
        if (specials.is_object() && specials.contains(name) && specials.at(name).is_object() &&
            specials.at(name).contains("ids")) {
            const json &list = specials.at(name).at("ids");
            if (!list.is_array())
                fail(src, "post_processor.special_tokens[\"" + name + "\"].ids is not an array");
            for (const auto &x : list)
                ids.push_back(tokenIdOf(x, src, "post_processor.special_tokens[\"" + name + "\"].ids"));
        } else {
            ids.push_back(idOf(name, where));
        }
        auto &dst = seenSequence ? d.suffixIds : d.prefixIds;
        dst.insert(dst.end(), ids.begin(), ids.end());
    }
}

// The post_processor section (not null): TemplateProcessing or BertProcessing.
void readPostProcessor(Impl &d, const json &post)
{
    const std::string &src = d.source;
    const std::string t = typeOf(post, src, "post_processor");
    if (t == "TemplateProcessing") {
        readTemplateProcessing(d, post);
    } else if (t == "BertProcessing") {
        for (const char *key : {"cls", "sep"}) {
            const std::string where = std::string("post_processor.") + key;
            const json p = post.value(key, json());
            if (!p.is_array() || p.size() != 2 || !p[0].is_string())
                fail(src, where + " is not [token, id]");
            const int id = tokenIdOf(p[1], src, where + "[1]");
            (std::string(key) == "cls" ? d.prefixIds : d.suffixIds).push_back(id);
            (std::string(key) == "cls" ? d.opt.clsToken : d.opt.sepToken) = p[0].get<std::string>();
        }
    } else {
        unsupported(src, "post_processor type \"" + t +
                             "\" is not supported with WordPiece (TemplateProcessing, BertProcessing)");
    }
}

} // namespace

std::unique_ptr<WordPieceTokenizer> WordPieceTokenizer::fromJsonFile(const fs::path &path)
{
    return fromJsonText(text::readWholeFile(path), path.string());
}

std::unique_ptr<WordPieceTokenizer> WordPieceTokenizer::fromJsonText(std::string_view jsonText,
                                                                     const std::string &src)
{
    auto d = std::make_unique<Impl>();
    d->source = src;
    const json root = tokenize_detail::parseJson(jsonText, src, "not JSON: ");
    if (!root.is_object())
        fail(src, "tokenizer.json is not a JSON object");
    if (!root.contains("model") || !root.at("model").is_object())
        fail(src, "missing field model");
    const json &model = root.at("model");
    readModelOptions(d->opt, model, src);
    readVocabulary(*d, model, root);

    const auto section = [&](const char *key) -> json { return root.contains(key) ? root.at(key) : json(); };
    readNormalizer(d->opt, section("normalizer"), src);
    readPreTokenizerAndDecoder(*d, section("pre_tokenizer"), section("decoder"));
    if (const json post = section("post_processor"); !post.is_null())
        readPostProcessor(*d, post);
    if (const json padding = section("padding"); padding.is_object()) {
        if (padding.contains("pad_id"))
            d->pad = tokenIdOf(padding.at("pad_id"), src, "padding.pad_id");
        if (d->pad && size_t(*d->pad) >= d->pieces.size())
            fail(src, "padding.pad_id is " + std::to_string(*d->pad) + ", outside the " +
                          std::to_string(d->pieces.size()) + " tokens");
    }
    d->finish();
    return std::unique_ptr<WordPieceTokenizer>(new WordPieceTokenizer(std::move(d)));
}

std::unique_ptr<WordPieceTokenizer> WordPieceTokenizer::fromTokens(std::vector<std::string> tokens,
                                                                   const WordPieceOptions &options,
                                                                   const std::string &src)
{
    auto d = std::make_unique<Impl>();
    d->source = src;
    d->opt = options;
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i].empty())
            continue; // never matched; its id stays taken
        if (tokens[i].size() > INT32_MAX || i > size_t(INT32_MAX))
            fail(src, "more tokens than ids");
        if (const auto [it, inserted] = d->vocab.emplace(tokens[i], int(i)); !inserted)
            fail(src, fmt::format("line {}: token \"{}\" is already on line {}", i + 1, tokens[i],
                                  it->second + 1));
    }
    // BertTokenizerFast's special tokens: added, special, matched in the raw text.
    for (const std::string *name :
         {&options.padToken, &options.unkToken, &options.clsToken, &options.sepToken, &options.maskToken}) {
        if (name->empty())
            continue;
        const auto it = d->vocab.find(*name);
        if (it == d->vocab.end())
            continue;
        Impl::AddedToken t;
        t.content = *name;
        t.id = it->second;
        t.special = true;
        d->added.push_back(std::move(t));
    }
    d->pieces = std::move(tokens);
    const auto cls = d->vocab.find(options.clsToken), sep = d->vocab.find(options.sepToken);
    if (cls != d->vocab.end() && sep != d->vocab.end()) {
        d->prefixIds = {cls->second};
        d->suffixIds = {sep->second};
    }
    d->finish();
    return std::unique_ptr<WordPieceTokenizer>(new WordPieceTokenizer(std::move(d)));
}

std::unique_ptr<WordPieceTokenizer> WordPieceTokenizer::fromVocabDirectory(const fs::path &path)
{
    std::error_code ec;
    const fs::path vocabFile = fs::is_directory(path, ec) ? path / "vocab.txt" : path;
    const fs::path dir = vocabFile.parent_path();
    const std::string src = vocabFile.string();
    const std::string bytes = text::readWholeFile(vocabFile);
    std::vector<std::string> tokens;
    text::forEachLine(bytes, [&](size_t lineNo, std::string_view line) {
        if (!line.empty() && line.back() == '\r')
            line.remove_suffix(1); // CRLF files, as Python's universal newlines read them
        if (text::firstInvalidUtf8(line))
            fail(src, fmt::format("line {} is not valid UTF-8", lineNo));
        tokens.emplace_back(line);
        return true;
    });
    if (tokens.empty())
        fail(src, "the vocabulary is empty");
    WordPieceOptions opt;
    const fs::path configFile = dir / "tokenizer_config.json";
    if (fs::is_regular_file(configFile, ec)) {
        const std::string csrc = configFile.string();
        json c;
        try {
            c = json::parse(text::readWholeFile(configFile));
        } catch (const json::exception &e) {
            fail(csrc, std::string("not JSON: ") + e.what());
        }
        if (!c.is_object())
            fail(csrc, "not a JSON object");
        opt.lowercase = boolOr(c, "do_lower_case", true, csrc, "");
        if (c.contains("strip_accents") && !c.at("strip_accents").is_null())
            opt.stripAccents = boolOr(c, "strip_accents", false, csrc, "");
        opt.handleChineseChars = boolOr(c, "tokenize_chinese_chars", true, csrc, "");
        opt.unkToken = stringOr(c, "unk_token", opt.unkToken, csrc, "");
        opt.clsToken = stringOr(c, "cls_token", opt.clsToken, csrc, "");
        opt.sepToken = stringOr(c, "sep_token", opt.sepToken, csrc, "");
        opt.padToken = stringOr(c, "pad_token", opt.padToken, csrc, "");
        opt.maskToken = stringOr(c, "mask_token", opt.maskToken, csrc, "");
        // A special token the config names must be a token of the vocabulary (a [CLS] that is not
        // one would silently encode without it).
        for (const char *field : {"cls_token", "sep_token", "pad_token", "mask_token"}) // unk: fromTokens
            if (c.contains(field) && c.at(field).is_string() &&
                std::find(tokens.begin(), tokens.end(), c.at(field).get<std::string>()) == tokens.end())
                fail(csrc, fmt::format("field '{}' names \"{}\", which is not in the vocabulary", field,
                                       c.at(field).get<std::string>()));
        // BertJapaneseTokenizer splits words with MeCab first; without BasicTokenizer, words are
        // split on whitespace only: neither is BertNormalizer + BertPreTokenizer.
        if (c.contains("tokenizer_class") && c.at("tokenizer_class").is_string() &&
            c.at("tokenizer_class").get<std::string>().starts_with("BertJapanese"))
            unsupported(csrc, "tokenizer_class \"" + c.at("tokenizer_class").get<std::string>() +
                                  "\" needs a word segmenter kvwb does not have");
        if (!boolOr(c, "do_basic_tokenize", true, csrc, ""))
            unsupported(csrc,
                        "do_basic_tokenize false is not supported (BERT's basic tokenizer is always on)");
    }
    return fromTokens(std::move(tokens), opt, src);
}

WordPieceTokenizer::WordPieceTokenizer(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
WordPieceTokenizer::~WordPieceTokenizer() = default;

// ---------------------------------------------------------------------------------------------

std::vector<int> WordPieceTokenizer::encode(std::string_view text, bool addSpecial) const
{
    return m_impl->run(text, addSpecial, false).ids;
}

Encoding WordPieceTokenizer::encodeWithOffsets(std::string_view text, bool addSpecial) const
{
    return m_impl->run(text, addSpecial, true);
}

namespace {
// tokenizers' decoders::wordpiece::cleanup, applied to each decoded token.
std::string cleanupToken(std::string s)
{
    static const std::pair<std::string_view, std::string_view> kRules[] = {
        {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
        {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto &[from, to] : kRules) {
        std::string out;
        size_t pos = 0;
        for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
            out.append(s, pos, hit - pos);
            out.append(to);
        }
        if (pos == 0)
            continue;
        out.append(s, pos, std::string::npos);
        s = std::move(out);
    }
    return s;
}
} // namespace

std::string WordPieceTokenizer::decode(const std::vector<int> &ids, bool skipSpecial) const
{
    const Impl &d = *m_impl;
    std::string out;
    size_t i = 0;
    for (int id : ids) {
        if (id < 0 || size_t(id) >= d.pieces.size())
            continue; // HF drops ids it has no token for
        if (skipSpecial && d.special[size_t(id)])
            continue;
        std::string tok = d.pieces[size_t(id)];
        if (!d.wordPieceDecoder) {
            out += (i++ ? " " : "") + tok;
            continue;
        }
        if (i++ != 0) {
            if (!d.decoderPrefix.empty() && tok.starts_with(d.decoderPrefix))
                tok.erase(0, d.decoderPrefix.size());
            else
                tok.insert(0, 1, ' ');
        }
        out += d.cleanup ? cleanupToken(std::move(tok)) : tok;
    }
    return out;
}

std::string WordPieceTokenizer::piece(int id) const
{
    return id >= 0 && size_t(id) < m_impl->pieces.size() ? m_impl->pieces[size_t(id)] : std::string();
}

int WordPieceTokenizer::vocabSize() const
{
    return int(m_impl->pieces.size());
}

std::optional<int> WordPieceTokenizer::bosId() const
{
    return m_impl->prefixIds.empty() ? std::nullopt : std::optional<int>(m_impl->prefixIds.front());
}

std::optional<int> WordPieceTokenizer::eosId() const
{
    return m_impl->suffixIds.empty() ? std::nullopt : std::optional<int>(m_impl->suffixIds.back());
}

bool WordPieceTokenizer::isSpecial(int id) const
{
    return id >= 0 && size_t(id) < m_impl->special.size() && m_impl->special[size_t(id)];
}

std::optional<int> WordPieceTokenizer::pieceToId(std::string_view piece) const
{
    return m_impl->idOf(piece);
}

int WordPieceTokenizer::unkId() const
{
    return m_impl->unk;
}
std::optional<int> WordPieceTokenizer::padId() const
{
    return m_impl->pad;
}
std::optional<int> WordPieceTokenizer::clsId() const
{
    return m_impl->cls;
}
std::optional<int> WordPieceTokenizer::sepId() const
{
    return m_impl->sep;
}
std::optional<int> WordPieceTokenizer::maskId() const
{
    return m_impl->mask;
}
const WordPieceOptions &WordPieceTokenizer::options() const
{
    return m_impl->opt;
}

std::vector<std::string> WordPieceTokenizer::preTokenize(std::string_view text) const
{
    const Impl &d = *m_impl;
    checkTextSize(text, d.source);
    if (const auto bad = text::firstInvalidUtf8(text))
        throw Error(ErrorCode::InvalidArgument, "text is not valid UTF-8 at byte " + std::to_string(*bad));
    const std::vector<NChar> chars = d.normalize(text, 0);
    std::vector<std::string> words;
    if (!d.preTokenizer) {
        if (!chars.empty())
            words.push_back(toUtf8(chars, 0, chars.size()));
        return words;
    }
    size_t start = 0;
    for (size_t i = 0; i < chars.size(); ++i) {
        const bool ws = isWhitespace(chars[i].c);
        if (!ws && !isPunctuation(chars[i].c))
            continue;
        if (i > start)
            words.push_back(toUtf8(chars, start, i));
        if (!ws)
            words.push_back(toUtf8(chars, i, i + 1));
        start = i + 1;
    }
    if (chars.size() > start)
        words.push_back(toUtf8(chars, start, chars.size()));
    return words;
}

} // namespace kvwb::core
