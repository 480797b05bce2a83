// The pipeline: the prompt split, the whole fit of every B layer (alignExperiment) and the sweeps.
#include "gpu/src/align/alignment_p.h"

#include "core/util/clock.h"
#include "core/util/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <random>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;
using detail::bestLambda;
using detail::checkTarget;
using detail::Geometry;
using detail::geometry;
using detail::kNaN;
using detail::selectSources;

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
    const std::vector<int> &capB = f.model(core::ModelRole::B).capturedLayers;
    if (int(capB.size()) != f.model(core::ModelRole::B).config.numLayers)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: converters need every layer of model B, but the file captured {} of {}; "
                                "capture again without --layers-b",
                                f.path().string(), capB.size(),
                                f.model(core::ModelRole::B).config.numLayers));
}

std::vector<double> row(std::initializer_list<double> v)
{
    return std::vector<double>(v);
}

// Milliseconds to convert 1,024 tokens of every B layer's K and V (convertRows, the scoring and
// transfer evaluation, on this thread's CPU settings): the median of three runs on random rows.
double conversionMsPer1k(const Geometry &g, const std::vector<core::LayerConverter> &layers)
{
    constexpr int64_t kTokens = 1024;
    std::vector<float> rows(size_t(kTokens) * size_t(g.widthA()));
    std::mt19937 rng(1);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (float &v : rows)
        v = n(rng);
    std::vector<double> times;
    for (int run = 0; run < 3; ++run) {
        const auto t0 = core::Clock::now();
        for (const auto &layer : layers) {
            const std::vector<const float *> source(layer.sourceLayers.size(), rows.data());
            // token features: their columns cost what they cost whatever their values
            const std::vector<float> extra(
                size_t(kTokens) *
                size_t(layer.features.extraDim(int(layer.sourceLayers.size()), g.widthA(), g.widthB())));
            for (bool keys : {true, false})
                convertRows(layer, keys, source, kTokens, g.kvA, g.hdA, g.kvB, g.hdB, extra.data());
        }
        times.push_back(core::msSince(t0));
    }
    std::sort(times.begin(), times.end());
    return times[1];
}

// A checkpointed layer must have the shape of the layer this fit would train: the same target and
// source layers, head matching and map dimensions as its ridge start.
void checkResumedLayer(const std::filesystem::path &file, const core::LayerCheckpoint &c,
                       const core::LayerConverter &start, int layer)
{
    const auto &l = c.layer;
    const auto same = [](const std::vector<core::KvMap> &a, const std::vector<core::KvMap> &b) {
        return a.size() == b.size() && a.front().inputDim == b.front().inputDim &&
               a.front().outputDim == b.front().outputDim;
    };
    if (c.family != core::ConverterFamily::Mlp || l.targetLayer != layer ||
        l.sourceLayers != start.sourceLayers || l.headMatched != start.headMatched ||
        l.features != start.features || !same(l.keys, start.keys) || !same(l.values, start.values))
        throw Error(ErrorCode::Format,
                    fmt::format("{}: holds a {} map of B layer {} from A layers [{}], not the MLP map of B "
                                "layer {} from [{}] this fit trains",
                                file.string(), core::converterFamilyName(c.family), l.targetLayer,
                                fmt::join(l.sourceLayers, ","), layer, fmt::join(start.sourceLayers, ",")));
}

// What determines an MLP layer's maps: a checkpoint is used only by the fit that wrote it.
std::string mlpFitKey(const core::ExperimentReader &f, const AlignOptions &o)
{
    return nlohmann::json{
        {"experiment_run_id", f.provenance().runId},
        {"selection", layerSelectionName(o.fit.selection)},
        {"k", o.fit.k},
        {"lambda", o.fit.autoLambda ? nlohmann::json(o.lambdaGrid) : nlohmann::json(o.fit.lambda)},
        {"per_head", o.fit.perHead},
        {"family", core::converterFamilyName(o.fit.family)},
        {"max_train_tokens", o.fit.maxTrainTokens},
        {"valid_fraction", o.fit.validFraction},
        {"test_fraction", o.fit.testFraction},
        {"seed", o.fit.seed},
        {"token_features", core::tokenFeaturesText(o.fit.tokenFeatures)},
        {"mlp",
         {o.fit.mlpHidden, o.fit.mlpEpochs, o.fit.mlpBatch, o.fit.learningRate, o.fit.patience,
          o.mlpValidationRows, o.mlpBufferBytes}}}
        .dump();
}

