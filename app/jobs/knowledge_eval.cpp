#include "app/jobs/knowledge_eval.h"

#include "core/knowledge/user_profiles.h"
#include "core/metrics/text_metrics.h"
#include "core/store/ledger_store.h"
#include "core/util/error.h"
#include "core/util/text_util.h"
#include "core/workload/corpus.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <unordered_map>

namespace kvwb::app::jobs {

namespace {

const core::ConceptNode *nodeOf(const gpu::KnowledgeTier &tier, const std::string &id)
{
    for (const auto &s : tier.scopes())
        if (const auto *n = s.file.graph.find(id))
            return n;
    return nullptr;
}

const core::KnowledgeGraph *graphOf(const gpu::KnowledgeTier &tier, const std::string &id)
{
    for (const auto &s : tier.scopes())
        if (s.file.graph.find(id))
            return &s.file.graph;
    return nullptr;
}

// The request's prompt with `middle` between its system prompt and its question.
std::string withMiddle(const core::WorkloadRequest &r, const std::string &middle)
{
    if (!r.question.empty())
        if (const auto head = core::promptHead(r.prompt, r.question))
            return *head + middle + core::promptFor(r.question);
    return middle + r.prompt;
}

double mean(const std::vector<double> &v)
{
    double s = 0;
    for (double x : v)
        s += x;
    return v.empty() ? 0.0 : s / double(v.size());
}

using Profiles = std::unordered_map<std::string, core::UserProfile>;

// The user's profile from the job's profiles file, or the default profile, named after the user.
core::UserProfile profileOf(const Profiles &profiles, const std::string &user)
{
    const auto it = profiles.find(user);
    core::UserProfile p = it == profiles.end() ? core::UserProfile{} : it->second;
    p.user = user;
    return p;
}

// Moves the model-B requests out of `all` and counts them, their users and their intents into `e`.
// Error(InvalidArgument) when there is none.
std::vector<core::WorkloadRequest> takeModelBRequests(std::vector<core::WorkloadRequest> &all,
                                                      const std::string &workload, KnowledgeEvaluation &e)
{
    std::vector<core::WorkloadRequest> requests;
    for (auto &r : all)
        if (r.model == core::ModelRole::B)
            requests.push_back(std::move(r));
    if (requests.empty())
        throw core::Error(core::ErrorCode::InvalidArgument,
                          workload + ": no request for model b (the knowledge tier serves model B)");
    std::set<std::string> users, intents;
    for (const auto &r : requests) {
        users.insert(r.user);
        intents.insert(r.intent);
    }
    e.requests = int64_t(requests.size());
    e.users = int64_t(users.size());
    e.concepts = int64_t(intents.size());
    return requests;
}

// The graph build cost: the modules the tier's graph files hold, the tokens and time they took.
void countModules(const gpu::KnowledgeTier &tier, KnowledgeEvaluation &e)
{
    for (const auto &s : tier.scopes())
        if (s.file.modules)
            for (const auto &m : s.file.modules->modules) {
                ++e.modules;
                e.buildTokens += int64_t(s.file.modules->prefixIds.size() + m.ids.size());
                e.buildMs += m.computeMs;
            }
}

// Requests the tier does not answer (verification rejected every candidate, recall found none, the
// rewritten prompt would not fit) are answered from scratch, and the personalisation layer applies
// to them too: [system prompt + profile line + question], the no-cache arm's computation of the
// same request. The tier's replay computed them on the request's own prompt (it rewrites only the
// prompts it answers), so their rows and answers are the no-cache arm's (same model, greedy, no
// cache: the same tokens; the time measured there).
void fallBackPersonalised(KnowledgeArm &arm, const KnowledgeArm &base, const core::ReplaySettings &job)
{
    for (size_t i = 0; i < arm.rows.size() && i < base.rows.size(); ++i) {
        core::LedgerRow &row = arm.rows[i];
        if (row.answeredBy != core::TierKind::None)
            continue;
        const core::LedgerRow &from = base.rows[i];
        row.promptTokens = from.promptTokens;
        row.tokensReused = from.tokensReused;
        row.tokensComputed = from.tokensComputed;
        row.generatedTokens = from.generatedTokens;
        row.ttftMs = from.ttftMs;
        row.totalMs = from.totalMs;
        arm.outputs[i] = base.outputs[i];
    }
    arm.summary = core::summarize(arm.rows, replayOptions(job).prices);
    arm.modelSeconds = 0;
    for (const auto &row : arm.rows)
        arm.modelSeconds += row.totalMs / 1000.0;
}

// Quality: against the concept's reference answer (the corpus answer: the standard rendering
// of the intent's node) and against the knowledge-in-the-prompt answer (the last arm); profile fit.
void scoreArms(KnowledgeEvaluation &e, const std::vector<core::WorkloadRequest> &requests,
               const gpu::KnowledgeTier &tier, const Profiles &profiles)
{
    const KnowledgeArm &fullArm = e.arms.back();
    for (auto &arm : e.arms) {
        std::vector<double> f1, rouge, vsFull, fit;
        std::array<std::vector<double>, 3> words;
        for (size_t i = 0; i < arm.outputs.size() && i < requests.size(); ++i) {
            if (i < fullArm.outputs.size())
                vsFull.push_back(core::rougeL(arm.outputs[i], fullArm.outputs[i]));
            const auto *g = graphOf(tier, requests[i].intent);
            if (!g)
                continue;
            const auto parts = core::answerParts(*g, *g->find(requests[i].intent));
            const std::string reference = core::renderAnswer(parts, core::UserProfile{});
            f1.push_back(core::wordF1(arm.outputs[i], reference));
            rouge.push_back(core::rougeL(arm.outputs[i], reference));
            const core::UserProfile &profile = profileOf(profiles, requests[i].user);
            fit.push_back(core::profileFit(arm.outputs[i], profile, !parts.examples.empty()).all() ? 1.0
                                                                                                   : 0.0);
            words[size_t(profile.verbosity)].push_back(double(core::text::lowerWords(arm.outputs[i]).size()));
        }
        for (size_t v = 0; v < words.size(); ++v)
            arm.wordsByVerbosity[v] = mean(words[v]);
        arm.scored = int64_t(f1.size());
        arm.wordF1 = mean(f1);
        arm.rougeL = mean(rouge);
        arm.rougeVsFull = mean(vsFull);
        arm.profileFit = mean(fit);
    }
}

// Where the knowledge tier's time went after the lookup, and what a node's reuse saves against the
// knowledge-in-the-prompt arm (the last).
void measureBreakEven(KnowledgeEvaluation &e, size_t knowledgeArm)
{
    const KnowledgeArm &fullArm = e.arms.back();
    const KnowledgeArm &k = e.arms[knowledgeArm];
    std::vector<double> savedTokens, savedMs;
    for (size_t i = 0; i < k.rows.size() && i < fullArm.rows.size(); ++i) {
        const auto &row = k.rows[i];
        if (row.answeredBy != core::TierKind::Knowledge)
            continue;
        e.renderMs += row.totalMs - row.lookupMs;
        savedTokens.push_back(double(fullArm.rows[i].tokensComputed - row.tokensComputed));
        savedMs.push_back(fullArm.rows[i].totalMs - row.totalMs);
    }
    const double perModuleTokens = e.modules ? double(e.buildTokens) / double(e.modules) : 0.0;
    const double perModuleMs = e.modules ? e.buildMs / double(e.modules) : 0.0;
    if (mean(savedTokens) > 0)
        e.breakEvenTokens = perModuleTokens / mean(savedTokens);
    if (mean(savedMs) > 0)
        e.breakEvenMs = perModuleMs / mean(savedMs);
}

} // namespace

KnowledgeEvaluation evaluateKnowledge(const core::ReplaySettings &job, const gpu::Model &a,
                                      const gpu::Model &b, const core::Tokenizer &tokenizerA,
                                      const core::Tokenizer &tokenizerB,
                                      const KnowledgeEvalProgress &progress)
{
    auto read = readReplayRequests(job.workload, job.limit);
    KnowledgeEvaluation e;
    e.warnings = read.warnings.messages();
    const std::vector<core::WorkloadRequest> requests = takeModelBRequests(read.requests, job.workload, e);

    const auto embedder = makeEmbedder(job.embedder, job.embedderLayer, a, tokenizerA);
    auto tier = makeKnowledgeTier(job, b, tokenizerB, *embedder);
    for (const auto &w : tier->warnings())
        e.warnings.push_back(w);
    countModules(*tier, e);
    Profiles profiles;
    if (!job.profiles.empty())
        for (auto &p : core::readProfiles(job.profiles))
            profiles.emplace(p.user, p);

    bool stopped = false;
    const auto run = [&](const std::string &name, const std::vector<core::WorkloadRequest> &reqs,
                         std::vector<core::TierKind> tiers, gpu::KnowledgeTier *knowledge) {
        KnowledgeArm arm;
        arm.name = name;
        if (stopped)
            return arm;
        gpu::ReplayOptions o = replayOptions(job);
        o.tiers = std::move(tiers);
        gpu::ReplayModels models{&a, &b, &tokenizerA, &tokenizerB, nullptr, embedder.get(), knowledge};
        auto r = gpu::replayWorkload(reqs, models, o, [&](const core::LedgerRow &, int done, int total) {
            return !progress || progress(name, done, total);
        });
        stopped = r.cancelled;
        arm.summary = r.summary;
        arm.rows = std::move(r.rows);
        arm.outputs = std::move(r.outputs);
        for (const auto &row : arm.rows)
            arm.modelSeconds += row.totalMs / 1000.0;
        for (auto &w : r.warnings)
            e.warnings.push_back(std::move(w));
        return arm;
    };

    // The personalisation layer applies to every arm: the profile line goes before the question.
    std::vector<core::WorkloadRequest> personal = requests;
    for (auto &r : personal)
        r.prompt = withMiddle(r, core::profileInstruction(profileOf(profiles, r.user)));
    e.arms.push_back(run("no cache", personal, {}, nullptr));
    e.arms.push_back(run("semantic cache", personal, {core::TierKind::Semantic}, nullptr));
    e.arms.push_back(run("knowledge tier", requests, {core::TierKind::Knowledge}, tier.get()));
    const size_t knowledgeArm = e.arms.size() - 1;
    e.costs = tier->costs();
    if (job.knowledge.verify) {
        // The same tier taking recall's best node unverified: the false reuse verification prevents.
        core::ReplaySettings unverifiedJob = job;
        unverifiedJob.knowledge.verify = false;
        auto unverified = makeKnowledgeTier(unverifiedJob, b, tokenizerB, *embedder);
        e.arms.push_back(
            run("knowledge tier, unverified", requests, {core::TierKind::Knowledge}, unverified.get()));
    }
    // The tier's arms answer what they do not serve as the no-cache arm does (fallBackPersonalised).
    if (!stopped)
        for (size_t i = knowledgeArm; i < e.arms.size(); ++i)
            fallBackPersonalised(e.arms[i], e.arms.front(), job);

    // The knowledge tier's text computed from scratch: its node's knowledge where it used one.
    std::vector<core::WorkloadRequest> full = personal;
    for (size_t i = 0; i < full.size() && i < e.arms[knowledgeArm].rows.size(); ++i) {
        const auto &row = e.arms[knowledgeArm].rows[i];
        if (row.answeredBy == core::TierKind::Knowledge)
            if (const auto *n = nodeOf(*tier, row.knowledgeNode))
                full[i].prompt = withMiddle(
                    requests[i],
                    core::moduleText(*n) + core::profileInstruction(profileOf(profiles, requests[i].user)));
    }
    e.arms.push_back(run("knowledge in the prompt", full, {}, nullptr));
    e.cancelled = stopped;
    if (stopped)
        return e;

    scoreArms(e, requests, *tier, profiles);
    measureBreakEven(e, knowledgeArm);
    return e;
}

core::MetricTable knowledgeEconomicsTable(const KnowledgeEvaluation &e)
{
    core::MetricTable t;
    t.columns = {"requests", "hits",    "false_hits", "tokens_computed", "tokens_reused", "model_s",
                 "cost_usd", "word_f1", "rouge_l",    "rouge_l_vs_full", "profile_fit"};
    for (const auto &a : e.arms)
        t.rows.push_back({double(a.summary.requests), double(a.summary.hits), double(a.summary.falseHits),
                          double(a.summary.tokensComputed), double(a.summary.tokensReused), a.modelSeconds,
                          a.summary.costUsd, a.wordF1, a.rougeL, a.rougeVsFull, a.profileFit});
    return t;
}

std::string knowledgeEvaluationJson(const KnowledgeEvaluation &e)
{
    nlohmann::json arms = nlohmann::json::array();
    const auto t = knowledgeEconomicsTable(e);
    for (size_t i = 0; i < e.arms.size(); ++i) {
        nlohmann::json a = {{"arm", e.arms[i].name}, {"scored", e.arms[i].scored}};
        for (size_t v = 0; v < e.arms[i].wordsByVerbosity.size(); ++v)
            a["answer_words"][core::verbosityName(core::Verbosity(v))] = e.arms[i].wordsByVerbosity[v];
        for (size_t c = 0; c < t.columns.size(); ++c)
            a[t.columns[c]] = t.rows[i][c];
        arms.push_back(a);
    }
    const auto &c = e.costs;
    const nlohmann::json j = {
        {"requests", e.requests},
        {"users", e.users},
        {"concepts", e.concepts},
        {"arms", arms},
        {"build", {{"modules", e.modules}, {"tokens", e.buildTokens}, {"ms", e.buildMs}}},
        {"refresh",
         {{"modules", c.modulesRecomputed}, {"tokens", c.recomputedTokens}, {"ms", c.recomputeMs}}},
        {"time_ms",
         {{"embed", c.embedMs},
          {"recall", c.recallMs},
          {"verify", c.verifyMs},
          {"place", c.placeMs},
          {"system_prompts", c.prefixMs},
          {"recompute", c.recomputeMs},
          {"render", e.renderMs},
          {"index_build", c.indexBuildMs}}},
        {"rejected", c.rejected},
        {"break_even_reuse", {{"tokens", e.breakEvenTokens}, {"ms", e.breakEvenMs}}},
        {"warnings", e.warnings}};
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string knowledgeEvaluationMarkdown(const KnowledgeEvaluation &e)
{
    std::string s = fmt::format("{} model-B requests from {} users about {} concepts\n\n", e.requests,
                                e.users, e.concepts);
    s += "| arm | answered by a cache | false hits | tokens computed | tokens reused | model s | cost USD | "
         "word F1 | ROUGE-L | ROUGE-L vs knowledge in the prompt | profile fit |\n";
    s += "|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
    for (const auto &a : e.arms)
        s += fmt::format("| {} | {} | {} | {} | {} | {:.2f} | {:.6f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} |\n",
                         a.name, a.summary.hits, a.summary.falseHits, a.summary.tokensComputed,
                         a.summary.tokensReused, a.modelSeconds, a.summary.costUsd, a.wordF1, a.rougeL,
                         a.rougeVsFull, a.profileFit);
    s += "\n| arm | answer words, brief | standard | detailed |\n|:--|--:|--:|--:|\n";
    for (const auto &a : e.arms)
        s += fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} |\n", a.name, a.wordsByVerbosity[0],
                         a.wordsByVerbosity[1], a.wordsByVerbosity[2]);
    const auto &c = e.costs;
    s += fmt::format("\nGraph: {} modules built from {} tokens in {:.1f} ms; refreshed during the replay: {} "
                     "modules, {} tokens, {:.1f} ms. Verification rejected {} requests.\n",
                     e.modules, e.buildTokens, e.buildMs, c.modulesRecomputed, c.recomputedTokens,
                     c.recomputeMs, c.rejected);
    s += fmt::format("Break-even reuse per node: {:.2f} reuses in tokens, {:.2f} in measured time.\n",
                     e.breakEvenTokens, e.breakEvenMs);
    s += "\n| knowledge tier step | total ms |\n|:--|--:|\n";
    for (const auto &[name, ms] : std::vector<std::pair<const char *, double>>{
             {"embedding the question", c.embedMs},
             {"vector recall", c.recallMs},
             {"graph verification", c.verifyMs},
             {"module placement", c.placeMs},
             {"system prompts (once per tenant)", c.prefixMs},
             {"module recomputation", c.recomputeMs},
             {"rendering (profile + question prefill, decode)", e.renderMs}})
        s += fmt::format("| {} | {:.1f} |\n", name, ms);
    return s;
}

