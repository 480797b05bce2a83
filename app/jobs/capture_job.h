// Capture job set-up shared by `kvwb capture` and the window's Capture panel (engine thread):
// create an experiment file with its provenance, or append to one that holds the same models, and
// capture both models' KV caches for a prompt set into it.
//
// Threading: the engine thread (or a subcommand's main thread), which owns the models and the file.
#pragma once

#include "core/store/experiment_file.h"
#include "core/tokenize/tokenizer.h"
#include "gpu/capture/capture.h"
#include "gpu/model/model.h"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kvwb::app::jobs {

// Provenance of a file this run writes: app version and commit, Qt and torch versions, the device
// of `o`, the time, a fresh run id and the SHA-256 of configJson (the settings that determine it).
core::Provenance runProvenance(const gpu::LoadOptions &o, const std::string &configJson);

// What captureIntoFile did.
// What a capture will write, before it starts: each model's prompt tokens (cut to its context as
// the capture cuts them) times the bytes of K and V per token of its captured layers at the storage
// dtype, uncompressed (an upper bound when --compress is on).
struct CaptureProjection
{
    int64_t tokensA = 0, tokensB = 0;
    int64_t bytes = 0;
    int64_t longestA = 0, longestB = 0; // tokens of the longest prompt of each model
    // memory one prompt holds while both models run it (requestWorkingSetBytes of the longest),
    // checked against what the machine has left before the first prompt
    int64_t workingSetBytes = 0;
};

struct FileCapture
{
    CaptureProjection projected; // checked against the free disk before the first prompt
    gpu::CaptureResult result;
    bool appended = false;             // the file existed (same models): prompts were appended
    core::ExperimentOptions storage;   // the file's storage settings (an existing file's win)
    std::vector<std::string> warnings; // result.warnings plus the storage note when appending
};

// Captures prompts from both models into `out`: creates it (with provenance: app version, device,
// the config hash of `settings` and the models' fingerprints) or appends to it when it exists and
// holds the same models. options.layersA/B empty = every layer. The `kvwb capture` command and
// the workbench's Capture panel both run this on their engine thread. `projected` hears the
// projection before the disk check and the first prompt.
FileCapture captureIntoFile(const std::filesystem::path &out, const gpu::Model &a,
                            const core::Tokenizer &tokA, const gpu::Model &b, const core::Tokenizer &tokB,
                            const std::vector<gpu::CapturePrompt> &prompts, gpu::CaptureOptions options,
                            const std::string &promptsSource, const gpu::CaptureProgressFn &progress,
                            const std::function<void(const CaptureProjection &)> &projected = {});

} // namespace kvwb::app::jobs
