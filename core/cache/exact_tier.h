// Exact response cache: a response is reused when tenant, model fingerprint, normalised prompt and
// sampling parameters are all equal. Capacity, eviction, isolation and invalidation come from
// CacheStore (core/cache/cache_store.h).
//
// Thread-safety: none (engine thread).
#pragma once

#include "core/cache/cache_store.h"

#include <optional>
#include <string>
#include <vector>

namespace kvwb::core {

// What a response tier returns for a hit.
struct CachedResponse
{
    std::string text;
    std::vector<int> outputIds;
    std::string intent;     // the intent label of the request that produced it ("" unknown)
    int64_t requestId = -1; // the request that produced it
};

struct ExactKey
{
    std::string tenant;
    std::string modelFingerprint;
    std::string prompt;   // normalised by the tier (normalisePrompt)
    std::string sampling; // e.g. "greedy max=64"; responses of other parameters never match
};

// NFC-free, cheap normalisation: trims, turns every run of whitespace into one space. Case and
// punctuation are kept (they change answers).
std::string normalisePrompt(const std::string &prompt);

class ExactTier
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
    int64_t invalidateModel(const std::string &modelFingerprint);
    int64_t invalidateTag(const std::string &tag);
    StoreStats stats() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace kvwb::core
