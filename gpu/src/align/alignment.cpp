#include "gpu/align/alignment.h"

#include "core/util/error.h"
#include "gpu/src/torch_error_p.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Geometry
{
    int kvA = 0, hdA = 0, kvB = 0, hdB = 0;
    int widthA() const { return kvA * hdA; }
    int widthB() const { return kvB * hdB; }
};

Geometry geometry(const core::ExperimentReader &f)
{
    const auto &a = f.model('a').config, &b = f.model('b').config;
    return {a.numKvHeads, a.headDim, b.numKvHeads, b.headDim};
}

// Features [tokens, sum widths] for one prompt: A's rows of each source layer side by side.
std::vector<float> sourceRows(const core::ExperimentReader &f, const std::vector<int> &layers, int prompt,
                              bool keys, int64_t tokens)
{
    const int w = geometry(f).widthA();
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

// Head h's columns of token-major rows [tokens, blocks * heads * hd] -> [tokens, blocks * hd]:
// head h of every concatenated block (source layer) side by side.
std::vector<float> headColumns(const float *x, int64_t tokens, int blocks, int heads, int hd, int h)
{
    const size_t inWidth = size_t(blocks) * size_t(heads) * size_t(hd),
                 outWidth = size_t(blocks) * size_t(hd);
    std::vector<float> out(size_t(tokens) * outWidth);
    for (int64_t t = 0; t < tokens; ++t)
        for (int b = 0; b < blocks; ++b)
            std::copy_n(x + size_t(t) * inWidth + size_t(b) * size_t(heads) * size_t(hd) +
                            size_t(h) * size_t(hd),
                        size_t(hd), out.data() + size_t(t) * outWidth + size_t(b) * size_t(hd));
    return out;
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

void checkHeadMatched(const core::ExperimentReader &f, bool headMatched)
{
    const Geometry g = geometry(f);
    if (headMatched && g.kvA != g.kvB)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: head-matched maps need equal kv-head counts; A has {}, B has {}",
                                f.path().string(), g.kvA, g.kvB));
}

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
    for (int p : prompts) {
        if (maxTokens > 0 && acc.rows >= maxTokens)
            break;
        if (!aligned(f, p, &acc.warnings))
            continue;
        int64_t tokens = int64_t(f.prompt(p).b.ids.size());
        if (maxTokens > 0)
            tokens = std::min(tokens, maxTokens - acc.rows);
        for (bool keys : {true, false}) {
            const auto x = sourceRows(f, sources, p, keys, tokens);
            const auto y = keys ? f.keys('b', targetLayer, p) : f.values('b', targetLayer, p);
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

LayerMap solveLayer(const Accumulation &acc, int targetLayer, const std::vector<int> &sources,
                    bool headMatched, double lambda)
{
    LayerMap m;
    m.targetLayer = targetLayer;
    m.sourceLayers = sources;
    m.headMatched = headMatched;
    for (const auto &a : acc.keys)
        m.keys.push_back(a.solve(lambda));
    for (const auto &a : acc.values)
        m.values.push_back(a.solve(lambda));
    return m;
}

// Running sums for R^2, relative error and mean cosine over some columns of B's rows.
struct ScoreSums
{
    double sse = 0, sumY2 = 0, cos = 0;
    std::vector<double> colSum;
    int64_t rows = 0;

    void add(const float *pred, const float *y, int64_t tokens, int width, int stride, int offset)
    {
        if (colSum.empty())
            colSum.assign(size_t(width), 0.0);
        for (int64_t t = 0; t < tokens; ++t) {
            double dot = 0, np = 0, ny = 0;
            for (int j = 0; j < width; ++j) {
                const size_t i = size_t(t) * size_t(stride) + size_t(offset) + size_t(j);
                const double e = double(pred[i]) - y[i];
                sse += e * e;
                sumY2 += double(y[i]) * y[i];
                colSum[size_t(j)] += y[i];
                dot += double(pred[i]) * y[i];
                np += double(pred[i]) * pred[i];
                ny += double(y[i]) * y[i];
            }
            cos += np > 0 && ny > 0 ? dot / std::sqrt(np * ny) : 0.0;
        }
        rows += tokens;
    }
    double r2() const
    {
        double sst = sumY2;
        for (double s : colSum)
            sst -= s * s / double(std::max<int64_t>(rows, 1));
        return sst > 0 ? 1.0 - sse / sst : 0.0;
    }
    double relErr() const { return sumY2 > 0 ? std::sqrt(sse / sumY2) : 0.0; }
    double meanCos() const { return rows > 0 ? cos / double(rows) : 0.0; }
};

KvFitMetrics finish(const ScoreSums &k, const ScoreSums &v)
{
    KvFitMetrics m;
    m.rows = k.rows;
    m.r2Keys = k.r2();
    m.r2Values = v.r2();
    m.cosKeys = k.meanCos();
    m.cosValues = v.meanCos();
    m.relErrKeys = k.relErr();
    m.relErrValues = v.relErr();
    return m;
}

KeyForm gpuKeyForm(core::KeyForm f)
{
    return f == core::KeyForm::PreRope ? KeyForm::PreRope : KeyForm::PostRope;
}

// Causal attention of q [nh, t, hd] over k, v [nkv, t, hd] (GQA: query head h uses kv head h / rep).
torch::Tensor attend(const torch::Tensor &q, const torch::Tensor &k, const torch::Tensor &v)
{
    const int64_t nh = q.size(0), t = q.size(1), hd = q.size(2), rep = nh / k.size(0);
    auto kk = k.repeat_interleave(rep, 0), vv = v.repeat_interleave(rep, 0);
    auto scores = torch::matmul(q, kk.transpose(1, 2)) / std::sqrt(double(hd)); // [nh, t, t]
    auto mask = torch::ones({t, t}, torch::kBool).triu(1);
    scores = scores.masked_fill(mask, -INFINITY);
    return torch::matmul(torch::softmax(scores, -1), vv); // [nh, t, hd]
}

// Sum over tokens of the cosine between a and b [t, width] row by row.
double cosineSum(const torch::Tensor &a, const torch::Tensor &b)
{
    auto dot = (a * b).sum(1);
    auto norm = a.norm(2, 1) * b.norm(2, 1);
    return torch::where(norm > 0, dot / norm, torch::zeros_like(dot)).sum().item<double>();
}

std::vector<int> selectSources(const core::ExperimentReader &f, LayerSelection selection, int k,
                               int targetLayer, const std::vector<int> &ranked)
{
    const std::vector<int> &capA = f.model('a').capturedLayers;
    const int layersB = f.model('b').config.numLayers;
    std::vector<int> out;
    switch (selection) {
    case LayerSelection::Proportional: {
        // the layers at the same relative depth of A's real depth, then the nearest captured ones
        const int la = f.model('a').config.numLayers;
        // (as proportionalSourceLayers when every layer was captured: ties go to the lower layer)
        const long centre =
            std::lround(layersB > 1 ? double(targetLayer) * double(la - 1) / double(layersB - 1) : 0.0);
        std::vector<int> byDistance = capA;
        std::stable_sort(byDistance.begin(), byDistance.end(),
                         [&](int x, int y) { return std::labs(x - centre) < std::labs(y - centre); });
        out.assign(byDistance.begin(), byDistance.begin() + std::min<size_t>(size_t(k), byDistance.size()));
        std::sort(out.begin(), out.end());
        break;
    }
    case LayerSelection::TopK:
        out.assign(ranked.begin(), ranked.begin() + std::min<size_t>(size_t(k), ranked.size()));
        std::sort(out.begin(), out.end());
        break;
    case LayerSelection::All:
        out = capA;
        break;
    }
    return out;
}

void checkTarget(const core::ExperimentReader &f, const Model &target)
{
    const std::string have = target.checkpoint().fingerprint(), want = f.model('b').weightsSha256;
    if (have != want)
        throw Error(
            ErrorCode::Config,
            fmt::format("{}: model B of the file has weights fingerprint {}, the loaded model {} has {}",
                        f.path().string(), want, target.checkpoint().path().string(), have));
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

std::vector<LayerMap> fitLayerGrid(const core::ExperimentReader &f, int targetLayer,
                                   const std::vector<int> &sourceLayers, const std::vector<int> &prompts,
                                   const std::vector<double> &lambdas, LayerFitStats *stats, bool headMatched,
                                   int64_t maxTokens)
{
    if (lambdas.empty())
        throw Error(ErrorCode::InvalidArgument, "lambda grid is empty");
    auto acc = accumulate(f, targetLayer, sourceLayers, prompts, headMatched, maxTokens);
    std::vector<LayerMap> out;
    for (double lambda : lambdas)
        out.push_back(solveLayer(acc, targetLayer, sourceLayers, headMatched, lambda));
    if (stats) {
        stats->rows = acc.rows;
        stats->warnings = std::move(acc.warnings);
    }
    return out;
}

LayerMap fitLayer(const core::ExperimentReader &f, int targetLayer, const std::vector<int> &sourceLayers,
                  const std::vector<int> &prompts, double lambda, LayerFitStats *stats, bool headMatched,
                  int64_t maxTokens)
{
    return std::move(
        fitLayerGrid(f, targetLayer, sourceLayers, prompts, {lambda}, stats, headMatched, maxTokens).front());
}

std::vector<float> convertRows(const LayerMap &map, bool keys, const std::vector<const float *> &source,
                               int64_t tokens, int kvHeadsA, int headDimA, int kvHeadsB, int headDimB)
{
    for (const auto &lm : keys ? map.keys : map.values)
        if (lm.outputDim != (map.headMatched ? headDimB : kvHeadsB * headDimB) ||
            lm.weight.size() != size_t(lm.inputDim) * size_t(lm.outputDim) ||
            lm.bias.size() != size_t(lm.outputDim))
            throw Error(ErrorCode::Shape,
                        fmt::format("layer {} {} map gives {} outputs; model B's layer takes {}",
                                    map.targetLayer, keys ? "key" : "value", lm.outputDim,
                                    map.headMatched ? headDimB : kvHeadsB * headDimB));
    if (map.headMatched && int((keys ? map.keys : map.values).size()) != kvHeadsB)
        throw Error(ErrorCode::Shape,
                    fmt::format("layer {} has {} head-matched maps; model B has {} kv heads", map.targetLayer,
                                (keys ? map.keys : map.values).size(), kvHeadsB));
    const auto &maps = keys ? map.keys : map.values;
    if (source.size() != map.sourceLayers.size() || maps.empty())
        throw Error(ErrorCode::Shape, fmt::format("layer {} map reads {} source layers, got {}",
                                                  map.targetLayer, map.sourceLayers.size(), source.size()));
    const int blocks = int(source.size()), widthA = kvHeadsA * headDimA;
    std::vector<float> x(size_t(tokens) * size_t(blocks) * size_t(widthA));
    for (int b = 0; b < blocks; ++b)
        for (int64_t t = 0; t < tokens; ++t)
            std::copy_n(source[size_t(b)] + size_t(t) * size_t(widthA), size_t(widthA),
                        x.data() + (size_t(t) * size_t(blocks) + size_t(b)) * size_t(widthA));
    if (!map.headMatched) {
        if (maps[0].inputDim != blocks * widthA)
            throw Error(ErrorCode::Shape,
                        fmt::format("layer {} map takes {} features; A's {} layer(s) give {}",
                                    map.targetLayer, maps[0].inputDim, blocks, blocks * widthA));
        return applyLinearMap(maps[0], x.data(), tokens);
    }
    const int heads = int(maps.size()), hdB = maps[0].outputDim, widthB = heads * hdB;
    if (heads != kvHeadsA || maps[0].inputDim != blocks * headDimA)
        throw Error(
            ErrorCode::Shape,
            fmt::format("layer {} head-matched map has {} heads of {} features; A gives {} heads of {}",
                        map.targetLayer, heads, maps[0].inputDim, kvHeadsA, blocks * headDimA));
    std::vector<float> y(size_t(tokens) * size_t(widthB));
    for (int h = 0; h < heads; ++h) {
        const auto xh = headColumns(x.data(), tokens, blocks, kvHeadsA, headDimA, h);
        const auto yh = applyLinearMap(maps[size_t(h)], xh.data(), tokens);
        for (int64_t t = 0; t < tokens; ++t)
            std::copy_n(yh.data() + size_t(t) * size_t(hdB), size_t(hdB),
                        y.data() + size_t(t) * size_t(widthB) + size_t(h) * size_t(hdB));
    }
    return y;
}

std::vector<LayerMetrics> evaluateLayers(const core::ExperimentReader &f, const std::vector<LayerMap> &maps,
                                         const std::vector<int> &prompts)
{
    const Geometry g = geometry(f);
    // [map] x {keys, values} x {whole row, head 0..kvB-1}
    std::vector<std::array<std::vector<ScoreSums>, 2>> sums(maps.size());
    for (auto &s : sums)
        for (auto &kv : s)
            kv.resize(size_t(g.kvB) + 1);
    for (int p : prompts) {
        if (!aligned(f, p, nullptr))
            continue;
        const int64_t tokens = int64_t(f.prompt(p).b.ids.size());
        for (int kv = 0; kv < 2; ++kv) {
            const bool keys = kv == 0;
            std::map<int, std::vector<float>> rowsA; // A layer -> [tokens, widthA]
            std::map<int, std::vector<float>> rowsB; // B layer -> [tokens, widthB]
            for (size_t m = 0; m < maps.size(); ++m) {
                const LayerMap &map = maps[m];
                std::vector<const float *> src;
                for (int l : map.sourceLayers) {
                    auto it = rowsA.find(l);
                    if (it == rowsA.end())
                        it = rowsA.emplace(l, keys ? f.keys('a', l, p) : f.values('a', l, p)).first;
                    src.push_back(it->second.data());
                }
                auto yt = rowsB.find(map.targetLayer);
                if (yt == rowsB.end())
                    yt = rowsB
                             .emplace(map.targetLayer, keys ? f.keys('b', map.targetLayer, p)
                                                            : f.values('b', map.targetLayer, p))
                             .first;
                const auto pred = convertRows(map, keys, src, tokens, g.kvA, g.hdA, g.kvB, g.hdB);
                const float *y = yt->second.data();
                auto &s = sums[m][size_t(kv)];
                s[0].add(pred.data(), y, tokens, g.widthB(), g.widthB(), 0);
                for (int h = 0; h < g.kvB; ++h)
                    s[size_t(h) + 1].add(pred.data(), y, tokens, g.hdB, g.widthB(), h * g.hdB);
            }
        }
    }
    std::vector<LayerMetrics> out;
    for (auto &s : sums) {
        if (s[0][0].rows == 0)
            throw Error(ErrorCode::InvalidArgument, f.path().string() + ": no aligned prompts to evaluate");
        LayerMetrics m;
        static_cast<KvFitMetrics &>(m) = finish(s[0][0], s[1][0]);
        for (int h = 0; h < g.kvB; ++h)
            m.heads.push_back(finish(s[0][size_t(h) + 1], s[1][size_t(h) + 1]));
        out.push_back(std::move(m));
    }
    return out;
}

LayerMetrics evaluateLayer(const core::ExperimentReader &f, const LayerMap &map,
                           const std::vector<int> &prompts)
{
    return std::move(evaluateLayers(f, {map}, prompts).front());
}

std::vector<int> rankSourceLayers(const core::ExperimentReader &f, int targetLayer,
                                  const std::vector<int> &train, const std::vector<int> &validation,
                                  double lambda, int64_t maxTokens)
{
    std::vector<std::pair<double, int>> scored; // (score, layer)
    for (int l : f.model('a').capturedLayers) {
        const auto m = evaluateLayer(
            f, fitLayer(f, targetLayer, {l}, train, lambda, nullptr, false, maxTokens), validation);
        scored.push_back({0.5 * (m.r2Keys + m.r2Values), l});
    }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const auto &a, const auto &b) { return a.first > b.first; });
    std::vector<int> out;
    for (const auto &s : scored)
        out.push_back(s.second);
    return out;
}

namespace {
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
} // namespace

AttentionMetrics attentionCosine(const core::ExperimentReader &f, const std::vector<LayerMap> &layers,
                                 const Model &target, const std::vector<int> &prompts, int maxPrompts)
{
    checkTarget(f, target);
    const Geometry g = geometry(f);
    const auto &cb = target.config();
    if (int(layers.size()) != cb.numLayers)
        throw Error(ErrorCode::Shape,
                    fmt::format("{} layer maps for model B's {} layers", layers.size(), cb.numLayers));
    const KeyForm form = gpuKeyForm(f.storage().keyForm);
    const int rep = cb.numHeads / cb.numKvHeads;
    AttentionMetrics r;
    r.layerCos.assign(size_t(cb.numLayers), 0.0);
    r.headCos.assign(size_t(cb.numLayers), std::vector<double>(size_t(cb.numKvHeads), 0.0));
    for (int p : prompts) {
        if (r.prompts >= maxPrompts)
            break;
        if (!aligned(f, p, nullptr))
            continue;
        const auto info = f.prompt(p);
        const std::vector<int> ids(info.b.ids.begin(), info.b.ids.end());
        const int64_t t = int64_t(ids.size());
        auto own = target.newCache();
        const auto queries = target.queries(ids, own);
        // converted K/V for every B layer, head-major, then placed in a cache for B's RoPE
        std::vector<LayerKv> converted(size_t(cb.numLayers));
        for (int kv = 0; kv < 2; ++kv) {
            std::map<int, std::vector<float>> rowsA;
            for (int l = 0; l < cb.numLayers; ++l) {
                const LayerMap &m = layers[size_t(l)];
                std::vector<const float *> src;
                for (int s : m.sourceLayers) {
                    auto it = rowsA.find(s);
                    if (it == rowsA.end())
                        it = rowsA.emplace(s, kv == 0 ? f.keys('a', s, p) : f.values('a', s, p)).first;
                    src.push_back(it->second.data());
                }
                const auto rows =
                    convertRows(m, kv == 0, src, t, g.kvA, g.hdA, g.kvB, g.hdB); // [t, kvB, hdB]
                auto headMajor = torch::from_blob(const_cast<float *>(rows.data()), {t, g.kvB, g.hdB})
                                     .transpose(0, 1)
                                     .contiguous();
                (kv == 0 ? converted[size_t(l)].keys : converted[size_t(l)].values)
                    .assign(headMajor.data_ptr<float>(), headMajor.data_ptr<float>() + headMajor.numel());
            }
        }
        auto conv = target.newCache();
        conv.assign(ids, converted, form);
        detail::translateTorch("attention-output cosine", [&] {
            c10::InferenceMode guard;
            for (int l = 0; l < cb.numLayers; ++l) {
                auto q = torch::from_blob(const_cast<float *>(queries[size_t(l)].data()),
                                          {cb.numHeads, t, cb.headDim});
                auto tensor = [&](const std::vector<float> &v) {
                    return torch::from_blob(const_cast<float *>(v.data()), {cb.numKvHeads, t, cb.headDim})
                        .clone();
                };
                const auto ownKv = own.layer(l, KeyForm::PostRope), convKv = conv.layer(l, KeyForm::PostRope);
                auto a = attend(q, tensor(ownKv.keys), tensor(ownKv.values));   // [nh, t, hd]
                auto b = attend(q, tensor(convKv.keys), tensor(convKv.values)); // [nh, t, hd]
                auto flat = [&](const torch::Tensor &x) { return x.transpose(0, 1).reshape({t, -1}); };
                r.layerCos[size_t(l)] += cosineSum(flat(a), flat(b));
                for (int h = 0; h < cb.numKvHeads; ++h)
                    r.headCos[size_t(l)][size_t(h)] +=
                        cosineSum(flat(a.narrow(0, h * rep, rep)), flat(b.narrow(0, h * rep, rep)));
            }
        });
        r.tokens += t;
        ++r.prompts;
    }
    for (int l = 0; l < cb.numLayers; ++l) {
        r.layerCos[size_t(l)] = r.tokens > 0 ? r.layerCos[size_t(l)] / double(r.tokens) : kNaN;
        for (double &c : r.headCos[size_t(l)])
            c = r.tokens > 0 ? c / double(r.tokens) : kNaN;
    }
    return r;
}

std::pair<core::Matrix, core::Matrix> linearCka(const core::ExperimentReader &f,
                                                const std::vector<int> &prompts, int64_t maxTokens)
{
    const int la = f.model('a').config.numLayers, lb = f.model('b').config.numLayers;
    const std::vector<int> &capA = f.model('a').capturedLayers, &capB = f.model('b').capturedLayers;
    std::pair<core::Matrix, core::Matrix> out;
    for (core::Matrix *m : {&out.first, &out.second}) {
        m->rows = lb;
        m->cols = la;
        m->data.assign(size_t(la) * size_t(lb), kNaN);
    }
    // the prompts whose rows are used, and how many of each
    std::vector<std::pair<int, int64_t>> use;
    int64_t n = 0;
    for (int p : prompts) {
        if (maxTokens > 0 && n >= maxTokens)
            break;
        if (!aligned(f, p, nullptr))
            continue;
        int64_t t = int64_t(f.prompt(p).b.ids.size());
        if (maxTokens > 0)
            t = std::min(t, maxTokens - n);
        use.push_back({p, t});
        n += t;
    }
    if (n < 2)
        return out;
    detail::translateTorch("linear CKA", [&] {
        c10::InferenceMode guard;
        for (int kv = 0; kv < 2; ++kv) {
            auto rows = [&](char role, int layer) {
                std::vector<torch::Tensor> parts;
                for (const auto &[p, t] : use) {
                    auto v = kv == 0 ? f.keys(role, layer, p) : f.values(role, layer, p);
                    const int64_t width = int64_t(v.size()) / int64_t(f.prompt(p).b.ids.size());
                    parts.push_back(torch::from_blob(v.data(), {int64_t(v.size()) / width, width})
                                        .narrow(0, 0, t)
                                        .to(torch::kFloat64));
                }
                auto x = torch::cat(parts, 0);
                return x - x.mean(0, true);
            };
            std::vector<torch::Tensor> xs, xxNorm;
            for (int l : capA) {
                xs.push_back(rows('a', l));
                xxNorm.push_back(torch::matmul(xs.back().t(), xs.back()).norm());
            }
            core::Matrix &m = kv == 0 ? out.first : out.second;
            for (int lbIdx : capB) {
                auto y = rows('b', lbIdx);
                const double yyNorm = torch::matmul(y.t(), y).norm().item<double>();
                for (size_t i = 0; i < capA.size(); ++i) {
                    const double hsic = torch::matmul(y.t(), xs[i]).pow(2).sum().item<double>();
                    const double denom = xxNorm[i].item<double>() * yyNorm;
                    m.data[size_t(lbIdx) * size_t(la) + size_t(capA[i])] = denom > 0 ? hsic / denom : 0.0;
                }
            }
        }
    });
    return out;
}

PromptSplit splitPrompts(int count, double validFraction, double testFraction, uint64_t seed)
{
    if (validFraction < 0 || testFraction < 0 || validFraction + testFraction >= 1)
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("validation ({}) and test ({}) fractions must be >= 0 and leave training prompts",
                        validFraction, testFraction));
    std::vector<int> order(size_t(std::max(count, 0)));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(seed);
    for (size_t i = order.size(); i > 1; --i) // Fisher-Yates with our own draw: same split everywhere
        std::swap(order[i - 1], order[size_t(rng() % i)]);
    auto size = [&](double fraction) {
        return fraction > 0 ? std::max<size_t>(1, size_t(std::lround(fraction * count))) : size_t(0);
    };
    PromptSplit s;
    const size_t nTest = std::min(size(testFraction), order.size());
    const size_t nValid = std::min(size(validFraction), order.size() - nTest);
    s.test.assign(order.begin(), order.begin() + long(nTest));
    s.valid.assign(order.begin() + long(nTest), order.begin() + long(nTest + nValid));
    s.train.assign(order.begin() + long(nTest + nValid), order.end());
    std::sort(s.test.begin(), s.test.end());
    std::sort(s.valid.begin(), s.valid.end());
    return s;
}

