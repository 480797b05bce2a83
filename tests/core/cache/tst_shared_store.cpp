// The shared store under the cache tiers: the payload envelope (round trip, every refusal), the
// memory and Redis stores behaving alike (round trip, TTL, tenant and fingerprint isolation,
// invalidation by model and tag, streams), and what only a server can do: eviction under maxmemory,
// isolation across two processes, a server killed and restarted mid-run, corrupt and foreign
// payloads written behind the store's back. Each Redis case starts its own redis-server on a free
// loopback port (tests/support/redis_server.h).
#include "core/cache/shared_store.h"
#include "core/cache/store_payload.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/redis_server.h"

#include <QElapsedTimer>
#include <QProcess>
#include <QStandardPaths>
#include <QThread>
#include <QtTest>

#include <cmath>

#include <chrono>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace kvwb;
using core::PayloadKind;
using core::StoreOutcome;
using core::TenantScope;

namespace {

core::CachedResponse response(const std::string &text, const std::string &intent = "i1")
{
    core::CachedResponse r;
    r.text = text;
    r.outputIds = {7, 8, 9};
    r.intent = intent;
    r.requestId = 42;
    return r;
}

std::string kvEnvelope(const TenantScope &scope, int tokens)
{
    // [layers 2, K/V 2, heads 1, tokens, headDim 4] f32
    std::vector<float> values(size_t(2 * 2 * 1 * tokens * 4));
    for (size_t i = 0; i < values.size(); ++i)
        values[i] = float(i) * 0.25f - 3.0f;
    core::PayloadHeader h;
    h.kind = PayloadKind::Kv;
    h.tier = "prefix";
    h.tenant = scope.tenant();
    h.fingerprint = scope.modelFingerprint();
    h.dtype = core::DType::F32;
    h.shape = {2, 2, 1, tokens, 4};
    h.keyForm = core::KeyForm::PreRope;
    return core::encodePayload(
        h, std::string_view(reinterpret_cast<const char *>(values.data()), values.size() * sizeof(float)));
}

core::PayloadExpectation expectation(const TenantScope &s, const std::string &tier = "exact",
                                     PayloadKind kind = PayloadKind::Response)
{
    return {kind, tier, s.tenant(), s.modelFingerprint()};
}

} // namespace

class TestSharedStore : public QObject
{
    Q_OBJECT

