// The error rate a semantic hit carries at each similarity, fitted to a measured curve: the prior of
// the per-entry error bound (entry_thresholds.h) before the replay has evidence of its own. Read
// from a threshold sweep of labelled traffic (`kvwb sweep-semantic --json`: hits and correct hits
// per threshold) or from a trained embedder's validation curve (its train_log.json: precision,
// recall and pairs served per threshold). The cumulative points (everything at or above a
// threshold) become the local rates of the bins between consecutive thresholds, made non-increasing
// in similarity by pool-adjacent-violators weighted by each bin's count (a higher similarity is never
// more often wrong), a step function: the rate at s is its bin's, the lowest bin's below the lowest
// threshold.
//
// Thread-safety: a value type; readErrorCurve is a pure function of the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

// What serving every request (or pair) at or above `threshold` gives.
struct CumulativePoint
{
    double threshold = 0;
    double hits = 0;    // served
    double correct = 0; // of them, right
};

struct ErrorCurve
{
    std::vector<double> from;      // ascending: bin i covers [from[i], from[i+1]), the last to 1
    std::vector<double> errorRate; // per bin, non-increasing
    std::vector<double> weight;    // per bin: the hits it was fitted from
    std::string source;            // the file, and which curve of it

    bool empty() const { return from.empty(); }
    // The fitted rate at s (the lowest bin's below the first threshold); 1 for a NaN s.
    double rateAt(double s) const;
    // Error(InvalidArgument) for a point with a negative or non-finite count, more correct than
    // hits, or fewer hits at a lower threshold (not cumulative), and for no point with a hit.
    static ErrorCurve fit(std::vector<CumulativePoint> points, std::string source);
};

// The file: a sweep-semantic JSON ("points": threshold, hits, correct_hits) or a train_log.json
// ("evaluation" -> "trained" -> "curve": threshold, precision, recall, served; a log without served
// counts derives them from its validation pairs), or a directory holding a train_log.json.
// Error(Io) when it cannot be read, Error(Format) naming the file and field at fault.
ErrorCurve readErrorCurve(const std::filesystem::path &path);
// The same from the file's text; name is what errors call it.
ErrorCurve parseErrorCurve(std::string_view text, const std::string &name);

} // namespace kvwb::core