const char *layerSelectionName(LayerSelection s) noexcept
{
    switch (s) {
    case LayerSelection::Proportional:
        return "proportional";
    case LayerSelection::TopK:
        return "topk";
    case LayerSelection::All:
        return "all";
    }
    return "?";
}

std::optional<LayerSelection> parseLayerSelection(std::string_view name) noexcept
{
    for (LayerSelection s : {LayerSelection::Proportional, LayerSelection::TopK, LayerSelection::All})
        if (name == layerSelectionName(s))
            return s;
    return std::nullopt;
}

namespace {

void requireSplit(const core::ExperimentReader &f, const PromptSplit &s, bool needValid)
{
    if (s.train.empty() || s.test.empty() || (needValid && s.valid.empty()))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: {} prompts are too few to split into training ({}), validation ({}) and "
                                "test ({}) prompts",
                                f.path().string(), f.promptCount(), s.train.size(), s.valid.size(),
                                s.test.size()));
}

void checkCapturedB(const core::ExperimentReader &f)
{
    const std::vector<int> &capB = f.model('b').capturedLayers;
    if (int(capB.size()) != f.model('b').config.numLayers)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: converters need every layer of model B, but the file captured {} of {}; "
                                "capture again without --layers-b",
                                f.path().string(), capB.size(), f.model('b').config.numLayers));
}

