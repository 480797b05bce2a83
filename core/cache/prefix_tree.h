// Same-model prefix KV reuse (vLLM/SGLang style): a radix tree over token blocks per namespace
// (tenant unless shared, and model fingerprint). A lookup returns the longest cached prefix of a
// token sequence in whole blocks and a handle to a KV cache that holds it; the caller (the replay
// engine, which owns the KV caches) forks that cache, keeps the matched tokens and prefills only
// the rest.
//
// Storage: the caller registers one KV cache per inserted sequence (a handle) and the tree's block
// nodes point at the newest handle that covers them. Every node is a CacheStore entry of
// blockSize * bytesPerToken bytes, so capacity and eviction work per block; only leaves are
// evicted (an inner block is needed by its children). When no node points at a handle any more,
// it is reported through releasedHandles() and the caller frees that cache.
//
// Thread-safety: none (engine thread).
#pragma once

#include "core/cache/cache_store.h"
#include "core/cache/cache_tier.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvwb::core {

struct PrefixMatch
{
    int tokens = 0;      // matched prefix length, a multiple of the block size (0 = miss)
    uint64_t handle = 0; // a cache holding at least those tokens (valid when tokens > 0)
};

// The largest block a tree takes (a block is compared and copied whole on every lookup).
inline constexpr int kMaxPrefixBlock = 1 << 16;

class PrefixTree
{
public:
    // blockSize >= 1 tokens; bytesPerToken: KV bytes one token costs in the owning model.
    PrefixTree(TierLimits limits, int blockSize, int64_t bytesPerToken);
    ~PrefixTree();
    PrefixTree(PrefixTree &&) noexcept;
    PrefixTree &operator=(PrefixTree &&) noexcept;

    int blockSize() const;
    // Longest cached whole-block prefix of ids visible to (tenant, fingerprint); records the use of
    // every matched block.
    PrefixMatch lookup(const TenantScope &scope, const std::vector<int> &ids, int64_t nowMs);
    // Caches every whole block of ids under `handle` (a cache the caller keeps that holds at least
    // ids.size() tokens). Blocks already present are re-pointed at the new handle. Returns the
    // number of blocks now cached for this sequence (may be fewer than ids.size() / blockSize when
    // capacity is too small).
    int insert(const TenantScope &scope, const std::vector<int> &ids, uint64_t handle, int64_t nowMs,
               const std::vector<std::string> &tags = {});
    // Handles no node points at any more since the last call (the caller frees them).
    std::vector<uint64_t> releasedHandles();
    int64_t invalidateModel(const std::string &modelFingerprint);
    int64_t invalidateTag(const std::string &tag);
    int64_t expire(int64_t nowMs); // blocks removed because their TTL passed
    StoreStats stats() const;      // entries = blocks
    int64_t cachedTokens() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace kvwb::core
