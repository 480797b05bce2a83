// The settings of a comparison (`kvwb compare`, the window's Compare step: one prompt or a prompt
// set, B from A's converted cache against B from scratch), as one plain type, and its one table
// (core/settings/setting_table.h): the command line's options, and the window's requests are this
// same type. What runs it (models, converters) is app/jobs/compare_job.h's.
//
// Plain values and pure functions; thread-safe.
#pragma once

#include "core/cache/gate_signal.h"
#include "core/cache/recompute_plan.h"
#include "core/settings/setting_table.h"
#include "core/tokenize/token_alignment.h"

#include <nlohmann/json_fwd.hpp>

#include <initializer_list>
#include <string>
#include <vector>

namespace kvwb::core {

struct CompareSettings
{
    // ---- what is compared and where results go
    std::string experiment;            // the experiment file holding the converter
    std::string converter = "default"; // /converters/<name>
    std::string versus;                // a second converter on the same prompts ("" none)
    std::string prompt;                // one prompt
    std::string promptsFile;           // prompts: text lines or JSONL
    bool heldOut = false;              // the converter's own test prompts
    std::string handoff;               // a workload's conversations, A serving the first turns
    std::string saveSamples;           // store every compared prompt as /comparisons/<name>

    // ---- how
    double goodKl = 0.1;       // the gate's precision and recall: a transfer is good at KL <= this
    double minPrecision = 0.9; // per gate signal, the threshold with the highest recall at this precision
    int matchTokens = 4;       // the gate's measured precision: a pass is right when these first tokens match
    bool baselines = false;    // also the raw source KV and a random map of the converter's shape
    int handoffTurn = 1;       // A serves turns 1..K, B the rest
    int turns = 0;             // at most N turns of each conversation (0: all)
    int limit = 0;             // at most N prompts (conversations) (0: all)
    int maxTokens = 32;        // tokens generated per path
    int gateTail = 4;          // prompt positions B recomputes for the quality gate
    GateSignal gateSignal = GateSignal::TailKl;
    double gateThreshold = 0.1; // set with the signal: its default (defaultGateThreshold)
    AlignPolicy alignPolicy = kDefaultAlignPolicy;
    RecomputePlan recompute;     // the share of B's prefix B recomputes itself on the transfer path
    bool recomputeCurve = false; // compare at every share of kRecomputeCurve, one table row each

    // Which prompts: "prompt", "prompts", "held-out", "handoff", or "" when none or several are set.
    std::string source() const;
};

bool operator==(const CompareSettings &x, const CompareSettings &y);

// The shares --recompute-curve compares (1: B's own prefill, the curve's end).
inline constexpr double kRecomputeCurve[] = {0.0, 0.05, 0.1, 0.25, 0.5, 1.0};

using CompareFlag = SettingRow<CompareSettings>;

// Every comparison setting in the order `kvwb compare --help` lists them.
const std::vector<CompareFlag> &compareFlags();
const CompareFlag *findCompareFlag(const std::string &name);

nlohmann::json compareSettingsToJson(const CompareSettings &s,
                                     std::initializer_list<SettingScope> scopes = {SettingScope::Setting,
                                                                                   SettingScope::Input});
void setCompareFlagFromJson(CompareSettings &s, const CompareFlag &flag, const nlohmann::json &value);
CompareSettings compareSettingsFromJson(const nlohmann::json &object, const std::string &where,
                                        const std::string &section);

// Rules between settings: exactly one source of prompts; --handoff-turn and --turns only with
// --handoff, --baselines, --versus and --save-samples not with it; turns after the hand-off.
// Error(InvalidArgument) naming the flags.
void checkCompareSettings(const CompareSettings &s);

} // namespace kvwb::core
