#include "core/tokenize/bpe_tokenizer.h"

#include "core/tokenize/tokenizer_json_p.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <queue>
#include <unordered_map>

namespace kvwb::core {

using nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------
// Errors

using tokenize_detail::fail;
using tokenize_detail::unsupported;

// Sequences nest (a Sequence of Sequences ...); real files nest two deep. The path names every
// level ("normalizer.normalizers[0].normalizers[1]"), so its '[' count is the depth: refuse past
// kMaxNesting before recursing further (a 1 MB file nested 30,000 deep would overflow the stack).
constexpr int kMaxNesting = 16;
void checkNesting(const std::string &source, const std::string &path)
{
    if (std::count(path.begin(), path.end(), '[') > kMaxNesting)
        fail(source, path.substr(0, path.find('[')) + " nests Sequences more than " +
                         std::to_string(kMaxNesting) + " deep");
}

// Text a normalizer chain may produce (4 x kMaxTextBytes): a chain of Replace normalizers each
// multiplying the text must stop here, not at the end of memory.
constexpr size_t kMaxNormalizedBytes = 4 * kMaxTextBytes;
void checkNormalizedSize(size_t bytes)
{
    if (bytes > kMaxNormalizedBytes)
        throw Error(ErrorCode::Tokenizer, "the tokenizer's normalizers expand the text past " +
                                              std::to_string(kMaxNormalizedBytes >> 20) + " MiB");
}

// Field accessors that name the JSON path at fault instead of surfacing nlohmann's type errors.
const json &field(const json &obj, const char *key, const std::string &source, const std::string &path)
{
    if (!obj.is_object() || !obj.contains(key))
        fail(source, "missing field " + path + "." + key);
    return obj.at(key);
}

std::string stringField(const json &obj, const char *key, const std::string &source, const std::string &path)
{
    const json &v = field(obj, key, source, path);
    if (!v.is_string())
        fail(source, "field " + path + "." + key + " is not a string");
    return v.get<std::string>();
}

bool boolOr(const json &obj, const char *key, bool fallback)
{
    if (!obj.is_object() || !obj.contains(key) || obj.at(key).is_null())
        return fallback;
    const json &v = obj.at(key);
    return v.is_boolean() ? v.get<bool>() : fallback;
}

std::string typeOf(const json &obj, const std::string &source, const std::string &path)
{
    return stringField(obj, "type", source, path);
}

// ---------------------------------------------------------------------------------------------
// GPT-2's reversible byte <-> printable-char table: the 188 printable Latin-1 bytes map to
// themselves, the other 68 to U+0100.. in byte order, so every byte string becomes a printable
// string without spaces or control characters.

struct ByteLevelTable
{
    std::array<std::string, 256> byteToChar; // UTF-8 of the mapped char
    std::unordered_map<char32_t, uint8_t> charToByte;

    ByteLevelTable()
    {
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable =
                (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const char32_t cp = printable ? char32_t(b) : char32_t(256 + n++);
            text::appendUtf8(byteToChar[b], cp);
            charToByte[cp] = uint8_t(b);
        }
    }
};

const ByteLevelTable &byteLevelTable()
{
    static const ByteLevelTable table;
    return table;
}

std::string toByteLevel(std::string_view s)
{
    const auto &t = byteLevelTable();
    std::string out;
    out.reserve(s.size() * 2);
    for (char c : s)
        out += t.byteToChar[static_cast<unsigned char>(c)];
    return out;
}

// HF ByteLevel decoder: a token whose every char is in the table becomes those bytes; a token
// with any other char (e.g. an added token written in plain text) is kept as its UTF-8.
std::string fromByteLevel(const std::string &token)
{
    const auto &t = byteLevelTable();
    std::string out;
    out.reserve(token.size());
    size_t i = 0;
    while (i < token.size()) {
        const char32_t cp = text::nextCodePoint(token, i);
        const auto it = t.charToByte.find(cp);
        if (it == t.charToByte.end())
            return token;
        out += char(it->second);
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// PCRE2 regex, compiled once (with JIT when the library has it). Match data is per call, so one
// Regex may be used from several threads.

using Span = std::pair<size_t, size_t>; // [begin, end) byte offsets

class Regex
{
public:
    Regex(const std::string &pattern, const std::string &source, const std::string &path)
        : m_where(source + ": " + path)
    {
        int err = 0;
        PCRE2_SIZE errOffset = 0;
        m_code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                               PCRE2_UTF | PCRE2_UCP, &err, &errOffset, nullptr);
        if (!m_code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            fail(source, path + ": cannot compile regex at offset " + std::to_string(errOffset) + ": " +
                             reinterpret_cast<const char *>(msg));
        }
        m_jit = pcre2_jit_compile(m_code, PCRE2_JIT_COMPLETE) == 0;
    }
    ~Regex() { pcre2_code_free(m_code); }
    Regex(const Regex &) = delete;
    Regex &operator=(const Regex &) = delete;

    // Non-overlapping, non-empty matches, left to right. s must be valid UTF-8.
    std::vector<Span> findAll(std::string_view s) const
    {
        std::vector<Span> out;
        std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
            pcre2_match_data_create_from_pattern(m_code, nullptr), &pcre2_match_data_free);
        const auto *subject = reinterpret_cast<PCRE2_SPTR>(s.data());
        size_t offset = 0;
        while (offset <= s.size()) {
            int rc = pcre2_match(m_code, subject, s.size(), offset, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
            // The JIT's 32 KiB default stack can run out on very long runs of one class; the
            // interpreter has no such limit, so retry there instead of failing the encode.
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                rc = pcre2_match(m_code, subject, s.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                                 md.get(), nullptr);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                throw Error(ErrorCode::Tokenizer, m_where + ": regex match failed on the text (" +
                                                      reinterpret_cast<const char *>(msg) + ")");
            }
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md.get());
            const size_t b = ov[0], e = ov[1];
            if (e > b) {
                out.emplace_back(b, e);
                offset = e;
            } else {
                // Empty match: HF drops empty pieces, so skip one code point and go on.
                if (b >= s.size())
                    break;
                offset = b + text::utf8SeqLen(static_cast<unsigned char>(s[b]));
            }
        }
        return out;
    }

private:
    std::string m_where; // "<file>: <json path>" for messages
    pcre2_code *m_code = nullptr;
    bool m_jit = false;
};

