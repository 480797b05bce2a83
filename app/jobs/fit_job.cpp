#include "app/jobs/fit_job.h"

#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/util/clock.h"

#include <algorithm>
#include <filesystem>
#include <optional>

namespace kvwb::app::jobs {

std::string fitCheckpointDir(const std::string &experimentPath, const std::string &name)
{
    return experimentPath + ".fit-" + name;
}

gpu::AlignOptions alignOptions(const core::FitSettings &s)
{
    gpu::AlignOptions o;
    o.name = s.name;
    o.selection = s.selection;
    o.k = s.k;
    o.autoLambda = s.autoLambda;
    o.lambda = s.lambda;
    o.perHead = s.perHead;
    o.family = s.family;
    o.rank = s.rank;
    o.mlp.hidden = s.mlpHidden;
    o.mlp.epochs = s.mlpEpochs;
    o.mlp.batch = s.mlpBatch;
    o.mlp.learningRate = s.learningRate;
    o.mlp.patience = s.patience;
    o.maxTrainTokens = s.maxTrainTokens;
    o.validFraction = s.validFraction;
    o.testFraction = s.testFraction;
    o.seed = uint64_t(s.seed);
    o.attentionPrompts = s.attentionPrompts;
    return o;
}

FitOutcome runFit(const core::FitSettings &settings, const FitTargetFn &target,
                  const std::function<bool(double fraction, const std::string &stage)> &progress)
{
    FitOutcome out;
    gpu::AlignOptions o = alignOptions(settings);
    o.progress = progress;
    const bool store = !settings.dryRun;
    const bool checkpoints = store && o.family == core::ConverterFamily::Mlp;
    if (checkpoints)
        o.checkpointDir = fitCheckpointDir(settings.experiment, o.name);
    o.resume = checkpoints && settings.resume;
    const auto t0 = core::Clock::now();
    {
        // closed before saving: HDF5 cannot reopen a file for writing while this process reads it
        const auto reader = core::ExperimentReader::open(settings.experiment);
        o.k = std::clamp(o.k, 1, reader.model(core::ModelRole::A).config.numLayers);
        const gpu::Model *b = target ? target(reader, out.warnings) : nullptr;
        out.result = gpu::alignExperiment(reader, o, b);
    }
    out.fitMs = core::msSince(t0);
    out.warnings.insert(out.warnings.end(), out.result.warnings.begin(), out.result.warnings.end());
    if (!out.result.cancelled && store) {
        core::saveConverters(settings.experiment, out.result.record);
        out.stored = true;
        if (checkpoints) {
            std::error_code ec; // the converter is saved: a checkpoint left behind only costs space
            std::filesystem::remove_all(o.checkpointDir, ec);
        }
    }
    return out;
}

} // namespace kvwb::app::jobs
