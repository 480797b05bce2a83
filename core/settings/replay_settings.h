// The settings of a replay (`kvwb replay`, the window's Replay step, a project's "replay" section and
// the settings stored beside a ledger), as one plain type, and the one table that spells them: each
// setting's flag, help text, value name, JSON key and how its text is read and written. The command
// line registers its options from the table, the project file and the ledger's settings JSON are
// written and read through it, and the window's request is this same type; a new replay option is a
// field here, a row in the table and the line that uses it.
//
// What a replay runs with at run time (models, the converter, an open store, the embedder) is built
// from these settings by app/jobs/replay_job.h and kept apart from them.
//
// Plain values and pure functions; thread-safe.
#pragma once

#include "core/cache/cache_store.h"
#include "core/cache/cache_tier.h"
#include "core/cache/gate_signal.h"
#include "core/cache/semantic_guards.h"
#include "core/model/dtype.h"
#include "core/settings/setting_table.h"
#include "core/tokenize/token_alignment.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvwb::core {

// The knowledge tier's settings (gpu/replay/knowledge_tier.h takes them as they are).
struct KnowledgeTierSettings
{
    int candidates = 3;         // nodes recall proposes for verification
    double minSimilarity = 0.3; // recall's floor (cosine of question and a node's nearest entry)
    bool verify = true;         // false: take recall's best candidate unverified (for measuring)
    int64_t ttlMs = 0;          // a module older than this is stale (<= 0: never by age)
    int boundary = 0;           // module tokens recomputed in place after placement
    // Unix ms of workload time 0: freshness compares a module's build time with it. In a replay's
    // settings 0 means the replay's start (its set-up resolves it); the tier takes it as is.
    int64_t clockStartMs = 0;
};

struct ReplaySettings
{
    // ---- what is replayed, on what, and where results go (not part of a project's settings)
    std::string workload;       // workload JSONL
    std::string modelA, modelB; // "" the experiment's recorded models (the window: the loaded ones)
    std::string experiment;     // its converter (cross tier) and where a ledger is stored; "" none
    std::string converter = "default";
    std::vector<std::string> knowledgeGraphs; // each "GRAPH.h5" (every tenant's) or "TENANT=GRAPH.h5"
    std::string profiles;                     // the knowledge tier's user profiles ("" none)
    std::string saveKnowledge;                // write the shared graph here after the replay
    std::string storeKeyFile;                 // the shared store's HMAC key
    bool storeFlush = false;                  // remove the workbench's keys before the replay
    std::string ledgerCsv;                    // the ledger as CSV
    std::string outputs;                      // each request's answer as JSONL
    std::string ledgerName;                   // store the ledger as /ledgers/<name> of the experiment

    // ---- the tier stack and each tier's settings
    std::vector<TierKind> tiers = {TierKind::Exact, TierKind::Semantic, TierKind::Prefix}; // lookup order
    double threshold = 0.8;           // semantic cosine threshold
    std::string embedder = "lexical"; // lexical | lexical-idf | model | an embedding model's path
    double errorBound = 0;            // > 0: per-entry semantic thresholds under this error bound
    SemanticGuards guards = SemanticGuards::all(); // semantic hits refused on a negation, number, ...
    double boundConfidence = 0.9;
    int boundMinUses = 3; // an entry's own right outcomes before it serves under the error bound
    // The error bound's prior: "" the pooled rate alone; "embedder" the trained embedder's validation
    // curve (its train_log.json); else a sweep-semantic JSON or a train_log.json (error_curve.h).
    std::string boundPrior;
    // A cross-encoder that re-checks each semantic candidate before it serves (fails closed):
    // its directory, its threshold (0: the one its training recorded for validation precision 0.9,
    // else 0.5), and whether it may overrule a guard.
    std::string verifier;
    double verifierThreshold = 0;
    bool verifierOverrulesGuards = false;
    bool embedQuestion = true; // the semantic tier embeds the request's question, not the whole prompt
    int embedderLayer = -1;    // the model embedder's block (-1: the middle one)
    std::string embedderPrefix;
    int prefixBlock = 16;
    int minCrossTokens = 16;
    double crossRecompute = 0; // the cross tier: share of B's reused prefix B recomputes itself (ends)
    AlignPolicy alignPolicy = kDefaultAlignPolicy;
    KnowledgeTierSettings knowledge;          // clockStartMs is this run's, not a project setting
    int64_t exactEntries = 0, exactBytes = 0; // 0: unlimited
    int64_t semanticEntries = 0, semanticBytes = 0;
    int64_t prefixEntries = 0, prefixBytes = 0; // per model
    Eviction eviction = Eviction::Lru;
    int64_t ttlMs = 0;
    bool shareTenants = false;
    GateSignal gateSignal = GateSignal::TailKl;
    double gateThreshold = 0.1; // set with the signal: its default (defaultGateThreshold)
    bool gate = true;
    bool onClock = false;
    double speed = 1;
    int maxTokens = 0;                      // > 0 overrides every request's max_tokens
    int limit = 0;                          // the first N requests (0: all)
    double shadow = 0;                      // share of hits re-run from scratch
    double priceIn = 0.15, priceOut = 0.60; // USD per 1M tokens computed, when no preset is named
    std::string prices;                     // "" the two prices, else a preset id or FILE[#ID]
    std::string store;                      // "" this process, else memory | redis://... (docs/fleet.md)
    int storeTimeoutMs = 500;
    FloatType storeKvDtype = FloatType::F32; // f32 | bf16 | f16

    bool uses(TierKind t) const;
    TierLimits limits(TierKind t) const; // the exact, semantic or prefix tier's limits
};

bool operator==(const ReplaySettings &x, const ReplaySettings &y);

// One row of the replay's table.
using ReplayFlag = SettingRow<ReplaySettings>;

// Every replay setting in the order `kvwb replay --help` lists them.
const std::vector<ReplayFlag> &replayFlags();
// The row of `name` (without "--"); nullptr for none.
const ReplayFlag *findReplayFlag(const std::string &name);

// The settings of `scopes` as a JSON object, one key per row (ReplayFlag::key).
nlohmann::json replaySettingsToJson(const ReplaySettings &s, std::initializer_list<SettingScope> scopes = {
                                                                 SettingScope::Setting, SettingScope::Input});
// Reads one row's JSON value into `s`: Error(InvalidArgument) saying what is wrong (without the key).
void setReplayFlagFromJson(ReplaySettings &s, const ReplayFlag &flag, const nlohmann::json &value);
// The Setting and Input rows present in a JSON object (a project's "replay" section, a ledger's
// settings); other keys are ignored. Error(Config) "`where`: field '<section>.<key>' ..." for a bad
// value.
ReplaySettings replaySettingsFromJson(const nlohmann::json &object, const std::string &where,
                                      const std::string &section);

// Rules between settings that no single row can check: the knowledge tier needs a graph, the cross
// tier an experiment, --save-ledger an experiment; Error(InvalidArgument) naming the flags.
void checkReplaySettings(const ReplaySettings &s);

} // namespace kvwb::core