std::vector<Span> findLiteral(std::string_view s, std::string_view needle)
{
    std::vector<Span> out;
    if (needle.empty())
        return out;
    size_t pos = 0;
    while ((pos = s.find(needle, pos)) != std::string_view::npos) {
        out.emplace_back(pos, pos + needle.size());
        pos += needle.size();
    }
    return out;
}

// A pattern as HF writes it: {"String": "..."} (literal) or {"Regex": "..."}.
class Pattern
{
public:
    Pattern(const json &spec, const std::string &source, const std::string &path)
    {
        if (spec.is_object() && spec.contains("String") && spec.at("String").is_string()) {
            m_literal = spec.at("String").get<std::string>();
        } else if (spec.is_object() && spec.contains("Regex") && spec.at("Regex").is_string()) {
            m_regex = std::make_unique<Regex>(spec.at("Regex").get<std::string>(), source, path);
        } else if (spec.is_string()) {
            m_literal = spec.get<std::string>();
        } else {
            fail(source, path + " must be {\"String\": ...} or {\"Regex\": ...}");
        }
    }
    std::vector<Span> findAll(std::string_view s) const
    {
        return m_regex ? m_regex->findAll(s) : findLiteral(s, m_literal);
    }

private:
    std::string m_literal;
    std::unique_ptr<Regex> m_regex;
};

// ---------------------------------------------------------------------------------------------
// Normalizers

class Normalizer
{
public:
    virtual ~Normalizer() = default;
    virtual std::string apply(std::string s) const = 0;
};

class UnicodeNormalizer : public Normalizer
{
public:
    enum Form
    {
        Nfc,
        Nfd,
        Nfkc,
        Nfkd,
        Lowercase
    };
    explicit UnicodeNormalizer(Form form) : m_form(form) {}
    std::string apply(std::string s) const override
    {
        const bool ascii =
            std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
        if (ascii && m_form != Lowercase)
            return s; // ASCII is invariant under all four normal forms
        icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), int32_t(s.size())));
        icu::UnicodeString out;
        if (m_form == Lowercase) {
            out = u;
            out.toLower(icu::Locale::getRoot());
        } else {
            UErrorCode err = U_ZERO_ERROR;
            const icu::Normalizer2 *n = m_form == Nfc    ? icu::Normalizer2::getNFCInstance(err)
                                        : m_form == Nfd  ? icu::Normalizer2::getNFDInstance(err)
                                        : m_form == Nfkc ? icu::Normalizer2::getNFKCInstance(err)
                                                         : icu::Normalizer2::getNFKDInstance(err);
            if (U_SUCCESS(err))
                out = n->normalize(u, err);
            if (U_FAILURE(err))
                throw Error(ErrorCode::Internal,
                            std::string("ICU normalization failed: ") + u_errorName(err));
        }
        std::string r;
        out.toUTF8String(r);
        return r;
    }

private:
    Form m_form;
};

class ReplaceNormalizer : public Normalizer
{
public:
    ReplaceNormalizer(const json &spec, const std::string &source, const std::string &path)
        : m_pattern(field(spec, "pattern", source, path), source, path + ".pattern"),
          m_content(stringField(spec, "content", source, path))
    {}
    std::string apply(std::string s) const override
    {
        std::string out;
        size_t last = 0;
        for (const auto &[b, e] : m_pattern.findAll(s)) {
            out.append(s, last, b - last);
            out += m_content;
            last = e;
            checkNormalizedSize(out.size());
        }
        out.append(s, last, std::string::npos);
        return out;
    }

private:
    Pattern m_pattern;
    std::string m_content;
};

class PrependNormalizer : public Normalizer
{
public:
    explicit PrependNormalizer(std::string prefix) : m_prefix(std::move(prefix)) {}
    // HF prepends only to non-empty strings.
    std::string apply(std::string s) const override { return s.empty() ? s : m_prefix + s; }

private:
    std::string m_prefix;
};

class StripNormalizer : public Normalizer
{
public:
    StripNormalizer(bool left, bool right) : m_left(left), m_right(right) {}
    std::string apply(std::string s) const override
    {
        auto isWs = [](char c) {
            return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
        };
        size_t b = 0, e = s.size();
        if (m_left)
            while (b < e && isWs(s[b]))
                ++b;
        if (m_right)
            while (e > b && isWs(s[e - 1]))
                --e;
        return s.substr(b, e - b);
    }

private:
    bool m_left, m_right;
};

class SequenceNormalizer : public Normalizer
{
public:
    std::vector<std::unique_ptr<Normalizer>> parts;
    std::string apply(std::string s) const override
    {
        for (const auto &p : parts) {
            s = p->apply(std::move(s));
            checkNormalizedSize(s.size());
        }
        return s;
    }
};

