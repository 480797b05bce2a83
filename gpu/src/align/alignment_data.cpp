// Token rows and geometry from the experiment file, and the choice of source layers.
#include "gpu/src/align/alignment_p.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;

namespace detail {

Geometry geometry(const core::ExperimentReader &f)
{
    const auto &a = f.model(core::ModelRole::A).config, &b = f.model(core::ModelRole::B).config;
    return {a.numKvHeads, a.headDim, b.numKvHeads, b.headDim};
}

void checkTokenFeatureSource(const core::ExperimentReader &f, const core::TokenFeatures &features,
                             bool headMatched)
{
    if (!features.any())
        return;
    core::checkTokenFeatures(features, f.path().string());
    if (headMatched)
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("{}: token features need full maps, not head-matched ones", f.path().string()));
    if (f.storage().keyForm != core::KeyForm::PreRope)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: token features need keys captured before RoPE (this file stores them "
                                "after it; capture again with the default key form)",
                                f.path().string()));
    const auto &capB = f.model(core::ModelRole::B).capturedLayers;
    if (features.targetTokens && std::find(capB.begin(), capB.end(), 0) == capB.end())
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: B's token features are its layer 0, which this file did not capture",
                                f.path().string()));
}

std::vector<float> tokenFeatureRows(const core::ExperimentReader &f, const std::vector<int> &layers,
                                    const core::TokenFeatures &features, int prompt, bool keys,
                                    int64_t tokens, const std::vector<float> *rowsA)
{
    const Geometry g = geometry(f);
    const int64_t extra = features.extraDim(int(layers.size()), g.widthA(), g.widthB());
    std::vector<float> x(size_t(tokens) * size_t(extra), 0.0f);
    if (extra == 0)
        return x;
    const auto info = f.prompt(prompt);
    const std::vector<int32_t> &pairing = info.alignment;
    const auto plan = core::tokenFeaturePlan(
        features, pairing.empty() ? pairing : std::vector<int32_t>(pairing.begin(), pairing.begin() + tokens),
        tokens);
    size_t col = 0;
    if (features.window > 0) {
        // [tokens, blocks * wA]: the caller's when it holds them, else read here
        const std::vector<float> own =
            rowsA ? std::vector<float>() : sourceRows(f, layers, prompt, keys, tokens);
        const std::vector<float> &a = rowsA ? *rowsA : own;
        const size_t block = size_t(layers.size()) * size_t(g.widthA());
        for (int64_t t = 0; t < tokens; ++t)
            for (int w = 0; w < features.window; ++w) {
                const int32_t r = plan.windowRows[size_t(t) * size_t(features.window) + size_t(w)];
                if (r >= 0)
                    std::copy_n(a.data() + size_t(r) * block, block,
                                x.data() + size_t(t) * size_t(extra) + size_t(w) * block);
            }
        col += size_t(features.window) * block;
    }
    if (features.targetTokens) {
        const size_t wb = size_t(g.widthB());
        const auto k0 = f.keys(core::ModelRole::B, 0, prompt), v0 = f.values(core::ModelRole::B, 0, prompt);
        for (int64_t t = 0; t < tokens; ++t) {
            std::copy_n(k0.data() + size_t(t) * wb, wb, x.data() + size_t(t) * size_t(extra) + col);
            std::copy_n(v0.data() + size_t(t) * wb, wb, x.data() + size_t(t) * size_t(extra) + col + wb);
        }
        col += 2 * wb;
    }
    for (int64_t t = 0; t < int64_t(plan.offset.size()); ++t)
        x[size_t(t) * size_t(extra) + col + size_t(plan.offset[size_t(t)])] = 1.0f;
    return x;
}

std::vector<float> sourceRows(const core::ExperimentReader &f, const std::vector<int> &layers, int prompt,
                              bool keys, int64_t tokens, const core::TokenFeatures &features)
{
    if (features.any()) {
        const Geometry g = geometry(f);
        const size_t base = size_t(g.widthA()) * layers.size(),
                     extra = size_t(features.extraDim(int(layers.size()), g.widthA(), g.widthB()));
        const auto a = sourceRows(f, layers, prompt, keys, tokens);
        const auto e = tokenFeatureRows(f, layers, features, prompt, keys, tokens, &a); // a read once
        std::vector<float> x(size_t(tokens) * (base + extra));
        for (int64_t t = 0; t < tokens; ++t) {
            std::copy_n(a.data() + size_t(t) * base, base, x.data() + size_t(t) * (base + extra));
            std::copy_n(e.data() + size_t(t) * extra, extra, x.data() + size_t(t) * (base + extra) + base);
        }
        return x;
    }
    const int w = geometry(f).widthA();
    const size_t width = size_t(w) * layers.size();
    // B row t -> A row: empty = the same row (A and B tokenised the prompt identically)
    const std::vector<int32_t> pairing = f.prompt(prompt).alignment;
    std::vector<float> x(size_t(tokens) * width);
    for (size_t li = 0; li < layers.size(); ++li) {
        const auto part = keys ? f.keys(core::ModelRole::A, layers[li], prompt)
                               : f.values(core::ModelRole::A, layers[li], prompt);
        for (int64_t t = 0; t < tokens; ++t) {
            const size_t row = pairing.empty() ? size_t(t) : size_t(pairing[size_t(t)]);
            std::copy_n(part.data() + row * size_t(w), size_t(w),
                        x.data() + size_t(t) * width + li * size_t(w));
        }
    }
    return x;
}