// The record's description of the fit (its name, selection, split) and its metric tables' columns.
// k: the k actually used.
void describeFit(core::ConverterRecord &rec, const core::ExperimentReader &f, const AlignOptions &o,
                 const PromptSplit &split, int k)
{
    rec.name = o.fit.name;
    rec.keyForm = f.storage().keyForm;
    rec.selection = layerSelectionName(o.fit.selection);
    const int capturedA = int(f.model(core::ModelRole::A).capturedLayers.size());
    rec.k = o.fit.selection == LayerSelection::All ? capturedA : k;
    rec.lambdaMode = o.fit.autoLambda ? "auto" : "fixed";
    rec.perHead = o.fit.perHead;
    rec.trainPrompts = split.train;
    rec.validPrompts = split.valid;
    rec.testPrompts = split.test;
    rec.layerMetrics.columns = {"layer",     "sources", "first_source", "lambda", "train_rows",
                                "test_rows", "r2_k",    "r2_v",         "cos_k",  "cos_v",
                                "rel_k",     "rel_v",   "attn_cos"};
    rec.headMetrics.columns = {"layer", "head",  "r2_k",  "r2_v",    "cos_k",
                               "cos_v", "rel_k", "rel_v", "attn_cos"};
}

// B layer l's ridge maps, one per lambda of the grid (reduced-rank for a low-rank converter), and in
// chosen the index of the one the validation prompts prefer when the grid has several.
std::vector<core::LayerConverter> ridgeMaps(const core::ExperimentReader &f, const AlignOptions &o,
                                            const PromptSplit &split, const std::vector<double> &grid, int l,
                                            const std::vector<int> &sources, bool headMatched,
                                            LayerFitStats *stats, size_t *chosen,
                                            const TargetMetric *metric = nullptr)
{
    if (metric) { // attention-aligned: lambda chosen by the validation error in the same metric
        auto maps = detail::fitLayerGridWeighted(f, l, sources, split.train, grid, metric->keys[size_t(l)],
                                                 metric->values[size_t(l)], stats, headMatched,
                                                 o.fit.maxTrainTokens, o.fit.tokenFeatures);
        if (grid.size() > 1) {
            const auto r2 =
                detail::weightedR2(f, maps, split.valid, metric->keys[size_t(l)], metric->values[size_t(l)]);
            std::vector<LayerMetrics> scores(maps.size());
            for (size_t i = 0; i < maps.size(); ++i)
                scores[i].r2Keys = scores[i].r2Values = std::isfinite(r2[i]) ? r2[i] : -1e300;
            *chosen = bestLambda(scores, grid);
        }
        return maps;
    }
    auto maps = o.fit.family == core::ConverterFamily::LowRank
                    ? fitLayerGridLowRank(f, l, sources, split.train, grid, o.fit.rank, stats, headMatched,
                                          o.fit.maxTrainTokens, o.fit.tokenFeatures)
                    : fitLayerGrid(f, l, sources, split.train, grid, stats, headMatched, o.fit.maxTrainTokens,
                                   o.fit.tokenFeatures);
    if (grid.size() > 1)
        *chosen = bestLambda(evaluateLayers(f, maps, split.valid), grid);
    return maps;
}

// B layer l's MLP map read back from its checkpoint (which must be this fit's, of the shape of
// its ridge start `start`); its stats, marked resumed, are appended to mlpLayers.
core::LayerConverter resumeMlpLayer(const std::filesystem::path &checkpoint, const std::string &fitKey,
                                    const AlignOptions &o, const core::LayerConverter &start, int l,
                                    nlohmann::json &mlpLayers)
{
    auto c = core::loadLayerCheckpoint(checkpoint);
    if (c.fitKey != fitKey)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: written by a fit with other settings, seed or experiment; remove "
                                "{} or run without --resume",
                                checkpoint.string(), o.checkpointDir.string()));
    checkResumedLayer(checkpoint, c, start, l);
    auto stats = nlohmann::json::parse(c.statsJson);
    stats["resumed"] = true;
    mlpLayers.push_back(std::move(stats));
    return std::move(c.layer);
}

