// `kvwb capture` (both models' KV caches for a prompt set into an HDF5 experiment file) and
// `kvwb bench-capture` (prefill vs write cost of capture). Conventions as in app/cli/cli.h.
#pragma once

#include "core/tokenize/tokenizer.h"
#include "gpu/capture/capture.h"
#include "gpu/model/model.h"

#include <QStringList>

#include <filesystem>
#include <string>
#include <vector>

namespace kvwb::app {

// What captureIntoFile did.
struct FileCapture
{
    gpu::CaptureResult result;
    bool appended = false;             // the file existed (same models): prompts were appended
    core::ExperimentOptions storage;   // the file's storage settings (an existing file's win)
    std::vector<std::string> warnings; // result.warnings plus the storage note when appending
};

// Captures prompts from both models into `out`: creates it (with provenance: app version, device,
// the config hash of `settings` and the models' fingerprints) or appends to it when it exists and
// holds the same models. options.layersA/B empty = every layer. The `kvwb capture` command and
// the workbench's Capture panel both run this on their engine thread.
FileCapture captureIntoFile(const std::filesystem::path &out, const gpu::Model &a,
                            const core::Tokenizer &tokA, const gpu::Model &b, const core::Tokenizer &tokB,
                            const std::vector<gpu::CapturePrompt> &prompts, gpu::CaptureOptions options,
                            const std::string &promptsSource, const gpu::CaptureProgressFn &progress);

int cmdCapture(const QStringList &args);
int cmdBenchCapture(const QStringList &args);

} // namespace kvwb::app
