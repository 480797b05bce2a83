// `kvwb replay --store` and `--workers` end to end on a random model, each case with a redis-server
// of its own on loopback: a replay over Redis makes the same decisions as one in process (prefix
// blocks fetched from Redis generate exactly what a miss generates); a second replay is served from
// what the first left; a fleet with per-worker caches and tenant-affine routing finds every exact
// repeat, and a fleet of two workers on one store never serves a tenant another's entry; a store
// that is down, killed mid-replay or holding corrupt payloads costs hits, never a request: every
// row is in the ledger, marked.
#include "core/cache/store_payload.h"
#include "core/ledger/replay_ledger.h"
#include "core/model/random_model.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/redis_server.h"
#include "tests/support/tenant_workload.h"
#include "tests/support/test_paths.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include <fmt/format.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <sys/types.h>

using namespace kvwb;
namespace fs = std::filesystem;
using test::runKvwb;

namespace {

QString q(const fs::path &p)
{
    return QString::fromStdString(p.string());
}

// How many rows hold each store note, by its name ("hit", "refused", ...).
std::map<std::string, int> countStoreNotes(const std::vector<core::LedgerRow> &rows)
{
    std::map<std::string, int> n;
    for (const auto &r : rows)
        ++n[core::enumName(core::kStoreNoteNames, r.store)];
    return n;
}

// The processes whose parent is `parent` (from /proc).
std::vector<pid_t> childrenOf(pid_t parent)
{
    std::vector<pid_t> out;
    for (const auto &e : fs::directory_iterator("/proc")) {
        const std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos)
            continue;
        std::ifstream in(e.path() / "stat");
        std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const size_t close = stat.rfind(')');
        if (close == std::string::npos)
            continue;
        std::istringstream rest(stat.substr(close + 2));
        char state = 0;
        long ppid = 0;
        rest >> state >> ppid;
        if (ppid == parent)
            out.push_back(pid_t(std::stol(name)));
    }
    return out;
}

// Running (not gone, not a zombie).
bool alive(pid_t pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

} // namespace

class TestFleetCli : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    fs::path m_dir;
    std::map<int64_t, std::string> m_tenantOf;
    int m_exactRepeats = 0;

    QStringList replay(const QStringList &extra, const fs::path &ledger)
    {
        return QStringList{"replay",  "--workload", q(m_dir / "w.jsonl"), "--model-a", q(m_dir / "m"),
                           "--block", "4",          "--threads",          "1",         "--ledger",
                           q(ledger), "--json"} +
               extra;
    }

    std::vector<core::LedgerRow> ledger(const fs::path &p)
    {
        return core::ledgerFromCsv(test::readFile(p), p.string());
    }