std::unique_ptr<Normalizer> makeNormalizer(const json &spec, const std::string &source,
                                           const std::string &path)
{
    checkNesting(source, path);
    if (spec.is_null())
        return nullptr;
    const std::string type = typeOf(spec, source, path);
    if (type == "NFC")
        return std::make_unique<UnicodeNormalizer>(UnicodeNormalizer::Nfc);
    if (type == "NFD")
        return std::make_unique<UnicodeNormalizer>(UnicodeNormalizer::Nfd);
    if (type == "NFKC")
        return std::make_unique<UnicodeNormalizer>(UnicodeNormalizer::Nfkc);
    if (type == "NFKD")
        return std::make_unique<UnicodeNormalizer>(UnicodeNormalizer::Nfkd);
    if (type == "Lowercase")
        return std::make_unique<UnicodeNormalizer>(UnicodeNormalizer::Lowercase);
    if (type == "Replace")
        return std::make_unique<ReplaceNormalizer>(spec, source, path);
    if (type == "Prepend")
        return std::make_unique<PrependNormalizer>(stringField(spec, "prepend", source, path));
    if (type == "Strip")
        return std::make_unique<StripNormalizer>(boolOr(spec, "strip_left", true),
                                                 boolOr(spec, "strip_right", true));
    if (type == "Sequence") {
        const json &list = field(spec, "normalizers", source, path);
        if (!list.is_array())
            fail(source, path + ".normalizers is not an array");
        auto seq = std::make_unique<SequenceNormalizer>();
        for (size_t i = 0; i < list.size(); ++i)
            if (auto n = makeNormalizer(list[i], source, path + ".normalizers[" + std::to_string(i) + "]"))
                seq->parts.push_back(std::move(n));
        return seq;
    }
    unsupported(source, "unsupported normalizer type \"" + type + "\" at " + path);
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers. A piece remembers whether it starts at the beginning of the input, which
// Metaspace's prepend_scheme "first" needs.

struct Piece
{
    std::string text;
    bool atStart = false;
};

enum class SplitBehavior
{
    Removed,
    Isolated,
    MergedWithPrevious,
    MergedWithNext,
    Contiguous
};

// HF's NormalizedString::split: the matches and the gaps between them, labelled, then grouped
// by behavior; empty pieces are dropped.
void splitPiece(const Piece &piece, const std::vector<Span> &matches, SplitBehavior behavior, bool invert,
                std::vector<Piece> &out)
{
    struct Seg
    {
        size_t b, e;
        bool match;
    };
    std::vector<Seg> segs;
    size_t prev = 0;
    for (const auto &[b, e] : matches) {
        if (b > prev)
            segs.push_back({prev, b, false});
        segs.push_back({b, e, true});
        prev = e;
    }
    if (prev < piece.text.size())
        segs.push_back({prev, piece.text.size(), false});
    if (invert)
        for (auto &s : segs)
            s.match = !s.match;

    std::vector<Seg> grouped;
    switch (behavior) {
    case SplitBehavior::Isolated:
        grouped = segs;
        break;
    case SplitBehavior::Removed:
        for (const auto &s : segs)
            if (!s.match)
                grouped.push_back(s);
        break;
    case SplitBehavior::MergedWithPrevious: {
        bool prevMatch = false;
        for (const auto &s : segs) {
            if (s.match && !prevMatch && !grouped.empty())
                grouped.back().e = s.e;
            else
                grouped.push_back(s);
            prevMatch = s.match;
        }
        break;
    }
    case SplitBehavior::MergedWithNext: {
        bool prevMatch = false;
        for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
            if (it->match && !prevMatch && !grouped.empty())
                grouped.back().b = it->b;
            else
                grouped.push_back(*it);
            prevMatch = it->match;
        }
        std::reverse(grouped.begin(), grouped.end());
        break;
    }
    case SplitBehavior::Contiguous: {
        bool prevMatch = false;
        bool first = true;
        for (const auto &s : segs) {
            if (!first && s.match == prevMatch)
                grouped.back().e = s.e;
            else
                grouped.push_back(s);
            prevMatch = s.match;
            first = false;
        }
        break;
    }
    }
    for (const auto &g : grouped)
        if (g.e > g.b)
            out.push_back({piece.text.substr(g.b, g.e - g.b), piece.atStart && g.b == 0});
}

class PreTokenizer
{
public:
    virtual ~PreTokenizer() = default;
    virtual void apply(std::vector<Piece> &pieces) const = 0;
    // Whether the pieces leave this step in GPT-2's byte-level alphabet.
    virtual bool producesByteLevel() const { return false; }
};

constexpr const char *kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer
{
public:
    ByteLevelPreTokenizer(bool addPrefixSpace, bool useRegex, const std::string &source,
                          const std::string &path)
        : m_addPrefixSpace(addPrefixSpace)
    {
        if (useRegex)
            m_regex = std::make_unique<Regex>(kGpt2Pattern, source, path);
    }
    void apply(std::vector<Piece> &pieces) const override
    {
        std::vector<Piece> out;
        for (auto &p : pieces) {
            if (m_addPrefixSpace && !p.text.empty() && p.text[0] != ' ')
                p.text.insert(0, 1, ' ');
            if (m_regex)
                splitPiece(p, m_regex->findAll(p.text), SplitBehavior::Isolated, false, out);
            else if (!p.text.empty())
                out.push_back(std::move(p));
        }
        for (auto &p : out)
            p.text = toByteLevel(p.text);
        pieces = std::move(out);
    }
    bool producesByteLevel() const override { return true; }

private:
    bool m_addPrefixSpace;
    std::unique_ptr<Regex> m_regex;
};

SplitBehavior parseBehavior(const json &spec, const std::string &source, const std::string &path)
{
    const std::string b = stringField(spec, "behavior", source, path);
    if (b == "Removed")
        return SplitBehavior::Removed;
    if (b == "Isolated")
        return SplitBehavior::Isolated;
    if (b == "MergedWithPrevious")
        return SplitBehavior::MergedWithPrevious;
    if (b == "MergedWithNext")
        return SplitBehavior::MergedWithNext;
    if (b == "Contiguous")
        return SplitBehavior::Contiguous;
    unsupported(source, "unsupported split behavior \"" + b + "\" at " + path + ".behavior");
}

class SplitPreTokenizer : public PreTokenizer
{
public:
    SplitPreTokenizer(std::unique_ptr<Pattern> pattern, SplitBehavior behavior, bool invert)
        : m_pattern(std::move(pattern)), m_behavior(behavior), m_invert(invert)
    {}
    void apply(std::vector<Piece> &pieces) const override
    {
        std::vector<Piece> out;
        for (const auto &p : pieces)
            splitPiece(p, m_pattern->findAll(p.text), m_behavior, m_invert, out);
        pieces = std::move(out);
    }

private:
    std::unique_ptr<Pattern> m_pattern;
    SplitBehavior m_behavior;
    bool m_invert;
};

class MetaspacePreTokenizer : public PreTokenizer
{
public:
    enum class Prepend
    {
        Always,
        First,
        Never
    };
    MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
        : m_replacement(std::move(replacement)), m_prepend(prepend), m_split(split)
    {}
    void apply(std::vector<Piece> &pieces) const override
    {
        std::vector<Piece> out;
        for (auto &p : pieces) {
            std::string t;
            for (char c : p.text)
                t += c == ' ' ? m_replacement : std::string(1, c);
            const bool starts = t.compare(0, m_replacement.size(), m_replacement) == 0;
            if (!starts && (m_prepend == Prepend::Always || (m_prepend == Prepend::First && p.atStart)))
                t = m_replacement + t;
            Piece np{std::move(t), p.atStart};
            if (m_split)
                splitPiece(np, findLiteral(np.text, m_replacement), SplitBehavior::MergedWithNext, false,
                           out);
            else if (!np.text.empty())
                out.push_back(std::move(np));
        }
        pieces = std::move(out);
    }

private:
    std::string m_replacement;
    Prepend m_prepend;
    bool m_split;
};

