// The replay settings' one table (core/settings/replay_settings.h): every field of a settings value
// with no default left reaches the JSON and reads back equal, every row's flag and key is unique,
// each row refuses a bad value with what is wrong (the caller names the flag or the field), the gate
// signal sets its own default threshold before --gate-threshold, a project's older keys ("gate",
// tiers as a list) read as before, and the rules between settings name the flags at fault.
#include "core/settings/replay_settings.h"
#include "core/util/error.h"
#include "tests/support/setting_message.h"

#include <QTest>

#include <nlohmann/json.hpp>

#include <set>

using namespace kvwb::core;

namespace {

// Every field away from its default.
ReplaySettings everyFieldSet()
{
    ReplaySettings s;
    s.workload = "w.jsonl";
    s.modelA = "a";
    s.modelB = "b";
    s.experiment = "e.h5";
    s.converter = "ridge";
    s.knowledgeGraphs = {"g.h5", "t1=h.h5"};
    s.profiles = "p.json";
    s.knowledge.clockStartMs = 1700000000000;
    s.saveKnowledge = "out.h5";
    s.storeKeyFile = "key";
    s.storeFlush = true;
    s.ledgerCsv = "l.csv";
    s.outputs = "o.jsonl";
    s.ledgerName = "run1";
    s.tiers = {TierKind::Cross, TierKind::Knowledge, TierKind::Exact};
    s.threshold = -0.25;
    s.embedder = "models/e";
    s.errorBound = 0.05;
    s.boundConfidence = 0.95;
    s.embedQuestion = false;
    s.embedderLayer = 2;
    s.embedderPrefix = "query: ";
    s.prefixBlock = 8;
    s.minCrossTokens = 5;
    s.alignPolicy = AlignPolicy::Longest;
    s.knowledge.candidates = 7;
    s.knowledge.minSimilarity = 0.125;
    s.knowledge.verify = false;
    s.knowledge.ttlMs = 5000;
    s.knowledge.boundary = 3;
    s.exactEntries = 11;
    s.exactBytes = 12;
    s.semanticEntries = 13;
    s.semanticBytes = 14;
    s.prefixEntries = 15;
    s.prefixBytes = 16;
    s.eviction = Eviction::Lfu;
    s.ttlMs = 17;
    s.shareTenants = true;
    s.gateSignal = GateSignal::AttnCos;
    s.gateThreshold = 0.75;
    s.gate = false;
    s.onClock = true;
    s.speed = 2.5;
    s.maxTokens = 9;
    s.limit = 10;
    s.shadow = 0.3;
    s.priceIn = 1.5;
    s.priceOut = 2.5;
    s.prices = "deepseek-chat";
    s.store = "redis://127.0.0.1:6379/2";
    s.storeTimeoutMs = 900;
    s.storeKvDtype = FloatType::BF16;
    return s;
}

std::string messageOf(const ReplayFlag &f, const std::string &value)
{
    return kvwb::test::rowMessage(f, value);
}

} // namespace

