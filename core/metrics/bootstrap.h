// Paired bootstrap confidence intervals over prompts: two measurements of the same prompts (a
// converter and a baseline, or two converters), resampled together, so the interval of their
// difference keeps the pairing (a prompt that is hard for both counts once). Percentile intervals
// from a seeded resampling, so a report is reproducible.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvwb::core {

struct Interval
{
    double estimate = 0; // the statistic on the original sample
    double lo = 0, hi = 0;
    double level = 0.95;
    int resamples = 0;
};

struct BootstrapOptions
{
    int resamples = 2000;
    double level = 0.95; // in (0, 1)
    uint64_t seed = 1;
};

// The statistic over resampled prompts: the means of a and b over the drawn prompts (each drawn
// prompt counted as often as it was drawn).
using PairedStatistic = std::function<double(double meanA, double meanB)>;

// Interval of statistic(mean a, mean b) over prompts i (a[i] and b[i] measured on the same prompt),
// resampling the prompts with replacement. Error(InvalidArgument) when the sizes differ, fewer
// than 2 prompts are given, any value is not finite, or the options are out of range.
Interval pairedBootstrap(const std::vector<double> &a, const std::vector<double> &b,
                         const PairedStatistic &statistic, const BootstrapOptions &options = {});

// The common statistics: mean(a) - mean(b), and the share of b's gap closed by a,
// 1 - mean(a) / mean(b) (KL of a converter against KL with no prefix: 1 = all of it closed).
Interval meanDifference(const std::vector<double> &a, const std::vector<double> &b,
                        const BootstrapOptions &options = {});
Interval gapClosed(const std::vector<double> &a, const std::vector<double> &b,
                   const BootstrapOptions &options = {});

// Interval of mean(a) alone over prompts, for a measurement that is already paired within each
// prompt (a KL or a top-1 agreement between two paths run on the same prompt): the same
// resampling as pairedBootstrap, a's own prompts drawn with replacement.
Interval meanInterval(const std::vector<double> &a, const BootstrapOptions &options = {});

// "0.987 [0.981, 0.992]" with `digits` decimals.
std::string formatInterval(const Interval &i, int digits = 3);

} // namespace kvwb::core
