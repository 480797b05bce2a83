// Log-softmax and KL divergence of logit vectors, in float64: the one implementation behind
// teacher-forced agreement, the quality gate, shadow verification and sampling's logprobs.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <vector>

namespace kvwb::core {

// log(sum_j exp(x[j])) over x [n] (n >= 1), shifted by the maximum so it cannot overflow.
double logSumExp(const float *x, size_t n);
// x[j] - logSumExp(x) for every j: log-probabilities [n].
std::vector<double> logSoftmax(const float *x, size_t n);
// KL(softmax(p) || softmax(q)) in nats for two logit vectors [n]; clamped at 0 (rounding).
double klDivergence(const float *p, const float *q, size_t n);
// The same for two whole vectors of one size.
double klDivergence(const std::vector<float> &p, const std::vector<float> &q);

} // namespace kvwb::core
