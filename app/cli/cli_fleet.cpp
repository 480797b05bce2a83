#include "app/cli/cli_fleet.h"

#include "app/cli/cli_util.h"
#include "app/cli/engine_options.h"
#include "app/jobs/replay_job.h"
#include "core/cache/shared_store.h"
#include "core/cache/store_payload.h"
#include "core/util/atomic_file.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/util/text_util.h"
#include "core/workload/corpus.h"
#include "core/workload/routing.h"
#include "core/workload/workload.h"
#include "gpu/model/model.h"
#include "gpu/replay/replay.h"

#include <QDir>
#include <QElapsedTimer>
#include <QProcess>
#include <QProcessEnvironment>
#include <QTemporaryDir>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace kvwb::app {

using namespace kvwb::app::cli;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The replay arguments without the fleet's own options and the ones each worker gets its own of.
QStringList workerArgs(const QStringList &args)
{
    static const QStringList withValue = {"--workers", "--routing", "--route-drain", "--workload",
                                          "--ledger",  "--limit",   "--save-ledger"};
    static const QStringList flags = {"--json", "--store-flush"};
    QStringList out;
    for (int i = 0; i < args.size(); ++i) {
        const QString &a = args[i];
        const QString name = a.section('=', 0, 0);
        if (withValue.contains(name)) {
            if (!a.contains('='))
                ++i; // its value
            continue;
        }
        if (flags.contains(a))
            continue;
        out << a;
    }
    return out;
}

std::string readAll(const fs::path &path)
{
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// The rows a worker completed before it stopped (its --row-log): whole lines only, since a kill may
// cut the last one. A log that does not parse gives no rows (the requests count as not served).
std::vector<core::LedgerRow> completedRows(const fs::path &rowLog, std::string &problem)
{
    std::string csv = readAll(rowLog);
    csv.erase(csv.rfind('\n') == std::string::npos ? 0 : csv.rfind('\n') + 1);
    if (csv.empty())
        return {};
    try {
        return core::ledgerFromCsv(csv, rowLog.filename().string());
    } catch (const core::Error &e) {
        problem = e.what();
        return {};
    }
}

constexpr const char *kScratchPrefix = "kvwb-fleet-";

// Scratch folders ($TMPDIR/kvwb-fleet-PID-XXXXXX, 0700) of coordinators that no longer run (killed
// before they could remove them: they hold every tenant's prompts) are removed.
void removeStaleScratch(const fs::path &tmpRoot)
{
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(tmpRoot, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(kScratchPrefix, 0) != 0 || !e.is_directory(ec) || e.is_symlink(ec))
            continue;
        const long pid = std::strtol(name.c_str() + std::strlen(kScratchPrefix), nullptr, 10);
        struct stat st
        {
        };
        if (pid <= 0 || ::lstat(e.path().c_str(), &st) != 0 || st.st_uid != ::getuid())
            continue;
        if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH)
            continue; // still running (or not ours to judge)
        fs::remove_all(e.path(), ec);
    }
}

// "exact,semantic,prefix" ("none" for none).
std::string tierList(const std::vector<core::TierKind> &tiers)
{
    std::string out;
    for (const auto t : tiers)
        out += std::string(out.empty() ? "" : ",") + core::tierKindName(t);
    return out.empty() ? "none" : out;
}

// A worker that failed: what it completed (its row log) is kept, the rest of its shard goes into the
// ledger as not served; its row of the per-worker table. Returns the failure's line.
std::string salvageWorker(int w, const QProcess &proc, const QByteArray &err, const fs::path &rowLog,
                          double wallS, const std::vector<core::WorkloadRequest> &shard,
                          const std::map<int64_t, const core::RouteDecision *> &decisionOf,
                          std::vector<core::LedgerRow> &rows, json &perWorker)
{
    const QString e = QString::fromUtf8(err).trimmed();
    std::string problem;
    auto mine = completedRows(rowLog, problem);
    std::set<int64_t> served;
    for (auto &row : mine) {
        const auto it = decisionOf.find(row.requestId);
        if (it == decisionOf.end())
            continue;
        row.worker = w;
        row.route = it->second->note;
        served.insert(row.requestId);
        rows.push_back(row);
    }
    int64_t lost = 0;
    for (const auto &q : shard) {
        if (served.count(q.id))
            continue;
        core::LedgerRow row = gpu::requestRow(q);
        row.worker = w;
        row.route = decisionOf.at(q.id)->note;
        row.notServed = core::NotServed::Worker;
        rows.push_back(row);
        ++lost;
    }
    const std::string how = proc.exitStatus() != QProcess::NormalExit
                                ? "was killed"
                                : fmt::format("failed (exit {})", proc.exitCode());
    const std::string last = e.section('\n', -1).toStdString();
    const std::string line =
        fmt::format("worker {} {} after {} of {} requests; its {} others are in the ledger as "
                    "not served{}{}\n",
                    w, how, served.size(), shard.size(), lost, last.empty() ? "" : ": " + last,
                    problem.empty() ? "" : " (" + problem + ")");
    perWorker.push_back({{"worker", w},
                         {"requests", int64_t(served.size())},
                         {"not_served", lost},
                         {"hits", 0},
                         {"failed", how},
                         {"wall_s", wallS}});
    return line;
}