std::vector<double> row(std::initializer_list<double> v)
{
    return std::vector<double>(v);
}

} // namespace

AlignResult alignExperiment(const core::ExperimentReader &f, const AlignOptions &o, const Model *target)
{
    AlignResult r;
    auto &rec = r.record;
    checkCapturedB(f);
    if (target)
        checkTarget(f, *target);
    if (o.k <= 0)
        throw Error(ErrorCode::InvalidArgument, fmt::format("k must be positive, got {}", o.k));
    const Geometry g = geometry(f);
    const bool headMatched = o.perHead && g.kvA == g.kvB;
    if (o.perHead && !headMatched)
        r.warnings.push_back(fmt::format("per-head maps need equal kv-head counts (A {}, B {}): fitted full "
                                         "cross-head maps instead",
                                         g.kvA, g.kvB));
    const PromptSplit split = splitPrompts(f.promptCount(), o.validFraction, o.testFraction, o.seed);
    requireSplit(f, split, o.autoLambda || o.selection == LayerSelection::TopK);
    const int lb = f.model('b').config.numLayers;
    const std::vector<double> grid = o.autoLambda ? o.lambdaGrid : std::vector<double>{o.lambda};
    auto report = [&](double fr, const std::string &stage) { return !o.progress || o.progress(fr, stage); };

    rec.name = o.name;
    rec.keyForm = f.storage().keyForm;
    rec.selection = layerSelectionName(o.selection);
    const int capturedA = int(f.model('a').capturedLayers.size());
    const int k = std::min(o.k, capturedA); // the k actually used
    rec.k = o.selection == LayerSelection::All ? capturedA : k;
    rec.lambdaMode = o.autoLambda ? "auto" : "fixed";
    rec.perHead = o.perHead;
    rec.trainPrompts = split.train;
    rec.validPrompts = split.valid;
    rec.testPrompts = split.test;
    rec.layerMetrics.columns = {"layer",     "sources", "first_source", "lambda", "train_rows",
                                "test_rows", "r2_k",    "r2_v",         "cos_k",  "cos_v",
                                "rel_k",     "rel_v",   "attn_cos"};
    rec.headMetrics.columns = {"layer", "head",  "r2_k",  "r2_v",    "cos_k",
                               "cos_v", "rel_k", "rel_v", "attn_cos"};
    std::vector<LayerMetrics> metrics;
    for (int l = 0; l < lb; ++l) {
        if (!report(double(l) / (lb + 2), fmt::format("fitting layer {}/{}", l + 1, lb))) {
            r.cancelled = true;
            return r;
        }
        std::vector<int> ranked;
        if (o.selection == LayerSelection::TopK)
            ranked = rankSourceLayers(f, l, split.train, split.valid, o.autoLambda ? 0.01 : o.lambda,
                                      o.maxTrainTokens);
        const auto sources = selectSources(f, o.selection, k, l, ranked);
        LayerFitStats stats;
        auto maps = fitLayerGrid(f, l, sources, split.train, grid, &stats, headMatched, o.maxTrainTokens);
        size_t chosen = 0;
        if (grid.size() > 1)
            chosen = bestLambda(evaluateLayers(f, maps, split.valid), grid);
        if (l == 0) {
            rec.trainTokens = stats.rows;
            r.warnings.insert(r.warnings.end(), stats.warnings.begin(), stats.warnings.end());
        }
        rec.layers.push_back(std::move(maps[chosen]));
        metrics.push_back(evaluateLayer(f, rec.layers.back(), split.test));
    }
    if (!report(double(lb) / (lb + 2), "attention-output cosine")) {
        r.cancelled = true;
        return r;
    }
    AttentionMetrics attn;
    if (target)
        attn = attentionCosine(f, rec.layers, *target, split.test, o.attentionPrompts);
    else
        r.warnings.push_back("model B not loaded: attention-output cosine not computed");
    if (!report(double(lb + 1) / (lb + 2), "linear CKA")) {
        r.cancelled = true;
        return r;
    }
    std::tie(rec.ckaKeys, rec.ckaValues) = linearCka(f, split.test, o.ckaTokens);
    for (int l = 0; l < lb; ++l) {
        const auto &m = metrics[size_t(l)];
        const auto &map = rec.layers[size_t(l)];
        const double ac = target ? attn.layerCos[size_t(l)] : kNaN;
        rec.layerMetrics.rows.push_back(
            row({double(l), double(map.sourceLayers.size()), double(map.sourceLayers.front()),
                 map.keys[0].lambda, double(rec.trainTokens), double(m.rows), m.r2Keys, m.r2Values, m.cosKeys,
                 m.cosValues, m.relErrKeys, m.relErrValues, ac}));
        for (int h = 0; h < g.kvB; ++h) {
            const auto &hm = m.heads[size_t(h)];
            rec.headMetrics.rows.push_back(
                row({double(l), double(h), hm.r2Keys, hm.r2Values, hm.cosKeys, hm.cosValues, hm.relErrKeys,
                     hm.relErrValues, target ? attn.headCos[size_t(l)][size_t(h)] : kNaN}));
        }
    }
    nlohmann::json settings = {{"selection", rec.selection},
                               {"k", rec.k},
                               {"lambda", o.lambda},
                               {"auto_lambda", o.autoLambda},
                               {"lambda_grid", o.lambdaGrid},
                               {"per_head", o.perHead},
                               {"head_matched", headMatched},
                               {"max_train_tokens", o.maxTrainTokens},
                               {"valid_fraction", o.validFraction},
                               {"test_fraction", o.testFraction},
                               {"seed", o.seed},
                               {"attention_prompts", target ? attn.prompts : 0},
                               {"cka_tokens", o.ckaTokens},
                               {"experiment_run_id", f.provenance().runId}};
    rec.settingsJson = settings.dump();
    report(1.0, "done");
    return r;
}

