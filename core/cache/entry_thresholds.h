// Per-entry similarity thresholds under a user-chosen error bound (vCache's idea: one global
// threshold is too loose for some cached answers and too strict for others). Each cached entry
// keeps the similarities of the requests it was nearest to and whether its answer was right for
// them (from the requests' intent labels, or by comparing with the answer computed instead). A
// request at similarity s is served from the entry only when
//   - the entry was itself right for at least `minUses` requests at a similarity <= s (its own
//     evidence: one lucky match is not enough), and
//   - the upper confidence bound (Wilson, one-sided) of its error rate at s is at most the bound,
//     the error rate estimated under monotonicity (an answer right at s' <= s is right at s; one
//     wrong at s' >= s is wrong at s) from its own observations plus `priorWeight` pseudo-
//     observations at the rate all entries together show at s - that pooled rate itself drawn
//     towards `priorCurve` (a measured error curve: error_curve.h) with priorWeight pseudo-
//     observations when one is given, so an early run starts from what the embedder is known to do
//     rather than from its first few outcomes;
// otherwise the request is computed ("explore") and its outcome observed. docs/cache-tiers.md,
// "Per-entry thresholds".
//
// Thread-safety: none (the tier's, engine thread).
#pragma once

#include "core/cache/error_curve.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

namespace kvwb::core {

struct EntryBoundOptions
{
    double errorBound = 0.05;     // the largest error rate a served answer may have (0, 1)
    double confidence = 0.9;      // of the upper bound: 0.5 .. 0.999
    int priorWeight = 20;         // pseudo-observations of the pooled rate
    size_t maxObservations = 256; // per entry (the oldest are forgotten first)
    int minUses = 3;              // own right outcomes at <= s an entry needs before it serves at s
    ErrorCurve priorCurve;        // empty: the pooled rate alone
};

class EntryThresholds
{
public:
    // Error(InvalidArgument) for a bound outside (0, 1), a confidence outside [0.5, 0.999], a
    // negative prior weight or minUses outside 1..1000.
    explicit EntryThresholds(EntryBoundOptions options);

    struct Estimate
    {
        bool serve = false;
        double errorUpper = 1; // the bound's left side
        double priorRate = 1;  // the rate the entry's evidence was drawn towards
        int64_t ownSuccesses = 0, ownErrors = 0;
    };
    Estimate decide(uint64_t entry, double similarity) const;
    void observe(uint64_t entry, double similarity, bool correct);
    void forget(uint64_t entry);
    const EntryBoundOptions &options() const { return m_options; }
    int64_t observations() const { return m_total; }

private:
    struct Obs
    {
        double similarity;
        bool correct;
    };
    EntryBoundOptions m_options;
    double m_z;
    void addPooled(const Obs &o);
    void removePooled(const Obs &o);
    std::unordered_map<uint64_t, std::deque<Obs>> m_entries;
    // Every entry's observations pooled, similarities kept sorted by outcome, so the pooled counts at
    // s are two binary searches instead of a pass over every entry.
    std::vector<double> m_pooledWrong, m_pooledRight;
    int64_t m_total = 0;
};

} // namespace kvwb::core
