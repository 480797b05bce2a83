// Scoring: A's rows converted by a fitted map (the CPU path; transfer's Converter does the same on
// the device, tests/gpu/transfer/tst_transfer.cpp checks they agree) against B's own rows, B's
// attention output with the converted K/V, and linear CKA between the two models' layers.
#include "gpu/src/align/alignment_p.h"
#include "gpu/src/align/kv_map_p.h"

#include "core/metrics/distributions.h"
#include "core/util/error.h"
#include "gpu/src/torch_error_p.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;
using detail::aligned;
using detail::checkTarget;
using detail::Geometry;
using detail::geometry;
using detail::headColumns;
using detail::kNaN;

namespace {

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

// Causal attention of q [nh, t, hd] over k, v [nkv, t, hd] (GQA: query head h uses kv head h / rep)
// as layer `layer` of the model `c` attends: its score scale, soft-cap and sliding window (Gemma).
torch::Tensor attend(const torch::Tensor &q, const torch::Tensor &k, const torch::Tensor &v,
                     const core::ModelConfig &c, int layer)
{
    const int64_t nh = q.size(0), t = q.size(1), hd = q.size(2), rep = nh / k.size(0);
    auto kk = k.repeat_interleave(rep, 0), vv = v.repeat_interleave(rep, 0);
    auto scores = torch::matmul(q, kk.transpose(1, 2)) /
                  std::sqrt(c.queryPreAttnScalar.value_or(double(hd))); // [nh, t, t]
    if (c.attnLogitSoftcap)
        scores = torch::tanh(scores / *c.attnLogitSoftcap) * *c.attnLogitSoftcap;
    auto mask = torch::ones({t, t}, torch::kBool).triu(1);
    if (c.isSlidingLayer(layer)) // query i sees keys j > i - window
        mask = mask.logical_or(torch::ones({t, t}, torch::kBool).tril(-c.slidingWindow));
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

} // namespace

torch::Tensor detail::mapInput(const core::LayerConverter &map, bool keys,
                               const std::vector<const float *> &source, int64_t tokens, int kvHeadsA,
                               int headDimA, int kvHeadsB, int headDimB, const float *extra)
{
    const auto &maps = keys ? map.keys : map.values;
    for (const auto &lm : maps)
        if (lm.outputDim != (map.headMatched ? headDimB : kvHeadsB * headDimB))
            throw Error(ErrorCode::Shape,
                        fmt::format("layer {} {} map gives {} outputs; model B's layer takes {}",
                                    map.targetLayer, keys ? "key" : "value", lm.outputDim,
                                    map.headMatched ? headDimB : kvHeadsB * headDimB));
    if (map.headMatched && int(maps.size()) != kvHeadsB)
        throw Error(ErrorCode::Shape,
                    fmt::format("layer {} has {} head-matched maps; model B has {} kv heads", map.targetLayer,
                                maps.size(), kvHeadsB));
    if (source.size() != map.sourceLayers.size() || maps.empty())
        throw Error(ErrorCode::Shape, fmt::format("layer {} map reads {} source layers, got {}",
                                                  map.targetLayer, map.sourceLayers.size(), source.size()));
    const int blocks = int(source.size()), widthA = kvHeadsA * headDimA;
    const int64_t extraDim = map.features.extraDim(blocks, widthA, kvHeadsB * headDimB);
    if (!map.headMatched && maps[0].inputDim != blocks * widthA + extraDim)
        throw Error(
            ErrorCode::Shape,
            fmt::format("layer {} map takes {} features; A's {} layer(s) and its token features give {}",
                        map.targetLayer, maps[0].inputDim, blocks, blocks * widthA + extraDim));
    if (extraDim > 0 && !extra)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("layer {} map takes token features; none were given", map.targetLayer));
    if (map.headMatched && (int(maps.size()) != kvHeadsA || maps[0].inputDim != blocks * headDimA))
        throw Error(
            ErrorCode::Shape,
            fmt::format("layer {} head-matched map has {} heads of {} features; A gives {} heads of {}",
                        map.targetLayer, maps.size(), maps[0].inputDim, kvHeadsA, blocks * headDimA));
    std::vector<torch::Tensor> parts; // each [tokens, kvA, hdA]
    for (const float *p : source)
        parts.push_back(
            torch::from_blob(const_cast<float *>(p), {tokens, kvHeadsA, headDimA}, torch::kFloat32));
    if (map.headMatched)
        return torch::cat(parts, 2).transpose(0, 1).contiguous();     // [kvA, tokens, blocks * hdA]
    auto x = torch::cat(parts, 1).reshape({tokens, blocks * widthA}); // [tokens, blocks * wA] (a copy)
    if (extraDim > 0)
        x = torch::cat({x, torch::from_blob(const_cast<float *>(extra), {tokens, extraDim}, torch::kFloat32)},
                       1);
    return x.unsqueeze(0); // [1, tokens, in]
}

