#include "core/tokenize/token_alignment.h"

#include "core/util/error.h"

#include <algorithm>
#include <string>

namespace kvwb::core {

AlignSide alignSide(const Encoding &encoding, const Tokenizer &tok)
{
    AlignSide s;
    s.spans = encoding.spans;
    s.special.resize(encoding.spans.size(), 0);
    for (size_t i = 0; i < encoding.spans.size() && i < encoding.ids.size(); ++i)
        s.special[i] = tok.isSpecial(encoding.ids[i]) && encoding.spans[i].empty() ? 1 : 0;
    return s;
}

namespace {

void checkSide(const AlignSide &s, const char *name)
{
    if (s.special.size() != s.spans.size())
        throw Error(ErrorCode::InvalidArgument, std::string("token alignment: model ") + name + " has " +
                                                    std::to_string(s.spans.size()) + " spans but " +
                                                    std::to_string(s.special.size()) + " special flags");
}

} // namespace

std::vector<int32_t> alignTokens(const AlignSide &a, const AlignSide &b, AlignPolicy policy)
{
    checkSide(a, "a");
    checkSide(b, "b");
    std::vector<int32_t> out(b.spans.size(), 0);
    if (b.spans.empty())
        return out;
    if (a.spans.empty())
        throw Error(ErrorCode::InvalidArgument,
                    "token alignment: model a has no tokens for model b's " + std::to_string(b.spans.size()));
    const int32_t lastA = int32_t(a.spans.size()) - 1;

    // A's tokens that cover text, in order (their spans are in text order).
    std::vector<int32_t> text;
    std::vector<int32_t> specialsA;
    for (int32_t i = 0; i <= lastA; ++i) {
        if (!a.spans[size_t(i)].empty())
            text.push_back(i);
        else if (a.special[size_t(i)])
            specialsA.push_back(i);
    }
    // The first A token (of `text`) whose span ends after byte `at`.
    const auto firstEndingAfter = [&](int32_t at) {
        return size_t(std::partition_point(text.begin(), text.end(),
                                           [&](int32_t i) { return a.spans[size_t(i)].end <= at; }) -
                      text.begin());
    };
    // The A token covering byte `at`, else the last one starting at or before it, else A's first.
    const auto covering = [&](int32_t at) -> int32_t {
        const size_t k = firstEndingAfter(at);
        if (k < text.size() && a.spans[size_t(text[k])].begin <= at)
            return text[k];
        return k > 0 ? text[k - 1] : 0;
    };

    size_t specialRank = 0;
    for (size_t t = 0; t < b.spans.size(); ++t) {
        const TokenSpan s = b.spans[t];
        if (b.special[t]) {
            const size_t r = specialRank++;
            if (r < specialsA.size())
                out[t] = specialsA[r];
            else
                out[t] = s.begin == 0 ? 0 : lastA;
            continue;
        }
        if (s.empty()) {
            out[t] = covering(s.begin > 0 ? s.begin - 1 : 0);
            continue;
        }
        // the A tokens overlapping [s.begin, s.end)
        size_t k = firstEndingAfter(s.begin);
        int32_t chosen = -1, longest = -1;
        for (; k < text.size() && a.spans[size_t(text[k])].begin < s.end; ++k) {
            const int32_t i = text[k];
            const TokenSpan as = a.spans[size_t(i)];
            const int32_t shared = std::min(s.end, as.end) - std::max(s.begin, as.begin);
            if (policy == AlignPolicy::First && chosen < 0)
                chosen = i;
            else if (policy == AlignPolicy::Last)
                chosen = i;
            else if (policy == AlignPolicy::Longest && shared >= longest) {
                chosen = i;
                longest = shared;
            }
        }
        if (chosen < 0) // no A token overlaps: the last one starting before B's token ends
            chosen = covering(s.end - 1);
        out[t] = chosen;
    }
    return out;
}

} // namespace kvwb::core
