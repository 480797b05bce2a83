#include "core/cache/exact_tier.h"

#include <unordered_map>

namespace kvwb::core {

std::string normalisePrompt(const std::string &prompt)
{
    std::string out;
    out.reserve(prompt.size());
    bool pendingSpace = false;
    for (char c : prompt) {
        const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
        if (space) {
            pendingSpace = !out.empty();
            continue;
        }
        if (pendingSpace)
            out += ' ';
        pendingSpace = false;
        out += c;
    }
    return out;
}

struct ExactTier::Impl
{
    struct Slot
    {
        CacheStore::EntryId id = 0;
        CachedResponse response;
    };

    // The store's callback captures this Impl, which stays put when the tier moves (only the pointer
    // to it moves). The maps are declared first so they outlive the store.
    std::unordered_map<std::string, Slot> byKey;
    std::unordered_map<CacheStore::EntryId, const std::string *> keyOf; // points into byKey's nodes
    CacheStore store;

    explicit Impl(TierLimits limits) : store(limits, [this](CacheStore::EntryId id) { dropped(id); }) {}

    void dropped(CacheStore::EntryId id)
    {
        const auto it = keyOf.find(id);
        if (it == keyOf.end())
            return;
        byKey.erase(*it->second);
        keyOf.erase(it);
    }

    // namespace, then the sampling string length-prefixed so no (sampling, prompt) pair can be
    // spelled two ways.
    std::string keyOfRequest(const ExactKey &k) const
    {
        const std::string prompt = normalisePrompt(k.prompt);
        std::string key = store.namespaceOf(k.scope.tenant(), k.scope.modelFingerprint());
        key += '\x1e';
        key += std::to_string(k.sampling.size());
        key += ':';
        key += k.sampling;
        key += prompt;
        return key;
    }
};

ExactTier::ExactTier(TierLimits limits) : m_impl(std::make_unique<Impl>(limits)) {}
ExactTier::~ExactTier() = default;
ExactTier::ExactTier(ExactTier &&) noexcept = default;
ExactTier &ExactTier::operator=(ExactTier &&) noexcept = default;

std::optional<CachedResponse> ExactTier::lookup(const ExactKey &key, int64_t nowMs)
{
    Impl &d = *m_impl;
    const auto it = d.byKey.find(d.keyOfRequest(key));
    if (it == d.byKey.end())
        return std::nullopt;
    // touch re-checks visibility (never fails for a key built from the same namespace) and expiry; an
    // expired entry is dropped through the callback, which invalidates `it`.
    const CacheStore::EntryId id = it->second.id;
    if (!d.store.touch(id, key.scope.tenant(), key.scope.modelFingerprint(), nowMs))
        return std::nullopt;
    return it->second.response;
}

void ExactTier::insert(const ExactKey &key, CachedResponse response, int64_t nowMs,
                       const std::vector<std::string> &tags)
{
    Impl &d = *m_impl;
    std::string k = d.keyOfRequest(key);
    if (const auto it = d.byKey.find(k); it != d.byKey.end())
        d.store.erase(it->second.id); // a re-insert replaces: the callback drops the old payload
    const int64_t bytes = int64_t(normalisePrompt(key.prompt).size() + response.text.size() +
                                  response.outputIds.size() * sizeof(int));
    const auto id =
        d.store.insert(EntryScope{key.scope.tenant(), key.scope.modelFingerprint(), tags}, bytes, nowMs);
    if (!id)
        return;
    auto [it, added] = d.byKey.emplace(std::move(k), Impl::Slot{*id, std::move(response)});
    d.keyOf[*id] = &it->first;
}

int64_t ExactTier::invalidateModel(const std::string &modelFingerprint)
{
    return m_impl->store.invalidateModel(modelFingerprint);
}

int64_t ExactTier::invalidateTag(const std::string &tag)
{
    return m_impl->store.invalidateTag(tag);
}

StoreStats ExactTier::stats() const
{
    return m_impl->store.stats();
}

TierLookup ExactTier::lookup(const TierRequest &request)
{
    TierLookup out;
    out.response = lookup(ExactKey{request.scope, request.prompt, request.sampling}, request.nowMs);
    out.hit = out.response.has_value();
    return out;
}

void ExactTier::insert(const TierRequest &request, TierInsert computed)
{
    if (computed.approximate)
        return;
    insert(ExactKey{request.scope, request.prompt, request.sampling}, computed.response, request.nowMs);
}

int64_t ExactTier::evict(int64_t nowMs)
{
    return m_impl->store.expire(nowMs);
}

} // namespace kvwb::core
