// Response tiers whose entries live in a SharedStore (core/cache/shared_store.h), so a fleet of
// replay workers shares them:
// - SharedExactTier: the exact response cache, one store key per (tenant, fingerprint, sampling,
//   normalised prompt); expiry through the store (limits.ttlMs), capacity the store's (Redis
//   maxmemory and its policy).
// - SharedSemanticTier: GPTCache's layout. Entries (scope, prompt, vector, response) are appended to
//   the store's "semantic" stream; each worker keeps its own hnswlib index (a core::SemanticTier with
//   the worker's limits) and, before every lookup, inserts what other workers appended since it last
//   looked, so a worker started late catches up from the start of the stream.
//
// A store that cannot be reached makes a lookup a miss (the request is computed) and an insert a
// no-op; TierLookup::store says so for the ledger. Refused payloads are misses too, counted by the
// store.
//
// Thread-safety: none (engine thread).
#pragma once

#include "core/cache/semantic_tier.h"
#include "core/cache/shared_store.h"

#include <memory>
#include <set>
#include <string>

namespace kvwb::core {

class SharedExactTier : public CacheTier
{
public:
    // The store must outlive the tier. limits: ttlMs and shareAcrossTenants are used; capacity is the
    // store's.
    SharedExactTier(SharedStore &store, TierLimits limits);

    TierKind kind() const override { return TierKind::Exact; }
    TierLookup lookup(const TierRequest &request) override;
    void insert(const TierRequest &request, TierInsert computed) override;
    int64_t evict(int64_t) override { return 0; } // the store expires entries itself
    int64_t invalidateModel(const std::string &modelFingerprint) override;
    int64_t invalidateTag(const std::string &tag) override;
    StoreStats stats() const override;

private:
    TenantScope scopeOf(const TierRequest &request) const;
    SharedStore &m_store;
    TierLimits m_limits;
    StoreStats m_stats;
};

class SharedSemanticTier : public CacheTier
{
public:
    // The store and embedder must outlive the tier.
    SharedSemanticTier(SharedStore &store, TierLimits limits, Embedder &embedder, double threshold);
    ~SharedSemanticTier();

    TierKind kind() const override { return TierKind::Semantic; }
    TierLookup lookup(const TierRequest &request) override;
    void insert(const TierRequest &request, TierInsert computed) override;
    void setGuards(SemanticGuards guards) { m_local.setGuards(guards); } // as SemanticTier's
    void setVerifier(VerifierSettings verifier) { m_local.setVerifier(verifier); }
    int64_t evict(int64_t nowMs) override;
    int64_t invalidateModel(const std::string &modelFingerprint) override;
    int64_t invalidateTag(const std::string &tag) override;
    StoreStats stats() const override;

    // Reads the stream past what this worker has seen into its local index; false when the store
    // could not be reached. Entries of another embedder or dimension are skipped (counted).
    bool catchUp();
    int64_t entriesFromOthers() const { return m_fromOthers; }
    int64_t entriesSkipped() const { return m_skipped; }

private:
    SharedStore &m_store;
    Embedder &m_embedder;
    SemanticTier m_local;
    std::string m_lastId;
    std::set<std::string> m_ownIds;
    int64_t m_fromOthers = 0;
    int64_t m_skipped = 0;
    // the request being served: embedded once for lookup and insert
    int64_t m_embeddedFor = -1;
    std::vector<float> m_embedding;
};

} // namespace kvwb::core