std::vector<float> sourceLayerRows(const core::ExperimentReader &f, int layer, int prompt, bool keys)
{
    auto own = keys ? f.keys(core::ModelRole::A, layer, prompt) : f.values(core::ModelRole::A, layer, prompt);
    const std::vector<int32_t> pairing = f.prompt(prompt).alignment;
    if (pairing.empty())
        return own;
    const size_t w = size_t(geometry(f).widthA());
    std::vector<float> out(pairing.size() * w);
    for (size_t t = 0; t < pairing.size(); ++t)
        std::copy_n(own.data() + size_t(pairing[t]) * w, w, out.data() + t * w);
    return out;
}

std::vector<std::pair<int, int64_t>> calibrationRows(const core::ExperimentReader &f,
                                                     const std::vector<int> &prompts, int64_t maxTokens,
                                                     std::vector<std::string> *warnings)
{
    std::vector<std::pair<int, int64_t>> rows;
    int64_t total = 0;
    for (int p : prompts) {
        if (maxTokens > 0 && total >= maxTokens)
            break;
        if (!aligned(f, p, warnings))
            continue;
        int64_t tokens = int64_t(f.prompt(p).b.ids.size());
        if (maxTokens > 0)
            tokens = std::min(tokens, maxTokens - total);
        rows.push_back({p, tokens});
        total += tokens;
    }
    return rows;
}

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

