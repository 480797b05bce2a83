#include "app/jobs/fit_job.h"

#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/util/clock.h"
#include "core/util/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>

namespace kvwb::app::jobs {

std::string fitCheckpointDir(const std::string &experimentPath, const std::string &name)
{
    return experimentPath + ".fit-" + name;
}

bool fitKeepsCheckpoints(const core::FitSettings &s)
{
    return !s.dryRun && (s.family == core::ConverterFamily::Mlp || s.family == core::ConverterFamily::Auto ||
                         s.objective == core::FitObjective::Kl);
}

FitOutcome runFit(const core::FitSettings &settings, const FitTargetFn &target,
                  const std::function<bool(double fraction, const std::string &stage)> &progress,
                  const std::function<void(const gpu::AutoCandidate &)> &onCandidate)
{
    FitOutcome out;
    gpu::AlignOptions o;
    o.fit = settings;
    o.progress = progress;
    o.onCandidate = onCandidate;
    const bool checkpoints = fitKeepsCheckpoints(settings);
    if (checkpoints) // without a directory, resume does nothing
        o.checkpointDir = fitCheckpointDir(settings.experiment, settings.name);
    const auto t0 = core::Clock::now();
    {
        // closed before saving: HDF5 cannot reopen a file for writing while this process reads it
        const auto reader = core::ExperimentReader::open(settings.experiment);
        o.fit.k = std::clamp(o.fit.k, 1, reader.model(core::ModelRole::A).config.numLayers);
        const gpu::Model *b = target ? target(reader, out.warnings) : nullptr;
        out.result = gpu::alignExperiment(reader, o, b);
    }
    out.fitMs = core::msSince(t0);
    out.warnings.insert(out.warnings.end(), out.result.warnings.begin(), out.result.warnings.end());
    if (!out.result.cancelled && !settings.dryRun) {
        core::saveConverters(settings.experiment, out.result.record);
        out.stored = true;
        if (checkpoints) {
            std::error_code ec; // the converter is saved: a checkpoint left behind only costs space
            std::filesystem::remove_all(o.checkpointDir, ec);
        }
    }
    return out;
}

SweepOutcome runSweep(const std::filesystem::path &experiment, const std::string &name, bool replace,
                      const gpu::SweepOptions &options, const FitTargetFn &target)
{
    const auto names = core::listTables(experiment);
    if (!replace && std::find(names.begin(), names.end(), name) != names.end())
        throw core::Error(
            core::ErrorCode::InvalidArgument,
            fmt::format("{}: a sweep '{}' exists: choose another name", experiment.string(), name));
    std::optional<core::ExperimentReader> reader(core::ExperimentReader::open(experiment));
    const int layersA = reader->model(core::ModelRole::A).config.numLayers;
    for (int k : options.ks)
        if (k < 1 || k > layersA)
            throw core::Error(core::ErrorCode::InvalidArgument,
                              fmt::format("k {} is outside 1..{} (model A's layers)", k, layersA));
    SweepOutcome out;
    const gpu::Model *b = target ? target(*reader, out.warnings) : nullptr;
    out.result = gpu::sweepAlignment(*reader, options, b);
    out.warnings.insert(out.warnings.end(), out.result.warnings.begin(), out.result.warnings.end());
    out.settingsJson = nlohmann::json{
        {"select", gpu::layerSelectionName(options.selection)},
        {"k", options.ks},
        {"lambda", options.lambdas},
        {"tokens", options.trainTokens},
        {"per_head", options.perHead},
        {"valid_fraction", options.validFraction},
        {"test_fraction", options.testFraction},
        {"seed",
         options.seed}}.dump();
    if (out.result.cancelled)
        return out;
    reader.reset(); // the writer takes the file
    core::saveTable(experiment, name, out.result.table, out.settingsJson);
    out.stored = true;
    return out;
}

} // namespace kvwb::app::jobs
