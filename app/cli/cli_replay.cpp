#include "app/cli/cli_replay.h"

#include "app/cli/cli_fleet.h"
#include "app/cli/engine_options.h"
#include "app/jobs/replay_job.h"
#include "core/cache/prefix_tree.h"
#include "core/cache/prices.h"
#include "core/cache/replay_ledger.h"
#include "core/cache/semantic_tier.h"
#include "core/cache/shared_store.h"
#include "core/model/checkpoint.h"
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

// --store-kv-dtype: f32, bf16 or f16.
core::DType storeKvDtype(const QCommandLineParser &p)
{
    const std::string v = str(p.value("store-kv-dtype"));
    if (const auto t = core::parseKvBodyDType(v))
        return *t;
    throw UsageError{"--store-kv-dtype expects f32, bf16 or f16, got '" + v + "'"};
}

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

std::vector<core::TierKind> parseTiers(const QString &text)
{
    std::vector<core::TierKind> tiers;
    if (text == "none")
        return tiers;
    for (const QString &part : text.split(',', Qt::SkipEmptyParts)) {
        const auto t = core::parseTierKind(str(part.trimmed()));
        if (!t || *t == core::TierKind::None)
            throw UsageError{
                "--tiers expects a comma-separated list of exact, semantic, prefix, cross, knowledge (or "
                "'none'), "
                "got '" +
                str(part) + "'"};
        if (std::find(tiers.begin(), tiers.end(), *t) != tiers.end())
            throw UsageError{"--tiers names '" + str(part) + "' twice"};
        tiers.push_back(*t);
    }
    return tiers;
}

int64_t int64Option(const QCommandLineParser &p, const QString &name)
{
    if (!p.isSet(name))
        return 0;
    bool ok = false;
    const qlonglong v = p.value(name).toLongLong(&ok);
    if (!ok || v < 0)
        throw UsageError{"--" + str(name) + " expects a non-negative integer, got '" + str(p.value(name)) +
                         "'"};
    return v;
}

core::TierLimits limits(const QCommandLineParser &p, const QString &prefix)
{
    core::TierLimits l;
    l.maxEntries = int64Option(p, prefix + "-entries");
    l.maxBytes = int64Option(p, prefix + "-bytes");
    const auto e = core::parseEviction(str(p.value("eviction")));
    if (!e)
        throw UsageError{"--eviction expects lru, lfu, fifo or ttl, got '" + str(p.value("eviction")) + "'"};
    l.eviction = *e;
    l.ttlMs = int64Option(p, "ttl-ms");
    if (l.eviction == core::Eviction::Ttl && l.ttlMs <= 0)
        throw UsageError{"--eviction ttl needs --ttl-ms > 0"};
    l.shareAcrossTenants = p.isSet("share-tenants");
    return l;
}

} // namespace