torch::Tensor detail::mapOutputRows(const core::LayerConverter &map, const torch::Tensor &y)
{
    // head-matched: [kvB, tokens, hdB] -> [tokens, kvB, hdB]; full: [1, tokens, kvB * hdB]
    return map.headMatched ? y.transpose(0, 1).reshape({y.size(1), y.size(0) * y.size(2)}) : y[0];
}

std::vector<torch::Tensor> detail::promptMapInputs(const core::ExperimentReader &f,
                                                   const std::vector<core::LayerConverter> &layers,
                                                   int prompt, bool keys, int64_t tokens)
{
    const Geometry g = geometry(f);
    std::vector<torch::Tensor> xs;
    std::map<int, std::vector<float>> rowsA; // A's rows of each source layer, read once
    for (const core::LayerConverter &map : layers) {
        std::vector<const float *> src;
        for (int s : map.sourceLayers) {
            auto it = rowsA.find(s);
            if (it == rowsA.end())
                it = rowsA.emplace(s, sourceLayerRows(f, s, prompt, keys)).first;
            src.push_back(it->second.data());
        }
        const auto extra = map.features.any()
                               ? tokenFeatureRows(f, map.sourceLayers, map.features, prompt, keys, tokens)
                               : std::vector<float>();
        xs.push_back(mapInput(map, keys, src, tokens, g.kvA, g.hdA, g.kvB, g.hdB, extra.data()));
    }
    return xs;
}

std::vector<float> convertRows(const core::LayerConverter &map, bool keys,
                               const std::vector<const float *> &source, int64_t tokens, int kvHeadsA,
                               int headDimA, int kvHeadsB, int headDimB, const float *extra)
{
    return detail::translateTorch("convert rows", [&] {
        c10::InferenceMode guard;
        const auto x =
            detail::mapInput(map, keys, source, tokens, kvHeadsA, headDimA, kvHeadsB, headDimB, extra);
        const auto stacked =
            detail::stackMaps(keys ? map.keys : map.values, torch::kCPU,
                              fmt::format("layer {} {}", map.targetLayer, keys ? "key" : "value"));
        const auto y = detail::mapOutputRows(map, detail::applyMaps(stacked, x)).contiguous();
        return std::vector<float>(y.data_ptr<float>(), y.data_ptr<float>() + y.numel());
    });
}

