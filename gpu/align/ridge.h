// Closed-form ridge regression from mergeable sufficient statistics: the fitting primitive of
// cross-model KV conversion (a linear map from source-model K or V features to target-model ones).
//
// Rows are streamed in with add(); only float64 sums are kept (n, sum x, sum y, x^T x, x^T y), so
// any number of tokens fits in memory [inputDim^2 + inputDim*outputDim doubles], accumulators from
// different shards merge exactly, and solve() is independent of how the rows were chunked.
// solve() fits the centred problem with a bias:
//     W = (Xc^T Xc + lambda * s * I)^-1 Xc^T Yc,   b = mean(y) - mean(x) W,   y ~ x W + b
// where s = trace(Xc^T Xc) / inputDim makes lambda scale-free (lambda 0.01 means 1% of the average
// feature variance, whatever the activations' magnitude). Solved by Cholesky in float64.
//
// Thread-safety: an accumulator is used by one thread at a time; solutions are plain values.
#pragma once

#include "core/store/converter_store.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace kvwb::gpu {

// A fitted map: y = x W + b, or its low-rank or MLP form (core/store/converter_store.h KvMap stores
// it in experiment files).

// y [rows, outputDim] for x [rows, inputDim] (row-major float32), any family: the same evaluation
// as the transfer's (gpu/src/align/kv_map_p.h).
std::vector<float> applyKvMap(const core::KvMap &map, const float *x, int64_t rows);

class RidgeAccumulator
{
public:
    RidgeAccumulator(int inputDim, int outputDim);
    ~RidgeAccumulator();
    RidgeAccumulator(RidgeAccumulator &&) noexcept;
    RidgeAccumulator &operator=(RidgeAccumulator &&) noexcept;

    int inputDim() const;
    int outputDim() const;
    int64_t rows() const;

    // x [rows, inputDim], y [rows, outputDim], row-major float32.
    void add(const float *x, const float *y, int64_t rows);
    // Adds another accumulator's statistics (same dimensions, else Error(Shape)).
    void merge(const RidgeAccumulator &other);

    // Error(InvalidArgument) with fewer than 2 rows or lambda < 0; Error(Internal) if the system
    // stays singular (lambda 0 on collinear features) after a tiny diagonal jitter.
    core::KvMap solve(double lambda) const;
    // Reduced-rank ridge regression: the ridge solution projected onto the top `rank` principal
    // directions of its fitted outputs (W_r = W V_r V_r^T, V_r the top eigenvectors of
    // W^T Xc^T Xc W), stored factored as down = W V_r [inputDim, rank], up = V_r^T [rank, outputDim].
    // Error(InvalidArgument) for rank outside 1..min(inputDim, outputDim).
    core::KvMap solveReducedRank(double lambda, int rank) const;
    // Ridge under an output metric M [outputDim, outputDim] (symmetric positive semi-definite,
    // row-major): W minimises sum_rows (y - xW - b) M (y - xW - b)^T + lambda' ||W||^2, lambda' =
    // lambda x the mean input variance as in solve(). M is scaled to a mean eigenvalue of 1, so M = I
    // gives solve(lambda); in M's eigenbasis each output direction j is a ridge of its own with
    // lambda / m_j (eigenvalues floored at 1e-4 of the mean): directions the metric weighs little are
    // shrunk hard, the ones it weighs most fitted closely. Error(InvalidArgument) for a metric of
    // another size, not finite or not symmetric, or one with no positive eigenvalue.
    core::KvMap solveWeighted(double lambda, const std::vector<double> &metric) const;

    // Coefficient of determination of `s` on the accumulated rows, pooled over outputs:
    // 1 - SSE / SST, computed from the sums without revisiting the data (ridge and low-rank maps;
    // Error(InvalidArgument) for an MLP map).
    double r2(const core::KvMap &s) const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

// Out-of-sample R^2 of s on x [rows, inputDim], y [rows, outputDim] (pooled over outputs).
double ridgeR2(const core::KvMap &s, const float *x, const float *y, int64_t rows);

} // namespace kvwb::gpu
