// The Redis implementation of SharedStore (hiredis, synchronous, one connection per store).
// Layout (docs/fleet.md, "Redis layout"):
//   kvwb:<tier>:<hex tenant>:<fingerprint>:<sha256 of the tier's key>   the envelope (SET ... PX ttl)
//   kvwb:tag:<hex tag>                                                   set of keys carrying the tag
//   kvwb:stream:<name>                                                   stream, field "d" = entry bytes
#include "core/cache/shared_store.h"

#include "core/util/error.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
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

class RedisStore final : public SharedStore
{
public:
    // seeds: the server, or (cluster) any of the cluster's nodes.
    RedisStore(const std::vector<std::pair<std::string, int>> &seeds, int db, std::string url,
               StoreOptions options, bool cluster)
        : m_db(db), m_url(std::move(url)), m_options(options), m_cluster(cluster)
    {
        for (const auto &[host, port] : seeds)
            nodeAt(host, port);
    }

    std::string describe() const override { return m_url; }

    StoreGet get(const TenantScope &scope, std::string_view tier, const std::string &key, int64_t) override
    {
        ++m_stats.gets;
        const std::string storeKey = sharedStoreKey(scope, tier, key);
        Reply r = command({"GET", storeKey});
        if (!r) {
            StoreGet out;
            out.outcome = StoreOutcome::Unavailable;
            out.reason = m_lastError;
            return out;
        }
        return decoded(scope, tier, storeKey, r.get());
    }

    std::vector<StoreGet> getMany(const TenantScope &scope, std::string_view tier,
                                  const std::vector<std::string> &keys, int64_t) override
    {
        std::vector<StoreGet> out;
        if (keys.empty())
            return out;
        if (m_cluster) {
            // the keys hash to different slots (MGET would be refused with CROSSSLOT): one GET each
            for (const std::string &k : keys)
                out.push_back(get(scope, tier, k, 0));
            return out;
        }
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
            out.push_back(decoded(scope, tier, args[i + 1], r->element[i]));
        return out;
    }