// B layer l's MLP map trained from its ridge start, saved to its checkpoint (when not empty) and
// its stats appended to mlpLayers; empty when cancelled.
std::optional<core::LayerConverter> trainMlpLayerFor(const core::ExperimentReader &f, const AlignOptions &o,
                                                     const PromptSplit &split,
                                                     const core::LayerConverter &start, const MlpOptions &mo,
                                                     int l, const std::filesystem::path &checkpoint,
                                                     const std::string &fitKey, nlohmann::json &mlpLayers)
{
    MlpFitStats ms;
    auto trained = trainMlpLayer(f, start, split.train, split.valid, mo, &ms);
    if (!trained)
        return std::nullopt;
    nlohmann::json stats = {{"layer", l},
                            {"epochs", ms.epochs},
                            {"best_epoch_k", ms.bestEpochKeys},
                            {"best_epoch_v", ms.bestEpochValues},
                            {"valid_loss_ridge_k", ms.ridgeLossKeys},
                            {"valid_loss_ridge_v", ms.ridgeLossValues},
                            {"valid_loss_k", ms.lossKeys},
                            {"valid_loss_v", ms.lossValues},
                            {"train_rows", ms.trainRows},
                            {"deadline_reached", ms.deadlineReached},
                            {"seconds", ms.seconds}};
    if (!checkpoint.empty() && !ms.deadlineReached) { // a layer the budget cut short is not final
        std::filesystem::create_directories(o.checkpointDir);
        core::saveLayerCheckpoint(checkpoint, {*trained, o.fit.family, fitKey, stats.dump()});
    }
    mlpLayers.push_back(std::move(stats));
    return trained;
}

// One row per B layer, and one per B layer and kv head, of the test scores and attention cosines
// (NaN without model B).
void fillMetricTables(core::ConverterRecord &rec, const std::vector<LayerMetrics> &metrics,
                      const AttentionMetrics &attn, bool haveTarget, int kvB)
{
    for (int l = 0; l < int(metrics.size()); ++l) {
        const auto &m = metrics[size_t(l)];
        const auto &map = rec.layers[size_t(l)];
        const double ac = haveTarget ? attn.layerCos[size_t(l)] : kNaN;
        rec.layerMetrics.rows.push_back(
            row({double(l), double(map.sourceLayers.size()), double(map.sourceLayers.front()),
                 map.keys[0].lambda, double(rec.trainTokens), double(m.rows), m.r2Keys, m.r2Values, m.cosKeys,
                 m.cosValues, m.relErrKeys, m.relErrValues, ac}));
        for (int h = 0; h < kvB; ++h) {
            const auto &hm = m.heads[size_t(h)];
            rec.headMetrics.rows.push_back(
                row({double(l), double(h), hm.r2Keys, hm.r2Values, hm.cosKeys, hm.cosValues, hm.relErrKeys,
                     hm.relErrValues, haveTarget ? attn.headCos[size_t(l)][size_t(h)] : kNaN}));
        }
    }
}

// The record's settings JSON: the fit's options and, for MLP converters, each layer's stats.
std::string fitSettingsJson(const core::ExperimentReader &f, const AlignOptions &o,
                            const core::ConverterRecord &rec, bool headMatched, int attentionPrompts,
                            const nlohmann::json &mlpLayers)
{
    const bool lowRank = o.fit.family == core::ConverterFamily::LowRank;
    nlohmann::json settings = {{"selection", rec.selection},
                               {"k", rec.k},
                               {"lambda", o.fit.lambda},
                               {"auto_lambda", o.fit.autoLambda},
                               {"lambda_grid", o.lambdaGrid},
                               {"per_head", o.fit.perHead},
                               {"family", core::converterFamilyName(o.fit.family)},
                               {"rank", lowRank ? o.fit.rank : 0},
                               {"head_matched", headMatched},
                               {"max_train_tokens", o.fit.maxTrainTokens},
                               {"token_features", core::tokenFeaturesText(o.fit.tokenFeatures)},
                               {"valid_fraction", o.fit.validFraction},
                               {"test_fraction", o.fit.testFraction},
                               {"seed", o.fit.seed},
                               {"attention_prompts", attentionPrompts},
                               {"cka_tokens", o.ckaTokens},
                               {"experiment_run_id", f.provenance().runId}};
    if (o.fit.family == core::ConverterFamily::Mlp) {
        settings["mlp"] = {{"hidden", o.fit.mlpHidden},
                           {"max_epochs", o.fit.mlpEpochs},
                           {"batch", o.fit.mlpBatch},
                           {"learning_rate", o.fit.learningRate},
                           {"patience", o.fit.patience},
                           {"validation_rows", o.mlpValidationRows},
                           {"budget_seconds", o.fit.budgetSeconds},
                           {"layers", mlpLayers}};
    }
    return settings.dump();
}

} // namespace