class SequencePreTokenizer : public PreTokenizer
{
public:
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    void apply(std::vector<Piece> &pieces) const override
    {
        for (const auto &p : parts)
            p->apply(pieces);
    }
    bool producesByteLevel() const override
    {
        return std::any_of(parts.begin(), parts.end(), [](const auto &p) { return p->producesByteLevel(); });
    }
};

std::unique_ptr<PreTokenizer> makePreTokenizer(const json &spec, const std::string &source,
                                               const std::string &path)
{
    checkNesting(source, path);
    if (spec.is_null())
        return nullptr;
    const std::string type = typeOf(spec, source, path);
    if (type == "ByteLevel")
        return std::make_unique<ByteLevelPreTokenizer>(boolOr(spec, "add_prefix_space", true),
                                                       boolOr(spec, "use_regex", true), source, path);
    if (type == "Split")
        return std::make_unique<SplitPreTokenizer>(
            std::make_unique<Pattern>(field(spec, "pattern", source, path), source, path + ".pattern"),
            parseBehavior(spec, source, path), boolOr(spec, "invert", false));
    if (type == "Digits") {
        // HF splits on char::is_numeric, i.e. the Unicode N categories.
        const bool individual = boolOr(spec, "individual_digits", false);
        return std::make_unique<SplitPreTokenizer>(
            std::make_unique<Pattern>(json{{"Regex", individual ? R"(\p{N})" : R"(\p{N}+)"}}, source, path),
            SplitBehavior::Isolated, false);
    }
    if (type == "Whitespace")
        return std::make_unique<SplitPreTokenizer>(
            std::make_unique<Pattern>(json{{"Regex", R"(\w+|[^\w\s]+)"}}, source, path),
            SplitBehavior::Removed, true);
    if (type == "WhitespaceSplit")
        return std::make_unique<SplitPreTokenizer>(
            std::make_unique<Pattern>(json{{"Regex", R"(\s+)"}}, source, path), SplitBehavior::Removed,
            false);
    if (type == "Metaspace") {
        std::string replacement = "\xE2\x96\x81"; // U+2581
        if (spec.contains("replacement") && spec.at("replacement").is_string())
            replacement = spec.at("replacement").get<std::string>();
        auto prepend = MetaspacePreTokenizer::Prepend::Always;
        if (spec.contains("prepend_scheme") && spec.at("prepend_scheme").is_string()) {
            const std::string s = spec.at("prepend_scheme").get<std::string>();
            prepend = s == "first"   ? MetaspacePreTokenizer::Prepend::First
                      : s == "never" ? MetaspacePreTokenizer::Prepend::Never
                                     : MetaspacePreTokenizer::Prepend::Always;
        } else if (!boolOr(spec, "add_prefix_space", true)) {
            prepend = MetaspacePreTokenizer::Prepend::Never;
        }
        return std::make_unique<MetaspacePreTokenizer>(replacement, prepend, boolOr(spec, "split", true));
    }
    if (type == "Sequence") {
        const json &list = field(spec, "pretokenizers", source, path);
        if (!list.is_array())
            fail(source, path + ".pretokenizers is not an array");
        auto seq = std::make_unique<SequencePreTokenizer>();
        for (size_t i = 0; i < list.size(); ++i)
            if (auto p =
                    makePreTokenizer(list[i], source, path + ".pretokenizers[" + std::to_string(i) + "]"))
                seq->parts.push_back(std::move(p));
        return seq;
    }
    unsupported(source, "unsupported pre_tokenizer type \"" + type + "\" at " + path);
}

// ---------------------------------------------------------------------------------------------
// Decoders: HF's decode_chain, a list of token strings in, a list out; the result is their
// concatenation. Unlike HF we keep raw bytes (no U+FFFD for a partial UTF-8 sequence), so that
// decoding a prefix of the ids and then the rest gives the same bytes as decoding all of them.

class Decoder
{
public:
    virtual ~Decoder() = default;
    virtual void apply(std::vector<std::string> &tokens) const = 0;
};

class ByteLevelDecoder : public Decoder
{
public:
    void apply(std::vector<std::string> &tokens) const override
    {
        for (auto &t : tokens)
            t = fromByteLevel(t);
    }
};

class ReplaceDecoder : public Decoder
{
public:
    ReplaceDecoder(const json &spec, const std::string &source, const std::string &path)
        : m_normalizer(spec, source, path)
    {}
    void apply(std::vector<std::string> &tokens) const override
    {
        for (auto &t : tokens)
            t = m_normalizer.apply(std::move(t));
    }

private:
    ReplaceNormalizer m_normalizer;
};

std::optional<uint8_t> parseByteToken(std::string_view t)
{
    // Exactly "<0xXX>", as sentencepiece writes byte pieces.
    if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>')
        return std::nullopt;
    const auto hex = text::hexDigit;
    const int hi = hex(t[3]), lo = hex(t[4]);
    if (hi < 0 || lo < 0)
        return std::nullopt;
    return uint8_t(hi * 16 + lo);
}

class ByteFallbackDecoder : public Decoder
{
public:
    void apply(std::vector<std::string> &tokens) const override
    {
        for (auto &t : tokens)
            if (const auto b = parseByteToken(t))
                t = std::string(1, char(*b));
    }
};

class FuseDecoder : public Decoder
{
public:
    void apply(std::vector<std::string> &tokens) const override
    {
        std::string all;
        for (const auto &t : tokens)
            all += t;
        tokens.assign(1, std::move(all));
    }
};

class StripDecoder : public Decoder
{
public:
    StripDecoder(std::string content, int start, int stop)
        : m_content(std::move(content)), m_start(start), m_stop(stop)
    {}
    void apply(std::vector<std::string> &tokens) const override
    {
        for (auto &t : tokens) {
            for (int i = 0;
                 i < m_start && !m_content.empty() && t.compare(0, m_content.size(), m_content) == 0; ++i)
                t.erase(0, m_content.size());
            for (int i = 0; i < m_stop && !m_content.empty() && t.size() >= m_content.size() &&
                            t.compare(t.size() - m_content.size(), m_content.size(), m_content) == 0;
                 ++i)
                t.erase(t.size() - m_content.size());
        }
    }

private:
    std::string m_content;
    int m_start, m_stop;
};