    // The cases both stores must pass; `expireBy(ms)` advances the store's clock past a TTL.
    void behaviour(core::SharedStore &store, bool realClock)
    {
        const TenantScope t1("t1", "fpA"), t2("t2", "fpA"), t1b("t1", "fpB");
        QCOMPARE(store.put(t1, "exact", "k", core::encodeResponsePayload(t1, "exact", response("one"), 0), 0,
                           0, {"doc:1"}),
                 StoreOutcome::Hit);
        auto g = store.get(t1, "exact", "k", 1);
        QCOMPARE(g.outcome, StoreOutcome::Hit);
        const core::CachedResponse back = core::decodeResponseBody(g.payload->body);
        QCOMPARE(back.text, std::string("one"));
        QCOMPARE(back.outputIds, (std::vector<int>{7, 8, 9}));
        QCOMPARE(back.intent, std::string("i1"));
        QCOMPARE(back.requestId, int64_t(42));
        // another tenant, another fingerprint, another tier, another key: misses
        QCOMPARE(store.get(t2, "exact", "k", 1).outcome, StoreOutcome::Miss);
        QCOMPARE(store.get(t1b, "exact", "k", 1).outcome, StoreOutcome::Miss);
        QCOMPARE(store.get(t1, "semantic", "k", 1).outcome, StoreOutcome::Miss);
        QCOMPARE(store.get(t1, "exact", "k2", 1).outcome, StoreOutcome::Miss);

        // KV payload round trip, bytes exact
        const std::string kv = kvEnvelope(t2, 5);
        QCOMPARE(store.put(t2, "prefix", "blocks", kv, 0, 0), StoreOutcome::Hit);
        g = store.get(t2, "prefix", "blocks", 1);
        QCOMPARE(g.outcome, StoreOutcome::Hit);
        QCOMPARE(g.payload->header.shape, (std::vector<int64_t>{2, 2, 1, 5, 4}));
        QCOMPARE(g.payload->header.keyForm, core::KeyForm::PreRope);
        QCOMPARE(g.payload->body.size(), size_t(2 * 2 * 5 * 4 * 4));
        float first = 0;
        std::memcpy(&first, g.payload->body.data(), 4);
        QCOMPARE(first, -3.0f);

        // several keys in one call: each as get() would answer it
        const auto many = store.getMany(t2, "prefix", {"blocks", "absent", "blocks"}, 1);
        QCOMPARE(int(many.size()), 3);
        QCOMPARE(many[0].outcome, StoreOutcome::Hit);
        QCOMPARE(many[1].outcome, StoreOutcome::Miss);
        QCOMPARE(many[2].payload->body, g.payload->body);
        QVERIFY(store.getMany(t2, "prefix", {}, 1).empty());

        // TTL
        store.put(t1, "exact", "short", core::encodeResponsePayload(t1, "exact", response("s"), 0), 100,
                  1000);
        QCOMPARE(store.get(t1, "exact", "short", 1050).outcome, StoreOutcome::Hit);
        if (realClock)
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
        QCOMPARE(store.get(t1, "exact", "short", 1100).outcome, StoreOutcome::Miss);

        // invalidation by tag and by model
        store.put(t1b, "exact", "k", core::encodeResponsePayload(t1b, "exact", response("b"), 0), 0, 0);
        QCOMPARE(store.invalidateTag("doc:1"), int64_t(1));
        QCOMPARE(store.get(t1, "exact", "k", 1).outcome, StoreOutcome::Miss);
        QCOMPARE(store.get(t1b, "exact", "k", 1).outcome, StoreOutcome::Hit);
        QCOMPARE(store.invalidateModel("fpB"), int64_t(1));
        QCOMPARE(store.get(t1b, "exact", "k", 1).outcome, StoreOutcome::Miss);
        QCOMPARE(store.get(t2, "prefix", "blocks", 1).outcome, StoreOutcome::Hit); // fpA untouched

        // streams: in order, resumable after an id
        const auto id1 = store.appendStream("semantic", "first");
        const auto id2 = store.appendStream("semantic", "second");
        QVERIFY(id1 && id2 && *id1 != *id2);
        auto all = store.readStream("semantic", "", 10);
        QCOMPARE(int(all.size()), 2);
        QCOMPARE(all[0].data, std::string("first"));
        QCOMPARE(all[1].id, *id2);
        auto after = store.readStream("semantic", *id1, 10);
        QCOMPARE(int(after.size()), 1);
        QCOMPARE(after[0].data, std::string("second"));
        QCOMPARE(int(store.readStream("semantic", *id2, 10).size()), 0);

        const core::SharedStoreStats s = store.stats();
        QVERIFY(s.gets >= 10 && s.hits >= 4 && s.puts >= 4);
        QCOMPARE(s.refused, int64_t(0));
        QCOMPARE(s.unavailable, int64_t(0));
        store.flush();
        QCOMPARE(store.get(t2, "prefix", "blocks", 1).outcome, StoreOutcome::Miss);
    }