int cmdReplay(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"workload", "Workload JSONL (kvwb workload wordnet|sharegpt|quora).", "W.jsonl"});
    p.addOption({"model-a", "Model a of the workload (default: the experiment's model A).", "PATH"});
    p.addOption({"model-b", "Model b (default: the experiment's model B).", "PATH"});
    p.addOption({"experiment", "Experiment file: its converter (cross tier), and where the ledger is stored.",
                 "EXP.h5"});
    p.addOption({"converter", "Converter name for the cross tier (default 'default').", "NAME", "default"});
    p.addOption({"tiers",
                 "Cache tiers in lookup order: exact, semantic, prefix, cross, knowledge, or 'none' (default "
                 "exact,semantic,prefix).",
                 "LIST", "exact,semantic,prefix"});
    p.addOption({"threshold", "Semantic cosine threshold (default 0.8).", "T", "0.8"});
    p.addOption(
        {"embedder",
         "Semantic embedder: lexical (default), lexical-idf (weighted by inverse document frequency over "
         "the workload's texts), model (model A's hidden states) or the path of an embedding model (a "
         "sentence-transformers directory or bert GGUF: all-MiniLM, bge, gte, e5, projects/demo/models/e; "
         "or a decoder embedder such as Qwen3-Embedding, pooled at its last token).",
         "E", "lexical"});
    p.addOption(
        {"error-bound",
         "Semantic tier: per-entry thresholds that serve only while an entry's estimated error rate stays "
         "under this bound (the threshold becomes a floor; docs/cache-tiers.md).",
         "F"});
    p.addOption({"bound-confidence",
                 "With --error-bound: confidence of the error's upper bound (default 0.9).", "C", "0.9"});
    p.addOption({"embed",
                 "What the semantic tier embeds: question (default: the request's question, else its prompt) "
                 "or prompt (the whole prompt, system prompt included).",
                 "WHAT", "question"});
    p.addOption({"embedder-layer", "Model embedder layer (default: the middle one).", "N"});
    p.addOption({"embedder-prefix",
                 "An embedding model's input prefix, put before every text it embeds (e5: \"query: \"; bge's "
                 "query instruction).",
                 "TEXT"});
    p.addOption({"block", "Prefix-tree block size in tokens (default 16).", "N", "16"});
    p.addOption(
        {"min-cross-tokens", "Cross-model reuse needs this many matched tokens (default 16).", "N", "16"});
    p.addOption({"align-policy",
                 "Cross tier, models that tokenise differently: which overlapping A token each B token's row "
                 "is converted from: last (default), first or longest (docs/transfer.md).",
                 "POLICY", "last"});
    p.addOption(
        {"knowledge",
         "Knowledge tier: a graph from kvwb knowledge build, shared by every tenant (GRAPH.h5) or one "
         "tenant's (TENANT=GRAPH.h5); repeatable.",
         "SPEC"});
    p.addOption({"profiles", "Knowledge tier: user profiles (kvwb knowledge profiles).", "P.json"});
    p.addOption({"knowledge-candidates", "Knowledge tier: nodes recall proposes (default 3).", "N", "3"});
    p.addOption(
        {"knowledge-min-similarity", "Knowledge tier: recall's cosine floor (default 0.3).", "S", "0.3"});
    p.addOption({"no-verify", "Knowledge tier: take recall's best node without graph verification."});
    p.addOption(
        {"knowledge-ttl-ms", "Knowledge tier: modules older than this are stale (default never).", "MS"});
    p.addOption(
        {"knowledge-boundary", "Knowledge tier: module tokens recomputed in place (default 0).", "N", "0"});
    p.addOption({"knowledge-clock-start",
                 "Knowledge tier: Unix ms of the workload's time 0, for module freshness (default now).",
                 "MS"});
    p.addOption({"save-knowledge",
                 "After the replay, write the shared graph (reuse counts, recomputed modules) to this file.",
                 "OUT.h5"});
    p.addOption({"exact-entries", "Exact tier capacity in entries (default unlimited).", "N"});
    p.addOption({"exact-bytes", "Exact tier capacity in bytes.", "N"});
    p.addOption({"semantic-entries", "Semantic tier capacity in entries.", "N"});
    p.addOption({"semantic-bytes", "Semantic tier capacity in bytes.", "N"});
    p.addOption({"prefix-entries", "Prefix tree capacity per model in blocks.", "N"});
    p.addOption({"prefix-bytes", "Prefix tree capacity per model in KV bytes.", "N"});
    p.addOption({"eviction", "lru (default), lfu, fifo or ttl.", "POLICY", "lru"});
    p.addOption({"ttl-ms", "Entries older than this (workload time) never hit.", "MS"});
    p.addOption({"share-tenants", "One cache scope for all tenants (default: isolated per tenant)."});
    p.addOption({"gate-signal", "Cross-tier gate signal: tail_kl (default), kv_cos, attn_cos or nll.", "S",
                 "tail_kl"});
    p.addOption(
        {"gate-threshold", "Gate threshold (default 0.1 for tail_kl, 0.9 kv_cos and attn_cos, 3 nll).", "T"});
    p.addOption({"no-gate", "Use every cross-model match without the quality gate."});
    p.addOption({"clock", "Replay on the workload's clock (arrival times), not as fast as possible."});
    p.addOption({"speed", "With --clock: speed factor (default 1; 10 = ten times faster).", "F", "1"});
    p.addOption({"max-tokens", "Override every request's max_tokens.", "N"});
    p.addOption({"limit", "Replay only the first N requests.", "N"});
    p.addOption({"shadow", "Share of hits re-run from scratch to verify them (default 0).", "F", "0"});
    p.addOption({"price-in", "USD per 1M prompt tokens computed (default 0.15).", "USD", "0.15"});
    p.addOption({"price-out", "USD per 1M generated tokens computed (default 0.60).", "USD", "0.60"});
    p.addOption({"prices",
                 "Bill the ledger at a price preset (kvwb prices lists them) or a presets file (FILE or "
                 "FILE#ID): cached input, cache writes and storage as the provider bills them "
                 "(docs/replay.md, \"Prices\"). Not with --price-in/--price-out.",
                 "PRESET|FILE"});
    p.addOption({"store",
                 "Keep the exact and semantic entries and the prefix KV blocks in a shared store: memory, "
                 "redis://HOST:PORT[/DB] or redis-cluster://HOST:PORT[,HOST:PORT...] (docs/fleet.md).",
                 "URL"});
    p.addOption(
        {"store-timeout-ms", "Shared store: connect and command timeout (default 500).", "MS", "500"});
    p.addOption({"store-key-file",
                 "Shared store: sign every value with an HMAC-SHA256 under the key in this file (16 bytes to "
                 "4 KiB) and refuse values without a valid tag (docs/fleet.md).",
                 "FILE"});
    p.addOption({"store-flush", "Shared store: remove the workbench's keys before the replay."});
    p.addOption(
        {"store-kv-dtype",
         "Shared store: prefix KV blocks travel as f32 (default), bf16 or f16 (half the bytes, values "
         "rounded).",
         "TYPE", "f32"});
    {
        // A fleet worker's completed rows, one CSV line each as it completes (the coordinator reads
        // them when the worker dies); set by the coordinator, not by users.
        QCommandLineOption rowLog("row-log", "Fleet worker: append each completed ledger row here.", "FILE");
        rowLog.setFlags(QCommandLineOption::HiddenFromHelp);
        p.addOption(rowLog);
    }
    p.addOption({"workers",
                 "Run the replay as a fleet of N worker processes (docs/fleet.md); with --store they share "
                 "one store, without it each keeps its own caches.",
                 "N"});
    p.addOption({"routing",
                 "Fleet routing: round-robin (default), tenant-affine, prefix-hash or least-loaded.",
                 "POLICY", "round-robin"});
    p.addOption({"route-drain", "least-loaded routing: work units a worker drains per second (default 2000).",
                 "UNITS", "2000"});
    p.addOption({"ledger", "Write the per-request ledger as CSV.", "OUT.csv"});
    addForceOption(p);
    p.addOption({"outputs",
                 "Write each request's answer as JSONL ({\"id\", \"output\"}; text that is not UTF-8 has its "
                 "bad bytes replaced), e.g. for kvwb workload rounds --outputs.",
                 "OUT.jsonl"});
    p.addOption({"save-ledger", "Store the ledger in the experiment file as /ledgers/NAME.", "NAME"});
    p.addOption({"json", "Print the summary as JSON."});
    addEngineOptions(p);
    parse(p, args,
          "Replay a request workload through a stack of cache tiers (exact, semantic, prefix KV, cross-model "
          "KV) "
          "with real model calls, and report hits, false hits, tokens reused and latency per tier.");
    if (p.isSet("row-log")) {
        // A fleet worker dies with its coordinator: a killed coordinator must not leave workers
        // computing and writing to a shared store. The coordinator may be gone already.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        const char *parent = std::getenv("KVWB_FLEET_PARENT");
        if (parent && ::getppid() != std::atoi(parent))
            throw core::Error(core::ErrorCode::Io, "the fleet coordinator is gone");
    }
    if (!p.isSet("workload"))
        throw UsageError{"--workload is required"};
    distinctOutputs(p, {"ledger", "outputs", "save-knowledge", "workload"});
    gpu::ReplayOptions o;
    o.tiers = parseTiers(p.value("tiers"));
    o.threshold = doubleOption(p, "threshold", 0.8, -1.0, 1.0);
    o.prefixBlock = intOption(p, "block", 16, 1, core::kMaxPrefixBlock);
    o.minCrossTokens = intOption(p, "min-cross-tokens", 16, 1);
    const auto policy = core::parseAlignPolicy(str(p.value("align-policy")));
    if (!policy)
        throw UsageError{"--align-policy expects first, last or longest, got '" +
                         str(p.value("align-policy")) + "'"};
    o.alignPolicy = *policy;
    o.exactLimits = limits(p, "exact");
    o.semanticLimits = limits(p, "semantic");
    o.prefixLimits = limits(p, "prefix");
    const auto gs = gpu::parseGateSignal(str(p.value("gate-signal")));
    if (!gs)
        throw UsageError{"--gate-signal expects tail_kl, kv_cos, attn_cos or nll, got '" +
                         str(p.value("gate-signal")) + "'"};
    o.gateSignal = *gs;
    o.gateThreshold = doubleOption(p, "gate-threshold", gpu::defaultGateThreshold(*gs), -1.0, 1e9);
    o.gate = !p.isSet("no-gate");
    if (p.value("embed") != "question" && p.value("embed") != "prompt")
        throw UsageError{"--embed expects question or prompt, got '" + str(p.value("embed")) + "'"};
    o.embedQuestion = p.value("embed") == "question";
    o.onClock = p.isSet("clock");
    o.speed = doubleOption(p, "speed", 1.0, 1e-6, 1e9);
    o.maxTokens = intOption(p, "max-tokens", 0, 1);
    o.shadowFraction = doubleOption(p, "shadow", 0.0, 0.0, 1.0);
    if (p.isSet("error-bound")) {
        core::EntryBoundOptions bound;
        bound.errorBound = doubleOption(p, "error-bound", 0.05, 1e-6, 0.999999);
        bound.confidence = doubleOption(p, "bound-confidence", 0.9, 0.5, 0.999);
        o.semanticBound = bound;
    } else if (p.isSet("bound-confidence")) {
        throw UsageError{"--bound-confidence needs --error-bound"};
    }
    if (p.isSet("prices")) {
        if (p.isSet("price-in") || p.isSet("price-out"))
            throw UsageError{
                "--prices and --price-in/--price-out exclude each other: give a preset or file, or "
                "the two prices"};
        o.prices = core::resolvePricePreset(str(p.value("prices"))).prices; // before any model loads
    } else {
        o.prices.inputPerMillion = doubleOption(p, "price-in", 0.15, 0.0, 1e9);
        o.prices.outputPerMillion = doubleOption(p, "price-out", 0.60, 0.0, 1e9);
    }
    if (p.isSet("workers")) {
        if (p.isSet("outputs"))
            throw UsageError{"--outputs is not available with --workers"};
        return runFleetReplay(args, p, o.prices);
    }
    if (p.isSet("outputs"))
        outputFileOption(p, "outputs");
    if (p.isSet("routing") || p.isSet("route-drain"))
        throw UsageError{"--routing and --route-drain need --workers"};
    const bool asJson = p.isSet("json");
    const bool needCross = std::find(o.tiers.begin(), o.tiers.end(), core::TierKind::Cross) != o.tiers.end();
    const bool needKnowledge =
        std::find(o.tiers.begin(), o.tiers.end(), core::TierKind::Knowledge) != o.tiers.end();
    if (needKnowledge && !p.isSet("knowledge"))
        throw UsageError{"the knowledge tier needs --knowledge GRAPH.h5 (kvwb knowledge build)"};
    if (!needKnowledge && (p.isSet("knowledge") || p.isSet("profiles") || p.isSet("save-knowledge")))
        throw UsageError{"--knowledge, --profiles and --save-knowledge need 'knowledge' in --tiers"};
    if (p.isSet("save-knowledge"))
        outputFileOption(p, "save-knowledge");
    if (p.isSet("save-ledger") && !p.isSet("experiment"))
        throw UsageError{"--save-ledger needs --experiment"};
    // outputs checked before the replay, not after it
    if (p.isSet("ledger"))
        outputFileOption(p, "ledger");
    if (p.isSet("save-ledger"))
        core::checkWritableOutput(str(p.value("experiment")), "--save-ledger");
    if (needCross && !p.isSet("experiment"))
        throw UsageError{"the cross tier needs --experiment (its converter)"};

    checkEmbedderOption(p, true);
    jobs::ReplayJob job;
    job.workloadPath = str(p.value("workload"));
    job.embedder = str(p.value("embedder"));
    job.embedderLayer = intOption(p, "embedder-layer", -1, 0);
    job.embedderPrefix = str(p.value("embedder-prefix"));
    job.limit = p.isSet("limit") ? intOption(p, "limit", 0, 1) : 0;
    job.converter = str(p.value("converter"));
    for (const QString &g : p.values("knowledge"))
        job.knowledgeGraphs.push_back(str(g));
    job.profilesPath = str(p.value("profiles"));
    job.knowledge.candidates = intOption(p, "knowledge-candidates", 3, 1, 64);
    job.knowledge.minSimilarity = doubleOption(p, "knowledge-min-similarity", 0.3, -1.0, 1.0);
    job.knowledge.verify = !p.isSet("no-verify");
    job.knowledge.ttlMs = int64Option(p, "knowledge-ttl-ms");
    job.knowledge.boundary = intOption(p, "knowledge-boundary", 0, 0);
    job.knowledge.clockStartMs =
        p.isSet("knowledge-clock-start") ? int64Option(p, "knowledge-clock-start") : core::unixMsNow();
    auto read = jobs::readReplayRequests(job.workloadPath, job.limit);
    for (const auto &w : read.warnings.messages())
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (read.warnings.total() > read.warnings.messages().size())
        std::fprintf(stderr, "warning: ... and %zu more malformed lines skipped\n",
                     read.warnings.total() - read.warnings.messages().size());
    auto requests = std::move(read.requests);
    bool anyB = false;
    for (const auto &r : requests)
        anyB = anyB || r.model == "b";

    // Models: flags, else the experiment's recorded paths.
    std::optional<core::ExperimentReader> exp;
    if (p.isSet("experiment"))
        exp.emplace(core::ExperimentReader::open(str(p.value("experiment"))));
    auto pathOf = [&](core::ModelRole role) -> std::optional<fs::path> {
        const QString flag = role == core::ModelRole::A ? "model-a" : "model-b";
        if (p.isSet(flag))
            return fs::path(str(p.value(flag)));
        if (exp)
            return fs::path(exp->model(role).sourcePath);
        return std::nullopt;
    };
    const auto lo = loadOptions(p);
    const auto pathA = pathOf(core::ModelRole::A);
    if (!pathA)
        throw UsageError{"--model-a (or --experiment) is required"};
    auto a = gpu::Model::load(*pathA, lo);
    std::unique_ptr<gpu::Model> b;
    if (anyB || needCross || needKnowledge) {
        const auto pathB = pathOf(core::ModelRole::B);
        if (!pathB)
            throw UsageError{"the workload sends requests to model b: give --model-b (or --experiment)"};
        b = gpu::Model::load(*pathB, lo);
    }
    auto tokA = loadModelTokenizer(*a);
    std::unique_ptr<core::Tokenizer> tokB = b ? loadModelTokenizer(*b) : nullptr;
    std::optional<gpu::Converter> converter;
    if (needCross) {
        for (const core::ModelRole role : core::kRoles) {
            const gpu::Model &mm = role == core::ModelRole::A ? *a : *b;
            if (mm.checkpoint().fingerprint() != exp->model(role).weightsSha256)
                throw core::Error(
                    core::ErrorCode::Config,
                    fmt::format("{}: model {} at {} has weights fingerprint {}, the converters were fitted "
                                "for {}",
                                exp->path().string(), core::roleLabel(role), mm.checkpoint().path().string(),
                                mm.checkpoint().fingerprint(), exp->model(role).weightsSha256));
        }
        converter.emplace(
            gpu::Converter::create(core::loadConverters(exp->path(), str(p.value("converter"))), *a, *b));
    }
    job.options.tiers = o.tiers;
    job.options.prefixLimits = o.prefixLimits;
    job.options.maxTokens = o.maxTokens;
    jobs::checkReplayWorkingSet(job, requests, *a, *tokA, b.get(), tokB.get());
    std::vector<std::string>
        embedTexts; // what the semantic tier embeds: the lexical-idf embedder's documents
    for (const auto &r : requests)
        embedTexts.push_back(o.embedQuestion && !r.question.empty() ? r.question : r.prompt);
    const auto embedder =
        jobs::makeEmbedder(job.embedder, job.embedderLayer, *a, *tokA, embedTexts, job.embedderPrefix);
    job.options = o;
    std::unique_ptr<gpu::KnowledgeTier> knowledge;
    if (needKnowledge) {
        knowledge = jobs::makeKnowledgeTier(job, *b, *tokB, *embedder);
        for (const auto &w : knowledge->warnings())
            std::fprintf(stderr, "warning: %s\n", w.c_str());
    }

    std::unique_ptr<core::SharedStore> store;
    if (p.isSet("store")) {
        core::StoreOptions so;
        so.commandTimeoutMs = intOption(p, "store-timeout-ms", 500, 1, 600000);
        so.connectTimeoutMs = so.commandTimeoutMs;
        if (p.isSet("store-key-file"))
            so.integrityKey = core::readStoreKeyFile(str(p.value("store-key-file")));
        store = core::openSharedStore(str(p.value("store")), so);
        if (p.isSet("store-flush"))
            store->flush();
        o.storeKvDtype = storeKvDtype(p);
        job.options.storeKvDtype = o.storeKvDtype;
        o.store = store.get();
        job.options.store = o.store;
    } else if (p.isSet("store-key-file")) {
        throw UsageError{"--store-key-file needs --store"};
    } else if (p.isSet("store-kv-dtype")) {
        throw UsageError{"--store-kv-dtype needs --store"};
    } else if (p.isSet("store-flush")) {
        throw UsageError{"--store-flush needs --store"};
    }
    gpu::ReplayModels models{
        a.get(),        b.get(),        tokA.get(), tokB.get(), converter ? &*converter : nullptr,
        embedder.get(), knowledge.get()};
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
    const auto r =
        gpu::replayWorkload(requests, models, o, [&](const core::LedgerRow &row, int done, int total) {
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
            if (!row.gate.empty())
                std::fprintf(stderr, "%sgate: request %lld %s %.4f -> %s\n", asJson ? "" : "\n",
                             (long long)row.requestId, gpu::gateSignalName(o.gateSignal), row.gateValue,
                             row.gate == "pass" ? "use the converted cache" : "fall back");
            return !InterruptScope::interrupted();
        });
    if (!asJson)
        std::fprintf(stderr, "\n");
    for (const auto &w : r.warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    const json settings =
        json::parse(jobs::ledgerSettingsJson(job, embedder.get(), *a, b.get(), r.cancelled));
    if (p.isSet("ledger"))
        core::writeLedgerCsv(str(p.value("ledger")), r.rows);
    if (p.isSet("outputs")) {
        std::string lines;
        for (size_t i = 0; i < r.rows.size() && i < r.outputs.size(); ++i)
            lines += json({{"id", r.rows[i].requestId}, {"output", r.outputs[i]}})
                         .dump(-1, ' ', false, json::error_handler_t::replace) +
                     "\n";
        core::writeFileAtomic(str(p.value("outputs")), lines);
    }
    if (p.isSet("save-ledger")) {
        const fs::path path = exp->path();
        exp.reset(); // HDF5 cannot reopen a file for writing while this process reads it
        core::saveLedger(path, str(p.value("save-ledger")), r.rows, settings.dump());
    }
    if (p.isSet("save-knowledge")) {
        const auto &scopes = knowledge->scopes();
        const auto shared =
            std::find_if(scopes.begin(), scopes.end(), [](const auto &x) { return x.tenant.empty(); });
        if (shared == scopes.end())
            throw core::Error(core::ErrorCode::InvalidArgument,
                              "--save-knowledge writes the shared graph; every --knowledge names a tenant");
        core::saveKnowledge(str(p.value("save-knowledge")), shared->file);
    }
    const auto &s = r.summary;
    if (asJson) {
        json total = json::parse(core::ledgerSummaryJson(s));
        const json tiers = total["tiers"];
        total.erase("tiers");
        json sweep = json::array();
        for (const auto &row : r.thresholdSweep.rows)
            sweep.push_back({{"threshold", row[0]}, {"hit_rate", row[1]}, {"false_hit_rate", row[2]}});
        const json out = {
            {"settings", settings},
            {"requests", s.requests},
            {"cancelled", r.cancelled},
            {"tiers", tiers},
            {"total", total},
            {"overhead_ms_p50", core::percentile(r.overheadMs, 50)},
            {"overhead_ms_p99", core::percentile(r.overheadMs, 99)},
            {"threshold_sweep", sweep},
            {"knowledge", knowledge ? json::parse(jobs::knowledgeCostsJson(*knowledge)) : json()},
            {"store", store ? json::parse(jobs::storeStatsJson(*store)) : json()},
            {"tier_stores", tierStoresJson(r.tierStats)},
            {"warnings", r.warnings}};
        std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
        return r.cancelled ? 130 : 0;
    }
    std::printf("%s: %lld requests, tiers %s%s\n\n", qPrintable(p.value("workload")), (long long)s.requests,
                settings["tiers"].get<std::string>().empty() ? "none"
                                                             : settings["tiers"].get<std::string>().c_str(),
                r.cancelled ? " (cancelled)" : "");
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
        "hit rate %.3f (tokens %.3f), false-hit rate %.3f, cost $%.6f vs $%.6f without caching (prices: "
        "%s)\n",
        s.hitRate, s.tokenHitRate, s.falseHitRate, s.costUsd, s.costUsdNoCache,
        s.prices.preset.empty() ? "custom" : s.prices.preset.c_str());
    if (s.notServed > 0)
        std::printf("%s\n", notServedLine(s).c_str());
    std::printf("replay overhead per request, model time excluded: p50 %.3f ms, p99 %.3f ms\n",
                core::percentile(r.overheadMs, 50), core::percentile(r.overheadMs, 99));
    if (store) {
        const auto st = store->stats();
        std::printf(
            "store %s: %lld gets, %lld hits, %lld puts, %lld refused, %lld unavailable, %.1f MB sent, "
            "%.1f MB received, %.1f ms in round trips\n",
            store->describe().c_str(), (long long)st.gets, (long long)st.hits, (long long)st.puts,
            (long long)st.refused, (long long)st.unavailable, st.bytesSent / 1e6, st.bytesReceived / 1e6,
            st.netMs);
    }
    if (knowledge) {
        const auto &c = knowledge->costs();
        std::printf(
            "knowledge tier: %lld lookups, %lld rejected by verification, %lld modules recomputed; ms: "
            "embed %.1f, recall %.1f, verify %.1f, place %.1f, system prompts %.1f, recompute %.1f\n",
            (long long)c.lookups, (long long)c.rejected, (long long)c.modulesRecomputed, c.embedMs,
            c.recallMs, c.verifyMs, c.placeMs, c.prefixMs, c.recomputeMs);
    }
    return r.cancelled ? 130 : 0;
}

} // namespace kvwb::app
