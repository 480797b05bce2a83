#include "core/cache/prefix_tree.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace kvwb::core {

namespace {

// A block's tokens as a hash key (FNV-1a over the ids' bytes).
struct BlockHash
{
    size_t operator()(const std::vector<int> &block) const noexcept
    {
        uint64_t h = 14695981039346656037ull;
        for (int id : block) {
            auto u = static_cast<uint32_t>(id);
            for (int b = 0; b < 4; ++b) {
                h ^= (u >> (8 * b)) & 0xffu;
                h *= 1099511628211ull;
            }
        }
        return size_t(h);
    }
};

} // namespace

struct PrefixTree::Impl
{
    // One node per cached block; the root of a namespace holds no block. Children are keyed by their
    // block's tokens, so one hash probe per block walks the tree.
    struct Node
    {
        Node *parent = nullptr;
        std::vector<int> block; // [blockSize] token ids
        std::unordered_map<std::vector<int>, std::unique_ptr<Node>, BlockHash> children;
        CacheStore::EntryId id = 0; // 0 for a root
        uint64_t handle = 0;
    };

    int blockSize;
    int64_t bytesPerToken;
    std::unordered_map<std::string, std::unique_ptr<Node>> roots;
    std::unordered_map<CacheStore::EntryId, Node *> nodeOf;
    std::unordered_map<uint64_t, int64_t> handleRefs; // handle -> nodes pointing at it
    std::unordered_set<uint64_t> maybeReleased;       // refs hit 0 since the last releasedHandles()
    CacheStore store;                                 // last: its callback reaches the members above

    Impl(TierLimits limits, int b, int64_t bpt)
        : blockSize(b), bytesPerToken(bpt), store(limits, [this](CacheStore::EntryId id) { dropped(id); })
    {}

    void ref(uint64_t handle) { ++handleRefs[handle]; }
    void unref(uint64_t handle)
    {
        auto it = handleRefs.find(handle);
        if (it != handleRefs.end() && --it->second == 0)
            maybeReleased.insert(handle);
    }

    // The store removes dependents first, so a node is a leaf by the time it is reported.
    void dropped(CacheStore::EntryId id)
    {
        const auto it = nodeOf.find(id);
        if (it == nodeOf.end())
            return;
        Node *node = it->second;
        nodeOf.erase(it);
        unref(node->handle);
        node->parent->children.erase(node->block); // destroys node
    }

    // Empty roots go here, never in dropped(): an insert holds a pointer to its root while the store
    // evicts (possibly every other block of the namespace).
    void pruneRoots()
    {
        for (auto it = roots.begin(); it != roots.end();)
            it = it->second->children.empty() ? roots.erase(it) : std::next(it);
    }

    int64_t blockBytes() const { return int64_t(blockSize) * bytesPerToken; }
};

PrefixTree::PrefixTree(TierLimits limits, int blockSize, int64_t bytesPerToken)
{
    if (blockSize < 1 || blockSize > kMaxPrefixBlock)
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("prefix tree: block size is {}; expected 1..{} tokens", blockSize, kMaxPrefixBlock));
    if (bytesPerToken < 0)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("prefix tree: bytesPerToken is {}; expected >= 0", bytesPerToken));
    m_impl = std::make_unique<Impl>(limits, blockSize, bytesPerToken);
}

PrefixTree::~PrefixTree() = default;
PrefixTree::PrefixTree(PrefixTree &&) noexcept = default;
PrefixTree &PrefixTree::operator=(PrefixTree &&) noexcept = default;

int PrefixTree::blockSize() const
{
    return m_impl->blockSize;
}

PrefixMatch PrefixTree::lookup(const TenantScope &scope, const std::vector<int> &ids, int64_t nowMs)
{
    Impl &d = *m_impl;
    const std::string &tenant = scope.tenant(), &modelFingerprint = scope.modelFingerprint();
    const std::string ns = d.store.namespaceOf(tenant, modelFingerprint);
    d.store.expire(nowMs); // what remains is alive, so the walk below sees only live blocks
    const auto root = d.roots.find(ns);
    if (root == d.roots.end())
        return {};
    const size_t b = size_t(d.blockSize);
    std::vector<Impl::Node *> path;
    Impl::Node *node = root->second.get();
    std::vector<int> block(b);
    for (size_t at = 0; at + b <= ids.size(); at += b) {
        block.assign(ids.begin() + ptrdiff_t(at), ids.begin() + ptrdiff_t(at + b));
        const auto child = node->children.find(block);
        if (child == node->children.end())
            break;
        node = child->second.get();
        path.push_back(node);
    }
    if (path.empty())
        return {};
    // Uses recorded root first, so under LRU a leaf is never more recent than the blocks after it
    // on another path that this lookup did not reach; touch cannot fail here (same namespace, and
    // nothing expired after expire(nowMs) above).
    for (Impl::Node *n : path)
        d.store.touch(n->id, tenant, modelFingerprint, nowMs);
    return PrefixMatch{int(path.size() * b), path.back()->handle};
}

