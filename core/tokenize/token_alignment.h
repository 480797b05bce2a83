// Pairing the tokens of two tokenisations of one text, model B's with model A's, by their byte
// spans in the text (Tokenizer::encodeWithOffsets): for each B token the A token whose KV row B's
// row at that position is built from, when A and B have different tokenizers (kvwb capture stores
// it, fitting pairs rows through it, transfer builds B's cache from it; docs/transfer.md,
// "Different tokenizers").
//
// For a B token covering bytes [b, e), the candidates are the A tokens whose spans overlap it; a
// policy picks one:
//  - last (the default): the last of them, the A token that covers the end of B's token, so A's
//    row has read at least as far into the text as B's token reaches;
//  - first: the first of them;
//  - longest: the one sharing the most bytes with B's token (ties: the later one).
// Tokens that stand for no text: B's special tokens with an empty span (BOS, EOS) align to A's in
// order (B's first such token to A's first, ...), or, when A has fewer, to A's first token (at the
// start of the text) or last (at its end); any other B token with an empty span at byte p (the space
// a tokenizer prepends on its own) aligns to the A token covering byte p - 1 (what A has read up to
// there), or at p = 0 to the A token covering byte 0. A B token no A token overlaps (text one
// tokenizer's normaliser dropped) aligns to the last A token that starts before its end, or A's
// first token.
//
// Torch-free and Qt-free; pure functions, safe from any thread.
#pragma once

#include "core/tokenize/tokenizer.h"
#include "core/util/enum_names.h"

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace kvwb::core {

enum class AlignPolicy
{
    First,
    Last,
    Longest
};
// "first" | "last" | "longest"
inline constexpr EnumName<AlignPolicy> kAlignPolicyNames[] = {
    {AlignPolicy::First, "first"}, {AlignPolicy::Last, "last"}, {AlignPolicy::Longest, "longest"}};
KVWB_ENUM_NAMES(AlignPolicy, kAlignPolicyNames, alignPolicyName, parseAlignPolicy)
inline constexpr AlignPolicy kDefaultAlignPolicy = AlignPolicy::Last;

// One tokenisation as the alignment sees it: spans[i] of token i and whether it is a special token
// that stands for no text (special[i]: a special id with an empty span).
struct AlignSide
{
    std::vector<TokenSpan> spans;
    std::vector<uint8_t> special; // [spans.size()] 1 or 0
};
// encoding's spans, special where tok.isSpecial(id) and the span is empty.
AlignSide alignSide(const Encoding &encoding, const Tokenizer &tok);

// For each B token the index of its A token under policy: [b.spans.size()], each in
// [0, a.spans.size()). Error(InvalidArgument) when A has no tokens but B has some, or a side's
// special flags do not match its spans in number.
std::vector<int32_t> alignTokens(const AlignSide &a, const AlignSide &b,
                                 AlignPolicy policy = kDefaultAlignPolicy);

} // namespace kvwb::core
