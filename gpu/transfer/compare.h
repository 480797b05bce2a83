// One prompt answered three ways, measured side by side: A itself, B from its own prefill
// ("scratch") and B from A's converted cache ("transfer"), with each generated token's text and
// probability, the transfer path's per-token KL to scratch (teacher-forced on scratch's
// continuation), the no-prefix floor, ROUGE-L, the first divergent token, each path's TTFT and
// decode speed, and the quality gate's decision. `kvwb compare` and the workbench's Compare panel
// both use it.
//
// Threading: the calling thread (the engine thread), like the models it runs.
#pragma once

#include "core/store/comparison_store.h"
#include "core/tokenize/tokenizer.h"
#include "gpu/model/model.h"
#include "gpu/transfer/cross_tokenizer.h"
#include "gpu/transfer/transfer.h"

#include <atomic>
#include <string>
#include <vector>

namespace kvwb::gpu {

struct CompareOptions
{
    int maxTokens = 32; // greedy tokens per path
    GateSignal gateSignal = GateSignal::TailKl;
    double gateThreshold = 0.1;
    int gateTail = 4;
    bool warmUp = false; // run B and the transfer once untimed first (first-call allocations)
    // The share of B's prefix positions B recomputes itself on the transfer path (its generation and
    // its KL to scratch; the quality gate reads the plain conversion).
    core::RecomputePlan recompute;
    // Checked between the paths and at every generated token: when set, compareTransfer returns
    // with CompareOutcome::cancelled and a partial sample.
    const std::atomic_bool *cancel = nullptr;
};

// Positions the early-token KL averages over (beside the whole continuation's mean).
inline constexpr int kFirstTokens = 8;

struct CompareOutcome
{
    core::ComparisonSample sample; // createdUtc and converter left for the caller
    GateResult gate;               // all three signals
    double ttftCachedMs = 0;       // transfer TTFT when A's cache is already there (convert + B)
    double ttftGatedMs = 0;        // what a gated deployment pays: A prefill + gate + transfer or B's prefill
    double top1NoPrefix = 0;       // the floor's top-1 agreement
    // the first kFirstTokens generated positions only: where a context-dependent answer starts
    double klFirst = 0, klNoPrefixFirst = 0;
    bool cancelled = false; // options.cancel was set: the sample is incomplete
};

// The prompt's ids, when A and B tokenise it identically and it leaves room for maxTokens (for
// prompts the two tokenise differently, comparablePair):
// Error(InvalidArgument) saying which condition failed otherwise (a transfer needs >= 3 tokens).
std::vector<int> comparablePrompt(const std::string &prompt, const Model &a, const core::Tokenizer &tokA,
                                  const Model &b, const core::Tokenizer &tokB, int maxTokens);

// The prompt as A and B tokenise it, paired token by token when they differ
// (gpu/transfer/cross_tokenizer.h), when it leaves room for maxTokens in both contexts:
// Error(InvalidArgument) otherwise (a transfer needs >= 3 tokens of B).
TokenPairing comparablePair(const std::string &prompt, const Model &a, const core::Tokenizer &tokA,
                            const Model &b, const core::Tokenizer &tokB, int maxTokens,
                            core::AlignPolicy policy = core::kDefaultAlignPolicy);

// Runs the three paths (greedy) on ids from comparablePrompt.
CompareOutcome compareTransfer(const Model &a, const core::Tokenizer &tokA, const Model &b,
                               const core::Tokenizer &tokB, const Converter &converter,
                               const std::vector<int> &ids, const CompareOptions &options);
// The same on a pairing from comparablePair: A answers its own tokens (idsA), B's scratch and
// transfer paths run on B's (idsB), the transfer from A's cache of the A tokens B's prefix is paired
// with, re-laid in B's positions (the quality gate reads the same).
CompareOutcome compareTransfer(const Model &a, const core::Tokenizer &tokA, const Model &b,
                               const core::Tokenizer &tokB, const Converter &converter,
                               const TokenPairing &pairing, const CompareOptions &options);

// Each id's text as it appears in the decoded continuation (decoding ids[0..j] minus ids[0..j-1];
// the token's own piece where that is not a prefix, e.g. inside a multi-byte character).
std::vector<std::string> tokenPieces(const core::Tokenizer &tok, const std::vector<int> &ids);

} // namespace kvwb::gpu
