// How well a quality-gate signal picks the prompts whose transfer is good: for each threshold, the
// share of prompts the gate passes, its precision (passed prompts that were good) and its recall
// (good prompts it passed), with "good" decided by the measured KL (KL <= a bound). A user chooses a
// gate threshold from this table instead of from a default.
//
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <vector>

namespace kvwb::core {

struct GatePoint
{
    double threshold = 0;
    double passRate = 0;
    double precision = 0; // NaN when nothing passes
    double recall = 0;    // NaN when nothing is good
};

// The gate passes a prompt when signal >= threshold (higherIsBetter: kv_cos) or signal <=
// threshold (tail_kl, nll); good[i] is whether prompt i's KL met the bound. Error(InvalidArgument)
// when the sizes differ or a signal is not finite.
GatePoint gatePoint(const std::vector<double> &signal, const std::vector<bool> &good, double threshold,
                    bool higherIsBetter);

// The curve over every distinct observed signal value as the threshold (ascending), each point
// as gatePoint computes it; empty for no prompts.
std::vector<GatePoint> gateCurve(const std::vector<double> &signal, const std::vector<bool> &good,
                                 bool higherIsBetter);

// The point of the curve with the highest recall among those whose precision is at least
// minPrecision (ties: the higher pass rate, then the first); nullopt when none reaches it.
std::optional<GatePoint> bestThreshold(const std::vector<GatePoint> &curve, double minPrecision);

} // namespace kvwb::core
