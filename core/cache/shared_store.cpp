#include "core/cache/shared_store.h"

#include "core/util/error.h"
#include "core/util/sha256.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

namespace kvwb::core {

// redis_store.cpp
std::unique_ptr<SharedStore> makeRedisStore(const std::vector<std::pair<std::string, int>> &seeds, int db,
                                            const std::string &url, StoreOptions options, bool cluster);

const char *storeOutcomeName(StoreOutcome o) noexcept
{
    switch (o) {
    case StoreOutcome::Hit:
        return "hit";
    case StoreOutcome::Miss:
        return "miss";
    case StoreOutcome::Refused:
        return "refused";
    case StoreOutcome::Unavailable:
        return "unavailable";
    }
    return "?";
}

std::string sharedStoreKey(const TenantScope &scope, std::string_view tier, const std::string &key)
{
    static const char *digits = "0123456789abcdef";
    std::string tenantHex;
    for (unsigned char c : scope.tenant()) {
        tenantHex += digits[c >> 4];
        tenantHex += digits[c & 15];
    }
    return "kvwb:" + std::string(tier) + ":" + tenantHex + ":" + scope.modelFingerprint() + ":" +
           sha256Hex(key);
}

namespace {

PayloadKind kindOfTier(std::string_view tier)
{
    return tier == "prefix" || tier == "cross" ? PayloadKind::Kv : PayloadKind::Response;
}

} // namespace

StoreGet checkedGet(std::string_view bytes, const TenantScope &scope, std::string_view tier,
                    SharedStoreStats &stats)
{
    StoreGet out;
    stats.bytesReceived += int64_t(bytes.size());
    std::string why;
    out.payload = decodePayload(
        bytes,
        PayloadExpectation{kindOfTier(tier), std::string(tier), scope.tenant(), scope.modelFingerprint()},
        &why);
    if (!out.payload) {
        ++stats.refused;
        out.outcome = StoreOutcome::Refused;
        out.reason = why;
        return out;
    }
    ++stats.hits;
    out.outcome = StoreOutcome::Hit;
    return out;
}

PayloadHeader kvPayloadHeader(const TenantScope &scope, std::string_view tier, int layers, int kvHeads,
                              int tokens, int headDim, KeyForm form, int64_t createdMs, DType dtype)
{
    PayloadHeader h;
    h.kind = PayloadKind::Kv;
    h.tier = std::string(tier);
    h.tenant = scope.tenant();
    h.fingerprint = scope.modelFingerprint();
    h.dtype = dtype;
    h.shape = {layers, 2, kvHeads, tokens, headDim};
    h.keyForm = form;
    h.createdMs = createdMs;
    return h;
}

namespace {

class MemoryStore final : public SharedStore
{
public:
    std::string describe() const override { return "memory"; }

    StoreGet get(const TenantScope &scope, std::string_view tier, const std::string &key,
                 int64_t nowMs) override
    {
        ++m_stats.gets;
        StoreGet out;
        const auto it = m_entries.find(sharedStoreKey(scope, tier, key));
        if (it == m_entries.end())
            return out;
        if (it->second.expiresAtMs > 0 && nowMs >= it->second.expiresAtMs) {
            m_entries.erase(it);
            ++m_expired;
            return out;
        }
        return checkedGet(it->second.envelope, scope, tier, m_stats);
    }

    std::vector<StoreGet> getMany(const TenantScope &scope, std::string_view tier,
                                  const std::vector<std::string> &keys, int64_t nowMs) override
    {
        std::vector<StoreGet> out;
        out.reserve(keys.size());
        for (const std::string &k : keys)
            out.push_back(get(scope, tier, k, nowMs));
        return out;
    }

    StoreOutcome put(const TenantScope &scope, std::string_view tier, const std::string &key,
                     const std::string &envelope, int64_t ttlMs, int64_t nowMs,
                     const std::vector<std::string> &tags) override
    {
        ++m_stats.puts;
        m_stats.bytesSent += int64_t(envelope.size());
        Entry &e = m_entries[sharedStoreKey(scope, tier, key)];
        e.envelope = envelope;
        e.expiresAtMs = ttlMs > 0 ? nowMs + ttlMs : 0;
        e.fingerprint = scope.modelFingerprint();
        e.tags = tags;
        return StoreOutcome::Hit;
    }

    bool erase(const TenantScope &scope, std::string_view tier, const std::string &key) override
    {
        return m_entries.erase(sharedStoreKey(scope, tier, key)) > 0;
    }

    int64_t invalidateModel(const std::string &fp) override
    {
        return removeIf([&](const Entry &e) { return e.fingerprint == fp; });
    }

    int64_t invalidateTag(const std::string &tag) override
    {
        return removeIf(
            [&](const Entry &e) { return std::find(e.tags.begin(), e.tags.end(), tag) != e.tags.end(); });
    }