std::vector<LayerMetrics> evaluateLayers(const core::ExperimentReader &f,
                                         const std::vector<core::LayerConverter> &maps,
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
                const core::LayerConverter &map = maps[m];
                std::vector<const float *> src;
                for (int l : map.sourceLayers) {
                    auto it = rowsA.find(l);
                    if (it == rowsA.end())
                        it = rowsA.emplace(l, detail::sourceLayerRows(f, l, p, keys)).first;
                    src.push_back(it->second.data());
                }
                auto yt = rowsB.find(map.targetLayer);
                if (yt == rowsB.end())
                    yt =
                        rowsB
                            .emplace(map.targetLayer, keys ? f.keys(core::ModelRole::B, map.targetLayer, p)
                                                           : f.values(core::ModelRole::B, map.targetLayer, p))
                            .first;
                const auto extra =
                    map.features.any()
                        ? detail::tokenFeatureRows(f, map.sourceLayers, map.features, p, keys, tokens)
                        : std::vector<float>();
                const auto pred =
                    convertRows(map, keys, src, tokens, g.kvA, g.hdA, g.kvB, g.hdB, extra.data());
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

LayerMetrics evaluateLayer(const core::ExperimentReader &f, const core::LayerConverter &map,
                           const std::vector<int> &prompts)
{
    return std::move(evaluateLayers(f, {map}, prompts).front());
}

namespace {

// A's rows of prompt p converted by `layers` into B's K/V of every B layer, head-major
// [kvHeadsB, tokens, headDimB], keys in the file's key form: what a cache of B is assigned.
std::vector<HeadMajorKv> convertedPrompt(const core::ExperimentReader &f,
                                         const std::vector<core::LayerConverter> &layers, const Geometry &g,
                                         int p, int64_t t)
{
    std::vector<HeadMajorKv> converted(layers.size());
    detail::translateTorch("convert rows", [&] {
        c10::InferenceMode guard;
        for (int kv = 0; kv < 2; ++kv) {
            const auto xs = detail::promptMapInputs(f, layers, p, kv == 0, t);
            for (size_t l = 0; l < layers.size(); ++l) {
                const auto &maps = kv == 0 ? layers[l].keys : layers[l].values;
                const auto stacked = detail::stackMaps(
                    maps, torch::kCPU,
                    fmt::format("layer {} {}", layers[l].targetLayer, kv == 0 ? "key" : "value"));
                const auto rows = detail::mapOutputRows(layers[l], detail::applyMaps(stacked, xs[l]))
                                      .view({t, g.kvB, g.hdB})
                                      .transpose(0, 1)
                                      .contiguous(); // token-major -> head-major
                (kv == 0 ? converted[l].keys : converted[l].values)
                    .assign(rows.data_ptr<float>(), rows.data_ptr<float>() + rows.numel());
            }
        }
        return 0;
    });
    return converted;
}

// The first n positions of head-major K/V of t positions.
HeadMajorKv firstPositions(const HeadMajorKv &kv, int heads, int64_t t, int64_t n, int hd)
{
    HeadMajorKv out;
    for (const auto *part : {&kv.keys, &kv.values}) {
        auto &dst = part == &kv.keys ? out.keys : out.values;
        for (int h = 0; h < heads; ++h)
            dst.insert(dst.end(), part->begin() + (int64_t(h) * t) * hd,
                       part->begin() + (int64_t(h) * t + n) * hd);
    }
    return out;
}

// The file's model B, with one map per layer: Error otherwise (checkTarget's, or Shape).
void checkScoredTarget(const core::ExperimentReader &f, const std::vector<core::LayerConverter> &layers,
                       const Model &target)
{
    checkTarget(f, target);
    if (int(layers.size()) != target.config().numLayers)
        throw Error(ErrorCode::Shape, fmt::format("{} layer maps for model B's {} layers", layers.size(),
                                                  target.config().numLayers));
}

// each(p, B's ids) for the aligned prompts of `prompts`, in order, until maxPrompts of them were
// taken (each returns false for a prompt it skips).
template <typename Each>
void forScoredPrompts(const core::ExperimentReader &f, const std::vector<int> &prompts, int maxPrompts,
                      Each each)
{
    int taken = 0;
    for (int p : prompts) {
        if (taken >= maxPrompts)
            break;
        if (!aligned(f, p, nullptr))
            continue;
        const auto info = f.prompt(p);
        taken += each(p, std::vector<int>(info.b.ids.begin(), info.b.ids.end())) ? 1 : 0;
    }
}

} // namespace

AttentionMetrics attentionCosine(const core::ExperimentReader &f,
                                 const std::vector<core::LayerConverter> &layers, const Model &target,
                                 const std::vector<int> &prompts, int maxPrompts)
{
    checkScoredTarget(f, layers, target);
    const Geometry g = geometry(f);
    const auto &cb = target.config();
    const KeyForm form = f.storage().keyForm;
    const int rep = cb.numHeads / cb.numKvHeads;
    AttentionMetrics r;
    r.layerCos.assign(size_t(cb.numLayers), 0.0);
    r.headCos.assign(size_t(cb.numLayers), std::vector<double>(size_t(cb.numKvHeads), 0.0));
    forScoredPrompts(f, prompts, maxPrompts, [&](int p, const std::vector<int> &ids) {
        const int64_t t = int64_t(ids.size());
        auto own = target.newCache();
        const auto queries = target.queries(ids, own);
        const auto converted = convertedPrompt(f, layers, g, p, t);
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
                auto a = attend(q, tensor(ownKv.keys), tensor(ownKv.values), cb, l);   // [nh, t, hd]
                auto b = attend(q, tensor(convKv.keys), tensor(convKv.values), cb, l); // [nh, t, hd]
                auto flat = [&](const torch::Tensor &x) { return x.transpose(0, 1).reshape({t, -1}); };
                r.layerCos[size_t(l)] += cosineSum(flat(a), flat(b));
                for (int h = 0; h < cb.numKvHeads; ++h)
                    r.headCos[size_t(l)][size_t(h)] +=
                        cosineSum(flat(a.narrow(0, h * rep, rep)), flat(b.narrow(0, h * rep, rep)));
            }
        });
        r.tokens += t;
        ++r.prompts;
        return true;
    });
    for (int l = 0; l < cb.numLayers; ++l) {
        r.layerCos[size_t(l)] = r.tokens > 0 ? r.layerCos[size_t(l)] / double(r.tokens) : kNaN;
        for (double &c : r.headCos[size_t(l)])
            c = r.tokens > 0 ? c / double(r.tokens) : kNaN;
    }
    return r;
}

