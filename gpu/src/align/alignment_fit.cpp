// The fit: ridge accumulation of a target layer's rows, solved for one lambda or a grid of them,
// and the choice of lambda on validation scores.
#include "gpu/src/align/alignment_p.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;
using detail::aligned;
using detail::checkHeadMatched;
using detail::Geometry;
using detail::geometry;
using detail::headColumns;
using detail::sourceRows;

namespace {

struct Accumulation
{
    std::vector<RidgeAccumulator> keys, values; // [1] or [kvHeads]
    int64_t rows = 0;
    std::vector<std::string> warnings;
};

Accumulation accumulate(const core::ExperimentReader &f, int targetLayer, const std::vector<int> &sources,
                        const std::vector<int> &prompts, bool headMatched, int64_t maxTokens)
{
    if (sources.empty())
        throw Error(ErrorCode::InvalidArgument, "fitLayer: no source layers");
    checkHeadMatched(f, headMatched);
    const Geometry g = geometry(f);
    const int blocks = int(sources.size());
    Accumulation acc;
    if (headMatched)
        for (int h = 0; h < g.kvB; ++h) {
            acc.keys.emplace_back(blocks * g.hdA, g.hdB);
            acc.values.emplace_back(blocks * g.hdA, g.hdB);
        }
    else {
        acc.keys.emplace_back(blocks * g.widthA(), g.widthB());
        acc.values.emplace_back(blocks * g.widthA(), g.widthB());
    }
    for (const auto &[p, tokens] : detail::calibrationRows(f, prompts, maxTokens, &acc.warnings)) {
        for (bool keys : {true, false}) {
            const auto x = sourceRows(f, sources, p, keys, tokens);
            const auto y = keys ? f.keys(core::ModelRole::B, targetLayer, p)
                                : f.values(core::ModelRole::B, targetLayer, p);
            auto &list = keys ? acc.keys : acc.values;
            if (!headMatched) {
                list[0].add(x.data(), y.data(), tokens);
                continue;
            }
            for (int h = 0; h < g.kvB; ++h) {
                const auto xh = headColumns(x.data(), tokens, blocks, g.kvA, g.hdA, h);
                const auto yh = headColumns(y.data(), tokens, 1, g.kvB, g.hdB, h);
                list[size_t(h)].add(xh.data(), yh.data(), tokens);
            }
        }
        acc.rows += tokens;
    }
    if (acc.rows < 2)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: only {} aligned token rows for target layer {}; need at least 2",
                                f.path().string(), acc.rows, targetLayer));
    return acc;
}

// rank 0: ridge; otherwise reduced-rank ridge of that rank.
core::LayerConverter solveLayer(const Accumulation &acc, int targetLayer, const std::vector<int> &sources,
                                bool headMatched, double lambda, int rank)
{
    const auto solve = [&](const RidgeAccumulator &a) {
        return rank > 0 ? a.solveReducedRank(lambda, rank) : a.solve(lambda);
    };
    core::LayerConverter m;
    m.targetLayer = targetLayer;
    m.sourceLayers = sources;
    m.headMatched = headMatched;
    for (const auto &a : acc.keys)
        m.keys.push_back(solve(a));
    for (const auto &a : acc.values)
        m.values.push_back(solve(a));
    return m;
}

} // namespace

namespace {

std::vector<core::LayerConverter> fitGrid(const core::ExperimentReader &f, int targetLayer,
                                          const std::vector<int> &sourceLayers,
                                          const std::vector<int> &prompts, const std::vector<double> &lambdas,
                                          int rank, LayerFitStats *stats, bool headMatched, int64_t maxTokens)
{
    if (lambdas.empty())
        throw Error(ErrorCode::InvalidArgument, "lambda grid is empty");
    auto acc = accumulate(f, targetLayer, sourceLayers, prompts, headMatched, maxTokens);
    std::vector<core::LayerConverter> out;
    for (double lambda : lambdas)
        out.push_back(solveLayer(acc, targetLayer, sourceLayers, headMatched, lambda, rank));
    if (stats) {
        stats->rows = acc.rows;
        stats->warnings = std::move(acc.warnings);
    }
    return out;
}

} // namespace

std::vector<core::LayerConverter> fitLayerGrid(const core::ExperimentReader &f, int targetLayer,
                                               const std::vector<int> &sourceLayers,
                                               const std::vector<int> &prompts,
                                               const std::vector<double> &lambdas, LayerFitStats *stats,
                                               bool headMatched, int64_t maxTokens)
{
    return fitGrid(f, targetLayer, sourceLayers, prompts, lambdas, 0, stats, headMatched, maxTokens);
}

std::vector<core::LayerConverter>
fitLayerGridLowRank(const core::ExperimentReader &f, int targetLayer, const std::vector<int> &sourceLayers,
                    const std::vector<int> &prompts, const std::vector<double> &lambdas, int rank,
                    LayerFitStats *stats, bool headMatched, int64_t maxTokens)
{
    if (rank < 1)
        throw Error(ErrorCode::InvalidArgument, fmt::format("a low-rank map needs rank >= 1, got {}", rank));
    return fitGrid(f, targetLayer, sourceLayers, prompts, lambdas, rank, stats, headMatched, maxTokens);
}

core::LayerConverter fitLayer(const core::ExperimentReader &f, int targetLayer,
                              const std::vector<int> &sourceLayers, const std::vector<int> &prompts,
                              double lambda, LayerFitStats *stats, bool headMatched, int64_t maxTokens)
{
    return std::move(
        fitLayerGrid(f, targetLayer, sourceLayers, prompts, {lambda}, stats, headMatched, maxTokens).front());
}

namespace detail {

size_t bestLambda(const std::vector<LayerMetrics> &metrics, const std::vector<double> &grid)
{
    size_t best = 0;
    double bestScore = -1e300;
    for (size_t i = 0; i < grid.size(); ++i) {
        const double score = 0.5 * (metrics[i].r2Keys + metrics[i].r2Values);
        if (score > bestScore + 1e-12 || (std::abs(score - bestScore) <= 1e-12 && grid[i] > grid[best])) {
            best = i;
            bestScore = score;
        }
    }
    return best;
}

} // namespace detail

} // namespace kvwb::gpu