class MetaspaceDecoder : public Decoder
{
public:
    MetaspaceDecoder(std::string replacement, bool stripFirst)
        : m_replacement(std::move(replacement)), m_stripFirst(stripFirst)
    {}
    void apply(std::vector<std::string> &tokens) const override
    {
        for (size_t i = 0; i < tokens.size(); ++i) {
            std::string out;
            const std::string &t = tokens[i];
            for (size_t p = 0; p < t.size();) {
                if (!m_replacement.empty() && t.compare(p, m_replacement.size(), m_replacement) == 0) {
                    if (!(i == 0 && p == 0 && m_stripFirst))
                        out += ' ';
                    p += m_replacement.size();
                } else {
                    out += t[p++];
                }
            }
            tokens[i] = std::move(out);
        }
    }

private:
    std::string m_replacement;
    bool m_stripFirst;
};

class SequenceDecoder : public Decoder
{
public:
    std::vector<std::unique_ptr<Decoder>> parts;
    void apply(std::vector<std::string> &tokens) const override
    {
        for (const auto &d : parts)
            d->apply(tokens);
    }
};

std::unique_ptr<Decoder> makeDecoder(const json &spec, const std::string &source, const std::string &path)
{
    checkNesting(source, path);
    if (spec.is_null())
        return nullptr;
    const std::string type = typeOf(spec, source, path);
    if (type == "ByteLevel")
        return std::make_unique<ByteLevelDecoder>();
    if (type == "Replace")
        return std::make_unique<ReplaceDecoder>(spec, source, path);
    if (type == "ByteFallback")
        return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse")
        return std::make_unique<FuseDecoder>();
    if (type == "Strip") {
        const std::string content = stringField(spec, "content", source, path);
        const int start = spec.value("start", 0), stop = spec.value("stop", 0);
        return std::make_unique<StripDecoder>(content, start, stop);
    }
    if (type == "Metaspace") {
        std::string replacement = "\xE2\x96\x81";
        if (spec.contains("replacement") && spec.at("replacement").is_string())
            replacement = spec.at("replacement").get<std::string>();
        bool strip = boolOr(spec, "add_prefix_space", true);
        if (spec.contains("prepend_scheme") && spec.at("prepend_scheme").is_string())
            strip = spec.at("prepend_scheme").get<std::string>() != "never";
        return std::make_unique<MetaspaceDecoder>(replacement, strip);
    }
    if (type == "Sequence") {
        const json &list = field(spec, "decoders", source, path);
        if (!list.is_array())
            fail(source, path + ".decoders is not an array");
        auto seq = std::make_unique<SequenceDecoder>();
        for (size_t i = 0; i < list.size(); ++i)
            if (auto d = makeDecoder(list[i], source, path + ".decoders[" + std::to_string(i) + "]"))
                seq->parts.push_back(std::move(d));
        return seq;
    }
    unsupported(source, "unsupported decoder type \"" + type + "\" at " + path);
}

// ---------------------------------------------------------------------------------------------

struct StringHash
{
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

uint64_t pairKey(int a, int b)
{
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
}

struct AddedToken
{
    int id = 0;
    std::string content;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool singleWord = false;
    bool normalized = false;
};

// One stretch of input: plain text, or an added token already resolved to its id.
struct Segment
{
    std::string text;
    int addedId = -1;
    bool atStart = false;
};

} // namespace

// ---------------------------------------------------------------------------------------------

struct BpeTokenizer::Impl
{
    std::string source;

    // model
    VocabMap vocab;
    std::unordered_map<uint64_t, std::pair<int, int>> merges; // (left, right) -> (rank, merged id)
    bool ignoreMerges = false;
    bool byteFallback = false;
    bool fuseUnk = false;
    std::optional<int> unkId;
    std::array<int, 256> byteTokenIds{}; // id of "<0xXX>", -1 when absent (byte_fallback only)

    std::vector<AddedToken> added;
    VocabMap addedByContent;
    std::vector<std::string> idToPiece; // [vocabSize]; "" for holes
    std::vector<int8_t> special;        // [vocabSize]

    std::unique_ptr<Normalizer> normalizer;
    std::unique_ptr<PreTokenizer> preTokenizer;
    std::unique_ptr<Decoder> decoder;
    std::vector<int> prefixIds; // post-processor's template before $A
    std::vector<int> suffixIds; // and after it
    std::optional<int> bos, eos;

    void load(const json &root);
    void loadModel(const json &model);
    void loadAdded(const json &list);
    void loadPostProcessor(const json &spec, const std::string &path, std::vector<int> &prefix,
                           std::vector<int> &suffix);
    void chooseBosEos();

    void splitOnAdded(const Segment &in, bool normalizedPass, std::vector<Segment> &out) const;
    std::vector<Piece> preTokenizePieces(const Segment &seg) const;
    void bpeWord(const std::string &word, std::vector<int> &out) const;
};

void BpeTokenizer::Impl::load(const json &root)
{
    if (!root.is_object())
        fail(source, "top level is not a JSON object");
    loadModel(field(root, "model", source, ""));
    if (root.contains("added_tokens"))
        loadAdded(root.at("added_tokens"));

    int maxId = -1;
    for (const auto &[tok, id] : vocab)
        maxId = std::max(maxId, id);
    for (const auto &a : added)
        maxId = std::max(maxId, a.id);
    // ids are dense in practice; holes are allowed, but an id far past the entries must not size
    // the tables (one id of 2^31 - 1 would ask for 2 billion pieces)
    const int64_t entries = int64_t(vocab.size() + added.size());
    if (int64_t(maxId) >= entries + 65536)
        fail(source, "token id " + std::to_string(maxId) + " is far past the " + std::to_string(entries) +
                         " entries of the vocabulary");
    idToPiece.assign(size_t(maxId + 1), std::string());
    special.assign(size_t(maxId + 1), 0);
    for (const auto &[tok, id] : vocab)
        idToPiece[size_t(id)] = tok;
    for (const auto &a : added) {
        idToPiece[size_t(a.id)] = a.content;
        special[size_t(a.id)] = a.special;
    }

    // by reference: copying a section (json::value) recurses through all of it, which a deeply
    // nested hostile section would turn into a stack overflow before checkNesting sees it
    static const json none;
    const auto section = [&](const char *key) -> const json & {
        const auto it = root.find(key);
        return it == root.end() ? none : *it;
    };
    normalizer = makeNormalizer(section("normalizer"), source, "normalizer");
    preTokenizer = makePreTokenizer(section("pre_tokenizer"), source, "pre_tokenizer");
    decoder = makeDecoder(section("decoder"), source, "decoder");
    loadPostProcessor(section("post_processor"), "post_processor", prefixIds, suffixIds);
    for (const std::vector<int> *ids : {&prefixIds, &suffixIds})
        for (int id : *ids)
            if (id < 0 || id > maxId)
                fail(source, "post_processor adds token id " + std::to_string(id) +
                                 ", outside the vocabulary 0.." + std::to_string(maxId));
    chooseBosEos();
}

