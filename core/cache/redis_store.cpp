// The Redis implementation of SharedStore (hiredis, synchronous, one connection per store).
// Layout (docs/fleet.md, "Redis layout"):
//   kvwb:<tier>:<hex tenant>:<fingerprint>:<sha256 of the tier's key>   the envelope (SET ... PX ttl)
//   kvwb:tag:<hex tag>                                                   set of keys carrying the tag
//   kvwb:stream:<name>                                                   stream, field "d" = entry bytes
#include "core/cache/shared_store.h"

#include "core/util/error.h"

#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <sstream>

namespace kvwb::core {

namespace {

using Clock = std::chrono::steady_clock;

struct ReplyFree
{
    void operator()(redisReply *r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

struct ContextFree
{
    void operator()(redisContext *c) const { redisFree(c); }
};

timeval toTimeval(int ms)
{
    timeval tv;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
}

std::string hexOf(std::string_view s)
{
    static const char *digits = "0123456789abcdef";
    std::string out;
    for (unsigned char c : s) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

// Escapes glob characters for SCAN MATCH.
std::string globEscape(const std::string &s)
{
    std::string out;
    for (char c : s) {
        if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\')
            out += '\\';
        out += c;
    }
    return out;
}

PayloadKind kindOfTier(std::string_view tier)
{
    return tier == "prefix" || tier == "cross" ? PayloadKind::Kv : PayloadKind::Response;
}

class RedisStore final : public SharedStore
{
public:
    RedisStore(std::string host, int port, int db, std::string url, StoreOptions options)
        : m_host(std::move(host)), m_port(port), m_db(db), m_url(std::move(url)), m_options(options)
    {}

    std::string describe() const override { return m_url; }

    StoreGet get(const TenantScope &scope, std::string_view tier, const std::string &key, int64_t) override
    {
        ++m_stats.gets;
        Reply r = command({"GET", sharedStoreKey(scope, tier, key)});
        if (!r) {
            StoreGet out;
            out.outcome = StoreOutcome::Unavailable;
            out.reason = m_lastError;
            return out;
        }
        return decoded(scope, tier, r.get());
    }

    std::vector<StoreGet> getMany(const TenantScope &scope, std::string_view tier, const std::vector<std::string> &keys,
                                  int64_t) override
    {
        std::vector<StoreGet> out;
        if (keys.empty())
            return out;
        m_stats.gets += int64_t(keys.size());
        std::vector<std::string> args = {"MGET"};
        for (const std::string &k : keys)
            args.push_back(sharedStoreKey(scope, tier, k));
        Reply r = command(args);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != keys.size()) {
            StoreGet failed;
            failed.outcome = StoreOutcome::Unavailable;
            failed.reason = r ? "MGET: unexpected reply" : m_lastError;
            out.assign(keys.size(), failed);
            return out;
        }
        for (size_t i = 0; i < r->elements; ++i)
            out.push_back(decoded(scope, tier, r->element[i]));
        return out;
    }

    StoreGet decoded(const TenantScope &scope, std::string_view tier, const redisReply *r)
    {
        StoreGet out;
        if (r->type == REDIS_REPLY_NIL)
            return out;
        if (r->type != REDIS_REPLY_STRING) {
            ++m_stats.refused;
            out.outcome = StoreOutcome::Refused;
            out.reason = "the key does not hold a string";
            return out;
        }
        m_stats.bytesReceived += int64_t(r->len);
        std::string why;
        out.payload = decodePayload(
            std::string_view(r->str, r->len),
            PayloadExpectation{kindOfTier(tier), std::string(tier), scope.tenant(), scope.modelFingerprint()}, &why);
        if (!out.payload) {
            ++m_stats.refused;
            out.outcome = StoreOutcome::Refused;
            out.reason = why;
            return out;
        }
        ++m_stats.hits;
        out.outcome = StoreOutcome::Hit;
        return out;
    }

    StoreOutcome put(const TenantScope &scope, std::string_view tier, const std::string &key,
                     const std::string &envelope, int64_t ttlMs, int64_t, const std::vector<std::string> &tags) override
    {
        ++m_stats.puts;
        const std::string k = sharedStoreKey(scope, tier, key);
        std::vector<std::string> set = {"SET", k, envelope};
        if (ttlMs > 0) {
            set.push_back("PX");
            set.push_back(std::to_string(ttlMs));
        }
        Reply r = command(set);
        if (!r)
            return StoreOutcome::Unavailable;
        if (r->type == REDIS_REPLY_ERROR) {
            // e.g. OOM with maxmemory-policy noeviction: not stored, said so.
            m_lastError = std::string(r->str, r->len);
            ++m_stats.unavailable;
            return StoreOutcome::Unavailable;
        }
        m_stats.bytesSent += int64_t(envelope.size());
        for (const std::string &tag : tags)
            command({"SADD", "kvwb:tag:" + hexOf(tag), k});
        return StoreOutcome::Hit;
    }

    bool erase(const TenantScope &scope, std::string_view tier, const std::string &key) override
    {
        Reply r = command({"DEL", sharedStoreKey(scope, tier, key)});
        return r && r->type == REDIS_REPLY_INTEGER && r->integer > 0;
    }

    int64_t invalidateModel(const std::string &fp) override
    {
        const int64_t n = deleteMatching("kvwb:*:*:" + globEscape(fp) + ":*");
        m_stats.invalidated += n;
        return n;
    }

    int64_t invalidateTag(const std::string &tag) override
    {
        const std::string set = "kvwb:tag:" + hexOf(tag);
        Reply members = command({"SMEMBERS", set});
        int64_t n = 0;
        if (members && members->type == REDIS_REPLY_ARRAY) {
            for (size_t i = 0; i < members->elements; ++i) {
                const redisReply *m = members->element[i];
                Reply d = command({"DEL", std::string(m->str, m->len)});
                if (d && d->type == REDIS_REPLY_INTEGER)
                    n += d->integer;
            }
        }
        command({"DEL", set});
        m_stats.invalidated += n;
        return n;
    }

    std::optional<std::string> appendStream(std::string_view stream, const std::string &data) override
    {
        Reply r = command({"XADD", "kvwb:stream:" + std::string(stream), "*", "d", data});
        if (!r || r->type != REDIS_REPLY_STRING)
            return std::nullopt;
        m_stats.bytesSent += int64_t(data.size());
        return std::string(r->str, r->len);
    }

    std::vector<StreamEntry> readStream(std::string_view stream, const std::string &afterId, int limit,
                                        bool *available) override
    {
        std::vector<StreamEntry> out;
        Reply r = command({"XRANGE", "kvwb:stream:" + std::string(stream), afterId.empty() ? "-" : "(" + afterId,
                           "+", "COUNT", std::to_string(std::max(1, limit))});
        if (available)
            *available = r != nullptr;
        if (!r || r->type != REDIS_REPLY_ARRAY)
            return out;
        for (size_t i = 0; i < r->elements; ++i) {
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[0]->type != REDIS_REPLY_STRING)
                continue;
            const redisReply *fields = e->element[1];
            StreamEntry entry{std::string(e->element[0]->str, e->element[0]->len), {}};
            for (size_t f = 0; f + 1 < fields->elements; f += 2)
                if (std::string_view(fields->element[f]->str, fields->element[f]->len) == "d")
                    entry.data.assign(fields->element[f + 1]->str, fields->element[f + 1]->len);
            m_stats.bytesReceived += int64_t(entry.data.size());
            out.push_back(std::move(entry));
        }
        return out;
    }

    StoreServerInfo serverInfo() override
    {
        StoreServerInfo info;
        Reply r = command({"INFO"});
        if (!r || r->type != REDIS_REPLY_STRING)
            return info;
        std::istringstream in(std::string(r->str, r->len));
        std::string line;
        const auto number = [](const std::string &v) {
            try {
                return std::stoll(v);
            } catch (...) {
                return 0LL;
            }
        };
        while (std::getline(in, line)) {
            if (!line.empty() && line.back() == '\r')
                line.pop_back();
            const auto colon = line.find(':');
            if (colon == std::string::npos)
                continue;
            const std::string name = line.substr(0, colon), value = line.substr(colon + 1);
            if (name == "used_memory")
                info.usedBytes = number(value);
            else if (name == "maxmemory")
                info.maxBytes = number(value);
            else if (name == "maxmemory_policy")
                info.evictionPolicy = value;
            else if (name == "evicted_keys")
                info.evictedKeys = number(value);
            else if (name == "expired_keys")
                info.expiredKeys = number(value);
            else if (name.rfind("db", 0) == 0 && name == "db" + std::to_string(m_db)) {
                const auto keys = value.find("keys=");
                if (keys != std::string::npos)
                    info.keys = number(value.substr(keys + 5, value.find(',', keys) - keys - 5));
            }
        }
        return info;
    }

    void flush() override { deleteMatching("kvwb:*"); }

    SharedStoreStats stats() const override { return m_stats; }

private:
    bool connect()
    {
        if (m_ctx)
            return true;
        redisContext *c = redisConnectWithTimeout(m_host.c_str(), m_port, toTimeval(m_options.connectTimeoutMs));
        if (!c || c->err) {
            m_lastError = m_url + ": " + (c ? c->errstr : "cannot allocate a connection");
            if (c)
                redisFree(c);
            return false;
        }
        redisSetTimeout(c, toTimeval(m_options.commandTimeoutMs));
        m_ctx.reset(c);
        if (m_db != 0) {
            Reply r(static_cast<redisReply *>(redisCommand(c, "SELECT %d", m_db)));
            if (!r || r->type == REDIS_REPLY_ERROR) {
                m_lastError = m_url + ": SELECT " + std::to_string(m_db) + " failed";
                m_ctx.reset();
                return false;
            }
        }
        if (m_hadFailure) {
            ++m_stats.reconnects;
            m_hadFailure = false;
        }
        return true;
    }

    // One round trip; nullptr (counted unavailable, connection dropped) on any I/O failure.
    Reply command(const std::vector<std::string> &args)
    {
        const auto start = Clock::now();
        Reply r;
        if (connect()) {
            std::vector<const char *> argv;
            std::vector<size_t> lens;
            for (const std::string &a : args) {
                argv.push_back(a.data());
                lens.push_back(a.size());
            }
            r.reset(static_cast<redisReply *>(redisCommandArgv(m_ctx.get(), int(argv.size()), argv.data(), lens.data())));
            if (!r) {
                m_lastError = m_url + ": " + (m_ctx->err ? m_ctx->errstr : "no reply");
                m_ctx.reset();
            }
        }
        m_stats.netMs += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        if (!r) {
            ++m_stats.unavailable;
            m_hadFailure = true;
        }
        return r;
    }

    int64_t deleteMatching(const std::string &pattern)
    {
        int64_t n = 0;
        std::string cursor = "0";
        do {
            Reply r = command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
                return n;
            cursor.assign(r->element[0]->str, r->element[0]->len);
            const redisReply *keys = r->element[1];
            if (keys->elements > 0) {
                std::vector<std::string> del = {"UNLINK"};
                for (size_t i = 0; i < keys->elements; ++i)
                    del.emplace_back(keys->element[i]->str, keys->element[i]->len);
                Reply d = command(del);
                if (d && d->type == REDIS_REPLY_INTEGER)
                    n += d->integer;
            }
        } while (cursor != "0");
        return n;
    }

    std::string m_host;
    int m_port;
    int m_db;
    std::string m_url;
    StoreOptions m_options;
    std::unique_ptr<redisContext, ContextFree> m_ctx;
    std::string m_lastError;
    bool m_hadFailure = false;
    SharedStoreStats m_stats;
};

} // namespace

std::unique_ptr<SharedStore> makeRedisStore(const std::string &host, int port, int db, const std::string &url,
                                            StoreOptions options)
{
    return std::make_unique<RedisStore>(host, port, db, url, options);
}

} // namespace kvwb::core
