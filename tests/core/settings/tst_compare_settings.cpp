// The comparison settings' table (core/settings/compare_settings.h): unique flags and keys, each row
// reads what it writes, the JSON round trip, the gate signal's own default threshold, and the rules
// between settings (one source of prompts, what goes with --handoff) naming the flags.
#include "core/settings/compare_settings.h"
#include "core/util/error.h"

#include <QTest>

#include <nlohmann/json.hpp>

#include <set>

using namespace kvwb::core;

namespace {

std::string rule(const CompareSettings &s)
{
    try {
        checkCompareSettings(s);
    } catch (const Error &e) {
        return e.what();
    }
    return "(accepted)";
}

} // namespace

class TestCompareSettings : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void rowsAreUniqueAndReadWhatTheyWrite()
    {
        std::set<std::string> names, keys;
        CompareSettings full;
        full.experiment = "e.h5";
        full.converter = "c";
        full.versus = "v";
        full.prompt = "p";
        full.promptsFile = "f.txt";
        full.heldOut = true;
        full.handoff = "w.jsonl";
        full.saveSamples = "s";
        full.goodKl = 0.25;
        full.minPrecision = 0.75;
        full.baselines = true;
        full.handoffTurn = 2;
        full.turns = 5;
        full.limit = 9;
        full.maxTokens = 7;
        full.gateTail = 3;
        full.gateSignal = GateSignal::Nll;
        full.gateThreshold = 2.5;
        full.alignPolicy = AlignPolicy::First;
        full.recompute = {0.25, RecomputePositions::Recent};
        full.recomputeCurve = true;
        full.matchTokens = 8;
        for (const auto &f : compareFlags()) {
            QVERIFY2(names.insert(f.name).second, f.name);
            QVERIFY2(keys.insert(f.key()).second, f.name);
            QCOMPARE(findCompareFlag(f.name), &f);
            CompareSettings s;
            f.set(s, f.kind == SettingKind::Switch ? "" : f.get(full).at(0));
            QVERIFY2(f.get(s) == f.get(full), f.name);
        }
        QCOMPARE(names.size(), size_t(23));
        const auto j =
            compareSettingsToJson(full, {SettingScope::Setting, SettingScope::Input, SettingScope::Run});
        QCOMPARE(j.at("held_out").get<bool>(), true);
        QCOMPARE(j.at("max_tokens").get<int>(), 7);
        QCOMPARE(j.at("pair_policy").get<std::string>(), std::string("first"));
        // the flag's older name: as a flag and as a key of settings written before the rename
        QCOMPARE(findCompareFlag("align-policy"), findCompareFlag("pair-policy"));
        QCOMPARE(
            compareSettingsFromJson(nlohmann::json{{"align_policy", "longest"}}, "x", "compare").alignPolicy,
            AlignPolicy::Longest);
        const auto back = compareSettingsFromJson(compareSettingsToJson(full), "x", "compare");
        QCOMPARE(back.experiment, std::string()); // where it ran is not recorded
        QCOMPARE(back.gateThreshold, 2.5);        // read after the signal's default
        QCOMPARE(back.versus, std::string("v"));
        QVERIFY(!(back == full) && !(CompareSettings{} == full));
    }

    void rulesBetweenSettings()
    {
        CompareSettings s;
        QCOMPARE(rule(s), std::string("give exactly one of --prompt, --prompts, --held-out or --handoff"));
        s.prompt = "Why?";
        QCOMPARE(rule(s), std::string("(accepted)"));
        QCOMPARE(s.source(), std::string("prompt"));
        s.heldOut = true;
        QCOMPARE(s.source(), std::string());
        QVERIFY(rule(s).find("exactly one") != std::string::npos);
        s = {};
        s.heldOut = true;
        s.turns = 3;
        QCOMPARE(rule(s), std::string("--handoff-turn and --turns go with --handoff"));
        s = {};
        s.handoff = "w.jsonl";
        s.baselines = true;
        QCOMPARE(rule(s), std::string("--baselines does not go with --handoff"));
        s.baselines = false;
        s.handoffTurn = 3;
        s.turns = 3;
        QCOMPARE(rule(s), std::string("--turns 3 leaves no turn after the hand-off at turn 3"));
        s.turns = 4;
        QCOMPARE(rule(s), std::string("(accepted)"));
        findCompareFlag("gate-signal")->set(s, "kv_cos");
        QCOMPARE(s.gateThreshold, defaultGateThreshold(GateSignal::KvCos));
    }
};

QTEST_GUILESS_MAIN(TestCompareSettings)
#include "tst_compare_settings.moc"
