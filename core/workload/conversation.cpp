#include "core/workload/conversation.h"

#include "core/util/error.h"
#include "core/util/seeded_random.h"
#include "core/workload/corpus.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <unordered_map>

namespace kvwb::core {

namespace {

bool isSpace(char c)
{
    return c == ' ' || c == '\n' || c == '\t';
}

std::string capitalisedFirst(std::string s)
{
    if (!s.empty())
        s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
    return s;
}

// "{A x} is {definition}." sentences about concepts drawn with `seed`, after `header`, until the
// text has at least `words` words (whole sentences); "" for words <= 0.
std::string conceptSentences(const std::vector<Concept> &concepts, std::string header, int words,
                             uint64_t seed)
{
    if (words <= 0)
        return {};
    SeededRandom rng(seed);
    std::string text = std::move(header);
    int have = wordCount(text);
    for (int guard = 0; have < words && !concepts.empty() && guard < 100000; ++guard) {
        const Concept &c = concepts[rng.below(concepts.size())];
        const std::string &lemma = c.lemmas.front();
        const std::string art = indefiniteArticle(lemma);
        std::string s =
            capitalisedFirst(art.empty() ? lemma : art + " " + lemma) + " is " + c.synset->definition;
        if (s.back() != '.')
            s += '.';
        have += wordCount(s);
        text += (text.empty() ? "" : " ") + s;
    }
    return text;
}

// Whole words of `prompt` inside its longest common prefix with `previous`.
int64_t commonPrefixWords(std::string_view prompt, std::string_view previous)
{
    size_t n = 0;
    const size_t limit = std::min(prompt.size(), previous.size());
    while (n < limit && prompt[n] == previous[n])
        ++n;
    // A word cut by the end of the common prefix is not shared.
    if (n < prompt.size() && n > 0 && !isSpace(prompt[n]) && !isSpace(prompt[n - 1]))
        while (n > 0 && !isSpace(prompt[n - 1]))
            --n;
    return wordCount(prompt.substr(0, n));
}

} // namespace

HistoryPolicy parseHistoryPolicy(std::string_view text)
{
    const auto bad = [&]() {
        return Error(ErrorCode::InvalidArgument, "history policy '" + std::string(text) +
                                                     "' is not one of full, window:N, summary, summary:N "
                                                     "(N a non-negative integer)");
    };
    HistoryPolicy p;
    if (text == "full")
        return p;
    if (text == "summary") {
        p.kind = HistoryPolicyKind::Summary;
        p.turns = 1;
        return p;
    }
    const size_t colon = text.find(':');
    if (colon == std::string_view::npos)
        throw bad();
    const std::string_view name = text.substr(0, colon), number = text.substr(colon + 1);
    if (name == "window")
        p.kind = HistoryPolicyKind::Window;
    else if (name == "summary")
        p.kind = HistoryPolicyKind::Summary;
    else
        throw bad();
    int n = -1;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), n);
    if (number.empty() || ec != std::errc() || end != number.data() + number.size() || n < 0)
        throw bad();
    p.turns = n;
    return p;
}

std::string historyPolicyName(const HistoryPolicy &policy)
{
    switch (policy.kind) {
    case HistoryPolicyKind::Full:
        return "full";
    case HistoryPolicyKind::Window:
        return "window:" + std::to_string(policy.turns);
    case HistoryPolicyKind::Summary:
        return "summary:" + std::to_string(policy.turns);
    }
    return "full";
}

std::string extractiveSummary(const std::vector<HistoryRound> &older)
{
    if (older.empty())
        return {};
    std::string s =
        "Summary of the earlier conversation (extractive, not model-written): the user asked about ";
    for (size_t i = 0; i < older.size(); ++i)
        s += (i ? "; " : "") + older[i].topic;
    return s + ".\n";
}

PolicyHistory applyHistoryPolicy(const HistoryPolicy &policy, const std::vector<HistoryRound> &history)
{
    if (policy.turns < 0)
        throw Error(ErrorCode::InvalidArgument,
                    "history policy turns " + std::to_string(policy.turns) + " is negative");
    PolicyHistory out;
    size_t first = 0; // first round kept verbatim
    if (policy.kind != HistoryPolicyKind::Full && history.size() > size_t(policy.turns))
        first = history.size() - size_t(policy.turns);
    if (policy.kind == HistoryPolicyKind::Summary && first > 0) {
        out.summary = extractiveSummary({history.begin(), history.begin() + std::ptrdiff_t(first)});
        out.summarisedRounds = first;
        out.text = out.summary;
    }
    for (size_t i = first; i < history.size(); ++i)
        out.text += history[i].text;
    out.keptRounds = history.size() - first;
    return out;
}