    static kvwb::test::RedisServer *startedServer(QStringList extra = {})
    {
        auto *server = new kvwb::test::RedisServer(std::move(extra));
        if (!server->start())
            qFatal("%s", qPrintable(server->error()));
        return server;
    }

private Q_SLOTS:
    // KV bodies as F32 (exact), BF16 and F16 (rounded to nearest even); sizes checked.
    void kvBodies()
    {
        const std::vector<float> v = {0.0f, 1.0f, -2.5f, 3.14159f, 1e-3f, -65504.0f, 1234.5678f};
        for (const core::DType t : {core::DType::F32, core::DType::BF16, core::DType::F16}) {
            std::string body = "x"; // appended after what is there
            core::appendKvBody(body, v.data(), v.size(), t);
            QCOMPARE(body.size(), 1 + v.size() * size_t(core::dtypeSize(t)));
            std::vector<float> back(v.size());
            core::unpackKvBody(std::string_view(body).substr(1), t, back.data(), back.size());
            const double tol = t == core::DType::F32 ? 0.0 : t == core::DType::BF16 ? 1.0 / 256 : 1.0 / 2048;
            for (size_t i = 0; i < v.size(); ++i)
                QVERIFY2(std::abs(back[i] - v[i]) <= tol * std::abs(v[i]),
                         qPrintable(QString("%1: %2 -> %3").arg(core::dtypeName(t)).arg(v[i]).arg(back[i])));
            QCOMPARE(test::expectError([&] {
                         core::unpackKvBody(std::string_view(body).substr(2), t, back.data(), back.size());
                     }).code(),
                     core::ErrorCode::Format);
        }
        QVERIFY(!core::isKvBodyDType(core::DType::I32));
        QCOMPARE(core::parseFloatType("bf16"), std::optional(core::FloatType::BF16));
        QCOMPARE(core::parseFloatType("f32"), std::optional(core::FloatType::F32));
        QCOMPARE(core::toDType(core::FloatType::F16), core::DType::F16);
        QCOMPARE(core::toFloatType(core::DType::BF16), std::optional(core::FloatType::BF16));
        QVERIFY(!core::toFloatType(core::DType::I32));
        QVERIFY(!core::parseFloatType("F16")); // option values are lower-case
        QVERIFY(!core::parseFloatType("u8"));
        std::string body;
        QCOMPARE(
            test::expectError([&] { core::appendKvBody(body, v.data(), v.size(), core::DType::I8); }).code(),
            core::ErrorCode::InvalidArgument);
    }

    void envelopeRoundTripAndRefusals()
    {
        const TenantScope s("tenant\x1f"
                            "odd",
                            "fp1");
        const std::string env = core::encodeResponsePayload(s, "exact", response("hello"), 123);
        std::string why;
        auto d = core::decodePayload(env, expectation(s), &why);
        QVERIFY2(d.has_value(), why.c_str());
        QCOMPARE(d->header.createdMs, int64_t(123));
        QCOMPARE(d->header.tenant, s.tenant());
        QCOMPARE(core::decodeResponseBody(d->body).text, std::string("hello"));

        // every byte flipped anywhere is refused (checksum or magic), never decoded
        for (size_t i = 0; i < env.size(); i += 7) {
            std::string bad = env;
            bad[i] = char(bad[i] ^ 0x20);
            QVERIFY(!core::decodePayload(bad, expectation(s), &why));
        }
        std::string bad = env;
        bad[20] = char(bad[20] ^ 1);
        QVERIFY(!core::decodePayload(bad, expectation(s), &why));
        QCOMPARE(why, std::string("checksum mismatch"));
        // truncated, empty, and a header length past the end: refused before any allocation
        QVERIFY(!core::decodePayload(env.substr(0, env.size() - 1), expectation(s), &why));
        QVERIFY(!core::decodePayload("", expectation(s), &why));
        std::string huge = env;
        huge[8] = huge[9] = huge[10] = char(0xff);
        huge[11] = 0x7f;
        QVERIFY(!core::decodePayload(huge, expectation(s), &why));
        QVERIFY2(why.find("header length") != std::string::npos, why.c_str());
        // foreign: another fingerprint, tenant, tier or kind
        QVERIFY(!core::decodePayload(env, expectation(TenantScope(s.tenant(), "fp2")), &why));
        QVERIFY2(why.find("fingerprint") != std::string::npos, why.c_str());
        QVERIFY(!core::decodePayload(env, expectation(TenantScope("other", "fp1")), &why));
        QCOMPARE(why, std::string("payload of another tenant"));
        QVERIFY(!core::decodePayload(env, expectation(s, "semantic"), &why));
        QVERIFY(!core::decodePayload(env, expectation(s, "exact", PayloadKind::Kv), &why));

        // encoding refuses a body that disagrees with its shape
        core::PayloadHeader h;
        h.kind = PayloadKind::Kv;
        h.dtype = core::DType::F16;
        h.shape = {1, 2, 3};
        QCOMPARE(test::expectError([&] { core::encodePayload(h, std::string(11, 'x')); }).code(),
                 core::ErrorCode::InvalidArgument);
        h.dtype = core::DType::I64;
        h.shape = {1};
        QCOMPARE(test::expectError([&] { core::encodePayload(h, std::string(8, 'x')); }).code(),
                 core::ErrorCode::InvalidArgument);
        QCOMPARE(test::expectError([] { core::decodeResponseBody("{\"text\":1}"); }).code(),
                 core::ErrorCode::Format);

        // model output need not be UTF-8: bytes round-trip exactly
        core::CachedResponse odd = response(std::string("\xc8\x00\xff tail", 8));
        QCOMPARE(core::decodeResponseBody(core::encodeResponseBody(odd)).text, odd.text);
        // a count past the end of the body is refused before anything is allocated
        std::string body = core::encodeResponseBody(odd);
        body[body.size() - 13] = char(0x7f); // the output id count's top byte
        const core::Error e = test::expectError([&] { core::decodeResponseBody(body); });
        QVERIFY2(std::string(e.what()).find("output_ids") != std::string::npos, e.what());
        QVERIFY(test::expectError([&] {
                    core::decodeResponseBody(core::encodeResponseBody(odd) + "x");
                }).code() == core::ErrorCode::Format);
        const core::SemanticEntryBody entry{"lexical-512", "What is a car?", {0.5f, -0.25f, 1.0f}, odd};
        const auto back = core::decodeSemanticEntryBody(core::encodeSemanticEntryBody(entry));
        QCOMPARE(back.embedder, entry.embedder);
        QCOMPARE(back.prompt, entry.prompt);
        QCOMPARE(back.vector, entry.vector);
        QCOMPARE(back.response.outputIds, odd.outputIds);
    }