// The fleet's summary as `--json` prints it: a single replay's, counted over all workers, plus
// "fleet" (per worker) and the store counters summed with the server's memory.
json fleetJson(const core::LedgerSummary &s, const json &settings, int workers, const char *routing,
               double wallS, const json &perWorker, core::SharedStore *store, json storeTotal,
               const json &tierStores, const std::vector<std::string> &warnings)
{
    json total = json::parse(core::ledgerSummaryJson(s));
    const json tiers = total["tiers"];
    total.erase("tiers");
    if (store) {
        const auto info = store->serverInfo();
        storeTotal["server"] = {{"used_bytes", info.usedBytes},           {"max_bytes", info.maxBytes},
                                {"eviction_policy", info.evictionPolicy}, {"evicted_keys", info.evictedKeys},
                                {"expired_keys", info.expiredKeys},       {"keys", info.keys}};
    }
    const json out = {
        {"settings", settings},
        {"requests", s.requests},
        {"cancelled", false},
        {"tiers", tiers},
        {"total", total},
        {"fleet", {{"workers", workers}, {"routing", routing}, {"wall_s", wallS}, {"per_worker", perWorker}}},
        {"store", store ? storeTotal : json()},
        {"tier_stores", tierStores},
        {"warnings", warnings}};
    return out;
}

// Worker w: this executable running `kvwb replay` with `args`, dying with this process.
// Test-only: KVWB_TEST_KILL_WORKER=W:N makes worker W kill itself after N rows.
std::unique_ptr<QProcess> startWorker(int w, const fs::path &self, const QStringList &args)
{
    auto proc = std::make_unique<QProcess>();
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("KVWB_FLEET_PARENT", QString::number(::getpid())); // workers die with this process
    env.remove("KVWB_TEST_DIE_AFTER_ROWS");
    if (const char *kill = std::getenv("KVWB_TEST_KILL_WORKER")) {
        const QStringList parts = QString(kill).split(':');
        if (parts.size() == 2 && parts[0].toInt() == w)
            env.insert("KVWB_TEST_DIE_AFTER_ROWS", parts[1]);
    }
    proc->setProcessEnvironment(env);
    proc->start(QString::fromStdString(self.string()), args);
    if (!proc->waitForStarted(30000))
        throw core::Error(core::ErrorCode::Io,
                          fmt::format("worker {} did not start: {}", w, proc->errorString().toStdString()));
    return proc;
}

// The shared store of a fleet (null without --store), opened and flushed when asked; a memory
// store lives in one process and cannot be a fleet's.
std::unique_ptr<core::SharedStore> openFleetStore(const core::ReplaySettings &replay)
{
    if (replay.store.empty())
        return nullptr;
    core::StoreOptions so;
    so.commandTimeoutMs = so.connectTimeoutMs = replay.storeTimeoutMs;
    if (!replay.storeKeyFile.empty())
        so.integrityKey = core::readStoreKeyFile(replay.storeKeyFile);
    auto store = core::openSharedStore(replay.store, so);
    if (replay.store == "memory")
        throw UsageError{"--store memory lives in one process: a fleet shares redis://HOST:PORT, or runs "
                         "without --store (each worker its own caches)"};
    if (replay.storeFlush)
        store->flush();
    return store;
}

