#include "core/metrics/metric_table.h"

#include "core/util/error.h"
#include "core/util/text_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvwb::core {

int MetricTable::column(const std::string &name) const
{
    const auto it = std::find(columns.begin(), columns.end(), name);
    return it == columns.end() ? -1 : int(it - columns.begin());
}

double MetricTable::at(size_t row, const std::string &name) const
{
    const int c = column(name);
    if (c < 0)
        throw Error(ErrorCode::InvalidArgument,
                    "metric table has no column '" + name + "' (columns: " + text::join(columns) + ")");
    if (row >= rows.size() || size_t(c) >= rows[row].size())
        throw Error(ErrorCode::InvalidArgument, "metric table has no row " + std::to_string(row) +
                                                    " in column '" + name + "' (" +
                                                    std::to_string(rows.size()) + " rows)");
    return rows[row][size_t(c)];
}

double percentile(std::vector<double> values, double p)
{
    if (!(p >= 0 && p <= 100))
        throw Error(ErrorCode::InvalidArgument, fmt::format("percentile {} is outside [0, 100]", p));
    if (values.empty())
        return 0;
    if (std::any_of(values.begin(), values.end(), [](double v) { return std::isnan(v); }))
        return std::numeric_limits<double>::quiet_NaN(); // as numpy: NaN propagates
    std::sort(values.begin(), values.end());
    // numpy.percentile(method="linear") step by step, so that results agree to the last bit:
    // q = p / 100, virtual index (n - 1) q, and its _lerp, which interpolates from the upper
    // neighbour when the fraction is >= 0.5 (b - (b - a)(1 - t)), from the lower one otherwise.
    const double q = p / 100.0;
    const double virtualIndex = double(values.size() - 1) * q;
    const double below = std::floor(virtualIndex);
    const size_t i = size_t(below);
    const size_t j = std::min(i + 1, values.size() - 1);
    const double t = virtualIndex - below;
    const double a = values[i], b = values[j], diff = b - a;
    return t >= 0.5 ? b - diff * (1 - t) : a + diff * t;
}

} // namespace kvwb::core
