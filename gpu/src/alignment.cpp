#include "gpu/alignment.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;

namespace {

int rowWidth(const core::ExperimentReader &f, char role)
{
    const auto &c = f.model(role).config;
    return c.numKvHeads * c.headDim;
}

// Features [tokens, sum widths] for one prompt: A's rows of each source layer side by side.
std::vector<float> sourceRows(const core::ExperimentReader &f, const std::vector<int> &layers, int prompt,
                              bool keys, int64_t tokens)
{
    const int w = rowWidth(f, 'a');
    const size_t width = size_t(w) * layers.size();
    std::vector<float> x(size_t(tokens) * width);
    for (size_t li = 0; li < layers.size(); ++li) {
        const auto part = keys ? f.keys('a', layers[li], prompt) : f.values('a', layers[li], prompt);
        for (int64_t t = 0; t < tokens; ++t)
            std::copy_n(part.data() + size_t(t) * size_t(w), size_t(w),
                        x.data() + size_t(t) * width + li * size_t(w));
    }
    return x;
}

// True when A and B tokenised the prompt identically (row t of A corresponds to row t of B).
bool aligned(const core::ExperimentReader &f, int prompt, std::vector<std::string> *warnings)
{
    const auto info = f.prompt(prompt);
    if (info.a.ids == info.b.ids && !info.a.ids.empty())
        return true;
    if (warnings && warnings->size() < 20)
        warnings->push_back(
            fmt::format("{}: prompt {} skipped: models A and B tokenised it differently ({} vs {} tokens)",
                        f.path().filename().string(), prompt, info.a.ids.size(), info.b.ids.size()));
    return false;
}

} // namespace

std::vector<int> proportionalSourceLayers(int targetLayer, int targetLayers, int sourceLayers, int k)
{
    if (targetLayers <= 0 || sourceLayers <= 0 || targetLayer < 0 || targetLayer >= targetLayers || k <= 0)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("bad layer selection: target {} of {}, {} source layers, k {}", targetLayer,
                                targetLayers, sourceLayers, k));
    // same relative depth: target 0 -> source 0, last -> last
    const double depth = targetLayers > 1 ? double(targetLayer) / double(targetLayers - 1) : 0.0;
    const int centre = int(std::lround(depth * double(sourceLayers - 1)));
    std::vector<int> out = {centre};
    for (int d = 1; int(out.size()) < std::min(k, sourceLayers); ++d) {
        if (centre - d >= 0)
            out.push_back(centre - d);
        if (int(out.size()) < k && centre + d < sourceLayers)
            out.push_back(centre + d);
    }
    std::sort(out.begin(), out.end());
    return out;
}

LayerMap fitLayer(const core::ExperimentReader &f, int targetLayer, const std::vector<int> &sourceLayers,
                  const std::vector<int> &prompts, double lambda, LayerFitStats *stats)
{
    if (sourceLayers.empty())
        throw Error(ErrorCode::InvalidArgument, "fitLayer: no source layers");
    const int wa = rowWidth(f, 'a'), wb = rowWidth(f, 'b');
    const int inputDim = wa * int(sourceLayers.size());
    RidgeAccumulator accK(inputDim, wb), accV(inputDim, wb);
    std::vector<std::string> warnings;
    for (int p : prompts) {
        if (!aligned(f, p, &warnings))
            continue;
        const int64_t tokens = int64_t(f.prompt(p).b.ids.size());
        for (bool keys : {true, false}) {
            const auto x = sourceRows(f, sourceLayers, p, keys, tokens);
            const auto y = keys ? f.keys('b', targetLayer, p) : f.values('b', targetLayer, p);
            (keys ? accK : accV).add(x.data(), y.data(), tokens);
        }
    }
    if (accK.rows() < 2)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: only {} aligned token rows for target layer {}; need at least 2",
                                f.path().string(), accK.rows(), targetLayer));
    LayerMap m;
    m.targetLayer = targetLayer;
    m.sourceLayers = sourceLayers;
    m.keys = accK.solve(lambda);
    m.values = accV.solve(lambda);
    if (stats) {
        stats->rows = accK.rows();
        stats->warnings = std::move(warnings);
    }
    return m;
}

