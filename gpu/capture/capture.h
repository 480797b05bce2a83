// Capturing both models' KV caches for a prompt set into an experiment file (core/store/experiment_file.h).
//
// For each prompt: tokenize with each model's tokenizer (with each token's byte span in the text),
// prefill A and B from empty caches, read each selected layer's K (pre-RoPE by default) and V, and
// append the prompt to the file, which makes it durable before the next prompt starts. When the two
// tokenisations differ, the prompt is stored with a token alignment: for each B token the A token
// its row pairs with. Runs on the calling thread (the engine thread); progress returns
// false to cancel between prompts (the prompts already written stay in the file).
#pragma once

#include "core/store/experiment_file.h"
#include "core/tokenize/token_alignment.h"
#include "core/tokenize/tokenizer.h"
#include "gpu/model/model.h"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kvwb::gpu {

struct CapturePrompt
{
    std::string text;
    std::string label;     // e.g. the workload's intent; may be empty
    std::vector<int> idsA; // when non-empty, used instead of encoding text for A (benchmarks)
    std::vector<int> idsB; // likewise for B
};

struct CaptureOptions
{
    core::ExperimentOptions file; // storage dtype, compression, chunking, key form
    int maxTokens = 0;            // truncate each prompt's ids to this many (0 = model context)
    bool addSpecial = true;       // encode with BOS as generation does
    // Layers to read from each model's cache (sorted, unique; empty = all). They must equal the
    // capturedLayers of the ModelInfo the writer was created or opened with: capturePrompts checks
    // them against writer.capturedLayers() and throws Error(Config) before the first prompt.
    std::vector<int> layersA;
    std::vector<int> layersB;
    // Which A token each B token's row pairs with when the two tokenisations of a prompt differ
    // (core/tokenize/token_alignment.h); stored per prompt with both models' token byte spans.
    core::AlignPolicy alignPolicy = core::kDefaultAlignPolicy;
};

struct CaptureTimings
{
    double prefillMsA = 0; // bare forward time of A over all prompts
    double prefillMsB = 0;
    double readMs = 0;   // copying K/V out of the caches (device -> host, un-rotating keys)
    double writeMs = 0;  // appendPrompt: HDF5 writes and the flush that makes each prompt durable
    int64_t kvBytes = 0; // float32 bytes handed to the writer (before storage conversion)
};

struct CaptureResult
{
    int promptsWritten = 0;
    int firstPrompt = 0; // index in the file of the first prompt written by this run
    int64_t tokensA = 0;
    int64_t tokensB = 0;
    int promptsAligned = 0; // prompts stored with a token alignment (A and B tokenised them differently)
    bool cancelled = false;
    std::vector<std::string> warnings; // e.g. prompts truncated or skipped because empty
    CaptureTimings timings;
};

// done = prompts written so far; return false to stop after the current prompt.
using CaptureProgressFn = std::function<bool(int done, int total)>;

// Model info as the experiment file records it (fingerprints of weights and tokenizer); capturedLayers
// is left empty (all layers): set it to the CaptureOptions layers list for that model.
core::ModelInfo describeModel(core::ModelRole role, const Model &model,
                              const std::filesystem::path &tokenizerPath);

// Appends to writer. Error(Tokenizer) when a tokenizer does not fit its model.
CaptureResult capturePrompts(core::ExperimentWriter &writer, const Model &a, const core::Tokenizer &tokA,
                             const Model &b, const core::Tokenizer &tokB,
                             const std::vector<CapturePrompt> &prompts, const CaptureOptions &options,
                             const CaptureProgressFn &progress = {});

} // namespace kvwb::gpu
