// The knowledge tier (docs/knowledge.md): requests matched to a concept node of a shared graph, the
// node's KV module (its knowledge text as model B computed it once) placed behind the request's
// system prompt, and B rendering the answer from [system prompt + module + the user's profile line
// + question]. One shared computation per concept, one cheap personalised rendering per request.
//
// A lookup: the question is embedded by the semantic tier's embedder; vector recall
// (core/cache/knowledge_recall.h) proposes the nearest nodes; graph verification
// (core::KnowledgeGraph::verify) accepts the first whose own name is the concept the question
// names, or rejects them all (a miss, recorded as "rejected"). The accepted node's module is reused
// when fresh, recomputed (and counted) when stale by TTL or model fingerprint or missing. The
// request's system prompt KV is computed once per tenant and prompt and forked. Requests for model
// A, and requests whose rewritten prompt would not fit B's context, miss.
//
// Scopes: a graph given for a tenant answers only that tenant's requests; a graph given for no
// tenant ("") is shared by every tenant on purpose: its nodes hold no tenant or user data (the
// profile line is rendered per request, after the module, and never stored). Cached system prompts
// are kept per tenant.
//
// Threading: the engine thread (model B, its caches, the embedder). Ownership: the tier owns the
// graphs (reuse counts and refreshed modules are updated in place, see scopes()); model B, its
// tokenizer and the embedder must outlive it.
#pragma once

#include "core/cache/cache_tier.h"
#include "core/cache/semantic_tier.h"
#include "core/knowledge/user_profiles.h"
#include "core/settings/replay_settings.h"
#include "core/store/knowledge_store.h"
#include "core/tokenize/tokenizer.h"
#include "gpu/model/model.h"

#include <memory>
#include <string>
#include <vector>

namespace kvwb::gpu {

// candidates, minSimilarity, verify, ttlMs, boundary, clockStartMs (the replay's settings as they are)
using KnowledgeTierOptions = core::KnowledgeTierSettings;

struct KnowledgeScope
{
    std::string tenant; // "" = shared by every tenant
    core::KnowledgeFile file;
};

// Where the tier's time went, summed over lookups (ms), and what it computed itself.
struct KnowledgeCosts
{
    int64_t lookups = 0;
    double embedMs = 0;     // embedding the question
    double recallMs = 0;    // the vector index
    double verifyMs = 0;    // graph verification of the candidates
    double placeMs = 0;     // module placement (re-rotation, copies) and boundary recomputation
    double prefixMs = 0;    // system prompts computed (once per tenant and prompt)
    double recomputeMs = 0; // stale or missing modules computed
    int64_t modulesRecomputed = 0;
    int64_t recomputedTokens = 0;
    int64_t prefixTokens = 0;
    int64_t rejected = 0;
    double indexBuildMs = 0; // embedding and indexing the graphs' entries (once, at construction)
};

class KnowledgeTier : public core::CacheTier
{
public:
    // Error(InvalidArgument) for a scope whose modules have another geometry than B's, two scopes of
    // one tenant, or two profiles of one user.
    KnowledgeTier(std::vector<KnowledgeScope> scopes, const Model &b, const core::Tokenizer &tokenizerB,
                  core::Embedder &embedder, const std::vector<core::UserProfile> &profiles,
                  const KnowledgeTierOptions &options);
    ~KnowledgeTier() override;

    core::TierKind kind() const override { return core::TierKind::Knowledge; }
    core::TierLookup lookup(const core::TierRequest &request) override;
    void insert(const core::TierRequest &, core::TierInsert) override {} // learns nothing from answers
    int64_t evict(int64_t nowMs) override;                               // TTL makes modules stale, not gone
    int64_t
    invalidateModel(const std::string &modelFingerprint) override; // modules dropped (recomputed later)
    int64_t invalidateTag(const std::string &tag) override;        // modules of that node id
    core::StoreStats stats() const override;                       // modules held and their bytes

    const std::vector<KnowledgeScope> &scopes() const; // reuse counts and refreshed modules included
    const KnowledgeCosts &costs() const;
    std::vector<std::string> warnings() const; // said once at construction (modules of other weights)

private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

} // namespace kvwb::gpu
