#include "core/metrics/distributions.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvwb::core {

double logSumExp(const float *x, size_t n)
{
    const double m = *std::max_element(x, x + n);
    double s = 0;
    for (size_t j = 0; j < n; ++j)
        s += std::exp(double(x[j]) - m);
    return m + std::log(s);
}

std::vector<double> logSoftmax(const float *x, size_t n)
{
    const double z = logSumExp(x, n);
    std::vector<double> out(n);
    for (size_t j = 0; j < n; ++j)
        out[j] = double(x[j]) - z;
    return out;
}

double klDivergence(const float *p, const float *q, size_t n)
{
    const double zp = logSumExp(p, n), zq = logSumExp(q, n);
    double kl = 0;
    for (size_t j = 0; j < n; ++j) {
        const double lp = double(p[j]) - zp, lq = double(q[j]) - zq;
        kl += std::exp(lp) * (lp - lq);
    }
    return std::max(kl, 0.0);
}

double klDivergence(const std::vector<float> &p, const std::vector<float> &q)
{
    if (p.size() != q.size() || p.empty())
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("KL divergence of logit vectors of {} and {} entries", p.size(), q.size()));
    return klDivergence(p.data(), q.data(), p.size());
}

} // namespace kvwb::core