int PrefixTree::insert(const TenantScope &who, const std::vector<int> &ids, uint64_t handle, int64_t nowMs,
                       const std::vector<std::string> &tags)
{
    const std::string &tenant = who.tenant(), &modelFingerprint = who.modelFingerprint();
    Impl &d = *m_impl;
    const std::string ns = d.store.namespaceOf(tenant, modelFingerprint);
    d.store.expire(nowMs); // nothing on the path below can expire half-way
    const size_t b = size_t(d.blockSize);
    const EntryScope scope{tenant, modelFingerprint, tags};
    d.handleRefs.try_emplace(handle, 0);
    auto &root = d.roots[ns];
    if (!root)
        root = std::make_unique<Impl::Node>();
    // `parent` stays valid across the store calls below: evictions take only leaves, and the store
    // links a new block to its parent before it evicts, so every block on this path is inner then;
    // roots are not store entries and dropped() leaves them alone.
    Impl::Node *parent = root.get();
    int cached = 0;
    std::vector<int> block(b);
    for (size_t at = 0; at + b <= ids.size(); at += b) {
        block.assign(ids.begin() + ptrdiff_t(at), ids.begin() + ptrdiff_t(at + b));
        const auto existing = parent->children.find(block);
        if (existing != parent->children.end()) {
            Impl::Node *n = existing->second.get();
            d.store.touch(n->id, tenant, modelFingerprint, nowMs);
            if (n->handle != handle) { // re-pointed at the newest cache that covers it
                d.ref(handle);
                d.unref(n->handle);
                n->handle = handle;
            }
            parent = n;
            ++cached;
            continue;
        }
        const auto id = d.store.insert(scope, d.blockBytes(), nowMs, parent->id);
        if (!id)
            break; // capacity: keep the leading blocks that fit, never a block without its parent
        auto node = std::make_unique<Impl::Node>();
        node->parent = parent;
        node->block = block;
        node->id = *id;
        node->handle = handle;
        d.nodeOf[*id] = node.get();
        d.ref(handle);
        parent = parent->children.emplace(block, std::move(node)).first->second.get();
        ++cached;
    }
    if (const auto it = d.roots.find(ns); it != d.roots.end() && it->second->children.empty())
        d.roots.erase(it);
    // A handle nothing points at (no block fitted, or the sequence was shorter than a block) is the
    // caller's to free, like any other released one.
    if (d.handleRefs[handle] == 0)
        d.maybeReleased.insert(handle);
    return cached;
}

std::vector<uint64_t> PrefixTree::releasedHandles()
{
    Impl &d = *m_impl;
    std::vector<uint64_t> out;
    for (uint64_t h : d.maybeReleased) {
        const auto it = d.handleRefs.find(h);
        if (it != d.handleRefs.end() && it->second == 0) {
            out.push_back(h);
            d.handleRefs.erase(it);
        }
    }
    d.maybeReleased.clear();
    std::sort(out.begin(), out.end());
    return out;
}

int64_t PrefixTree::invalidateModel(const std::string &modelFingerprint)
{
    const int64_t n = m_impl->store.invalidateModel(modelFingerprint);
    m_impl->pruneRoots();
    return n;
}

int64_t PrefixTree::invalidateTag(const std::string &tag)
{
    const int64_t n = m_impl->store.invalidateTag(tag);
    m_impl->pruneRoots();
    return n;
}

int64_t PrefixTree::expire(int64_t nowMs)
{
    const int64_t n = m_impl->store.expire(nowMs);
    m_impl->pruneRoots();
    return n;
}

StoreStats PrefixTree::stats() const
{
    return m_impl->store.stats();
}

int64_t PrefixTree::cachedTokens() const
{
    return m_impl->store.stats().entries * m_impl->blockSize;
}

} // namespace kvwb::core
