// The store under the cache tiers that a fleet of replay workers shares: binary payloads under
// tenant-scoped keys, with expiry, invalidation by model fingerprint and by tag, and an append-only
// stream (the semantic tier's entries, so each worker keeps its own vector index in sync). Two
// implementations: in this process (makeMemoryStore) and Redis (openSharedStore: one server,
// "redis://HOST:PORT[/DB]", or a Redis Cluster, "redis-cluster://HOST:PORT[,HOST:PORT...]", keys
// routed by hash slot with MOVED/ASK redirections followed), the layout in docs/fleet.md.
//
// Every value is a payload envelope (core/cache/store_payload.h): a get decodes it and refuses one
// whose checksum, tenant, model fingerprint or tier disagrees with what was asked for (counted as
// refused, never used). A store that cannot be reached (connection refused, timeout, a server
// restart) never throws from get/put: the outcome is Unavailable, counted, and the caller computes
// instead; the next call tries to reconnect.
//
// Thread-safety: none; one store per worker process (each worker opens its own connection).
#pragma once

#include "core/cache/cache_tier.h"
#include "core/cache/store_payload.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

struct SharedStoreStats
{
    int64_t gets = 0;
    int64_t hits = 0;
    int64_t puts = 0;
    int64_t refused = 0;     // payloads that failed the envelope's checks (corrupt or foreign)
    int64_t unavailable = 0; // calls that found no server (refused connection, timeout, I/O error)
    int64_t reconnects = 0;  // connections re-established after a failure
    int64_t bytesSent = 0;   // payload bytes written
    int64_t bytesReceived = 0;
    double netMs = 0; // wall time inside the store's round trips (network + server)
    int64_t invalidated = 0;
};

// What the server says of its memory (Redis INFO; the memory store fills what it knows).
struct StoreServerInfo
{
    int64_t usedBytes = 0;
    int64_t maxBytes = 0;       // 0 = no limit
    std::string evictionPolicy; // Redis maxmemory-policy, or "none"
    int64_t evictedKeys = 0;    // removed by the server to stay under maxBytes
    int64_t expiredKeys = 0;    // removed because their TTL passed
    int64_t keys = 0;           // keys in the database
};

enum class StoreOutcome
{
    Hit,
    Miss,
    Refused,    // a payload was there and failed its checks
    Unavailable // no server
};
const char *storeOutcomeName(StoreOutcome o) noexcept; // "hit" | "miss" | "refused" | "unavailable"

struct StoreGet
{
    StoreOutcome outcome = StoreOutcome::Miss;
    std::optional<DecodedPayload> payload; // Hit only
    std::string reason;                    // Refused / Unavailable: one line for the log
};

class SharedStore
{
public:
    virtual ~SharedStore() = default;
    virtual std::string describe() const = 0; // "memory" | "redis://127.0.0.1:6379/0"

    // tier names the tier's key space ("exact", "prefix", "cross", "semantic"); key is the tier's own
    // key (any bytes; stored hashed). expect: what the payload must declare to be used (its tenant,
    // fingerprint and tier are the scope's and tier's).
    virtual StoreGet get(const TenantScope &scope, std::string_view tier, const std::string &key,
                         int64_t nowMs) = 0;
    // Several keys of one tier in one round trip (Redis MGET), each result as get() would give it.
    virtual std::vector<StoreGet> getMany(const TenantScope &scope, std::string_view tier,
                                          const std::vector<std::string> &keys, int64_t nowMs) = 0;
    // Stores an envelope (encodePayload) under the key, replacing any; ttlMs > 0 expires it (Redis:
    // the server's clock; the memory store: nowMs + ttlMs). tags: for invalidateTag. Returns
    // Unavailable or Hit (stored).
    virtual StoreOutcome put(const TenantScope &scope, std::string_view tier, const std::string &key,
                             const std::string &envelope, int64_t ttlMs, int64_t nowMs,
                             const std::vector<std::string> &tags = {}) = 0;
    virtual bool erase(const TenantScope &scope, std::string_view tier, const std::string &key) = 0;
    virtual int64_t invalidateModel(const std::string &modelFingerprint) = 0; // keys removed
    virtual int64_t invalidateTag(const std::string &tag) = 0;

