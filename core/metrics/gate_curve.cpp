#include "core/metrics/gate_curve.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvwb::core {

GatePoint gatePoint(const std::vector<double> &signal, const std::vector<bool> &good, double threshold,
                    bool higherIsBetter)
{
    if (signal.size() != good.size())
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("gate curve: {} signal values against {} KL verdicts", signal.size(), good.size()));
    size_t passed = 0, goodCount = 0, goodPassed = 0;
    for (size_t i = 0; i < signal.size(); ++i) {
        if (!std::isfinite(signal[i]))
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("gate curve: prompt {}'s signal is not finite", i));
        const bool pass = higherIsBetter ? signal[i] >= threshold : signal[i] <= threshold;
        passed += pass;
        goodCount += good[i];
        goodPassed += pass && good[i];
    }
    GatePoint p;
    p.threshold = threshold;
    p.passRate = signal.empty() ? NAN : double(passed) / double(signal.size());
    p.precision = passed ? double(goodPassed) / double(passed) : NAN;
    p.recall = goodCount ? double(goodPassed) / double(goodCount) : NAN;
    return p;
}

std::vector<GatePoint> gateCurve(const std::vector<double> &signal, const std::vector<bool> &good,
                                 bool higherIsBetter)
{
    std::vector<double> thresholds = signal;
    std::sort(thresholds.begin(), thresholds.end());
    thresholds.erase(std::unique(thresholds.begin(), thresholds.end()), thresholds.end());
    std::vector<GatePoint> out;
    out.reserve(thresholds.size());
    for (double t : thresholds)
        out.push_back(gatePoint(signal, good, t, higherIsBetter));
    return out;
}

std::optional<GatePoint> bestThreshold(const std::vector<GatePoint> &curve, double minPrecision)
{
    std::optional<GatePoint> best;
    for (const auto &p : curve) {
        if (!(p.precision >= minPrecision) || std::isnan(p.recall))
            continue;
        if (!best || p.recall > best->recall || (p.recall == best->recall && p.passRate > best->passRate))
            best = p;
    }
    return best;
}

} // namespace kvwb::core