SweepResult sweepAlignment(const core::ExperimentReader &f, const SweepOptions &o, const Model *target)
{
    SweepResult result;
    auto *warnings = &result.warnings;
    checkCapturedB(f);
    if (target)
        checkTarget(f, *target);
    const Geometry g = geometry(f);
    const bool headMatched = o.perHead && g.kvA == g.kvB;
    if (o.perHead && !headMatched)
        warnings->push_back("per-head maps need equal kv-head counts: swept full cross-head maps instead");
    if (o.ks.empty() || o.lambdas.empty() || o.trainTokens.empty())
        throw Error(ErrorCode::InvalidArgument, "a sweep needs at least one k, lambda and token count");
    for (int k : o.ks)
        if (k <= 0)
            throw Error(ErrorCode::InvalidArgument, fmt::format("k must be positive, got {}", k));
    const PromptSplit split = splitPrompts(f.promptCount(), o.validFraction, o.testFraction, o.seed);
    requireSplit(f, split, o.selection == LayerSelection::TopK);
    const int lb = f.model('b').config.numLayers;
    const std::vector<int> ks =
        o.selection == LayerSelection::All ? std::vector<int>{int(f.model('a').capturedLayers.size())} : o.ks;
    core::MetricTable &table = result.table;
    table.columns = {"k",     "lambda", "train_tokens", "r2_k",  "r2_v",
                     "cos_k", "cos_v",  "rel_k",        "rel_v", "attn_cos"};
    const size_t total = o.trainTokens.size() * ks.size();
    size_t done = 0;
    for (int64_t tokens : o.trainTokens) {
        // rankings with this row's calibration tokens, shared by its ks
        std::vector<std::vector<int>> ranked(static_cast<size_t>(lb));
        if (o.selection == LayerSelection::TopK)
            for (int l = 0; l < lb; ++l)
                ranked[size_t(l)] = rankSourceLayers(f, l, split.train, split.valid, 0.01, tokens);
        for (int k : ks) {
            if (o.progress && !o.progress(double(done) / double(total),
                                          fmt::format("k {}, {} calibration tokens", k, tokens))) {
                result.cancelled = true;
                return result;
            }
            ++done;
            std::vector<std::vector<LayerMap>> perLambda(o.lambdas.size());
            std::vector<std::array<double, 6>> sums(o.lambdas.size(), std::array<double, 6>{});
            int64_t used = 0;
            for (int l = 0; l < lb; ++l) {
                LayerFitStats stats;
                const auto sources = selectSources(f, o.selection, k, l, ranked[size_t(l)]);
                auto maps = fitLayerGrid(f, l, sources, split.train, o.lambdas, &stats, headMatched, tokens);
                used = stats.rows;
                const auto metrics = evaluateLayers(f, maps, split.test);
                for (size_t i = 0; i < maps.size(); ++i) {
                    const auto &m = metrics[i];
                    const double v[6] = {m.r2Keys,    m.r2Values,   m.cosKeys,
                                         m.cosValues, m.relErrKeys, m.relErrValues};
                    for (int j = 0; j < 6; ++j)
                        sums[i][size_t(j)] += v[j] / lb;
                    perLambda[i].push_back(std::move(maps[i]));
                }
            }
            for (size_t i = 0; i < o.lambdas.size(); ++i) {
                double attn = kNaN;
                if (target) {
                    const auto a = attentionCosine(f, perLambda[i], *target, split.test, o.attentionPrompts);
                    attn = std::accumulate(a.layerCos.begin(), a.layerCos.end(), 0.0) / lb;
                }
                const auto &s = sums[i];
                table.rows.push_back(
                    row({double(k), o.lambdas[i], double(used), s[0], s[1], s[2], s[3], s[4], s[5], attn}));
            }
        }
    }
    return result;
}

} // namespace kvwb::gpu
