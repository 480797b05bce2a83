// Multi-turn conversations as replay workloads: the history policies a chat front end applies
// (full history, a sliding window of turns, an extractive summary of older turns), a generator of
// multi-round Q/A conversations over WordNet concepts in the shape of vLLM's multi-round-qa
// benchmark (users, rounds, a shared system prompt, per-user history, users interleaved in time),
// the prompt cost of each policy, and the per-round cache hit-rate breakdown of a replay (SGLang's
// bench_multiturn reports prefix-cache hit rates 0 -> .51 -> .66 -> .74 -> .79 over five rounds).
// ShareGPT multi-turn imports (core/workload/workload_import.h) render history through the same
// policies. Formats and measured numbers: docs/corpus-and-workload.md, "Multi-turn conversations".
//
// Token counts here are whitespace-separated words (wordCount()), an approximation: the demo
// tokenizers give about 1.3 tokens per word on this text; a replay's ledger has the real counts.
//
// Thread-safety: pure functions and a const generate(); the WordNet must outlive the generator.
#pragma once

#include "core/workload/wordnet.h"
#include "core/workload/workload.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

enum class HistoryPolicyKind
{
    Full,    // every earlier round verbatim
    Window,  // only the last `turns` rounds verbatim, older ones dropped
    Summary, // rounds older than the last `turns` replaced by one summary line
};

struct HistoryPolicy
{
    HistoryPolicyKind kind = HistoryPolicyKind::Full;
    int turns = 0; // Window: rounds kept (0 = none); Summary: recent rounds kept verbatim
};

// "full", "window:N" (N >= 0), "summary" (= "summary:1") or "summary:N" (N >= 0);
// Error(InvalidArgument) naming the text otherwise.
HistoryPolicy parseHistoryPolicy(std::string_view text);
std::string historyPolicyName(const HistoryPolicy &policy); // "full", "window:3", "summary:1"

// One earlier round of a conversation as the prompt carries it.
struct HistoryRound
{
    std::string text;  // rendered question and answer(s), ending with "\n"
    std::string topic; // what the round was about, for the extractive summary ("car")
};

// The summary line that replaces older rounds: "Summary of the earlier conversation (extractive,
// not model-written): the user asked about car; bus.\n". Deterministic; `kvwb summarise`
// (app/cli/cli_fleet.h) writes the model-written one.
std::string extractiveSummary(const std::vector<HistoryRound> &older);

// What a policy keeps of `history` (all earlier rounds, oldest first) before the new question:
// the summary line (when the policy summarises some rounds) followed by the kept rounds' text.
struct PolicyHistory
{
    std::string summary;         // "" when nothing is summarised
    std::string text;            // summary + kept rounds, verbatim, oldest first
    size_t keptRounds = 0;       // rounds carried verbatim
    size_t summarisedRounds = 0; // rounds replaced by the summary
};
PolicyHistory applyHistoryPolicy(const HistoryPolicy &policy, const std::vector<HistoryRound> &history);

// "{system}\n\n{history}{question}" ("{history}{question}" with no system prompt), question being
// the already rendered final turn ("Q: What is a car?\nA:").
std::string conversationPrompt(std::string_view system, const PolicyHistory &history,
                               std::string_view renderedQuestion);

struct ConversationOptions
{
    int users = 10;           // conversations, one per user
    int rounds = 5;           // rounds (questions) per conversation
    int systemWords = 100;    // shared system prompt, whole sentences, >= this many words (0 = none)
    int userHistoryWords = 0; // per-user context after the system prompt (vLLM's user history prompt)
    size_t concepts = 3000;   // top-N concepts by popularity the questions draw from (Zipf)
    double zipfS = 1.0;       // P(rank k) ~ 1 / k^s
    double qps = 1.0;         // aggregate request rate; each user's rounds are users / qps s apart
    HistoryPolicy policy;     // how round k's prompt carries rounds 0..k-1
    double fracB = 0.0;       // share of conversations sent to model "b"
    int maxTokens = 64;
    bool hypernymSentence = true; // must match the corpus the models were trained on (answers)
    uint64_t seed = 1;
};