    void urls()
    {
        for (const char *url :
             {"redis://", "redis://host", "redis://host:0", "redis://host:70000", "redis://:6379",
              "redis://h:6379/16", "redis://h:6379/x", "http://h:1", "memory2", "redis://a:1,b:2",
              "redis-cluster://a:1,b", "redis-cluster://a:1/2", "redis://u:p@host:6379"}) {
            const core::Error e = test::expectError([&] { core::openSharedStore(url); });
            QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
            QVERIFY2(std::string(e.what()).find(url) != std::string::npos, e.what());
        }
        QCOMPARE(core::openSharedStore("memory")->describe(), std::string("memory"));
        QCOMPARE(core::openSharedStore("redis://127.0.0.1:1/3")->describe(),
                 std::string("redis://127.0.0.1:1/3"));
        QCOMPARE(core::openSharedStore("redis-cluster://127.0.0.1:1,127.0.0.1:2")->describe(),
                 std::string("redis-cluster://127.0.0.1:1,127.0.0.1:2"));
    }

    void memoryStore()
    {
        auto store = core::makeMemoryStore();
        behaviour(*store, false);
    }

    void redisStore()
    {
        std::unique_ptr<kvwb::test::RedisServer> server(startedServer());
        auto store = core::openSharedStore(server->url());
        behaviour(*store, true);
        // keys of the layout only; flush left nothing of ours behind
        QCOMPARE(server->cli({"DBSIZE"}).trimmed(), QByteArray("0"));
    }

