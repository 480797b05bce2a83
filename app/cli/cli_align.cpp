#include "app/cli/cli_align.h"

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

using core::Clock;
using core::msSince;

// JSON number, or null for NaN (a metric that was not computed).
json num(double v)
{
    return std::isfinite(v) ? json(v) : json(nullptr);
}

void addModelOptions(QCommandLineParser &p)
{
    p.addOption({"model-a", "Model A (default: the path the experiment file records).", "PATH"});
    p.addOption({"model-b", "Model B (default: the path the experiment file records).", "PATH"});
}

// The file's model `role`, from --model-<role> or the recorded source path; Error(Config) when its
// weights are not the ones captured.
std::unique_ptr<gpu::Model> loadFileModel(const core::ExperimentReader &file, core::ModelRole role,
                                          const QCommandLineParser &p, const gpu::LoadOptions &o)
{
    const QString flag = role == core::ModelRole::A ? "model-a" : "model-b";
    const auto &info = file.model(role);
    const fs::path path = p.isSet(flag) ? fs::path(str(p.value(flag))) : fs::path(info.sourcePath);
    if (!fs::exists(path))
        throw core::Error(core::ErrorCode::Io,
                          fmt::format("{}: model {} was captured from {}, which does not exist; pass --{}",
                                      file.path().string(), core::roleLabel(role), path.string(), str(flag)));
    const auto ck = core::Checkpoint::open(path);
    if (ck.fingerprint() != info.weightsSha256)
        throw core::Error(
            core::ErrorCode::Config,
            fmt::format("{}: model {} at {} has weights fingerprint {}, the file was captured with {}",
                        file.path().string(), core::roleLabel(role), path.string(), ck.fingerprint(),
                        info.weightsSha256));
    return gpu::Model::load(ck, o);
}

gpu::LayerSelection parseSelection(const QString &s)
{
    if (const auto selection = gpu::parseLayerSelection(str(s)))
        return *selection;
    throw UsageError{"--select expects proportional, topk or all, got '" + str(s) + "'"};
}

std::vector<double> parseDoubles(const QString &text, const char *flag)
{
    std::vector<double> out;
    for (const QString &part : text.split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const double v = part.trimmed().toDouble(&ok);
        if (!ok || !(v >= 0))
            throw UsageError{
                fmt::format("{} expects comma-separated non-negative numbers, got '{}'", flag, str(part))};
        out.push_back(v);
    }
    if (out.empty())
        throw UsageError{fmt::format("{} is empty", flag)};
    return out;
}

std::vector<int64_t> parseTokenCounts(const QString &text)
{
    std::vector<int64_t> out;
    for (const QString &part : text.split(',', Qt::SkipEmptyParts)) {
        if (part.trimmed() == "all") {
            out.push_back(0);
            continue;
        }
        bool ok = false;
        const qlonglong v = part.trimmed().toLongLong(&ok);
        if (!ok || v < 2)
            throw UsageError{"--tokens expects comma-separated token counts >= 2 or 'all', got '" +
                             str(part) + "'"};
        out.push_back(v);
    }
    if (out.empty())
        throw UsageError{"--tokens is empty"};
    return out;
}

void addSplitOptions(QCommandLineParser &p)
{
    p.addOption({"valid-fraction", "Prompts held out to choose layers/lambda (default 0.15).", "F", "0.15"});
    p.addOption({"test-fraction", "Prompts held out for the metrics (default 0.15).", "F", "0.15"});
    p.addOption({"seed", "Split seed (default 1).", "S", "1"});
}

std::vector<json> tableJson(const core::MetricTable &t)
{
    std::vector<json> rows;
    for (const auto &r : t.rows) {
        json j;
        for (size_t c = 0; c < t.columns.size(); ++c)
            j[t.columns[c]] = num(r[c]);
        rows.push_back(j);
    }
    return rows;
}

json matrixJson(const core::Matrix &m)
{
    json rows = json::array();
    for (int r = 0; r < m.rows; ++r) {
        json row = json::array();
        for (int c = 0; c < m.cols; ++c)
            row.push_back(num(m.data[size_t(r) * size_t(m.cols) + size_t(c)]));
        rows.push_back(row);
    }
    return rows;
}

} // namespace

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

