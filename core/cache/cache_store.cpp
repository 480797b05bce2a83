#include "core/cache/cache_store.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace kvwb::core {

namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

enum class Cause
{
    Evict,
    Expire,
    Invalidate,
    Erase // erase() and clear(): reported, counted nowhere
};

// A binary min-heap of slots with each slot's position kept, so any slot can be removed or re-keyed
// in O(log n) without allocating: 1M entries cost 24 bytes of heap + 4 bytes of position each.
class SlotHeap
{
public:
    struct Key
    {
        int64_t primary = 0;
        uint64_t secondary = 0; // a sequence number: unique, so no two keys tie
        bool operator<(const Key &o) const
        {
            return primary != o.primary ? primary < o.primary : secondary < o.secondary;
        }
    };

    bool empty() const { return m_items.empty(); }
    size_t size() const { return m_items.size(); }
    uint32_t top() const { return m_items.front().slot; }
    const Key &topKey() const { return m_items.front().key; }
    bool contains(uint32_t slot) const { return slot < m_pos.size() && m_pos[slot] != kNone; }

    void push(uint32_t slot, Key key)
    {
        if (slot >= m_pos.size())
            m_pos.resize(std::max<size_t>(slot + 1, m_pos.size() * 2), kNone);
        m_items.push_back({key, slot});
        m_pos[slot] = uint32_t(m_items.size() - 1);
        up(m_items.size() - 1);
    }
    void remove(uint32_t slot)
    {
        if (!contains(slot))
            return;
        const size_t i = m_pos[slot];
        m_pos[slot] = kNone;
        const size_t last = m_items.size() - 1;
        if (i != last) {
            place(i, m_items[last]);
            m_items.pop_back();
            fix(i);
        } else {
            m_items.pop_back();
        }
    }
    void rekey(uint32_t slot, Key key)
    {
        const size_t i = m_pos[slot];
        m_items[i].key = key;
        fix(i);
    }
    void clear()
    {
        m_items.clear();
        m_pos.clear();
    }

private:
    struct Item
    {
        Key key;
        uint32_t slot;
    };
    // item at index i, its position recorded
    void place(size_t i, const Item &item)
    {
        m_items[i] = item;
        m_pos[item.slot] = uint32_t(i);
    }
    void fix(size_t i)
    {
        if (i > 0 && m_items[i].key < m_items[(i - 1) / 2].key)
            up(i);
        else
            down(i);
    }
    void up(size_t i)
    {
        Item item = m_items[i];
        while (i > 0) {
            const size_t p = (i - 1) / 2;
            if (!(item.key < m_items[p].key))
                break;
            place(i, m_items[p]);
            i = p;
        }
        place(i, item);
    }
    void down(size_t i)
    {
        Item item = m_items[i];
        const size_t n = m_items.size();
        while (true) {
            size_t c = 2 * i + 1;
            if (c >= n)
                break;
            if (c + 1 < n && m_items[c + 1].key < m_items[c].key)
                ++c;
            if (!(m_items[c].key < item.key))
                break;
            place(i, m_items[c]);
            i = c;
        }
        place(i, item);
    }

    std::vector<Item> m_items;
    std::vector<uint32_t> m_pos; // [slot] index into m_items, kNone when absent
};

// Strings seen by the store (namespaces, fingerprints, tags) as small ids, so an entry costs 4 bytes
// per reference instead of a string. Never shrinks: there are few distinct values (tenants x models).
class Interner
{
public:
    uint32_t intern(const std::string &s)
    {
        auto [it, added] = m_ids.try_emplace(s, uint32_t(m_ids.size()));
        return it->second;
    }
    uint32_t find(const std::string &s) const
    {
        const auto it = m_ids.find(s);
        return it == m_ids.end() ? kNone : it->second;
    }
    size_t size() const { return m_ids.size(); }

private:
    std::unordered_map<std::string, uint32_t> m_ids;
};

} // namespace

struct CacheStore::Impl
{
    // One entry per slot; a slot is reused after removal with its generation bumped, so a stale
    // EntryId (generation << 32 | slot) never names the new occupant.
    struct Slot
    {
        uint32_t generation = 0;
        bool live = false;
        uint32_t ns = kNone;
        uint32_t fingerprint = kNone;
        uint32_t parent = kNone;
        uint32_t firstChild = kNone, prevSibling = kNone, nextSibling = kNone;
        uint32_t prevInModel = kNone, nextInModel = kNone; // the fingerprint's list (invalidateModel)
        int64_t bytes = 0;
        int64_t insertedMs = 0;
        int64_t uses = 0;       // LFU frequency (the insert counts as one)
        uint64_t insertSeq = 0; // FIFO and TTL order
        uint64_t useSeq = 0;    // LRU order; LFU's tie-break
        std::vector<uint32_t> tags;
    };