    // A Redis Cluster of three masters on loopback: the same behaviour, keys spread over the nodes by
    // hash slot, and a store seeded with any one node reaches every slot.
    void redisCluster()
    {
        std::vector<std::unique_ptr<kvwb::test::RedisServer>> nodes;
        QStringList endpoints;
        for (int i = 0; i < 3; ++i) {
            nodes.emplace_back(startedServer({"--cluster-enabled", "yes", "--cluster-config-file",
                                              "nodes.conf", "--cluster-node-timeout", "5000"}));
            endpoints << QString("127.0.0.1:%1").arg(nodes.back()->port());
        }
        QProcess create;
        create.start(QStandardPaths::findExecutable("redis-cli"),
                     QStringList{"--cluster", "create"} + endpoints +
                         QStringList{"--cluster-replicas", "0", "--cluster-yes"});
        QVERIFY(create.waitForFinished(30000));
        QVERIFY2(create.exitCode() == 0, create.readAll().constData());
        QElapsedTimer t;
        t.start();
        const auto ready = [&] {
            for (const auto &n : nodes)
                if (!n->cli({"CLUSTER", "INFO"}).contains("cluster_state:ok"))
                    return false;
            return true;
        };
        while (!ready() && t.elapsed() < 20000)
            QThread::msleep(100);
        QVERIFY(ready());

        auto store = core::openSharedStore("redis-cluster://" + endpoints[0].toStdString());
        behaviour(*store, true);
        const TenantScope scope("t", "fp");
        for (int i = 0; i < 60; ++i)
            QCOMPARE(
                store->put(scope, "exact", "k" + std::to_string(i),
                           core::encodeResponsePayload(scope, "exact", response("v" + std::to_string(i)), 0),
                           0, 0),
                StoreOutcome::Hit);
        int holding = 0;
        for (const auto &n : nodes)
            holding += n->cli({"DBSIZE"}).trimmed().toInt() > 0;
        QCOMPARE(holding, 3); // 60 keys over 16384 slots in three ranges
        QCOMPARE(store->serverInfo().keys, int64_t(60));
        // seeded with the last node only: every key is still found (the slot map comes from it)
        auto other = core::openSharedStore("redis-cluster://" + endpoints[2].toStdString());
        for (int i = 0; i < 60; ++i) {
            const auto g = other->get(scope, "exact", "k" + std::to_string(i), 0);
            QCOMPARE(g.outcome, StoreOutcome::Hit);
            QCOMPARE(core::decodeResponseBody(g.payload->body).text, "v" + std::to_string(i));
        }
        QCOMPARE(int(other->getMany(scope, "exact", {"k1", "k2", "nope"}, 0).size()), 3);
        other->flush();
        QCOMPARE(store->serverInfo().keys, int64_t(0));
        QCOMPARE(store->stats().unavailable, int64_t(0));
    }

    void noServerIsUnavailableNotAnError()
    {
        // a port nothing listens on: every call answers at once, nothing throws
        auto store = core::openSharedStore("redis://127.0.0.1:1");
        const TenantScope t("t", "fp");
        QCOMPARE(store->get(t, "exact", "k", 0).outcome, StoreOutcome::Unavailable);
        QCOMPARE(store->put(t, "exact", "k", core::encodeResponsePayload(t, "exact", response("x"), 0), 0, 0),
                 StoreOutcome::Unavailable);
        bool available = true;
        QVERIFY(store->readStream("semantic", "", 5, &available).empty());
        QVERIFY(!available);
        QCOMPARE(store->stats().unavailable, int64_t(3));
    }

    void serverKilledAndRestartedMidRun()
    {
        std::unique_ptr<kvwb::test::RedisServer> server(startedServer());
        auto store = core::openSharedStore(server->url());
        const TenantScope t("t", "fp");
        const std::string env = core::encodeResponsePayload(t, "exact", response("before"), 0);
        QCOMPARE(store->put(t, "exact", "k", env, 0, 0), StoreOutcome::Hit);
        server->kill();
        const auto start = std::chrono::steady_clock::now();
        QCOMPARE(store->get(t, "exact", "k", 0).outcome, StoreOutcome::Unavailable);
        QCOMPARE(store->put(t, "exact", "k2", env, 0, 0), StoreOutcome::Unavailable);
        QVERIFY(std::chrono::steady_clock::now() - start <
                std::chrono::seconds(3)); // bounded by the timeouts
        QVERIFY(server->start());         // same port, empty (no persistence)
        QCOMPARE(store->get(t, "exact", "k", 0).outcome, StoreOutcome::Miss);
        QCOMPARE(store->put(t, "exact", "k", env, 0, 0), StoreOutcome::Hit);
        QCOMPARE(store->get(t, "exact", "k", 0).outcome, StoreOutcome::Hit);
        QCOMPARE(store->stats().reconnects, int64_t(1));
        QCOMPARE(store->stats().unavailable, int64_t(2));
    }

