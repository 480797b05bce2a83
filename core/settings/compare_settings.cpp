#include "core/settings/compare_settings.h"

#include "core/settings/setting_rows_p.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kvwb::core {

namespace {

using S = CompareSettings;
using namespace settings_detail;

std::vector<CompareFlag> makeFlags()
{
    std::vector<CompareFlag> t;
    t.push_back(
        text("experiment", "EXP.h5", "Experiment file holding the converter.", &S::experiment, Scope::Run));
    t.push_back(text("converter", "NAME", "Converter name under /converters (default 'default').",
                     &S::converter, Scope::Input));
    t.push_back(
        real("good-kl", "X",
             "For the gate's precision and recall: a transfer is good when its KL to scratch is at most X "
             "nats/token (default 0.1).",
             &S::goodKl, 0.0, 1e9));
    t.push_back(real("min-precision", "P",
                     "For each gate signal, report the threshold with the highest recall at precision >= P "
                     "(default 0.9).",
                     &S::minPrecision, 0.0, 1.0));
    t.push_back(integer<S, int>("match-tokens", "N",
                                "For the gate's measured precision: a pass is right when B's first N greedy "
                                "tokens from the converted "
                                "cache are its tokens from scratch (default 4).",
                                &S::matchTokens, 1, 4096));
    t.push_back(
        toggle("baselines",
               "Also run the baselines on the same prompts: the raw source KV (A's layer at the same depth "
               "unchanged, when the KV widths match) and a random map of the converter's shape; the "
               "differences with paired bootstrap 95% intervals.",
               &S::baselines, true, "baselines"));
    t.push_back(text("versus", "NAME",
                     "A second converter run on the same prompts: the differences (this one minus it) with "
                     "paired bootstrap 95% intervals over the prompts.",
                     &S::versus, Scope::Input));
    t.push_back(text("prompt", "STR", "One prompt.", &S::prompt));
    t.push_back(text("prompts", "FILE", "Prompts: text lines or JSONL ('prompt' or 'text').", &S::promptsFile,
                     Scope::Input));
    t.push_back(toggle("held-out", "The converter's own test prompts from the experiment file.", &S::heldOut,
                       true, "held_out", Scope::Input));
    t.push_back(
        text("handoff", "W.jsonl",
             "Multi-turn hand-off: the conversations of a workload file (`kvwb workload sharegpt`), A "
             "serving the first turns and B continuing from A's converted cache; KL and top-1 per turn "
             "against B from scratch.",
             &S::handoff, Scope::Input));
    t.push_back(integer<S, int>("handoff-turn", "K",
                                "With --handoff: A serves turns 1..K, B the rest (default 1).",
                                &S::handoffTurn, 1));
    t.push_back(integer<S, int>(
        "turns", "N", "With --handoff: at most N turns of each conversation (default all).", &S::turns, 0));
    t.push_back(
        integer<S, int>("limit", "N", "At most N prompts (with --handoff: conversations).", &S::limit, 0));
    t.push_back(
        integer<S, int>("max-tokens", "N", "Tokens to generate per path (default 32).", &S::maxTokens, 1));
    t.push_back(integer<S, int>("gate-tail", "N",
                                "Prompt positions B recomputes for the quality gate (default 4).",
                                &S::gateTail, 1));
    t.push_back(
        gateSignalRow<S>("Gate signal: tail_kl (default), kv_cos, attn_cos or nll (see docs/transfer.md)."));
    t.push_back(
        real<S>("recompute", "F",
                "Selective recompute: B recomputes this share of its prefix positions itself, the rest "
                "come from the converted cache (0 default: none; 1: B's own prefill).",
                nested(&S::recompute, &RecomputePlan::share), 0.0, 1.0));
    t.push_back(choice(
        "recompute-positions", "WHICH",
        "Which positions --recompute takes: ends (default: half the first, half the last), first or recent.",
        nested(&S::recompute, &RecomputePlan::positions),
        [](const std::string &v) { return parseRecomputePositions(v); }, recomputePositionsName,
        "ends, first or recent"));
    t.push_back(toggle("recompute-curve",
                       "With a prompt set: compare at every recompute share of 0, 0.05, 0.1, 0.25, 0.5 and 1 "
                       "and print the curve of quality and time against the share.",
                       &S::recomputeCurve, true, "recompute_curve"));
    t.push_back(
        real("gate-threshold", "T",
             "Gate passes when tail_kl or nll <= T, or kv_cos or attn_cos >= T (default 0.1 for tail_kl, "
             "0.9 for kv_cos and attn_cos, 3 for nll).",
             &S::gateThreshold, -1.0, 1e9));
    t.push_back(
        text("save-samples", "NAME",
             "Store every compared prompt (texts, per-token probabilities and KL, timings, gate) in the "
             "experiment file as /comparisons/NAME, for the workbench and reports.",
             &S::saveSamples, Scope::Run));
    {
        // pairs B's tokens with A's; --align-policy, its older name, is still accepted
        CompareFlag f = choice(
            "pair-policy", "POLICY",
            "Prompts A and B tokenise differently: which overlapping A token each B token's row is converted "
            "from: "
            "last (default), first or longest (docs/transfer.md).",
            &S::alignPolicy, [](const std::string &v) { return parseAlignPolicy(v); }, alignPolicyName,
            "first, last or longest");
        f.alias = "align-policy";
        t.push_back(std::move(f));
    }
    return t;
}

} // namespace

std::string CompareSettings::source() const
{
    const int n = int(!prompt.empty()) + int(!promptsFile.empty()) + int(heldOut) + int(!handoff.empty());
    if (n != 1)
        return {};
    return !prompt.empty() ? "prompt" : !promptsFile.empty() ? "prompts" : heldOut ? "held-out" : "handoff";
}

KVWB_SETTING_TABLE(CompareSettings, compareFlags, findCompareFlag, makeFlags)

json compareSettingsToJson(const CompareSettings &s, std::initializer_list<SettingScope> scopes)
{
    return rowsToJson(compareFlags(), s, scopes);
}

void setCompareFlagFromJson(CompareSettings &s, const CompareFlag &f, const json &v)
{
    setRowFromJson(s, f, v);
}

CompareSettings compareSettingsFromJson(const json &object, const std::string &where,
                                        const std::string &section)
{
    return rowsFromJson(compareFlags(), object, where, section);
}

void checkCompareSettings(const CompareSettings &s)
{
    if (s.source().empty())
        bad("give exactly one of --prompt, --prompts, --held-out or --handoff");
    const S defaults;
    if (s.handoff.empty() && (s.handoffTurn != defaults.handoffTurn || s.turns != defaults.turns))
        bad("--handoff-turn and --turns go with --handoff");
    if (!s.handoff.empty()) {
        if (s.baselines)
            bad("--baselines does not go with --handoff");
        if (!s.versus.empty())
            bad("--versus does not go with --handoff");
        if (!s.saveSamples.empty())
            bad("--save-samples does not go with --handoff");
        if (s.turns > 0 && s.turns <= s.handoffTurn)
            bad(fmt::format("--turns {} leaves no turn after the hand-off at turn {}", s.turns,
                            s.handoffTurn));
        if (s.recompute.share > 0 || s.recomputeCurve)
            bad("--recompute and --recompute-curve do not go with --handoff");
    }
    if (s.recomputeCurve && (s.recompute.share > 0 || !s.prompt.empty() || !s.versus.empty()))
        bad("--recompute-curve compares every share itself, on a prompt set: not with --recompute, --prompt "
            "or "
            "--versus");
}

} // namespace kvwb::core
