// The one interface every cache tier implements (exact and semantic responses here in core/cache,
// same-model prefix KV, cross-model KV and knowledge modules in gpu/replay), so a replay is a loop over a
// stack of tiers and a new tier plugs in without touching the replay.
//
// A tier is asked, in stack order, whether it can serve a request (lookup); when the model ran on
// its own (a miss, or a same-model prefix hit), every tier is offered what was computed (insert).
// Approximate reuse (semantic answers, converted KV, knowledge modules) reports itself as such
// through its TierKind, never as an exact hit, and what it produced is never inserted: no exact,
// semantic or prefix entry descends from an approximate hit.
//
// The tenant scope is part of every key: TenantScope has no default constructor, so a lookup or
// insert without a scope does not compile.
//
// Thread-safety: none; tiers belong to the replay running on the engine thread. Ownership: a tier
// owns its entries; a KV payload handed back by lookup belongs to the caller.
#pragma once

#include "core/cache/cache_store.h"
#include "core/cache/semantic_guards.h"
#include "core/cache/semantic_verifier.h"
#include "core/model/kv_types.h"
#include "core/util/enum_names.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::core {

// Which tier served a request, and the notes each tier leaves on a lookup (TierLookup below); the
// ledger (core/ledger/replay_ledger.h) records them, spelled by these tables.
enum class TierKind
{
    None,     // a miss everywhere: the model ran from scratch
    Exact,    // exact response hit
    Semantic, // semantic response hit
    Prefix,   // same-model prefix KV reused, the rest prefilled
    Cross,    // the other model's prefix KV converted and reused
    Knowledge // a concept node's KV module placed, the personalised answer rendered on top
};
// "none" | "exact" | "semantic" | "prefix" | "cross" | "knowledge"
inline constexpr EnumName<TierKind> kTierKindNames[] = {
    {TierKind::None, "none"},     {TierKind::Exact, "exact"}, {TierKind::Semantic, "semantic"},
    {TierKind::Prefix, "prefix"}, {TierKind::Cross, "cross"}, {TierKind::Knowledge, "knowledge"}};
KVWB_ENUM_NAMES(TierKind, kTierKindNames, tierKindName, parseTierKind)

// Reuse that is not the model's own computation for the prompt: a semantic answer, converted KV, a
// knowledge module. What it produced is never cached (TierInsert::approximate).
constexpr bool isApproximate(TierKind t) noexcept
{
    return t == TierKind::Semantic || t == TierKind::Cross || t == TierKind::Knowledge;
}

// A cross-model hit's quality gate: not consulted, passed (the converted cache was used) or failed
// (B computed the prompt itself).
enum class GateDecision
{
    None,
    Pass,
    Fail
};
inline constexpr EnumName<GateDecision> kGateDecisionNames[] = {
    {GateDecision::None, ""}, {GateDecision::Pass, "pass"}, {GateDecision::Fail, "fail"}};

// The knowledge tier's verification of the node recall proposed.
enum class KnowledgeVerdict
{
    None,
    Verified,
    Rejected
};
inline constexpr EnumName<KnowledgeVerdict> kKnowledgeVerdictNames[] = {
    {KnowledgeVerdict::None, ""},
    {KnowledgeVerdict::Verified, "verified"},
    {KnowledgeVerdict::Rejected, "rejected"}};

// What happened to a knowledge node's KV module: reused as stored, recomputed (stale, or built for
// the first time), or not used (the rewritten prompt would not fit model B's context).
enum class ModuleFate
{
    None,
    Reused,
    Recomputed,
    TooLong
};
inline constexpr EnumName<ModuleFate> kModuleFateNames[] = {{ModuleFate::None, ""},
                                                            {ModuleFate::Reused, "reused"},
                                                            {ModuleFate::Recomputed, "recomputed"},
                                                            {ModuleFate::TooLong, "too-long"}};

