#include "core/cache/entry_thresholds.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvwb::core {

namespace {

// Inverse of the standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9).
double normalQuantile(double p)
{
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                               1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                               6.680131188771972e+01, -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                               -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                               3.754408661907416e+00};
    const double lo = 0.02425, hi = 1 - lo;
    if (p < lo) {
        const double q = std::sqrt(-2 * std::log(p));
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    if (p > hi) {
        const double q = std::sqrt(-2 * std::log(1 - p));
        return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    const double q = p - 0.5, r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

// One-sided Wilson upper bound of a rate from `errors` of `n` (n may be fractional: pseudo-counts).
double wilsonUpper(double errors, double n, double z)
{
    if (n <= 0)
        return 1.0;
    const double p = errors / n, z2 = z * z;
    const double centre = p + z2 / (2 * n);
    const double spread = z * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n));
    return std::min(1.0, (centre + spread) / (1 + z2 / n));
}

} // namespace

EntryThresholds::EntryThresholds(EntryBoundOptions o) : m_options(o)
{
    if (!(o.errorBound > 0 && o.errorBound < 1))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("error bound {} is outside (0, 1)", o.errorBound));
    if (!(o.confidence >= 0.5 && o.confidence <= 0.999))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("error bound confidence {} is outside [0.5, 0.999]", o.confidence));
    if (o.priorWeight < 0)
        throw Error(ErrorCode::InvalidArgument, "error bound prior weight is negative");
    if (o.minUses < 1 || o.minUses > 1000)
        throw Error(ErrorCode::InvalidArgument, "error bound minimum uses must be 1..1000");
    if (o.maxObservations < 1)
        throw Error(ErrorCode::InvalidArgument, "an entry must keep at least one observation");
    m_z = normalQuantile(o.confidence);
}

EntryThresholds::Estimate EntryThresholds::decide(uint64_t entry, double s) const
{
    Estimate e;
    if (!std::isfinite(s))
        return e; // a NaN or infinite similarity is never served (serve is false)
    // pooled evidence at s, under monotonicity: wrong at s' >= s, right at s' <= s
    const double pooledErrors =
        double(m_pooledWrong.end() - std::lower_bound(m_pooledWrong.begin(), m_pooledWrong.end(), s));
    const double pooledSuccesses =
        double(std::upper_bound(m_pooledRight.begin(), m_pooledRight.end(), s) - m_pooledRight.begin());
    const auto it = m_entries.find(entry);
    if (it != m_entries.end())
        for (const Obs &o : it->second) {
            if (!o.correct && o.similarity >= s)
                ++e.ownErrors;
            else if (o.correct && o.similarity <= s)
                ++e.ownSuccesses;
        }
    const double pooled = pooledErrors + pooledSuccesses;
    const double w = double(m_options.priorWeight);
    double rate = pooled > 0 ? pooledErrors / pooled : 1.0;
    double prior = pooled > 0 ? w : 0.0;
    if (!m_options.priorCurve.empty() && w > 0) { // the pooled rate drawn towards the measured curve
        rate = (pooledErrors + w * m_options.priorCurve.rateAt(s)) / (pooled + w);
        prior = w;
    }
    e.priorRate = rate;
    const double n = double(e.ownErrors + e.ownSuccesses) + prior;
    e.errorUpper = wilsonUpper(double(e.ownErrors) + prior * rate, n, m_z);
    e.serve = e.ownSuccesses >= std::max(1, m_options.minUses) && e.errorUpper <= m_options.errorBound;
    return e;
}

void EntryThresholds::addPooled(const Obs &o)
{
    auto &v = o.correct ? m_pooledRight : m_pooledWrong;
    v.insert(std::upper_bound(v.begin(), v.end(), o.similarity), o.similarity);
    ++m_total;
}

void EntryThresholds::removePooled(const Obs &o)
{
    auto &v = o.correct ? m_pooledRight : m_pooledWrong;
    const auto it = std::lower_bound(v.begin(), v.end(), o.similarity);
    if (it != v.end() && *it == o.similarity) {
        v.erase(it);
        --m_total;
    }
}

void EntryThresholds::observe(uint64_t entry, double similarity, bool correct)
{
    auto &obs = m_entries[entry];
    obs.push_back({similarity, correct});
    addPooled(obs.back());
    if (obs.size() > m_options.maxObservations) {
        removePooled(obs.front());
        obs.pop_front();
    }
}

void EntryThresholds::forget(uint64_t entry)
{
    const auto it = m_entries.find(entry);
    if (it == m_entries.end())
        return;
    for (const Obs &o : it->second)
        removePooled(o);
    m_entries.erase(it);
}

} // namespace kvwb::core