// The calibration prompts whose queries weigh the attention-aligned family's keys.
constexpr int kAttentionMetricPrompts = 64;

MlpOptions mlpOptions(const AlignOptions &o)
{
    return {.hidden = o.fit.mlpHidden,
            .epochs = o.fit.mlpEpochs,
            .batch = o.fit.mlpBatch,
            .learningRate = o.fit.learningRate,
            .patience = o.fit.patience,
            .validationRows = o.mlpValidationRows,
            .maxTrainRows = o.fit.maxTrainTokens,
            .bufferBytes = o.mlpBufferBytes,
            .seed = uint64_t(o.fit.seed),
            .deadline = {},
            .progress = {}};
}

namespace {

// The KL objective's key: the fit's (mlpFitKey), its own settings and how B computes (dtype, KV dtype,
// device): a state trained under other ones is not continued.
std::string klFitKey(const core::ExperimentReader &f, const AlignOptions &o, const Model &target)
{
    return nlohmann::json{{"fit", mlpFitKey(f, o)},
                          {"auto_prompts", o.fit.autoPrompts},
                          {"rank", o.fit.rank},
                          {"b",
                           {floatTypeName(target.options().dtype), floatTypeName(target.kvDtype()),
                            deviceName(target.options().device)}},
                          {"kl",
                           {o.fit.klEpochs, o.fit.klLearningRate, detail::KlOptions().batch, o.fit.patience,
                            detail::KlOptions().continuation}}}
        .dump();
}

// "KL objective: validation KL 0.0930 -> 0.0712 (no prefix 1.4450), 93.6 % -> 95.1 % of the gap,
// top-1 0.947 -> 0.955, epoch 3 of 4 kept, 212 prompts, 95.2 s".
std::string klObjectiveLine(const detail::KlFitStats &s)
{
    return fmt::format(
        "KL objective: validation KL {:.4f} -> {:.4f} (no prefix {:.4f}), {:.1f} % -> {:.1f} % of "
        "the gap, top-1 {:.3f} -> {:.3f}, epoch {} of {} kept, {} training prompts, {:.1f} s{}",
        s.start.kl, s.kept.kl, s.kept.klNoPrefix, 100 * s.start.gapClosed(), 100 * s.kept.gapClosed(),
        s.start.top1, s.kept.top1, s.bestEpoch, s.epochs, s.trainPrompts, s.seconds,
        s.resumed ? " (resumed)" : "");
}

// Objective kl: the fit of o's family with the KV objective, then its maps trained through B
// (detail::trainKlObjective) and scored again on the test prompts.
AlignResult alignKl(const core::ExperimentReader &f, const AlignOptions &o, const Model *target)
{
    if (!target)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: the KL objective trains the maps through model B and needs it loaded; "
                                "load it or fit with the KV objective",
                                f.path().string()));
    { // what the training needs, checked before the fit it starts from
        const PromptSplit split =
            splitPrompts(f.promptCount(), o.fit.validFraction, o.fit.testFraction, o.fit.seed);
        detail::checkKlTarget(f, *target, split.train, split.valid);
    }
    const auto started = core::Clock::now();
    constexpr double kvShare = 0.3; // of the progress
    AlignOptions kv = o;
    kv.fit.objective = core::FitObjective::Kv;
    kv.progress = [&](double fr, const std::string &stage) {
        return !o.progress || o.progress(kvShare * fr, stage);
    };
    AlignResult r = alignExperiment(f, kv, target);
    if (r.cancelled)
        return r;
    auto &rec = r.record;
    detail::KlOptions ko;
    ko.epochs = o.fit.klEpochs;
    ko.learningRate = o.fit.klLearningRate;
    ko.patience = o.fit.patience;
    ko.validationPrompts = o.fit.autoPrompts;
    ko.seed = uint64_t(o.fit.seed);
    if (o.fit.budgetSeconds > 0)
        ko.deadline = started + std::chrono::duration_cast<core::Clock::duration>(
                                    std::chrono::duration<double>(o.fit.budgetSeconds));
    ko.stateDir = o.checkpointDir;
    ko.key = klFitKey(f, o, *target);
    ko.resume = o.fit.resume;
    ko.progress = [&](int64_t step, int64_t steps, int epoch) {
        return !o.progress || o.progress(kvShare + (0.95 - kvShare) * double(step) / double(steps),
                                         fmt::format("KL objective: epoch {}/{}", epoch, o.fit.klEpochs));
    };
    detail::KlFitStats ks;
    auto trained =
        detail::trainKlObjective(f, rec.layers, *target, rec.trainPrompts, rec.validPrompts, ko, &ks);
    if (!trained) {
        r.cancelled = true;
        return r;
    }
    rec.layers = std::move(*trained);
    if (o.progress && !o.progress(0.95, "scoring the trained maps")) {
        r.cancelled = true;
        return r;
    }
    const Geometry g = geometry(f);
    std::vector<LayerMetrics> metrics;
    for (const auto &layer : rec.layers)
        metrics.push_back(evaluateLayer(f, layer, rec.testPrompts));
    AttentionMetrics attn;
    if (o.fit.attention)
        attn = attentionCosine(f, rec.layers, *target, rec.testPrompts, o.fit.attentionPrompts);
    rec.layerMetrics.rows.clear();
    rec.headMetrics.rows.clear();
    fillMetricTables(rec, metrics, attn, o.fit.attention, g.kvB);
    const double kvSeconds = rec.fitSeconds;
    rec.fitSeconds = core::msSince(started) / 1000;
    const auto gap = [](const TransferKl &s) {
        const double v = s.gapClosed();
        return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
    };
    auto settings = nlohmann::json::parse(rec.settingsJson);
    if (settings.contains("objective")) // the KV fit's own objective (attention-aligned ridge)
        settings["kv_objective"] = settings["objective"];
    settings["objective"] = "kl";
    settings["kl"] = {{"max_epochs", o.fit.klEpochs},
                      {"learning_rate", o.fit.klLearningRate},
                      {"batch_prompts", ko.batch},
                      {"patience", ko.patience},
                      {"continuation", ko.continuation},
                      {"epochs", ks.epochs},
                      {"best_epoch", ks.bestEpoch},
                      {"train_prompts", ks.trainPrompts},
                      {"train_tokens", ks.trainTokens},
                      {"valid_prompts", ks.kept.prompts},
                      {"valid_kl_kv_fit", ks.start.kl},
                      {"valid_kl", ks.kept.kl},
                      {"valid_kl_no_prefix", ks.kept.klNoPrefix},
                      {"valid_gap_closed_kv_fit", gap(ks.start)},
                      {"valid_gap_closed", gap(ks.kept)},
                      {"valid_top1_kv_fit", ks.start.top1},
                      {"valid_top1", ks.kept.top1},
                      {"history", ks.history},
                      {"train_history", ks.trainHistory},
                      {"kv_fit_seconds", kvSeconds},
                      {"seconds", ks.seconds},
                      {"deadline_reached", ks.deadlineReached},
                      {"resumed", ks.resumed}};
    rec.settingsJson = settings.dump();
    r.deadlineReached = r.deadlineReached || ks.deadlineReached;
    r.klObjective = klObjectiveLine(ks);
    if (ks.bestEpoch == 0)
        r.warnings.push_back(
            "the KL objective did not lower the validation KL of the KV fit: its maps are kept");
    if (ks.deadlineReached)
        r.warnings.push_back(fmt::format("the {} s budget ended the KL objective's training after epoch {}",
                                         o.fit.budgetSeconds, ks.epochs));
    if (o.progress)
        o.progress(1.0, "done");
    return r;
}

} // namespace

