// The knowledge tier's evaluation (`kvwb knowledge evaluate`, the window's Knowledge step): the
// same model-B requests of a workload answered four ways, each a real replay -
//   no cache:               B from scratch on [system prompt + profile line + question];
//   semantic cache:         the same prompts through the semantic response tier (its hits hand a
//                           stored answer to whoever asks, ignoring the profile);
//   knowledge tier:         the request's node verified, its KV module placed, B renders
//                           [system prompt + module + profile line + question];
//   knowledge tier, unverified: the same taking recall's best node without verification (left
//                           out when the job itself does not verify);
//   knowledge in the prompt: that same text computed from scratch per request (no reuse),
// with quality against the concept's reference answer (word F1, ROUGE-L), agreement with the
// knowledge-in-the-prompt answer, fit to the user's profile, false hits by intent, tokens, measured
// model time, cost, the graph's build cost, the break-even reuse per node and where the knowledge
// tier's time goes (docs/knowledge.md, "Economics").
//
// Threading: the engine thread (or a subcommand's main thread); models outlive the call.
#pragma once

#include "app/jobs/replay_job.h"
#include "core/store/converter_store.h"

#include <array>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kvwb::app::jobs {

struct KnowledgeArm
{
    std::string name;
    core::LedgerSummary summary;
    std::vector<core::LedgerRow> rows;
    std::vector<std::string> outputs;
    double modelSeconds = 0; // sum of the requests' measured total times
    double wordF1 = 0;       // mean, against the concept's reference answer (requests with one)
    double rougeL = 0;       // mean, same
    double rougeVsFull = 0;  // mean ROUGE-L against the knowledge-in-the-prompt answer
    double profileFit = 0;   // share of answers that fit the asking user's profile
    // Mean answer length in words by the asking user's verbosity (brief, standard, detailed): what
    // a profile changes in the answer (0 when no scored request had that verbosity).
    std::array<double, 3> wordsByVerbosity{};
    int64_t scored = 0; // requests whose intent is a node of the graph (the ones scored)
};

struct KnowledgeEvaluation
{
    int64_t requests = 0, users = 0, concepts = 0; // model-B requests, their users and intents
    std::vector<KnowledgeArm> arms;                // in the order above (the last: knowledge in the prompt)
    gpu::KnowledgeCosts costs;                     // the knowledge arm's
    int64_t modules = 0;                           // modules in the graph file(s) at the start
    int64_t buildTokens = 0;                       // tokens computed to build them
    double buildMs = 0;                            // measured when they were built
    double renderMs = 0;        // knowledge hits: model time after the lookup (the rest's prefill + decode)
    double breakEvenTokens = 0; // reuses of a node that repay its module, in computed tokens
    double breakEvenMs = 0;     // the same in measured time (0 when no saving was measured)
    std::vector<std::string> warnings;
    bool cancelled = false; // the progress callback stopped it: the arms are incomplete
};

// Called between and during the arms: stage ("no cache", ...), requests done, total; false stops.
using KnowledgeEvalProgress = std::function<bool(const std::string &stage, int done, int total)>;

// job.tiers is ignored (each arm sets its own); job.knowledgeGraphs is required.
// Error(InvalidArgument) when the workload has no model-B request.
KnowledgeEvaluation evaluateKnowledge(const core::ReplaySettings &job, const gpu::Model &a,
                                      const gpu::Model &b, const core::Tokenizer &tokenizerA,
                                      const core::Tokenizer &tokenizerB,
                                      const KnowledgeEvalProgress &progress = {});

// Columns (a row per arm, in KnowledgeEvaluation::arms order): requests, hits, false_hits, tokens_computed,
// tokens_reused, model_s, cost_usd, word_f1, rouge_l, rouge_l_vs_full, profile_fit; one row per arm.
core::MetricTable knowledgeEconomicsTable(const KnowledgeEvaluation &e);
std::string knowledgeEvaluationJson(const KnowledgeEvaluation &e);
std::string knowledgeEvaluationMarkdown(const KnowledgeEvaluation &e);

// Each arm's ledger as /ledgers/<name>.<arm slug> of an experiment file ("no-cache",
// "semantic-cache", "knowledge-tier", "knowledge-in-the-prompt"), its settings JSON holding
// "knowledge_evaluation": name, "arm", the arm's quality ("word_f1", "rouge_l", "rouge_l_vs_full",
// "profile_fit", "scored", "model_s"), the workload and graphs, and on every arm the evaluation's
// build cost, time per step and break-even reuse (the report's Knowledge reuse section reads them).
void saveKnowledgeEvaluation(const std::filesystem::path &experiment, const std::string &name,
                             const core::ReplaySettings &job, const KnowledgeEvaluation &e);
std::string armSlug(const std::string &arm); // "knowledge in the prompt" -> "knowledge-in-the-prompt"

} // namespace kvwb::app::jobs
