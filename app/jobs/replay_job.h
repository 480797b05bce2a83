// A replay set up and finished once for `kvwb replay` and the window's Replay step (engine thread),
// from one core::ReplaySettings (core/settings/replay_settings.h):
//   readReplayRequests -> (the front end loads or has its models) -> prepareReplay -> gpu::replayWorkload
//   with the prepared models and options -> finishReplay (ledger CSV, answers, the ledger stored in
//   the experiment, the knowledge graph), so both write the same files and the same settings JSON.
//
// Threading: the engine thread (or a subcommand's main thread); the models must outlive what is
// built from them.
#pragma once

#include "core/cache/semantic_tier.h"
#include "core/settings/replay_settings.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/warning_list.h"
#include "core/workload/workload.h"
#include "gpu/model/cross_encoder.h"
#include "gpu/model/model.h"
#include "gpu/replay/knowledge_tier.h"
#include "gpu/replay/replay.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::app::jobs {

// The knowledge tier of a job: its graphs (modules loaded), profiles and options. Error(Format)
// naming the file for a malformed graph or profiles file; Error(InvalidArgument) for a graph spec
// with an empty tenant or path, or no graph at all.
std::unique_ptr<gpu::KnowledgeTier> makeKnowledgeTier(const core::ReplaySettings &settings,
                                                      const gpu::Model &b, const core::Tokenizer &tokenizerB,
                                                      core::Embedder &embedder);

// What the knowledge tier spent and holds after a replay, as JSON: its costs (ms per step, modules
// recomputed, tokens) and per scope the nodes reused most.
std::string knowledgeCostsJson(const gpu::KnowledgeTier &tier);

struct ReplayRequests
{
    std::vector<core::WorkloadRequest> requests;
    core::WarningList warnings; // malformed workload lines skipped
};

// The workload's requests, the first `limit` of them when limit > 0. Error(Format) naming the file
// when none is left to replay.
ReplayRequests readReplayRequests(const std::string &workloadPath, int limit);

// Whether the replay needs model B: a request sends to it, or the cross or knowledge tier is used.
bool replayNeedsModelB(const core::ReplaySettings &settings,
                       const std::vector<core::WorkloadRequest> &requests);

// The engine's options for `settings` (the tier limits, gate, clock, prices resolved from a preset).
// The store is left null: prepareReplay opens it.
gpu::ReplayOptions replayOptions(const core::ReplaySettings &settings);
// The knowledge tier's options (clock start 0: now).
gpu::KnowledgeTierOptions knowledgeTierOptions(const core::ReplaySettings &settings);

// The models a replay runs on, loaded by the caller (model B and its tokenizer may be null when
// replayNeedsModelB says no).
struct ReplayModelsIn
{
    const gpu::Model *a = nullptr;
    const gpu::Model *b = nullptr;
    const core::Tokenizer *tokenizerA = nullptr;
    const core::Tokenizer *tokenizerB = nullptr;
    // The cross tier's converter `name` of `experiment`, built for a and b: the window's cache. Empty:
    // prepareReplay loads it from the experiment file.
    std::function<const gpu::Converter &(const std::string &experiment, const std::string &name)> converter;
};

// A replay ready to run: gpu::replayWorkload(requests, models, options, ...).
struct PreparedReplay
{
    core::ReplaySettings settings;
    std::vector<core::WorkloadRequest> requests;
    std::vector<std::string> warnings; // the knowledge tier's, and a limit past the workload's end
    std::optional<gpu::Converter> ownConverter;
    std::unique_ptr<core::Embedder> embedder;
    std::unique_ptr<gpu::CrossEncoder> verifier; // the semantic tier's, when settings.verifier names one
    std::unique_ptr<gpu::KnowledgeTier> knowledge;
    std::unique_ptr<core::SharedStore> store;
    gpu::ReplayModels models;
    gpu::ReplayOptions options;
};

// Sets up the replay of `settings` on `in` (the requests from readReplayRequests): checks the rules
// between settings (core::checkReplaySettings), that the experiment's converters were fitted for
// these models' weights (Error(Config) naming the experiment and the model), the converter, that
// the working set fits (checkReplayWorkingSet), the embedder (lexical-idf fitted on what the
// semantic tier embeds), the knowledge tier, and the shared store (opened, flushed when asked).
PreparedReplay prepareReplay(const core::ReplaySettings &settings,
                             std::vector<core::WorkloadRequest> requests, const ReplayModelsIn &in);

// Writes what the settings ask for after a replay: the ledger CSV, the answers JSONL, the ledger in
// the experiment file (with ledgerSettingsJson) and the shared knowledge graph. Returns the settings
// JSON stored beside the ledger.
std::string finishReplay(const PreparedReplay &replay, const gpu::ReplayResult &result);

// Refuses a replay whose working set would not fit in what the machine has left with its models
// loaded (core::checkWorkingSet): one request on each model (the longest prompt, tokenised by that
// model, plus the most tokens any request may generate, both paths of a cross-model hit on B) and
// the prefix tier's byte budget per model when it has one.
void checkReplayWorkingSet(const core::ReplaySettings &settings,
                           const std::vector<core::WorkloadRequest> &requests, const gpu::Model &a,
                           const core::Tokenizer &tokenizerA, const gpu::Model *b,
                           const core::Tokenizer *tokenizerB);

// "lexical", "lexical-idf" (fitted on idfDocuments: the texts the tier will embed, no labels),
// "model" (mean-pooled hidden states of model A), or the path of an embedding model
// (gpu::loadEmbedderModel: a sentence-transformers directory or bert GGUF, or a decoder pooled at
// its last token), loaded on model A's device.
std::unique_ptr<core::Embedder> makeEmbedder(const std::string &kind, int layer, const gpu::Model &a,
                                             const core::Tokenizer &tokenizerA,
                                             const std::vector<std::string> &idfDocuments = {},
                                             const std::string &prefix = {});

// A shared store's counters and its server's memory (used, limit, eviction policy, evicted and
// expired keys) as JSON, for `kvwb replay --json` and a fleet's summary.
std::string storeStatsJson(core::SharedStore &store);

// The settings stored beside a ledger and printed by `kvwb replay --json`: every Setting and Input
// row of the table (core::replaySettingsToJson), then what the replay resolved: the embedder's name,
// whether it was cancelled, both models' fingerprints and the device.
std::string ledgerSettingsJson(const PreparedReplay &replay, bool cancelled);

} // namespace kvwb::app::jobs