LayerMetrics evaluateLayer(const core::ExperimentReader &f, const LayerMap &map,
                           const std::vector<int> &prompts)
{
    LayerMetrics r;
    const int wb = rowWidth(f, 'b');
    // pooled sums for R^2 and relative error; per-token cosines averaged
    double sse[2] = {0, 0}, sumY2[2] = {0, 0}, cos[2] = {0, 0};
    std::vector<double> colSum[2] = {std::vector<double>(size_t(wb)), std::vector<double>(size_t(wb))};
    for (int p : prompts) {
        if (!aligned(f, p, nullptr))
            continue;
        const int64_t tokens = int64_t(f.prompt(p).b.ids.size());
        for (int kv = 0; kv < 2; ++kv) {
            const bool keys = kv == 0;
            const auto x = sourceRows(f, map.sourceLayers, p, keys, tokens);
            const auto pred = (keys ? map.keys : map.values).apply(x.data(), tokens);
            const auto y = keys ? f.keys('b', map.targetLayer, p) : f.values('b', map.targetLayer, p);
            for (int64_t t = 0; t < tokens; ++t) {
                double dot = 0, np = 0, ny = 0;
                for (int j = 0; j < wb; ++j) {
                    const size_t i = size_t(t) * size_t(wb) + size_t(j);
                    const double e = double(pred[i]) - y[i];
                    sse[kv] += e * e;
                    sumY2[kv] += double(y[i]) * y[i];
                    colSum[kv][size_t(j)] += y[i];
                    dot += double(pred[i]) * y[i];
                    np += double(pred[i]) * pred[i];
                    ny += double(y[i]) * y[i];
                }
                cos[kv] += np > 0 && ny > 0 ? dot / std::sqrt(np * ny) : 0.0;
            }
        }
        r.rows += tokens;
    }
    if (r.rows == 0)
        throw Error(ErrorCode::InvalidArgument, f.path().string() + ": no aligned prompts to evaluate");
    double r2[2], rel[2];
    for (int kv = 0; kv < 2; ++kv) {
        double sst = sumY2[kv];
        for (double s : colSum[kv])
            sst -= s * s / double(r.rows);
        r2[kv] = sst > 0 ? 1.0 - sse[kv] / sst : 0.0;
        rel[kv] = sumY2[kv] > 0 ? std::sqrt(sse[kv] / sumY2[kv]) : 0.0;
    }
    r.r2Keys = r2[0];
    r.r2Values = r2[1];
    r.relErrKeys = rel[0];
    r.relErrValues = rel[1];
    r.cosKeys = cos[0] / double(r.rows);
    r.cosValues = cos[1] / double(r.rows);
    return r;
}

std::vector<int> topKSourceLayers(const core::ExperimentReader &f, int targetLayer, int k,
                                  const std::vector<int> &train, const std::vector<int> &validation,
                                  double lambda)
{
    const int layersA = f.model('a').config.numLayers;
    if (k <= 0)
        throw Error(ErrorCode::InvalidArgument, fmt::format("top-k selection needs k > 0, got {}", k));
    std::vector<std::pair<double, int>> scored; // (score, layer)
    for (int l = 0; l < layersA; ++l) {
        const auto &captured = f.model('a').capturedLayers;
        if (!captured.empty() && std::find(captured.begin(), captured.end(), l) == captured.end())
            continue;
        const auto m = evaluateLayer(f, fitLayer(f, targetLayer, {l}, train, lambda), validation);
        scored.push_back({0.5 * (m.r2Keys + m.r2Values), l});
    }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const auto &a, const auto &b) { return a.first > b.first; });
    std::vector<int> out;
    for (size_t i = 0; i < scored.size() && int(out.size()) < k; ++i)
        out.push_back(scored[i].second);
    std::sort(out.begin(), out.end());
    return out;
}

double chooseLambda(const core::ExperimentReader &f, int targetLayer, const std::vector<int> &sourceLayers,
                    const std::vector<int> &train, const std::vector<int> &validation,
                    const std::vector<double> &grid)
{
    if (grid.empty())
        throw Error(ErrorCode::InvalidArgument, "lambda grid is empty");
    double best = grid.front(), bestScore = -1e300;
    for (double lambda : grid) {
        const auto m = evaluateLayer(f, fitLayer(f, targetLayer, sourceLayers, train, lambda), validation);
        const double score = 0.5 * (m.r2Keys + m.r2Values);
        if (score > bestScore + 1e-12 || (std::abs(score - bestScore) <= 1e-12 && lambda > best)) {
            best = lambda;
            bestScore = score;
        }
    }
    return best;
}

} // namespace kvwb::gpu
