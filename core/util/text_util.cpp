#include "core/util/text_util.h"

#include "core/util/error.h"
#include "core/util/mapped_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sys/stat.h>

namespace kvwb::core::text {

std::optional<size_t> firstInvalidUtf8(std::string_view s)
{
    size_t i = 0;
    const size_t n = s.size();
    while (i < n) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t len = 0;
        char32_t cp = 0;
        char32_t minCp = 0;
        if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, minCp = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, minCp = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, minCp = 0x10000;
        } else {
            return i;
        }
        if (i + len > n)
            return i;
        for (size_t k = 1; k < len; ++k) {
            const auto cc = static_cast<unsigned char>(s[i + k]);
            if ((cc & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if (cp < minCp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += len;
    }
    return std::nullopt;
}

char32_t nextCodePoint(std::string_view s, size_t &i)
{
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = utf8SeqLen(c);
    if (len == 1 || i + len > s.size()) {
        ++i;
        return c;
    }
    char32_t cp = c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += len;
    return cp;
}

void appendUtf8(std::string &out, char32_t cp)
{
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

namespace {

std::string mebibytes(uint64_t bytes)
{
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
    return buf;
}

} // namespace

uint64_t checkInputFile(const std::filesystem::path &path, uint64_t maxBytes)
{
    struct stat st
    {
    };
    if (::stat(path.c_str(), &st) != 0)
        throw Error(ErrorCode::Io, path.string() + ": cannot open: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode))
        throw Error(ErrorCode::Io, path.string() + ": not a regular file");
    if (uint64_t(st.st_size) > maxBytes)
        throw Error(ErrorCode::InvalidArgument, path.string() + ": " + mebibytes(uint64_t(st.st_size)) +
                                                    ", more than the " + mebibytes(maxBytes) +
                                                    " this input may have");
    return uint64_t(st.st_size);
}

std::string readWholeFile(const std::filesystem::path &path, uint64_t maxBytes)
{
    checkInputFile(path, maxBytes);
    const auto file = MappedFile::open(path);
    if (file->size() > maxBytes) // it grew since the check
        throw Error(ErrorCode::InvalidArgument,
                    path.string() + ": more than the " + mebibytes(maxBytes) + " this input may have");
    return std::string(reinterpret_cast<const char *>(file->data()), size_t(file->size()));
}

std::string utcNowIso8601()
{
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::vector<std::string> lowerWords(std::string_view text)
{
    std::vector<std::string> out;
    std::string cur;
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c >= 0x80) {
            cur += ch;
        } else if (c >= 'A' && c <= 'Z') {
            cur += char(c - 'A' + 'a');
        } else if (!cur.empty()) {
            out.push_back(std::move(cur));
            cur.clear();
        }
    }
    if (!cur.empty())
        out.push_back(std::move(cur));
    return out;
}

} // namespace kvwb::core::text