    std::optional<std::string> appendStream(std::string_view stream, const std::string &data) override
    {
        auto &s = m_streams[std::string(stream)];
        s.push_back(data);
        return "0-" + std::to_string(s.size());
    }

    std::vector<StreamEntry> readStream(std::string_view stream, const std::string &afterId, int limit,
                                        bool *available) override
    {
        if (available)
            *available = true;
        std::vector<StreamEntry> out;
        const auto it = m_streams.find(std::string(stream));
        if (it == m_streams.end())
            return out;
        size_t from = 0;
        if (afterId.size() > 2) {
            const char *b = afterId.data() + 2;
            std::from_chars(b, afterId.data() + afterId.size(), from);
        }
        for (size_t i = from; i < it->second.size() && int(out.size()) < limit; ++i)
            out.push_back({"0-" + std::to_string(i + 1), it->second[i]});
        return out;
    }

    StoreServerInfo serverInfo() override
    {
        StoreServerInfo info;
        info.evictionPolicy = "none";
        info.expiredKeys = m_expired;
        info.keys = int64_t(m_entries.size());
        for (const auto &[k, e] : m_entries)
            info.usedBytes += int64_t(k.size() + e.envelope.size());
        return info;
    }

    void flush() override
    {
        m_entries.clear();
        m_streams.clear();
    }

    SharedStoreStats stats() const override { return m_stats; }

private:
    struct Entry
    {
        std::string envelope;
        int64_t expiresAtMs = 0;
        std::string fingerprint;
        std::vector<std::string> tags;
    };

    template <typename Pred> int64_t removeIf(Pred pred)
    {
        int64_t n = 0;
        for (auto it = m_entries.begin(); it != m_entries.end();) {
            if (pred(it->second)) {
                it = m_entries.erase(it);
                ++n;
            } else {
                ++it;
            }
        }
        m_stats.invalidated += n;
        return n;
    }

    std::map<std::string, Entry> m_entries;
    std::map<std::string, std::vector<std::string>> m_streams;
    SharedStoreStats m_stats;
    int64_t m_expired = 0;
};

} // namespace

std::unique_ptr<SharedStore> makeMemoryStore()
{
    return std::make_unique<MemoryStore>();
}

std::unique_ptr<SharedStore> openSharedStore(const std::string &url, StoreOptions options)
{
    if (url == "memory")
        return makeMemoryStore();
    const auto bad = [&](const std::string &why) {
        return Error(
            ErrorCode::InvalidArgument,
            "store '" + url + "': " + why +
                " (expected memory, redis://HOST:PORT[/DB] or redis-cluster://HOST:PORT[,HOST:PORT...])");
    };
    const std::string scheme = "redis://", clusterScheme = "redis-cluster://";
    const bool cluster = url.rfind(clusterScheme, 0) == 0;
    if (!cluster && url.rfind(scheme, 0) != 0)
        throw bad("unknown scheme");
    std::string rest = url.substr(cluster ? clusterScheme.size() : scheme.size());
    int db = 0;
    if (const auto slash = rest.find('/'); slash != std::string::npos) {
        const std::string dbText = rest.substr(slash + 1);
        rest.resize(slash);
        const auto [p, ec] = std::from_chars(dbText.data(), dbText.data() + dbText.size(), db);
        if (dbText.empty() || ec != std::errc() || p != dbText.data() + dbText.size() || db < 0 || db > 15)
            throw bad("database '" + dbText + "' is not 0..15");
        if (cluster && db != 0)
            throw bad("a Redis Cluster has database 0 only");
    }
    std::vector<std::pair<std::string, int>> seeds;
    size_t at = 0;
    while (true) {
        const size_t comma = rest.find(',', at);
        const std::string hostPort =
            rest.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        const auto colon = hostPort.rfind(':');
        if (colon == std::string::npos || colon == 0)
            throw bad("no HOST:PORT");
        const std::string portText = hostPort.substr(colon + 1);
        int port = 0;
        const auto [p, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
        if (portText.empty() || ec != std::errc() || p != portText.data() + portText.size() || port < 1 ||
            port > 65535)
            throw bad("port '" + portText + "' is not 1..65535");
        seeds.emplace_back(hostPort.substr(0, colon), port);
        if (comma == std::string::npos)
            break;
        if (!cluster)
            throw bad("several servers are a cluster: redis-cluster://HOST:PORT,HOST:PORT");
        at = comma + 1;
    }
    if (options.connectTimeoutMs < 1 || options.commandTimeoutMs < 1)
        throw bad("timeouts must be positive");
    return makeRedisStore(seeds, db, url, options, cluster);
}

} // namespace kvwb::core