int cmdSweep(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"experiment", "Experiment file from `kvwb capture`.", "EXP.h5"});
    p.addOption({"select", "proportional (default), topk or all.", "MODE", "proportional"});
    p.addOption({"k", "Source-layer counts, comma-separated (default 1).", "LIST", "1"});
    p.addOption({"lambda", "Lambdas, comma-separated (default 0.01).", "LIST", "0.01"});
    p.addOption({"tokens",
                 "Calibration token counts, comma-separated, 'all' for every training prompt "
                 "(default all).",
                 "LIST", "all"});
    p.addOption({"per-head", "Head-matched maps (needs equal kv-head counts)."});
    p.addOption(
        {"name", "Table name under /sweeps (default 'sweep'; replaced if present).", "NAME", "sweep"});
    p.addOption(
        {"attention-prompts", "Test prompts scored by attention-output cosine (default 16).", "N", "16"});
    p.addOption({"no-attention", "Do not load model B: skip the attention-output cosine."});
    p.addOption({"json", "Print the table as JSON."});
    addSplitOptions(p);
    addModelOptions(p);
    addEngineOptions(p);
    parse(p, args,
          "Fit converters for every combination of k, lambda and calibration-token count on one split and "
          "store the held-out scores as a table under /sweeps.");
    if (!p.isSet("experiment"))
        throw UsageError{"--experiment is required"};
    const fs::path path = str(p.value("experiment"));
    std::optional<core::ExperimentReader> reader(core::ExperimentReader::open(path));
    const core::ExperimentReader &file = *reader;
    gpu::SweepOptions o;
    o.selection = parseSelection(p.value("select"));
    const int layersA = file.model(core::ModelRole::A).config.numLayers;
    for (int k : parseIdList(p.value("k"), "--k")) {
        if (k < 1 || k > layersA)
            throw UsageError{fmt::format("--k: {} is outside 1..{} (model A's layers)", k, layersA)};
        o.ks.push_back(k);
    }
    o.ks.erase(o.ks.begin()); // the default {1} from SweepOptions
    o.lambdas = parseDoubles(p.value("lambda"), "--lambda");
    o.trainTokens = parseTokenCounts(p.value("tokens"));
    o.perHead = p.isSet("per-head");
    o.validFraction = doubleOption(p, "valid-fraction", 0.15, 0.0, 0.9);
    o.testFraction = doubleOption(p, "test-fraction", 0.15, 0.0, 0.9);
    o.seed = uint64_t(intOption(p, "seed", 1, 0));
    o.attentionPrompts = intOption(p, "attention-prompts", 16, 1);
    const bool asJson = p.isSet("json");
    o.progress = [&](double f, const std::string &stage) {
        if (!asJson)
            std::fprintf(stderr, "\r%3.0f%% %-40s", 100 * f, stage.c_str());
        return !InterruptScope::interrupted();
    };
    std::unique_ptr<gpu::Model> b;
    if (!p.isSet("no-attention"))
        b = loadFileModel(file, core::ModelRole::B, p, loadOptions(p));
    InterruptScope ctrlC;
    const auto sweep = gpu::sweepAlignment(file, o, b.get());
    const auto &table = sweep.table;
    const auto &warnings = sweep.warnings;
    if (!asJson)
        std::fprintf(stderr, "\n");
    if (sweep.cancelled) {
        std::fprintf(stderr, "cancelled: nothing stored\n");
        return 130;
    }
    const json settings = {{"select", gpu::layerSelectionName(o.selection)},
                           {"k", o.ks},
                           {"lambda", o.lambdas},
                           {"tokens", o.trainTokens},
                           {"per_head", o.perHead},
                           {"valid_fraction", o.validFraction},
                           {"test_fraction", o.testFraction},
                           {"seed", o.seed}};
    const std::string name = str(p.value("name"));
    reader.reset();
    core::saveTable(path, name, table, settings.dump());
    for (const auto &w : warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (asJson) {
        std::printf("%s\n", json{{"experiment", path.string()},
                                 {"table", name},
                                 {"settings", settings},
                                 {"rows", tableJson(table)}}
                                .dump(2, ' ', false, json::error_handler_t::replace)
                                .c_str());
        return 0;
    }
    std::printf("%s: sweep '%s' (%s%s), means over B's layers on the test prompts\n\n", path.c_str(),
                name.c_str(), gpu::layerSelectionName(o.selection), o.perHead ? ", per head" : "");
    std::printf("|  k | lambda | calib tokens | R2 K | R2 V | cos K | cos V | attn cos |\n");
    std::printf("|---:|-------:|-------------:|-----:|-----:|------:|------:|---------:|\n");
    for (size_t i = 0; i < table.rows.size(); ++i)
        std::printf("| %2.0f | %6g | %12.0f | %.3f | %.3f | %.3f | %.3f | %8.4f |\n", table.at(i, "k"),
                    table.at(i, "lambda"), table.at(i, "train_tokens"), table.at(i, "r2_k"),
                    table.at(i, "r2_v"), table.at(i, "cos_k"), table.at(i, "cos_v"), table.at(i, "attn_cos"));
    return 0;
}