    TierLimits limits;
    std::function<void(EntryId)> onRemove;
    std::vector<Slot> slots;
    std::vector<uint32_t> freeSlots;
    Interner namespaces, fingerprints, tagNames;
    std::vector<uint32_t> modelHead;                                   // [fingerprint id] first slot or kNone
    std::unordered_map<uint32_t, std::unordered_set<uint32_t>> tagged; // tag id -> slots
    SlotHeap evictable;                                                // leaves, ordered by the policy
    SlotHeap expiry; // every entry by insertedMs (only when ttlMs > 0)
    uint64_t seq = 0;
    StoreStats stats;

    static EntryId idOf(uint32_t slot, uint32_t generation) { return (uint64_t(generation) << 32) | slot; }
    EntryId idOf(uint32_t slot) const { return idOf(slot, slots[slot].generation); }

    // The live slot an id names, or kNone.
    uint32_t slotOf(EntryId id) const
    {
        const uint32_t slot = uint32_t(id & 0xffffffffu);
        const uint32_t generation = uint32_t(id >> 32);
        if (slot >= slots.size() || !slots[slot].live || slots[slot].generation != generation)
            return kNone;
        return slot;
    }

    SlotHeap::Key policyKey(const Slot &s) const
    {
        switch (limits.eviction) {
        case Eviction::Lru:
            return {0, s.useSeq};
        case Eviction::Lfu:
            return {s.uses, s.useSeq};
        case Eviction::Fifo:
            return {0, s.insertSeq};
        case Eviction::Ttl:
            return {s.insertedMs, s.insertSeq}; // ttlMs is the same for all: soonest expiry = oldest
        }
        return {0, s.useSeq};
    }

    bool overLimits() const
    {
        return (limits.maxBytes > 0 && stats.bytes > limits.maxBytes) ||
               (limits.maxEntries > 0 && stats.entries > limits.maxEntries);
    }

    bool expired(const Slot &s, int64_t nowMs) const
    {
        return limits.ttlMs > 0 && nowMs - s.insertedMs >= limits.ttlMs;
    }

    // Removes slot and (first, deepest first) every dependent, reporting each.
    void remove(uint32_t slot, Cause cause)
    {
        while (slots[slot].firstChild != kNone)
            remove(slots[slot].firstChild, cause);
        Slot &s = slots[slot];
        const EntryId id = idOf(slot);
        evictable.remove(slot);
        expiry.remove(slot);
        if (s.parent != kNone) {
            Slot &p = slots[s.parent];
            if (s.prevSibling != kNone)
                slots[s.prevSibling].nextSibling = s.nextSibling;
            else
                p.firstChild = s.nextSibling;
            if (s.nextSibling != kNone)
                slots[s.nextSibling].prevSibling = s.prevSibling;
            if (p.firstChild == kNone) // the parent became a leaf: it may go next
                evictable.push(s.parent, policyKey(p));
        }
        if (s.prevInModel != kNone)
            slots[s.prevInModel].nextInModel = s.nextInModel;
        else
            modelHead[s.fingerprint] = s.nextInModel;
        if (s.nextInModel != kNone)
            slots[s.nextInModel].prevInModel = s.prevInModel;
        for (uint32_t tag : s.tags) {
            auto it = tagged.find(tag);
            it->second.erase(slot);
            if (it->second.empty())
                tagged.erase(it);
        }
        stats.entries -= 1;
        stats.bytes -= s.bytes;
        switch (cause) {
        case Cause::Evict:
            ++stats.evictions;
            break;
        case Cause::Expire:
            ++stats.expirations;
            break;
        case Cause::Invalidate:
            ++stats.invalidations;
            break;
        case Cause::Erase:
            break;
        }
        const uint32_t generation = s.generation;
        s = Slot{};
        s.generation = generation + 1;
        freeSlots.push_back(slot);
        if (onRemove)
            onRemove(id);
    }

    int64_t expire(int64_t nowMs)
    {
        if (limits.ttlMs <= 0)
            return 0;
        const int64_t before = stats.expirations;
        // Keys are insertedMs: everything inserted at or before nowMs - ttlMs has expired.
        while (!expiry.empty() && nowMs - expiry.topKey().primary >= limits.ttlMs)
            remove(expiry.top(), Cause::Expire);
        return stats.expirations - before;
    }

    // Evicts leaves by policy until the limits hold; `keep` (the entry being inserted or resized) is
    // not in the heap at that point, and its ancestors are not leaves, so neither can be a victim.
    void evictUntilWithinLimits()
    {
        while (overLimits() && !evictable.empty())
            remove(evictable.top(), Cause::Evict);
    }

