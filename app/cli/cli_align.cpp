#include "app/cli/cli_align.h"

#include "app/cli/cli_converter_options.h"
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

int cmdAlign(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"experiment", "Experiment file from `kvwb capture`.", "EXP.h5"});
    p.addOption({"select", "Source layers per target layer: proportional (default), topk or all.", "MODE",
                 "proportional"});
    p.addOption(
        {"k", "Source layers per target layer (default 1; topk default 8, capped at A's layers).", "K"});
    p.addOption({"lambda",
                 "Ridge lambda (relative to the mean feature variance), or 'auto' to choose per layer "
                 "on the validation prompts from 1e-4..1 (default 0.01).",
                 "L|auto", "0.01"});
    p.addOption({"per-head", "Map each B head only from the same head of A (needs equal kv-head counts)."});
    p.addOption({"family",
                 "Form of each map: ridge (default; y = xW + b), low-rank (reduced-rank ridge, needs --rank) "
                 "or mlp (ridge skip path plus a trained GELU branch).",
                 "ridge|low-rank|mlp", "ridge"});
    p.addOption({"rank", "low-rank: the rank of each map.", "R"});
    p.addOption({"hidden", "mlp: the branch's width (default 256).", "N", "256"});
    p.addOption({"epochs", "mlp: at most this many epochs (default 30).", "N", "30"});
    p.addOption({"batch", "mlp: rows per step (default 256).", "N", "256"});
    p.addOption({"learning-rate", "mlp: Adam's learning rate (default 1e-3).", "LR", "0.001"});
    p.addOption(
        {"patience", "mlp: stop a kind after N epochs without a validation gain (default 3).", "N", "3"});
    p.addOption({"max-train-tokens", "Calibration tokens (default: every training prompt).", "N"});
    p.addOption({"name", "Converter name under /converters (default 'default'; replaced if present).", "NAME",
                 "default"});
    p.addOption(
        {"attention-prompts", "Test prompts scored by attention-output cosine (default 32).", "N", "32"});
    p.addOption({"no-attention", "Do not load model B: skip the attention-output cosine."});
    p.addOption({"dry-run", "Fit and print, but do not store the converter."});
    p.addOption({"resume", "mlp: continue an interrupted fit of the same settings from its trained layers "
                           "(kept in EXP.h5.fit-NAME until the converter is stored)."});
    p.addOption({"json", "Print the result as JSON."});
    addSplitOptions(p);
    addModelOptions(p);
    addEngineOptions(p);
    parse(p, args,
          "Fit per-layer linear maps from model A's KV cache to model B's on an experiment file (ridge, "
          "split by prompt), score them on held-out prompts and store them in the file's /converters group.");
    if (!p.isSet("experiment"))
        throw UsageError{"--experiment is required"};
    const fs::path path = str(p.value("experiment"));
    if (!p.isSet("dry-run")) // the converter is stored in the file: checked before the fit, not after
        core::checkWritableOutput(path, "--experiment");
    gpu::AlignOptions o;
    o.name = str(p.value("name"));
    o.selection = parseSelection(p.value("select"));
    o.k = intOption(p, "k", o.selection == gpu::LayerSelection::TopK ? 8 : 1, 1); // at most A's layers
    if (p.value("lambda") == "auto")
        o.autoLambda = true;
    else
        o.lambda = doubleOption(p, "lambda", 0.01, 0.0, 1e6);
    o.perHead = p.isSet("per-head");
    {
        const auto family = core::parseConverterFamily(str(p.value("family")));
        if (!family)
            throw UsageError{"--family expects ridge, low-rank or mlp, got '" + str(p.value("family")) + "'"};
        o.family = *family;
    }
    if (o.family == core::ConverterFamily::LowRank && !p.isSet("rank"))
        throw UsageError{"--family low-rank needs --rank R"};
    if (o.family != core::ConverterFamily::LowRank && p.isSet("rank"))
        throw UsageError{"--rank applies to --family low-rank only"};
    o.rank = intOption(p, "rank", 0, 1);
    for (const char *flag : {"hidden", "epochs", "batch", "learning-rate", "patience"})
        if (p.isSet(flag) && o.family != core::ConverterFamily::Mlp)
            throw UsageError{fmt::format("--{} applies to --family mlp only", flag)};
    o.mlp.hidden = intOption(p, "hidden", 256, 1);
    o.mlp.epochs = intOption(p, "epochs", 30, 0);
    o.mlp.batch = intOption(p, "batch", 256, 1);
    o.mlp.learningRate = doubleOption(p, "learning-rate", 1e-3, 1e-9, 10.0);
    o.mlp.patience = intOption(p, "patience", 3, 1);
    o.maxTrainTokens = intOption(p, "max-train-tokens", 0, 2);
    o.validFraction = doubleOption(p, "valid-fraction", 0.15, 0.0, 0.9);
    o.testFraction = doubleOption(p, "test-fraction", 0.15, 0.0, 0.9);
    o.seed = uint64_t(intOption(p, "seed", 1, 0));
    o.attentionPrompts = intOption(p, "attention-prompts", 32, 1);
    const bool asJson = p.isSet("json");
    o.progress = [&](double f, const std::string &stage) {
        if (!asJson)
            std::fprintf(stderr, "\r%3.0f%% %-40s", 100 * f, stage.c_str());
        return !InterruptScope::interrupted();
    };
    std::unique_ptr<gpu::Model> b;
    InterruptScope ctrlC;
    if (p.isSet("resume") && (o.family != core::ConverterFamily::Mlp || p.isSet("dry-run")))
        throw UsageError{"--resume applies to --family mlp fits that store their converter (not --dry-run)"};
    const auto fit = jobs::runFit({path.string(), o, !p.isSet("dry-run"), p.isSet("resume")},
                                  [&](const core::ExperimentReader &file, std::vector<std::string> &) {
                                      if (!p.isSet("no-attention"))
                                          b = loadFileModel(file, core::ModelRole::B, p, loadOptions(p));
                                      return static_cast<const gpu::Model *>(b.get());
                                  });
    const auto &r = fit.result;
    const double fitMs = fit.fitMs;
    if (!asJson)
        std::fprintf(stderr, "\n");
    if (r.cancelled) {
        const auto dir = jobs::fitCheckpointDir(path.string(), o.name);
        if (o.family == core::ConverterFamily::Mlp && !p.isSet("dry-run") && fs::exists(dir))
            std::fprintf(stderr,
                         "cancelled: nothing stored; the trained layers are in %s, continue with --resume\n",
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
                          {"stored", !p.isSet("dry-run")},
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
        p.isSet("dry-run") ? "" : ", stored");
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