// `kvwb compare --handoff`: conversations served by A for their first turns and continued by B from
// A's converted cache, per turn against B from scratch (docs/transfer.md, "Multi-turn hand-off").
int compareHandoff(const QCommandLineParser &p, const fs::path &path, const core::ExperimentReader &file,
                   const core::ConverterRecord &record)
{
    jobs::HandoffSettings settings;
    settings.handoffTurn = intOption(p, "handoff-turn", 1, 1);
    settings.maxTurns = intOption(p, "turns", 0, 0);
    settings.maxTokens = intOption(p, "max-tokens", 32, 1);
    if (settings.maxTurns > 0 && settings.maxTurns <= settings.handoffTurn)
        throw UsageError{fmt::format("--turns {} leaves no turn after the hand-off at turn {}",
                                     settings.maxTurns, settings.handoffTurn)};
    std::vector<std::string> warnings;
    const fs::path workload = str(p.value("handoff"));
    auto read = core::readWorkloadJsonl(workload);
    for (const auto &w : read.warnings.messages())
        warnings.push_back(w);
    auto conversations = jobs::conversationsOf(read.requests, warnings);
    const auto flushWarnings = [&] {
        for (const auto &w : warnings)
            std::fprintf(stderr, "warning: %s\n", w.c_str());
        warnings.clear();
    };
    if (p.isSet("limit"))
        conversations.resize(std::min(conversations.size(), size_t(intOption(p, "limit", 0, 1))));
    if (conversations.empty())
        flushWarnings();
    if (conversations.empty())
        throw core::Error(
            core::ErrorCode::InvalidArgument,
            fmt::format("{}: no conversation (requests of one tenant and user whose prompts grow "
                        "turn by turn, as `kvwb workload sharegpt` writes them)",
                        workload.string()));
    const auto lo = loadOptions(p);
    auto a = loadFileModel(file, core::ModelRole::A, p, lo);
    auto b = loadFileModel(file, core::ModelRole::B, p, lo);
    const auto conv = gpu::Converter::create(record, *a, *b);
    const auto tokA = loadModelTokenizer(*a), tokB = loadModelTokenizer(*b);
    const bool asJson = p.isSet("json");
    InterruptScope ctrlC;
    json rows = json::array();
    // per turn number: the conversations' mean KL and top-1, by conversation index
    std::map<int, std::map<size_t, std::pair<double, double>>> byTurn;
    int done = 0;
    for (size_t i = 0; i < conversations.size() && !InterruptScope::interrupted(); ++i) {
        jobs::HandoffOutcome o;
        try {
            o = jobs::runHandoff(*a, *tokA, *b, *tokB, conv, conversations[i], settings);
        } catch (const core::Error &e) {
            if (e.code() != core::ErrorCode::InvalidArgument)
                throw;
            warnings.push_back(fmt::format("conversation {} skipped: {}", conversations[i].name, e.what()));
            continue;
        }
        ++done;
        json turns = json::array();
        for (const auto &t : o.turns) {
            byTurn[t.turn][i] = {t.meanKl, t.top1};
            turns.push_back({{"turn", t.turn},
                             {"answer_tokens", t.answerTokens},
                             {"kl", t.meanKl},
                             {"kl_max", *std::max_element(t.kl.begin(), t.kl.end())},
                             {"top1", t.top1}});
        }
        rows.push_back({{"conversation", conversations[i].name},
                        {"turns_available", conversations[i].prompts.size()},
                        {"transcript_tokens", o.transcriptTokens},
                        {"handoff_tokens", o.handoffTokens},
                        {"turns", turns}});
        if (!asJson)
            std::fprintf(stderr, "\rhanded off %d/%zu conversations", done, conversations.size());
    }
    if (!asJson && done > 0)
        std::fprintf(stderr, "\n");
    flushWarnings();
    if (done == 0)
        throw core::Error(core::ErrorCode::InvalidArgument, "no conversation could be compared");
    const auto intervalJson = [](const std::optional<core::Interval> &i) {
        return i ? json{{"estimate", num(i->estimate)}, {"lo", num(i->lo)}, {"hi", num(i->hi)}}
                 : json(nullptr);
    };
    const auto interval = [](auto &&f) -> std::optional<core::Interval> {
        try {
            return f();
        } catch (const core::Error &) { // fewer than 2 conversations, or a value that is not finite
            return std::nullopt;
        }
    };
    const int firstTurn = settings.handoffTurn + 1;
    struct TurnRow
    {
        int turn = 0, conversations = 0;
        double kl = 0, top1 = 0;
        std::optional<core::Interval> klCi, top1Ci, change;
    };
    std::vector<TurnRow> table;
    json summaryTurns = json::array();
    for (const auto &[turn, perConversation] : byTurn) {
        TurnRow row;
        row.turn = turn;
        row.conversations = int(perConversation.size());
        std::vector<double> kl, top1, now, before;
        for (const auto &[i, v] : perConversation) {
            kl.push_back(v.first);
            top1.push_back(v.second);
            // paired with the same conversation's first turn after the hand-off
            const auto &first = byTurn[firstTurn];
            if (turn != firstTurn && first.count(i)) {
                now.push_back(v.first);
                before.push_back(first.at(i).first);
            }
        }
        row.kl = std::accumulate(kl.begin(), kl.end(), 0.0) / double(kl.size());
        row.top1 = std::accumulate(top1.begin(), top1.end(), 0.0) / double(top1.size());
        row.klCi = interval([&] { return core::meanInterval(kl); });
        row.top1Ci = interval([&] { return core::meanInterval(top1); });
        if (turn != firstTurn)
            row.change = interval([&] { return core::meanDifference(now, before); });
        summaryTurns.push_back({{"turn", turn},
                                {"conversations", row.conversations},
                                {"kl", row.kl},
                                {"top1", row.top1},
                                {"kl_ci", intervalJson(row.klCi)},
                                {"top1_ci", intervalJson(row.top1Ci)},
                                {"kl_change_vs_first", intervalJson(row.change)}});
        table.push_back(row);
    }
    if (asJson) {
        const json summary = {{"conversations", done},
                              {"handoff_turn", settings.handoffTurn},
                              {"level", 0.95},
                              {"resamples", core::BootstrapOptions{}.resamples},
                              {"turns", summaryTurns}};
        std::printf("%s\n", json{{"experiment", path.string()},
                                 {"converter", record.name},
                                 {"workload", workload.string()},
                                 {"handoff_turn", settings.handoffTurn},
                                 {"max_turns", settings.maxTurns},
                                 {"max_tokens", settings.maxTokens},
                                 {"device", gpu::deviceName(lo.device)},
                                 {"conversations", rows},
                                 {"summary", summary}}
                                .dump(2, ' ', false, json::error_handler_t::replace)
                                .c_str());
        return 0;
    }
    std::printf("\n%d conversations, converter '%s': A serves turns 1..%d, B continues from A's converted "
                "cache; teacher-forced on each conversation, B's scratch answer to its last turn (%d tokens, "
                "greedy)\n\n",
                done, record.name.c_str(), settings.handoffTurn, settings.maxTokens);
    std::printf(
        "| turn | conversations | KL(scratch || transfer), 95%% CI | top-1, 95%% CI | KL minus turn %d's, "
        "95%% CI |\n|--:|--:|--:|--:|--:|\n",
        firstTurn);
    const auto cell = [](const std::optional<core::Interval> &i, double plain, int digits) {
        return i ? core::formatInterval(*i, digits) : fmt::format("{:.{}f}", plain, digits);
    };
    for (const auto &row : table)
        std::printf("| %d | %d | %s | %s | %s |\n", row.turn, row.conversations,
                    cell(row.klCi, row.kl, 4).c_str(), cell(row.top1Ci, row.top1, 3).c_str(),
                    row.turn == firstTurn ? ""
                    : row.change          ? core::formatInterval(*row.change, 4).c_str()
                                          : "n/a");
    return 0;
}