// A finished worker's --json summary added to the fleet's: the first settings, its warnings (named
// by worker), its store counters and its tiers' bookkeeping, summed.
void addWorkerSummary(const json &j, int w, json &settings, std::vector<std::string> &warnings,
                      json &storeTotal, json &tierStores)
{
    if (settings.is_null())
        settings = j["settings"];
    for (const auto &x : j.value("warnings", json::array()))
        warnings.push_back(fmt::format("worker {}: {}", w, x.get<std::string>()));
    if (j.contains("store") && j["store"].is_object())
        for (const auto &[k, v] : j["store"].items())
            if (v.is_number())
                storeTotal[k] = storeTotal.value(k, 0.0) + v.get<double>();
    if (j.contains("tier_stores") && j["tier_stores"].is_object())
        for (const auto &[tier, counts] : j["tier_stores"].items())
            if (counts.is_object()) {
                json &sum = tierStores[tier];
                if (!sum.is_object())
                    sum = json::object();
                for (const auto &[k, v] : counts.items())
                    if (v.is_number())
                        sum[k] = sum.value(k, 0.0) + v.get<double>();
            }
}

// The fleet's summary as text: per worker, per tier, the totals and the store's counters.
void printFleetTables(const core::ReplaySettings &replay, const core::LedgerSummary &s, int workers,
                      const char *routing, const json &perWorker, double wallS, core::SharedStore *store,
                      const json &storeTotal)
{
    std::printf("%s: %lld requests over %d workers, routing %s, tiers %s\n\n", replay.workload.c_str(),
                (long long)s.requests, workers, routing, tierList(replay.tiers).c_str());
    std::printf("| worker | requests | hits | hit rate | TTFT p50 ms | TTFT p95 ms | wall s |\n");
    std::printf("|--:|--:|--:|--:|--:|--:|--:|\n");
    for (const auto &w : perWorker)
        std::printf("| %d | %lld | %lld | %.3f | %.2f | %.2f | %.1f |\n", w["worker"].get<int>(),
                    (long long)w["requests"].get<int64_t>(), (long long)w["hits"].get<int64_t>(),
                    w.value("hit_rate", 0.0), w.value("ttft_ms_p50", 0.0), w.value("ttft_ms_p95", 0.0),
                    w.value("wall_s", 0.0));
    std::printf(
        "\n| tier | requests | hits | false hits | tokens reused | tokens computed | TTFT p50 ms |\n");
    std::printf("|:--|--:|--:|--:|--:|--:|--:|\n");
    for (const auto &[kind, agg] : s.tiers)
        std::printf("| %s | %lld | %lld | %lld | %lld | %lld | %.2f |\n", core::tierKindName(kind),
                    (long long)agg.requests, (long long)agg.hits, (long long)agg.falseHits,
                    (long long)agg.tokensReused, (long long)agg.tokensComputed, agg.ttftMsP50);
    std::printf(
        "\nhit rate %.3f (tokens %.3f), false-hit rate %.3f, approximate hits %lld (never cached again), "
        "cost $%.6f vs $%.6f without caching, wall %.1f s\n",
        s.hitRate, s.tokenHitRate, s.falseHitRate, (long long)s.approximateHits, s.costUsd, s.costUsdNoCache,
        wallS);
    if (store)
        std::printf(
            "store %s: %.0f gets, %.0f hits, %.0f puts, %.0f refused, %.0f unavailable, %.1f MB sent, "
            "%.1f MB received, %.1f ms in round trips\n",
            store->describe().c_str(), storeTotal.value("gets", 0.0), storeTotal.value("hits", 0.0),
            storeTotal.value("puts", 0.0), storeTotal.value("refused", 0.0),
            storeTotal.value("unavailable", 0.0), storeTotal.value("bytes_sent", 0.0) / 1e6,
            storeTotal.value("bytes_received", 0.0) / 1e6, storeTotal.value("net_ms", 0.0));
}

// A worker process of the fleet: its ledger and row log in the scratch folder, its shard's size.
struct FleetWorker
{
    std::unique_ptr<QProcess> proc;
    fs::path ledger, rowLog;
    double wallS = 0;
    int requests = 0;
};