class TestReplaySettings : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void everyRowIsUniqueAndComplete()
    {
        std::set<std::string> names, keys;
        for (const auto &f : replayFlags()) {
            QVERIFY2(names.insert(f.name).second, f.name);
            QVERIFY2(keys.insert(f.key()).second, f.name);
            QVERIFY2(std::string(f.help).size() > 10, f.name);
            QVERIFY2(f.set && f.get, f.name);
            QCOMPARE(f.kind == ReplayFlag::Kind::Switch, std::string(f.valueName).empty());
            QCOMPARE(f.kind == ReplayFlag::Kind::Repeated, bool(f.reset));
            QCOMPARE(findReplayFlag(f.name), &f);
        }
        QVERIFY(!findReplayFlag("workers")); // the fleet's own flag, not a replay setting
        // Each row reads what it writes, and no two rows share a field: a value changed through one
        // row changes that row's text only.
        const ReplaySettings base, full = everyFieldSet();
        for (const auto &f : replayFlags()) {
            ReplaySettings s;
            if (f.kind == ReplayFlag::Kind::Repeated)
                for (const auto &v : f.get(full))
                    f.set(s, v);
            else if (f.kind == ReplayFlag::Kind::List)
                f.set(s, "cross,knowledge,exact");
            else
                f.set(s, f.get(full).at(0));
            QVERIFY2(f.get(s) == f.get(full), f.name);
            for (const auto &g : replayFlags())
                if (&g != &f && g.name != std::string("gate-threshold")) // the signal sets its default
                    QVERIFY2(g.get(s) == g.get(base), (std::string(f.name) + " changed " + g.name).c_str());
        }
    }

    void jsonRoundTrip()
    {
        const ReplaySettings full = everyFieldSet();
        QVERIFY(!(full == ReplaySettings{}));
        const auto all = replaySettingsToJson(
            full, {ReplayFlag::Scope::Setting, ReplayFlag::Scope::Input, ReplayFlag::Scope::Run});
        QCOMPARE(all.size(), replayFlags().size());
        QCOMPARE(all.at("tiers"), nlohmann::json({"cross", "knowledge", "exact"}));
        QCOMPARE(all.at("gate").get<bool>(), false);             // --no-gate, stored as what it sets
        QCOMPARE(all.at("knowledge_verify").get<bool>(), false); // --no-verify
        QCOMPARE(all.at("speed").get<double>(), 2.5);
        QCOMPARE(all.at("exact_entries").get<int64_t>(), int64_t(11));
        QCOMPARE(all.at("store_kv_dtype").get<std::string>(), std::string("bf16"));
        // Settings and inputs (what a ledger records) read back equal on those rows.
        const auto recorded = replaySettingsToJson(full);
        QVERIFY(!recorded.contains("ledger") && !recorded.contains("model_a") &&
                !recorded.contains("experiment"));
        QVERIFY(recorded.contains("workload") && recorded.contains("converter") &&
                recorded.contains("threshold"));
        const ReplaySettings back = replaySettingsFromJson(recorded, "x.json", "settings");
        for (const auto &f : replayFlags())
            QVERIFY2(f.scope == ReplayFlag::Scope::Run ? f.get(back) == f.get(ReplaySettings{})
                                                       : f.get(back) == f.get(full),
                     f.name);
        // A project's section: the setting rows only.
        const auto project = replaySettingsToJson(full, {ReplayFlag::Scope::Setting});
        QVERIFY(!project.contains("workload") && project.contains("tiers"));
    }

    void olderProjectKeysReadAsBefore()
    {
        const auto s =
            replaySettingsFromJson(nlohmann::json::parse(R"({"tiers": ["exact", "cross"], "gate": false,
            "gate_signal": "kv_cos", "gate_threshold": 0.875, "max_tokens": 16, "limit": 300,
            "store_kv_dtype": "f16", "threshold": 1})"),
                                   "p.kvwb", "replay");
        QCOMPARE(s.tiers, (std::vector<TierKind>{TierKind::Exact, TierKind::Cross}));
        QCOMPARE(s.gate, false);
        QCOMPARE(s.gateSignal, GateSignal::KvCos);
        QCOMPARE(s.gateThreshold, 0.875); // read after the signal, which set its own default first
        QCOMPARE(s.maxTokens, 16);
        QCOMPARE(s.limit, 300);
        QCOMPARE(s.storeKvDtype, FloatType::F16);
        QCOMPARE(s.threshold, 1.0);
        QCOMPARE(replaySettingsFromJson(nlohmann::json::parse(R"({"tiers": []})"), "p", "r").tiers.size(),
                 size_t(0));
        try {
            replaySettingsFromJson(nlohmann::json::parse(R"({"block": 0})"), "p.kvwb", "replay");
            QFAIL("no error");
        } catch (const Error &e) {
            QCOMPARE(e.code(), ErrorCode::Config);
            QCOMPARE(std::string(e.what()),
                     std::string("p.kvwb: field 'replay.block' expects an integer in [1, 65536], "
                                 "got '0'"));
        }
    }

    void rowsRefuseBadValues()
    {
        const auto row = [](const char *name) { return *findReplayFlag(name); };
        QCOMPARE(
            messageOf(row("tiers"), "exact,bogus"),
            std::string("expects a comma-separated list of exact, semantic, prefix, cross, knowledge (or "
                        "'none'), got 'bogus'"));
        QCOMPARE(messageOf(row("tiers"), "exact,exact"), std::string("names 'exact' twice"));
        QCOMPARE(messageOf(row("threshold"), "1.5"), std::string("expects a number in [-1, 1], got '1.5'"));
        QCOMPARE(messageOf(row("threshold"), "nan"), std::string("expects a number in [-1, 1], got 'nan'"));
        QCOMPARE(messageOf(row("threshold"), "0.5x"), std::string("expects a number in [-1, 1], got '0.5x'"));
        QCOMPARE(messageOf(row("block"), "70000"),
                 std::string("expects an integer in [1, 65536], got '70000'"));
        QCOMPARE(messageOf(row("min-cross-tokens"), "0"), std::string("expects an integer >= 1, got '0'"));
        QCOMPARE(messageOf(row("exact-bytes"), "-1"),
                 std::string("expects a non-negative integer, got '-1'"));
        QCOMPARE(messageOf(row("eviction"), "random"),
                 std::string("expects lru, lfu, fifo or ttl, got 'random'"));
        QCOMPARE(messageOf(row("gate-signal"), "kl"),
                 std::string("expects tail_kl, kv_cos, attn_cos or nll, got 'kl'"));
        QCOMPARE(messageOf(row("store-kv-dtype"), "f8"), std::string("expects f32, bf16 or f16, got 'f8'"));
        QCOMPARE(messageOf(row("embed"), "answer"), std::string("expects question or prompt, got 'answer'"));
        QCOMPARE(messageOf(row("error-bound"), "1"),
                 std::string("expects a number in [1e-06, 0.999999] (0: off), got '1'"));
        QVERIFY(messageOf(row("store"), "redis:nohost").rfind("is not a store URL", 0) == 0);
        QCOMPARE(messageOf(row("embedder"), ""),
                 std::string("is empty (lexical, lexical-idf, model or an embedding model's path)"));
        QCOMPARE(messageOf(row("tiers"), "none"), std::string("(accepted)"));
    }

    void gateSignalSetsItsDefaultThreshold()
    {
        ReplaySettings s;
        findReplayFlag("gate-signal")->set(s, "kv_cos");
        QCOMPARE(s.gateThreshold, defaultGateThreshold(GateSignal::KvCos));
        findReplayFlag("gate-threshold")->set(s, "0.5");
        QCOMPARE(s.gateThreshold, 0.5);
    }

    void rulesBetweenSettings()
    {
        const auto rule = [](ReplaySettings s) -> std::string {
            try {
                checkReplaySettings(s);
            } catch (const Error &e) {
                return e.what();
            }
            return "(accepted)";
        };
        QCOMPARE(rule({}), std::string("(accepted)"));
        ReplaySettings s;
        s.tiers = {TierKind::Knowledge};
        QVERIFY(rule(s).find("the knowledge tier needs --knowledge") == 0);
        s = {};
        s.profiles = "p.json";
        QVERIFY(rule(s).find("need 'knowledge' in --tiers") != std::string::npos);
        s = {};
        s.ledgerName = "x";
        QCOMPARE(rule(s), std::string("--save-ledger needs --experiment"));
        s = {};
        const std::string boundRule =
            "--bound-confidence, --bound-min-uses and --bound-prior need --error-bound";
        s.boundConfidence = 0.95;
        QCOMPARE(rule(s), boundRule);
        s = {};
        s.boundMinUses = 5;
        QCOMPARE(rule(s), boundRule);
        s = {};
        s.boundPrior = "embedder";
        QCOMPARE(rule(s), boundRule);
        s = {};
        s.verifierThreshold = 0.7;
        s.tiers = {TierKind::Semantic};
        QCOMPARE(rule(s),
                 std::string("--verifier-threshold and --verifier-overrules-guards need --verifier"));
        s = {};
        s.verifier = "/v";
        s.tiers = {TierKind::Exact};
        QCOMPARE(rule(s), std::string("--verifier needs 'semantic' in --tiers"));
        s = {};
        s.prices = "deepseek-chat";
        s.priceIn = 1;
        QVERIFY(rule(s).find("--prices and --price-in/--price-out exclude each other") == 0);
        s = {};
        s.storeFlush = true;
        QCOMPARE(rule(s), std::string("--store-flush needs --store"));
        s.store = "memory";
        QCOMPARE(rule(s), std::string("(accepted)"));
    }
};

QTEST_GUILESS_MAIN(TestReplaySettings)
#include "tst_replay_settings.moc"
