#include "core/settings/replay_settings.h"

#include "core/cache/prefix_tree.h"
#include "core/cache/store_payload.h"
#include "core/settings/setting_rows_p.h"
#include "core/util/error.h"
#include "core/util/store_url.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <limits>

namespace kvwb::core {

namespace {

using S = ReplaySettings;
using namespace settings_detail;

// What is replayed, on which models, with which converter; the tier stack.
void inputRows(std::vector<ReplayFlag> &t)
{
    t.push_back(text("workload", "W.jsonl", "Workload JSONL (kvwb workload wordnet|sharegpt|quora).",
                     &S::workload, Scope::Input));
    t.push_back(text("model-a", "PATH", "Model a of the workload (default: the experiment's model A).",
                     &S::modelA, Scope::Run));
    t.push_back(
        text("model-b", "PATH", "Model b (default: the experiment's model B).", &S::modelB, Scope::Run));
    t.push_back(text("experiment", "EXP.h5",
                     "Experiment file: its converter (cross tier), and where the ledger is stored.",
                     &S::experiment, Scope::Run));
    t.push_back(text("converter", "NAME", "Converter name for the cross tier (default 'default').",
                     &S::converter, Scope::Input));
    {
        ReplayFlag f =
            row<S>("tiers", "LIST",
                   "Cache tiers in lookup order: exact, semantic, prefix, cross, knowledge, or 'none' "
                   "(default exact,semantic,prefix).",
                   Scope::Setting, Kind::List);
        f.set = [](S &s, const std::string &v) {
            std::vector<TierKind> tiers;
            if (v != "none") {
                size_t at = 0;
                while (at <= v.size()) {
                    const size_t comma = std::min(v.find(',', at), v.size());
                    std::string part = v.substr(at, comma - at);
                    part.erase(0, part.find_first_not_of(" \t"));
                    part.erase(part.find_last_not_of(" \t") + 1);
                    at = comma + 1;
                    if (part.empty())
                        continue;
                    const auto k = parseTierKind(part);
                    if (!k || *k == TierKind::None)
                        bad("expects a comma-separated list of exact, semantic, prefix, cross, knowledge (or "
                            "'none'), got '" +
                            part + "'");
                    if (std::find(tiers.begin(), tiers.end(), *k) != tiers.end())
                        bad("names '" + part + "' twice");
                    tiers.push_back(*k);
                }
            }
            s.tiers = std::move(tiers);
        };
        f.get = [](const S &s) {
            std::vector<std::string> out;
            for (const auto k : s.tiers)
                out.push_back(tierKindName(k));
            return out;
        };
        t.push_back(std::move(f));
    }
}

// The semantic tier: threshold, embedder, per-entry bounds, what it embeds.
void semanticRows(std::vector<ReplayFlag> &t)
{
    t.push_back(real("threshold", "T", "Semantic cosine threshold (default 0.8).", &S::threshold, -1.0, 1.0));
    {
        ReplayFlag f = text(
            "embedder", "E",
            "Semantic embedder: lexical (default), lexical-idf (weighted by inverse document frequency over "
            "the workload's texts), model (model A's hidden states) or the path of an embedding model (a "
            "sentence-transformers directory or bert GGUF: all-MiniLM, bge, gte, e5, projects/demo/models/e; "
            "or a decoder embedder such as Qwen3-Embedding, pooled at its last token).",
            &S::embedder);
        f.set = [](S &s, const std::string &v) {
            if (v.empty())
                bad("is empty (lexical, lexical-idf, model or an embedding model's path)");
            s.embedder = v;
        };
        t.push_back(std::move(f));
    }
    {
        ReplayFlag f =
            real("error-bound", "F",
                 "Semantic tier: per-entry thresholds that serve only while an entry's estimated error "
                 "rate stays under this bound (the threshold becomes a floor; docs/cache-tiers.md).",
                 &S::errorBound, 0, 0.999999);
        f.set = [](S &s, const std::string &v) {
            const auto x = parseReal(v);
            if (!x || !(*x == 0 || (*x >= 1e-6 && *x <= 0.999999)))
                bad("expects a number in [1e-06, 0.999999] (0: off), got '" + v + "'");
            s.errorBound = *x;
        };
        t.push_back(std::move(f));
    }
    t.push_back(choice(
        "guards", "LIST",
        "Semantic tier: candidates whose question differs from the cached one in a negation or opposite, a "
        "number, a named entity or the question word are not served (docs/cache-tiers.md): all (default), "
        "none, or a comma-separated list of negation, number, entity and question-word.",
        &S::guards, [](const std::string &v) { return parseSemanticGuards(v); }, semanticGuardsName,
        "all, none or a list of negation, number, entity, question-word"));
    t.push_back(
        text("verifier", "DIR",
             "Semantic tier: a cross-encoder (kvwb train-verifier, or a BertForSequenceClassification "
             "directory) that re-checks each candidate before it serves; a failure or a score under "
             "--verifier-threshold computes the request instead.",
             &S::verifier));
    t.push_back(real("verifier-threshold", "T",
                     "The verifier's score a candidate needs (default 0: the threshold its training measured "
                     "for validation precision 0.9, else 0.5).",
                     &S::verifierThreshold, 0, 1));
    t.push_back(
        toggle("verifier-overrules-guards",
               "A candidate a guard holds back is verified too, and serves when the verifier passes it.",
               &S::verifierOverrulesGuards, true, "verifier_overrules_guards"));
    t.push_back(
        integer<S, int>("bound-min-uses", "N",
                        "With --error-bound: an entry serves at similarity s only after its answer was "
                        "right for N requests at s or below (default 3).",
                        &S::boundMinUses, 1, 1000));
    t.push_back(text("bound-prior", "FILE",
                     "With --error-bound: the error rate per similarity the evidence starts from, fitted to "
                     "a measured curve: 'embedder' (a trained embedder's validation curve, its "
                     "train_log.json), a kvwb sweep-semantic --json file or a train_log.json (default: the "
                     "replay's own outcomes alone).",
                     &S::boundPrior));
    t.push_back(real("bound-confidence", "C",
                     "With --error-bound: confidence of the error's upper bound (default 0.9).",
                     &S::boundConfidence, 0.5, 0.999));
    {
        ReplayFlag f =
            row<S>("embed", "WHAT",
                   "What the semantic tier embeds: question (default: the request's question, else its "
                   "prompt) or prompt (the whole prompt, system prompt included).",
                   Scope::Setting, Kind::Value);
        f.set = [](S &s, const std::string &v) {
            if (v != "question" && v != "prompt")
                bad("expects question or prompt, got '" + v + "'");
            s.embedQuestion = v == "question";
        };
        f.get = [](const S &s) { return std::vector<std::string>{s.embedQuestion ? "question" : "prompt"}; };
        t.push_back(std::move(f));
    }
    t.push_back(integer<S, int>("embedder-layer", "N", "Model embedder layer (default: the middle one).",
                                &S::embedderLayer, -1));
    t.push_back(text("embedder-prefix", "TEXT",
                     "An embedding model's input prefix, put before every text it embeds (e5: \"query: \"; "
                     "bge's query instruction).",
                     &S::embedderPrefix));
}

// The KV tiers: prefix blocks, cross-model matching, the knowledge tier.
void kvRows(std::vector<ReplayFlag> &t)
{
    t.push_back(integer<S, int>("block", "N", "Prefix-tree block size in tokens (default 16).",
                                &S::prefixBlock, 1, kMaxPrefixBlock));
    t.push_back(integer<S, int>("min-cross-tokens", "N",
                                "Cross-model reuse needs this many matched tokens (default 16).",
                                &S::minCrossTokens, 1));
    t.push_back(real("cross-recompute", "F",
                     "Cross tier: B recomputes this share of the converted prefix itself, half the first "
                     "positions, half the last (default 0: none; 1: B's own prefill).",
                     &S::crossRecompute, 0.0, 1.0));
    {
        // pairs B's tokens with A's; --align-policy, its older name, is still accepted
        ReplayFlag f = choice(
            "pair-policy", "POLICY",
            "Cross tier, models that tokenise differently: which overlapping A token each B token's row is "
            "converted from: last (default), first or longest (docs/transfer.md).",
            &S::alignPolicy, [](const std::string &v) { return parseAlignPolicy(v); }, alignPolicyName,
            "first, last or longest");
        f.alias = "align-policy";
        t.push_back(std::move(f));
    }
    {
        ReplayFlag f =
            row<S>("knowledge", "SPEC",
                   "Knowledge tier: a graph from kvwb knowledge build, shared by every tenant (GRAPH.h5) "
                   "or one tenant's (TENANT=GRAPH.h5); repeatable.",
                   Scope::Input, Kind::Repeated);
        f.reset = [](S &s) { s.knowledgeGraphs.clear(); };
        f.set = [](S &s, const std::string &v) {
            if (v.empty())
                bad("is empty (GRAPH.h5 or TENANT=GRAPH.h5)");
            s.knowledgeGraphs.push_back(v);
        };
        f.get = [](const S &s) { return s.knowledgeGraphs; };
        t.push_back(std::move(f));
    }
    t.push_back(text("profiles", "P.json", "Knowledge tier: user profiles (kvwb knowledge profiles).",
                     &S::profiles, Scope::Input));
    using K = KnowledgeTierSettings;
    t.push_back(integer<S, int>("knowledge-candidates", "N",
                                "Knowledge tier: nodes recall proposes (default 3).",
                                nested(&S::knowledge, &K::candidates), 1, 64));
    t.push_back(real<S>("knowledge-min-similarity", "S",
                        "Knowledge tier: recall's cosine floor (default 0.3).",
                        nested(&S::knowledge, &K::minSimilarity), -1.0, 1.0));
    t.push_back(toggle<S>("no-verify", "Knowledge tier: take recall's best node without graph verification.",
                          nested(&S::knowledge, &K::verify), false, "knowledge_verify"));
    t.push_back(count<S>("knowledge-ttl-ms", "MS",
                         "Knowledge tier: modules older than this are stale (default never).",
                         nested(&S::knowledge, &K::ttlMs)));
    t.push_back(integer<S, int>("knowledge-boundary", "N",
                                "Knowledge tier: module tokens recomputed in place (default 0).",
                                nested(&S::knowledge, &K::boundary), 0));
    {
        ReplayFlag f =
            count<S>("knowledge-clock-start", "MS",
                     "Knowledge tier: Unix ms of the workload's time 0, for module freshness (default now).",
                     nested(&S::knowledge, &K::clockStartMs));
        f.scope = Scope::Run;
        t.push_back(std::move(f));
    }
}

// What the tiers may hold and how they evict.
void limitRows(std::vector<ReplayFlag> &t)
{
    t.push_back(
        text("save-knowledge", "OUT.h5",
             "After the replay, write the shared graph (reuse counts, recomputed modules) to this file.",
             &S::saveKnowledge, Scope::Run));
    t.push_back(
        count("exact-entries", "N", "Exact tier capacity in entries (default unlimited).", &S::exactEntries));
    t.push_back(count("exact-bytes", "N", "Exact tier capacity in bytes.", &S::exactBytes));
    t.push_back(count("semantic-entries", "N", "Semantic tier capacity in entries.", &S::semanticEntries));
    t.push_back(count("semantic-bytes", "N", "Semantic tier capacity in bytes.", &S::semanticBytes));
    t.push_back(count("prefix-entries", "N", "Prefix tree capacity per model in blocks.", &S::prefixEntries));
    t.push_back(count("prefix-bytes", "N", "Prefix tree capacity per model in KV bytes.", &S::prefixBytes));
    t.push_back(choice(
        "eviction", "POLICY", "lru (default), lfu, fifo or ttl.", &S::eviction,
        [](const std::string &v) { return parseEviction(v); }, evictionName, "lru, lfu, fifo or ttl"));
    t.push_back(count("ttl-ms", "MS", "Entries older than this (workload time) never hit.", &S::ttlMs));
    t.push_back(toggle("share-tenants", "One cache scope for all tenants (default: isolated per tenant).",
                       &S::shareTenants, true, "share_tenants"));
}

// The cross tier's gate, the clock, request limits, shadow runs and prices.
void gateRows(std::vector<ReplayFlag> &t)
{
    t.push_back(gateSignalRow<S>("Cross-tier gate signal: tail_kl (default), kv_cos, attn_cos or nll."));
    t.push_back(real("gate-threshold", "T",
                     "Gate threshold (default 0.1 for tail_kl, 0.9 kv_cos and attn_cos, 3 nll).",
                     &S::gateThreshold, -1.0, 1e9));
    t.push_back(
        toggle("no-gate", "Use every cross-model match without the quality gate.", &S::gate, false, "gate"));
    t.push_back(toggle("clock", "Replay on the workload's clock (arrival times), not as fast as possible.",
                       &S::onClock, true, "clock"));
    t.push_back(real("speed", "F", "With --clock: speed factor (default 1; 10 = ten times faster).",
                     &S::speed, 1e-6, 1e9));
    t.push_back(integer<S, int>("max-tokens", "N", "Override every request's max_tokens.", &S::maxTokens, 0));
    t.push_back(integer<S, int>("limit", "N", "Replay only the first N requests.", &S::limit, 0));
    t.push_back(real("shadow", "F", "Share of hits re-run from scratch to verify them (default 0).",
                     &S::shadow, 0.0, 1.0));
    t.push_back(
        real("price-in", "USD", "USD per 1M prompt tokens computed (default 0.15).", &S::priceIn, 0.0, 1e9));
    t.push_back(real("price-out", "USD", "USD per 1M generated tokens computed (default 0.60).", &S::priceOut,
                     0.0, 1e9));
    t.push_back(text("prices", "PRESET|FILE",
                     "Bill the ledger at a price preset (kvwb prices lists them) or a presets file (FILE or "
                     "FILE#ID): cached input, cache writes and storage as the provider bills them "
                     "(docs/replay.md, \"Prices\"). Not with --price-in/--price-out.",
                     &S::prices));
}

// The shared store and where results go.
void storeRows(std::vector<ReplayFlag> &t)
{
    {
        ReplayFlag f =
            text("store", "URL",
                 "Keep the exact and semantic entries and the prefix KV blocks in a shared store: memory, "
                 "redis://HOST:PORT[/DB] or redis-cluster://HOST:PORT[,HOST:PORT...] (docs/fleet.md).",
                 &S::store);
        f.set = [](S &s, const std::string &v) {
            if (!v.empty()) {
                try {
                    checkStoreUrl(v);
                } catch (const Error &e) {
                    bad(std::string("is not a store URL: ") + e.what());
                }
            }
            s.store = v;
        };
        t.push_back(std::move(f));
    }
    t.push_back(integer<S, int>("store-timeout-ms", "MS",
                                "Shared store: connect and command timeout (default 500).",
                                &S::storeTimeoutMs, 1, 600000));
    t.push_back(
        text("store-key-file", "FILE",
             "Shared store: sign every value with an HMAC-SHA256 under the key in this file (16 bytes to "
             "4 KiB) and refuse values without a valid tag (docs/fleet.md).",
             &S::storeKeyFile, Scope::Run));
    t.push_back(toggle("store-flush", "Shared store: remove the workbench's keys before the replay.",
                       &S::storeFlush, true, "store_flush", Scope::Run));
    t.push_back(choice(
        "store-kv-dtype", "TYPE",
        "Shared store: prefix KV blocks travel as f32 (default), bf16 or f16 (half the bytes, values "
        "rounded).",
        &S::storeKvDtype, [](const std::string &v) { return parseFloatType(v); }, floatTypeName,
        "f32, bf16 or f16"));
    t.push_back(text("ledger", "OUT.csv", "Write the per-request ledger as CSV.", &S::ledgerCsv, Scope::Run));
    t.push_back(
        text("outputs", "OUT.jsonl",
             "Write each request's answer as JSONL ({\"id\", \"output\"}; text that is not UTF-8 has its "
             "bad bytes replaced), e.g. for kvwb workload rounds --outputs.",
             &S::outputs, Scope::Run));
    t.push_back(text("save-ledger", "NAME", "Store the ledger in the experiment file as /ledgers/NAME.",
                     &S::ledgerName, Scope::Run));
}

std::vector<ReplayFlag> makeFlags()
{
    std::vector<ReplayFlag> t;
    inputRows(t);
    semanticRows(t);
    kvRows(t);
    limitRows(t);
    gateRows(t);
    storeRows(t);
    return t;
}

} // namespace

bool ReplaySettings::uses(TierKind t) const
{
    return std::find(tiers.begin(), tiers.end(), t) != tiers.end();
}

TierLimits ReplaySettings::limits(TierKind t) const
{
    TierLimits l;
    l.maxEntries = t == TierKind::Exact      ? exactEntries
                   : t == TierKind::Semantic ? semanticEntries
                                             : prefixEntries;
    l.maxBytes = t == TierKind::Exact ? exactBytes : t == TierKind::Semantic ? semanticBytes : prefixBytes;
    l.eviction = eviction;
    l.ttlMs = ttlMs;
    l.shareAcrossTenants = shareTenants;
    return l;
}

KVWB_SETTING_TABLE(ReplaySettings, replayFlags, findReplayFlag, makeFlags)

json replaySettingsToJson(const ReplaySettings &s, std::initializer_list<SettingScope> scopes)
{
    return rowsToJson(replayFlags(), s, scopes);
}

void setReplayFlagFromJson(ReplaySettings &s, const ReplayFlag &f, const json &v)
{
    setRowFromJson(s, f, v);
}

ReplaySettings replaySettingsFromJson(const json &object, const std::string &where,
                                      const std::string &section)
{
    return rowsFromJson(replayFlags(), object, where, section);
}

void checkReplaySettings(const ReplaySettings &s)
{
    const bool knowledge = s.uses(TierKind::Knowledge);
    if (knowledge && s.knowledgeGraphs.empty())
        bad("the knowledge tier needs --knowledge GRAPH.h5 (kvwb knowledge build)");
    if (!knowledge && (!s.knowledgeGraphs.empty() || !s.profiles.empty() || !s.saveKnowledge.empty()))
        bad("--knowledge, --profiles and --save-knowledge need 'knowledge' in --tiers");
    if (!s.ledgerName.empty() && s.experiment.empty())
        bad("--save-ledger needs --experiment");
    if (s.uses(TierKind::Cross) && s.experiment.empty())
        bad("the cross tier needs --experiment (its converter)");
    if (s.eviction == Eviction::Ttl && s.ttlMs <= 0)
        bad("--eviction ttl needs --ttl-ms > 0");
    if (!s.verifier.empty() && !s.uses(TierKind::Semantic))
        bad("--verifier needs 'semantic' in --tiers");
    if (s.verifier.empty() && (s.verifierThreshold != 0 || s.verifierOverrulesGuards))
        bad("--verifier-threshold and --verifier-overrules-guards need --verifier");
    if (s.errorBound == 0 && (s.boundConfidence != ReplaySettings{}.boundConfidence ||
                              s.boundMinUses != ReplaySettings{}.boundMinUses || !s.boundPrior.empty()))
        bad("--bound-confidence, --bound-min-uses and --bound-prior need --error-bound");
    if (!s.prices.empty() &&
        (s.priceIn != ReplaySettings{}.priceIn || s.priceOut != ReplaySettings{}.priceOut))
        bad("--prices and --price-in/--price-out exclude each other: give a preset or file, or the two "
            "prices");
    if (s.store.empty()) {
        if (!s.storeKeyFile.empty())
            bad("--store-key-file needs --store");
        if (s.storeKvDtype != FloatType::F32)
            bad("--store-kv-dtype needs --store");
        if (s.storeFlush)
            bad("--store-flush needs --store");
    }
}

} // namespace kvwb::core
