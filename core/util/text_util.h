// Small UTF-8 and file helpers shared by the tokenizer implementations (internal to core/).
//
// Stateless functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core::text {

// Byte length of the UTF-8 sequence that starts with lead (1 for a stray continuation or invalid
// byte, so that callers always make progress).
inline size_t utf8SeqLen(unsigned char lead)
{
    if (lead < 0x80)
        return 1;
    if ((lead & 0xE0) == 0xC0)
        return 2;
    if ((lead & 0xF0) == 0xE0)
        return 3;
    if ((lead & 0xF8) == 0xF0)
        return 4;
    return 1;
}

// Offset of the first byte that does not start a well-formed UTF-8 sequence (overlongs,
// surrogates and > U+10FFFF included), or nullopt when all of s is valid.
std::optional<size_t> firstInvalidUtf8(std::string_view s);

// Decodes the code point at s[i] (s must be valid UTF-8 there) and advances i.
char32_t nextCodePoint(std::string_view s, size_t &i);
void appendUtf8(std::string &out, char32_t cp);

// Value of a hexadecimal digit, or -1.
inline int hexDigit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

// Calls fn(lineNumber, line) for each '\n'-terminated line of text (numbers start at 1; a final
// line without '\n' counts; the '\n' is not part of line). fn returns false to stop early.
template <typename Fn> void forEachLine(std::string_view text, Fn &&fn)
{
    size_t lineNo = 0, pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos)
            end = text.size();
        const std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        if (!fn(++lineNo, line))
            return;
    }
}

// Word bytes: ASCII letters and digits, and every byte of a multi-byte UTF-8 character (so "café"
// stays one word); everything else separates words. ASCII is lower-cased; other scripts are kept as
// they are. The semantic tier's lexical embedder and the knowledge graph's name matching use it.
std::vector<std::string> lowerWords(std::string_view text);

// "a, b, c"
inline std::string join(const std::vector<std::string> &items, std::string_view separator = ", ")
{
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i)
            out += separator;
        out += items[i];
    }
    return out;
}

// The one bounded reader of input files. checkInputFile: `path` is a regular file (not a device,
// FIFO or directory: /dev/zero never ends) of at most maxBytes, checked with stat before anything
// is read or allocated; Error(Io) naming the path when missing, not regular or unreadable,
// Error(InvalidArgument) naming it, its size and the limit when larger. Returns the size.
inline constexpr uint64_t kMaxInputFileBytes = uint64_t(2) << 30; // 2 GiB
uint64_t checkInputFile(const std::filesystem::path &path, uint64_t maxBytes = kMaxInputFileBytes);
// Whole file as bytes, after checkInputFile.
std::string readWholeFile(const std::filesystem::path &path, uint64_t maxBytes = kMaxInputFileBytes);

// The current UTC time as ISO 8601, e.g. 2026-01-31T12:00:00Z.
std::string utcNowIso8601();

} // namespace kvwb::core::text
