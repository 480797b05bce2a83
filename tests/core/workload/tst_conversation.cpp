// Multi-turn conversations: history policies (full, window:N, summary:N) and their parsing, the
// multi-round generator's exact structure (rounds, interleaved arrival order and times, what each
// round's prompt carries under each policy, determinism by seed), the JSONL conversation fields
// (old files still read), the prompt cost per policy and the per-round hit-rate breakdown.
#include "core/util/error.h"
#include "core/workload/conversation.h"
#include "core/workload/corpus.h"
#include "core/workload/workload.h"
#include "tests/support/expect_error.h"
#include "tests/support/wordnet_fixture.h"

#include <QTemporaryDir>
#include <QTest>

#include <functional>

using namespace kvwb::core;
namespace fs = std::filesystem;
using kvwb::test::expectError;

namespace {

bool contains(const std::string &haystack, const std::string &needle)
{
    return haystack.find(needle) != std::string::npos;
}

size_t count(const std::string &haystack, const std::string &needle)
{
    size_t n = 0;
    for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1))
        ++n;
    return n;
}

bool startsWith(const std::string &s, const std::string &prefix)
{
    return s.rfind(prefix, 0) == 0;
}

} // namespace

class TestConversation : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    std::unique_ptr<WordNet> m_wn;

    ConversationOptions options(const char *policy) const
    {
        ConversationOptions o;
        o.users = 3;
        o.rounds = 4;
        o.systemWords = 20;
        o.concepts = 50;
        o.qps = 2.0;
        o.policy = parseHistoryPolicy(policy);
        o.seed = 7;
        return o;
    }
    Workload make(const ConversationOptions &o, std::vector<std::string> *answers = nullptr) const
    {
        return ConversationGenerator(*m_wn, o).generate(answers);
    }
    // requests[i] of user u, round r: i = u + r * users.
    static const WorkloadRequest &at(const Workload &w, int users, int u, int r)
    {
        return w.requests[size_t(u + r * users)];
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        const fs::path dir = fs::path(m_tmp.path().toStdString()) / "wn";
        kvwb::test::writeWordNetFixture(dir, 200);
        m_wn = std::make_unique<WordNet>(WordNet::load(dir));
    }

    void policiesParse()
    {
        QCOMPARE(historyPolicyName(parseHistoryPolicy("full")), std::string("full"));
        QCOMPARE(historyPolicyName(parseHistoryPolicy("window:3")), std::string("window:3"));
        QCOMPARE(historyPolicyName(parseHistoryPolicy("window:0")), std::string("window:0"));
        QCOMPARE(historyPolicyName(parseHistoryPolicy("summary")), std::string("summary:1"));
        QCOMPARE(historyPolicyName(parseHistoryPolicy("summary:2")), std::string("summary:2"));
        for (const char *bad :
             {"", "fulll", "window", "window:", "window:-1", "window:2x", "summary:a", "lru:3"}) {
            const Error e = expectError([&] { parseHistoryPolicy(bad); });
            QCOMPARE(e.code(), ErrorCode::InvalidArgument);
            QVERIFY2(contains(e.what(), "'" + std::string(bad) + "'"), e.what());
        }
    }

    void policyKeepsWhatItSays()
    {
        const std::vector<HistoryRound> h = {
            {"Q: a?\nA: A.\n", "a"}, {"Q: b?\nA: B.\n", "b"}, {"Q: c?\nA: C.\n", "c"}};
        const PolicyHistory full = applyHistoryPolicy(parseHistoryPolicy("full"), h);
        QCOMPARE(full.text, std::string("Q: a?\nA: A.\nQ: b?\nA: B.\nQ: c?\nA: C.\n"));
        QCOMPARE(full.keptRounds, size_t(3));
        QCOMPARE(full.summarisedRounds, size_t(0));
        const PolicyHistory w2 = applyHistoryPolicy(parseHistoryPolicy("window:2"), h);
        QCOMPARE(w2.text, std::string("Q: b?\nA: B.\nQ: c?\nA: C.\n"));
        QCOMPARE(w2.keptRounds, size_t(2));
        QCOMPARE(applyHistoryPolicy(parseHistoryPolicy("window:0"), h).text, std::string());
        QCOMPARE(applyHistoryPolicy(parseHistoryPolicy("window:5"), h).text, full.text);
        const PolicyHistory s = applyHistoryPolicy(parseHistoryPolicy("summary"), h);
        QCOMPARE(s.summary,
                 std::string("Summary of the earlier conversation (extractive, not model-written): "
                             "the user asked about a; b.\n"));
        QCOMPARE(s.text, s.summary + "Q: c?\nA: C.\n");
        QCOMPARE(s.summarisedRounds, size_t(2));
        QCOMPARE(s.keptRounds, size_t(1));
        // Nothing to summarise yet: the history is verbatim.
        const std::vector<HistoryRound> one(h.begin(), h.begin() + 1);
        QCOMPARE(applyHistoryPolicy(parseHistoryPolicy("summary"), one).text, std::string("Q: a?\nA: A.\n"));
        QCOMPARE(conversationPrompt("Sys.", s, "Q: d?\nA:"), "Sys.\n\n" + s.text + "Q: d?\nA:");
        QCOMPARE(conversationPrompt("", w2, "Q: d?\nA:"), w2.text + "Q: d?\nA:");
    }

    void fullHistoryStructure()
    {
        const ConversationOptions o = options("full");
        std::vector<std::string> answers;
        const Workload w = make(o, &answers);
        QCOMPARE(w.requests.size(), size_t(12));
        QCOMPARE(answers.size(), size_t(12));
        QCOMPARE(w.systemPrompts.size(), size_t(1));
        const std::string &system = w.systemPrompts[0].text;
        QVERIFY(w.systemPrompts[0].words >= 20);
        QVERIFY(startsWith(system, "You are a helpful assistant."));
        for (size_t i = 0; i < w.requests.size(); ++i) {
            const WorkloadRequest &r = w.requests[i];
            // Interleaved: round 0 of users 0, 1, 2, then round 1 of each, ...; arrivals 1/qps apart.
            QCOMPARE(r.id, int64_t(i));
            QCOMPARE(r.round, int(i / 3));
            QCOMPARE(r.user, "u" + std::to_string(i % 3));
            QCOMPARE(r.conversation, r.user);
            QCOMPARE(r.tMs, int64_t(i * 500));
            QCOMPARE(r.tenant, std::string("t0"));
            QCOMPARE(r.systemPromptId, std::string("mt-w20"));
            QCOMPARE(r.kind, RequestKind::New);
            QVERIFY(startsWith(r.prompt, system + "\n\n"));
            QVERIFY(r.prompt.size() > promptFor(r.question).size());
            QCOMPARE(r.prompt.substr(r.prompt.size() - promptFor(r.question).size()), promptFor(r.question));
            QCOMPARE(count(r.prompt, "\nA:"), size_t(r.round + 1));
        }
        for (int u = 0; u < 3; ++u) {
            // Each user's next round arrives users/qps = 1.5 s after its previous one.
            for (int r = 1; r < 4; ++r) {
                const WorkloadRequest &prev = at(w, 3, u, r - 1), &cur = at(w, 3, u, r);
                QCOMPARE(cur.tMs - prev.tMs, int64_t(1500));
                QCOMPARE(cur.model, prev.model);
                // The previous prompt, its answer, then the new question: a growing shared prefix.
                const std::string answer = answers[size_t(u + (r - 1) * 3)];
                QCOMPARE(cur.prompt, prev.prompt + " " + answer + "\n" + promptFor(cur.question));
                // Every earlier question is there, with its answer.
                for (int k = 0; k < r; ++k) {
                    const WorkloadRequest &old = at(w, 3, u, k);
                    QVERIFY(contains(cur.prompt, trainingText(old.question, answers[size_t(old.id)])));
                }
            }
        }
    }

    void windowKeepsLastTurns()
    {
        const Workload full = make(options("full"));
        std::vector<std::string> answers;
        const Workload w = make(options("window:2"), &answers);
        QCOMPARE(w.requests.size(), full.requests.size());
        const std::string &system = w.systemPrompts[0].text;
        for (size_t i = 0; i < w.requests.size(); ++i) {
            const WorkloadRequest &r = w.requests[i];
            // Same conversations and times as under full, only rendered differently.
            QCOMPARE(r.question, full.requests[i].question);
            QCOMPARE(r.intent, full.requests[i].intent);
            QCOMPARE(r.tMs, full.requests[i].tMs);
            const int u = int(i % 3);
            std::string expected = system + "\n\n";
            for (int k = std::max(0, r.round - 2); k < r.round; ++k) {
                const WorkloadRequest &old = at(w, 3, u, k);
                expected += trainingText(old.question, answers[size_t(old.id)]);
            }
            expected += promptFor(r.question);
            QCOMPARE(r.prompt, expected);
            QCOMPARE(count(r.prompt, "\nA:"), size_t(std::min(r.round, 2) + 1));
        }
        // window:0: every round stands alone.
        const Workload none = make(options("window:0"));
        for (const auto &r : none.requests)
            QCOMPARE(r.prompt, system + "\n\n" + promptFor(r.question));
    }

    void summaryReplacesOlderTurns()
    {
        std::vector<std::string> answers;
        const Workload w = make(options("summary"), &answers);
        const std::string &system = w.systemPrompts[0].text;
        for (const auto &r : w.requests) {
            const int u = std::stoi(r.user.substr(1));
            std::string expected = system + "\n\n";
            if (r.round >= 2) {
                std::string topics;
                for (int k = 0; k < r.round - 1; ++k)
                    topics += (k ? "; " : "") + at(w, 3, u, k).lemma;
                expected +=
                    "Summary of the earlier conversation (extractive, not model-written): the user asked "
                    "about " +
                    topics + ".\n";
            }
            if (r.round >= 1) {
                const WorkloadRequest &last = at(w, 3, u, r.round - 1);
                expected += trainingText(last.question, answers[size_t(last.id)]);
            }
            expected += promptFor(r.question);
            QCOMPARE(r.prompt, expected);
        }
    }

    void deterministicBySeed()
    {
        ConversationOptions o = options("window:1");
        o.userHistoryWords = 15;
        o.fracB = 0.5;
        const std::string a = workloadToJsonl(make(o).requests);
        QCOMPARE(workloadToJsonl(make(o).requests), a);
        o.seed = 8;
        QVERIFY(workloadToJsonl(make(o).requests) != a);
        // The per-user history makes every user's context its own, after the shared system prompt.
        const Workload w = make(o);
        const std::string &system = w.systemPrompts[0].text;
        QVERIFY(startsWith(w.requests[0].prompt, system + "\n\nNotes of user u0:"));
        QVERIFY(startsWith(w.requests[1].prompt, system + "\n\nNotes of user u1:"));
        // Bad options.
        for (auto bad : {std::function<void(ConversationOptions &)>([](auto &x) { x.users = 0; }),
                         std::function<void(ConversationOptions &)>([](auto &x) { x.rounds = 0; }),
                         std::function<void(ConversationOptions &)>([](auto &x) { x.qps = 0; }),
                         std::function<void(ConversationOptions &)>([](auto &x) { x.fracB = 1.5; })}) {
            ConversationOptions b = options("full");
            bad(b);
            QCOMPARE(expectError([&] { ConversationGenerator(*m_wn, b); }).code(),
                     ErrorCode::InvalidArgument);
        }
    }

    void jsonlCarriesConversationFields()
    {
        const Workload w = make(options("full"));
        const std::string text = workloadToJsonl(w.requests);
        QVERIFY(contains(text, R"("user":"u1","conversation":"u1","round":0,"model")"));
        const WorkloadReadResult back = parseWorkloadJsonl(text, "mt.jsonl");
        QVERIFY(back.warnings.empty());
        QCOMPARE(back.requests.size(), w.requests.size());
        for (size_t i = 0; i < w.requests.size(); ++i) {
            QCOMPARE(back.requests[i].conversation, w.requests[i].conversation);
            QCOMPARE(back.requests[i].round, w.requests[i].round);
            QCOMPARE(back.requests[i].prompt, w.requests[i].prompt);
        }
        // Old single-turn lines: no fields, round -1; and such requests write no fields either.
        const std::string old =
            R"({"t_ms":0,"tenant":"t0","user":"u1","model":"a","intent":"","max_tokens":8,"prompt":"Q: x?\nA:"})";
        const WorkloadReadResult o = parseWorkloadJsonl(old, "old.jsonl");
        QCOMPARE(o.requests.size(), size_t(1));
        QCOMPARE(o.requests[0].round, -1);
        QCOMPARE(o.requests[0].conversation, std::string());
        QVERIFY(!contains(workloadToJsonl(o.requests), "round"));
        QVERIFY(!contains(workloadToJsonl(o.requests), "conversation"));
        const WorkloadReadResult bad = parseWorkloadJsonl(
            R"({"t_ms":0,"tenant":"t0","user":"u1","model":"a","intent":"","max_tokens":8,"prompt":"p","round":-2})"
            "\n"
            R"({"t_ms":0,"tenant":"t0","user":"u1","model":"a","intent":"","max_tokens":8,"prompt":"p","conversation":3})",
            "bad.jsonl");
        QCOMPARE(bad.requests.size(), size_t(0));
        QCOMPARE(bad.warnings.messages().at(0),
                 std::string("bad.jsonl:1: field 'round' must be a non-negative integer"));
        QCOMPARE(bad.warnings.messages().at(1),
                 std::string("bad.jsonl:2: field 'conversation' must be a string"));
    }

    void costPerPolicy()
    {
        const ConversationOptions o = options("full");
        const auto costs = comparePolicies(
            *m_wn, o,
            {parseHistoryPolicy("full"), parseHistoryPolicy("window:1"), parseHistoryPolicy("summary")});
        QCOMPARE(costs.size(), size_t(3));
        QCOMPARE(costs[0].policy, std::string("full"));
        QCOMPARE(costs[1].policy, std::string("window:1"));
        QCOMPARE(costs[2].policy, std::string("summary:1"));
        std::vector<std::string> answers;
        const Workload w = make(o, &answers);
        int64_t words = 0, maxWords = 0, uncached = 0;
        const int64_t system = wordCount(w.systemPrompts[0].text);
        for (const auto &r : w.requests) {
            words += wordCount(r.prompt);
            maxWords = std::max<int64_t>(maxWords, wordCount(r.prompt));
            // Full history: each round only adds its question; round 0 reuses the shared system
            // prompt except for the very first request.
            uncached += r.round > 0 ? wordCount(promptFor(r.question))
                        : r.id == 0 ? wordCount(r.prompt)
                                    : wordCount(r.prompt) - system;
        }
        QCOMPARE(costs[0].requests, size_t(12));
        QCOMPARE(costs[0].promptWords, words);
        QCOMPARE(costs[0].maxPromptWords, maxWords);
        QCOMPARE(costs[0].uncachedWords, uncached);
        QCOMPARE(costs[0].summaryWords, int64_t(0));
        // A window sends fewer words but breaks the shared prefix, so a cache saves less of them.
        QVERIFY(costs[1].promptWords < costs[0].promptWords);
        QVERIFY(costs[1].uncachedWords > costs[0].uncachedWords);
        QVERIFY(costs[2].promptWords < costs[0].promptWords);
        QVERIFY(costs[2].summaryWords > 0);
        QCOMPARE(expectError([&] { policyCost("x", w.requests, {}, ""); }).code(),
                 ErrorCode::InvalidArgument);
    }

    void roundBreakdownJoinsById()
    {
        std::vector<WorkloadRequest> reqs(6);
        for (size_t i = 0; i < reqs.size(); ++i) {
            reqs[i].id = int64_t(10 + i);
            reqs[i].round = int(i % 3); // rounds 0,1,2,0,1,2
        }
        reqs[5].round = -1; // a single-turn request mixed in
        const std::vector<RequestOutcome> outcomes = {
            {10, false, 100, 0}, {11, true, 150, 90}, {12, true, 200, 180}, {13, true, 100, 50},
            {14, false, 160, 0}, {15, true, 10, 10},  {99, true, 5, 5}};
        const RoundBreakdown b = roundBreakdown(reqs, outcomes);
        QCOMPARE(b.unmatched, size_t(1));
        QCOMPARE(b.withoutRound, size_t(1));
        QCOMPARE(b.rounds.size(), size_t(3));
        QCOMPARE(b.rounds[0].round, 0);
        QCOMPARE(b.rounds[0].requests, int64_t(2));
        QCOMPARE(b.rounds[0].hits, int64_t(1));
        QCOMPARE(b.rounds[0].hitRate, 0.5);
        QCOMPARE(b.rounds[0].tokenHitRate, 50.0 / 200.0);
        QCOMPARE(b.rounds[1].round, 1);
        QCOMPARE(b.rounds[1].hitRate, 0.5);
        QCOMPARE(b.rounds[1].promptTokens, int64_t(310));
        QCOMPARE(b.rounds[1].tokensReused, int64_t(90));
        QCOMPARE(b.rounds[2].round, 2);
        QCOMPARE(b.rounds[2].requests, int64_t(1));
        QCOMPARE(b.rounds[2].hitRate, 1.0);
        QCOMPARE(b.rounds[2].tokenHitRate, 0.9);
        QVERIFY(roundBreakdown(reqs, {}).rounds.empty());
    }
};

QTEST_GUILESS_MAIN(TestConversation)
#include "tst_conversation.moc"