int cmdCompare(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"experiment", "Experiment file holding the converter.", "EXP.h5"});
    p.addOption({"converter", "Converter name under /converters (default 'default').", "NAME", "default"});
    p.addOption(
        {"good-kl",
         "For the gate's precision and recall: a transfer is good when its KL to scratch is at most X "
         "nats/token (default 0.1).",
         "X", "0.1"});
    p.addOption({"min-precision",
                 "For each gate signal, report the threshold with the highest recall at precision >= P "
                 "(default 0.9).",
                 "P", "0.9"});
    p.addOption({"baselines",
                 "Also run the baselines on the same prompts: the raw source KV (A's layer at the same depth "
                 "unchanged, when the KV widths match) and a random map of the converter's shape; the "
                 "differences with paired bootstrap 95% intervals.",
                 ""});
    p.addOption({"versus",
                 "A second converter run on the same prompts: the differences (this one minus it) with "
                 "paired bootstrap 95% intervals over the prompts.",
                 "NAME"});
    p.addOption({"prompt", "One prompt.", "STR"});
    p.addOption({"prompts", "Prompts: text lines or JSONL ('prompt' or 'text').", "FILE"});
    p.addOption({"held-out", "The converter's own test prompts from the experiment file."});
    p.addOption(
        {"handoff",
         "Multi-turn hand-off: the conversations of a workload file (`kvwb workload sharegpt`), A serving "
         "the first turns and B continuing from A's converted cache; KL and top-1 per turn against B "
         "from scratch.",
         "W.jsonl"});
    p.addOption({"handoff-turn", "With --handoff: A serves turns 1..K, B the rest (default 1).", "K", "1"});
    p.addOption({"turns", "With --handoff: at most N turns of each conversation (default all).", "N"});
    p.addOption({"limit", "At most N prompts (with --handoff: conversations).", "N"});
    p.addOption({"max-tokens", "Tokens to generate per path (default 32).", "N", "32"});
    p.addOption({"gate-tail", "Prompt positions B recomputes for the quality gate (default 4).", "N", "4"});
    p.addOption({"gate-signal",
                 "Gate signal: tail_kl (default), kv_cos, attn_cos or nll (see docs/transfer.md).", "S",
                 "tail_kl"});
    p.addOption({"gate-threshold",
                 "Gate passes when tail_kl or nll <= T, or kv_cos or attn_cos >= T (default 0.1 for tail_kl, "
                 "0.9 for kv_cos and attn_cos, 3 for nll).",
                 "T"});
    p.addOption({"save-samples",
                 "Store every compared prompt (texts, per-token probabilities and KL, timings, gate) in the "
                 "experiment file as /comparisons/NAME, for the workbench and reports.",
                 "NAME"});
    p.addOption({"align-policy",
                 "Prompts A and B tokenise differently: which overlapping A token each B token's row is "
                 "converted from: last (default), first or longest (docs/transfer.md).",
                 "POLICY", "last"});
    p.addOption({"json", "Print per-prompt results and the summary as JSON."});
    addPromptFileOptions(p);
    addModelOptions(p);
    addEngineOptions(p);
    parse(p, args,
          "Side by side: B from scratch, B from A's converted cache, and A itself; KL and top-1 agreement "
          "(teacher-forced on B's scratch continuation), ROUGE-L, first divergent token, TTFT of each path "
          "and the quality gate's decision.");
    if (!p.isSet("experiment"))
        throw UsageError{"--experiment is required"};
    if (int(p.isSet("prompt")) + int(p.isSet("prompts")) + int(p.isSet("held-out")) +
            int(p.isSet("handoff")) !=
        1)
        throw UsageError{"give exactly one of --prompt, --prompts, --held-out or --handoff"};
    if (!p.isSet("handoff") && (p.isSet("handoff-turn") || p.isSet("turns")))
        throw UsageError{"--handoff-turn and --turns go with --handoff"};
    if (p.isSet("handoff"))
        for (const char *other : {"baselines", "versus", "save-samples"})
            if (p.isSet(other))
                throw UsageError{fmt::format("--{} does not go with --handoff", other)};
    const fs::path path = str(p.value("experiment"));
    std::optional<core::ExperimentReader> reader(core::ExperimentReader::open(path));
    const auto &file = *reader;
    if (p.isSet("save-samples")) { // before the run, not after it
        core::checkComparisonName(path, str(p.value("save-samples")));
        core::checkWritableOutput(path, "--save-samples");
    }
    const auto record = core::loadConverters(path, str(p.value("converter")));
    if (p.isSet("handoff"))
        return compareHandoff(p, path, file, record);
    std::optional<core::ConverterRecord> versus;
    if (p.isSet("versus"))
        versus = core::loadConverters(path, str(p.value("versus")));
    std::vector<std::string> warnings;
    std::vector<std::string> texts;
    if (p.isSet("prompt"))
        texts.push_back(str(p.value("prompt")));
    else if (p.isSet("held-out"))
        for (int i : record.testPrompts)
            texts.push_back(file.prompt(i).text);
    else
        for (auto &t : readPromptFile(p, str(p.value("prompts")), warnings))
            texts.push_back(std::move(t.text));
    if (p.isSet("limit"))
        texts.resize(std::min(texts.size(), size_t(intOption(p, "limit", 0, 1))));
    if (versus && p.isSet("held-out")) { // the second converter must not have been fitted on them
        std::vector<int> seen(versus->trainPrompts.begin(), versus->trainPrompts.end());
        seen.insert(seen.end(), versus->validPrompts.begin(), versus->validPrompts.end());
        int overlap = 0;
        for (size_t i = 0; i < texts.size(); ++i)
            overlap += std::count(seen.begin(), seen.end(), record.testPrompts[i]) > 0;
        if (overlap > 0)
            warnings.push_back(fmt::format("{} of the {} held-out prompts of '{}' were fitting or validation "
                                           "prompts of '{}': the comparison favours '{}'",
                                           overlap, texts.size(), record.name, versus->name, versus->name));
    }
    gpu::GenerateOptions go;
    go.maxTokens = intOption(p, "max-tokens", 32, 1);
    const auto gs = gpu::parseGateSignal(str(p.value("gate-signal")));
    if (!gs)
        throw UsageError{"--gate-signal expects tail_kl, kv_cos, attn_cos or nll, got '" +
                         str(p.value("gate-signal")) + "'"};
    const auto policy = core::parseAlignPolicy(str(p.value("align-policy")));
    if (!policy)
        throw UsageError{"--align-policy expects first, last or longest, got '" +
                         str(p.value("align-policy")) + "'"};
    const core::AlignPolicy alignPolicy = *policy;
    gpu::CompareOptions co;
    co.maxTokens = go.maxTokens;
    co.gateSignal = *gs;
    co.gateTail = intOption(p, "gate-tail", 4, 1);
    co.gateThreshold = doubleOption(p, "gate-threshold", gpu::defaultGateThreshold(*gs), -1.0, 1e9);
    const double goodKl = doubleOption(p, "good-kl", 0.1, 0.0, 1e9); // read before the run, not after it
    const double minPrecision = doubleOption(p, "min-precision", 0.9, 0.0, 1.0);
    const auto gateSignal = co.gateSignal;
    const double threshold = co.gateThreshold;
    const int tail = co.gateTail;
    std::vector<core::ComparisonSample> samples;
    const auto lo = loadOptions(p);
    auto a = loadFileModel(file, core::ModelRole::A, p, lo);
    auto b = loadFileModel(file, core::ModelRole::B, p, lo);
    const auto conv = gpu::Converter::create(record, *a, *b);
    const auto tokA = loadModelTokenizer(*a), tokB = loadModelTokenizer(*b);
    const jobs::ComparePair pair{*a, *tokA, *b, *tokB, conv, record.name};
    // The other converters run on every prompt: --versus, then the baselines.
    struct Other
    {
        std::string key; // "versus", "raw_source_kv", "random_map"
        core::ConverterRecord record;
        gpu::Converter converter;
        std::vector<double> kls, top1s, rouges; // prompt by prompt
    };
    std::vector<Other> others;
    if (versus)
        others.push_back({"versus", *versus, gpu::Converter::create(*versus, *a, *b), {}, {}, {}});
    if (p.isSet("baselines")) {
        const auto &ca = file.model(core::ModelRole::A).config, &cb = file.model(core::ModelRole::B).config;
        if (auto raw = gpu::rawSourceRecord(record, ca.numLayers, ca.numKvHeads * ca.headDim, cb.numLayers,
                                            cb.numKvHeads * cb.headDim))
            others.push_back({"raw_source_kv", *raw, gpu::Converter::create(*raw, *a, *b), {}, {}, {}});
        else
            warnings.push_back(fmt::format("no raw-source-KV baseline: A's KV rows are {} wide, B's {}",
                                           ca.numKvHeads * ca.headDim, cb.numKvHeads * cb.headDim));
        const auto random = gpu::randomMapRecord(record, 1);
        others.push_back({"random_map", random, gpu::Converter::create(random, *a, *b), {}, {}, {}});
    }
    const bool asJson = p.isSet("json");
    InterruptScope ctrlC;
    json rows = json::array();
    std::vector<double> kls, top1s, rouges, rougesA, ttftScratch, ttftTransfer, ttftCached, kvCos, tailKls,
        nlls, gatedKl, klPassed, klFailed, klFloor, top1Floor, ttftGated, attnCos;
    int identical = 0, passed = 0, done = 0, crossTokenizer = 0;
    bool warmed = false;
    for (size_t i = 0; i < texts.size() && !InterruptScope::interrupted(); ++i) {
        gpu::TokenPairing tokens;
        try {
            tokens = gpu::comparablePair(texts[i], *a, *tokA, *b, *tokB, go.maxTokens, alignPolicy);
        } catch (const core::Error &e) {
            warnings.push_back(fmt::format("prompt {} skipped: {}", i, e.what()));
            continue;
        }
        co.warmUp = !warmed; // first-call allocations would otherwise land on prompt 0's timings
        warmed = true;
        const auto outcome = jobs::compareOne(pair, texts[i], tokens, co);
        crossTokenizer += tokens.crossTokenizer() ? 1 : 0;
        const auto &sample = outcome.sample;
        const auto &gate = outcome.gate;
        samples.push_back(sample);
        for (auto &other : others) {
            const jobs::ComparePair run{*a, *tokA, *b, *tokB, other.converter, other.record.name};
            const auto o = jobs::compareOne(run, texts[i], tokens, co);
            other.kls.push_back(o.sample.meanKl);
            other.top1s.push_back(o.sample.top1);
            other.rouges.push_back(o.sample.rougeL);
        }
        const double kl = sample.meanKl;
        kls.push_back(kl);
        klFloor.push_back(sample.klNoPrefix);
        top1Floor.push_back(outcome.top1NoPrefix);
        top1s.push_back(sample.top1);
        rouges.push_back(sample.rougeL);
        rougesA.push_back(core::rougeL(sample.a.text, sample.scratch.text));
        ttftScratch.push_back(sample.scratch.ttftMs);
        ttftTransfer.push_back(sample.transfer.ttftMs);
        ttftCached.push_back(outcome.ttftCachedMs);
        ttftGated.push_back(outcome.ttftGatedMs);
        kvCos.push_back(gate.kvCos);
        tailKls.push_back(gate.tailKl);
        nlls.push_back(gate.nll);
        attnCos.push_back(gate.attnCos);
        (gate.passed ? klPassed : klFailed).push_back(kl);
        gatedKl.push_back(gate.passed ? kl : 0.0);
        identical += sample.firstDivergence < 0 ? 1 : 0;
        passed += gate.passed ? 1 : 0;
        ++done;
        const json row = {
            {"prompt", texts[i]},
            {"prompt_tokens", tokens.idsB.size()},
            {"prompt_tokens_a", tokens.idsA.size()},
            {"token_alignment", tokens.crossTokenizer() ? core::alignPolicyName(tokens.policy) : "none"},
            {"text_scratch", sample.scratch.text},
            {"text_transfer", sample.transfer.text},
            {"text_a", sample.a.text},
            {"first_divergence", sample.firstDivergence},
            {"kl", kl},
            {"kl_max", sample.transfer.kl.empty()
                           ? 0.0
                           : *std::max_element(sample.transfer.kl.begin(), sample.transfer.kl.end())},
            {"top1", sample.top1},
            {"kl_no_prefix", sample.klNoPrefix},
            {"top1_no_prefix", outcome.top1NoPrefix},
            {"rouge_l", rouges.back()},
            {"rouge_l_a", rougesA.back()},
            {"ttft_ms_scratch", sample.scratch.ttftMs},
            {"ttft_ms_transfer", sample.transfer.ttftMs},
            {"ttft_ms_transfer_cached", outcome.ttftCachedMs},
            {"ttft_ms_gated", outcome.ttftGatedMs},
            {"prefill_ms_a", sample.sourcePrefillMs},
            {"convert_ms", sample.convertMs},
            {"speedup", sample.scratch.ttftMs / sample.transfer.ttftMs},
            {"speedup_cached", sample.scratch.ttftMs / outcome.ttftCachedMs},
            {"gate",
             {{"signal", gpu::gateSignalName(gate.signal)},
              {"value", gate.value},
              {"kv_cos", gate.kvCos},
              {"tail_kl", gate.tailKl},
              {"nll", gate.nll},
              {"attn_cos", gate.attnCos},
              {"tail", gate.tail},
              {"threshold", gate.threshold},
              {"passed", gate.passed},
              {"decision", gate.passed ? "transfer" : "fallback_prefill"},
              {"ms", gate.ms}}}};
        rows.push_back(row);
        if (!asJson) {
            if (texts.size() == 1)
                std::printf("prompt: %s\n\nB scratch : %s\nB transfer: %s\nA itself  : %s\n\n",
                            texts[i].c_str(), sample.scratch.text.c_str(), sample.transfer.text.c_str(),
                            sample.a.text.c_str());
            else
                std::fprintf(stderr, "\rcompared %d/%zu prompts", done, texts.size());
        }
        // the gate's decision, logged for every prompt
        const bool higherIsBetter = core::gateHigherIsBetter(gateSignal);
        fmt::print(stderr, "{}gate: prompt {} {} {:.4f} {} {:.4f} -> {}\n",
                   asJson || texts.size() == 1 ? "" : "\n", i, gpu::gateSignalName(gateSignal), gate.value,
                   gate.passed ? (higherIsBetter ? ">=" : "<=") : (higherIsBetter ? "<" : ">"), threshold,
                   gate.passed ? "use the converted cache" : "fall back to B's own prefill");
    }
    if (done == 0)
        throw core::Error(core::ErrorCode::InvalidArgument, "no prompt could be compared");
    if (p.isSet("save-samples")) {
        reader.reset(); // the store opens the file for writing
        jobs::storeComparisons(path, str(p.value("save-samples")), samples, false);
    }
    auto mean = [](const std::vector<double> &v) {
        return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    };
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    // Against the baselines, with paired bootstrap 95% intervals over the prompts (null with
    // fewer than 2 prompts or a value that is not finite).
    const auto interval = [&](auto &&f) -> std::optional<core::Interval> {
        if (done < 2)
            return std::nullopt;
        try {
            return f();
        } catch (const core::Error &) {
            return std::nullopt;
        }
    };
    const auto klGapClosed = interval([&] { return core::gapClosed(kls, klFloor); });
    const auto top1Gain = interval([&] { return core::meanDifference(top1s, top1Floor); });
    const auto rougeGain = interval([&] { return core::meanDifference(rouges, rougesA); });
    const auto intervalJson = [](const std::optional<core::Interval> &i) {
        return i ? json{{"estimate", num(i->estimate)}, {"lo", num(i->lo)}, {"hi", num(i->hi)}}
                 : json(nullptr);
    };
    // each other converter: its means and this converter minus it, with paired intervals
    struct OtherSummary
    {
        std::optional<core::Interval> kl, top1, rouge;
    };
    std::vector<OtherSummary> otherSummaries;
    json otherJson = json::object();
    for (const auto &o : others) {
        OtherSummary d;
        if (o.kls.size() == size_t(done)) {
            d.kl = interval([&] { return core::meanDifference(kls, o.kls); });
            d.top1 = interval([&] { return core::meanDifference(top1s, o.top1s); });
            d.rouge = interval([&] { return core::meanDifference(rouges, o.rouges); });
        }
        otherJson[o.key] = {{"converter", o.record.name},
                            {"kl", o.kls.empty() ? json(nullptr) : json(mean(o.kls))},
                            {"top1", o.top1s.empty() ? json(nullptr) : json(mean(o.top1s))},
                            {"rouge_l", o.rouges.empty() ? json(nullptr) : json(mean(o.rouges))},
                            {"kl_difference", intervalJson(d.kl)},
                            {"top1_difference", intervalJson(d.top1)},
                            {"rouge_l_difference", intervalJson(d.rouge)}};
        otherSummaries.push_back(d);
    }
    const auto otherOf = [&](const char *key) {
        return otherJson.contains(key) ? otherJson[key] : json(nullptr);
    };
    // the gate's signals against "KL <= good-kl": precision and recall at the threshold in use, and
    // for every signal the threshold with the highest recall at the wanted precision
    std::vector<bool> good;
    for (double kl : kls)
        good.push_back(kl <= goodKl);
    const auto valuesOf = [&](gpu::GateSignal sig) -> const std::vector<double> * {
        switch (sig) {
        case gpu::GateSignal::KvCos:
            return &kvCos;
        case gpu::GateSignal::TailKl:
            return &tailKls;
        case gpu::GateSignal::Nll:
            return &nlls;
        case gpu::GateSignal::AttnCos:
            return &attnCos;
        }
        return &tailKls;
    };
    std::vector<std::pair<gpu::GateSignal, const std::vector<double> *>> signals;
    for (gpu::GateSignal sig : core::kGateSignals)
        signals.emplace_back(sig, valuesOf(sig));
    const auto pointJson = [](const std::optional<core::GatePoint> &g) {
        return g ? json{{"threshold", num(g->threshold)},
                        {"pass_rate", num(g->passRate)},
                        {"precision", num(g->precision)},
                        {"recall", num(g->recall)}}
                 : json(nullptr);
    };
    json perSignal = json::object();
    std::optional<core::GatePoint> atThreshold;
    std::vector<std::pair<std::string, std::optional<core::GatePoint>>> bestPerSignal;
    for (const auto &[sig, values] : signals) {
        const bool higher = core::gateHigherIsBetter(sig);
        std::vector<double> finite;
        std::vector<bool> goodFinite;
        for (size_t i = 0; i < values->size(); ++i)
            if (std::isfinite((*values)[i])) {
                finite.push_back((*values)[i]);
                goodFinite.push_back(good[i]);
            }
        const auto curve = core::gateCurve(finite, goodFinite, higher);
        const auto best = core::bestThreshold(curve, minPrecision);
        json points = json::array();
        for (const auto &pt : curve)
            points.push_back(pointJson(pt));
        if (sig == gateSignal)
            atThreshold = core::gatePoint(finite, goodFinite, threshold, higher);
        perSignal[gpu::gateSignalName(sig)] = {{"curve", points}, {"best", pointJson(best)}};
        bestPerSignal.emplace_back(gpu::gateSignalName(sig), best);
    }
    const json gateQuality = {
        {"good_kl", goodKl},
        {"good_rate", double(std::count(good.begin(), good.end(), true)) / double(done)},
        {"min_precision", minPrecision},
        {"at_threshold", pointJson(atThreshold)},
        {"signals", perSignal}};
    // lower KL should go with a higher signal: report the correlations as they are
    const json summary = {{"prompts", done},
                          {"prompts_token_aligned", crossTokenizer},
                          {"align_policy", core::alignPolicyName(alignPolicy)},
                          {"versus", otherOf("versus")},
                          {"baselines",
                           {{"level", 0.95},
                            {"resamples", core::BootstrapOptions{}.resamples},
                            {"kl_gap_closed_vs_no_prefix", intervalJson(klGapClosed)},
                            {"top1_gain_vs_no_prefix", intervalJson(top1Gain)},
                            {"rouge_l_gain_vs_a", intervalJson(rougeGain)},
                            {"raw_source_kv", otherOf("raw_source_kv")},
                            {"random_map", otherOf("random_map")}}},
                          {"kl", mean(kls)},
                          {"top1", mean(top1s)},
                          {"kl_no_prefix", mean(klFloor)},
                          {"top1_no_prefix", mean(top1Floor)},
                          {"rouge_l", mean(rouges)},
                          {"rouge_l_a", mean(rougesA)},
                          {"identical_outputs", double(identical) / done},
                          {"ttft_ms_scratch", median(ttftScratch)},
                          {"ttft_ms_transfer", median(ttftTransfer)},
                          {"ttft_ms_transfer_cached", median(ttftCached)},
                          {"ttft_ms_gated", median(ttftGated)},
                          {"speedup", median(ttftScratch) / median(ttftTransfer)},
                          {"speedup_cached", median(ttftScratch) / median(ttftCached)},
                          {"gate",
                           {{"signal", gpu::gateSignalName(gateSignal)},
                            {"threshold", threshold},
                            {"tail", tail},
                            {"pass_rate", double(passed) / done},
                            {"quality", gateQuality},
                            {"kl_gated", mean(gatedKl)},
                            {"kl_passed", klPassed.empty() ? json(nullptr) : json(mean(klPassed))},
                            {"kl_failed", klFailed.empty() ? json(nullptr) : json(mean(klFailed))},
                            {"spearman_kv_cos_kl", num(core::spearman(kvCos, kls))},
                            {"spearman_tail_kl_kl", num(core::spearman(tailKls, kls))},
                            {"spearman_nll_kl", num(core::spearman(nlls, kls))},
                            {"spearman_attn_cos_kl", num(core::spearman(attnCos, kls))},
                            {"pearson_kv_cos_kl", num(core::pearson(kvCos, kls))},
                            {"pearson_tail_kl_kl", num(core::pearson(tailKls, kls))},
                            {"pearson_nll_kl", num(core::pearson(nlls, kls))},
                            {"pearson_attn_cos_kl", num(core::pearson(attnCos, kls))}}}};
    for (const auto &w : warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (asJson) {
        std::printf("%s\n", json{{"experiment", path.string()},
                                 {"converter", record.name},
                                 {"max_tokens", go.maxTokens},
                                 {"device", gpu::deviceName(lo.device)},
                                 {"prompts", rows},
                                 {"summary", summary}}
                                .dump(2, ' ', false, json::error_handler_t::replace)
                                .c_str());
        return 0;
    }
    std::printf("\n%d prompts, converter '%s', %d tokens each (greedy)\n\n", done, record.name.c_str(),
                go.maxTokens);
    std::printf("| metric | value |\n|:--|--:|\n");
    std::printf("| KL(scratch || transfer), nats/token | %.4f |\n", mean(kls));
    std::printf("| top-1 agreement | %.3f |\n", mean(top1s));
    std::printf("| floor: KL / top-1 with no prefix at all | %.4f / %.3f |\n", mean(klFloor),
                mean(top1Floor));
    std::printf("| ROUGE-L transfer vs scratch | %.3f |\n", mean(rouges));
    std::printf("| ROUGE-L A vs B scratch | %.3f |\n", mean(rougesA));
    const auto cell = [](const std::optional<core::Interval> &i) {
        return i ? core::formatInterval(*i) : std::string("n/a (fewer than 2 prompts)");
    };
    std::printf("| KL gap closed vs no prefix, 1 - KL / KL(no prefix), 95%% CI over prompts | %s |\n",
                cell(klGapClosed).c_str());
    std::printf("| top-1 gain over no prefix, 95%% CI | %s |\n", cell(top1Gain).c_str());
    std::printf("| ROUGE-L gain over answering with A, 95%% CI | %s |\n", cell(rougeGain).c_str());
    for (size_t k = 0; k < others.size(); ++k) {
        const auto &o = others[k];
        const auto &d = otherSummaries[k];
        if (o.kls.size() != size_t(done))
            continue;
        const char *what = o.key == "versus"          ? ""
                           : o.key == "raw_source_kv" ? "baseline, raw source KV: "
                                                      : "baseline, random map: ";
        std::printf("| %s'%s': KL / top-1 / ROUGE-L | %.4f / %.3f / %.3f |\n", what, o.record.name.c_str(),
                    mean(o.kls), mean(o.top1s), mean(o.rouges));
        std::printf("| KL minus '%s' (negative: this one is closer to scratch), 95%% CI | %s |\n",
                    o.record.name.c_str(), (d.kl ? core::formatInterval(*d.kl, 4) : cell(d.kl)).c_str());
        std::printf("| top-1 minus '%s', 95%% CI | %s |\n", o.record.name.c_str(), cell(d.top1).c_str());
        std::printf("| ROUGE-L minus '%s', 95%% CI | %s |\n", o.record.name.c_str(), cell(d.rouge).c_str());
    }
    std::printf("| identical outputs | %.3f |\n", double(identical) / done);
    std::printf("| TTFT scratch (median ms) | %.2f |\n", median(ttftScratch));
    std::printf("| TTFT transfer, A prefill + convert (ms) | %.2f |\n", median(ttftTransfer));
    std::printf("| TTFT transfer, A's KV cached (ms) | %.2f |\n", median(ttftCached));
    std::printf("| TTFT with the gate: A prefill + gate + transfer or fallback (ms) | %.2f |\n",
                median(ttftGated));
    std::printf("| gate (%s, threshold %g) pass rate | %.3f |\n", gpu::gateSignalName(gateSignal), threshold,
                double(passed) / done);
    std::printf("| mean KL of passed / failed prompts | %.4f / %.4f |\n",
                klPassed.empty() ? NAN : mean(klPassed), klFailed.empty() ? NAN : mean(klFailed));
    std::printf("| gate precision / recall at its threshold (good: KL <= %g) | %.3f / %.3f |\n", goodKl,
                atThreshold ? atThreshold->precision : NAN, atThreshold ? atThreshold->recall : NAN);
    for (const auto &[name, best] : bestPerSignal)
        if (best)
            std::printf(
                "| %s: highest recall at precision >= %g | threshold %.4g: recall %.3f, precision %.3f, "
                "pass rate %.3f |\n",
                name.c_str(), minPrecision, best->threshold, best->recall, best->precision, best->passRate);
        else
            std::printf("| %s: highest recall at precision >= %g | none reaches it |\n", name.c_str(),
                        minPrecision);
    std::printf("| Spearman(kv_cos, KL) | %.3f |\n", core::spearman(kvCos, kls));
    std::printf("| Spearman(tail_kl, KL) | %.3f |\n", core::spearman(tailKls, kls));
    std::printf("| Spearman(nll, KL) | %.3f |\n", core::spearman(nlls, kls));
    std::printf("| Spearman(attn_cos, KL) | %.3f |\n", core::spearman(attnCos, kls));
    return 0;
}

