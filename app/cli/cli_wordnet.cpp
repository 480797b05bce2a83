#include "app/cli/cli_wordnet.h"
#include "app/cli/cli_util.h"

#include "core/ledger/replay_ledger.h"
#include "core/metrics/text_metrics.h"
#include "core/model/checkpoint.h"
#include "core/model/model_config.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/text_util.h"
#include "core/workload/context_prompts.h"
#include "core/workload/conversation.h"
#include "core/workload/corpus.h"
#include "core/workload/wordnet.h"
#include "core/workload/workload.h"
#include "core/workload/workload_import.h"

#include <QCommandLineParser>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <span>

namespace kvwb::app {

namespace {

using namespace kvwb::app::cli;
using Clock = std::chrono::steady_clock;

void addSourceOptions(QCommandLineParser &p)
{
    p.addOption({"out", "Output JSONL file (written atomically).", "FILE"});
    addForceOption(p);
    p.addOption({"wordnet-dir",
                 QString("WordNet database directory (default %1).").arg(core::WordNet::kDefaultDir), "DIR",
                 core::WordNet::kDefaultDir});
    p.addOption({"concepts", "Most popular noun concepts to use (default 3000).", "N", "3000"});
    addSeedOption(p, "Random seed; the output is identical for a seed");
    p.addOption({"no-hypernym", "Answers without the \" It is a kind of X.\" sentence."});
}

// The first positional names the source: wordnet, or (kvwb corpus) context when `context` is true.
void checkSource(const QCommandLineParser &p, bool context = false)
{
    const auto pos = p.positionalArguments();
    const char *sources = context ? "wordnet or context" : "wordnet";
    if (pos.size() != 1)
        throw UsageError{fmt::format("expected exactly one SOURCE ({})", sources)};
    if (pos.first() != "wordnet" && !(context && pos.first() == "context"))
        throw UsageError{fmt::format("unknown source '{}' ({})", str(pos.first()), sources)};
    if (!p.isSet("out"))
        throw UsageError{"--out is required"};
    outputFileOption(p, "out");
}

// --fits MODEL (repeatable): how many requests (prompt tokens + max_tokens) do not fit the model's
// context, on stderr. A replay serves what fits and marks the rest not served.
void reportContextFit(const QCommandLineParser &p, const std::vector<core::WorkloadRequest> &requests)
{
    for (const QString &path : p.values("fits")) {
        const auto ck = core::Checkpoint::open(str(path));
        const auto tokPath = ck.tokenizerPath();
        if (!tokPath)
            throw core::Error(core::ErrorCode::Config,
                              str(path) + " (--fits): no tokenizer to count the prompts' tokens with");
        const auto tok = core::loadTokenizer(*tokPath);
        const int64_t context = ck.config().contextLimit();
        size_t over = 0;
        int64_t firstId = -1, longest = 0;
        for (const auto &q : requests) {
            const int64_t need = int64_t(tok->encode(q.prompt, true).size()) + q.maxTokens;
            longest = std::max(longest, need);
            if (need > context && over++ == 0)
                firstId = q.id;
        }
        if (over > 0)
            std::fprintf(stderr,
                         "warning: %zu of %zu requests do not fit %s's context of %lld tokens (prompt + "
                         "max_tokens; the first is request %lld, the longest needs %lld): a replay on it "
                         "marks them not served\n",
                         over, requests.size(), str(path).c_str(), (long long)context, (long long)firstId,
                         (long long)longest);
        else
            std::fprintf(stderr,
                         "all %zu requests fit %s's context of %lld tokens (the longest needs %lld)\n",
                         requests.size(), str(path).c_str(), (long long)context, (long long)longest);
    }
}

core::WordNet loadWordNet(const QCommandLineParser &p)
{
    const auto t0 = Clock::now();
    auto wn = core::WordNet::load(str(p.value("wordnet-dir")));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::fprintf(stderr, "read %zu synsets from %s in %.0f ms (%zu warnings)\n", wn.synsets().size(),
                 wn.dir().c_str(), ms, wn.warnings().total());
    if (!wn.warnings().empty())
        std::fprintf(stderr, "%s", wn.warnings().summary().c_str());
    return wn;
}

// Which sources of `kvwb workload` / `kvwb corpus` each option applies to (options not listed apply
// to all of them).
struct OptionScope
{
    const char *name;
    const char *sources; // space-separated
};
const OptionScope kOptionScopes[] = {
    {"wordnet-dir", "wordnet multiturn"},
    {"concepts", "wordnet multiturn"},
    {"seed", "wordnet multiturn"},
    {"no-hypernym", "wordnet multiturn"},
    {"zipf", "wordnet"}, // multiturn uses s = 1.0 (ConversationOptions::zipfS)
    {"users", "wordnet multiturn"},
    {"frac-b", "wordnet multiturn"},
    {"max-tokens", "wordnet multiturn sharegpt quora"},
    {"requests", "wordnet"},
    {"rate", "wordnet"},
    {"tenants", "wordnet"},
    {"p-repeat", "wordnet"},
    {"p-paraphrase", "wordnet"},
    {"p-synonym", "wordnet"},
    {"p-near-miss", "wordnet"},
    {"system-words", "wordnet"},
    {"history", "wordnet"},
    {"input", "sharegpt quora"},
    {"limit", "sharegpt quora"},
    {"gap-ms", "sharegpt quora"},
    {"system-prompt", "quora"},
    {"history-policy", "multiturn sharegpt"},
    {"max-rounds", "sharegpt"},
    {"interleave", "sharegpt"},
    {"strict", "sharegpt"},
    {"rounds", "multiturn"},
    {"system-tokens", "multiturn"},
    {"user-history-tokens", "multiturn"},
    {"qps", "multiturn"},
    {"json", "multiturn rounds"},
    {"workload", "rounds"},
    {"ledger", "rounds"},
    {"outputs", "rounds"},
    {"reference-outputs", "rounds"},
    {"out", "wordnet multiturn sharegpt quora"},
    {"fits", "wordnet multiturn sharegpt quora"},
};

const OptionScope kCorpusOptionScopes[] = {
    {"min-examples", "wordnet"},   {"max-examples", "wordnet"}, {"kinds", "context"},
    {"count", "context"},          {"entities", "context"},     {"distance", "context"},
    {"counterfactual", "context"},
};

void checkOptionScopes(const QCommandLineParser &p, const QString &source,
                       std::span<const OptionScope> scopes = kOptionScopes)
{
    for (const OptionScope &o : scopes) {
        if (!p.isSet(o.name))
            continue;
        const QStringList sources = QString(o.sources).split(' ');
        if (sources.contains(source))
            continue;
        // "the wordnet source only", "the sharegpt and quora sources only", "the a, b and c sources only"
        QString list = sources.last();
        if (sources.size() > 1)
            list = sources.mid(0, sources.size() - 1).join(", ") + " and " + list;
        throw UsageError{"--" + std::string(o.name) + " applies to the " + str(list) +
                         (sources.size() > 1 ? " sources only" : " source only") + ", not " + str(source)};
    }
}

core::HistoryPolicy historyPolicyOption(const QCommandLineParser &p)
{
    if (!p.isSet("history-policy"))
        return {};
    try {
        return core::parseHistoryPolicy(str(p.value("history-policy")));
    } catch (const core::Error &e) {
        throw UsageError{"--history-policy: " + std::string(e.what())};
    }
}

// `kvwb workload sharegpt|quora`: a public dataset as a workload (core/workload/workload_import.h).
int importWorkload(const QCommandLineParser &p, const QString &source)
{
    if (!p.isSet("input"))
        throw UsageError{"--input is required for " + str(source)};
    core::ImportOptions o;
    o.historyPolicy = historyPolicyOption(p);
    o.maxRounds = size_t(intOption(p, "max-rounds", 0, 0));
    o.interleave = size_t(intOption(p, "interleave", 0, 0));
    o.strict = p.isSet("strict");
    o.limit = size_t(intOption(p, "limit", 0, 0));
    o.gapMs = intOption(p, "gap-ms", 1000, 0);
    o.maxTokens = intOption(p, "max-tokens", 64, 1);
    o.systemPrompt = str(p.value("system-prompt"));
    const auto t0 = Clock::now();
    const std::string input = str(p.value("input"));
    const core::ImportResult r =
        source == "sharegpt" ? core::importShareGpt(input, o) : core::importQuoraPairs(input, o);
    if (!r.warnings.empty())
        std::fprintf(stderr, "skipped %zu malformed %s:\n%s", r.warnings.total(),
                     source == "sharegpt" ? "conversations" : "lines", r.warnings.summary().c_str());
    core::writeWorkloadJsonl(str(p.value("out")), r.requests);
    reportContextFit(p, r.requests);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::map<std::string, size_t> kinds;
    for (const auto &q : r.requests)
        ++kinds[core::requestKindName(q.kind)];
    std::printf("wrote %s: %zu requests from %zu %s of %s (%zu skipped), %.1f s of traffic, in %.0f ms\n",
                qPrintable(p.value("out")), r.requests.size(), r.records,
                source == "sharegpt" ? "conversations" : "pairs", input.c_str(), r.warnings.total(),
                r.requests.back().tMs / 1000.0, ms);
    std::printf("kinds:");
    for (const auto &[k, n] : kinds)
        std::printf(" %s %zu", k.c_str(), n);
    std::printf("\n");
    if (source == "sharegpt") {
        int maxRound = -1;
        for (const auto &q : r.requests)
            maxRound = std::max(maxRound, q.round);
        std::printf("rounds: up to %d per conversation, history policy %s\n", maxRound + 1,
                    core::historyPolicyName(o.historyPolicy).c_str());
    }
    return 0;
}

// `kvwb workload multiturn`: multi-round conversations (core/workload/conversation.h).
int multiturnWorkload(const QCommandLineParser &p)
{
    core::ConversationOptions o;
    o.users = intOption(p, "users", 10, 1);
    o.rounds = intOption(p, "rounds", 5, 1);
    o.systemWords = intOption(p, "system-tokens", 100, 0);
    o.userHistoryWords = intOption(p, "user-history-tokens", 0, 0);
    o.concepts = size_t(intOption(p, "concepts", 3000, 1));
    o.qps = doubleOption(p, "qps", 1.0, 1e-6, 1e9);
    o.policy = historyPolicyOption(p);
    o.fracB = doubleOption(p, "frac-b", 0.0, 0.0, 1.0);
    o.maxTokens = intOption(p, "max-tokens", 64, 1);
    o.hypernymSentence = !p.isSet("no-hypernym");
    o.seed = seedOption(p);
    const bool json = p.isSet("json");
    const auto wn = loadWordNet(p);
    const auto t0 = Clock::now();
    const core::Workload w = core::ConversationGenerator(wn, o).generate();
    core::writeWorkloadJsonl(str(p.value("out")), w.requests);
    reportContextFit(p, w.requests);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    // The same conversations under each policy: the chosen one and the two others with their
    // default turn counts (window:2, summary:1) unless the chosen one sets it.
    core::HistoryPolicy window{core::HistoryPolicyKind::Window, 2},
        summary{core::HistoryPolicyKind::Summary, 1};
    if (o.policy.kind == core::HistoryPolicyKind::Window)
        window = o.policy;
    if (o.policy.kind == core::HistoryPolicyKind::Summary)
        summary = o.policy;
    const auto costs = core::comparePolicies(wn, o, {core::HistoryPolicy{}, window, summary});
    const std::string chosen = core::historyPolicyName(o.policy);
    std::FILE *info = json ? stderr : stdout;
    std::fprintf(info,
                 "wrote %s: %zu requests, %d users x %d rounds, history policy %s, system prompt %d words, "
                 "%.1f s of traffic, in %.0f ms\n",
                 qPrintable(p.value("out")), w.requests.size(), o.users, o.rounds, chosen.c_str(),
                 w.systemPrompts.front().words, w.requests.empty() ? 0.0 : w.requests.back().tMs / 1000.0,
                 ms);
    std::fprintf(
        stderr, "prompt cost per history policy (words, whitespace-separated: an approximation of tokens)\n");
    std::fprintf(stderr, "%-12s %10s %14s %16s %14s %14s\n", "policy", "requests", "prompt words",
                 "max prompt words", "uncached words", "summary words");
    for (const auto &c : costs)
        std::fprintf(stderr, "%-12s %10zu %14lld %16lld %14lld %14lld%s\n", c.policy.c_str(), c.requests,
                     (long long)c.promptWords, (long long)c.maxPromptWords, (long long)c.uncachedWords,
                     (long long)c.summaryWords, c.policy == chosen ? "  (written)" : "");
    std::fprintf(stderr,
                 "uncached words: what an ideal per-conversation prefix cache still prefills; summary "
                 "words: extractive here, a model would generate them\n");
    if (json) {
        nlohmann::ordered_json j;
        j["out"] = str(p.value("out"));
        j["requests"] = w.requests.size();
        j["users"] = o.users;
        j["rounds"] = o.rounds;
        j["history_policy"] = chosen;
        j["system_prompt_words"] = w.systemPrompts.front().words;
        j["token_unit"] = "whitespace words";
        auto &arr = j["policies"] = nlohmann::ordered_json::array();
        for (const auto &c : costs)
            arr.push_back({{"policy", c.policy},
                           {"requests", c.requests},
                           {"prompt_words", c.promptWords},
                           {"max_prompt_words", c.maxPromptWords},
                           {"uncached_words", c.uncachedWords},
                           {"summary_words", c.summaryWords}});
        std::printf("%s\n", j.dump(2).c_str());
    }
    return 0;
}

// `kvwb workload rounds`: per-round hit rates of a replay ledger joined with its workload.
int roundsReport(const QCommandLineParser &p)
{
    if (!p.isSet("workload") || !p.isSet("ledger"))
        throw UsageError{"rounds needs --workload W.jsonl and --ledger L.csv"};
    const std::string workloadPath = str(p.value("workload")), ledgerPath = str(p.value("ledger"));
    const auto wl = core::readWorkloadJsonl(workloadPath);
    if (!wl.warnings.empty())
        std::fprintf(stderr, "skipped %zu malformed workload lines:\n%s", wl.warnings.total(),
                     wl.warnings.summary().c_str());
    const auto rows = core::ledgerFromCsv(readTextFile(p.value("ledger")),
                                          std::filesystem::path(ledgerPath).filename().string());
    std::vector<core::RequestOutcome> outcomes;
    outcomes.reserve(rows.size());
    for (const auto &r : rows)
        outcomes.push_back(
            {r.requestId, r.answeredBy != core::TierKind::None, r.promptTokens, r.tokensReused});
    const core::RoundBreakdown b = core::roundBreakdown(wl.requests, outcomes);
    // The quality cost of a history policy: each answer against the answer to the same request under
    // the reference policy (full history), ROUGE-L and exact agreement, per round.
    if (p.isSet("outputs") != p.isSet("reference-outputs"))
        throw UsageError{"--outputs and --reference-outputs go together (kvwb replay --outputs writes them)"};
    std::map<int, std::pair<double, int64_t>> rougeOf, sameOf; // round -> (sum, n)
    if (p.isSet("outputs")) {
        const auto readOutputs = [](const QString &path) {
            std::map<int64_t, std::string> out;
            const std::string text = readTextFile(path);
            size_t lineNo = 0, at = 0;
            while (at < text.size()) {
                const size_t end = std::min(text.find('\n', at), text.size());
                const std::string line = text.substr(at, end - at);
                at = end + 1;
                ++lineNo;
                if (line.empty())
                    continue;
                try {
                    const auto j = nlohmann::json::parse(line);
                    out[j.at("id").get<int64_t>()] = j.at("output").get<std::string>();
                } catch (const nlohmann::json::exception &e) {
                    throw core::Error(core::ErrorCode::Format,
                                      fmt::format("{}:{}: expected {{\"id\", \"output\"}}: {}", str(path),
                                                  lineNo, e.what()));
                }
            }
            return out;
        };
        const auto mine = readOutputs(p.value("outputs"));
        const auto ref = readOutputs(p.value("reference-outputs"));
        for (const auto &r : wl.requests) {
            const auto a = mine.find(r.id), b2 = ref.find(r.id);
            if (r.round < 0 || a == mine.end() || b2 == ref.end())
                continue;
            auto &[rs, rn] = rougeOf[r.round];
            rs += core::rougeL(a->second, b2->second);
            ++rn;
            auto &[ss, sn] = sameOf[r.round];
            ss += a->second == b2->second ? 1.0 : 0.0;
            ++sn;
        }
    }
    const auto meanOf = [](const std::map<int, std::pair<double, int64_t>> &m, int round) {
        const auto it = m.find(round);
        return it == m.end() || it->second.second == 0 ? -1.0 : it->second.first / double(it->second.second);
    };
    if (b.unmatched > 0)
        std::fprintf(stderr, "%zu ledger rows name requests not in %s (another workload?)\n", b.unmatched,
                     workloadPath.c_str());
    if (b.rounds.empty())
        throw core::Error(core::ErrorCode::Format,
                          workloadPath + ": no ledger row matches a request with a round (write the workload "
                                         "with `kvwb workload multiturn` or `kvwb workload sharegpt`)");
    if (p.isSet("json")) {
        nlohmann::ordered_json j;
        j["workload"] = workloadPath;
        j["ledger"] = ledgerPath;
        j["unmatched"] = b.unmatched;
        j["without_round"] = b.withoutRound;
        auto &arr = j["rounds"] = nlohmann::ordered_json::array();
        for (const auto &s : b.rounds)
            arr.push_back({{"round", s.round},
                           {"requests", s.requests},
                           {"hits", s.hits},
                           {"hit_rate", s.hitRate},
                           {"prompt_tokens", s.promptTokens},
                           {"tokens_reused", s.tokensReused},
                           {"token_hit_rate", s.tokenHitRate},
                           {"rouge_l_vs_reference", meanOf(rougeOf, s.round)},
                           {"same_answer_as_reference", meanOf(sameOf, s.round)}});
        std::printf("%s\n", j.dump(2).c_str());
        return 0;
    }
    std::printf("%6s %9s %9s %15s %14s %14s%s\n", "round", "requests", "hit rate", "token hit rate",
                "prompt tokens", "tokens reused", rougeOf.empty() ? "" : "  ROUGE-L vs ref  same answer");
    for (const auto &s : b.rounds) {
        std::printf("%6d %9lld %9.3f %15.3f %14lld %14lld", s.round, (long long)s.requests, s.hitRate,
                    s.tokenHitRate, (long long)s.promptTokens, (long long)s.tokensReused);
        if (!rougeOf.empty())
            std::printf(" %16.3f %12.3f", meanOf(rougeOf, s.round), meanOf(sameOf, s.round));
        std::printf("\n");
    }
    if (b.withoutRound > 0)
        std::printf("(%zu requests without a round not shown)\n", b.withoutRound);
    return 0;
}

// The options of `kvwb workload`, every source's (checkOptionScopes rejects those of another source).
void addWorkloadOptions(QCommandLineParser &p)
{
    addSourceOptions(p);
    p.addOption({"requests", "Requests to generate (default 10000).", "N", "10000"});
    p.addOption({"zipf", "Zipf exponent s of concept popularity (default 1.0).", "S", "1.0"});
    p.addOption({"rate", "Poisson arrival rate, requests per second (default 5).", "R", "5"});
    p.addOption({"tenants", "Tenants (default 3).", "T", "3"});
    p.addOption({"users", "Users per tenant (default 20).", "N", "20"});
    p.addOption(
        {"p-repeat", "Probability of an exact repeat of an earlier request (default 0.10).", "P", "0.10"});
    p.addOption({"p-paraphrase", "Probability of a paraphrase: same intent, another template (default 0.15).",
                 "P", "0.15"});
    p.addOption({"p-synonym", "Probability of a synonym swap: same intent, another lemma (default 0.10).",
                 "P", "0.10"});
    p.addOption({"p-near-miss",
                 "Probability of a near miss: a sibling concept, same template (default 0.10).", "P",
                 "0.10"});
    p.addOption({"frac-b", "Share of requests sent to model b (default 0.5).", "F", "0.5"});
    p.addOption({"max-tokens", "max_tokens of every request (default 64).", "N", "64"});
    p.addOption({"system-words",
                 "System prompt lengths in words per tenant, comma-separated; 0 = none "
                 "(default 10,60,250).",
                 "LIST", "10,60,250"});
    p.addOption({"history", "Derived requests pick their base among the tenant's last N (default 1000).", "N",
                 "1000"});
    p.addOption(
        {"input", "sharegpt, quora: the dataset file (ShareGPT JSON, Quora question pairs TSV).", "FILE"});
    p.addOption({"limit", "sharegpt, quora: at most N requests (default 0 = all).", "N", "0"});
    p.addOption({"gap-ms", "sharegpt, quora: arrival spacing in ms (default 1000).", "MS", "1000"});
    p.addOption({"system-prompt", "quora: system prompt put before every question (default none).", "STR"});
    p.addOption({"history-policy",
                 "multiturn, sharegpt: what each round's prompt keeps of the earlier rounds: full, window:N "
                 "(the last N rounds), summary[:N] (older rounds replaced by an extractive summary, the last "
                 "N, default 1, kept) (default full).",
                 "P"});
    p.addOption(
        {"max-rounds", "sharegpt: at most R rounds (human turns) per conversation (default 0 = all).", "R"});
    p.addOption({"interleave",
                 "sharegpt: interleave the rounds of C conversations at a time, as C concurrent clients "
                 "(default 0: one conversation after another).",
                 "C"});
    p.addOption({"strict", "sharegpt: stop with an error at the first malformed conversation."});
    p.addOption({"rounds", "multiturn: rounds per user (default 5).", "R"});
    p.addOption(
        {"system-tokens", "multiturn: shared system prompt length in words (default 100; 0 = none).", "S"});
    p.addOption({"user-history-tokens",
                 "multiturn: per-user context after the system prompt, in words (default 0).", "H"});
    p.addOption({"qps",
                 "multiturn: aggregate request rate; each user's rounds are users/qps s apart (default 1).",
                 "Q"});
    p.addOption({"json", "multiturn: policy costs as JSON on stdout; rounds: the table as JSON."});
    p.addOption({"fits",
                 "Warn how many requests (prompt tokens + max_tokens) do not fit this model's context (HF "
                 "directory, GGUF or llama2.c file; repeatable).",
                 "MODEL"});
    p.addOption({"workload", "rounds: the workload the ledger replayed.", "FILE"});
    p.addOption({"ledger", "rounds: the replay ledger CSV (kvwb replay --ledger).", "FILE"});
    p.addOption({"outputs",
                 "rounds: the replay's answers (kvwb replay --outputs), scored per round against "
                 "--reference-outputs.",
                 "FILE"});
    p.addOption({"reference-outputs",
                 "rounds: the answers to the same requests under the reference policy (e.g. full history).",
                 "FILE"});
}

// `kvwb workload wordnet`'s generator settings from the options (UsageError when out of range).
core::WorkloadOptions wordnetWorkloadOptions(const QCommandLineParser &p)
{
    core::WorkloadOptions o;
    o.requests = size_t(intOption(p, "requests", 10000, 0));
    o.concepts = size_t(intOption(p, "concepts", 3000, 1));
    o.zipfS = doubleOption(p, "zipf", 1.0, 0.0, 10.0);
    o.ratePerSecond = doubleOption(p, "rate", 5.0, 1e-6, 1e9);
    o.tenants = intOption(p, "tenants", 3, 1);
    o.usersPerTenant = intOption(p, "users", 20, 1);
    o.pRepeat = doubleOption(p, "p-repeat", 0.10, 0.0, 1.0);
    o.pParaphrase = doubleOption(p, "p-paraphrase", 0.15, 0.0, 1.0);
    o.pSynonym = doubleOption(p, "p-synonym", 0.10, 0.0, 1.0);
    o.pNearMiss = doubleOption(p, "p-near-miss", 0.10, 0.0, 1.0);
    if (o.pRepeat + o.pParaphrase + o.pSynonym + o.pNearMiss > 1.0 + 1e-9)
        throw UsageError{"--p-repeat + --p-paraphrase + --p-synonym + --p-near-miss must be <= 1"};
    o.fracB = doubleOption(p, "frac-b", 0.5, 0.0, 1.0);
    o.maxTokens = intOption(p, "max-tokens", 64, 1);
    o.systemPromptWords.clear();
    for (const QString &part : p.value("system-words").split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const int w = part.trimmed().toInt(&ok);
        if (!ok || w < 0)
            throw UsageError{"--system-words expects comma-separated word counts >= 0, got '" +
                             str(p.value("system-words")) + "'"};
        o.systemPromptWords.push_back(w);
    }
    if (o.systemPromptWords.empty())
        throw UsageError{"--system-words needs at least one length (0 = no system prompt)"};
    o.historyWindow = size_t(intOption(p, "history", 1000, 1));
    o.hypernymSentence = !p.isSet("no-hypernym");
    o.seed = seedOption(p);
    return o;
}

// `kvwb workload wordnet`: a generated workload over WordNet concepts, written to --out, and its mix.
int wordnetWorkload(const QCommandLineParser &p)
{
    const core::WorkloadOptions o = wordnetWorkloadOptions(p);
    const auto wn = loadWordNet(p);
    const auto t0 = Clock::now();
    const core::WorkloadGenerator gen(wn, o);
    const auto w = gen.generate();
    core::writeWorkloadJsonl(str(p.value("out")), w.requests);
    reportContextFit(p, w.requests);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::map<std::string, size_t> kinds;
    size_t b = 0;
    for (const auto &r : w.requests) {
        ++kinds[core::requestKindName(r.kind)];
        b += r.model == core::ModelRole::B;
    }
    std::printf("wrote %s: %zu requests over %zu concepts, %d tenants, %.1f s of traffic, in %.0f ms\n",
                qPrintable(p.value("out")), w.requests.size(), w.concepts, o.tenants,
                w.requests.empty() ? 0.0 : w.requests.back().tMs / 1000.0, ms);
    std::printf("kinds:");
    for (const auto &[k, n] : kinds)
        std::printf(" %s %zu", k.c_str(), n);
    std::printf("; model b %zu\n", b);
    for (const auto &sp : w.systemPrompts)
        std::printf("system prompt %s: %d words\n", sp.id.c_str(), sp.words);
    return 0;
}

// `kvwb corpus context`: prompts whose answer was stated earlier in them (core/workload/context_prompts.h).
int contextCorpus(const QCommandLineParser &p)
{
    core::ContextPromptOptions o;
    if (p.isSet("kinds")) {
        o.kinds.clear();
        for (const QString &k : p.value("kinds").split(',', Qt::SkipEmptyParts)) {
            core::ContextKind kind{};
            try {
                kind = core::parseContextKind(str(k.trimmed()));
            } catch (const core::Error &e) {
                throw UsageError{std::string("--kinds: ") + e.what()};
            }
            if (std::find(o.kinds.begin(), o.kinds.end(), kind) != o.kinds.end())
                throw UsageError{"--kinds: '" + str(k.trimmed()) + "' given twice"};
            o.kinds.push_back(kind);
        }
    }
    o.perKind = intOption(p, "count", 100, 1, 1000000);
    o.entities = intOption(p, "entities", 3, 2, 8);
    o.distance = intOption(p, "distance", 2, 0, 16);
    o.counterfactual = p.isSet("counterfactual");
    o.concepts = size_t(intOption(p, "concepts", 3000, 1));
    o.seed = seedOption(p);
    o.hypernymSentence = !p.isSet("no-hypernym");
    const bool facts = std::find(o.kinds.begin(), o.kinds.end(), core::ContextKind::Facts) != o.kinds.end();
    if (!facts && (p.isSet("counterfactual") || p.isSet("no-hypernym")))
        throw UsageError{"--counterfactual and --no-hypernym apply to the facts kind only"};
    std::optional<core::WordNet> wn;
    if (facts)
        wn.emplace(loadWordNet(p));
    const auto prompts = core::buildContextPrompts(o, wn ? &*wn : nullptr);
    core::writeFileAtomic(str(p.value("out")), core::contextPromptsToJsonl(prompts));
    std::string kinds;
    for (auto k : o.kinds)
        kinds += std::string(kinds.empty() ? "" : ", ") + core::contextKindName(k);
    std::printf("wrote %s: %zu prompts (%d each of %s), %d facts stated, %d %s between them and the "
                "question%s\n",
                qPrintable(p.value("out")), prompts.size(), o.perKind, kinds.c_str(), o.entities, o.distance,
                o.distance == 1 ? "sentence or turn" : "sentences or turns",
                o.counterfactual ? ", counterfactual facts" : "");
    return 0;
}

} // namespace

int cmdCorpus(const QStringList &args)
{
    QCommandLineParser p;
    addSourceOptions(p);
    p.addOption({"min-examples", "Training examples for the least popular concept (default 4).", "N", "4"});
    p.addOption({"max-examples",
                 "Training examples for the most popular concept (default: one per training "
                 "template).",
                 "N", "0"});
    p.addOption({"kinds", "context: names, numbers, facts, comma-separated (default all three).", "LIST"});
    p.addOption({"count", "context: prompts of each kind (default 100).", "N", "100"});
    p.addOption(
        {"entities", "context: facts stated in each prompt, one of them asked (2-8, default 3).", "N", "3"});
    p.addOption({"distance",
                 "context: neutral sentences (names, numbers) or further Q/A turns (facts) between the "
                 "stated facts and the question (0-16, default 2).",
                 "N", "2"});
    p.addOption({"counterfactual",
                 "context, facts: the context gives each stated concept another concept's answer, so only "
                 "reading the context (not the model's memory) gives the expected answer."});
    parse(p, args,
          "Write a question/answer training corpus (JSONL: synset, rank, lemma, template, split, question, "
          "prompt, answer, text) from WordNet noun concepts; validation uses phrasing templates training "
          "never sees. context: a prompt set whose answers were stated earlier in each prompt (names, "
          "numbers, facts; JSONL: kind, split, prompt, answer, text, entities, distance, asked) for "
          "`kvwb compare --prompts`, which reports how often each path gives the expected answer.",
          "SOURCE", "wordnet, or context.");
    checkSource(p, true);
    checkOptionScopes(p, p.positionalArguments().first(), kCorpusOptionScopes);
    if (p.positionalArguments().first() == "context")
        return contextCorpus(p);
    core::CorpusOptions o;
    o.concepts = size_t(intOption(p, "concepts", 3000, 1));
    o.seed = seedOption(p);
    o.hypernymSentence = !p.isSet("no-hypernym");
    o.minPerConcept = intOption(p, "min-examples", 4, 1);
    o.maxPerConcept = intOption(p, "max-examples", 0, 0);
    const auto wn = loadWordNet(p);
    const auto t0 = Clock::now();
    const auto corpus = core::CorpusBuilder(wn, o).build();
    const std::string text = core::corpusToJsonl(corpus);
    core::writeFileAtomic(str(p.value("out")), text);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::printf("wrote %s: %zu concepts, %zu train + %zu validation examples, %.1f MiB in %.0f ms\n",
                qPrintable(p.value("out")), corpus.concepts, corpus.trainCount, corpus.validationCount,
                text.size() / 1048576.0, ms);
    return 0;
}

int cmdWorkload(const QStringList &args)
{
    QCommandLineParser p;
    addWorkloadOptions(p);
    parse(p, args,
          "Write a request workload (JSONL, one request a line). wordnet: over WordNet concepts, with Zipf "
          "popularity, Poisson arrivals, tenants with shared system prompts, exact repeats, paraphrases, "
          "synonym swaps and near misses. sharegpt: every human turn of ShareGPT conversations, prompted "
          "with the conversation so far. quora: both questions of each Quora question pair, duplicates "
          "sharing an intent. multiturn: multi-round conversations over WordNet concepts (users, rounds, "
          "shared system prompt, history policy) and the prompt cost of each policy. rounds: per-round hit "
          "rates of a replay ledger of a multi-turn workload (docs/corpus-and-workload.md).",
          "SOURCE", "wordnet, sharegpt, quora, multiturn or rounds.");
    const auto pos = p.positionalArguments();
    if (pos.size() != 1)
        throw UsageError{"expected exactly one SOURCE (wordnet, sharegpt, quora, multiturn or rounds)"};
    const QString source = pos.first();
    if (!QStringList{"wordnet", "sharegpt", "quora", "multiturn", "rounds"}.contains(source))
        throw UsageError{"unknown source '" + str(source) +
                         "' (wordnet, sharegpt, quora, multiturn or rounds)"};
    if (source == "sharegpt" && p.isSet("system-prompt"))
        throw UsageError{"--system-prompt applies to quora only (ShareGPT conversations bring their own)"};
    checkOptionScopes(p, source);
    if (source == "rounds")
        return roundsReport(p);
    if (!p.isSet("out"))
        throw UsageError{"--out is required"};
    outputFileOption(p, "out");
    for (const QString &model : p.values("fits")) // opened before the work, counted after it
        core::Checkpoint::open(str(model));
    if (source == "sharegpt" || source == "quora")
        return importWorkload(p, source);
    if (source == "multiturn")
        return multiturnWorkload(p);
    return wordnetWorkload(p);
}

} // namespace kvwb::app