    void corruptAndForeignPayloadsAreRefused()
    {
        std::unique_ptr<kvwb::test::RedisServer> server(startedServer());
        auto store = core::openSharedStore(server->url());
        const TenantScope t("t", "fpA");
        const std::string key = core::sharedStoreKey(t, "exact", "k");
        // bytes that are not an envelope, under the tier's key
        server->cli({"SET", QString::fromStdString(key), "garbage"});
        auto g = store->get(t, "exact", "k", 0);
        QCOMPARE(g.outcome, StoreOutcome::Refused);
        QVERIFY(!g.payload);
        // a valid envelope of another model put under this model's key (a foreign payload)
        const TenantScope other("t", "fpB");
        QCOMPARE(
            store->put(t, "exact", "k", core::encodeResponsePayload(other, "exact", response("x"), 0), 0, 0),
            StoreOutcome::Hit);
        g = store->get(t, "exact", "k", 0);
        QCOMPARE(g.outcome, StoreOutcome::Refused);
        QVERIFY2(g.reason.find("fingerprint") != std::string::npos, g.reason.c_str());
        // a list where a string belongs
        server->cli({"DEL", QString::fromStdString(key)});
        server->cli({"RPUSH", QString::fromStdString(key), "a"});
        QCOMPARE(store->get(t, "exact", "k", 0).outcome, StoreOutcome::Refused);
        QCOMPARE(store->stats().refused, int64_t(3));
        QCOMPARE(store->stats().hits, int64_t(0));
    }

    // --store-key-file: with a key, values carry an HMAC-SHA256 tag bound to their key; a value
    // written without the key, with another key, moved to another key or altered is refused and
    // counted, so write access to Redis is not enough to poison a tenant. Streams likewise. The
    // behaviour of a keyed store is otherwise the same.
    void keyedIntegrity()
    {
        std::unique_ptr<kvwb::test::RedisServer> server(startedServer());
        core::StoreOptions keyed;
        keyed.integrityKey = "0123456789abcdef-fleet-secret";
        auto store = core::openSharedStore(server->url(), keyed);
        behaviour(*store, true);
        auto plain = core::openSharedStore(server->url());
        core::StoreOptions otherKey;
        otherKey.integrityKey = "another key of sixteen bytes or more";
        auto wrong = core::openSharedStore(server->url(), otherKey);
        const TenantScope t("t", "fpA"), u("u", "fpA");
        const std::string good = core::encodeResponsePayload(t, "exact", response("right"), 0);

        QCOMPARE(store->put(t, "exact", "k", good, 0, 0), StoreOutcome::Hit);
        QCOMPARE(store->get(t, "exact", "k", 0).outcome, StoreOutcome::Hit);
        auto g = wrong->get(t, "exact", "k", 0); // another key
        QCOMPARE(g.outcome, StoreOutcome::Refused);
        QVERIFY2(g.reason.find("integrity tag does not match") != std::string::npos, g.reason.c_str());
        QCOMPARE(plain->get(t, "exact", "k", 0).outcome, StoreOutcome::Refused); // tag = trailing bytes

        // a valid envelope written by someone without the key
        QCOMPARE(plain->put(t, "exact", "k2", good, 0, 0), StoreOutcome::Hit);
        g = store->get(t, "exact", "k2", 0);
        QCOMPARE(g.outcome, StoreOutcome::Refused);
        QVERIFY2(g.reason.find("no integrity tag") != std::string::npos, g.reason.c_str());

        // a sealed value copied under another key (bound to where it was written)
        const QString from = QString::fromStdString(core::sharedStoreKey(t, "exact", "k"));
        const QString to = QString::fromStdString(core::sharedStoreKey(t, "exact", "k3"));
        server->cli({"COPY", from, to});
        QCOMPARE(store->get(t, "exact", "k3", 0).outcome, StoreOutcome::Refused);
        // one byte of a sealed value altered
        server->cli({"SETRANGE", from, "20", "X"});
        QCOMPARE(store->get(t, "exact", "k", 0).outcome, StoreOutcome::Refused);
        QCOMPARE(store->stats().refused, int64_t(3));

        // streams: an entry appended without the key reads as nothing and is counted
        store->flush();
        QVERIFY(store->appendStream("semantic", good));
        QVERIFY(plain->appendStream("semantic", good));
        const auto entries = store->readStream("semantic", "", 10);
        QCOMPARE(int(entries.size()), 2);
        QCOMPARE(entries[0].data, good);
        QVERIFY(entries[1].data.empty());
        QCOMPARE(store->stats().refused, int64_t(4));
        (void)u;
        store->flush();

        const core::Error e = test::expectError([&] {
            core::StoreOptions shortKey;
            shortKey.integrityKey = "short";
            core::openSharedStore("memory", shortKey);
        });
        QVERIFY2(std::string(e.what()).find("at least 16 bytes") != std::string::npos, e.what());
    }

