// Fit job set-up shared by `kvwb align` and the window's Alignment panel (engine thread): open the
// experiment file, bound k by model A's layers, fit and score a converter (gpu/align), close the
// file and store the converter under /converters/<name> unless the fit was cancelled.
//
// Threading: the engine thread (or a subcommand's main thread), which owns the file while fitting.
#pragma once

#include "core/settings/fit_settings.h"
#include "gpu/align/alignment.h"
#include "gpu/model/model.h"

#include <functional>
#include <string>
#include <vector>

namespace kvwb::app::jobs {

// Where the MLP fit of converter `name` keeps its layer checkpoints: beside the experiment file,
// "<experiment>.fit-<name>".
std::string fitCheckpointDir(const std::string &experimentPath, const std::string &name);

// Whether the fit keeps what it trains in fitCheckpointDir() until its converter is stored (MLP
// layers, the KL objective's state), so that settings.resume can continue it: fits that train (family
// mlp or auto, objective kl) and store their converter.
bool fitKeepsCheckpoints(const core::FitSettings &settings);

struct FitOutcome
{
    gpu::AlignResult result;           // cancelled: nothing was stored
    bool stored = false;               // the record is in the file
    double fitMs = 0;                  // wall time of the fit and its scores
    std::vector<std::string> warnings; // the target choice's, then the fit's
};

// Model B, chosen once the file is open: its queries score the attention-output cosine and family
// auto scores its candidates with it (null: the cosine is skipped, say why in `warnings`; auto
// refuses). It must outlive the call.
using FitTargetFn =
    std::function<const gpu::Model *(const core::ExperimentReader &file, std::vector<std::string> &warnings)>;

// Fits and scores the converter `settings` describe and, unless settings.dryRun, stores it; fits that
// train (fitKeepsCheckpoints) keep each trained MLP layer and the KL objective's state in
// fitCheckpointDir() until it is saved, and with settings.resume continue an interrupted fit with the
// same settings.
// settings.k is bounded to 1..A's layers. With family auto, onCandidate hears each candidate as soon
// as it is scored (ridge first).
FitOutcome runFit(const core::FitSettings &settings, const FitTargetFn &target,
                  const std::function<bool(double fraction, const std::string &stage)> &progress = {},
                  const std::function<void(const gpu::AutoCandidate &)> &onCandidate = {});

struct SweepOutcome
{
    gpu::SweepResult result;           // cancelled: nothing was stored
    bool stored = false;               // the table is in the file
    std::string settingsJson;          // what determined the sweep, stored with the table
    std::vector<std::string> warnings; // the target choice's, then the sweep's
};

// A converter sweep (`kvwb sweep`, the Alignment step's Sweep): a converter fitted for every k x
// lambda x calibration-token count on one split, the held-out scores stored as /sweeps/<name> unless
// cancelled. Error(InvalidArgument) for a k outside 1..A's layers, or a name the file holds unless
// `replace`.
SweepOutcome runSweep(const std::filesystem::path &experiment, const std::string &name, bool replace,
                      const gpu::SweepOptions &options, const FitTargetFn &target);

} // namespace kvwb::app::jobs
