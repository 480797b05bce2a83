// Small UTF-8 and file helpers shared by the tokenizer implementations (internal to core/).
//
// Stateless functions; thread-safe.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

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

// Whole file as bytes. Error(Io) naming the path when missing, a directory or unreadable.
std::string readWholeFile(const std::filesystem::path &path);

} // namespace kvwb::core::text
