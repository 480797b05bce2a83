#include "app/cli/cli_align.h"

#include "app/cli/cli_converter_options.h"
#include "app/cli/cli_settings.h"
#include "app/cli/engine_options.h"
#include "app/jobs/compare_job.h"
#include "app/jobs/fit_job.h"
#include "app/jobs/handoff_job.h"
#include "core/metrics/bootstrap.h"
#include "core/metrics/gate_curve.h"
#include "core/metrics/text_metrics.h"
#include "core/model/random_model.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/tokenize/token_alignment.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/util/text_util.h"
#include "core/workload/workload.h"
#include "gpu/align/alignment.h"
#include "gpu/model/device.h"
#include "gpu/transfer/compare.h"
#include "gpu/transfer/transfer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include <unistd.h>

namespace kvwb::app {

using namespace kvwb::app::cli;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The fit settings' options (core::fitFlags), --json where --help has always listed it.
void addAlignOptions(QCommandLineParser &p)
{
    addSettingOptions<core::FitSettings>(p, core::fitFlags(), [&](const std::string &name) {
        if (name == "resume")
            p.addOption({"json", "Print the result as JSON."});
    });
}

// Flags that only one family takes, and --resume only for a stored MLP fit: UsageError.
void checkFamilyFlags(const QCommandLineParser &p, const core::FitSettings &s)
{
    if (s.family == core::ConverterFamily::LowRank && !p.isSet("rank"))
        throw UsageError{"--family low-rank needs --rank R"};
    if (s.family != core::ConverterFamily::LowRank && p.isSet("rank"))
        throw UsageError{"--rank applies to --family low-rank only"};
    const bool trainsMlp = s.family == core::ConverterFamily::Mlp || s.family == core::ConverterFamily::Auto;
    for (const char *flag : {"hidden", "epochs", "batch", "learning-rate"})
        if (p.isSet(flag) && !trainsMlp)
            throw UsageError{fmt::format("--{} applies to --family mlp or auto only", flag)};
    for (const char *flag : {"patience", "budget"})
        if (p.isSet(flag) && !trainsMlp && s.objective != core::FitObjective::Kl)
            throw UsageError{
                fmt::format("--{} applies to --family mlp or auto, or --objective kl, only", flag)};
    if (p.isSet("auto-prompts") && s.family != core::ConverterFamily::Auto &&
        s.objective != core::FitObjective::Kl)
        throw UsageError{"--auto-prompts applies to --family auto or --objective kl only"};
    const bool kl = s.objective == core::FitObjective::Kl;
    for (const char *flag : {"kl-epochs", "kl-learning-rate"})
        if (p.isSet(flag) && !kl)
            throw UsageError{fmt::format("--{} applies to --objective kl only", flag)};
    if (s.resume && (!(trainsMlp || kl) || s.dryRun))
        throw UsageError{"--resume applies to --family mlp or auto fits, or --objective kl fits, that store "
                         "their converter (not --dry-run)"};
}

// The record's "auto" settings (the candidates and the choice), null for a fit of one family.
json autoJson(const gpu::AlignResult &r)
{
    if (r.chosen < 0)
        return nullptr;
    return json::parse(r.record.settingsJson).value("auto", json());
}

} // namespace

