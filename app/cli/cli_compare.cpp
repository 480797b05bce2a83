#include "app/cli/cli_compare.h"

#include "app/cli/cli_converter_options.h"
#include "app/cli/cli_settings.h"
#include "app/cli/engine_options.h"
#include "app/jobs/compare_job.h"
#include "app/jobs/fit_job.h"
#include "app/jobs/handoff_job.h"
#include "core/metrics/bootstrap.h"
#include "core/metrics/gate_curve.h"
#include "core/metrics/text_metrics.h"
#include "core/model/random_model.h"
#include "core/settings/compare_settings.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/tokenize/token_alignment.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/util/text_util.h"
#include "core/workload/workload.h"
#include "gpu/align/alignment.h"
#include "gpu/model/device.h"
#include "gpu/transfer/compare.h"
#include "gpu/transfer/transfer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include <unistd.h>

namespace kvwb::app {

using namespace kvwb::app::cli;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// One turn number of a hand-off: the conversations' mean KL and top-1 with 95% intervals, and the
// KL change against each conversation's first turn after the hand-off.
struct HandoffTurn
{
    int turn = 0, conversations = 0;
    double kl = 0, top1 = 0;
    std::optional<core::Interval> klCi, top1Ci, change;
};

// byTurn: per turn number, per conversation index, (KL, top-1).
std::vector<HandoffTurn> handoffTurns(std::map<int, std::map<size_t, std::pair<double, double>>> byTurn,
                                      int firstTurn)
{
    const auto interval = [](auto &&f) -> std::optional<core::Interval> {
        try {
            return f();
        } catch (const core::Error &) { // fewer than 2 conversations, or a value that is not finite
            return std::nullopt;
        }
    };
    std::vector<HandoffTurn> table;
    for (const auto &[turn, perConversation] : byTurn) {
        HandoffTurn row;
        row.turn = turn;
        row.conversations = int(perConversation.size());
        std::vector<double> kl, top1, now, before;
        for (const auto &[i, v] : perConversation) {
            kl.push_back(v.first);
            top1.push_back(v.second);
            // paired with the same conversation's first turn after the hand-off
            const auto &first = byTurn[firstTurn];
            if (turn != firstTurn && first.count(i)) {
                now.push_back(v.first);
                before.push_back(first.at(i).first);
            }
        }
        row.kl = std::accumulate(kl.begin(), kl.end(), 0.0) / double(kl.size());
        row.top1 = std::accumulate(top1.begin(), top1.end(), 0.0) / double(top1.size());
        row.klCi = interval([&] { return core::meanInterval(kl); });
        row.top1Ci = interval([&] { return core::meanInterval(top1); });
        if (turn != firstTurn)
            row.change = interval([&] { return core::meanDifference(now, before); });
        table.push_back(row);
    }
    return table;
}

// `kvwb compare --handoff`: conversations served by A for their first turns and continued by B from
// A's converted cache, per turn against B from scratch (docs/transfer.md, "Multi-turn hand-off").
int compareHandoff(const QCommandLineParser &p, const core::CompareSettings &compare, const fs::path &path,
                   const core::ExperimentReader &file, const core::ConverterRecord &record)
{
    jobs::HandoffSettings settings;
    settings.handoffTurn = compare.handoffTurn;
    settings.maxTurns = compare.turns;
    settings.maxTokens = compare.maxTokens;
    std::vector<std::string> warnings;
    const fs::path workload = compare.handoff;
    auto read = core::readWorkloadJsonl(workload);
    for (const auto &w : read.warnings.messages())
        warnings.push_back(w);
    auto conversations = jobs::conversationsOf(read.requests, warnings);
    const auto flushWarnings = [&] {
        for (const auto &w : warnings)
            std::fprintf(stderr, "warning: %s\n", w.c_str());
        warnings.clear();
    };
    if (compare.limit > 0)
        conversations.resize(std::min(conversations.size(), size_t(compare.limit)));
    if (conversations.empty())
        flushWarnings();
    if (conversations.empty())
        throw core::Error(
            core::ErrorCode::InvalidArgument,
            fmt::format("{}: no conversation (requests of one tenant and user whose prompts grow "
                        "turn by turn, as `kvwb workload sharegpt` writes them)",
                        workload.string()));
    const auto lo = loadOptions(p);
    auto a = loadFileModel(file, core::ModelRole::A, p, lo);
    auto b = loadFileModel(file, core::ModelRole::B, p, lo);
    const auto conv = gpu::Converter::create(record, *a, *b);
    const auto tokA = loadModelTokenizer(*a), tokB = loadModelTokenizer(*b);
    const bool asJson = p.isSet("json");
    InterruptScope ctrlC;
    json rows = json::array();
    // per turn number: the conversations' mean KL and top-1, by conversation index
    std::map<int, std::map<size_t, std::pair<double, double>>> byTurn;
    int done = 0;
    for (size_t i = 0; i < conversations.size() && !InterruptScope::interrupted(); ++i) {
        jobs::HandoffOutcome o;
        try {
            o = jobs::runHandoff(*a, *tokA, *b, *tokB, conv, conversations[i], settings);
        } catch (const core::Error &e) {
            if (e.code() != core::ErrorCode::InvalidArgument)
                throw;
            warnings.push_back(fmt::format("conversation {} skipped: {}", conversations[i].name, e.what()));
            continue;
        }
        ++done;
        json turns = json::array();
        for (const auto &t : o.turns) {
            byTurn[t.turn][i] = {t.meanKl, t.top1};
            turns.push_back({{"turn", t.turn},
                             {"answer_tokens", t.answerTokens},
                             {"kl", t.meanKl},
                             {"kl_max", *std::max_element(t.kl.begin(), t.kl.end())},
                             {"top1", t.top1}});
        }
        rows.push_back({{"conversation", conversations[i].name},
                        {"turns_available", conversations[i].prompts.size()},
                        {"transcript_tokens", o.transcriptTokens},
                        {"handoff_tokens", o.handoffTokens},
                        {"turns", turns}});
        if (!asJson)
            std::fprintf(stderr, "\rhanded off %d/%zu conversations", done, conversations.size());
    }
    if (!asJson && done > 0)
        std::fprintf(stderr, "\n");
    flushWarnings();
    if (done == 0)
        throw core::Error(core::ErrorCode::InvalidArgument, "no conversation could be compared");
    const auto intervalJson = [](const std::optional<core::Interval> &i) {
        return i ? json{{"estimate", jsonNumber(i->estimate)},
                        {"lo", jsonNumber(i->lo)},
                        {"hi", jsonNumber(i->hi)}}
                 : json(nullptr);
    };
    const int firstTurn = settings.handoffTurn + 1;
    const std::vector<HandoffTurn> table = handoffTurns(byTurn, firstTurn);
    json summaryTurns = json::array();
    for (const auto &row : table)
        summaryTurns.push_back({{"turn", row.turn},
                                {"conversations", row.conversations},
                                {"kl", row.kl},
                                {"top1", row.top1},
                                {"kl_ci", intervalJson(row.klCi)},
                                {"top1_ci", intervalJson(row.top1Ci)},
                                {"kl_change_vs_first", intervalJson(row.change)}});
    if (asJson) {
        const json summary = {{"conversations", done},
                              {"handoff_turn", settings.handoffTurn},
                              {"level", 0.95},
                              {"resamples", core::BootstrapOptions{}.resamples},
                              {"turns", summaryTurns}};
        std::printf("%s\n", json{{"experiment", path.string()},
                                 {"converter", record.name},
                                 {"workload", workload.string()},
                                 {"handoff_turn", settings.handoffTurn},
                                 {"max_turns", settings.maxTurns},
                                 {"max_tokens", settings.maxTokens},
                                 {"device", gpu::deviceName(lo.device)},
                                 {"conversations", rows},
                                 {"summary", summary}}
                                .dump(2, ' ', false, json::error_handler_t::replace)
                                .c_str());
        return 0;
    }
    std::printf("\n%d conversations, converter '%s': A serves turns 1..%d, B continues from A's converted "
                "cache; teacher-forced on each conversation, B's scratch answer to its last turn (%d tokens, "
                "greedy)\n\n",
                done, record.name.c_str(), settings.handoffTurn, settings.maxTokens);
    std::printf(
        "| turn | conversations | KL(scratch || transfer), 95%% CI | top-1, 95%% CI | KL minus turn %d's, "
        "95%% CI |\n|--:|--:|--:|--:|--:|\n",
        firstTurn);
    const auto cell = [](const std::optional<core::Interval> &i, double plain, int digits) {
        return i ? core::formatInterval(*i, digits) : fmt::format("{:.{}f}", plain, digits);
    };
    for (const auto &row : table)
        std::printf("| %d | %d | %s | %s | %s |\n", row.turn, row.conversations,
                    cell(row.klCi, row.kl, 4).c_str(), cell(row.top1Ci, row.top1, 3).c_str(),
                    row.turn == firstTurn ? ""
                    : row.change          ? core::formatInterval(*row.change, 4).c_str()
                                          : "n/a");
    return 0;
}

// What the gate's signals are judged against: a transfer is good when its KL to scratch is at most
// goodKl; per signal, the threshold with the highest recall at precision >= minPrecision.
struct GateQualityGoal
{
    double goodKl = 0.1;
    double minPrecision = 0.9;
};

// Per-prompt series of a compared set, in prompt order.
struct CompareSeries
{
    std::vector<double> kl, top1, rougeL, rougeLA, klFloor, top1Floor, ttftScratch, ttftTransfer, ttftCached,
        ttftGated, kvCos, tailKl, nll, attnCos, klPassed, klFailed, gatedKl;
    int identical = 0, passed = 0, crossTokenizer = 0;

