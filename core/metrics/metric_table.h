// Numeric tables and matrices the workbench's results are made of (per-layer and per-head metrics,
// sweeps, CKA), and the percentile every summary uses. Plain values; thread-safe to read.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kvwb::core {

// A numeric table with named columns (per-layer metrics, per-head metrics, sweeps), row-major.
struct MetricTable
{
    std::vector<std::string> columns;
    std::vector<std::vector<double>> rows; // each rows[i].size() == columns.size()

    int column(const std::string &name) const;            // index, or -1
    double at(size_t row, const std::string &name) const; // Error(InvalidArgument): unknown column
};

// A square-or-not matrix of doubles, row-major [rows, cols].
struct Matrix
{
    int rows = 0;
    int cols = 0;
    std::vector<double> data;
};

// Percentile by linear interpolation between closest ranks (numpy's default, bit for bit); 0 for
// no samples, NaN when a value is NaN. p is in percent, [0, 100] (as numpy.percentile; not a
// fraction): Error(InvalidArgument) otherwise.
double percentile(std::vector<double> values, double p);

} // namespace kvwb::core
