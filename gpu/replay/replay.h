// Workload replay through a stack of cache tiers with real model calls: exact and semantic response
// caches (core/cache/exact_tier.h, core/cache/semantic_tier.h), same-model prefix KV reuse
// (core/cache/prefix_tree.h) and cross-model KV reuse (A's cached prefix converted into B's cache,
// gpu/transfer/transfer.h). Misses, prefix and cross-model hits run the models, so latencies are measured,
// not modelled. Every request yields one ledger row (core/ledger/replay_ledger.h), streamed to a callback as
// it completes.
//
// Also: ModelEmbedder, the semantic tier's embedder that mean-pools a loaded model's hidden states.
//
// Threading: runs on the calling thread (the engine thread), which owns the models, the KV caches
// the prefix tiers point at, the vector indexes and any HDF5 handle. The callback runs on that
// thread; returning false stops the replay after the current request (a result, not an error).
#pragma once

#include "core/cache/cache_store.h"
#include "core/cache/semantic_tier.h"
#include "core/cache/shared_store.h"
#include "core/ledger/replay_ledger.h"
#include "core/store/converter_store.h"
#include "core/tokenize/token_alignment.h"
#include "core/tokenize/tokenizer.h"
#include "core/workload/workload.h"
#include "gpu/model/model.h"
#include "gpu/replay/kv_tiers.h"
#include "gpu/transfer/transfer.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::gpu {

// Unit-length mean of a model's hidden states at `layer` over the encoded text's tokens.
class ModelEmbedder : public core::Embedder
{
public:
    // layer < 0: the middle block. The model and tokenizer must outlive the embedder.
    ModelEmbedder(const Model &model, const core::Tokenizer &tokenizer, int layer = -1);
    int dim() const override;
    std::string name() const override; // "model-l<layer>-<hidden>"
    std::vector<float> embed(const std::string &text) override;

private:
    const Model &m_model;
    const core::Tokenizer &m_tokenizer;
    int m_layer;
};

struct ReplayOptions
{
    // Tiers in the order they are consulted; any subset of Exact, Semantic, Prefix, Cross, Knowledge.
    std::vector<core::TierKind> tiers;
    core::TierLimits exactLimits;
    core::TierLimits semanticLimits;
    core::TierLimits prefixLimits; // per model (A and B each get a tree with these limits)
    double threshold = 0.8;        // semantic cosine threshold
    // Semantic tier: embed the request's question (its last user message, as GPTCache's
    // last_content does) rather than the whole prompt, whose shared system prompt would make
    // every request of a tenant look alike. Falls back to the prompt when a request has none.
    bool embedQuestion = true;
    int prefixBlock = 16;      // tokens per prefix-tree block
    CrossTierOptions cross;    // the cross tier's matching and quality gate
    bool onClock = false;      // wait for each request's arrival time (scaled by speed)
    double speed = 1.0;        // > 1 replays faster than the workload's clock
    int maxTokens = 0;         // > 0 overrides every request's max_tokens
    double shadowFraction = 0; // share of hits re-run from scratch for verification
    uint64_t seed = 1;         // shadow sampling
    core::Prices prices;
    // Null: every tier keeps its entries in this process. Else the exact and semantic response tiers
    // and the prefix KV blocks live in this shared store (core/cache/shared_store.h; a fleet's
    // workers each open their own connection to one server). Owned by the caller.
    core::SharedStore *store = nullptr;
    // What prefix KV blocks are written to the store as: F32, F16 or BF16 (half the bytes; values
    // rounded, so a hit's output may differ from a miss's: --shadow measures it).
    core::FloatType storeKvDtype = core::FloatType::F32;
    // Semantic tier: per-entry thresholds under this error bound (the threshold a floor); nullopt:
    // one global threshold. Not with a shared store.
    std::optional<core::EntryBoundOptions> semanticBound;
    core::SemanticGuards guards;     // semantic hits refused on a negation, number, entity or question word
    core::VerifierSettings verifier; // the semantic tier's second stage (none: not consulted)
};

struct ReplayResult
{
    std::vector<core::LedgerRow> rows;
    core::LedgerSummary summary;
    // Semantic threshold sweep over the nearest neighbour seen at each semantic lookup: columns
    // threshold, hit_rate, false_hit_rate, hits, false_hits (hit rate over semantic lookups).
    core::MetricTable thresholdSweep;
    // Per request: wall time minus model work (prefill, decode, gate, conversion, shadow runs),
    // i.e. what the tiers and the replay's own bookkeeping cost [requests] (ms).
    std::vector<double> overheadMs;
    // Per request: the answer text (a stored response on a response hit).
    std::vector<std::string> outputs;
    // Each tier's own bookkeeping at the end (entries and bytes held, inserts, evictions, expiries):
    // what capacity limits and eviction policies did. Tiers over a shared store count the entries
    // this process wrote (the server's side is SharedStore::stats()).
    std::map<core::TierKind, core::StoreStats> tierStats;
    std::vector<std::string> warnings;
    bool cancelled = false;
};

// Called after every request: the row just appended, requests done and total.
using ReplayEventFn = std::function<bool(const core::LedgerRow &row, int done, int total)>;

struct ReplayModels
{
    const Model *a = nullptr; // model "a" of the workload
    const Model *b = nullptr; // model "b"; may be null when no request names it
    const core::Tokenizer *tokenizerA = nullptr;
    const core::Tokenizer *tokenizerB = nullptr;
    const Converter *converter = nullptr; // A -> B, needed by the Cross tier
    core::Embedder *embedder = nullptr;   // needed by the Semantic tier
    // The Knowledge tier (gpu/replay/knowledge_tier.h), owned by the caller so that its graph,
    // reuse counts and costs can be read after the replay; needed when the stack names it.
    core::CacheTier *knowledge = nullptr;
};

// Checks every request first (model name, non-empty prompt, prompt + max tokens within the model's
// context: Error(InvalidArgument) naming the request id and field) and the tier setup (Cross needs
// both models and a converter, Semantic an embedder, Knowledge model B and the tier), then replays
// in order.
ReplayResult replayWorkload(const std::vector<core::WorkloadRequest> &requests, const ReplayModels &models,
                            const ReplayOptions &options, const ReplayEventFn &onRow = {});

// A ledger row holding a request's identity (id, arrival, tenant, model, intent) and its question
// (core::ledgerText) and nothing else yet: what every row starts from, and all a not-served row has.
core::LedgerRow requestRow(const core::WorkloadRequest &request);

} // namespace kvwb::gpu