double TransferKl::gapClosed() const
{
    return tokens > 0 && klNoPrefix > 0 ? 1 - kl / klNoPrefix : kNaN;
}

TransferKl transferKl(const core::ExperimentReader &f, const std::vector<core::LayerConverter> &layers,
                      const Model &target, const std::vector<int> &prompts, int maxPrompts, int continuation)
{
    checkScoredTarget(f, layers, target);
    const Geometry g = geometry(f);
    const auto &cb = target.config();
    if (continuation < 1)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("a transfer KL needs at least 1 continuation token, got {}", continuation));
    const size_t vocab = size_t(cb.vocabSize);
    TransferKl r;
    double kl = 0, klFloor = 0, top1 = 0, top1Floor = 0;
    const auto argmax = [&](const float *x) { return std::max_element(x, x + vocab) - x; };
    forScoredPrompts(f, prompts, maxPrompts, [&](int p, const std::vector<int> &ids) {
        const int64_t t = int64_t(ids.size());
        if (t < 4 || t > target.contextLimit())
            return false;
        const int64_t m = std::min<int64_t>(continuation, t / 2), cut = t - m;
        const std::vector<int> prefix(ids.begin(), ids.begin() + cut), rest(ids.begin() + cut, ids.end());
        auto own = target.newCache();
        const auto ownLogits = target.forward(ids, own, true); // [t, vocab]
        const auto converted = convertedPrompt(f, layers, g, p, t);
        std::vector<HeadMajorKv> head(converted.size());
        for (size_t l = 0; l < converted.size(); ++l)
            head[l] = firstPositions(converted[l], g.kvB, t, cut, g.hdB);
        auto conv = target.newCache();
        conv.assign(prefix, head, f.storage().keyForm);
        const auto convLogits = target.forward(rest, conv, true); // [m, vocab]
        auto none = target.newCache();
        const auto floorLogits = target.forward(rest, none, true); // [m, vocab]
        for (int64_t i = 0; i < m; ++i) {
            const float *o = ownLogits.data() + size_t(cut + i) * vocab,
                        *c = convLogits.data() + size_t(i) * vocab,
                        *n = floorLogits.data() + size_t(i) * vocab;
            kl += core::klDivergence(o, c, vocab);
            klFloor += core::klDivergence(o, n, vocab);
            top1 += argmax(o) == argmax(c) ? 1 : 0;
            top1Floor += argmax(o) == argmax(n) ? 1 : 0;
        }
        r.tokens += m;
        ++r.prompts;
        return true;
    });
    if (r.tokens > 0) {
        const double n = double(r.tokens);
        r.kl = kl / n;
        r.klNoPrefix = klFloor / n;
        r.top1 = top1 / n;
        r.top1NoPrefix = top1Floor / n;
    }
    return r;
}

std::pair<core::Matrix, core::Matrix> linearCka(const core::ExperimentReader &f,
                                                const std::vector<int> &prompts, int64_t maxTokens)
{
    const int la = f.model(core::ModelRole::A).config.numLayers,
              lb = f.model(core::ModelRole::B).config.numLayers;
    const std::vector<int> &capA = f.model(core::ModelRole::A).capturedLayers,
                           &capB = f.model(core::ModelRole::B).capturedLayers;
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
            auto rows = [&](core::ModelRole role, int layer) {
                std::vector<torch::Tensor> parts;
                for (const auto &[p, t] : use) {
                    auto v = role == core::ModelRole::A ? detail::sourceLayerRows(f, layer, p, kv == 0)
                             : kv == 0                  ? f.keys(role, layer, p)
                                                        : f.values(role, layer, p);
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
                xs.push_back(rows(core::ModelRole::A, l));
                xxNorm.push_back(torch::matmul(xs.back().t(), xs.back()).norm());
            }
            core::Matrix &m = kv == 0 ? out.first : out.second;
            for (int lbIdx : capB) {
                auto y = rows(core::ModelRole::B, lbIdx);
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

} // namespace kvwb::gpu
