// The KV cache tiers of a replay, behind core::CacheTier (core/cache/cache_tier.h):
// - PrefixKvTier: same-model prefix KV reuse (vLLM/SGLang style). Per model of the pair, a radix
//   tree over token blocks (core/cache/prefix_tree.h) and the KV caches its handles point at; a hit
//   hands back a fork of the longest cached prefix (at most all prompt tokens but the last, whose
//   logits the model must compute).
// - CrossModelTier: A's cached prefix of the same prompt, converted into B's KV space
//   (gpu/transfer/transfer.h) and handed to B, after the quality gate; approximate reuse, counted
//   as its own tier, never as an exact hit. It reads A's entries from a PrefixKvTier.
// - KvCachePayload: a KvCache as the core::KvPayload a KV tier hands back and takes in.
//
// Threading: engine thread only (the caches live on the models' device). Ownership: tiers own their
// caches; the models, tokenizers and converter they point at must outlive them.
#pragma once

#include "core/cache/cache_tier.h"
#include "core/cache/prefix_tree.h"
#include "core/cache/recompute_plan.h"
#include "core/cache/shared_store.h"
#include "core/tokenize/token_alignment.h"
#include "core/tokenize/tokenizer.h"
#include "gpu/model/kv_cache.h"
#include "gpu/model/model.h"
#include "gpu/transfer/transfer.h"

#include <memory>
#include <unordered_map>

namespace kvwb::gpu {

struct KvCachePayload : core::KvPayload
{
    explicit KvCachePayload(KvCache c) : cache(std::move(c)) {}
    int tokens() const override { return cache.tokens(); }
    KvCache cache;
};

class PrefixKvTier : public core::CacheTier
{
public:
    // a, b: the pair (b may be null); limits apply per model; blockSize tokens per tree block.
    // store: null keeps blocks in this process (a radix tree per model); else every whole block's KV
    // lives in the shared store (docs/fleet.md, "Prefix blocks"), keyed by the model's fingerprint,
    // the tenant and the token ids up to the block's end, so any worker can continue from it.
    // storeDtype: what blocks are written to the store as (F32, F16 or BF16: half the bytes, values
    // rounded); blocks of any of the three are read.
    PrefixKvTier(const Model *a, const Model *b, const core::TierLimits &limits, int blockSize,
                 core::SharedStore *store = nullptr, core::FloatType storeDtype = core::FloatType::F32);

    core::TierKind kind() const override { return core::TierKind::Prefix; }
    core::TierLookup lookup(const core::TierRequest &request) override;
    // Keeps the computed cache (takes computed.kv) under every whole block of the prompt.
    void insert(const core::TierRequest &request, core::TierInsert computed) override;
    int64_t evict(int64_t nowMs) override;
    int64_t invalidateModel(const std::string &modelFingerprint) override;
    int64_t invalidateTag(const std::string &tag) override;
    core::StoreStats stats() const override; // both models' trees together

    struct Match
    {
        int tokens = 0;                 // matched whole-block prefix (0 = miss)
        const KvCache *cache = nullptr; // holds at least those tokens
    };
    // The longest cached prefix of `tokens` in `role`'s tree for (tenant, that model): for tiers that
    // read this one's entries (the cross-model tier reads A's).
    Match longestPrefix(core::ModelRole role, const std::string &tenant, const std::vector<int> &tokens,
                        int64_t nowMs);

private:
    struct ModelStore
    {
        const Model *model = nullptr;
        std::string fingerprint;
        std::unique_ptr<core::PrefixTree> tree;
        std::unordered_map<uint64_t, KvCache> caches; // handle -> cache
    };
    ModelStore &storeOf(core::ModelRole role);
    // Shared-store mode: the leading whole blocks of `tokens` found in the store, assembled into one
    // cache (m_fetched); outcome for the ledger.
    Match fetchBlocks(ModelStore &s, core::ModelRole role, const std::string &tenant,
                      const std::vector<int> &tokens, int64_t nowMs, core::StoreNote &outcome);
    void putBlocks(ModelStore &s, const std::string &tenant, const std::vector<int> &tokens,
                   const KvCache &cache, int fromBlock, int64_t nowMs);
    void releaseCaches(ModelStore &s);
    void releaseAll();

    ModelStore m_stores[2]; // [A, B]
    uint64_t m_nextHandle = 1;
    core::SharedStore *m_shared = nullptr;
    core::TierLimits m_limits;
    int m_block = 16;
    core::DType m_storeDtype = core::DType::F32; // toDType of the constructor's storeDtype
    KvCache m_fetched;                           // the last cache assembled from the store
    int64_t m_fetchedFor = -1;                   // ... for this request (blocks found, so insert skips them)
    int m_fetchedBlocks = 0;
    core::StoreNote m_lastOutcome =
        core::StoreNote::None; // of the last store lookup, for the cross tier's ledger note
    int64_t m_storeBytesPut = 0;
    int64_t m_storeBlocksPut = 0;

public:
    core::StoreNote lastStoreOutcome() const { return m_lastOutcome; }
};

struct CrossTierOptions
{
    int minTokens = 16; // reuse needs at least this many matched tokens
    bool gate = true;   // false: use every match without the gate
    GateSignal gateSignal = GateSignal::TailKl;
    double gateThreshold = 0.1;
    int gateTail = 4;
    // Models with different tokenizers: how each B token is paired with an A token
    // (gpu/transfer/cross_tokenizer.h).
    core::AlignPolicy alignPolicy = core::kDefaultAlignPolicy;
    // Selective recompute: B recomputes this share of the converted prefix itself (reused tokens
    // count the converted positions only).
    core::RecomputePlan recompute;
};

class CrossModelTier : public core::CacheTier
{
public:
    // Serves requests for model B from A's entries in `source` through `converter` (A -> B). A's
    // tree is keyed by A's token ids: the prompt is tokenised by A, and when that differs from B's
    // tokens, B's cached positions are the leading B tokens whose paired A token (by byte spans,
    // options.alignPolicy) lies in A's matched prefix, built from A's rows as transfer does.
    CrossModelTier(PrefixKvTier &source, const Model &a, const Model &b, const core::Tokenizer &tokenizerA,
                   const core::Tokenizer &tokenizerB, const Converter &converter, CrossTierOptions options);

    core::TierKind kind() const override { return core::TierKind::Cross; }
    core::TierLookup lookup(const core::TierRequest &request) override;
    // Entries are A's prefix caches, kept by the source tier: nothing to keep here.
    void insert(const core::TierRequest &, core::TierInsert) override {}
    int64_t evict(int64_t) override { return 0; }
    int64_t invalidateModel(const std::string &) override { return 0; }
    int64_t invalidateTag(const std::string &) override { return 0; }
    core::StoreStats stats() const override { return {}; }

private:
    PrefixKvTier &m_source;
    const Model &m_a;
    const Model &m_b;
    const core::Tokenizer &m_tokenizerA;
    const core::Tokenizer &m_tokenizerB;
    const Converter &m_converter;
    CrossTierOptions m_options;
    bool m_warnedTokenizers = false;
};

} // namespace kvwb::gpu
