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
using detail::kNaN;
using detail::sourceRows;

namespace {

struct Accumulation
{
    std::vector<RidgeAccumulator> keys, values; // [1] or [kvHeads]
    int64_t rows = 0;
    std::vector<std::string> warnings;
};

Accumulation accumulate(const core::ExperimentReader &f, int targetLayer, const std::vector<int> &sources,
                        const std::vector<int> &prompts, bool headMatched, int64_t maxTokens,
                        const core::TokenFeatures &features)
{
    if (sources.empty())
        throw Error(ErrorCode::InvalidArgument, "fitLayer: no source layers");
    checkHeadMatched(f, headMatched);
    detail::checkTokenFeatureSource(f, features, headMatched);
    const Geometry g = geometry(f);
    const int blocks = int(sources.size());
    const int extra = int(features.extraDim(blocks, g.widthA(), g.widthB()));
    Accumulation acc;
    if (headMatched)
        for (int h = 0; h < g.kvB; ++h) {
            acc.keys.emplace_back(blocks * g.hdA, g.hdB);
            acc.values.emplace_back(blocks * g.hdA, g.hdB);
        }
    else {
        acc.keys.emplace_back(blocks * g.widthA() + extra, g.widthB());
        acc.values.emplace_back(blocks * g.widthA() + extra, g.widthB());
    }
    for (const auto &[p, tokens] : detail::calibrationRows(f, prompts, maxTokens, &acc.warnings)) {
        for (bool keys : {true, false}) {
            const auto x = sourceRows(f, sources, p, keys, tokens, features);
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

// The output metric of each map of a kind: one per kv head (head-matched) or the heads' blocks on
// the diagonal of one; empty for an unweighted fit.
struct KindMetrics
{
    std::vector<std::vector<double>> keys, values; // per map
};

KindMetrics mapMetrics(const std::vector<std::vector<double>> &keyHeads,
                       const std::vector<std::vector<double>> &valueHeads, bool headMatched, int hdB)
{
    KindMetrics m;
    if (keyHeads.empty())
        return m;
    if (headMatched) {
        m.keys = keyHeads;
        m.values = valueHeads;
    } else {
        m.keys = {detail::blockMetric(keyHeads, hdB)};
        m.values = {detail::blockMetric(valueHeads, hdB)};
    }
    return m;
}

// rank 0: ridge (under the metrics when given); otherwise reduced-rank ridge of that rank.
core::LayerConverter solveLayer(const Accumulation &acc, int targetLayer, const std::vector<int> &sources,
                                bool headMatched, double lambda, int rank,
                                const core::TokenFeatures &features, const KindMetrics &metrics = {})
{
    const auto solve = [&](const RidgeAccumulator &a, const std::vector<std::vector<double>> &metric,
                           size_t i) {
        if (!metric.empty())
            return a.solveWeighted(lambda, metric[i]);
        return rank > 0 ? a.solveReducedRank(lambda, rank) : a.solve(lambda);
    };
    core::LayerConverter m;
    m.targetLayer = targetLayer;
    m.sourceLayers = sources;
    m.headMatched = headMatched;
    m.features = features;
    for (size_t i = 0; i < acc.keys.size(); ++i)
        m.keys.push_back(solve(acc.keys[i], metrics.keys, i));
    for (size_t i = 0; i < acc.values.size(); ++i)
        m.values.push_back(solve(acc.values[i], metrics.values, i));
    return m;
}

} // namespace

namespace {

std::vector<core::LayerConverter> fitGrid(const core::ExperimentReader &f, int targetLayer,
                                          const std::vector<int> &sourceLayers,
                                          const std::vector<int> &prompts, const std::vector<double> &lambdas,
                                          int rank, LayerFitStats *stats, bool headMatched, int64_t maxTokens,
                                          const core::TokenFeatures &features)
{
    if (lambdas.empty())
        throw Error(ErrorCode::InvalidArgument, "lambda grid is empty");
    auto acc = accumulate(f, targetLayer, sourceLayers, prompts, headMatched, maxTokens, features);
    std::vector<core::LayerConverter> out;
    for (double lambda : lambdas)
        out.push_back(solveLayer(acc, targetLayer, sourceLayers, headMatched, lambda, rank, features));
    if (stats) {
        stats->rows = acc.rows;
        stats->warnings = std::move(acc.warnings);
    }
    return out;
}

} // namespace

namespace detail {

std::vector<core::LayerConverter>
fitLayerGridWeighted(const core::ExperimentReader &f, int targetLayer, const std::vector<int> &sourceLayers,
                     const std::vector<int> &prompts, const std::vector<double> &lambdas,
                     const std::vector<std::vector<double>> &keyMetric,
                     const std::vector<std::vector<double>> &valueMetric, LayerFitStats *stats,
                     bool headMatched, int64_t maxTokens, const core::TokenFeatures &features)
{
    if (lambdas.empty())
        throw Error(ErrorCode::InvalidArgument, "lambda grid is empty");
    const Geometry g = geometry(f);
    if (int(keyMetric.size()) != g.kvB || int(valueMetric.size()) != g.kvB)
        throw Error(ErrorCode::Shape, fmt::format("metrics for {} / {} kv heads, model B has {}",
                                                  keyMetric.size(), valueMetric.size(), g.kvB));
    auto acc = accumulate(f, targetLayer, sourceLayers, prompts, headMatched, maxTokens, features);
    const KindMetrics metrics = mapMetrics(keyMetric, valueMetric, headMatched, g.hdB);
    std::vector<core::LayerConverter> out;
    for (double lambda : lambdas)
        out.push_back(solveLayer(acc, targetLayer, sourceLayers, headMatched, lambda, 0, features, metrics));
    if (stats) {
        stats->rows = acc.rows;
        stats->warnings = std::move(acc.warnings);
    }
    return out;
}

std::vector<double> weightedR2(const core::ExperimentReader &f, const std::vector<core::LayerConverter> &maps,
                               const std::vector<int> &prompts,
                               const std::vector<std::vector<double>> &keyMetric,
                               const std::vector<std::vector<double>> &valueMetric)
{
    const Geometry g = geometry(f);
    const int hd = g.hdB, kv = g.kvB, w = g.widthB();
    for (const auto &m : maps)
        if (m.sourceLayers != maps.front().sourceLayers || m.targetLayer != maps.front().targetLayer ||
            m.features != maps.front().features)
            throw Error(ErrorCode::InvalidArgument, "weightedR2: the maps of a grid share their layers");
    std::vector<double> sse(maps.size(), 0.0);
    double yMy = 0;
    std::vector<double> sumY(size_t(2 * w), 0.0);
    int64_t n = 0;
    const auto quad = [&](const std::vector<std::vector<double>> &metric,
                          const double *e) { // sum_h e_h M_h e_h
        double s = 0;
        for (int h = 0; h < kv; ++h) {
            const double *eh = e + h * hd;
            const auto &m = metric[size_t(h)];
            for (int i = 0; i < hd; ++i) {
                double row = 0;
                for (int j = 0; j < hd; ++j)
                    row += m[size_t(i) * size_t(hd) + size_t(j)] * eh[j];
                s += eh[i] * row;
            }
        }
        return s;
    };
    std::vector<double> e(static_cast<size_t>(w));
    for (const auto &[p, tokens] : detail::calibrationRows(f, prompts, 0, nullptr)) {
        for (bool keys : {true, false}) {
            const auto &metric = keys ? keyMetric : valueMetric;
            const int layer = maps.front().targetLayer;
            const auto y =
                keys ? f.keys(core::ModelRole::B, layer, p) : f.values(core::ModelRole::B, layer, p);
            // B's first `tokens` rows, token-major [tokens, w] (head h's columns h hd ..)
            const std::vector<double> yt(y.begin(), y.begin() + tokens * w);
            for (int64_t t = 0; t < tokens; ++t) {
                yMy += quad(metric, &yt[size_t(t) * size_t(w)]);
                for (int c = 0; c < w; ++c)
                    sumY[size_t((keys ? 0 : w) + c)] += yt[size_t(t) * size_t(w) + size_t(c)];
            }
            // the grid's maps share their source layers: A's rows are read once
            const auto x = sourceRows(f, maps.front().sourceLayers, p, keys, tokens, maps.front().features);
            for (size_t k = 0; k < maps.size(); ++k) {
                const auto &list = keys ? maps[k].keys : maps[k].values;
                const int blocks = int(maps[k].sourceLayers.size());
                std::vector<float> pred(size_t(tokens) * size_t(w));
                if (!maps[k].headMatched) {
                    pred = applyKvMap(list[0], x.data(), tokens);
                } else {
                    for (int h = 0; h < kv; ++h) {
                        const auto xh = headColumns(x.data(), tokens, blocks, g.kvA, g.hdA, h);
                        const auto ph = applyKvMap(list[size_t(h)], xh.data(), tokens);
                        for (int64_t t = 0; t < tokens; ++t)
                            for (int i = 0; i < hd; ++i)
                                pred[size_t(t) * size_t(w) + size_t(h * hd + i)] =
                                    ph[size_t(t) * size_t(hd) + size_t(i)];
                    }
                }
                for (int64_t t = 0; t < tokens; ++t) {
                    for (int c = 0; c < w; ++c)
                        e[size_t(c)] =
                            yt[size_t(t) * size_t(w) + size_t(c)] - pred[size_t(t) * size_t(w) + size_t(c)];
                    sse[k] += quad(metric, e.data());
                }
            }
        }
        n += tokens;
    }
    std::vector<double> out(maps.size(), kNaN);
    if (n < 2)
        return out;
    double sst = yMy;
    for (bool keys : {true, false}) { // minus n mean M mean
        std::vector<double> mean(static_cast<size_t>(w));
        for (int c = 0; c < w; ++c)
            mean[size_t(c)] = sumY[size_t((keys ? 0 : w) + c)] / double(n);
        sst -= double(n) * quad(keys ? keyMetric : valueMetric, mean.data());
    }
    for (size_t k = 0; k < maps.size(); ++k)
        out[k] = sst > 0 ? 1.0 - sse[k] / sst : kNaN;
    return out;
}

} // namespace detail

std::vector<core::LayerConverter>
fitLayerGrid(const core::ExperimentReader &f, int targetLayer, const std::vector<int> &sourceLayers,
             const std::vector<int> &prompts, const std::vector<double> &lambdas, LayerFitStats *stats,
             bool headMatched, int64_t maxTokens, const core::TokenFeatures &features)
{
    return fitGrid(f, targetLayer, sourceLayers, prompts, lambdas, 0, stats, headMatched, maxTokens,
                   features);
}

std::vector<core::LayerConverter> fitLayerGridLowRank(const core::ExperimentReader &f, int targetLayer,
                                                      const std::vector<int> &sourceLayers,
                                                      const std::vector<int> &prompts,
                                                      const std::vector<double> &lambdas, int rank,
                                                      LayerFitStats *stats, bool headMatched,
                                                      int64_t maxTokens, const core::TokenFeatures &features)
{
    if (rank < 1)
        throw Error(ErrorCode::InvalidArgument, fmt::format("a low-rank map needs rank >= 1, got {}", rank));
    return fitGrid(f, targetLayer, sourceLayers, prompts, lambdas, rank, stats, headMatched, maxTokens,
                   features);
}

core::LayerConverter fitLayer(const core::ExperimentReader &f, int targetLayer,
                              const std::vector<int> &sourceLayers, const std::vector<int> &prompts,
                              double lambda, LayerFitStats *stats, bool headMatched, int64_t maxTokens,
                              const core::TokenFeatures &features)
{
    return std::move(
        fitLayerGrid(f, targetLayer, sourceLayers, prompts, {lambda}, stats, headMatched, maxTokens, features)
            .front());
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
