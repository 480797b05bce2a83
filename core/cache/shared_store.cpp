#include "core/cache/shared_store.h"

#include "core/util/error.h"
#include "core/util/sha256.h"
#include "core/util/store_url.h"
#include "core/util/text_util.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

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

namespace {

constexpr std::string_view kSealMagic = "KVWBMAC1";
constexpr size_t kTagBytes = 32;

std::string tagOf(const std::string &integrityKey, std::string_view boundTo, std::string_view envelope)
{
    std::string message;
    message.reserve(boundTo.size() + 1 + envelope.size());
    message.append(boundTo).push_back('\0');
    message.append(envelope);
    unsigned char tag[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (!HMAC(EVP_sha256(), integrityKey.data(), int(integrityKey.size()),
              reinterpret_cast<const unsigned char *>(message.data()), message.size(), tag, &length) ||
        length != kTagBytes)
        throw Error(ErrorCode::Internal, "HMAC-SHA256 failed");
    return std::string(reinterpret_cast<const char *>(tag), kTagBytes);
}

} // namespace

std::string sealValue(const std::string &integrityKey, std::string_view boundTo, std::string_view envelope)
{
    std::string out(envelope);
    out += tagOf(integrityKey, boundTo, envelope);
    out += kSealMagic;
    return out;
}

std::optional<std::string_view> unsealValue(const std::string &integrityKey, std::string_view boundTo,
                                            std::string_view value, std::string *why)
{
    const auto fail = [&](const char *reason) -> std::optional<std::string_view> {
        if (why)
            *why = reason;
        return std::nullopt;
    };
    if (value.size() < kTagBytes + kSealMagic.size() ||
        value.substr(value.size() - kSealMagic.size()) != kSealMagic)
        return fail("no integrity tag (written without this store's key)");
    const std::string_view envelope = value.substr(0, value.size() - kTagBytes - kSealMagic.size());
    const std::string expected = tagOf(integrityKey, boundTo, envelope);
    if (CRYPTO_memcmp(expected.data(), value.data() + envelope.size(), kTagBytes) != 0)
        return fail("integrity tag does not match (another key, another place, or altered)");
    return envelope;
}

std::string readStoreKeyFile(const std::filesystem::path &path)
{
    std::string key = text::readWholeFile(path, 4096);
    if (key.size() < 16)
        throw Error(ErrorCode::InvalidArgument, path.string() +
                                                    ": a store key needs at least 16 bytes, the file has " +
                                                    std::to_string(key.size()));
    return key;
}

StoreGet checkedGet(std::string_view bytes, const TenantScope &scope, std::string_view tier,
                    SharedStoreStats &stats, const std::string &integrityKey, std::string_view storeKey)
{
    StoreGet out;
    stats.bytesReceived += int64_t(bytes.size());
    std::string why;
    if (!integrityKey.empty()) {
        const auto envelope = unsealValue(integrityKey, storeKey, bytes, &why);
        if (!envelope) {
            ++stats.refused;
            out.outcome = StoreOutcome::Refused;
            out.reason = why;
            return out;
        }
        bytes = *envelope;
    }
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

std::string sealStreamEntry(const std::string &data, std::string_view stream, const std::string &integrityKey)
{
    return integrityKey.empty() ? data : sealValue(integrityKey, "stream:" + std::string(stream), data);
}

void checkStreamEntry(std::string &data, std::string_view stream, SharedStoreStats &stats,
                      const std::string &integrityKey)
{
    if (integrityKey.empty())
        return;
    const auto envelope = unsealValue(integrityKey, "stream:" + std::string(stream), data, nullptr);
    if (!envelope) {
        ++stats.refused;
        data.clear(); // its id still advances the reader; an empty entry decodes as nothing
    } else {
        data = std::string(*envelope);
    }
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
    explicit MemoryStore(std::string integrityKey) : m_key(std::move(integrityKey)) {}
    std::string describe() const override { return "memory"; }

    StoreGet get(const TenantScope &scope, std::string_view tier, const std::string &key,
                 int64_t nowMs) override
    {
        ++m_stats.gets;
        StoreGet out;
        const std::string storeKey = sharedStoreKey(scope, tier, key);
        const auto it = m_entries.find(storeKey);
        if (it == m_entries.end())
            return out;
        if (it->second.expiresAtMs > 0 && nowMs >= it->second.expiresAtMs) {
            m_entries.erase(it);
            ++m_expired;
            return out;
        }
        return checkedGet(it->second.envelope, scope, tier, m_stats, m_key, storeKey);
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
        const std::string storeKey = sharedStoreKey(scope, tier, key);
        Entry &e = m_entries[storeKey];
        e.envelope = m_key.empty() ? envelope : sealValue(m_key, storeKey, envelope);
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
        s.push_back(sealStreamEntry(data, stream, m_key));
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
        for (size_t i = from; i < it->second.size() && int(out.size()) < limit; ++i) {
            std::string data = it->second[i];
            checkStreamEntry(data, stream, m_stats, m_key);
            out.push_back({"0-" + std::to_string(i + 1), std::move(data)});
        }
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
    std::string m_key; // integrity key, empty for none
    int64_t m_expired = 0;
};

} // namespace

std::unique_ptr<SharedStore> makeMemoryStore(StoreOptions options)
{
    return std::make_unique<MemoryStore>(std::move(options.integrityKey));
}

std::unique_ptr<SharedStore> openSharedStore(const std::string &url, StoreOptions options)
{
    if (!options.integrityKey.empty() && options.integrityKey.size() < 16)
        throw Error(ErrorCode::InvalidArgument, "a store's integrity key needs at least 16 bytes");
    if (url == "memory")
        return makeMemoryStore(options);
    const StoreUrl parsed = parseStoreUrl(url);
    if (options.connectTimeoutMs < 1 || options.commandTimeoutMs < 1)
        throw Error(ErrorCode::InvalidArgument, "store '" + url + "': timeouts must be positive");
    return makeRedisStore(parsed.seeds, parsed.db, url, options, parsed.cluster);
}

} // namespace kvwb::core