int cmdBenchTransfer(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"preset-a", "Random model preset for A (default demo-a).", "NAME", "demo-a"});
    p.addOption({"preset-b", "Random model preset for B (default demo-b).", "NAME", "demo-b"});
    p.addOption({"lengths", "Prompt lengths in tokens (default 128,512,2048).", "LIST", "128,512,2048"});
    p.addOption({"k", "Source layers per target layer (default 1).", "K", "1"});
    p.addOption({"per-head", "Head-matched maps."});
    p.addOption({"family", "Converter family: ridge (default), low-rank or mlp.", "NAME", "ridge"});
    p.addOption(
        {"rank", "low-rank: the rank of each map (default 32, at most the map's widths).", "R", "32"});
    p.addOption({"hidden", "mlp: the branch's width (default 256).", "N", "256"});
    p.addOption({"reps", "Repetitions per length; the median is reported (default 5).", "N", "5"});
    p.addOption({"json", "Print the rows as JSON."});
    addEngineOptions(p);
    parse(p, args,
          "Conversion vs prefill: time for B to prefill N tokens itself against converting A's cache of them "
          "(A's KV already cached) and against A's prefill + conversion. Random weights of the presets' "
          "geometry (the work does not depend on the values), context raised to fit the longest length.");
    const auto lengths = parseIdList(p.value("lengths"), "--lengths");
    const int k = intOption(p, "k", 1, 1), reps = intOption(p, "reps", 5, 1);
    const auto family = core::parseConverterFamily(str(p.value("family")));
    if (!family)
        throw UsageError{"--family expects ridge, low-rank or mlp, got '" + str(p.value("family")) + "'"};
    const int rank = intOption(p, "rank", 32, 1), hidden = intOption(p, "hidden", 256, 1);
    const auto lo = loadOptions(p);
    const fs::path dir = fs::temp_directory_path() / fmt::format("kvwb-bench-transfer-{}", ::getpid());
    fs::create_directories(dir);
    auto specA = core::randomModelPreset(str(p.value("preset-a")));
    auto specB = core::randomModelPreset(str(p.value("preset-b")));
    const int longest = *std::max_element(lengths.begin(), lengths.end());
    for (auto *s : {&specA, &specB})
        s->config.maxPositionEmbeddings = std::max(s->config.maxPositionEmbeddings, longest + 8);
    specB.config.vocabSize = specA.config.vocabSize;
    core::writeRandomHfModel(dir / "a", specA);
    core::writeRandomHfModel(dir / "b", specB);
    auto a = gpu::Model::load(dir / "a", lo);
    auto b = gpu::Model::load(dir / "b", lo);
    fs::remove_all(dir);
    const auto &ca = a->config(), &cb = b->config();
    const bool headMatched = p.isSet("per-head") && ca.numKvHeads == cb.numKvHeads;
    core::ConverterRecord set;
    set.family = *family;
    std::mt19937_64 rng(1);
    std::normal_distribution<float> N(0.0f, 0.05f);
    const auto randomPart = [&](std::vector<float> &v, size_t n) {
        v.resize(n);
        for (float &w : v)
            w = N(rng);
    };
    const int kk = std::min(k, ca.numLayers);
    for (int l = 0; l < cb.numLayers; ++l) {
        core::LayerConverter m;
        m.targetLayer = l;
        m.sourceLayers = gpu::proportionalSourceLayers(l, cb.numLayers, ca.numLayers, kk);
        m.headMatched = headMatched;
        const int maps = headMatched ? cb.numKvHeads : 1;
        const int in = (headMatched ? ca.headDim : ca.numKvHeads * ca.headDim) * kk;
        const int out = headMatched ? cb.headDim : cb.numKvHeads * cb.headDim;
        for (int h = 0; h < 2 * maps; ++h) {
            core::KvMap lm;
            lm.inputDim = in;
            lm.outputDim = out;
            if (*family == core::ConverterFamily::LowRank) {
                if (rank > std::min(in, out))
                    throw UsageError{
                        fmt::format("--rank {} exceeds the maps' widths ({} in, {} out)", rank, in, out)};
                lm.rank = rank;
                randomPart(lm.down, size_t(in) * size_t(rank));
                randomPart(lm.up, size_t(rank) * size_t(out));
            } else {
                randomPart(lm.weight, size_t(in) * size_t(out));
            }
            if (*family == core::ConverterFamily::Mlp) {
                lm.hidden = hidden;
                randomPart(lm.hiddenWeight, size_t(in) * size_t(hidden));
                randomPart(lm.hiddenBias, size_t(hidden));
                randomPart(lm.outWeight, size_t(hidden) * size_t(out));
            }
            lm.bias.assign(size_t(out), 0.0f);
            (h < maps ? m.keys : m.values).push_back(std::move(lm));
        }
        set.layers.push_back(std::move(m));
    }
    const auto conv = gpu::Converter::create(set, *a, *b);
    const bool asJson = p.isSet("json");
    if (!asJson) {
        std::printf("transfer benchmark: A %s (%d layers, %dx%d KV), B %s (%d layers, %dx%d KV), %s maps "
                    "(%lld parameters), k %d%s, %s %s, median of %d\n\n",
                    str(p.value("preset-a")).c_str(), ca.numLayers, ca.numKvHeads, ca.headDim,
                    str(p.value("preset-b")).c_str(), cb.numLayers, cb.numKvHeads, cb.headDim,
                    core::converterFamilyName(*family), (long long)set.parameterCount(), kk,
                    headMatched ? " per head" : "", gpu::describeDevice(lo.device).c_str(),
                    gpu::computeTypeName(lo.dtype), reps);
        std::printf("| tokens | B prefill ms | convert ms | A prefill ms | B prefill / convert | B prefill / "
                    "(A prefill + "
                    "convert) |\n");
        std::printf("|-------:|-------------:|-----------:|-------------:|--------------------:|-------------"
                    "-----------"
                    "---------:|\n");
    }
    json rows = json::array();
    for (int n : lengths) {
        std::vector<int> ids;
        for (int i = 0; i < n; ++i)
            ids.push_back(3 + int(rng() % uint64_t(ca.vocabSize - 3)));
        std::vector<double> prefB, convMs, prefA;
        for (int r = 0; r <= reps; ++r) { // rep 0 warms up
            auto cb1 = b->newCache();
            auto t0 = Clock::now();
            b->forward(ids, cb1);
            const double pb = msSince(t0);
            auto ca1 = a->newCache();
            t0 = Clock::now();
            a->forward(ids, ca1);
            const double pa = msSince(t0);
            auto cb2 = b->newCache();
            t0 = Clock::now();
            conv.convert(ca1, cb2);
            const double cm = msSince(t0);
            if (r == 0)
                continue;
            prefB.push_back(pb);
            prefA.push_back(pa);
            convMs.push_back(cm);
        }
        auto median = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        const double pb = median(prefB), cm = median(convMs), pa = median(prefA);
        if (asJson)
            rows.push_back({{"tokens", n},
                            {"prefill_ms_b", pb},
                            {"convert_ms", cm},
                            {"prefill_ms_a", pa},
                            {"ratio_cached", pb / cm},
                            {"ratio_uncached", pb / (pa + cm)}});
        else
            std::printf("| %6d | %12.2f | %10.2f | %12.2f | %18.1fx | %31.2fx |\n", n, pb, cm, pa, pb / cm,
                        pb / (pa + cm));
        std::fflush(stdout);
    }
    if (asJson)
        std::printf("%s\n", json{{"rows", rows}}.dump(2).c_str());
    else
        std::printf(
            "\nconvert = A's cached K/V (all layers) mapped into B's cache, RoPE removed and re-applied; it "
            "replaces B's prefill of those tokens.\n");
    return 0;
}

} // namespace kvwb::app