// Writes each shard to the scratch folder `dir` and starts a `replay` worker on it (`common`: the
// arguments every worker shares); an empty shard gets no process.
std::vector<FleetWorker> startFleet(const std::vector<std::vector<core::WorkloadRequest>> &shards,
                                    const fs::path &dir, const fs::path &self, const QStringList &common)
{
    const int workers = int(shards.size());
    std::vector<FleetWorker> fleet(static_cast<size_t>(workers));
    for (int w = 0; w < workers; ++w) {
        FleetWorker &wk = fleet[size_t(w)];
        wk.requests = int(shards[size_t(w)].size());
        if (shards[size_t(w)].empty())
            continue;
        const fs::path shard = dir / fmt::format("shard-{}.jsonl", w);
        core::writeWorkloadJsonl(shard, shards[size_t(w)]);
        wk.ledger = dir / fmt::format("ledger-{}.csv", w);
        wk.rowLog = dir / fmt::format("rows-{}.csv", w);
        QStringList a = {"replay"};
        a << common << "--workload" << QString::fromStdString(shard.string()) << "--ledger"
          << QString::fromStdString(wk.ledger.string()) << "--row-log"
          << QString::fromStdString(wk.rowLog.string()) << "--json";
        wk.proc = startWorker(w, self, a);
    }
    return fleet;
}

// What the fleet's workers sent back, merged.
struct FleetResults
{
    std::vector<core::LedgerRow> rows;
    json perWorker = json::array();
    json storeTotal = json::object();
    json tierStores = json::object(); // each tier's bookkeeping, summed over the workers
    json settings;
    std::vector<std::string> warnings;
    std::string failed; // a line per worker that failed
};

// Waits for each worker in turn (its wall time from `clock`) and merges its ledger rows, with their
// worker and route, and its summary. A worker that failed keeps what it completed; the rest of its
// shard is marked not served, and the failure goes to `failed`.
FleetResults collectFleet(std::vector<FleetWorker> &fleet,
                          const std::vector<std::vector<core::WorkloadRequest>> &shards,
                          const std::map<int64_t, const core::RouteDecision *> &decisionOf,
                          const QElapsedTimer &clock)
{
    FleetResults res;
    const int workers = int(fleet.size());
    for (int w = 0; w < workers; ++w) {
        FleetWorker &wk = fleet[size_t(w)];
        if (!wk.proc) {
            res.perWorker.push_back({{"worker", w}, {"requests", 0}, {"hits", 0}});
            continue;
        }
        wk.proc->waitForFinished(-1);
        wk.wallS = clock.elapsed() / 1000.0;
        const QByteArray out = wk.proc->readAllStandardOutput();
        const QByteArray err = wk.proc->readAllStandardError();
        if (wk.proc->exitStatus() != QProcess::NormalExit || wk.proc->exitCode() != 0) {
            // Keep what it completed; the rest of its shard is marked not served.
            res.failed += salvageWorker(w, *wk.proc, err, wk.rowLog, wk.wallS, shards[size_t(w)], decisionOf,
                                        res.rows, res.perWorker);
            continue;
        }
        json j;
        try {
            j = json::parse(out.toStdString());
        } catch (const json::exception &) {
            res.failed += fmt::format("worker {}: its summary is not JSON\n", w);
            continue;
        }
        addWorkerSummary(j, w, res.settings, res.warnings, res.storeTotal, res.tierStores);
        auto mine = core::ledgerFromCsv(readAll(wk.ledger), wk.ledger.string());
        int64_t hits = 0;
        std::vector<double> ttft;
        for (auto &row : mine) {
            const auto *d = decisionOf.at(row.requestId);
            row.worker = d->worker;
            row.route = d->note;
            hits += row.answeredBy != core::TierKind::None;
            ttft.push_back(row.ttftMs);
        }
        res.perWorker.push_back({{"worker", w},
                                 {"requests", int64_t(mine.size())},
                                 {"hits", hits},
                                 {"hit_rate", mine.empty() ? 0.0 : double(hits) / double(mine.size())},
                                 {"ttft_ms_p50", core::percentile(ttft, 50)},
                                 {"ttft_ms_p95", core::percentile(ttft, 95)},
                                 {"wall_s", wk.wallS},
                                 {"store", j.contains("store") ? j["store"] : json()}});
        res.rows.insert(res.rows.end(), mine.begin(), mine.end());
    }
    return res;
}

// Prints each failed worker's line as an Io error; the exit status: 1 when any worker failed.
int reportFailures(const std::string &failed)
{
    std::istringstream lines(failed);
    for (std::string line; std::getline(lines, line);)
        std::fprintf(stderr, "kvwb replay: error [%s]: %s\n", core::errorCodeName(core::ErrorCode::Io),
                     line.c_str());
    return failed.empty() ? 0 : 1;
}

} // namespace