    void tenantsStayApartAcrossProcesses()
    {
        std::unique_ptr<kvwb::test::RedisServer> server(startedServer());
        const std::string url = server->url();
        const pid_t child = fork();
        QVERIFY(child >= 0);
        if (child == 0) {
            // another worker process: writes tenant a's answer under a key tenant b will ask for
            auto store = core::openSharedStore(url);
            const TenantScope a("a", "fp");
            const bool ok = store->put(a, "exact", "same prompt",
                                       core::encodeResponsePayload(a, "exact", response("a's answer"), 0), 0,
                                       0) == StoreOutcome::Hit;
            _exit(ok ? 0 : 1);
        }
        int status = 0;
        QCOMPARE(waitpid(child, &status, 0), child);
        QVERIFY(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        auto store = core::openSharedStore(url);
        QCOMPARE(store->get(TenantScope("b", "fp"), "exact", "same prompt", 0).outcome, StoreOutcome::Miss);
        const auto g = store->get(TenantScope("a", "fp"), "exact", "same prompt", 0);
        QCOMPARE(g.outcome, StoreOutcome::Hit);
        QCOMPARE(core::decodeResponseBody(g.payload->body).text, std::string("a's answer"));
    }

    void evictionUnderMaxmemoryIsCounted()
    {
        // allkeys-lru: the server evicts to stay under its limit, and says how many
        std::unique_ptr<kvwb::test::RedisServer> server(
            startedServer({"--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"}));
        auto store = core::openSharedStore(server->url());
        const TenantScope t("t", "fp");
        const std::string kv = kvEnvelope(t, 2000); // ~128 KB
        for (int i = 0; i < 40; ++i)
            QCOMPARE(store->put(t, "prefix", "k" + std::to_string(i), kv, 0, 0), StoreOutcome::Hit);
        core::StoreServerInfo info = store->serverInfo();
        QCOMPARE(info.evictionPolicy, std::string("allkeys-lru"));
        QCOMPARE(info.maxBytes, int64_t(2 * 1024 * 1024));
        QVERIFY2(info.evictedKeys > 0, qPrintable(QString::number(info.evictedKeys)));
        QVERIFY(info.keys < 40);
        QCOMPARE(store->get(t, "prefix", "k39", 0).outcome, StoreOutcome::Hit); // the newest stays

        // noeviction: a write past the limit is refused by the server and reported, never lost quietly
        server->cli({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
        int refused = 0;
        for (int i = 40; i < 80; ++i)
            refused +=
                store->put(t, "prefix", "k" + std::to_string(i), kv, 0, 0) == StoreOutcome::Unavailable;
        QVERIFY(refused > 0);
        QCOMPARE(store->stats().unavailable, int64_t(refused));
    }
};

QTEST_GUILESS_MAIN(TestSharedStore)
#include "tst_shared_store.moc"
