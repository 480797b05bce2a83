#include "core/metrics/bootstrap.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace kvwb::core {

Interval pairedBootstrap(const std::vector<double> &a, const std::vector<double> &b,
                         const PairedStatistic &statistic, const BootstrapOptions &options)
{
    if (a.size() != b.size())
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("paired bootstrap: {} values against {} (one per prompt on each side)",
                                a.size(), b.size()));
    if (a.size() < 2)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("paired bootstrap: {} prompts; an interval needs at least 2", a.size()));
    if (options.resamples < 100 || options.resamples > 1000000)
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("paired bootstrap: {} resamples, expected 100 to 1000000", options.resamples));
    if (!(options.level > 0 && options.level < 1))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("paired bootstrap: level {} is not in (0, 1)", options.level));
    for (size_t i = 0; i < a.size(); ++i)
        if (!std::isfinite(a[i]) || !std::isfinite(b[i]))
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("paired bootstrap: prompt {} has a value that is not finite", i));
    const size_t n = a.size();
    const auto mean = [n](const std::vector<double> &v) {
        double s = 0;
        for (double x : v)
            s += x;
        return s / double(n);
    };
    Interval out;
    out.estimate = statistic(mean(a), mean(b));
    out.level = options.level;
    out.resamples = options.resamples;
    std::mt19937_64 rng(options.seed);
    std::uniform_int_distribution<size_t> pick(0, n - 1);
    std::vector<double> stats;
    stats.reserve(size_t(options.resamples));
    for (int r = 0; r < options.resamples; ++r) {
        double sa = 0, sb = 0;
        for (size_t i = 0; i < n; ++i) {
            const size_t j = pick(rng);
            sa += a[j];
            sb += b[j];
        }
        const double s = statistic(sa / double(n), sb / double(n));
        if (std::isfinite(s))
            stats.push_back(s);
    }
    if (stats.empty()) {
        out.lo = out.hi = NAN;
        return out;
    }
    std::sort(stats.begin(), stats.end());
    // percentile interval: the (1 - level) / 2 and (1 + level) / 2 quantiles, linear between ranks
    const auto quantile = [&](double q) {
        const double pos = q * double(stats.size() - 1);
        const size_t lo = size_t(std::floor(pos)), hi = std::min(stats.size() - 1, lo + 1);
        return stats[lo] + (stats[hi] - stats[lo]) * (pos - double(lo));
    };
    out.lo = quantile((1 - options.level) / 2);
    out.hi = quantile((1 + options.level) / 2);
    return out;
}

Interval meanDifference(const std::vector<double> &a, const std::vector<double> &b,
                        const BootstrapOptions &options)
{
    return pairedBootstrap(
        a, b, [](double ma, double mb) { return ma - mb; }, options);
}

Interval gapClosed(const std::vector<double> &a, const std::vector<double> &b,
                   const BootstrapOptions &options)
{
    return pairedBootstrap(
        a, b, [](double ma, double mb) { return mb > 0 ? 1.0 - ma / mb : NAN; }, options);
}

Interval meanInterval(const std::vector<double> &a, const BootstrapOptions &options)
{
    return pairedBootstrap(
        a, a, [](double ma, double) { return ma; }, options);
}

std::string formatInterval(const Interval &i, int digits)
{
    return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", i.estimate, digits, i.lo, digits, i.hi, digits);
}

} // namespace kvwb::core