std::string conversationPrompt(std::string_view system, const PolicyHistory &history,
                               std::string_view renderedQuestion)
{
    std::string p;
    if (!system.empty())
        p.append(system).append("\n\n");
    p += history.text;
    p.append(renderedQuestion);
    return p;
}

ConversationGenerator::ConversationGenerator(const WordNet &wordnet, ConversationOptions options)
    : m_wordnet(wordnet), m_options(std::move(options))
{
    const auto &o = m_options;
    if (o.users < 1 || o.rounds < 1 || o.maxTokens < 1 || o.concepts < 1)
        throw Error(ErrorCode::InvalidArgument,
                    "conversation options users, rounds, concepts and max_tokens must be >= 1");
    if (!(o.qps > 0.0))
        throw Error(ErrorCode::InvalidArgument, "conversation option qps must be > 0");
    if (o.systemWords < 0 || o.userHistoryWords < 0)
        throw Error(ErrorCode::InvalidArgument, "conversation system and user history words must be >= 0");
    if (!(o.fracB >= 0.0 && o.fracB <= 1.0))
        throw Error(ErrorCode::InvalidArgument, "conversation option frac_b must be in [0, 1]");
    if (!(o.zipfS >= 0.0))
        throw Error(ErrorCode::InvalidArgument, "conversation option zipf must be >= 0");
    if (o.policy.turns < 0)
        throw Error(ErrorCode::InvalidArgument, "history policy turns must be >= 0");
}

Workload ConversationGenerator::generate(std::vector<std::string> *answers) const
{
    const auto &o = m_options;
    const auto concepts = selectConcepts(m_wordnet, o.concepts, o.hypernymSentence);
    if (concepts.empty())
        throw Error(ErrorCode::Config,
                    m_wordnet.dir().string() + ": no usable noun concepts for a conversation workload");
    const auto &templates = questionTemplates();

    Workload w;
    w.concepts = concepts.size();
    SystemPrompt sp;
    sp.tenant = "t0";
    sp.text = conceptSentences(concepts, "You are a helpful assistant. Answer in one short sentence.",
                               o.systemWords, o.seed ^ 0x5DEECE66Dull);
    sp.words = wordCount(sp.text);
    sp.id = o.systemWords > 0 ? "mt-w" + std::to_string(o.systemWords) : "";
    w.systemPrompts.push_back(sp);

    // Draw every user's conversation first (user-major), so content does not depend on the policy
    // or on how the rounds interleave.
    struct Round
    {
        std::string question, answer, lemma, intent, templateId;
    };
    struct User
    {
        std::string context; // system prompt + user history: what precedes the conversation
        ModelRole model = ModelRole::A;
        std::vector<Round> rounds;
    };
    SeededRandom rng(o.seed);
    const ZipfTable zipf(concepts.size(), o.zipfS);
    std::vector<User> users(size_t(o.users));
    for (int u = 0; u < o.users; ++u) {
        User &user = users[size_t(u)];
        const std::string notes =
            conceptSentences(concepts, "Notes of user u" + std::to_string(u) + ":", o.userHistoryWords,
                             o.seed ^ (0x9E3779B97F4A7C15ull * uint64_t(u + 1)) ^ 0xA5A5A5A5ull);
        user.context = sp.text;
        if (!notes.empty())
            user.context += (user.context.empty() ? "" : "\n\n") + notes;
        user.model = rng.chance(o.fracB) ? ModelRole::B : ModelRole::A;
        for (int r = 0; r < o.rounds; ++r) {
            const Concept &c = concepts[zipf.sample(rng)];
            const QuestionTemplate &t = templates[rng.below(templates.size())];
            Round round;
            round.lemma = c.lemmas[rng.below(c.lemmas.size())];
            round.question = renderQuestion(t, round.lemma);
            round.answer = c.answer;
            round.intent = c.synset->id;
            round.templateId = t.id;
            user.rounds.push_back(std::move(round));
        }
    }

    // Round r of user u is the (u + r * users)-th arrival, at that index / qps seconds.
    w.requests.reserve(size_t(o.users) * size_t(o.rounds));
    if (answers)
        answers->clear();
    for (int r = 0; r < o.rounds; ++r) {
        for (int u = 0; u < o.users; ++u) {
            const User &user = users[size_t(u)];
            std::vector<HistoryRound> history;
            for (int k = 0; k < r; ++k)
                history.push_back(
                    {trainingText(user.rounds[size_t(k)].question, user.rounds[size_t(k)].answer),
                     user.rounds[size_t(k)].lemma});
            const Round &round = user.rounds[size_t(r)];
            WorkloadRequest q;
            q.id = int64_t(w.requests.size());
            const double index = double(u) + double(r) * double(o.users);
            q.tMs = int64_t(index * 1000.0 / o.qps);
            q.tenant = "t0";
            q.user = "u" + std::to_string(u);
            q.model = user.model;
            q.systemPromptId = sp.id;
            q.kind = RequestKind::New;
            q.intent = round.intent;
            q.templateId = round.templateId;
            q.lemma = round.lemma;
            q.maxTokens = o.maxTokens;
            q.question = round.question;
            q.prompt = conversationPrompt(user.context, applyHistoryPolicy(o.policy, history),
                                          promptFor(round.question));
            q.conversation = q.user;
            q.round = r;
            if (answers)
                answers->push_back(round.answer);
            w.requests.push_back(std::move(q));
        }
    }
    return w;
}