    StoreGet decoded(const TenantScope &scope, std::string_view tier, const std::string &storeKey,
                     const redisReply *r)
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
        return checkedGet(std::string_view(r->str, r->len), scope, tier, m_stats, m_options.integrityKey,
                          storeKey);
    }

    StoreOutcome put(const TenantScope &scope, std::string_view tier, const std::string &key,
                     const std::string &envelope, int64_t ttlMs, int64_t,
                     const std::vector<std::string> &tags) override
    {
        ++m_stats.puts;
        const std::string k = sharedStoreKey(scope, tier, key);
        const std::string value =
            m_options.integrityKey.empty() ? envelope : sealValue(m_options.integrityKey, k, envelope);
        std::vector<std::string> set = {"SET", k, value};
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
        m_stats.bytesSent += int64_t(value.size());
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
        const std::string value = sealStreamEntry(data, stream, m_options.integrityKey);
        Reply r = command({"XADD", "kvwb:stream:" + std::string(stream), "*", "d", value});
        if (!r || r->type != REDIS_REPLY_STRING)
            return std::nullopt;
        m_stats.bytesSent += int64_t(value.size());
        return std::string(r->str, r->len);
    }

    std::vector<StreamEntry> readStream(std::string_view stream, const std::string &afterId, int limit,
                                        bool *available) override
    {
        std::vector<StreamEntry> out;
        Reply r =
            command({"XRANGE", "kvwb:stream:" + std::string(stream), afterId.empty() ? "-" : "(" + afterId,
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
            checkStreamEntry(entry.data, stream, m_stats, m_options.integrityKey);
            out.push_back(std::move(entry));
        }
        return out;
    }

    StoreServerInfo serverInfo() override
    {
        // summed over the nodes that hold data (the limit and policy are each node's)
        StoreServerInfo info;
        const auto number = [](const std::string &v) {
            try {
                return std::stoll(v);
            } catch (...) {
                return 0LL;
            }
        };
        for (Node *node : dataNodes()) {
            Reply r = commandOn(*node, {"INFO"});
            if (!r || r->type != REDIS_REPLY_STRING)
                continue;
            std::istringstream in(std::string(r->str, r->len));
            std::string line;
            while (std::getline(in, line)) {
                if (!line.empty() && line.back() == '\r')
                    line.pop_back();
                const auto colon = line.find(':');
                if (colon == std::string::npos)
                    continue;
                const std::string name = line.substr(0, colon), value = line.substr(colon + 1);
                if (name == "used_memory")
                    info.usedBytes += number(value);
                else if (name == "maxmemory")
                    info.maxBytes += number(value);
                else if (name == "maxmemory_policy")
                    info.evictionPolicy = value;
                else if (name == "evicted_keys")
                    info.evictedKeys += number(value);
                else if (name == "expired_keys")
                    info.expiredKeys += number(value);
                else if (name == "db" + std::to_string(m_db)) {
                    const auto keys = value.find("keys=");
                    if (keys != std::string::npos)
                        info.keys += number(value.substr(keys + 5, value.find(',', keys) - keys - 5));
                }
            }
        }
        return info;
    }

    void flush() override { deleteMatching("kvwb:*"); }

private:
    struct Node
    {
        std::string host;
        int port = 0;
        std::unique_ptr<redisContext, ContextFree> ctx;
        bool hadFailure = false;
    };

    Node &nodeAt(const std::string &host, int port)
    {
        for (auto &n : m_nodes)
            if (n->host == host && n->port == port)
                return *n;
        m_nodes.push_back(std::make_unique<Node>());
        m_nodes.back()->host = host;
        m_nodes.back()->port = port;
        return *m_nodes.back();
    }

    bool connect(Node &n)
    {
        if (n.ctx)
            return true;
        redisContext *c =
            redisConnectWithTimeout(n.host.c_str(), n.port, toTimeval(m_options.connectTimeoutMs));
        if (!c || c->err) {
            m_lastError = m_url + ": " + n.host + ":" + std::to_string(n.port) + ": " +
                          (c ? c->errstr : "cannot allocate a connection");
            if (c)
                redisFree(c);
            return false;
        }
        redisSetTimeout(c, toTimeval(m_options.commandTimeoutMs));
        n.ctx.reset(c);
        if (m_db != 0) {
            Reply r(static_cast<redisReply *>(redisCommand(c, "SELECT %d", m_db)));
            if (!r || r->type == REDIS_REPLY_ERROR) {
                m_lastError = m_url + ": SELECT " + std::to_string(m_db) + " failed";
                n.ctx.reset();
                return false;
            }
        }
        if (n.hadFailure) {
            ++m_stats.reconnects;
            n.hadFailure = false;
        }
        return true;
    }

    // One round trip on one node; nullptr (counted unavailable, connection dropped) on any I/O
    // failure.
    Reply commandOn(Node &n, const std::vector<std::string> &args)
    {
        const auto start = Clock::now();
        Reply r;
        if (connect(n)) {
            std::vector<const char *> argv;
            std::vector<size_t> lens;
            for (const std::string &a : args) {
                argv.push_back(a.data());
                lens.push_back(a.size());
            }
            r.reset(static_cast<redisReply *>(
                redisCommandArgv(n.ctx.get(), int(argv.size()), argv.data(), lens.data())));
            if (!r) {
                m_lastError = m_url + ": " + (n.ctx->err ? n.ctx->errstr : "no reply");
                n.ctx.reset();
            }
        }
        m_stats.netMs += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        if (!r) {
            ++m_stats.unavailable;
            n.hadFailure = true;
        }
        return r;
    }

    // Redis Cluster: a key's hash slot (CRC16/XMODEM of the key, or of its {hash tag}, mod 16384).
    static int slotOf(const std::string &key)
    {
        std::string_view k = key;
        if (const auto open = k.find('{'); open != std::string_view::npos) {
            const auto close = k.find('}', open + 1);
            if (close != std::string_view::npos && close > open + 1)
                k = k.substr(open + 1, close - open - 1);
        }
        uint16_t crc = 0;
        for (unsigned char c : k) {
            crc ^= uint16_t(c) << 8;
            for (int i = 0; i < 8; ++i)
                crc = (crc & 0x8000) ? uint16_t((crc << 1) ^ 0x1021) : uint16_t(crc << 1);
        }
        return crc & 16383;
    }

    // Reads the slot map (CLUSTER SLOTS) from any node that answers.
    bool refreshSlots()
    {
        std::vector<std::pair<std::string, int>> tries;
        for (const auto &n : m_nodes)
            tries.emplace_back(n->host, n->port);
        for (const auto &[host, port] : tries) {
            Reply r = commandOn(nodeAt(host, port), {"CLUSTER", "SLOTS"});
            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0)
                continue;
            m_slotNode.assign(16384, -1);
            for (size_t i = 0; i < r->elements; ++i) {
                const redisReply *e = r->element[i];
                if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
                    e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
                    continue;
                const long long from = e->element[0]->integer, to = e->element[1]->integer;
                const redisReply *master = e->element[2];
                std::string host(master->element[0]->str, master->element[0]->len);
                if (host.empty())
                    host = m_nodes.front()->host;
                Node &n = nodeAt(host, int(master->element[1]->integer));
                const int index = int(std::find_if(m_nodes.begin(), m_nodes.end(),
                                                   [&](const auto &x) { return x.get() == &n; }) -
                                      m_nodes.begin());
                for (long long slot = std::max(0LL, from); slot <= std::min(16383LL, to); ++slot)
                    m_slotNode[size_t(slot)] = index;
            }
            return true;
        }
        return false;
    }

    Node *nodeForKey(const std::string &key)
    {
        if (!m_cluster)
            return m_nodes.front().get();
        if (m_slotNode.empty() && !refreshSlots())
            return nullptr;
        const int index = m_slotNode[size_t(slotOf(key))];
        return index < 0 ? nullptr : m_nodes[size_t(index)].get();
    }

    // A command on one key (args[1]): the node that holds its slot, following MOVED and ASK
    // redirections (a resharded or failed-over cluster) a few times.
    Reply command(const std::vector<std::string> &args)
    {
        if (!m_cluster)
            return commandOn(*m_nodes.front(), args);
        Node *n = nodeForKey(args.size() > 1 ? args[1] : std::string());
        bool asking = false;
        for (int attempt = 0; attempt < 4; ++attempt) {
            if (!n) {
                ++m_stats.unavailable;
                m_lastError = m_url + ": no node holds the key's slot (cluster not ready?)";
                return nullptr;
            }
            if (asking)
                commandOn(*n, {"ASKING"});
            Reply r = commandOn(*n, args);
            if (!r || r->type != REDIS_REPLY_ERROR)
                return r;
            const std::string err(r->str, r->len);
            const bool moved = err.rfind("MOVED ", 0) == 0, ask = err.rfind("ASK ", 0) == 0;
            if (!moved && !ask)
                return r;
            // "MOVED 3999 127.0.0.1:6381"
            const auto space = err.rfind(' '), colon = err.rfind(':');
            if (space == std::string::npos || colon == std::string::npos || colon < space)
                return r;
            n = &nodeAt(err.substr(space + 1, colon - space - 1), std::atoi(err.c_str() + colon + 1));
            asking = ask;
            if (moved)
                refreshSlots();
        }
        return nullptr;
    }

    // Every node that holds data (the masters of a cluster; the one server otherwise).
    std::vector<Node *> dataNodes()
    {
        std::vector<Node *> out;
        if (!m_cluster) {
            out.push_back(m_nodes.front().get());
            return out;
        }
        if (m_slotNode.empty())
            refreshSlots();
        std::vector<bool> used(m_nodes.size(), false);
        for (int i : m_slotNode)
            if (i >= 0)
                used[size_t(i)] = true;
        for (size_t i = 0; i < m_nodes.size(); ++i)
            if (used[i])
                out.push_back(m_nodes[i].get());
        return out;
    }

    int64_t deleteMatching(const std::string &pattern)
    {
        int64_t n = 0;
        for (Node *node : dataNodes()) {
            std::string cursor = "0";
            do {
                Reply r = commandOn(*node, {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
                if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
                    break;
                cursor.assign(r->element[0]->str, r->element[0]->len);
                const redisReply *keys = r->element[1];
                if (keys->elements == 0)
                    continue;
                if (m_cluster) {
                    // keys of several slots: one UNLINK each (a multi-key command must stay in a slot)
                    for (size_t i = 0; i < keys->elements; ++i) {
                        Reply d =
                            command({"UNLINK", std::string(keys->element[i]->str, keys->element[i]->len)});
                        if (d && d->type == REDIS_REPLY_INTEGER)
                            n += d->integer;
                    }
                } else {
                    std::vector<std::string> del = {"UNLINK"};
                    for (size_t i = 0; i < keys->elements; ++i)
                        del.emplace_back(keys->element[i]->str, keys->element[i]->len);
                    Reply d = commandOn(*node, del);
                    if (d && d->type == REDIS_REPLY_INTEGER)
                        n += d->integer;
                }
            } while (cursor != "0");
        }
        return n;
    }

    int m_db;
    std::string m_url;
    StoreOptions m_options;
    bool m_cluster;
    std::vector<std::unique_ptr<Node>> m_nodes; // the server, or the cluster's seeds then its masters
    std::vector<int> m_slotNode;                // cluster: slot -> index into m_nodes (-1 unknown)
    std::string m_lastError;
};

} // namespace

std::unique_ptr<SharedStore> makeRedisStore(const std::vector<std::pair<std::string, int>> &seeds, int db,
                                            const std::string &url, StoreOptions options, bool cluster)
{
    return std::make_unique<RedisStore>(seeds, db, url, options, cluster);
}

} // namespace kvwb::core
