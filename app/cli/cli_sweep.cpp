#include "app/cli/cli_sweep.h"

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

namespace {

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

} // namespace

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
    reader.reset();
    InterruptScope ctrlC;
    const std::string name = str(p.value("name"));
    const auto sweep = jobs::runSweep(path, name, /*replace=*/true, o,
                                      [&](const core::ExperimentReader &, std::vector<std::string> &) {
                                          return static_cast<const gpu::Model *>(b.get());
                                      });
    const auto &table = sweep.result.table;
    const auto &warnings = sweep.warnings;
    const json settings = json::parse(sweep.settingsJson);
    if (!asJson)
        std::fprintf(stderr, "\n");
    if (sweep.result.cancelled) {
        std::fprintf(stderr, "cancelled: nothing stored\n");
        return 130;
    }
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

} // namespace kvwb::app
