#include "app/cli/cli_replay.h"

#include "app/cli/cli_fleet.h"
#include "app/cli/cli_settings.h"
#include "app/cli/engine_options.h"
#include "app/jobs/replay_job.h"
#include "core/cache/prefix_tree.h"
#include "core/cache/semantic_tier.h"
#include "core/cache/shared_store.h"
#include "core/ledger/prices.h"
#include "core/ledger/replay_ledger.h"
#include "core/model/checkpoint.h"
#include "core/settings/replay_settings.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/workload/workload.h"
#include "gpu/model/device.h"
#include "gpu/replay/replay.h"
#include "gpu/transfer/transfer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <sys/prctl.h>
#include <unistd.h>

namespace kvwb::app {

using namespace kvwb::app::cli;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// What each tier held at the end and what its limits removed (ReplayResult::tierStats).
json tierStoresJson(const std::map<core::TierKind, core::StoreStats> &stats)
{
    json out = json::object();
    for (const auto &[kind, st] : stats)
        out[core::tierKindName(kind)] = {
            {"entries", st.entries},         {"bytes", st.bytes},
            {"inserts", st.inserts},         {"evictions", st.evictions},
            {"expirations", st.expirations}, {"invalidations", st.invalidations}};
    return out;
}

// The replay settings' options (core::replayFlags), with the subcommand's own where --help has
// always listed them: the fleet's after the store's, --force after --ledger, --json last.
void addReplayOptions(QCommandLineParser &p)
{
    addSettingOptions<core::ReplaySettings>(p, core::replayFlags(), [&](const std::string &name) {
        if (name == "store-kv-dtype") {
            // A fleet worker's completed rows, one CSV line each as it completes (the coordinator
            // reads them when the worker dies); set by the coordinator, not by users.
            QCommandLineOption rowLog("row-log", "Fleet worker: append each completed ledger row here.",
                                      "FILE");
            rowLog.setFlags(QCommandLineOption::HiddenFromHelp);
            p.addOption(rowLog);
            p.addOption({"workers",
                         "Run the replay as a fleet of N worker processes (docs/fleet.md); with --store they "
                         "share one store, without it each keeps its own caches.",
                         "N"});
            p.addOption({"routing",
                         "Fleet routing: round-robin (default), tenant-affine, prefix-hash or least-loaded.",
                         "POLICY", "round-robin"});
            p.addOption({"route-drain",
                         "least-loaded routing: work units a worker drains per second (default 2000).",
                         "UNITS", "2000"});
        } else if (name == "ledger") {
            addForceOption(p);
        }
    });
    p.addOption({"json", "Print the summary as JSON."});
}

// Model a and b: the flags, else the experiment's recorded paths.
struct ReplayModelFiles
{
    std::unique_ptr<gpu::Model> a, b;
    std::unique_ptr<core::Tokenizer> tokenizerA, tokenizerB;
};

ReplayModelFiles loadReplayModels(const core::ReplaySettings &s, bool needB, const gpu::LoadOptions &lo)
{
    std::optional<core::ExperimentReader> exp;
    if (!s.experiment.empty())
        exp.emplace(core::ExperimentReader::open(s.experiment));
    auto pathOf = [&](core::ModelRole role) -> std::optional<fs::path> {
        const std::string &flag = role == core::ModelRole::A ? s.modelA : s.modelB;
        if (!flag.empty())
            return fs::path(flag);
        if (exp)
            return fs::path(exp->model(role).sourcePath);
        return std::nullopt;
    };
    const auto pathA = pathOf(core::ModelRole::A);
    if (!pathA)
        throw UsageError{"--model-a (or --experiment) is required"};
    std::optional<fs::path> pathB;
    if (needB && !(pathB = pathOf(core::ModelRole::B)))
        throw UsageError{"the workload sends requests to model b: give --model-b (or --experiment)"};
    exp.reset(); // closed: the ledger may be stored in it after the replay
    ReplayModelFiles m;
    m.a = gpu::Model::load(*pathA, lo);
    if (pathB)
        m.b = gpu::Model::load(*pathB, lo);
    m.tokenizerA = loadModelTokenizer(*m.a);
    if (m.b)
        m.tokenizerB = loadModelTokenizer(*m.b);
    return m;
}

void printWarnings(const std::vector<std::string> &warnings)
{
    for (const auto &w : warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
}

// The summary as `--json` prints it.
json replayJson(const jobs::PreparedReplay &job, const gpu::ReplayResult &r, const std::string &settings)
{
    const auto &s = r.summary;
    json total = json::parse(core::ledgerSummaryJson(s));
    const json tiers = total["tiers"];
    total.erase("tiers");
    json sweep = json::array();
    for (const auto &row : r.thresholdSweep.rows)
        sweep.push_back({{"threshold", row[0]}, {"hit_rate", row[1]}, {"false_hit_rate", row[2]}});
    return {{"settings", json::parse(settings)},
            {"requests", s.requests},
            {"cancelled", r.cancelled},
            {"tiers", tiers},
            {"total", total},
            {"overhead_ms_p50", core::percentile(r.overheadMs, 50)},
            {"overhead_ms_p99", core::percentile(r.overheadMs, 99)},
            {"threshold_sweep", sweep},
            {"knowledge", job.knowledge ? json::parse(jobs::knowledgeCostsJson(*job.knowledge)) : json()},
            {"store", job.store ? json::parse(jobs::storeStatsJson(*job.store)) : json()},
            {"tier_stores", tierStoresJson(r.tierStats)},
            {"warnings", r.warnings}};
}

// The summary as text: a table per tier, the rates and cost, the store's and the knowledge tier's.
void printReplaySummary(const jobs::PreparedReplay &job, const gpu::ReplayResult &r)
{
    const auto &s = r.summary;
    std::string tiers;
    for (const auto t : job.settings.tiers)
        tiers += std::string(tiers.empty() ? "" : ",") + core::tierKindName(t);
    std::printf("%s: %lld requests, tiers %s%s\n\n", job.settings.workload.c_str(), (long long)s.requests,
                tiers.empty() ? "none" : tiers.c_str(), r.cancelled ? " (cancelled)" : "");
    std::printf("| tier | requests | hits | false hits | tokens reused | tokens computed | TTFT p50 ms | "
                "TTFT p95 ms |\n");
    std::printf("|:--|--:|--:|--:|--:|--:|--:|--:|\n");
    for (const auto &[kind, agg] : s.tiers)
        std::printf("| %s | %lld | %lld | %lld | %lld | %lld | %.2f | %.2f |\n", core::tierKindName(kind),
                    (long long)agg.requests, (long long)agg.hits, (long long)agg.falseHits,
                    (long long)agg.tokensReused, (long long)agg.tokensComputed, agg.ttftMsP50, agg.ttftMsP95);
    std::printf("| total | %lld | %lld | %lld | %lld | %lld | %.2f | %.2f |\n\n", (long long)s.requests,
                (long long)s.hits, (long long)s.falseHits, (long long)s.tokensReused,
                (long long)s.tokensComputed, s.ttftMsP50, s.ttftMsP95);
    std::printf(
        "hit rate %.3f (tokens %.3f), false-hit rate %.3f, approximate hits %lld (never cached again), "
        "cost $%.6f vs $%.6f without caching (prices: %s)\n",
        s.hitRate, s.tokenHitRate, s.falseHitRate, (long long)s.approximateHits, s.costUsd, s.costUsdNoCache,
        s.prices.preset.empty() ? "custom" : s.prices.preset.c_str());
    if (s.notServed > 0)
        std::printf("%s\n", notServedLine(s).c_str());
    if (s.guarded > 0) {
        std::string by;
        for (const auto &[guard, n] : s.guardedBy)
            by += fmt::format("{}{} {}", by.empty() ? "" : ", ", guard, n);
        std::printf(
            "guards held back %lld semantic candidates (%s): %lld false hits prevented, %lld hits lost "
            "(intents known)\n",
            (long long)s.guarded, by.c_str(), (long long)s.guardPrevented, (long long)s.guardLost);
    }
    if (job.settings.errorBound > 0) {
        const double rate = s.boundServed ? double(s.boundFalse) / double(s.boundServed) : 0.0;
        std::printf("error bound %.3g: %lld semantic hits served under it, %lld false (rate %.3f): %s\n",
                    job.settings.errorBound, (long long)s.boundServed, (long long)s.boundFalse, rate,
                    s.boundServed == 0 ? "nothing served"
                    : rate <= job.settings.errorBound
                        ? "within the bound"
                        : fmt::format("above the bound by {:.3f}", rate - job.settings.errorBound).c_str());
    }
    if (s.verified > 0)
        std::printf(
            "verifier judged %lld semantic candidates: %lld passed, %lld rejected, %lld failed (rejected); "
            "%lld false hits prevented, %lld hits lost (intents known)%s; %.2f ms each\n",
            (long long)s.verified, (long long)s.verifierPassed, (long long)s.verifierRejected,
            (long long)s.verifierErrors, (long long)s.verifierPrevented, (long long)s.verifierLost,
            s.guardOverruled > 0 ? fmt::format("; {} guards overruled", s.guardOverruled).c_str() : "",
            s.verifierMeanMs);
    std::printf("replay overhead per request, model time excluded: p50 %.3f ms, p99 %.3f ms\n",
                core::percentile(r.overheadMs, 50), core::percentile(r.overheadMs, 99));
    if (job.store) {
        const auto st = job.store->stats();
        std::printf(
            "store %s: %lld gets, %lld hits, %lld puts, %lld refused, %lld unavailable, %.1f MB sent, "
            "%.1f MB received, %.1f ms in round trips\n",
            job.store->describe().c_str(), (long long)st.gets, (long long)st.hits, (long long)st.puts,
            (long long)st.refused, (long long)st.unavailable, st.bytesSent / 1e6, st.bytesReceived / 1e6,
            st.netMs);
    }
    if (job.knowledge) {
        const auto &c = job.knowledge->costs();
        std::printf(
            "knowledge tier: %lld lookups, %lld rejected by verification, %lld modules recomputed; ms: "
            "embed %.1f, recall %.1f, verify %.1f, place %.1f, system prompts %.1f, recompute %.1f\n",
            (long long)c.lookups, (long long)c.rejected, (long long)c.modulesRecomputed, c.embedMs,
            c.recallMs, c.verifyMs, c.placeMs, c.prefixMs, c.recomputeMs);
    }
}

// A fleet worker (--row-log): dies with its coordinator, which may be gone already.
void becomeFleetWorker()
{
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *parent = std::getenv("KVWB_FLEET_PARENT");
    if (parent && ::getppid() != std::atoi(parent))
        throw core::Error(core::ErrorCode::Io, "the fleet coordinator is gone");
}

// Outputs are claimed (and the experiment checked writable) before anything runs, not after.
void claimReplayOutputs(const QCommandLineParser &p)
{
    distinctOutputs(p, {"ledger", "outputs", "save-knowledge", "workload"});
    for (const char *o : {"outputs", "save-knowledge", "ledger"})
        if (p.isSet(o))
            outputFileOption(p, o);
    if (p.isSet("save-ledger"))
        core::checkWritableOutput(str(p.value("experiment")), "--save-ledger");
}

} // namespace

int cmdReplay(const QStringList &args)
{
    QCommandLineParser p;
    addReplayOptions(p);
    addEngineOptions(p);
    parse(p, args,
          "Replay a request workload through a stack of cache tiers (exact, semantic, prefix KV, cross-model "
          "KV) "
          "with real model calls, and report hits, false hits, tokens reused and latency per tier.");
    if (p.isSet("row-log"))
        becomeFleetWorker();
    if (!p.isSet("workload"))
        throw UsageError{"--workload is required"};
    core::ReplaySettings settings = settingsFromFlags(p, core::replayFlags());
    jobs::replayOptions(settings); // an unknown price preset is refused before anything is read or loaded
    if (p.isSet("workers")) {
        if (p.isSet("outputs"))
            throw UsageError{"--outputs is not available with --workers"};
        return runFleetReplay(args, p, settings);
    }
    if (p.isSet("routing") || p.isSet("route-drain"))
        throw UsageError{"--routing and --route-drain need --workers"};
    try {
        core::checkReplaySettings(settings);
    } catch (const core::Error &e) {
        throw UsageError{e.what()};
    }
    claimReplayOutputs(p);
    checkEmbedderOption(p, true);
    if (settings.knowledge.clockStartMs == 0)
        settings.knowledge.clockStartMs = core::unixMsNow();
    const bool asJson = p.isSet("json");

    auto read = jobs::readReplayRequests(settings.workload, settings.limit);
    printWarnings(read.warnings.messages());
    if (read.warnings.total() > read.warnings.messages().size())
        std::fprintf(stderr, "warning: ... and %zu more malformed lines skipped\n",
                     read.warnings.total() - read.warnings.messages().size());
    const auto models =
        loadReplayModels(settings, jobs::replayNeedsModelB(settings, read.requests), loadOptions(p));
    const auto job = jobs::prepareReplay(
        settings, std::move(read.requests),
        {models.a.get(), models.b.get(), models.tokenizerA.get(), models.tokenizerB.get(), {}});
    printWarnings(job.warnings);

    InterruptScope ctrlC;
    std::unique_ptr<std::FILE, int (*)(std::FILE *)> rowLog(nullptr, &std::fclose);
    if (p.isSet("row-log")) {
        rowLog.reset(std::fopen(str(p.value("row-log")).c_str(), "we"));
        if (!rowLog)
            throw core::Error(core::ErrorCode::Io,
                              str(p.value("row-log")) + ": cannot create: " + std::strerror(errno));
    }
    // Test-only: a fleet worker kills itself after this many rows (tests/integration/tst_fleet_cli).
    const char *dieAfterText = std::getenv("KVWB_TEST_DIE_AFTER_ROWS");
    const int dieAfter = dieAfterText ? std::atoi(dieAfterText) : 0;
    const auto r = gpu::replayWorkload(
        job.requests, job.models, job.options, [&](const core::LedgerRow &row, int done, int total) {
            if (rowLog) {
                std::string line = core::ledgerToCsv({row});
                if (done > 1)
                    line.erase(0, line.find('\n') + 1); // the header once
                std::fwrite(line.data(), 1, line.size(), rowLog.get());
                std::fflush(rowLog.get()); // in the kernel's hands: survives a kill of this process
            }
            if (dieAfter > 0 && done == dieAfter)
                ::raise(SIGKILL);
            if (!asJson && (done % 25 == 0 || done == total))
                std::fprintf(stderr, "\rreplayed %d/%d requests", done, total);
            if (row.gate != core::GateDecision::None)
                std::fprintf(stderr, "%sgate: request %lld %s %.4f -> %s\n", asJson ? "" : "\n",
                             (long long)row.requestId, core::gateSignalName(settings.gateSignal),
                             row.gateValue,
                             row.gate == core::GateDecision::Pass ? "use the converted cache" : "fall back");
            return !InterruptScope::interrupted();
        });
    if (!asJson)
        std::fprintf(stderr, "\n");
    printWarnings(r.warnings);
    const std::string stored = jobs::finishReplay(job, r);
    if (asJson)
        std::printf("%s\n",
                    replayJson(job, r, stored).dump(2, ' ', false, json::error_handler_t::replace).c_str());
    else
        printReplaySummary(job, r);
    return r.cancelled ? 130 : 0;
}

} // namespace kvwb::app