// Round r of user u arrives at (u + r * users) / qps seconds: the users start 1/qps apart and each
// user's next round comes users/qps after its previous one (standing in for the answer time plus
// think time, which a generator cannot know), so the rounds of all users interleave and the whole
// workload runs at `qps`. Each round asks about a new Zipf-drawn concept with a uniform template
// and lemma; history rounds carry the corpus answer (Concept::answer), the answer a model trained
// on the corpus gives. Requests are in arrival order with ids 0..n-1; tenant "t0" (one shared
// system prompt, id "mt-w{words}"), user "u{k}", conversation "u{k}", round 0..rounds-1, kind new.
// The concepts, templates, lemmas and times do not depend on the policy: the same seed under two
// policies gives the same conversations, only rendered differently.
class ConversationGenerator
{
public:
    // Error(InvalidArgument) for users, rounds or maxTokens < 1, qps <= 0, words < 0, fracB
    // outside [0, 1], or a negative window.
    ConversationGenerator(const WordNet &wordnet, ConversationOptions options);
    // answers (optional): answers[i] is the corpus answer to requests[i], what the next round's
    // history carries after it.
    Workload generate(std::vector<std::string> *answers = nullptr) const;

private:
    const WordNet &m_wordnet;
    ConversationOptions m_options;
};

// The prompt cost of one rendering of a conversation workload, in words (see above).
struct PolicyCost
{
    std::string policy; // historyPolicyName()
    size_t requests = 0;
    int64_t promptWords = 0;    // sum of all prompts' words: what a model without a cache prefills
    int64_t maxPromptWords = 0; // longest prompt (against the model's context)
    // Words an ideal per-conversation prefix cache still computes: for each round the words after
    // the longest common word prefix with the conversation's previous prompt followed by its answer
    // (round 0: after the shared system prompt, except the very first request).
    int64_t uncachedWords = 0;
    int64_t summaryWords = 0; // words of summary lines (a model-written summary would generate them)
};

// answers[i] is the answer that followed requests[i] (the corpus answer for generated workloads).
PolicyCost policyCost(const std::string &policyName, const std::vector<WorkloadRequest> &requests,
                      const std::vector<std::string> &answers, std::string_view systemPrompt);

// The same conversations rendered under each policy (options.policy ignored), with the costs.
std::vector<PolicyCost> comparePolicies(const WordNet &wordnet, ConversationOptions options,
                                        const std::vector<HistoryPolicy> &policies);

// ---- Per-round hit rates of a replay ----

// One replayed request (core/ledger/replay_ledger.h's LedgerRow reduced to what the breakdown needs;
// the workload room may not include the cache room).
struct RequestOutcome
{
    int64_t requestId = 0;
    bool hit = false; // answered by any tier (LedgerRow::answeredBy != None)
    int promptTokens = 0;
    int tokensReused = 0;
};

struct RoundStats
{
    int round = 0;
    int64_t requests = 0;
    int64_t hits = 0;
    int64_t promptTokens = 0;
    int64_t tokensReused = 0;
    double hitRate = 0;      // hits / requests
    double tokenHitRate = 0; // tokensReused / promptTokens: SGLang's per-round cache hit rate
};

struct RoundBreakdown
{
    std::vector<RoundStats> rounds; // by round, ascending; only rounds with requests
    size_t unmatched = 0;           // outcomes whose request id is not in the workload
    size_t withoutRound = 0;        // outcomes of requests with no round (round -1)
};

// Joins outcomes to the workload by request id (the first request with that id).
RoundBreakdown roundBreakdown(const std::vector<WorkloadRequest> &requests,
                              const std::vector<RequestOutcome> &outcomes);

} // namespace kvwb::core