int cmdAlign(const QStringList &args)
{
    QCommandLineParser p;
    addAlignOptions(p);
    addModelOptions(p);
    addEngineOptions(p);
    parse(p, args,
          "Fit per-layer linear maps from model A's KV cache to model B's on an experiment file (ridge, "
          "split by prompt), score them on held-out prompts and store them in the file's /converters group.");
    const core::FitSettings settings = settingsFromFlags(p, core::fitFlags());
    if (settings.experiment.empty())
        throw UsageError{"--experiment is required"};
    const fs::path path = settings.experiment;
    if (!settings.dryRun) { // the converter is stored in the file: checked before the fit, not after
        core::checkWritableOutput(path, "--experiment");
        const auto names = core::listConverters(path);
        if (!settings.replace && std::find(names.begin(), names.end(), settings.name) != names.end()) {
            const auto old = core::loadConverters(path, settings.name);
            throw core::Error(
                core::ErrorCode::InvalidArgument,
                fmt::format("{}: converter '{}' exists ({}, fitted {}); pass --replace to replace "
                            "it, or choose another --name",
                            path.string(), settings.name, core::converterFamilyName(old.family),
                            old.createdUtc));
        }
    }
    checkFamilyFlags(p, settings);
    const bool asJson = p.isSet("json");
    std::unique_ptr<gpu::Model> b;
    InterruptScope ctrlC;
    const auto fit = jobs::runFit(
        settings,
        [&](const core::ExperimentReader &file, std::vector<std::string> &) {
            const bool kl = settings.objective == core::FitObjective::Kl;
            if (settings.attention || settings.family == core::ConverterFamily::Auto ||
                settings.family == core::ConverterFamily::AttnRidge || kl) {
                auto lo = loadOptions(p);
                // the KL objective's gradients run through B's dense weights, never its quantised kernels
                lo.dequantize = lo.dequantize || kl;
                b = loadFileModel(file, core::ModelRole::B, p, lo);
            }
            return static_cast<const gpu::Model *>(b.get());
        },
        [&](double f, const std::string &stage) {
            if (!asJson)
                std::fprintf(stderr, "\r%3.0f%% %-56s", 100 * f, stage.c_str());
            return !InterruptScope::interrupted();
        },
        [&](const gpu::AutoCandidate &c) {
            if (!asJson) // each candidate as soon as it is scored: ridge's result first
                std::fprintf(stderr, "\r%s\n", gpu::autoCandidateLine(c).c_str());
        });
    const auto &r = fit.result;
    const double fitMs = fit.fitMs;
    if (!asJson)
        std::fprintf(stderr, "\n");
    if (r.cancelled) {
        const auto dir = jobs::fitCheckpointDir(path.string(), settings.name);
        if (jobs::fitKeepsCheckpoints(settings) && fs::exists(dir))
            std::fprintf(stderr,
                         "cancelled: nothing stored; what was trained is in %s, continue with --resume\n",
                         dir.c_str());
        else
            std::fprintf(stderr, "cancelled: nothing stored\n");
        return 130;
    }
    for (const auto &w : r.warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    const auto &rec = r.record;
    if (asJson) {
        json layers = json::array();
        const auto heads = tableJson(rec.headMetrics);
        for (size_t l = 0; l < rec.layers.size(); ++l) {
            json j =
                tableJson(core::MetricTable{rec.layerMetrics.columns, {rec.layerMetrics.rows[l]}}).front();
            j["sources"] = rec.layers[l].sourceLayers;
            j["head_matched"] = rec.layers[l].headMatched;
            j["heads"] = json::array();
            for (const auto &h : heads)
                if (h["layer"] == double(l))
                    j["heads"].push_back(h);
            layers.push_back(j);
        }
        const json out = {{"experiment", path.string()},
                          {"converter", rec.name},
                          {"stored", !settings.dryRun},
                          {"selection", rec.selection},
                          {"k", rec.k},
                          {"lambda_mode", rec.lambdaMode},
                          {"per_head", rec.perHead},
                          {"family", core::converterFamilyName(rec.family)},
                          {"parameters", rec.parameterCount()},
                          {"bytes", rec.bytes()},
                          {"fit_seconds", rec.fitSeconds},
                          {"convert_ms_per_1k", rec.convertMsPer1k},
                          {"settings", json::parse(rec.settingsJson)},
                          {"key_form", core::keyFormName(rec.keyForm)},
                          {"train_prompts", rec.trainPrompts.size()},
                          {"valid_prompts", rec.validPrompts.size()},
                          {"test_prompts", rec.testPrompts.size()},
                          {"train_tokens", rec.trainTokens},
                          {"fit_ms", fitMs},
                          {"resumed_layers", r.resumedLayers},
                          {"auto", autoJson(r)},
                          {"objective", core::fitObjectiveName(settings.objective)},
                          {"kl", json::parse(rec.settingsJson).value("kl", json())},
                          {"layers", layers},
                          {"cka_keys", matrixJson(rec.ckaKeys)},
                          {"cka_values", matrixJson(rec.ckaValues)},
                          {"warnings", r.warnings}};
        std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
        return 0;
    }
    std::printf(
        "%s: converter '%s' (%s, %s, k %d, lambda %s%s), %zu train / %zu valid / %zu test prompts, %lld "
        "calibration tokens, %.1f s%s\n",
        path.c_str(), rec.name.c_str(), core::converterFamilyName(rec.family), rec.selection.c_str(), rec.k,
        rec.lambdaMode.c_str(), rec.perHead ? ", per head" : "", rec.trainPrompts.size(),
        rec.validPrompts.size(), rec.testPrompts.size(), (long long)rec.trainTokens, fitMs / 1000,
        settings.dryRun ? "" : ", stored");
    if (r.chosen >= 0)
        std::printf("family auto chose %s: %s\n", core::converterFamilyName(rec.family),
                    gpu::autoCandidateLine(r.candidates[size_t(r.chosen)]).c_str());
    if (!r.klObjective.empty())
        std::printf("%s\n", r.klObjective.c_str());
    std::printf(
        "fit %.1f s, %lld parameters (%.2f MB as f32), conversion %.2f ms per 1k tokens of every layer\n\n",
        rec.fitSeconds, (long long)rec.parameterCount(), double(rec.bytes()) / 1e6, rec.convertMsPer1k);
    std::printf(
        "| B layer | A layers | lambda | R2 K | R2 V | cos K | cos V | rel err K | rel err V | attn cos |\n");
    std::printf(
        "|--------:|:---------|-------:|-----:|-----:|------:|------:|----------:|----------:|---------:|\n");
    const auto &t = rec.layerMetrics;
    for (size_t l = 0; l < rec.layers.size(); ++l) {
        std::string sources;
        for (int s : rec.layers[l].sourceLayers)
            sources += (sources.empty() ? "" : ",") + std::to_string(s);
        std::printf("| %7zu | %-8s | %6g | %.3f | %.3f | %.3f | %.3f | %9.3f | %9.3f | %8.4f |\n", l,
                    sources.c_str(), t.at(l, "lambda"), t.at(l, "r2_k"), t.at(l, "r2_v"), t.at(l, "cos_k"),
                    t.at(l, "cos_v"), t.at(l, "rel_k"), t.at(l, "rel_v"), t.at(l, "attn_cos"));
    }
    std::printf("\nlinear CKA of keys (rows: B layers, columns: A layers)\n");
    for (int r2 = 0; r2 < rec.ckaKeys.rows; ++r2) {
        std::printf("  B%-3d", r2);
        for (int c = 0; c < rec.ckaKeys.cols; ++c)
            std::printf(" %.2f", rec.ckaKeys.data[size_t(r2 * rec.ckaKeys.cols + c)]);
        std::printf("\n");
    }
    return 0;
}

} // namespace kvwb::app
