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

FitOutcome runFit(const core::FitSettings &settings, const FitTargetFn &target,
                  const std::function<bool(double fraction, const std::string &stage)> &progress,
                  const std::function<void(const gpu::AutoCandidate &)> &onCandidate)
{
    FitOutcome out;
    gpu::AlignOptions o;
    o.fit = settings;
    o.progress = progress;
    o.onCandidate = onCandidate;
    const bool store = !settings.dryRun;
    const bool checkpoints = store && settings.family == core::ConverterFamily::Mlp;
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