int runFleetReplay(const QStringList &args, const QCommandLineParser &p, const core::ReplaySettings &replay)
{
    const core::Prices prices = jobs::replayOptions(replay).prices; // a preset resolved before workers start
    const int workers = intOption(p, "workers", 1, 1, 64);
    const auto policy = core::parseRoutingPolicy(str(p.value("routing")));
    if (!policy)
        throw UsageError{"--routing expects round-robin, tenant-affine, prefix-hash or least-loaded, got '" +
                         str(p.value("routing")) + "'"};
    if (p.isSet("save-ledger"))
        throw UsageError{"--save-ledger is not available with --workers (one process writes an experiment "
                         "file); write the merged ledger with --ledger"};
    if (p.isSet("save-knowledge"))
        throw UsageError{"--save-knowledge is not available with --workers"};
    if (p.isSet("ledger"))
        outputFileOption(p, "ledger");
    const bool asJson = p.isSet("json");
    core::RoutingOptions ro;
    ro.workers = workers;
    ro.policy = *policy;
    ro.drainUnitsPerSecond = doubleOption(p, "route-drain", 2000, 1e-9, 1e12);

    const std::unique_ptr<core::SharedStore> store = openFleetStore(replay);

    const auto read = jobs::readReplayRequests(replay.workload, replay.limit);
    for (const auto &w : read.warnings.messages())
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    const auto &requests = read.requests;
    const auto decisions = core::routeRequests(requests, ro);
    std::map<int64_t, const core::RouteDecision *> decisionOf;
    std::vector<std::vector<core::WorkloadRequest>> shards(static_cast<size_t>(workers));
    for (size_t i = 0; i < requests.size(); ++i) {
        shards[size_t(decisions[i].worker)].push_back(requests[i]);
        decisionOf[requests[i].id] = &decisions[i];
    }

    removeStaleScratch(str(QDir::tempPath()));
    QTemporaryDir tmp(QDir::tempPath() + QString("/%1%2-XXXXXX").arg(kScratchPrefix).arg(::getpid()));
    if (!tmp.isValid())
        throw core::Error(core::ErrorCode::Io, "cannot create a scratch folder for the fleet's shards");
    const fs::path dir = str(tmp.path());
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (ec)
        throw core::Error(core::ErrorCode::Io, "cannot start workers: /proc/self/exe is unreadable");
    const QStringList common = workerArgs(args);

    QElapsedTimer clock;
    clock.start();
    std::vector<FleetWorker> fleet = startFleet(shards, dir, self, common);
    if (!asJson)
        std::fprintf(stderr, "%d workers, routing %s, %zu requests\n", workers,
                     core::routingPolicyName(*policy), requests.size());

    FleetResults res = collectFleet(fleet, shards, decisionOf, clock);
    // A worker that failed loses nobody else's rows: the ledger and summary are written, then the
    // failure is the exit status.
    std::stable_sort(
        res.rows.begin(), res.rows.end(), [](const core::LedgerRow &a, const core::LedgerRow &b) {
            return a.arrivalMs != b.arrivalMs ? a.arrivalMs < b.arrivalMs : a.requestId < b.requestId;
        });
    if (p.isSet("ledger"))
        core::writeLedgerCsv(str(p.value("ledger")), res.rows);
    const core::LedgerSummary s = core::summarize(res.rows, prices);
    const double wallS = clock.elapsed() / 1000.0;
    if (!res.settings.is_object())
        res.settings = json::object();
    res.settings["workload"] = str(p.value("workload"));
    res.settings["workers"] = workers;
    res.settings["routing"] = core::routingPolicyName(*policy);
    if (store)
        res.storeTotal["url"] = store->describe();

    if (asJson) {
        const json out = fleetJson(s, res.settings, workers, core::routingPolicyName(*policy), wallS,
                                   res.perWorker, store.get(), res.storeTotal, res.tierStores, res.warnings);
        std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
        return reportFailures(res.failed);
    }
    printFleetTables(replay, s, workers, core::routingPolicyName(*policy), res.perWorker, wallS, store.get(),
                     res.storeTotal);
    if (s.notServed > 0)
        std::printf("%s\n", notServedLine(s).c_str());
    for (const auto &w : res.warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    return reportFailures(res.failed);
}

int cmdBenchStore(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"store", "The store: redis://HOST:PORT[/DB] or memory.", "URL"});
    p.addOption({"model", "The model whose KV travels (default: the demo's model B).", "PATH"});
    p.addOption({"lengths", "Prompt lengths in tokens (default 16,64,256).", "LIST", "16,64,256"});
    p.addOption({"repeats", "Runs per length; medians are printed (default 5).", "N", "5"});
    p.addOption({"dtype", "What the KV travels as: f32 (default), bf16 or f16.", "TYPE", "f32"});
    p.addOption({"json", "Print the table as JSON."});
    addEngineOptions(p);
    parse(p, args,
          "What a KV cache's trip through a shared store costs (serialise, send, fetch, deserialise, place) "
          "against recomputing it (prefill), per prompt length.");
    if (!p.isSet("store"))
        throw UsageError{"--store is required"};
    const int repeats = intOption(p, "repeats", 5, 1, 1000);
    const auto floatType = core::parseFloatType(str(p.value("dtype")));
    if (!floatType)
        throw UsageError{"--dtype expects f32, bf16 or f16, got '" + str(p.value("dtype")) + "'"};
    const core::DType dtype = core::toDType(*floatType);
    std::vector<int> lengths;
    for (const QString &x : p.value("lengths").split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const int n = x.trimmed().toInt(&ok);
        if (!ok || n < 1 || n > 1 << 20)
            throw UsageError{"--lengths expects positive token counts, got '" + str(x) + "'"};
        lengths.push_back(n);
    }
    const fs::path modelPath =
        p.isSet("model") ? fs::path(str(p.value("model"))) : cli::demoProjectDir() / "models" / "b";
    auto store = core::openSharedStore(str(p.value("store")));
    auto model = gpu::Model::load(modelPath, loadOptions(p));
    const core::TenantScope scope("bench", model->checkpoint().fingerprint());
    json rows = json::array();
    if (!p.isSet("json"))
        std::printf(
            "| tokens | KV MB | prefill ms | to host ms | serialise ms | send ms | fetch ms | check + "
            "deserialise ms | place ms | via store ms | store / prefill | MB/s over the store |\n"
            "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for (const int n : lengths)
        if (n >= model->contextLimit())
            throw UsageError{fmt::format("--lengths: {} tokens do not fit the model's context of {}", n,
                                         model->contextLimit())};
    for (const int n : lengths) {
        std::vector<int> ids(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i)
            ids[size_t(i)] = 3 + (i * 7919) % std::max(1, model->config().vocabSize - 3);
        std::vector<double> prefill, toHost, ser, send, fetch, deser, place;
        double mb = 0;
        for (int rep = 0; rep < repeats; ++rep) {
            auto t = core::Clock::now();
            gpu::KvCache cache = model->newCache();
            model->forward(ids, cache);
            prefill.push_back(core::msSince(t));
            const int layers = cache.numLayers(), heads = cache.numKvHeads(), hd = cache.headDim();
            t = core::Clock::now();
            std::vector<core::HeadMajorKv> host(static_cast<size_t>(layers));
            for (int l = 0; l < layers; ++l)
                host[size_t(l)] = cache.layer(l, core::KeyForm::PostRope);
            toHost.push_back(core::msSince(t));
            t = core::Clock::now();
            std::string body;
            body.reserve(size_t(layers) * 2 * host[0].keys.size() * size_t(core::dtypeSize(dtype)));
            for (const auto &h : host) {
                core::appendKvBody(body, h.keys.data(), h.keys.size(), dtype);
                core::appendKvBody(body, h.values.data(), h.values.size(), dtype);
            }
            const std::string env =
                core::encodePayload(core::kvPayloadHeader(scope, "prefix", layers, heads, n, hd,
                                                          core::KeyForm::PostRope, 0, dtype),
                                    body);
            ser.push_back(core::msSince(t));
            mb = double(env.size()) / 1e6;
            const std::string key = "bench-" + std::to_string(n);
            t = core::Clock::now();
            if (store->put(scope, "prefix", key, env, 60000, 0) != core::StoreOutcome::Hit)
                throw core::Error(core::ErrorCode::Io,
                                  store->describe() + ": the store did not take the payload");
            send.push_back(core::msSince(t));
            t = core::Clock::now();
            const core::StoreGet g = store->get(scope, "prefix", key, 0);
            fetch.push_back(core::msSince(t)); // includes the envelope's checks (CRC-32, header)
            if (g.outcome != core::StoreOutcome::Hit)
                throw core::Error(core::ErrorCode::Io,
                                  store->describe() + ": the payload did not come back (" +
                                      core::storeOutcomeName(g.outcome) + " " + g.reason + ")");
            t = core::Clock::now();
            std::vector<core::HeadMajorKv> back(static_cast<size_t>(layers));
            const size_t per = size_t(heads) * size_t(n) * size_t(hd);
            std::vector<float> all(size_t(layers) * 2 * per);
            core::unpackKvBody(g.payload->body, g.payload->header.dtype, all.data(), all.size());
            const float *src = all.data();
            for (int l = 0; l < layers; ++l) {
                back[size_t(l)].keys.assign(src, src + per);
                back[size_t(l)].values.assign(src + per, src + 2 * per);
                src += 2 * per;
            }
            deser.push_back(core::msSince(t));
            t = core::Clock::now();
            gpu::KvCache fresh = model->newCache();
            fresh.assign(ids, back, core::KeyForm::PostRope);
            place.push_back(core::msSince(t));
            store->erase(scope, "prefix", key);
        }
        const double m[] = {core::percentile(prefill, 50), core::percentile(toHost, 50),
                            core::percentile(ser, 50),     core::percentile(send, 50),
                            core::percentile(fetch, 50),   core::percentile(deser, 50),
                            core::percentile(place, 50)};
        // what a worker that finds the KV in the store pays instead of the prefill: fetch, check,
        // deserialise, place (the writer paid to-host + serialise + send once)
        const double via = m[4] + m[5] + m[6];
        rows.push_back({{"tokens", n},
                        {"kv_mb", mb},
                        {"prefill_ms", m[0]},
                        {"to_host_ms", m[1]},
                        {"serialise_ms", m[2]},
                        {"send_ms", m[3]},
                        {"fetch_ms", m[4]},
                        {"deserialise_ms", m[5]},
                        {"place_ms", m[6]},
                        {"via_store_ms", via},
                        {"ratio", via / std::max(m[0], 1e-9)},
                        {"mb_per_s", mb / std::max(m[4], 1e-9) * 1000.0}});
        if (!p.isSet("json"))
            std::printf(
                "| %d | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f |\n", n,
                mb, m[0], m[1], m[2], m[3], m[4], m[5], m[6], via, via / std::max(m[0], 1e-9),
                mb / std::max(m[4], 1e-9) * 1000.0);
    }
    if (p.isSet("json"))
        std::printf("%s\n",
                    json({{"store", store->describe()}, {"model", modelPath.string()}, {"rows", rows}})
                        .dump(2)
                        .c_str());
    else
        std::printf(
            "\nvia store = fetch (incl. CRC-32 and header checks) + deserialise + place; medians of %d; %s\n",
            repeats, store->describe().c_str());
    return 0;
}

