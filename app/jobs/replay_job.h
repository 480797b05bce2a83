// Replay job set-up shared by `kvwb replay` and the window's Replay panel (engine thread): reading
// and trimming the workload, the semantic tier's embedder, and the settings JSON stored beside a
// ledger (/ledgers/<name>), so a ledger records the same settings whichever front end ran it.
//
// Threading: the engine thread (or a subcommand's main thread); the models must outlive what is
// built from them.
#pragma once

#include "core/cache/semantic_tier.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/warning_list.h"
#include "core/workload/workload.h"
#include "gpu/model/model.h"
#include "gpu/replay/knowledge_tier.h"
#include "gpu/replay/replay.h"

#include <memory>
#include <string>
#include <vector>

namespace kvwb::app::jobs {

struct ReplayJob
{
    std::string workloadPath;         // workload JSONL
    gpu::ReplayOptions options;       // tier stack, limits, gate, clock, prices
    std::string embedder = "lexical"; // lexical | lexical-idf | model | an embedding model's path
    std::string embedderPrefix;       // an embedding model's: text put before every input ("query: ")
    int embedderLayer = -1;           // model embedder: the block to pool (-1: the middle one)
    int limit = 0;                    // first N requests (0 = all)
    std::string converter;            // the cross tier's converter (/converters/<name>)
    // Knowledge tier: graph files, each "GRAPH.h5" (shared by every tenant) or "TENANT=GRAPH.h5"
    // (that tenant's only), the user profiles file ("" none) and the tier's settings.
    std::vector<std::string> knowledgeGraphs;
    std::string profilesPath;
    gpu::KnowledgeTierOptions knowledge;
};

// The knowledge tier of a job: its graphs (modules loaded), profiles and options. Error(Format)
// naming the file for a malformed graph or profiles file; Error(InvalidArgument) for a graph spec
// with an empty tenant or path, or no graph at all.
std::unique_ptr<gpu::KnowledgeTier> makeKnowledgeTier(const ReplayJob &job, const gpu::Model &b,
                                                      const core::Tokenizer &tokenizerB,
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

// Refuses a replay whose working set would not fit in what the machine has left with its models
// loaded (core::checkWorkingSet): one request on each model (the longest prompt, tokenised by that
// model, plus the most tokens any request may generate, both paths of a cross-model hit on B) and
// the prefix tier's byte budget per model when it has one.
void checkReplayWorkingSet(const ReplayJob &job, const std::vector<core::WorkloadRequest> &requests,
                           const gpu::Model &a, const core::Tokenizer &tokenizerA, const gpu::Model *b,
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

// The settings stored beside a ledger and printed by `kvwb replay --json`: workload, tiers,
// threshold, embedder, what it embeds, block, eviction, tenant sharing, gate, clock, speed, max
// tokens, limit, converter, whether the replay was cancelled, both models' fingerprints, device.
std::string ledgerSettingsJson(const ReplayJob &job, const core::Embedder *embedder, const gpu::Model &a,
                               const gpu::Model *b, bool cancelled);

} // namespace kvwb::app::jobs