    // The append-only stream of a tier (one per tier and store): entries in order, each an id
    // (strictly increasing as text compares by (ms, seq)) and its bytes. readStream returns the
    // entries after `afterId` ("" = from the start), at most `limit`.
    struct StreamEntry
    {
        std::string id;
        std::string data;
    };
    virtual std::optional<std::string> appendStream(std::string_view stream, const std::string &data) = 0;
    virtual std::vector<StreamEntry> readStream(std::string_view stream, const std::string &afterId,
                                                int limit, bool *available = nullptr) = 0;

    // A payload a get returned whole that its reader then refused (a body that does not decode,
    // another geometry, values out of range): counted as refused, not as a hit.
    void refusedAfterGet()
    {
        --m_stats.hits;
        ++m_stats.refused;
    }

    virtual StoreServerInfo serverInfo() = 0;
    virtual void flush() = 0; // removes every key the workbench wrote (kvwb:*), nothing else
    SharedStoreStats stats() const { return m_stats; }

protected:
    SharedStoreStats m_stats; // the implementation's counters
};

// What a get found under a key, checked: the envelope decoded against the scope and tier asked for
// (Hit) or refused with the reason, the store's counters updated. For the implementations.
// With an integrity key, the value is unsealed first (bound to storeKey, sharedStoreKey()).
StoreGet checkedGet(std::string_view bytes, const TenantScope &scope, std::string_view tier,
                    SharedStoreStats &stats, const std::string &integrityKey = {},
                    std::string_view storeKey = {});

// A stream entry's bytes as stored: sealed (bound to the stream) when there is an integrity key.
// For the implementations, as checkedGet.
std::string sealStreamEntry(const std::string &data, std::string_view stream,
                            const std::string &integrityKey);
// A stream entry's bytes as read, checked: with an integrity key, unsealed (bound to the stream); a
// value that fails is counted as refused and emptied (its id still advances the reader, and an
// empty entry decodes as nothing).
void checkStreamEntry(std::string &data, std::string_view stream, SharedStoreStats &stats,
                      const std::string &integrityKey);

// The header of a KV payload of this scope and tier: [layers, 2 (K, V), kv heads, tokens, head dim]
// in `form`, as dtype (F32, F16 or BF16: appendKvBody).
PayloadHeader kvPayloadHeader(const TenantScope &scope, std::string_view tier, int layers, int kvHeads,
                              int tokens, int headDim, KeyForm form, int64_t createdMs,
                              DType dtype = DType::F32);

// The key a payload lives under: "kvwb:" + tier + ":" + hex(tenant) + ":" + fingerprint + ":" +
// sha256(key) hex. The tenant is hex-encoded so no tenant can spell another's prefix.
std::string sharedStoreKey(const TenantScope &scope, std::string_view tier, const std::string &key);

struct StoreOptions
{
    int connectTimeoutMs = 200;
    int commandTimeoutMs = 500;
    // Keyed integrity (`--store-key-file`): when not empty, every value written carries an
    // HMAC-SHA256 tag under this key, bound to the key it is stored under (or to its stream), and a
    // value read without a valid tag is refused (counted as refused), so write access to the store
    // is not enough to poison a tenant's cache. At least 16 bytes.
    std::string integrityKey;
};

// Sealing a value for a store with an integrity key: envelope + tag (32 bytes, HMAC-SHA256 of
// boundTo, a zero byte and the envelope) + "KVWBMAC1". unsealValue returns the envelope, or nullopt
// with *why set when the tag is missing or does not match (compared in constant time).
std::string sealValue(const std::string &integrityKey, std::string_view boundTo, std::string_view envelope);
std::optional<std::string_view> unsealValue(const std::string &integrityKey, std::string_view boundTo,
                                            std::string_view value, std::string *why);
// The key of a file (`--store-key-file`): its bytes, at most 4 KiB, at least 16; Error naming the
// file otherwise.
std::string readStoreKeyFile(const std::filesystem::path &path);

// "memory", "redis://HOST:PORT[/DB]" or "redis-cluster://HOST:PORT[,HOST:PORT...]" (any of the
// cluster's nodes; HOST a name or an IPv4 address). Error(InvalidArgument)
// naming the URL for anything else. Opening never fails on an absent server: calls report
// Unavailable until one answers.
std::unique_ptr<SharedStore> openSharedStore(const std::string &url, StoreOptions options = {});

std::unique_ptr<SharedStore> makeMemoryStore(StoreOptions options = {});

} // namespace kvwb::core