// The semantic tier under an error bound: the entry's estimated error allowed serving it, or the
// request was computed and the outcome observed.
enum class SemanticDecision
{
    None,
    Serve,
    Explore
};
inline constexpr EnumName<SemanticDecision> kSemanticDecisionNames[] = {
    {SemanticDecision::None, ""}, {SemanticDecision::Serve, "serve"}, {SemanticDecision::Explore, "explore"}};

// A shared store under the tiers: the worst outcome of a request's store calls (None: no store).
enum class StoreNote
{
    None,
    Hit,
    Miss,
    Refused,    // a corrupt or foreign payload, not used
    Unavailable // no server: the request was computed instead
};
inline constexpr EnumName<StoreNote> kStoreNoteNames[] = {{StoreNote::None, ""},
                                                          {StoreNote::Hit, "hit"},
                                                          {StoreNote::Miss, "miss"},
                                                          {StoreNote::Refused, "refused"},
                                                          {StoreNote::Unavailable, "unavailable"}};
// The worse of two outcomes: unavailable > refused > hit > miss > none.
inline StoreNote worseStoreNote(StoreNote x, StoreNote y) noexcept
{
    const auto rank = [](StoreNote n) {
        switch (n) {
        case StoreNote::None:
            return 0;
        case StoreNote::Miss:
            return 1;
        case StoreNote::Hit:
            return 2;
        case StoreNote::Refused:
            return 3;
        case StoreNote::Unavailable:
            return 4;
        }
        return 0;
    };
    return rank(x) >= rank(y) ? x : y;
}

// Why a request was not served: it was (No), its prompt and max_tokens do not fit a model's context,
// or a fleet worker died before serving it.
enum class NotServed
{
    No,
    Context,
    Worker
};
inline constexpr EnumName<NotServed> kNotServedNames[] = {
    {NotServed::No, ""}, {NotServed::Context, "context"}, {NotServed::Worker, "worker"}};

// Who an entry belongs to and what may see it: the requesting tenant and the fingerprint of the
// model whose entries may answer. Entries of another fingerprint never hit; another tenant's never
// hit unless the tier's limits share entries across tenants on purpose.
class TenantScope
{
public:
    TenantScope(std::string tenant, std::string modelFingerprint)
        : m_tenant(std::move(tenant)), m_modelFingerprint(std::move(modelFingerprint))
    {}
    const std::string &tenant() const { return m_tenant; }
    const std::string &modelFingerprint() const { return m_modelFingerprint; }

private:
    std::string m_tenant;
    std::string m_modelFingerprint;
};

// What a response tier returns for a hit.
struct CachedResponse
{
    std::string text;
    std::vector<int> outputIds;
    std::string intent;     // the intent label of the request that produced it ("" unknown)
    int64_t requestId = -1; // the request that produced it
};

// A KV cache a KV tier hands to the caller (the gpu layer's KvCache behind a core-visible type).
class KvPayload
{
public:
    virtual ~KvPayload() = default;
    virtual int tokens() const = 0; // positions filled
};

// One request as every tier sees it. The referenced values outlive the calls that receive it.
struct TierRequest
{
    TenantScope scope;              // tenant + the requested model's fingerprint
    ModelRole role;                 // which model of the pair the request is for
    int64_t requestId = 0;          // the workload's request id
    int64_t nowMs = 0;              // workload time (replays are deterministic)
    const std::string &prompt;      // the whole prompt text
    const std::string &embedText;   // what a semantic tier embeds (the question, or the prompt)
    const std::vector<int> &tokens; // the prompt encoded by the requested model's tokenizer
    const std::string &sampling;    // e.g. "greedy max=16": responses of other settings never match
    const std::string &intent;      // the request's intent label ("" unknown)
    const std::string &user;        // the workload's user id ("" unknown): the personalisation key
    const std::string &question;    // the question inside the prompt ("" when not known)
    int maxTokens = 0;              // tokens the answer may take (a rewritten prompt must leave room)
};