private Q_SLOTS:
    void initTestCase()
    {
        m_dir = m_tmp.path().toStdString();
        core::writeRandomHfModel(m_dir / "m", core::randomModelPreset("gqa"));
        const test::TenantWorkload w = test::threeTenantWorkload();
        m_tenantOf = w.tenantOf;
        m_exactRepeats = w.exactRepeats;
        test::writeFile(m_dir / "w.jsonl", w.jsonl);
    }

    // Prefix blocks written as bf16 or f16: the same decisions as float32 blocks, about half the
    // bytes sent, outputs close to a miss's (values rounded; the shadow runs measure it), and blocks
    // of one precision read by a replay that writes another.
    void halfPrecisionBlocks()
    {
        test::RedisServer server;
        QVERIFY2(server.start(), qPrintable(server.error()));
        const QString url = QString::fromStdString(server.url());
        const QStringList tiers = {"--tiers", "prefix", "--shadow", "1", "--store", url, "--store-flush"};
        auto r = runKvwb(replay(tiers, m_dir / "f32.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto j32 = QJsonDocument::fromJson(r.out).object();
        const double sent32 = j32["store"].toObject()["bytes_sent"].toDouble();
        QVERIFY(sent32 > 0);
        QCOMPARE(j32["settings"].toObject()["store_kv_dtype"].toString(), QString("f32"));
        const auto rows32 = ledger(m_dir / "f32.csv");
        for (const char *dtype : {"bf16", "f16"}) {
            const fs::path csv = m_dir / (std::string(dtype) + ".csv");
            r = runKvwb(replay(tiers + QStringList{"--store-kv-dtype", dtype}, csv));
            QVERIFY2(r.exitCode == 0, r.err.constData());
            const auto j = QJsonDocument::fromJson(r.out).object();
            QCOMPARE(j["settings"].toObject()["store_kv_dtype"].toString(),
                     QString(dtype)); // as the flag says
            const double ratio = j["store"].toObject()["bytes_sent"].toDouble() / sent32;
            QVERIFY2(ratio > 0.45 && ratio < 0.6, qPrintable(QString::number(ratio)));
            const auto rows = ledger(csv);
            QCOMPARE(rows.size(), rows32.size());
            int hits = 0;
            double worst = 0;
            for (size_t i = 0; i < rows.size(); ++i) {
                QCOMPARE(rows[i].answeredBy, rows32[i].answeredBy);
                QCOMPARE(rows[i].tokensReused, rows32[i].tokensReused);
                if (rows[i].answeredBy == core::TierKind::Prefix) {
                    ++hits;
                    worst = std::max(worst, rows[i].shadowKl);
                }
            }
            QVERIFY(hits > 0);
            qInfo("%s blocks: %d prefix hits, bytes sent %.2f of float32's, worst next-token KL %.2e", dtype,
                  hits, ratio, worst);
            QVERIFY2(worst < 1e-3, qPrintable(QString::number(worst))); // rounding, not a wrong cache
        }
        // f16 blocks from the last run, read by a float32 replay: every prefix found, none refused
        r = runKvwb(replay({"--tiers", "prefix", "--store", url}, m_dir / "mixed.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto jm = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(jm["store"].toObject()["refused"].toInt(), 0);
        QVERIFY(jm["tiers"].toObject()["prefix"].toObject()["hits"].toInt() >=
                j32["tiers"].toObject()["prefix"].toObject()["hits"].toInt());

        r = runKvwb(replay({"--tiers", "prefix", "--store-kv-dtype", "bf16"}, m_dir / "x.csv"));
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("--store"), r.err.constData());
        r = runKvwb(
            replay({"--tiers", "prefix", "--store", url, "--store-kv-dtype", "int8"}, m_dir / "x.csv"));
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("f32, bf16 or f16"), r.err.constData());
    }

    void redisReplayDecidesAsInProcess()
    {
        test::RedisServer server;
        QVERIFY2(server.start(), qPrintable(server.error()));
        const QStringList tiers = {"--tiers", "exact,semantic,prefix", "--threshold", "0.995", "--shadow",
                                   "1"};
        auto r = runKvwb(replay(tiers, m_dir / "local.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        r = runKvwb(replay(tiers + QStringList{"--store", QString::fromStdString(server.url())},
                           m_dir / "redis.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto j = QJsonDocument::fromJson(r.out).object();
        QVERIFY(j["store"].toObject()["puts"].toInt() > 0);
        QCOMPARE(j["store"].toObject()["refused"].toInt(), 0);
        QCOMPARE(j["settings"].toObject()["store"].toString(), QString::fromStdString(server.url()));
        const auto local = ledger(m_dir / "local.csv"), redis = ledger(m_dir / "redis.csv");
        QCOMPARE(redis.size(), local.size());
        int prefixHits = 0;
        for (size_t i = 0; i < local.size(); ++i) {
            QCOMPARE(redis[i].answeredBy, local[i].answeredBy);
            QCOMPARE(redis[i].tokensReused, local[i].tokensReused);
            QCOMPARE(redis[i].tokensComputed, local[i].tokensComputed);
            QCOMPARE(local[i].store, core::StoreNote::None);
            QVERIFY(redis[i].store == core::StoreNote::Hit || redis[i].store == core::StoreNote::Miss);
            if (redis[i].answeredBy == core::TierKind::Prefix) {
                ++prefixHits;
                QCOMPARE(redis[i].shadowExact, 1); // KV blocks from Redis generate what a miss generates
                QVERIFY(redis[i].shadowKl >= 0 && redis[i].shadowKl < 1e-6);
            }
        }
        QVERIFY(prefixHits > 0);

        // a second replay finds every prompt in the store
        r = runKvwb(replay({"--tiers", "exact", "--store", QString::fromStdString(server.url())},
                           m_dir / "again.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto again = ledger(m_dir / "again.csv");
        QCOMPARE(again.size(), redis.size());
        for (size_t i = 0; i < again.size(); ++i) {
            // every prompt the first replay computed was stored (a semantic hit's was not)
            if (redis[i].answeredBy == core::TierKind::Semantic)
                continue;
            QCOMPARE(again[i].answeredBy, core::TierKind::Exact);
            QCOMPARE(m_tenantOf.at(again[i].cachedRequestId), again[i].tenant);
        }

        // payloads corrupted behind the store's back are refused and computed, never served
        const QByteArray keys = server.cli({"--scan", "--pattern", "kvwb:exact:*"});
        int corrupted = 0;
        for (const QByteArray &k : keys.split('\n'))
            if (!k.trimmed().isEmpty()) {
                server.cli({"SETRANGE", QString::fromUtf8(k.trimmed()), "40", "XXXX"});
                ++corrupted;
            }
        QVERIFY(corrupted > 0);
        r = runKvwb(
            replay({"--tiers", "exact", "--store", QString::fromStdString(server.url())}, m_dir / "bad.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto bad = ledger(m_dir / "bad.csv");
        QCOMPARE(int(bad.size()), 36);
        const auto outcomes = countStoreNotes(bad);
        QVERIFY2(outcomes.count("refused") && outcomes.at("refused") > 0, r.err.constData());
        for (const auto &row : bad)
            if (row.store == core::StoreNote::Refused)
                QVERIFY(row.answeredBy == core::TierKind::None && row.tokensComputed > 0);
        QCOMPARE(QJsonDocument::fromJson(r.out).object()["store"].toObject()["refused"].toInt(),
                 outcomes.at("refused"));
    }

    // KV blocks with a valid envelope and CRC but NaN or 1e30 values (a writer's bug or a poisoned
    // store) are refused and counted, never placed in a cache: the replay runs on (it used to stop,
    // blaming the model's weights, or serve the 1e30 block).
    void poisonedKvBlocksAreRefusedAndCounted()
    {
        test::RedisServer server;
        QVERIFY2(server.start(), qPrintable(server.error()));
        const QStringList tiers = {"--tiers", "prefix", "--store", QString::fromStdString(server.url())};
        auto r = runKvwb(replay(tiers, m_dir / "clean.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        int poisoned = 0;
        for (const QByteArray &line : server.cli({"KEYS", "kvwb:prefix:*"}).split('\n')) {
            const std::string key = line.trimmed().toStdString();
            if (key.empty())
                continue;
            std::string why;
            auto p = core::decodePayloadAnyScope(server.getBytes(key), core::PayloadKind::Kv, "prefix", &why);
            QVERIFY2(p, why.c_str());
            QCOMPARE(p->header.dtype, core::DType::F32);
            const float bad = poisoned % 2 == 0 ? std::nanf("") : 1e30f;
            std::memcpy(p->body.data(), &bad, sizeof bad);
            server.setBytes(key, core::encodePayload(p->header, p->body));
            ++poisoned;
        }
        QVERIFY(poisoned > 1);
        r = runKvwb(replay(tiers, m_dir / "poisoned.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        int refusedRows = 0;
        for (const auto &row : ledger(m_dir / "poisoned.csv"))
            refusedRows += row.store == core::StoreNote::Refused;
        QVERIFY(refusedRows > 0);
        const auto j = QJsonDocument::fromJson(r.out).object();
        QVERIFY2(j["store"].toObject()["refused"].toInt() >= refusedRows, r.out.constData());
    }

    void fleetsRouteAndStayIsolated()
    {
        // per-worker caches, tenant-affine: every tenant's repeats reach the worker that saw the first
        auto r = runKvwb(
            replay({"--tiers", "exact", "--workers", "2", "--routing", "tenant-affine"}, m_dir / "f1.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["tiers"].toObject()["exact"].toObject()["hits"].toInt(), m_exactRepeats);
        QCOMPARE(j["fleet"].toObject()["workers"].toInt(), 2);
        QCOMPARE(j["fleet"].toObject()["routing"].toString(), QString("tenant-affine"));
        auto rows = ledger(m_dir / "f1.csv");
        QCOMPARE(int(rows.size()), 36);
        std::map<std::string, std::set<int>> workersOf;
        for (const auto &row : rows) {
            workersOf[row.tenant].insert(row.worker);
            QCOMPARE(row.route, "tenant-affine:" + row.tenant);
        }
        for (const auto &[t, ws] : workersOf)
            QCOMPARE(int(ws.size()), 1);

        // round-robin with per-worker caches misses the repeats the other worker saw
        r = runKvwb(
            replay({"--tiers", "exact", "--workers", "2", "--routing", "round-robin"}, m_dir / "f2.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        j = QJsonDocument::fromJson(r.out).object();
        const int roundRobinLocal = j["tiers"].toObject()["exact"].toObject()["hits"].toInt();
        QVERIFY(roundRobinLocal < m_exactRepeats);
        // each worker's exact tier stored its misses; tier_stores sums them over the workers
        const auto exactStore = j["tier_stores"].toObject()["exact"].toObject();
        QCOMPARE(exactStore["inserts"].toInt(), 36 - roundRobinLocal);
        QCOMPARE(exactStore["entries"].toInt(), 36 - roundRobinLocal);
        QCOMPARE(exactStore["evictions"].toInt(), 0);

        // two workers, three tenants, one Redis: entries cross workers, never tenants
        test::RedisServer server;
        QVERIFY2(server.start(), qPrintable(server.error()));
        r = runKvwb(replay({"--tiers", "exact,prefix", "--workers", "2", "--routing", "round-robin",
                            "--store", QString::fromStdString(server.url())},
                           m_dir / "f3.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        j = QJsonDocument::fromJson(r.out).object();
        QVERIFY(j["store"].toObject()["puts"].toDouble() > 0);
        rows = ledger(m_dir / "f3.csv");
        QCOMPARE(int(rows.size()), 36);
        std::set<int> workers;
        for (const auto &row : rows) {
            workers.insert(row.worker);
            QCOMPARE(row.worker, int(row.requestId % 2));
            if (row.answeredBy == core::TierKind::Exact)
                QCOMPARE(m_tenantOf.at(row.cachedRequestId), row.tenant);
            QCOMPARE(row.falseHit, false);
        }
        QCOMPARE(int(workers.size()), 2);
        const auto perWorker = j["fleet"].toObject()["per_worker"].toVariant().toList();
        QCOMPARE(perWorker.size(), 2);
    }

    // A worker that dies (killed at a chosen request through KVWB_TEST_KILL_WORKER) loses none of the
    // rows the fleet completed: the ledger holds every request, the dead worker's unfinished ones
    // marked not served, and the error names the worker.
    void aKilledWorkerKeepsEveryCompletedRow()
    {
        qputenv("KVWB_TEST_KILL_WORKER", "1:5");
        const auto r = runKvwb(
            replay({"--tiers", "exact", "--workers", "2", "--routing", "round-robin"}, m_dir / "killed.csv"));
        qunsetenv("KVWB_TEST_KILL_WORKER");
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("worker 1 was killed after 5 of 18 requests; its 13 others are in the ledger "
                                "as not served"),
                 r.err.constData());
        const auto rows = ledger(m_dir / "killed.csv");
        QCOMPARE(int(rows.size()), 36);
        int served0 = 0, served1 = 0, lost = 0;
        for (const auto &row : rows) {
            QCOMPARE(row.worker, int(row.requestId % 2));
            if (row.notServed == core::NotServed::No)
                ++(row.worker == 0 ? served0 : served1);
            else {
                QCOMPARE(row.notServed, core::NotServed::Worker);
                QCOMPARE(row.worker, 1);
                QCOMPARE(row.tokensComputed, 0);
                ++lost;
            }
        }
        QCOMPARE(served0, 18);
        QCOMPARE(served1, 5);
        QCOMPARE(lost, 13);
        const auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["total"].toObject()["requests"].toInt(), 23);
        QCOMPARE(j["total"].toObject()["not_served"].toInt(), 13);
    }

    // Killing the coordinator takes its workers with it (they would go on computing and writing to a
    // shared store), its scratch folder of shards is private, and the next fleet removes a dead
    // coordinator's scratch folder.
    void workersDieWithTheirCoordinator()
    {
        const fs::path tmpRoot = m_dir / "scratch";
        fs::create_directories(tmpRoot);
        QProcess gone;
        gone.start("true", {});
        QVERIFY(gone.waitForStarted());
        const qint64 deadPid = gone.processId();
        QVERIFY(gone.waitForFinished());
        const fs::path stale = tmpRoot / fmt::format("kvwb-fleet-{}-abcdef", deadPid);
        fs::create_directories(stale);
        test::writeFile(stale / "shard-0.jsonl", "every tenant's prompts");

        QProcess coordinator;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert("TMPDIR", q(tmpRoot));
        coordinator.setProcessEnvironment(env);
        coordinator.start(QString::fromStdString(test::kvwbBinary().string()),
                          replay({"--tiers", "exact", "--workers", "2", "--clock", "--speed", "0.001"},
                                 m_dir / "never.csv"));
        QVERIFY(coordinator.waitForStarted());
        const pid_t pid = pid_t(coordinator.processId());
        std::vector<pid_t> workers;
        for (int i = 0; i < 300 && workers.size() < 2; ++i) {
            QThread::msleep(100);
            workers = childrenOf(pid);
        }
        QCOMPARE(int(workers.size()), 2);
        QVERIFY(!fs::exists(stale));
        fs::path scratch;
        for (const auto &e : fs::directory_iterator(tmpRoot))
            if (e.path().filename().string().rfind(fmt::format("kvwb-fleet-{}-", pid), 0) == 0)
                scratch = e.path();
        QVERIFY(!scratch.empty());
        QCOMPARE(int(fs::status(scratch).permissions() & fs::perms::all), 0700);

        ::kill(pid, SIGKILL);
        coordinator.waitForFinished();
        bool anyAlive = true;
        for (int i = 0; i < 100 && anyAlive; ++i) {
            anyAlive = false;
            for (pid_t w : workers)
                anyAlive = anyAlive || alive(w);
            if (anyAlive)
                QThread::msleep(100);
        }
        QVERIFY2(!anyAlive, "a worker outlived its coordinator");
        QVERIFY(fs::exists(scratch)); // a kill -9 leaves it; the next fleet removes it
        QProcess next;
        next.setProcessEnvironment(env);
        next.start(QString::fromStdString(test::kvwbBinary().string()),
                   replay({"--tiers", "exact", "--workers", "2"}, m_dir / "next.csv"));
        QVERIFY(next.waitForFinished(300000));
        QCOMPARE(next.exitCode(), 0);
        QVERIFY(!fs::exists(scratch));
    }

    void aStoreThatIsDownCostsHitsNotRequests()
    {
        // nothing listens: every request computed, every row marked
        test::RedisServer server;
        QVERIFY2(server.start(), qPrintable(server.error()));
        const QString url = QString::fromStdString(server.url());
        server.kill();
        auto r = runKvwb(replay({"--tiers", "exact,prefix", "--store", url, "--store-timeout-ms", "100"},
                                m_dir / "down.csv"));
        QVERIFY2(r.exitCode == 0, r.err.constData());
        auto rows = ledger(m_dir / "down.csv");
        QCOMPARE(int(rows.size()), 36);
        for (const auto &row : rows) {
            QCOMPARE(row.store, core::StoreNote::Unavailable);
            QCOMPARE(row.answeredBy, core::TierKind::None);
        }
        QVERIFY(QJsonDocument::fromJson(r.out).object()["store"].toObject()["unavailable"].toInt() >= 36);

        // killed mid-replay and restarted: the replay goes on, rows during the outage are marked
        QVERIFY(server.start());
        QProcess proc;
        proc.start(q(test::kvwbBinary()), replay({"--tiers", "exact,prefix", "--store", url,
                                                  "--store-timeout-ms", "100", "--clock", "--speed", "0.05"},
                                                 m_dir / "mid.csv"));
        QVERIFY(proc.waitForStarted());
        // the workload's 350 ms at speed 0.05 take 7 s after the model loads (well under a second):
        // the server is down from about 3 s to 4.5 s, in the middle of the requests
        QThread::msleep(3000);
        server.kill();
        QThread::msleep(1500);
        QVERIFY(server.start());
        QVERIFY(proc.waitForFinished(120000));
        QVERIFY2(proc.exitCode() == 0, proc.readAllStandardError().constData());
        rows = ledger(m_dir / "mid.csv");
        QCOMPARE(int(rows.size()), 36); // nothing lost from the ledger
        const auto outcomes = countStoreNotes(rows);
        QVERIFY2(outcomes.count("unavailable") && outcomes.at("unavailable") > 0,
                 "no request saw the outage");
        QVERIFY(outcomes.count("hit") + outcomes.count("miss") > 0);
        QCOMPARE(rows.back().store == core::StoreNote::Unavailable,
                 false); // the store came back before the end
    }

    void badFleetOptions()
    {
        auto r = runKvwb(replay({"--workers", "2", "--routing", "random"}, m_dir / "x.csv"));
        QVERIFY2(r.exitCode == 2, r.err.constData());
        QVERIFY(r.err.contains("--routing"));
        r = runKvwb(replay({"--routing", "round-robin"}, m_dir / "x.csv"));
        QCOMPARE(r.exitCode, 2);
        r = runKvwb(replay({"--workers", "2", "--store", "memory"}, m_dir / "x.csv"));
        QCOMPARE(r.exitCode, 2);
        r = runKvwb(replay({"--store", "redis://nowhere"}, m_dir / "x.csv"));
        QVERIFY(r.exitCode != 0);
        QVERIFY(r.err.contains("redis://nowhere"));
    }
};

QTEST_GUILESS_MAIN(TestFleetCli)
#include "tst_fleet_cli.moc"
