#include "core/tokenize/llama2c_tokenizer.h"

#include "core/util/error.h"
#include "core/util/text_util.h"

#include <cstdint>
#include <cstring>

namespace kvwb::core {

std::unique_ptr<Llama2cTokenizer> Llama2cTokenizer::fromFile(const std::filesystem::path &path)
{
    return fromBytes(text::readWholeFile(path), path.string());
}

std::unique_ptr<Llama2cTokenizer> Llama2cTokenizer::fromBytes(std::string_view bytes,
                                                              const std::string &source)
{
    auto fail = [&](const std::string &what) { throw Error(ErrorCode::Tokenizer, source + ": " + what); };
    size_t pos = 0;
    auto readI32 = [&](int32_t &v) {
        if (bytes.size() - pos < 4)
            return false;
        std::memcpy(&v, bytes.data() + pos, 4);
        pos += 4;
        return true;
    };
    std::unique_ptr<Llama2cTokenizer> t(new Llama2cTokenizer());
    int32_t maxLen = 0;
    if (!readI32(maxLen))
        fail("truncated header: no max_token_length (file is " + std::to_string(bytes.size()) + " bytes)");
    if (maxLen <= 0)
        fail("invalid max_token_length " + std::to_string(maxLen));
    t->m_maxTokenLength = maxLen;
    t->m_source = source;
    while (pos < bytes.size()) {
        const size_t entry = t->m_pieces.size();
        float score = 0;
        if (bytes.size() - pos < 4)
            fail("truncated entry " + std::to_string(entry) + ": no score");
        std::memcpy(&score, bytes.data() + pos, 4);
        pos += 4;
        int32_t len = 0;
        if (!readI32(len))
            fail("truncated entry " + std::to_string(entry) + ": no length");
        if (len < 0)
            fail("entry " + std::to_string(entry) + " has negative length " + std::to_string(len));
        if (len > maxLen)
            fail("entry " + std::to_string(entry) + " is " + std::to_string(len) +
                 " bytes, longer than max_token_length " + std::to_string(maxLen));
        if (bytes.size() - pos < size_t(len))
            fail("truncated entry " + std::to_string(entry) + ": length " + std::to_string(len) +
                 " but only " + std::to_string(bytes.size() - pos) + " bytes left");
        t->m_pieces.emplace_back(bytes.substr(pos, size_t(len)));
        t->m_scores.push_back(score);
        pos += size_t(len);
    }
    if (t->m_pieces.size() <= size_t(kEos))
        fail("only " + std::to_string(t->m_pieces.size()) +
             " entries; ids 0..2 (unk, BOS, EOS) are required");
    // run.c compares pieces as C strings; a piece with an embedded NUL is looked up by its prefix.
    for (auto &p : t->m_pieces)
        if (const size_t nul = p.find('\0'); nul != std::string::npos)
            p.resize(nul);
    for (size_t i = 0; i < t->m_pieces.size(); ++i)
        t->m_index.emplace(std::string_view(t->m_pieces[i]), int(i));
    return t;
}

int Llama2cTokenizer::lookup(std::string_view s) const
{
    const auto it = m_index.find(s);
    return it == m_index.end() ? -1 : it->second;
}

std::vector<int> Llama2cTokenizer::encode(std::string_view input, bool addSpecial) const
{
    checkTextSize(input, m_source);
    // run.c works on a C string: stop at the first NUL.
    const std::string_view text = input.substr(0, input.find('\0'));
    std::vector<int> tokens;
    tokens.reserve(text.size() + 2);
    if (addSpecial)
        tokens.push_back(kBos);
    if (!text.empty()) {
        // run.c pushes whatever str_lookup(" ") answers; a vocabulary without " " would give -1,
        // which we leave out rather than emit an invalid id.
        if (const int space = lookup(" "); space >= 0)
            tokens.push_back(space);
    }

    // Code points (up to 4 bytes: a lead byte plus its continuation bytes) become one id each, or
    // one id per byte (byte + 3, past <unk>, <s>, </s>) when the code point is not a piece.
    std::string buf;
    for (size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if ((c & 0xC0) != 0x80)
            buf.clear();
        buf += char(c);
        const bool nextIsCont =
            i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80;
        if (nextIsCont && buf.size() < 4)
            continue;
        if (const int id = lookup(buf); id != -1) {
            tokens.push_back(id);
        } else {
            for (char b : buf) {
                const int byteId = static_cast<unsigned char>(b) + 3;
                // run.c assumes the 256 byte pieces at 3..258; a shorter file has none to fall back to
                if (byteId >= vocabSize())
                    throw Error(ErrorCode::Tokenizer, m_source + ": no byte piece for byte " +
                                                          std::to_string(byteId - 3) + " (the file has " +
                                                          std::to_string(vocabSize()) +
                                                          " entries; bytes are ids 3..258)");
                tokens.push_back(byteId);
            }
        }
        buf.clear();
    }

    // Greedy merging: the adjacent pair whose concatenation is a piece with the highest score
    // (leftmost on ties, since run.c compares with >) merges first; BOS takes part like any id.
    std::string pair;
    while (true) {
        float bestScore = -1e10f;
        int bestId = -1;
        size_t bestIdx = 0;
        for (size_t i = 0; i + 1 < tokens.size(); ++i) {
            pair.assign(m_pieces[size_t(tokens[i])]);
            pair += m_pieces[size_t(tokens[i + 1])];
            const int id = lookup(pair);
            if (id != -1 && m_scores[size_t(id)] > bestScore) {
                bestScore = m_scores[size_t(id)];
                bestId = id;
                bestIdx = i;
            }
        }
        if (bestId == -1)
            break;
        tokens[bestIdx] = bestId;
        tokens.erase(tokens.begin() + std::ptrdiff_t(bestIdx) + 1);
    }
    return tokens;
}

Encoding Llama2cTokenizer::encodeWithOffsets(std::string_view text, bool addSpecial) const
{
    std::vector<int> ids = encode(text, addSpecial);
    // BOS only ever comes first; it may merge with what follows only in a vocabulary that has such
    // a piece, which then starts with "<s>" and matches no text: the matcher ends exact matching.
    const size_t leading = addSpecial && !ids.empty() && ids[0] == kBos ? 1 : 0;
    std::vector<std::string> surfaces(ids.size());
    for (size_t i = leading; i < ids.size(); ++i)
        surfaces[i] = decode({ids[i]}); // no BOS before it: the piece's space kept, bytes as bytes
    return detail::matchSurfaces(text, std::move(ids), surfaces, leading, 0, text.empty() ? "" : " ", *this);
}

std::string Llama2cTokenizer::decode(const std::vector<int> &ids, bool skipSpecial) const
{
    std::string out;
    int prev = -1;
    for (int id : ids) {
        if (id < 0 || id >= vocabSize()) {
            prev = id;
            continue;
        }
        const int before = prev;
        prev = id;
        if (skipSpecial && isSpecial(id))
            continue;
        std::string_view p = m_pieces[size_t(id)];
        if (before == kBos && !p.empty() && p[0] == ' ')
            p.remove_prefix(1);
        // run.c: sscanf(piece, "<0x%02hhX>", &byte) -> the raw byte.
        if (p.size() >= 4 && p.substr(0, 3) == "<0x") {
            const auto hex = text::hexDigit;
            const int h0 = hex(p[3]);
            if (h0 >= 0) {
                const int h1 = p.size() >= 5 ? hex(p[4]) : -1;
                out += char(h1 >= 0 ? h0 * 16 + h1 : h0);
                continue;
            }
        }
        out += p;
    }
    return out;
}

std::string Llama2cTokenizer::piece(int id) const
{
    if (id < 0 || id >= vocabSize())
        return {};
    return m_pieces[size_t(id)];
}

std::optional<int> Llama2cTokenizer::pieceToId(std::string_view p) const
{
    const int id = lookup(p);
    return id >= 0 ? std::optional<int>(id) : std::nullopt;
}

} // namespace kvwb::core
