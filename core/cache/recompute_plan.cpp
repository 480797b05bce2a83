#include "core/cache/recompute_plan.h"

#include <algorithm>
#include <cmath>

namespace kvwb::core {

std::vector<int> recomputedPositions(int n, const RecomputePlan &plan)
{
    const double share = std::isnan(plan.share) ? 0.0 : std::clamp(plan.share, 0.0, 1.0);
    const int count = std::clamp(int(std::lround(share * std::max(n, 0))), 0, std::max(n, 0));
    int first = 0;
    switch (plan.positions) {
    case RecomputePositions::First:
        first = count;
        break;
    case RecomputePositions::Recent:
        first = 0;
        break;
    case RecomputePositions::Ends:
        first = (count + 1) / 2;
        break;
    }
    std::vector<int> out;
    out.reserve(size_t(count));
    for (int i = 0; i < first; ++i)
        out.push_back(i);
    for (int i = n - (count - first); i < n; ++i)
        out.push_back(i);
    return out;
}

} // namespace kvwb::core
