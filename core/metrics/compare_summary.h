// The summary of a prompt set compared three ways (A; B from scratch; B from A's converted cache),
// as `kvwb compare --held-out` / `--prompts` prints it and the window's Compare step shows it: means
// over the compared prompts and paired bootstrap 95% intervals (null with fewer than 2 prompts or a
// value that is not finite).
//
// Plain values.
#pragma once

#include "core/metrics/bootstrap.h"

#include <optional>
#include <string>
#include <vector>

namespace kvwb::core {

// One other converter run on the same prompts (--versus, a baseline): its means and this converter
// minus it.
struct CompareOtherSummary
{
    std::string key;       // "versus", "raw_source_kv", "random_map" or "shuffled_positions"
    std::string converter; // its record name
    double kl = 0, top1 = 0, rougeL = 0;
    std::optional<Interval> klDifference, top1Difference, rougeLDifference;
    // 1 - KL / KL(this one): the share of this one's KL the converter removes. Against the converter's
    // own rows at shuffled positions (a destroyed cache, which still carries what the prompt's tokens
    // say regardless of order), the retention above that floor.
    std::optional<Interval> klGapClosed;
};

// Whether B's continuation from the converted cache starts with the same n tokens as from scratch
// (firstDivergence: ComparisonSample's, -1 when the continuations are identical).
inline bool firstTokensMatch(int firstDivergence, int n)
{
    return firstDivergence < 0 || firstDivergence >= n;
}

struct CompareSetSummary
{
    int prompts = 0; // compared
    double kl = 0, top1 = 0, rougeL = 0, klNoPrefix = 0, top1NoPrefix = 0, rougeLA = 0;
    std::optional<Interval> klGapClosed, top1Gain, rougeLGainVsA;
    // the same KL over the first 8 generated positions only (gpu::kFirstTokens)
    double klFirst = 0, klNoPrefixFirst = 0;
    std::optional<Interval> klGapClosedFirst;
    // Prompts with an expected answer (a prompt file's "answer", e.g. `kvwb corpus context`): the
    // share whose text gives it (core::answerFound) from scratch, from the converted cache and from
    // A, and transfer minus scratch (paired interval, null below 2 answered prompts).
    int answered = 0;
    double answerScratch = 0, answerTransfer = 0, answerA = 0;
    std::optional<Interval> answerDifference;
    std::vector<CompareOtherSummary> others; // versus first, then the baselines
    // The quality gate judged by what B answers: a pass is right when the transfer's first
    // matchTokens greedy tokens are scratch's (firstTokensMatch).
    std::string gateSignal; // the gate's signal and threshold on this run
    double gateThreshold = 0;
    int matchTokens = 4;
    int passed = 0, passedMatching = 0, matching = 0; // gate passes; those matching; all matching
    double klFirstToken = 0; // mean KL at the first generated position, where the answer starts
    // passedMatching / passed; nullopt when nothing passed
    std::optional<double> gatePrecision() const
    {
        return passed > 0 ? std::optional<double>(double(passedMatching) / passed) : std::nullopt;
    }
};

} // namespace kvwb::core