    void touchUse(uint32_t slot)
    {
        Slot &s = slots[slot];
        s.uses += 1;
        s.useSeq = ++seq;
        if (evictable.contains(slot) && limits.eviction != Eviction::Fifo && limits.eviction != Eviction::Ttl)
            evictable.rekey(slot, policyKey(s));
    }
};

CacheStore::CacheStore(TierLimits limits, std::function<void(EntryId)> onRemove)
    : m_impl(std::make_unique<Impl>())
{
    if (limits.maxBytes < 0)
        throw Error(ErrorCode::InvalidArgument, fmt::format("cache limits: maxBytes is {}; expected >= 0 "
                                                            "(0 = unlimited)",
                                                            limits.maxBytes));
    if (limits.maxEntries < 0)
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("cache limits: maxEntries is {}; expected >= 0 (0 = unlimited)", limits.maxEntries));
    if (limits.ttlMs < 0)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("cache limits: ttlMs is {}; expected >= 0 (0 = no expiry)", limits.ttlMs));
    if (limits.eviction == Eviction::Ttl && limits.ttlMs <= 0)
        throw Error(ErrorCode::InvalidArgument, "cache limits: eviction 'ttl' needs ttlMs > 0");
    m_impl->limits = limits;
    m_impl->onRemove = std::move(onRemove);
}

CacheStore::~CacheStore() = default;
CacheStore::CacheStore(CacheStore &&) noexcept = default;
CacheStore &CacheStore::operator=(CacheStore &&) noexcept = default;

const TierLimits &CacheStore::limits() const
{
    return m_impl->limits;
}

std::string CacheStore::namespaceOf(const std::string &tenant, const std::string &modelFingerprint) const
{
    if (m_impl->limits.shareAcrossTenants)
        return "\x1f" + modelFingerprint;
    if (tenant.find('\x1f') != std::string::npos)
        throw Error(ErrorCode::InvalidArgument, "cache scope: tenant contains the separator \\x1f");
    return tenant + "\x1f" + modelFingerprint;
}

std::optional<CacheStore::EntryId> CacheStore::insert(const EntryScope &scope, int64_t bytes, int64_t nowMs,
                                                      EntryId parent)
{
    Impl &d = *m_impl;
    if (bytes < 0)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("cache insert: bytes is {}; expected >= 0", bytes));
    const std::string ns = namespaceOf(scope.tenant, scope.modelFingerprint);
    d.expire(nowMs);
    uint32_t parentSlot = kNone;
    if (parent != 0) {
        parentSlot = d.slotOf(parent);
        if (parentSlot == kNone)
            throw Error(ErrorCode::InvalidArgument, "cache insert: parent is not a live entry");
        if (d.namespaces.find(ns) != d.slots[parentSlot].ns)
            throw Error(ErrorCode::InvalidArgument, "cache insert: parent belongs to another namespace");
    }
    // What can never be evicted to make room: the entry and its parent chain.
    int64_t chainBytes = bytes, chainEntries = 1;
    for (uint32_t a = parentSlot; a != kNone; a = d.slots[a].parent) {
        chainBytes += d.slots[a].bytes;
        ++chainEntries;
    }
    if ((d.limits.maxBytes > 0 && chainBytes > d.limits.maxBytes) ||
        (d.limits.maxEntries > 0 && chainEntries > d.limits.maxEntries))
        return std::nullopt;

    uint32_t slot;
    if (!d.freeSlots.empty()) {
        slot = d.freeSlots.back();
        d.freeSlots.pop_back();
    } else {
        if (d.slots.size() >= kNone - 1)
            throw Error(ErrorCode::InvalidArgument, "cache insert: more than 2^32 - 2 entries");
        slot = uint32_t(d.slots.size());
        d.slots.emplace_back();
        d.slots.back().generation = 1;
    }
    Impl::Slot &s = d.slots[slot];
    s.live = true;
    s.ns = d.namespaces.intern(ns);
    s.fingerprint = d.fingerprints.intern(scope.modelFingerprint);
    s.bytes = bytes;
    s.insertedMs = nowMs;
    s.uses = 1;
    s.insertSeq = s.useSeq = ++d.seq;
    if (d.modelHead.size() <= s.fingerprint)
        d.modelHead.resize(s.fingerprint + 1, kNone);
    s.nextInModel = d.modelHead[s.fingerprint];
    if (s.nextInModel != kNone)
        d.slots[s.nextInModel].prevInModel = slot;
    d.modelHead[s.fingerprint] = slot;
    for (const auto &tag : scope.tags) {
        const uint32_t t = d.tagNames.intern(tag);
        if (std::find(s.tags.begin(), s.tags.end(), t) != s.tags.end())
            continue;
        s.tags.push_back(t);
        d.tagged[t].insert(slot);
    }
    if (parentSlot != kNone) {
        Impl::Slot &p = d.slots[parentSlot];
        s.parent = parentSlot;
        s.nextSibling = p.firstChild;
        if (p.firstChild != kNone)
            d.slots[p.firstChild].prevSibling = slot;
        p.firstChild = slot;
        d.evictable.remove(parentSlot); // an inner entry now
    }
    if (d.limits.ttlMs > 0)
        d.expiry.push(slot, {nowMs, s.insertSeq});
    d.stats.entries += 1;
    d.stats.bytes += bytes;
    d.stats.inserts += 1;
    d.evictUntilWithinLimits();
    d.evictable.push(slot, d.policyKey(d.slots[slot]));
    return Impl::idOf(slot, d.slots[slot].generation);
}