AlignResult alignExperiment(const core::ExperimentReader &f, const AlignOptions &o, const Model *target)
{
    if (o.fit.objective == core::FitObjective::Kl)
        return alignKl(f, o, target);
    if (o.fit.family == core::ConverterFamily::Auto)
        return detail::alignAuto(f, o, target);
    AlignResult r;
    auto &rec = r.record;
    checkCapturedB(f);
    if (target)
        checkTarget(f, *target);
    if (o.fit.k <= 0)
        throw Error(ErrorCode::InvalidArgument, fmt::format("k must be positive, got {}", o.fit.k));
    const Geometry g = geometry(f);
    const bool headMatched = o.fit.perHead && g.kvA == g.kvB;
    if (o.fit.perHead && !headMatched)
        r.warnings.push_back(fmt::format("per-head maps need equal kv-head counts (A {}, B {}): fitted full "
                                         "cross-head maps instead",
                                         g.kvA, g.kvB));
    detail::checkTokenFeatureSource(f, o.fit.tokenFeatures, headMatched);
    const bool mlp = o.fit.family == core::ConverterFamily::Mlp,
               lowRank = o.fit.family == core::ConverterFamily::LowRank,
               attnRidge = o.fit.family == core::ConverterFamily::AttnRidge;
    if (attnRidge && !target)
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("{}: attention-aligned ridge weighs each map by what model B does with it (its "
                        "queries and output projection) and needs model B loaded; load it or choose "
                        "another family",
                        f.path().string()));
    if (lowRank && o.fit.rank < 1)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("a low-rank converter needs rank >= 1, got {}", o.fit.rank));
    const PromptSplit split =
        splitPrompts(f.promptCount(), o.fit.validFraction, o.fit.testFraction, o.fit.seed);
    requireSplit(f, split, o.fit.autoLambda || o.fit.selection == LayerSelection::TopK || mlp);
    const int lb = f.model(core::ModelRole::B).config.numLayers;
    const auto started = core::Clock::now();
    nlohmann::json mlpLayers = nlohmann::json::array();
    const std::vector<double> grid = o.fit.autoLambda ? o.lambdaGrid : std::vector<double>{o.fit.lambda};
    auto report = [&](double fr, const std::string &stage) { return !o.progress || o.progress(fr, stage); };
    const std::string fitKey = mlpFitKey(f, o);
    std::vector<int> resumed, outOfBudget;
    std::optional<core::Clock::time_point> deadline;
    if (o.fit.budgetSeconds > 0)
        deadline = started + std::chrono::duration_cast<core::Clock::duration>(
                                 std::chrono::duration<double>(o.fit.budgetSeconds));

    const int k =
        std::min(o.fit.k, int(f.model(core::ModelRole::A).capturedLayers.size())); // the k actually used
    describeFit(rec, f, o, split, k);
    std::optional<TargetMetric> metric;
    if (attnRidge) {
        if (!report(0, "reading B's queries on the calibration prompts")) {
            r.cancelled = true;
            return r;
        }
        metric = targetMetric(f, *target, split.train, kAttentionMetricPrompts);
    }
    std::vector<LayerMetrics> metrics;
    // top k: every B layer's ranking of A's layers first (one accumulation per A layer), reported as
    // the first share of the fit in proportion to its work (an A layer against all of B's layers)
    std::vector<std::vector<int>> ranked;
    const double rankShare = o.fit.selection == LayerSelection::TopK ? 0.5 : 0.0;
    const auto after = [&](double fr) { return rankShare + (1 - rankShare) * fr; }; // the fit's own share
    if (o.fit.selection == LayerSelection::TopK) {
        ranked = rankSourceLayers(f, split.train, split.valid, o.fit.autoLambda ? 0.01 : o.fit.lambda,
                                  o.fit.maxTrainTokens, [&](int done, int of) {
                                      return report(rankShare * done / of,
                                                    fmt::format("ranking A's layers {}/{}", done + 1, of));
                                  });
        if (ranked.empty()) {
            r.cancelled = true;
            return r;
        }
    }
    for (int l = 0; l < lb; ++l) {
        if (!report(after(double(l) / (lb + 2)), fmt::format("fitting layer {}/{}", l + 1, lb))) {
            r.cancelled = true;
            return r;
        }
        const auto sources =
            selectSources(f, o.fit.selection, k, l, ranked.empty() ? std::vector<int>{} : ranked[size_t(l)]);
        LayerFitStats stats;
        size_t chosen = 0;
        auto maps = ridgeMaps(f, o, split, grid, l, sources, headMatched, &stats, &chosen,
                              metric ? &*metric : nullptr);
        if (l == 0) {
            rec.trainTokens = stats.rows;
            r.warnings.insert(r.warnings.end(), stats.warnings.begin(), stats.warnings.end());
        }
        const std::filesystem::path checkpoint = o.checkpointDir.empty()
                                                     ? std::filesystem::path()
                                                     : o.checkpointDir / fmt::format("layer-{:03}.h5", l);
        if (mlp && o.fit.resume && !checkpoint.empty() && std::filesystem::exists(checkpoint)) {
            rec.layers.push_back(resumeMlpLayer(checkpoint, fitKey, o, maps[chosen], l, mlpLayers));
            resumed.push_back(l);
        } else if (mlp) {
            MlpOptions mo = mlpOptions(o);
            mo.deadline = deadline;
            mo.progress = [&](int epoch, int epochs) {
                return report(after((l + double(epoch) / std::max(1, epochs)) / (lb + 2)),
                              fmt::format("layer {}/{}: MLP epoch {}/{}", l + 1, lb, epoch, epochs));
            };
            auto trained = trainMlpLayerFor(f, o, split, maps[chosen], mo, l, checkpoint, fitKey, mlpLayers);
            if (!trained) {
                r.cancelled = true;
                return r;
            }
            if (mlpLayers.back().value("deadline_reached", false))
                outOfBudget.push_back(l);
            rec.layers.push_back(std::move(*trained));
        } else {
            rec.layers.push_back(std::move(maps[chosen]));
        }
        metrics.push_back(evaluateLayer(f, rec.layers.back(), split.test));
    }
    r.resumedLayers = int(resumed.size());
    if (!resumed.empty())
        r.warnings.push_back(
            fmt::format("{} of {} layers read from checkpoints in {} (fit time counts this run only)",
                        resumed.size(), lb, o.checkpointDir.string()));
    r.deadlineReached = !outOfBudget.empty();
    if (!outOfBudget.empty())
        r.warnings.push_back(fmt::format(
            "the {} s budget ended the MLP's training in B layer{} {}: what they "
            "had learned by then is kept (their ridge maps where nothing was)",
            o.fit.budgetSeconds, outOfBudget.size() > 1 ? "s" : "", fmt::join(outOfBudget, ", ")));
    rec.fitSeconds = core::msSince(started) / 1000;
    rec.family = attnRidge ? core::ConverterFamily::Ridge : o.fit.family; // its maps are ridge maps
    rec.convertMsPer1k = conversionMsPer1k(g, rec.layers);
    if (!report(after(double(lb) / (lb + 2)), "attention-output cosine")) {
        r.cancelled = true;
        return r;
    }
    AttentionMetrics attn;
    const bool scoreAttention = target && o.fit.attention;
    if (scoreAttention)
        attn = attentionCosine(f, rec.layers, *target, split.test, o.fit.attentionPrompts);
    else if (!target)
        r.warnings.push_back("model B not loaded: attention-output cosine not computed");
    if (!report(after(double(lb + 1) / (lb + 2)), "linear CKA")) {
        r.cancelled = true;
        return r;
    }
    std::tie(rec.ckaKeys, rec.ckaValues) = linearCka(f, split.test, o.ckaTokens);
    fillMetricTables(rec, metrics, attn, scoreAttention, g.kvB);
    rec.settingsJson = fitSettingsJson(f, o, rec, headMatched, scoreAttention ? attn.prompts : 0, mlpLayers);
    if (metric) { // the objective its maps were fitted under
        auto s = nlohmann::json::parse(rec.settingsJson);
        s["objective"] = "attention";
        s["attention_metric"] = {{"prompts", metric->prompts},
                                 {"tokens", metric->tokens},
                                 {"key_form", core::keyFormName(f.storage().keyForm)}};
        rec.settingsJson = s.dump();
    }
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
    const int lb = f.model(core::ModelRole::B).config.numLayers;
    const std::vector<int> ks = o.selection == LayerSelection::All
                                    ? std::vector<int>{int(f.model(core::ModelRole::A).capturedLayers.size())}
                                    : o.ks;
    core::MetricTable &table = result.table;
    table.columns = {"k",     "lambda", "train_tokens", "r2_k",  "r2_v",
                     "cos_k", "cos_v",  "rel_k",        "rel_v", "attn_cos"};
    const size_t total = o.trainTokens.size() * ks.size();
    size_t done = 0;
    for (int64_t tokens : o.trainTokens) {
        // rankings with this row's calibration tokens, shared by its ks
        std::vector<std::vector<int>> ranked(static_cast<size_t>(lb));
        if (o.selection == LayerSelection::TopK)
            ranked = rankSourceLayers(f, split.train, split.valid, 0.01, tokens);
        for (int k : ks) {
            if (o.progress && !o.progress(double(done) / double(total),
                                          fmt::format("k {}, {} calibration tokens", k, tokens))) {
                result.cancelled = true;
                return result;
            }
            ++done;
            std::vector<std::vector<core::LayerConverter>> perLambda(o.lambdas.size());
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
