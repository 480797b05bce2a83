// KV transfer between models with different tokenizers: the prompt tokenised by both, each B token
// paired with an A token by their byte spans in the text (core/tokenize/token_alignment.h), and B's
// cache of its own prompt prefix built position by position from A's rows through that pairing:
// B's position t is the conversion of A's row alignment[t]. Fitting pairs the captured rows the
// same way (gpu/align/alignment.h), so the maps see at transfer time what they were fitted on.
//
// The trick that keeps the rest of the transfer code unchanged: A's cache is re-laid in B's
// positions (pairedSourceCache), a source cache whose position t holds A's row alignment[t] and
// whose token ids are B's. Converter::convert, transferGenerate and qualityGate take it as a source
// cache of B's prefix.
//
// Threading: the calling thread (the engine thread), like the models and caches it uses.
#pragma once

#include "core/tokenize/token_alignment.h"
#include "core/tokenize/tokenizer.h"
#include "gpu/model/model.h"
#include "gpu/transfer/transfer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvwb::gpu {

// One prompt as both models tokenise it (with BOS, as generation does).
struct TokenPairing
{
    std::vector<int> idsA;
    std::vector<int> idsB;
    // [idsB.size()]: the A token index paired with each B token; empty when idsA == idsB (row t
    // pairs with row t, the same-tokenizer path).
    std::vector<int32_t> alignment;
    core::AlignPolicy policy = core::kDefaultAlignPolicy;
    bool crossTokenizer() const { return !alignment.empty(); }
};

// Both tokenisations of prompt and, when they differ, the alignment under policy.
TokenPairing pairTokens(const std::string &prompt, const core::Tokenizer &tokA, const core::Tokenizer &tokB,
                        core::AlignPolicy policy = core::kDefaultAlignPolicy);
// The same-tokenizer pairing of ids (no alignment).
TokenPairing samePairing(const std::vector<int> &ids);

// How many of A's tokens B's prompt prefix idsB[0 .. n-2] reads: 1 + the largest A index paired
// with one of those positions (all of idsA's length when there is no alignment, minus the last).
int sourceTokensNeeded(const TokenPairing &pairing);

// A's cache re-laid in B's positions: position t (t < idsB.size() - 1) holds A's K/V of token
// alignment[t] (keys in form: pre-RoPE rows re-rotated to position t, post-RoPE rows as A computed
// them, as fitting saw them), with B's prefix ids beside them. cacheA must hold at least
// sourceTokensNeeded(pairing) positions (Error(InvalidArgument) otherwise).
KvCache pairedSourceCache(const Model &source, const KvCache &cacheA, const TokenPairing &pairing,
                          core::KeyForm form);

// transferGenerate across tokenizers: A prefills idsA[0 .. sourceTokensNeeded) unless sourceCache
// already holds them (then reported as 0 ms), its cache is re-laid in B's positions and converted
// (both in convertMs), and B processes its last prompt token and generates. Without an alignment it
// is transferGenerate on idsB.
TransferResult transferGenerate(const Model &source, const Model &target, const Converter &converter,
                                const TokenPairing &pairing, const GenerateOptions &options,
                                KvCache *sourceCache = nullptr, const core::RecomputePlan &recompute = {});

// teacherForcedAgreement across tokenizers: B from its own prefill of idsB vs B from the converted,
// re-laid cache, both fed B's last prompt token + continuation[0 .. m-2].
Agreement teacherForcedAgreement(const Model &source, const Model &target, const Converter &converter,
                                 const TokenPairing &pairing, const std::vector<int> &continuation,
                                 const core::RecomputePlan &recompute = {});

} // namespace kvwb::gpu