// What one tier's lookup found. A hit either carries a response (response tiers) or a KV cache
// covering `reusedTokens` prompt tokens (KV tiers); the rest is what the ledger records of the look.
struct TierLookup
{
    bool hit = false;
    std::optional<CachedResponse> response; // response tiers
    std::unique_ptr<KvPayload> kv;          // KV tiers: continue from this cache
    int reusedTokens = 0;                   // KV tiers: prompt tokens the cache covers
    // Semantic tiers: the nearest entry's similarity (whether or not it passed the threshold) and
    // that entry's intent, for the ledger and the threshold sweep.
    std::optional<double> nearestSimilarity;
    std::string nearestIntent;
    // Semantic tiers: the guard that kept a candidate above the threshold from serving
    // (core/cache/semantic_guards.h), and whether that candidate's intent was the request's (1), another
    // (0) or unknown (-1): a hit lost or a false hit prevented.
    SemanticGuard guard = SemanticGuard::None;
    int guardedSameIntent = -1;
    // Semantic tiers with a verifier (core/cache/semantic_verifier.h): its verdict on the candidate,
    // its score (-1: none) and the time it took. A guard set beside a pass: the verifier overruled it.
    VerifierVerdict verifier = VerifierVerdict::None;
    double verifierScore = -1;
    double verifierMs = 0;
    // Gated tiers (cross-model KV): the gate's decision and measured signal.
    GateDecision gate = GateDecision::None;
    double gateValue = 0;
    double modelMs = 0; // model work inside the lookup (gate, conversion): not tier overhead
    std::vector<std::string> warnings;
    // Tiers that answer a rewritten prompt (the knowledge tier: prefix + module + profile +
    // question): the tokens the model continues from instead of the request's; `kv` covers the
    // first reusedTokens + computedTokens of them. Empty: the request's own tokens.
    std::vector<int> prompt;
    int computedTokens = 0;   // of the cache handed back, positions computed inside this lookup
    std::string reusedIntent; // a KV hit that stands for an intent (a knowledge node's id)
    // The knowledge tier's ledger notes (core::LedgerRow's knowledge fields): the node it judged,
    // the verdict, the module's fate, whether a profile was rendered (-1: not consulted).
    struct KnowledgeNote
    {
        std::string node;
        KnowledgeVerdict verdict = KnowledgeVerdict::None;
        ModuleFate module = ModuleFate::None;
        int profileApplied = -1;
    } knowledge;
    // A tier over a shared store: its outcome.
    StoreNote store = StoreNote::None;
    // A semantic tier with per-entry thresholds; None when not consulted above the floor.
    SemanticDecision semanticDecision = SemanticDecision::None;
};

// What the model computed for a request no tier served, offered to every tier to keep.
struct TierInsert
{
    const CachedResponse &response;
    // The requested model's KV cache after generation; a KV tier may take it (leaving null). At
    // most one tier per model keeps it.
    std::unique_ptr<KvPayload> &kv;
    // The answer descends from an approximate hit (isApproximate): no tier keeps it; a tier may
    // only learn from it (the semantic tier's error bound, from a labelled intent).
    bool approximate = false;
};

class CacheTier
{
public:
    virtual ~CacheTier() = default;
    virtual TierKind kind() const = 0;
    virtual TierLookup lookup(const TierRequest &request) = 0;
    virtual void insert(const TierRequest &request, TierInsert computed) = 0;
    // Removes every entry expired at nowMs (capacity evictions happen on insert); entries removed.
    virtual int64_t evict(int64_t nowMs) = 0;
    virtual int64_t invalidateModel(const std::string &modelFingerprint) = 0; // entries removed
    virtual int64_t invalidateTag(const std::string &tag) = 0;
    virtual StoreStats stats() const = 0;
};

} // namespace kvwb::core