int cmdSummarise(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption(
        {"workload", "A full-history conversation workload (conversation and round fields).", "FULL.jsonl"});
    p.addOption({"model", "The model that writes the summaries.", "PATH"});
    p.addOption({"keep", "Recent rounds kept verbatim (default 1).", "N", "1"});
    p.addOption({"max-tokens", "Tokens a summary may take (default 32).", "N", "32"});
    p.addOption({"out", "The workload with summarised history.", "OUT.jsonl"});
    addForceOption(p);
    p.addOption({"json", "Print the cost as JSON."});
    addEngineOptions(p);
    parse(p, args,
          "Rewrite a full-history conversation workload with the rounds older than the last N replaced by a "
          "summary the model writes (the summary history policy, model-written).");
    if (!p.isSet("workload") || !p.isSet("model") || !p.isSet("out"))
        throw UsageError{"--workload, --model and --out are required"};
    const int keep = intOption(p, "keep", 1, 0, 1 << 20);
    const int maxTokens = intOption(p, "max-tokens", 32, 1, 4096);
    const std::string in = str(p.value("workload"));
    outputFileOption(p, "out");
    const auto read = core::readWorkloadJsonl(in);
    if (!read.warnings.empty())
        std::fprintf(stderr, "skipped %zu malformed workload lines:\n%s", read.warnings.total(),
                     read.warnings.summary().c_str());
    std::vector<core::WorkloadRequest> requests = read.requests;

    // Each conversation's rounds in order; every round's prompt must be its predecessor's text +
    // the predecessor's exchange + its own question (the full-history rendering).
    std::map<std::string, std::vector<size_t>> byConversation;
    for (size_t i = 0; i < requests.size(); ++i) {
        const auto &r = requests[i];
        if (r.conversation.empty() || r.round < 0)
            throw core::Error(
                core::ErrorCode::Format,
                fmt::format("{}: request {} has no conversation and round (write the workload with "
                            "kvwb workload multiturn or sharegpt)",
                            in, r.id));
        byConversation[r.conversation].push_back(i);
    }
    auto model = gpu::Model::load(str(p.value("model")), loadOptions(p));
    auto tokenizer = loadModelTokenizer(*model);
    int64_t summaries = 0, summaryTokens = 0, promptTokens = 0;
    double summaryMs = 0;
    for (auto &[conv, idx] : byConversation) {
        std::stable_sort(idx.begin(), idx.end(),
                         [&](size_t a, size_t b) { return requests[a].round < requests[b].round; });
        // before[k]: round k's prompt before its question (system prompt + history)
        std::vector<std::string> before;
        for (size_t k = 0; k < idx.size(); ++k) {
            const auto &r = requests[idx[k]];
            if (r.round != int(k))
                throw core::Error(core::ErrorCode::Format,
                                  fmt::format("{}: conversation {} skips round {}", in, conv, k));
            const auto head = core::promptHead(r.prompt, r.question);
            if (!head)
                throw core::Error(
                    core::ErrorCode::Format,
                    fmt::format("{}: request {}: the prompt does not end with its question", in, r.id));
            if (k > 0 && head->rfind(before[k - 1], 0) != 0)
                throw core::Error(
                    core::ErrorCode::Format,
                    fmt::format("{}: request {} (conversation {}, round {}) does not carry the previous "
                                "round's prompt: not a full-history workload",
                                in, r.id, conv, k));
            before.push_back(*head);
        }
        // rounds[j]: the exchange of round j as the history carries it
        std::vector<std::string> rounds;
        for (size_t k = 1; k < before.size(); ++k)
            rounds.push_back(before[k].substr(before[k - 1].size()));
        const std::string system = before.empty() ? std::string() : before[0];
        std::map<size_t, std::string> summaryOf; // older rounds summarised -> summary text
        for (size_t k = 0; k < idx.size(); ++k) {
            auto &r = requests[idx[k]];
            const size_t older = k > size_t(keep) ? k - size_t(keep) : 0;
            if (older == 0)
                continue; // nothing to summarise yet: the full history is the policy's
            auto it = summaryOf.find(older);
            if (it == summaryOf.end()) {
                // the previous summary (if any) and the round that just left the window, summarised again
                std::string text = older > 1 ? "Earlier: " + summaryOf.at(older - 1) + "\n" : std::string();
                text += rounds[older - 1];
                const auto ids = tokenizer->encode(text + "Summary of the conversation so far:", true);
                gpu::GenerateOptions go;
                go.maxTokens = maxTokens;
                go.stopTokens = tokenizer->encode("\n", false);
                const auto t = core::Clock::now();
                const auto g = model->generate(ids, go);
                summaryMs += core::msSince(t);
                ++summaries;
                summaryTokens += g.stats.generatedTokens;
                promptTokens += g.stats.promptTokens;
                std::string s = tokenizer->decode(g.outputIds, true);
                // a workload is UTF-8 text: bytes of a split or invalid sequence become U+FFFD
                for (auto bad = core::text::firstInvalidUtf8(s); bad; bad = core::text::firstInvalidUtf8(s))
                    s.replace(*bad, 1, "\xEF\xBF\xBD");
                while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
                    s.pop_back();
                while (!s.empty() && s.front() == ' ')
                    s.erase(s.begin());
                it = summaryOf.emplace(older, s).first;
            }
            std::string kept;
            for (size_t j = older; j < k; ++j)
                kept += rounds[j];
            r.prompt = system + "Summary of the earlier conversation (written by the model): " + it->second +
                       "\n" + kept + core::promptFor(r.question);
        }
    }
    core::writeWorkloadJsonl(str(p.value("out")), requests);
    const json cost = {{"workload", in},
                       {"out", str(p.value("out"))},
                       {"policy", fmt::format("summary:{} (model-written)", keep)},
                       {"conversations", byConversation.size()},
                       {"summaries", summaries},
                       {"summary_prompt_tokens", promptTokens},
                       {"summary_tokens", summaryTokens},
                       {"summary_ms", summaryMs}};
    if (p.isSet("json"))
        std::printf("%s\n", cost.dump(2).c_str());
    else
        std::printf(
            "wrote %s: %zu requests; %lld summaries of %zu conversations: %lld prompt tokens read, %lld "
            "summary tokens generated, %.1f ms\n",
            str(p.value("out")).c_str(), requests.size(), (long long)summaries, byConversation.size(),
            (long long)promptTokens, (long long)summaryTokens, summaryMs);
    return 0;
}

} // namespace kvwb::app
