// The bookkeeping every cache tier shares: capacity in bytes and/or entries, an eviction policy
// (LRU, LFU, FIFO, TTL), per-tenant namespaces that cannot leak, invalidation by model fingerprint
// and by tag. Tiers (core/cache/exact_tier.h, core/cache/semantic_tier.h, core/cache/prefix_tree.h) keep
// their own payloads and use a CacheStore to decide what to keep.
//
// Time is the caller's: every call takes nowMs (workload time, so replays are deterministic). An
// entry inserted at t is alive while nowMs < t + ttlMs.
// Thread-safety: none; a store belongs to the replay running on the engine thread.
#pragma once

#include "core/util/enum_names.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::core {

enum class Eviction
{
    Lru,  // least recently used first
    Lfu,  // least frequently used first (ties: least recently used)
    Fifo, // oldest insertion first
    Ttl   // entries expire ttlMs after insertion; when full, the soonest to expire goes first
};
// "lru" | "lfu" | "fifo" | "ttl"
inline constexpr EnumName<Eviction> kEvictionNames[] = {
    {Eviction::Lru, "lru"}, {Eviction::Lfu, "lfu"}, {Eviction::Fifo, "fifo"}, {Eviction::Ttl, "ttl"}};
KVWB_ENUM_NAMES(Eviction, kEvictionNames, evictionName, parseEviction)

struct TierLimits
{
    int64_t maxBytes = 0;   // 0 = unlimited
    int64_t maxEntries = 0; // 0 = unlimited
    Eviction eviction = Eviction::Lru;
    int64_t ttlMs = 0; // > 0: entries older than this never hit (with any policy); required for Ttl
    // false: every entry belongs to the tenant that stored it and only that tenant's requests see
    // it. true: one shared scope (the tenant is ignored), configured on purpose.
    bool shareAcrossTenants = false;
};

// Who may see an entry and what invalidates it.
struct EntryScope
{
    std::string tenant;
    std::string modelFingerprint; // entries of another fingerprint never hit
    std::vector<std::string> tags;
};

struct StoreStats
{
    int64_t entries = 0;
    int64_t bytes = 0;
    int64_t inserts = 0;
    int64_t evictions = 0;     // removed to make room
    int64_t expirations = 0;   // removed because their TTL passed
    int64_t invalidations = 0; // removed by model fingerprint or tag

    // Every count added (several stores reported as one).
    StoreStats &operator+=(const StoreStats &o)
    {
        entries += o.entries;
        bytes += o.bytes;
        inserts += o.inserts;
        evictions += o.evictions;
        expirations += o.expirations;
        invalidations += o.invalidations;
        return *this;
    }
};

// Ids are the store's (never 0); a tier maps them to its payloads. Every removal (eviction, expiry,
// invalidation, erase, clear) is reported through the onRemove callback before the call returns, so
// a tier can drop its payload (an index label, a KV cache handle). The callback must not call back
// into the store. The destructor reports nothing.
//
// Dependents (the prefix tree's blocks): an entry inserted with a parent is its dependent. An entry
// with dependents is never evicted (only leaves are: evicting a leaf may make its parent one), and
// removing an entry any other way (expiry, invalidation, erase) removes its dependents first, each
// reported and counted under the same cause.
class CacheStore
{
public:
    using EntryId = uint64_t;
    explicit CacheStore(TierLimits limits, std::function<void(EntryId)> onRemove = {});
    ~CacheStore();
    CacheStore(CacheStore &&) noexcept;
    CacheStore &operator=(CacheStore &&) noexcept;

    const TierLimits &limits() const;
    // The namespace an entry of this scope lives in: tenant ("" when shared across tenants) + "\x1f"
    // + fingerprint. Tiers key their lookups with it, so a tenant's query can never reach another's
    // entries. A tenant containing "\x1f" would make namespaces ambiguous: Error(InvalidArgument).
    std::string namespaceOf(const std::string &tenant, const std::string &modelFingerprint) const;

    // Adds an entry of `bytes` and evicts others (by policy) until the limits hold; expired entries
    // are removed first. An entry that cannot fit even after every evictable entry went (larger than
    // maxBytes on its own, or together with its parent chain, which cannot be evicted while it
    // lives) is not kept: returns std::nullopt (and nothing else is evicted). parent: 0 or a live
    // entry of the same namespace (else Error(InvalidArgument)).
    std::optional<EntryId> insert(const EntryScope &scope, int64_t bytes, int64_t nowMs, EntryId parent = 0);
    // True when the entry exists, is visible to (tenant, fingerprint) and has not expired; records
    // the use (recency, frequency). An expired entry is removed on the way.
    bool touch(EntryId id, const std::string &tenant, const std::string &modelFingerprint, int64_t nowMs);
    // Changes an entry's size (a prefix node that grew); evicts others if the limits need it, and the
    // entry itself (counted as an eviction) when even that is not enough.
    void resize(EntryId id, int64_t bytes, int64_t nowMs);
    void erase(EntryId id);
    bool contains(EntryId id) const;
    int64_t invalidateModel(const std::string &modelFingerprint); // entries removed
    int64_t invalidateTag(const std::string &tag);
    int64_t expire(int64_t nowMs); // removes every expired entry
    void clear();
    StoreStats stats() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace kvwb::core