bool aligned(const core::ExperimentReader &f, int prompt, std::vector<std::string> *warnings)
{
    const auto info = f.prompt(prompt);
    if (info.a.ids == info.b.ids && !info.a.ids.empty())
        return true;
    if (!info.alignment.empty() && info.alignment.size() == info.b.ids.size())
        return true;
    if (warnings && warnings->size() < 20)
        warnings->push_back(fmt::format(
            "{}: prompt {} skipped: models A and B tokenised it differently ({} vs {} tokens) and the file "
            "stores no token alignment for it (captured by an older kvwb: capture it again)",
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

void checkTarget(const core::ExperimentReader &f, const Model &target)
{
    const std::string have = target.checkpoint().fingerprint(),
                      want = f.model(core::ModelRole::B).weightsSha256;
    if (have != want)
        throw Error(
            ErrorCode::Config,
            fmt::format("{}: model B of the file has weights fingerprint {}, the loaded model {} has {}",
                        f.path().string(), want, target.checkpoint().path().string(), have));
}

std::vector<int> selectSources(const core::ExperimentReader &f, LayerSelection selection, int k,
                               int targetLayer, const std::vector<int> &ranked)
{
    const std::vector<int> &capA = f.model(core::ModelRole::A).capturedLayers;
    const int layersB = f.model(core::ModelRole::B).config.numLayers;
    std::vector<int> out;
    switch (selection) {
    case LayerSelection::Proportional: {
        // the layers at the same relative depth of A's real depth, then the nearest captured ones
        const int la = f.model(core::ModelRole::A).config.numLayers;
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

} // namespace detail

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

namespace {

// Columns [first, first + width) of a full ridge map: the map of those outputs alone (ridge solves
// each output column on its own, so a joint fit's columns are the separate fits').
core::KvMap columns(const core::KvMap &m, int first, int width)
{
    core::KvMap out;
    out.inputDim = m.inputDim;
    out.outputDim = width;
    out.lambda = m.lambda;
    out.weight.resize(size_t(m.inputDim) * size_t(width));
    for (int i = 0; i < m.inputDim; ++i)
        std::copy_n(m.weight.data() + size_t(i) * size_t(m.outputDim) + size_t(first), size_t(width),
                    out.weight.data() + size_t(i) * size_t(width));
    out.bias.assign(m.bias.begin() + first, m.bias.begin() + first + width);
    return out;
}

} // namespace

std::vector<std::vector<double>> sourceLayerScores(const core::ExperimentReader &f,
                                                   const std::vector<int> &train,
                                                   const std::vector<int> &validation, double lambda,
                                                   int64_t maxTokens,
                                                   const std::function<bool(int, int)> &progress)
{
    const detail::Geometry g = detail::geometry(f);
    const int lb = f.model(core::ModelRole::B).config.numLayers, wb = g.widthB();
    const auto &layersA = f.model(core::ModelRole::A).capturedLayers;
    const auto rows = detail::calibrationRows(f, train, maxTokens, nullptr); // as fitLayer takes them
    int64_t total = 0;
    for (const auto &r : rows)
        total += r.second;
    if (total < 2)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: only {} aligned token rows to rank source layers; need at least 2",
                                f.path().string(), total));
    std::vector<std::vector<double>> scores(size_t(lb), std::vector<double>(layersA.size(), detail::kNaN));
    for (size_t i = 0; i < layersA.size(); ++i) {
        if (progress && !progress(int(i), int(layersA.size())))
            return {};
        const int l = layersA[i];
        // one A layer against every B layer at once: its Gram matrix is formed once, not once per target
        RidgeAccumulator keys(g.widthA(), lb * wb), values(g.widthA(), lb * wb);
        for (const auto &[p, tokens] : rows)
            for (bool k : {true, false}) {
                const auto x = detail::sourceRows(f, {l}, p, k, tokens);
                std::vector<float> y(size_t(tokens) * size_t(lb) * size_t(wb));
                for (int t = 0; t < lb; ++t) {
                    const auto part =
                        k ? f.keys(core::ModelRole::B, t, p) : f.values(core::ModelRole::B, t, p);
                    for (int64_t r = 0; r < tokens; ++r)
                        std::copy_n(part.data() + size_t(r) * size_t(wb), size_t(wb),
                                    y.data() + (size_t(r) * size_t(lb) + size_t(t)) * size_t(wb));
                }
                (k ? keys : values).add(x.data(), y.data(), tokens);
            }
        const core::KvMap mk = keys.solve(lambda), mv = values.solve(lambda);
        std::vector<core::LayerConverter> maps(static_cast<size_t>(lb));
        for (int t = 0; t < lb; ++t) {
            auto &m = maps[size_t(t)];
            m.targetLayer = t;
            m.sourceLayers = {l};
            m.keys = {columns(mk, t * wb, wb)};
            m.values = {columns(mv, t * wb, wb)};
        }
        const auto metrics = evaluateLayers(f, maps, validation);
        for (int t = 0; t < lb; ++t)
            scores[size_t(t)][i] = 0.5 * (metrics[size_t(t)].r2Keys + metrics[size_t(t)].r2Values);
    }
    return scores;
}

std::vector<std::vector<int>> rankSourceLayers(const core::ExperimentReader &f, const std::vector<int> &train,
                                               const std::vector<int> &validation, double lambda,
                                               int64_t maxTokens,
                                               const std::function<bool(int, int)> &progress)
{
    const auto scores = sourceLayerScores(f, train, validation, lambda, maxTokens, progress);
    const auto &layersA = f.model(core::ModelRole::A).capturedLayers;
    std::vector<std::vector<int>> out;
    for (const auto &s : scores) {
        std::vector<size_t> order(layersA.size());
        for (size_t i = 0; i < order.size(); ++i)
            order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s[a] > s[b]; });
        std::vector<int> ranked;
        for (size_t i : order)
            ranked.push_back(layersA[i]);
        out.push_back(std::move(ranked));
    }
    return out;
}

std::optional<core::ConverterRecord> rawSourceRecord(const core::ConverterRecord &like, int layersA,
                                                     int kvDimA, int layersB, int kvDimB)
{
    if (kvDimA != kvDimB || kvDimA <= 0 || layersA <= 0 || layersB <= 0)
        return std::nullopt;
    core::ConverterRecord r;
    r.name = "raw-source-kv";
    r.keyForm = like.keyForm;
    r.selection = "proportional";
    r.k = 1;
    r.lambdaMode = "fixed";
    r.trainPrompts = like.trainPrompts;
    r.validPrompts = like.validPrompts;
    r.testPrompts = like.testPrompts;
    const core::KvMap identity = core::identityMap(kvDimA);
    for (int l = 0; l < layersB; ++l) {
        core::LayerConverter c;
        c.targetLayer = l;
        c.sourceLayers = proportionalSourceLayers(l, layersB, layersA, 1);
        c.keys = {identity};
        c.values = {identity};
        r.layers.push_back(std::move(c));
    }
    return r;
}

core::ConverterRecord randomMapRecord(const core::ConverterRecord &like, uint64_t seed)
{
    core::ConverterRecord r = like;
    r.name = like.name + "-random";
    // whatever like's family, the baseline is one random linear map per map: a low-rank record's
    // factors or an MLP's fitted branch kept would be no baseline at all
    r.family = core::ConverterFamily::Ridge;
    std::mt19937_64 rng(seed);
    for (auto &layer : r.layers)
        for (auto *maps : {&layer.keys, &layer.values})
            for (auto &m : *maps) {
                m.rank = 0;
                m.hidden = 0;
                m.down.clear();
                m.up.clear();
                m.hiddenWeight.clear();
                m.hiddenBias.clear();
                m.outWeight.clear();
                m.weight.resize(size_t(m.inputDim) * size_t(m.outputDim));
                std::normal_distribution<float> w(0.0f, 1.0f / std::sqrt(float(std::max(1, m.inputDim))));
                for (auto &x : m.weight)
                    x = w(rng);
            }
    return r;
}

} // namespace kvwb::gpu
