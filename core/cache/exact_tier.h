// Exact response cache: a response is reused when tenant, model fingerprint, normalised prompt and
// sampling parameters are all equal. Capacity, eviction, isolation and invalidation come from
// CacheStore (core/cache/cache_store.h).
//
// Thread-safety: none (engine thread).
#pragma once

#include "core/cache/cache_store.h"
#include "core/cache/cache_tier.h"

#include <optional>
#include <string>
#include <vector>

namespace kvwb::core {

struct ExactKey
{
    TenantScope scope;
    std::string prompt;   // normalised by the tier (normalisePrompt)
    std::string sampling; // e.g. "greedy max=64"; responses of other parameters never match
};

// NFC-free, cheap normalisation: trims, turns every run of whitespace into one space. Case and
// punctuation are kept (they change answers).
std::string normalisePrompt(const std::string &prompt);

class ExactTier : public CacheTier
{
public:
    explicit ExactTier(TierLimits limits);
    ~ExactTier();
    ExactTier(ExactTier &&) noexcept;
    ExactTier &operator=(ExactTier &&) noexcept;

    std::optional<CachedResponse> lookup(const ExactKey &key, int64_t nowMs);
    // Bytes accounted: prompt + text + ids; tags as in EntryScope.
    void insert(const ExactKey &key, CachedResponse response, int64_t nowMs,
                const std::vector<std::string> &tags = {});
    int64_t invalidateModel(const std::string &modelFingerprint) override;
    int64_t invalidateTag(const std::string &tag) override;
    StoreStats stats() const override;

    // CacheTier: the key is (scope, the normalised prompt, the request's sampling string).
    TierKind kind() const override { return TierKind::Exact; }
    TierLookup lookup(const TierRequest &request) override;
    void insert(const TierRequest &request, TierInsert computed) override;
    int64_t evict(int64_t nowMs) override;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace kvwb::core