void BpeTokenizer::Impl::loadModel(const json &model)
{
    const std::string type = model.contains("type") ? typeOf(model, source, "model") : std::string("BPE");
    if (type != "BPE")
        unsupported(source, "unsupported model.type \"" + type + "\" (only BPE is implemented)");
    const json &v = field(model, "vocab", source, "model");
    if (!v.is_object())
        fail(source, "model.vocab is not an object of token -> id");
    vocab.reserve(v.size());
    for (const auto &[tok, id] : v.items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            fail(source, "model.vocab[\"" + tok + "\"] is not a non-negative integer id");
        vocab.emplace(tok, id.get<int>());
    }
    for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        if (model.contains(key) && model.at(key).is_string() && !model.at(key).get<std::string>().empty())
            unsupported(source, std::string("model.") + key + " is not implemented");
    }
    ignoreMerges = boolOr(model, "ignore_merges", false);
    byteFallback = boolOr(model, "byte_fallback", false);
    fuseUnk = boolOr(model, "fuse_unk", false);
    if (model.contains("unk_token") && model.at("unk_token").is_string()) {
        const auto it = vocab.find(model.at("unk_token").get<std::string>());
        if (it == vocab.end())
            fail(source, "model.unk_token \"" + model.at("unk_token").get<std::string>() +
                             "\" is not in model.vocab");
        unkId = it->second;
    }
    byteTokenIds.fill(-1);
    if (byteFallback) {
        static const char *hex = "0123456789ABCDEF";
        for (int b = 0; b < 256; ++b) {
            const std::string name = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
            if (const auto it = vocab.find(name); it != vocab.end())
                byteTokenIds[size_t(b)] = it->second;
        }
    }

    const json &m = model.contains("merges") ? model.at("merges") : json::array();
    if (!m.is_array())
        fail(source, "model.merges is not an array");
    merges.reserve(m.size());
    for (size_t rank = 0; rank < m.size(); ++rank) {
        const json &e = m[rank];
        std::string a, b;
        const std::string where = "model.merges[" + std::to_string(rank) + "]";
        if (e.is_string()) {
            const std::string s = e.get<std::string>();
            const size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                fail(source, where + " \"" + s + "\" is not two tokens separated by one space");
            a = s.substr(0, sp);
            b = s.substr(sp + 1);
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            a = e[0].get<std::string>();
            b = e[1].get<std::string>();
        } else {
            fail(source, where + " is neither \"a b\" nor [\"a\", \"b\"]");
        }
        const auto ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(a + b);
        if (ia == vocab.end())
            fail(source, where + " names token \"" + a + "\" which is not in model.vocab");
        if (ib == vocab.end())
            fail(source, where + " names token \"" + b + "\" which is not in model.vocab");
        if (im == vocab.end())
            fail(source, where + " produces \"" + a + b + "\" which is not in model.vocab");
        // A repeated pair keeps its first (best) rank, as HF's HashMap insert of the later one
        // would not be reached by the heap anyway.
        merges.emplace(pairKey(ia->second, ib->second), std::make_pair(int(rank), im->second));
    }
}

void BpeTokenizer::Impl::loadAdded(const json &list)
{
    if (list.is_null())
        return;
    if (!list.is_array())
        fail(source, "added_tokens is not an array");
    for (size_t i = 0; i < list.size(); ++i) {
        const json &e = list[i];
        const std::string where = "added_tokens[" + std::to_string(i) + "]";
        const json &id = field(e, "id", source, where);
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            fail(source, where + ".id is not a non-negative integer");
        AddedToken t;
        t.id = id.get<int>();
        t.content = stringField(e, "content", source, where);
        if (t.content.empty())
            fail(source, where + ".content is empty");
        t.special = boolOr(e, "special", false);
        t.lstrip = boolOr(e, "lstrip", false);
        t.rstrip = boolOr(e, "rstrip", false);
        t.singleWord = boolOr(e, "single_word", false);
        t.normalized = boolOr(e, "normalized", !t.special);
        addedByContent[t.content] = int(added.size());
        added.push_back(std::move(t));
    }
}