bool CacheStore::touch(EntryId id, const std::string &tenant, const std::string &modelFingerprint,
                       int64_t nowMs)
{
    Impl &d = *m_impl;
    const uint32_t slot = d.slotOf(id);
    if (slot == kNone)
        return false;
    if (d.slots[slot].ns != d.namespaces.find(namespaceOf(tenant, modelFingerprint)))
        return false;
    if (d.expired(d.slots[slot], nowMs)) {
        d.remove(slot, Cause::Expire);
        return false;
    }
    d.touchUse(slot);
    return true;
}

void CacheStore::resize(EntryId id, int64_t bytes, int64_t nowMs)
{
    Impl &d = *m_impl;
    if (bytes < 0)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("cache resize: bytes is {}; expected >= 0", bytes));
    const uint32_t slot = d.slotOf(id);
    if (slot == kNone)
        return;
    d.expire(nowMs);
    if (d.slotOf(id) == kNone)
        return;
    d.stats.bytes += bytes - d.slots[slot].bytes;
    d.slots[slot].bytes = bytes;
    // Out of the heap while others make room; it may come back as a leaf (its last child evicted),
    // so take it out again on every round.
    d.evictable.remove(slot);
    while (d.overLimits()) {
        d.evictable.remove(slot);
        if (d.evictable.empty())
            break;
        d.remove(d.evictable.top(), Cause::Evict);
    }
    if (d.overLimits()) {
        d.remove(slot, Cause::Evict);
        return;
    }
    if (!d.evictable.contains(slot) && d.slots[slot].firstChild == kNone)
        d.evictable.push(slot, d.policyKey(d.slots[slot]));
}

void CacheStore::erase(EntryId id)
{
    const uint32_t slot = m_impl->slotOf(id);
    if (slot != kNone)
        m_impl->remove(slot, Cause::Erase);
}

bool CacheStore::contains(EntryId id) const
{
    return m_impl->slotOf(id) != kNone;
}

int64_t CacheStore::invalidateModel(const std::string &modelFingerprint)
{
    Impl &d = *m_impl;
    const uint32_t fp = d.fingerprints.find(modelFingerprint);
    if (fp == kNone)
        return 0;
    const int64_t before = d.stats.invalidations;
    while (d.modelHead[fp] != kNone)
        d.remove(d.modelHead[fp], Cause::Invalidate);
    return d.stats.invalidations - before;
}

int64_t CacheStore::invalidateTag(const std::string &tag)
{
    Impl &d = *m_impl;
    const uint32_t t = d.tagNames.find(tag);
    const auto it = d.tagged.find(t);
    if (t == kNone || it == d.tagged.end())
        return 0;
    // Removing one entry may remove tagged dependents too: take ids, not slots, and re-check each.
    std::vector<EntryId> ids;
    ids.reserve(it->second.size());
    for (uint32_t slot : it->second)
        ids.push_back(d.idOf(slot));
    const int64_t before = d.stats.invalidations;
    for (EntryId id : ids)
        if (const uint32_t slot = d.slotOf(id); slot != kNone)
            d.remove(slot, Cause::Invalidate);
    return d.stats.invalidations - before;
}

int64_t CacheStore::expire(int64_t nowMs)
{
    return m_impl->expire(nowMs);
}

void CacheStore::clear()
{
    Impl &d = *m_impl;
    for (uint32_t slot = 0; slot < d.slots.size(); ++slot)
        if (d.slots[slot].live && d.slots[slot].parent == kNone)
            d.remove(slot, Cause::Erase);
}

StoreStats CacheStore::stats() const
{
    return m_impl->stats;
}

} // namespace kvwb::core