    explicit CompareSeries(const jobs::CompareSetRun &run)
    {
        for (const auto &c : run.prompts) {
            const auto &sample = c.outcome.sample;
            const auto &gate = c.outcome.gate;
            kl.push_back(sample.meanKl);
            top1.push_back(sample.top1);
            rougeL.push_back(sample.rougeL);
            rougeLA.push_back(c.rougeLA);
            klFloor.push_back(sample.klNoPrefix);
            top1Floor.push_back(c.outcome.top1NoPrefix);
            ttftScratch.push_back(sample.scratch.ttftMs);
            ttftTransfer.push_back(sample.transfer.ttftMs);
            ttftCached.push_back(c.outcome.ttftCachedMs);
            ttftGated.push_back(c.outcome.ttftGatedMs);
            kvCos.push_back(gate.kvCos);
            tailKl.push_back(gate.tailKl);
            nll.push_back(gate.nll);
            attnCos.push_back(gate.attnCos);
            (gate.passed ? klPassed : klFailed).push_back(sample.meanKl);
            gatedKl.push_back(gate.passed ? sample.meanKl : 0.0);
            identical += sample.firstDivergence < 0 ? 1 : 0;
            passed += gate.passed ? 1 : 0;
            crossTokenizer += c.tokens.crossTokenizer() ? 1 : 0;
        }
    }
    const std::vector<double> &signal(gpu::GateSignal s) const
    {
        switch (s) {
        case gpu::GateSignal::KvCos:
            return kvCos;
        case gpu::GateSignal::Nll:
            return nll;
        case gpu::GateSignal::AttnCos:
            return attnCos;
        case gpu::GateSignal::TailKl:
            break;
        }
        return tailKl;
    }
};

double meanOf(const std::vector<double> &v)
{
    return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

double medianOf(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

json intervalJson(const std::optional<core::Interval> &i)
{
    return i ? json{{"estimate", jsonNumber(i->estimate)},
                    {"lo", jsonNumber(i->lo)},
                    {"hi", jsonNumber(i->hi)}}
             : json(nullptr);
}

json pointJson(const std::optional<core::GatePoint> &g)
{
    return g ? json{{"threshold", jsonNumber(g->threshold)},
                    {"pass_rate", jsonNumber(g->passRate)},
                    {"precision", jsonNumber(g->precision)},
                    {"recall", jsonNumber(g->recall)}}
             : json(nullptr);
}

// The gate's signals against "KL <= goodKl": precision and recall at the threshold in use, and for
// every signal the threshold with the highest recall at the wanted precision.
struct GateQuality
{
    GateQualityGoal goal;
    std::optional<core::GatePoint> atThreshold;
    std::vector<std::pair<std::string, std::optional<core::GatePoint>>> best; // per signal
    json json_;
};

GateQuality gateQuality(const jobs::CompareSetRun &run, const gpu::CompareOptions &co,
                        const GateQualityGoal &goal)
{
    const CompareSeries series(run);
    std::vector<bool> good;
    for (double kl : series.kl)
        good.push_back(kl <= goal.goodKl);
    GateQuality q;
    q.goal = goal;
    json perSignal = json::object();
    for (gpu::GateSignal sig : core::kGateSignals) {
        const auto &values = series.signal(sig);
        const bool higher = core::gateHigherIsBetter(sig);
        std::vector<double> finite;
        std::vector<bool> goodFinite;
        for (size_t i = 0; i < values.size(); ++i)
            if (std::isfinite(values[i])) {
                finite.push_back(values[i]);
                goodFinite.push_back(good[i]);
            }
        const auto curve = core::gateCurve(finite, goodFinite, higher);
        const auto best = core::bestThreshold(curve, goal.minPrecision);
        json points = json::array();
        for (const auto &pt : curve)
            points.push_back(pointJson(pt));
        if (sig == co.gateSignal)
            q.atThreshold = core::gatePoint(finite, goodFinite, co.gateThreshold, higher);
        perSignal[gpu::gateSignalName(sig)] = {{"curve", points}, {"best", pointJson(best)}};
        q.best.emplace_back(gpu::gateSignalName(sig), best);
    }
    q.json_ = {{"good_kl", goal.goodKl},
               {"good_rate", double(std::count(good.begin(), good.end(), true)) / double(good.size())},
               {"min_precision", goal.minPrecision},
               {"at_threshold", pointJson(q.atThreshold)},
               {"signals", perSignal}};
    return q;
}

// One prompt's row of `kvwb compare --json`.
json answerJson(const std::optional<core::AnswerHits> &hits)
{
    return hits ? json{{"scratch", hits->scratch}, {"transfer", hits->transfer}, {"a", hits->a}}
                : json(nullptr);
}

json comparedPromptJson(const jobs::ComparedPrompt &c, const std::string &text)
{
    const auto &sample = c.outcome.sample;
    const auto &gate = c.outcome.gate;
    return {{"prompt", text},
            {"prompt_tokens", c.tokens.idsB.size()},
            {"prompt_tokens_a", c.tokens.idsA.size()},
            {"token_alignment", c.tokens.crossTokenizer() ? core::alignPolicyName(c.tokens.policy) : "none"},
            {"text_scratch", sample.scratch.text},
            {"text_transfer", sample.transfer.text},
            {"text_a", sample.a.text},
            {"first_divergence", sample.firstDivergence},
            {"kl", sample.meanKl},
            {"kl_max", sample.transfer.kl.empty()
                           ? 0.0
                           : *std::max_element(sample.transfer.kl.begin(), sample.transfer.kl.end())},
            {"top1", sample.top1},
            {"kl_no_prefix", sample.klNoPrefix},
            {"top1_no_prefix", c.outcome.top1NoPrefix},
            {"rouge_l", sample.rougeL},
            {"rouge_l_a", c.rougeLA},
            {"ttft_ms_scratch", sample.scratch.ttftMs},
            {"ttft_ms_transfer", sample.transfer.ttftMs},
            {"ttft_ms_transfer_cached", c.outcome.ttftCachedMs},
            {"ttft_ms_gated", c.outcome.ttftGatedMs},
            {"prefill_ms_a", sample.sourcePrefillMs},
            {"convert_ms", sample.convertMs},
            {"speedup", sample.scratch.ttftMs / sample.transfer.ttftMs},
            {"speedup_cached", sample.scratch.ttftMs / c.outcome.ttftCachedMs},
            {"answer", answerJson(core::answerHits(sample))},
            {"gate",
             {{"signal", gpu::gateSignalName(gate.signal)},
              {"value", gate.value},
              {"kv_cos", gate.kvCos},
              {"tail_kl", gate.tailKl},
              {"nll", gate.nll},
              {"attn_cos", gate.attnCos},
              {"tail", gate.tail},
              {"threshold", gate.threshold},
              {"passed", gate.passed},
              {"decision", gate.passed ? "transfer" : "fallback_prefill"},
              {"ms", gate.ms}}}};
}

// After each compared prompt: its texts when the set has one prompt, else the count; the gate's
// decision for every prompt.
void printComparedPrompt(const jobs::ComparedPrompt &c, const std::vector<std::string> &texts, size_t done,
                         size_t total, const gpu::CompareOptions &co, bool asJson)
{
    const auto &sample = c.outcome.sample;
    const auto &gate = c.outcome.gate;
    if (!asJson) {
        if (total == 1)
            std::printf("prompt: %s\n\nB scratch : %s\nB transfer: %s\nA itself  : %s\n\n",
                        texts[c.index].c_str(), sample.scratch.text.c_str(), sample.transfer.text.c_str(),
                        sample.a.text.c_str());
        else
            std::fprintf(stderr, "\rcompared %zu/%zu prompts", done, total);
    }
    const bool higherIsBetter = core::gateHigherIsBetter(co.gateSignal);
    fmt::print(stderr, "{}gate: prompt {} {} {:.4f} {} {:.4f} -> {}\n", asJson || total == 1 ? "" : "\n",
               c.index, gpu::gateSignalName(co.gateSignal), gate.value,
               gate.passed ? (higherIsBetter ? ">=" : "<=") : (higherIsBetter ? "<" : ">"), co.gateThreshold,
               gate.passed ? "use the converted cache" : "fall back to B's own prefill");
}

// The summary of `kvwb compare --json`: means, medians, the baselines' and --versus' paired
// intervals, the gate's pass rate, quality and correlations (reported as they are).
json compareSummaryJson(const jobs::CompareSetRun &run, const jobs::CompareSetOptions &o,
                        const GateQuality &gate)
{
    const CompareSeries x(run);
    const auto s = jobs::summarizeCompareSet(run);
    const double done = double(run.prompts.size());
    json others = json::object();
    for (const auto &d : s.others)
        others[d.key] = {{"converter", d.converter},
                         {"kl", d.kl},
                         {"top1", d.top1},
                         {"rouge_l", d.rougeL},
                         {"kl_difference", intervalJson(d.klDifference)},
                         {"top1_difference", intervalJson(d.top1Difference)},
                         {"rouge_l_difference", intervalJson(d.rougeLDifference)},
                         {"kl_gap_closed_vs_it", intervalJson(d.klGapClosed)}};
    const auto otherOf = [&](const char *key) { return others.contains(key) ? others[key] : json(nullptr); };
    return {{"prompts", run.prompts.size()},
            {"prompts_token_aligned", x.crossTokenizer},
            {"recompute",
             {{"share", o.compare.recompute.share},
              {"positions", core::recomputePositionsName(o.compare.recompute.positions)}}},
            {"align_policy", core::alignPolicyName(o.alignPolicy)},
            {"versus", otherOf("versus")},
            {"baselines",
             {{"level", 0.95},
              {"resamples", core::BootstrapOptions{}.resamples},
              {"kl_gap_closed_vs_no_prefix", intervalJson(s.klGapClosed)},
              {"kl_gap_closed_vs_no_prefix_first8", intervalJson(s.klGapClosedFirst)},
              {"retention_above_destroyed_cache", otherOf("shuffled_positions").is_null()
                                                      ? json(nullptr)
                                                      : otherOf("shuffled_positions")["kl_gap_closed_vs_it"]},
              {"top1_gain_vs_no_prefix", intervalJson(s.top1Gain)},
              {"rouge_l_gain_vs_a", intervalJson(s.rougeLGainVsA)},
              {"raw_source_kv", otherOf("raw_source_kv")},
              {"random_map", otherOf("random_map")},
              {"shuffled_positions", otherOf("shuffled_positions")}}},
            {"answers", s.answered == 0 ? json(nullptr)
                                        : json{{"prompts", s.answered},
                                               {"found_scratch", s.answerScratch},
                                               {"found_transfer", s.answerTransfer},
                                               {"found_a", s.answerA},
                                               {"transfer_minus_scratch", intervalJson(s.answerDifference)}}},
            {"kl", s.kl},
            {"top1", s.top1},
            {"kl_no_prefix", s.klNoPrefix},
            {"kl_first8", s.klFirst},
            {"kl_no_prefix_first8", s.klNoPrefixFirst},
            {"top1_no_prefix", s.top1NoPrefix},
            {"rouge_l", s.rougeL},
            {"rouge_l_a", s.rougeLA},
            {"identical_outputs", x.identical / done},
            {"ttft_ms_scratch", medianOf(x.ttftScratch)},
            {"ttft_ms_transfer", medianOf(x.ttftTransfer)},
            {"ttft_ms_transfer_cached", medianOf(x.ttftCached)},
            {"ttft_ms_gated", medianOf(x.ttftGated)},
            {"speedup", medianOf(x.ttftScratch) / medianOf(x.ttftTransfer)},
            {"speedup_cached", medianOf(x.ttftScratch) / medianOf(x.ttftCached)},
            {"gate",
             {{"signal", gpu::gateSignalName(o.compare.gateSignal)},
              {"threshold", o.compare.gateThreshold},
              {"tail", o.compare.gateTail},
              {"pass_rate", x.passed / done},
              {"first_tokens",
               {{"tokens", s.matchTokens},
                {"passed", s.passed},
                {"passed_matching", s.passedMatching},
                {"precision", s.gatePrecision() ? json(*s.gatePrecision()) : json(nullptr)},
                {"matching_rate", s.matching / done}}},
              {"kl_first_token", s.klFirstToken},
              {"quality", gate.json_},
              {"kl_gated", meanOf(x.gatedKl)},
              {"kl_passed", x.klPassed.empty() ? json(nullptr) : json(meanOf(x.klPassed))},
              {"kl_failed", x.klFailed.empty() ? json(nullptr) : json(meanOf(x.klFailed))},
              {"spearman_kv_cos_kl", jsonNumber(core::spearman(x.kvCos, x.kl))},
              {"spearman_tail_kl_kl", jsonNumber(core::spearman(x.tailKl, x.kl))},
              {"spearman_nll_kl", jsonNumber(core::spearman(x.nll, x.kl))},
              {"spearman_attn_cos_kl", jsonNumber(core::spearman(x.attnCos, x.kl))},
              {"pearson_kv_cos_kl", jsonNumber(core::pearson(x.kvCos, x.kl))},
              {"pearson_tail_kl_kl", jsonNumber(core::pearson(x.tailKl, x.kl))},
              {"pearson_nll_kl", jsonNumber(core::pearson(x.nll, x.kl))},
              {"pearson_attn_cos_kl", jsonNumber(core::pearson(x.attnCos, x.kl))}}}};
}

// The summary as a Markdown table.
void printCompareSummary(const jobs::CompareSetRun &run, const std::string &converter,
                         const gpu::CompareOptions &co, const GateQuality &gate)
{
    const CompareSeries x(run);
    const auto s = jobs::summarizeCompareSet(run);
    const int done = int(run.prompts.size());
    std::printf("\n%d prompts, converter '%s', %d tokens each (greedy)\n\n", done, converter.c_str(),
                co.maxTokens);
    std::printf("| metric | value |\n|:--|--:|\n");
    std::printf("| KL(scratch || transfer), nats/token | %.4f |\n", s.kl);
    std::printf("| top-1 agreement | %.3f |\n", s.top1);
    std::printf("| floor: KL / top-1 with no prefix at all | %.4f / %.3f |\n", s.klNoPrefix, s.top1NoPrefix);
    std::printf("| ROUGE-L transfer vs scratch | %.3f |\n", s.rougeL);
    std::printf("| ROUGE-L A vs B scratch | %.3f |\n", s.rougeLA);
    const auto cell = [](const std::optional<core::Interval> &i) {
        return i ? core::formatInterval(*i) : std::string("n/a (fewer than 2 prompts)");
    };
    std::printf("| KL gap closed vs no prefix, 1 - KL / KL(no prefix), 95%% CI over prompts | %s |\n",
                cell(s.klGapClosed).c_str());
    std::printf("| first 8 tokens: KL / no prefix / gap closed, 95%% CI | %.4f / %.4f / %s |\n", s.klFirst,
                s.klNoPrefixFirst, cell(s.klGapClosedFirst).c_str());
    std::printf("| top-1 gain over no prefix, 95%% CI | %s |\n", cell(s.top1Gain).c_str());
    if (s.answered > 0)
        std::printf(
            "| expected answer given (%d prompts): scratch / transfer / A; transfer - scratch, 95%% CI | "
            "%.3f / %.3f / %.3f; %s |\n",
            s.answered, s.answerScratch, s.answerTransfer, s.answerA, cell(s.answerDifference).c_str());
    std::printf("| ROUGE-L gain over answering with A, 95%% CI | %s |\n", cell(s.rougeLGainVsA).c_str());
    for (const auto &d : s.others) {
        const char *what = d.key == "versus"               ? ""
                           : d.key == "raw_source_kv"      ? "baseline, raw source KV: "
                           : d.key == "shuffled_positions" ? "baseline, its rows at shuffled positions: "
                                                           : "baseline, random map: ";
        std::printf("| %s'%s': KL / top-1 / ROUGE-L | %.4f / %.3f / %.3f |\n", what, d.converter.c_str(),
                    d.kl, d.top1, d.rougeL);
        std::printf(
            "| KL minus '%s' (negative: this one is closer to scratch), 95%% CI | %s |\n",
            d.converter.c_str(),
            (d.klDifference ? core::formatInterval(*d.klDifference, 4) : cell(d.klDifference)).c_str());
        std::printf("| top-1 minus '%s', 95%% CI | %s |\n", d.converter.c_str(),
                    cell(d.top1Difference).c_str());
        if (d.key == "shuffled_positions")
            std::printf(
                "| retention above the destroyed cache: 1 - KL / KL(shuffled positions), 95%% CI | %s |\n",
                cell(d.klGapClosed).c_str());
        std::printf("| ROUGE-L minus '%s', 95%% CI | %s |\n", d.converter.c_str(),
                    cell(d.rougeLDifference).c_str());
    }
    std::printf("| identical outputs | %.3f |\n", double(x.identical) / done);
    std::printf("| TTFT scratch (median ms) | %.2f |\n", medianOf(x.ttftScratch));
    std::printf("| TTFT transfer, A prefill + convert (ms) | %.2f |\n", medianOf(x.ttftTransfer));
    std::printf("| TTFT transfer, A's KV cached (ms) | %.2f |\n", medianOf(x.ttftCached));
    std::printf("| TTFT with the gate: A prefill + gate + transfer or fallback (ms) | %.2f |\n",
                medianOf(x.ttftGated));
    std::printf("| gate (%s, threshold %g) pass rate | %.3f |\n", gpu::gateSignalName(co.gateSignal),
                co.gateThreshold, double(x.passed) / done);
    std::printf("| gate precision: passes whose first %d tokens are scratch's | %s |\n", s.matchTokens,
                s.gatePrecision()
                    ? fmt::format("{:.3f} ({} of {})", *s.gatePrecision(), s.passedMatching, s.passed).c_str()
                    : "n/a (nothing passed)");
    std::printf("| first %d tokens are scratch's (all prompts) / KL at the first token | %.3f / %.4f |\n",
                s.matchTokens, double(s.matching) / done, s.klFirstToken);
    std::printf("| mean KL of passed / failed prompts | %.4f / %.4f |\n",
                x.klPassed.empty() ? NAN : meanOf(x.klPassed), x.klFailed.empty() ? NAN : meanOf(x.klFailed));
    std::printf("| gate precision / recall at its threshold (good: KL <= %g) | %.3f / %.3f |\n",
                gate.goal.goodKl, gate.atThreshold ? gate.atThreshold->precision : NAN,
                gate.atThreshold ? gate.atThreshold->recall : NAN);
    for (const auto &[name, best] : gate.best)
        if (best)
            std::printf(
                "| %s: highest recall at precision >= %g | threshold %.4g: recall %.3f, precision %.3f, "
                "pass rate %.3f |\n",
                name.c_str(), gate.goal.minPrecision, best->threshold, best->recall, best->precision,
                best->passRate);
        else
            std::printf("| %s: highest recall at precision >= %g | none reaches it |\n", name.c_str(),
                        gate.goal.minPrecision);
    std::printf("| Spearman(kv_cos, KL) | %.3f |\n", core::spearman(x.kvCos, x.kl));
    std::printf("| Spearman(tail_kl, KL) | %.3f |\n", core::spearman(x.tailKl, x.kl));
    std::printf("| Spearman(nll, KL) | %.3f |\n", core::spearman(x.nll, x.kl));
    std::printf("| Spearman(attn_cos, KL) | %.3f |\n", core::spearman(x.attnCos, x.kl));
}

// --recompute-curve: the set compared at every share of core::kRecomputeCurve, one row each: quality
// against the share, and what it costs in time beside B's own prefill.
int compareRecomputeCurve(const jobs::ComparePair &pair, const core::ConverterRecord &record,
                          const std::vector<std::string> &texts, jobs::CompareSetOptions o, bool asJson)
{
    bool warm = false;
    json rows = json::array();
    const bool answers = !o.answers.empty(); // a column of expected answers given
    if (!asJson)
        std::printf(
            "recompute curve: converter '%s', %zu prompts, %d tokens each, positions %s\n\n"
            "| share | prompts | KL | KL gap closed, 95%% CI | first 8 tokens: gap closed | top-1 |%s TTFT "
            "scratch "
            "ms | TTFT transfer ms | TTFT transfer, A cached ms |\n|--:|--:|--:|:--|:--|--:|%s--:|--:|--:|\n",
            record.name.c_str(), texts.size(), o.compare.maxTokens,
            core::recomputePositionsName(o.compare.recompute.positions),
            answers ? " answer given, transfer / scratch |" : "", answers ? "--:|" : "");
    for (double share : core::kRecomputeCurve) {
        o.compare.recompute.share = share;
        const auto run = jobs::compareSet(pair, record, texts, o, warm, [&](size_t, size_t, const auto *) {
            return !InterruptScope::interrupted();
        });
        if (run.cancelled || run.prompts.empty())
            throw core::Error(core::ErrorCode::InvalidArgument,
                              run.cancelled ? "interrupted" : "no prompt could be compared");
        const CompareSeries x(run);
        const auto s = jobs::summarizeCompareSet(run);
        rows.push_back({{"share", share},
                        {"prompts", run.prompts.size()},
                        {"kl", s.kl},
                        {"kl_no_prefix", s.klNoPrefix},
                        {"kl_gap_closed", intervalJson(s.klGapClosed)},
                        {"kl_first8", s.klFirst},
                        {"kl_gap_closed_first8", intervalJson(s.klGapClosedFirst)},
                        {"top1", s.top1},
                        {"answers", s.answered == 0
                                        ? json(nullptr)
                                        : json{{"prompts", s.answered},
                                               {"found_scratch", s.answerScratch},
                                               {"found_transfer", s.answerTransfer},
                                               {"transfer_minus_scratch", intervalJson(s.answerDifference)}}},
                        {"ttft_ms_scratch", medianOf(x.ttftScratch)},
                        {"ttft_ms_transfer", medianOf(x.ttftTransfer)},
                        {"ttft_ms_transfer_cached", medianOf(x.ttftCached)}});
        if (!asJson)
            std::printf(
                "| %g | %zu | %.4f | %s | %s | %.3f |%s %.2f | %.2f | %.2f |\n", share, run.prompts.size(),
                s.kl, s.klGapClosed ? core::formatInterval(*s.klGapClosed).c_str() : "n/a",
                s.klGapClosedFirst ? core::formatInterval(*s.klGapClosedFirst).c_str() : "n/a", s.top1,
                answers ? fmt::format(" {:.3f} / {:.3f} |", s.answerTransfer, s.answerScratch).c_str() : "",
                medianOf(x.ttftScratch), medianOf(x.ttftTransfer), medianOf(x.ttftCached));
    }
    if (asJson)
        std::printf("%s\n", json{{"converter", record.name},
                                 {"positions", core::recomputePositionsName(o.compare.recompute.positions)},
                                 {"max_tokens", o.compare.maxTokens},
                                 {"recompute_curve", rows}}
                                .dump(2, ' ', false, json::error_handler_t::replace)
                                .c_str());
    return 0;
}

// The options of `kvwb compare`, in the order --help lists them.
void addCompareOptions(QCommandLineParser &p)
{
    addSettingOptions<core::CompareSettings>(p, core::compareFlags());
    p.addOption({"json", "Print per-prompt results and the summary as JSON."});
}

} // namespace

int cmdCompare(const QStringList &args)
{
    QCommandLineParser p;
    addCompareOptions(p);
    addPromptFileOptions(p);
    addModelOptions(p);
    addEngineOptions(p);
    parse(p, args,
          "Side by side: B from scratch, B from A's converted cache, and A itself; KL and top-1 agreement "
          "(teacher-forced on B's scratch continuation), ROUGE-L, first divergent token, TTFT of each path "
          "and the quality gate's decision.");
    const core::CompareSettings settings = settingsFromFlags(p, core::compareFlags());
    if (settings.experiment.empty())
        throw UsageError{"--experiment is required"};
    try {
        core::checkCompareSettings(settings);
    } catch (const core::Error &e) {
        throw UsageError{e.what()};
    }
    const fs::path path = settings.experiment;
    std::optional<core::ExperimentReader> reader(core::ExperimentReader::open(path));
    const auto &file = *reader;
    if (!settings.saveSamples.empty()) { // before the run, not after it
        core::checkComparisonName(path, settings.saveSamples);
        core::checkWritableOutput(path, "--save-samples");
    }
    const auto record = core::loadConverters(path, settings.converter);
    if (!settings.handoff.empty())
        return compareHandoff(p, settings, path, file, record);
    jobs::CompareSetOptions o = jobs::compareSetOptions(settings);
    if (!settings.versus.empty())
        o.versus = core::loadConverters(path, settings.versus);
    std::vector<std::string> warnings;
    std::vector<std::string> texts;
    if (!settings.prompt.empty())
        texts.push_back(settings.prompt);
    else if (settings.heldOut)
        for (int i : record.testPrompts)
            texts.push_back(file.prompt(i).text);
    else
        for (auto &t : readPromptFile(p, settings.promptsFile, warnings)) {
            texts.push_back(std::move(t.text));
            o.answers.push_back(std::move(t.answer));
        }
    if (settings.limit > 0)
        texts.resize(std::min(texts.size(), size_t(settings.limit)));
    if (std::all_of(o.answers.begin(), o.answers.end(), [](const std::string &a) { return a.empty(); }))
        o.answers.clear();
    if (o.versus && settings.heldOut) // the second converter must not have been fitted on them
        if (std::string w = jobs::versusOverlapWarning(record, *o.versus, texts.size()); !w.empty())
            warnings.push_back(std::move(w));
    const GateQualityGoal goal{settings.goodKl, settings.minPrecision};
    const auto lo = loadOptions(p);
    auto a = loadFileModel(file, core::ModelRole::A, p, lo);
    auto b = loadFileModel(file, core::ModelRole::B, p, lo);
    const auto conv = gpu::Converter::create(record, *a, *b);
    const auto tokA = loadModelTokenizer(*a), tokB = loadModelTokenizer(*b);
    const jobs::ComparePair pair{*a, *tokA, *b, *tokB, conv, record.name};
    const bool asJson = p.isSet("json");
    InterruptScope ctrlC;
    if (settings.recomputeCurve) {
        for (const auto &w : warnings)
            std::fprintf(stderr, "warning: %s\n", w.c_str());
        return compareRecomputeCurve(pair, record, texts, o, asJson);
    }
    bool warm = false;
    size_t done = 0;
    const auto run = jobs::compareSet(
        pair, record, texts, o, warm, [&](size_t, size_t total, const jobs::ComparedPrompt *c) {
            if (c)
                printComparedPrompt(*c, texts, ++done, total, o.compare, asJson);
            return !InterruptScope::interrupted();
        });
    warnings.insert(warnings.end(), run.warnings.begin(), run.warnings.end());
    if (run.prompts.empty())
        throw core::Error(core::ErrorCode::InvalidArgument, "no prompt could be compared");
    if (!settings.saveSamples.empty()) {
        reader.reset(); // the store opens the file for writing
        std::vector<core::ComparisonSample> samples;
        for (const auto &c : run.prompts)
            samples.push_back(c.outcome.sample);
        jobs::storeComparisons(path, settings.saveSamples, samples, false);
    }
    const auto gate = gateQuality(run, o.compare, goal);
    for (const auto &w : warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (asJson) {
        json rows = json::array();
        for (const auto &c : run.prompts)
            rows.push_back(comparedPromptJson(c, texts[c.index]));
        std::printf("%s\n", json{{"experiment", path.string()},
                                 {"converter", record.name},
                                 {"max_tokens", o.compare.maxTokens},
                                 {"device", gpu::deviceName(lo.device)},
                                 {"prompts", rows},
                                 {"summary", compareSummaryJson(run, o, gate)}}
                                .dump(2, ' ', false, json::error_handler_t::replace)
                                .c_str());
        return 0;
    }
    printCompareSummary(run, record.name, o.compare, gate);
    return 0;
}

} // namespace kvwb::app