std::string armSlug(const std::string &arm)
{
    // "knowledge tier, unverified" -> "knowledge-tier-unverified": ledger names take letters,
    // digits and '-' only, one '-' per run of anything else.
    std::string s;
    for (char c : arm) {
        if (std::isalnum(static_cast<unsigned char>(c)))
            s += c;
        else if (!s.empty() && s.back() != '-')
            s += '-';
    }
    while (!s.empty() && s.back() == '-')
        s.pop_back();
    return s;
}

void saveKnowledgeEvaluation(const std::filesystem::path &experiment, const std::string &name,
                             const core::ReplaySettings &job, const KnowledgeEvaluation &e)
{
    nlohmann::json evaluation = nlohmann::json::parse(knowledgeEvaluationJson(e));
    evaluation.erase("arms");
    evaluation.erase("warnings");
    for (const auto &arm : e.arms) {
        const nlohmann::json settings = {{"knowledge_evaluation", name},
                                         {"arm", arm.name},
                                         {"workload", job.workload},
                                         {"limit", job.limit},
                                         {"knowledge", job.knowledgeGraphs},
                                         {"profiles", job.profiles},
                                         {"word_f1", arm.wordF1},
                                         {"rouge_l", arm.rougeL},
                                         {"rouge_l_vs_full", arm.rougeVsFull},
                                         {"profile_fit", arm.profileFit},
                                         {"scored", arm.scored},
                                         {"model_s", arm.modelSeconds},
                                         {"evaluation", evaluation}};
        core::saveLedger(experiment, name + "." + armSlug(arm.name), arm.rows, settings.dump());
    }
}

} // namespace kvwb::app::jobs