PolicyCost policyCost(const std::string &policyName, const std::vector<WorkloadRequest> &requests,
                      const std::vector<std::string> &answers, std::string_view systemPrompt)
{
    if (answers.size() != requests.size())
        throw Error(ErrorCode::InvalidArgument, "policy cost: " + std::to_string(answers.size()) +
                                                    " answers for " + std::to_string(requests.size()) +
                                                    " requests");
    PolicyCost c;
    c.policy = policyName;
    c.requests = requests.size();
    const int64_t systemWords = wordCount(systemPrompt);
    std::unordered_map<std::string, std::string> previous; // conversation -> last prompt + answer
    static const std::string kSummaryHead = "Summary of the earlier conversation (extractive";
    for (size_t i = 0; i < requests.size(); ++i) {
        const WorkloadRequest &r = requests[i];
        const int64_t words = wordCount(r.prompt);
        c.promptWords += words;
        c.maxPromptWords = std::max(c.maxPromptWords, words);
        const auto it = previous.find(r.conversation);
        int64_t reused = 0;
        if (it != previous.end())
            reused = commonPrefixWords(r.prompt, it->second);
        else if (i > 0)
            reused = std::min(words, systemWords);
        c.uncachedWords += words - reused;
        if (const size_t at = r.prompt.find(kSummaryHead); at != std::string::npos) {
            const size_t end = r.prompt.find('\n', at);
            c.summaryWords += wordCount(std::string_view(r.prompt).substr(at, end - at));
        }
        previous[r.conversation] = r.prompt + " " + answers[i] + "\n";
    }
    return c;
}

std::vector<PolicyCost> comparePolicies(const WordNet &wordnet, ConversationOptions options,
                                        const std::vector<HistoryPolicy> &policies)
{
    std::vector<PolicyCost> out;
    for (const HistoryPolicy &p : policies) {
        options.policy = p;
        std::vector<std::string> answers;
        const Workload w = ConversationGenerator(wordnet, options).generate(&answers);
        out.push_back(policyCost(historyPolicyName(p), w.requests, answers,
                                 w.systemPrompts.empty() ? std::string_view() : w.systemPrompts[0].text));
    }
    return out;
}

RoundBreakdown roundBreakdown(const std::vector<WorkloadRequest> &requests,
                              const std::vector<RequestOutcome> &outcomes)
{
    std::unordered_map<int64_t, int> roundOf;
    for (const WorkloadRequest &r : requests)
        roundOf.emplace(r.id, r.round);
    RoundBreakdown b;
    std::map<int, RoundStats> byRound;
    for (const RequestOutcome &o : outcomes) {
        const auto it = roundOf.find(o.requestId);
        if (it == roundOf.end()) {
            ++b.unmatched;
            continue;
        }
        if (it->second < 0) {
            ++b.withoutRound;
            continue;
        }
        RoundStats &s = byRound[it->second];
        s.round = it->second;
        ++s.requests;
        s.hits += o.hit ? 1 : 0;
        s.promptTokens += o.promptTokens;
        s.tokensReused += o.tokensReused;
    }
    for (auto &[round, s] : byRound) {
        s.hitRate = s.requests ? double(s.hits) / double(s.requests) : 0.0;
        s.tokenHitRate = s.promptTokens ? double(s.tokensReused) / double(s.promptTokens) : 0.0;
        b.rounds.push_back(s);
    }
    return b;
}

} // namespace kvwb::core