void BpeTokenizer::Impl::loadPostProcessor(const json &spec, const std::string &path,
                                           std::vector<int> &prefix, std::vector<int> &suffix)
{
    if (spec.is_null())
        return;
    const std::string type = typeOf(spec, source, path);
    auto idOf = [&](const std::string &tok, const std::string &where) {
        if (const auto it = addedByContent.find(tok); it != addedByContent.end())
            return added[size_t(it->second)].id;
        if (const auto it = vocab.find(tok); it != vocab.end())
            return it->second;
        fail(source, where + " names token \"" + tok + "\" which is not in the vocabulary");
    };
    if (type == "ByteLevel")
        return; // offsets only
    if (type == "TemplateProcessing") {
        const json &single = field(spec, "single", source, path);
        if (!single.is_array())
            fail(source, path + ".single is not an array");
        const json specials = spec.value("special_tokens", json::object());
        bool seenSequence = false;
        for (size_t i = 0; i < single.size(); ++i) {
            const json &item = single[i];
            const std::string where = path + ".single[" + std::to_string(i) + "]";
            if (item.is_object() && item.contains("Sequence")) {
                seenSequence = true;
                continue;
            }
            if (!item.is_object() || !item.contains("SpecialToken"))
                fail(source, where + " is neither a Sequence nor a SpecialToken");
            const std::string name =
                stringField(item.at("SpecialToken"), "id", source, where + ".SpecialToken");
            std::vector<int> ids;
            if (specials.contains(name) && specials.at(name).contains("ids") &&
                specials.at(name).at("ids").is_array()) {
                for (const auto &x : specials.at(name).at("ids")) {
                    if (!x.is_number_integer())
                        fail(source, path + ".special_tokens[\"" + name + "\"].ids holds a non-integer");
                    // checked before narrowing: 2^32 + 5 must not become id 5
                    if ((x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(INT32_MAX)) ||
                        (!x.is_number_unsigned() && (x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)))
                        fail(source, path + ".special_tokens[\"" + name + "\"].ids holds " + x.dump() +
                                         ", not a token id");
                    ids.push_back(x.get<int>());
                }
            } else {
                ids.push_back(idOf(name, where));
            }
            auto &dst = seenSequence ? suffix : prefix;
            dst.insert(dst.end(), ids.begin(), ids.end());
        }
        return;
    }
    if (type == "BertProcessing" || type == "RobertaProcessing") {
        auto pairId = [&](const char *key) {
            const json &p = field(spec, key, source, path);
            if (!p.is_array() || p.size() != 2 || !p[1].is_number_integer())
                fail(source, path + "." + key + " is not [token, id]");
            return p[1].get<int>();
        };
        prefix.push_back(pairId("cls"));
        suffix.push_back(pairId("sep"));
        return;
    }
    if (type == "Sequence") {
        const json &list = field(spec, "processors", source, path);
        if (!list.is_array())
            fail(source, path + ".processors is not an array");
        for (size_t i = 0; i < list.size(); ++i) {
            // Each processor wraps the output of the previous one.
            std::vector<int> p, s;
            loadPostProcessor(list[i], path + ".processors[" + std::to_string(i) + "]", p, s);
            prefix.insert(prefix.begin(), p.begin(), p.end());
            suffix.insert(suffix.end(), s.begin(), s.end());
        }
        return;
    }
    unsupported(source, "unsupported post_processor type \"" + type + "\" at " + path);
}

// BOS: the first token the post-processor puts before the text; failing that, the first of
// <|begin_of_text|>, <s>, <bos>, <|startoftext|> that exists. EOS: the last token the
// post-processor appends; failing that, the first of <|end_of_text|>, </s>, <|endoftext|>,
// <|im_end|>, <eos> that exists. (A model's config.json/generation_config.json is the better
// source for EOS; this is the fallback.)
void BpeTokenizer::Impl::chooseBosEos()
{
    auto find = [&](std::initializer_list<const char *> names) -> std::optional<int> {
        for (const char *n : names) {
            if (const auto it = addedByContent.find(std::string_view(n)); it != addedByContent.end())
                return added[size_t(it->second)].id;
            if (const auto it = vocab.find(std::string_view(n)); it != vocab.end())
                return it->second;
        }
        return std::nullopt;
    };
    bos = !prefixIds.empty() ? std::optional<int>(prefixIds.front())
                             : find({"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"});
    eos = !suffixIds.empty() ? std::optional<int>(suffixIds.back())
                             : find({"<|end_of_text|>", "</s>", "<|endoftext|>", "<|im_end|>", "<eos>"});
}

namespace {
bool isWordChar(char c)
{
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (static_cast<unsigned char>(c) & 0x80);
}
bool isSpaceChar(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
} // namespace

// HF AddedVocabulary: leftmost-longest match of the added tokens (those with the given
// `normalized` flag), single_word tokens must stand alone, lstrip/rstrip swallow the adjacent
// whitespace into the token.
void BpeTokenizer::Impl::splitOnAdded(const Segment &in, bool normalizedPass, std::vector<Segment> &out) const
{
    const std::string &s = in.text;
    size_t textStart = 0; // start of the pending plain text
    size_t i = 0;
    while (i < s.size()) {
        const AddedToken *best = nullptr;
        for (const auto &t : added) {
            if (t.normalized != normalizedPass || t.content.size() > s.size() - i)
                continue;
            if ((!best || t.content.size() > best->content.size()) &&
                s.compare(i, t.content.size(), t.content) == 0)
                best = &t;
        }
        if (best && best->singleWord) {
            const size_t e = i + best->content.size();
            if ((i > 0 && isWordChar(s[i - 1])) || (e < s.size() && isWordChar(s[e])))
                best = nullptr;
        }
        if (!best) {
            i += text::utf8SeqLen(static_cast<unsigned char>(s[i]));
            continue;
        }
        size_t b = i, e = i + best->content.size();
        if (best->lstrip)
            while (b > textStart && isSpaceChar(s[b - 1]))
                --b;
        if (best->rstrip)
            while (e < s.size() && isSpaceChar(s[e]))
                ++e;
        if (b > textStart)
            out.push_back({s.substr(textStart, b - textStart), -1, in.atStart && textStart == 0});
        out.push_back({std::string(), best->id, false});
        textStart = i = e;
    }
    if (textStart < s.size())
        out.push_back({s.substr(textStart), -1, in.atStart && textStart == 0});
}

std::vector<Piece> BpeTokenizer::Impl::preTokenizePieces(const Segment &seg) const
{
    std::vector<Piece> pieces{{seg.text, seg.atStart}};
    if (preTokenizer)
        preTokenizer->apply(pieces);
    pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [](const Piece &p) { return p.text.empty(); }),
                 pieces.end());
    return pieces;
}

// Rank-ordered merging: repeatedly merge the adjacent pair with the lowest merge rank (leftmost on
// ties), via a heap with lazy invalidation as in HF's Word::merge_all: O(n log n) per word.
void BpeTokenizer::Impl::bpeWord(const std::string &word, std::vector<int> &out) const
{
    if (ignoreMerges)
        if (const auto it = vocab.find(word); it != vocab.end()) {
            out.push_back(it->second);
            return;
        }

    struct Sym
    {
        int id;
        int prev;
        int next;
        bool alive;
    };
    std::vector<Sym> syms;
    syms.reserve(word.size());
    auto push = [&](int id) { syms.push_back({id, int(syms.size()) - 1, int(syms.size()) + 1, true}); };
    for (size_t i = 0; i < word.size();) {
        const size_t len = text::utf8SeqLen(static_cast<unsigned char>(word[i]));
        const std::string_view ch(word.data() + i, std::min(len, word.size() - i));
        i += ch.size();
        if (const auto it = vocab.find(ch); it != vocab.end()) {
            push(it->second);
            continue;
        }
        if (byteFallback && std::all_of(ch.begin(), ch.end(), [&](char c) {
                return byteTokenIds[static_cast<unsigned char>(c)] >= 0;
            })) {
            for (char c : ch)
                push(byteTokenIds[static_cast<unsigned char>(c)]);
            continue;
        }
        if (unkId) {
            if (!(fuseUnk && !syms.empty() && syms.back().id == *unkId))
                push(*unkId);
        }
        // No unk token: HF drops the character; so do we.
    }
    if (syms.empty())
        return;
    syms.back().next = -1;

    struct Cand
    {
        int rank;
        int left; // index into syms
        int leftId;
        int rightId;
        int merged;
        bool operator>(const Cand &o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto consider = [&](int l) {
        if (l < 0)
            return;
        const int r = syms[size_t(l)].next;
        if (r < 0)
            return;
        const auto it = merges.find(pairKey(syms[size_t(l)].id, syms[size_t(r)].id));
        if (it != merges.end())
            heap.push({it->second.first, l, syms[size_t(l)].id, syms[size_t(r)].id, it->second.second});
    };
    for (int i = 0; i + 1 < int(syms.size()); ++i)
        consider(i);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        Sym &l = syms[size_t(c.left)];
        if (!l.alive || l.id != c.leftId || l.next < 0)
            continue;
        Sym &r = syms[size_t(l.next)];
        if (r.id != c.rightId)
            continue;
        l.id = c.merged;
        r.alive = false;
        l.next = r.next;
        if (r.next >= 0)
            syms[size_t(r.next)].prev = c.left;
        consider(l.prev);
        consider(c.left);
    }
    for (int i = 0; i >= 0; i = syms[size_t(i)].next)
        out.push_back(syms[size_t(i)].id);
}

// ---------------------------------------------------------------------------------------------

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
BpeTokenizer::~BpeTokenizer() = default;

std::unique_ptr<BpeTokenizer> BpeTokenizer::fromJsonFile(const std::filesystem::path &path)
{
    return fromJsonText(text::readWholeFile(path), path.string());
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::fromJsonText(std::string_view jsonText,
                                                         const std::string &sourceName)
{
    auto impl = std::make_unique<Impl>();
    impl->source = sourceName;
    const json root = tokenize_detail::parseJson(jsonText, sourceName, "not valid JSON: ");
    try {
        impl->load(root);
    } catch (const json::exception &e) {
        // Shapes the explicit checks did not anticipate still name the file.
        fail(sourceName, std::string("malformed tokenizer.json: ") + e.what());
    }
    return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(impl)));
}

std::vector<std::string> BpeTokenizer::preTokenize(std::string_view input) const
{
    if (const auto bad = text::firstInvalidUtf8(input))
        throw Error(ErrorCode::InvalidArgument, "text is not valid UTF-8 at byte " + std::to_string(*bad));
    Segment seg{std::string(input), -1, true};
    if (m_impl->normalizer)
        seg.text = m_impl->normalizer->apply(std::move(seg.text));
    std::vector<std::string> out;
    for (auto &p : m_impl->preTokenizePieces(seg))
        out.push_back(std::move(p.text));
    return out;
}

std::vector<int> BpeTokenizer::encode(std::string_view input, bool addSpecial) const
{
    const Impl &d = *m_impl;
    checkTextSize(input, d.source);
    if (const auto bad = text::firstInvalidUtf8(input))
        throw Error(ErrorCode::InvalidArgument, "text is not valid UTF-8 at byte " + std::to_string(*bad));
    std::vector<int> ids;
    if (addSpecial)
        ids = d.prefixIds;

    std::vector<Segment> raw;
    d.splitOnAdded({std::string(input), -1, true}, false, raw);
    for (auto &seg : raw) {
        if (seg.addedId >= 0) {
            ids.push_back(seg.addedId);
            continue;
        }
        if (d.normalizer)
            seg.text = d.normalizer->apply(std::move(seg.text));
        std::vector<Segment> normalized;
        d.splitOnAdded(seg, true, normalized);
        for (const auto &n : normalized) {
            if (n.addedId >= 0) {
                ids.push_back(n.addedId);
                continue;
            }
            for (const auto &p : d.preTokenizePieces(n))
                d.bpeWord(p.text, ids);
        }
    }
    if (addSpecial)
        ids.insert(ids.end(), d.suffixIds.begin(), d.suffixIds.end());
    return ids;
}

std::string BpeTokenizer::decode(const std::vector<int> &ids, bool skipSpecial) const
{
    const Impl &d = *m_impl;
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int id : ids) {
        if (id < 0 || id >= int(d.idToPiece.size()) || d.idToPiece[size_t(id)].empty())
            continue; // HF skips ids it cannot map
        if (skipSpecial && d.special[size_t(id)])
            continue;
        tokens.push_back(d.idToPiece[size_t(id)]);
    }
    if (d.decoder)
        d.decoder->apply(tokens);
    std::string out;
    for (const auto &t : tokens)
        out += t;
    return out;
}

std::string BpeTokenizer::piece(int id) const
{
    if (id < 0 || id >= int(m_impl->idToPiece.size()))
        return {};
    return m_impl->idToPiece[size_t(id)];
}

int BpeTokenizer::vocabSize() const
{
    return int(m_impl->idToPiece.size());
}

std::optional<int> BpeTokenizer::bosId() const
{
    return m_impl->bos;
}

std::optional<int> BpeTokenizer::eosId() const
{
    return m_impl->eos;
}

bool BpeTokenizer::isSpecial(int id) const
{
    return id >= 0 && id < int(m_impl->special.size()) && m_impl->special[size_t(id)];
}

std::optional<int> BpeTokenizer::pieceToId(std::string_view p) const
{
    if (const auto it = m_impl->addedByContent.find(p); it != m_impl->addedByContent.end())
        return m_impl->added[size_t(it->second)].id;
    if (const auto it = m_impl->vocab.find(p); it != m_impl->vocab.end())
        return it->second;
    return std::nullopt;
}

} // namespace kvwb::core
