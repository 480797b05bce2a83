// Workload importers: ShareGPT conversations (growing shared prefixes across turns, both role
// spellings, system prompts, malformed records skipped with warnings naming the conversation) and
// Quora question pairs (quoted fields with tabs and line breaks, intents and kinds of duplicate and
// non-duplicate pairs, malformed lines skipped with warnings naming file:line), limits, and errors.
#include "core/util/error.h"
#include "core/workload/workload.h"
#include "core/workload/workload_import.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QTest>

using namespace kvwb::core;
namespace fs = std::filesystem;
using kvwb::test::expectError;

namespace {

bool contains(const std::string &haystack, const std::string &needle)
{
    return haystack.find(needle) != std::string::npos;
}

bool startsWith(const std::string &s, const std::string &prefix)
{
    return s.rfind(prefix, 0) == 0;
}

// Two good conversations around three malformed ones.
const char *kShareGpt = R"([
  {"id": "a1", "conversations": [
    {"from": "system", "value": "Be brief."},
    {"from": "human", "value": "What is a car?"},
    {"from": "gpt", "value": "A road vehicle."},
    {"from": "human", "value": "And a bus?"},
    {"from": "gpt", "value": "A big one."},
    {"from": "human", "value": "Thanks, bye."}]},
  {"id": "bad-role", "conversations": [{"from": "bing", "value": "hi"}]},
  {"id": "only-answers", "conversations": [{"from": "gpt", "value": "Hello!"}]},
  {"id": "b2", "conversations": [
    {"from": "user", "value": "Hi, \"you\"?"},
    {"from": "assistant", "value": "Yes."},
    {"from": "user", "value": "Tell me more."}]},
  "not an object",
  {"id": "no-value", "conversations": [{"from": "human"}]}
])";

const char *kQuora = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                     "0\t1\t2\tHow do I learn C++?\tWhat is the best way to learn C++?\t1\n"
                     "1\t3\t4\tWhat is a car?\tWhat is a bus?\t0\n"
                     "2\t5\t6\t\"Is \"\"x\"\" a\tquote?\"\t\"Line one\nline two\"\t1\n"
                     "3\t7\t8\tSame?\tSame?\t1\n"
                     "4\t9\t10\tfive fields\t0\n"
                     "five\t11\t12\ta\tb\t0\n"
                     "6\t13\t14\ta\tb\tyes\n"
                     "7\t15\t16\t\"closed\" early\tb\t0\n"
                     "\n"
                     "8\t17\t18\t\tb\t1\r\n"
                     "9\t19\t20\tLast?\tFinal?\t0\r\n";

} // namespace

class TestWorkloadImport : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void shareGptTurnsShareGrowingPrefixes();
    void shareGptMalformedRecordsSkipped();
    void shareGptErrors();
    void shareGptRoundsAndPolicies();
    void shareGptMaxRoundsAndInterleave();
    void shareGptStrictNamesConversation();
    void quoraPairs();
    void quoraMalformedLinesNamed();
    void quoraErrors();
    void limitAndOptions();
    void filesAndJsonlRoundTrip();
};

void TestWorkloadImport::shareGptTurnsShareGrowingPrefixes()
{
    ImportOptions o;
    o.gapMs = 250;
    o.maxTokens = 32;
    const ImportResult r = parseShareGpt(kShareGpt, "chats.json", o);
    QCOMPARE(r.records, size_t(6));
    QCOMPARE(r.requests.size(), size_t(5)); // three human turns, then two
    const auto &q = r.requests;
    QCOMPARE(q[0].prompt, std::string("Be brief.\n\nUser: What is a car?\nAssistant:"));
    QCOMPARE(q[1].prompt, std::string("Be brief.\n\nUser: What is a car?\nAssistant: A road vehicle.\n"
                                      "User: And a bus?\nAssistant:"));
    for (size_t i = 0; i < q.size(); ++i) {
        QCOMPARE(q[i].id, int64_t(i));
        QCOMPARE(q[i].tMs, int64_t(i) * 250);
        QCOMPARE(q[i].tenant, std::string("sharegpt"));
        QCOMPARE(q[i].model, ModelRole::A);
        QCOMPARE(q[i].kind, RequestKind::New);
        QCOMPARE(q[i].intent, std::string());
        QCOMPARE(q[i].ref, int64_t(-1));
        QCOMPARE(q[i].maxTokens, 32);
    }
    // Each turn's prompt is a prefix of the next turn's (the prefix cache's case), and the prompt
    // grows by the answer and the next question.
    QVERIFY(startsWith(q[1].prompt, q[0].prompt));
    QVERIFY(startsWith(q[2].prompt, q[1].prompt));
    QVERIFY(contains(q[2].prompt, "A big one.\nUser: Thanks, bye.\nAssistant:"));
    QVERIFY(startsWith(q[4].prompt, q[3].prompt));
    QCOMPARE(q[3].prompt, std::string("User: Hi, \"you\"?\nAssistant:")); // no system turn
    QCOMPARE(q[2].question, std::string("Thanks, bye."));
    // One user per conversation, named by its index in the file.
    QCOMPARE(q[0].user, std::string("c0"));
    QCOMPARE(q[2].user, std::string("c0"));
    QCOMPARE(q[3].user, std::string("c3"));
}

void TestWorkloadImport::shareGptMalformedRecordsSkipped()
{
    const ImportResult r = parseShareGpt(kShareGpt, "chats.json");
    QCOMPARE(r.warnings.total(), size_t(4));
    const auto &w = r.warnings.messages();
    QVERIFY2(startsWith(w[0], "chats.json:conversation 1: turn 0: unknown role 'bing'"), w[0].c_str());
    QVERIFY2(w[1] == "chats.json:conversation 2: no human turn", w[1].c_str());
    QVERIFY2(w[2] == "chats.json:conversation 4: not a JSON object", w[2].c_str());
    QVERIFY2(startsWith(w[3], "chats.json:conversation 5: turn 0: \"value\""), w[3].c_str());
    const ImportResult more = parseShareGpt(
        R"([{"conversations": [{"from": "human", "value": "q"}, {"from": "system", "value": "late"}]},
            {"conversations": {"from": "human"}}, {"id": 3},
            {"conversations": [{"from": "human", "value": ""}]},
            {"conversations": [{"from": "human", "value": "fine"}]}])",
        "x.json");
    QCOMPARE(more.requests.size(), size_t(1));
    QCOMPARE(more.requests[0].user, std::string("c4"));
    const auto &m = more.warnings.messages();
    QCOMPARE(m.size(), size_t(4));
    QVERIFY2(contains(m[0], "conversation 0: turn 1: a system turn after"), m[0].c_str());
    QVERIFY2(contains(m[1], "conversation 1: \"conversations\" is not an array"), m[1].c_str());
    QVERIFY2(contains(m[2], "conversation 2: no \"conversations\""), m[2].c_str());
    QVERIFY2(contains(m[3], "conversation 3: turn 0: empty human message"), m[3].c_str());
}

void TestWorkloadImport::shareGptErrors()
{
    Error e = expectError([] { parseShareGpt("[{\"id\": 1,", "broken.json"); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(startsWith(e.what(), "broken.json: not valid JSON"), e.what());
    e = expectError([] { parseShareGpt(R"({"conversations": []})", "obj.json"); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(contains(e.what(), "expected a JSON array"), e.what());
    e = expectError([] { parseShareGpt(R"([{"id": 1}, 5])", "bad.json"); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(contains(e.what(), "bad.json: nothing to import (2 conversations, 2 skipped; first: "
                                "bad.json:conversation 0: no \"conversations\")"),
             e.what());
    e = expectError([] { parseShareGpt("[]", "empty.json"); });
    QCOMPARE(e.code(), ErrorCode::Format);
}

void TestWorkloadImport::shareGptRoundsAndPolicies()
{
    const ImportResult full = parseShareGpt(kShareGpt, "chats.json");
    const auto &f = full.requests;
    QCOMPARE(f.size(), size_t(5));
    const int rounds[] = {0, 1, 2, 0, 1};
    const char *conversations[] = {"c0", "c0", "c0", "c3", "c3"};
    for (size_t i = 0; i < f.size(); ++i) {
        QCOMPARE(f[i].round, rounds[i]);
        QCOMPARE(f[i].conversation, std::string(conversations[i]));
    }
    QVERIFY(contains(workloadToJsonl(f), R"("user":"c0","conversation":"c0","round":2,)"));

    ImportOptions o;
    o.historyPolicy = parseHistoryPolicy("window:1");
    const ImportResult w = parseShareGpt(kShareGpt, "chats.json", o);
    QCOMPARE(w.requests.size(), size_t(5));
    QCOMPARE(w.requests[0].prompt, f[0].prompt);
    QCOMPARE(w.requests[1].prompt, f[1].prompt);
    // Round 2 keeps round 1 (with its recorded answer) and drops round 0.
    QCOMPARE(w.requests[2].prompt, std::string("Be brief.\n\nUser: And a bus?\nAssistant: A big one.\n"
                                               "User: Thanks, bye.\nAssistant:"));
    QVERIFY(!contains(w.requests[2].prompt, "What is a car?"));

    o.historyPolicy = parseHistoryPolicy("window:0");
    QCOMPARE(parseShareGpt(kShareGpt, "chats.json", o).requests[2].prompt,
             std::string("Be brief.\n\nUser: Thanks, bye.\nAssistant:"));

    o.historyPolicy = parseHistoryPolicy("summary");
    const ImportResult s = parseShareGpt(kShareGpt, "chats.json", o);
    QCOMPARE(s.requests[1].prompt, f[1].prompt); // one earlier round: kept verbatim
    QCOMPARE(s.requests[2].prompt,
             std::string("Be brief.\n\nSummary of the earlier conversation (extractive, not model-written): "
                         "the user asked about What is a car?.\nUser: And a bus?\nAssistant: A big one.\n"
                         "User: Thanks, bye.\nAssistant:"));
    // Long questions are cut to their first 8 words in the summary.
    o.historyPolicy = parseHistoryPolicy("summary:0");
    const ImportResult longer = parseShareGpt(
        R"([{"conversations": [{"from": "human", "value": "one two three\nfour five six seven eight nine ten"},
                               {"from": "gpt", "value": "ok"}, {"from": "human", "value": "next"}]}])",
        "l.json", o);
    QCOMPARE(
        longer.requests[1].prompt,
        std::string("Summary of the earlier conversation (extractive, not model-written): the user asked "
                    "about one two three four five six seven eight....\nUser: next\nAssistant:"));
}

void TestWorkloadImport::shareGptMaxRoundsAndInterleave()
{
    ImportOptions o;
    o.maxRounds = 2;
    const ImportResult r = parseShareGpt(kShareGpt, "chats.json", o);
    QCOMPARE(r.requests.size(), size_t(4)); // c0 rounds 0, 1; c3 rounds 0, 1
    QCOMPARE(r.requests[1].round, 1);
    QCOMPARE(r.requests[2].conversation, std::string("c3"));

    // Two concurrent clients: round 0 of both conversations, then round 1 of both, then c0's round 2.
    o.maxRounds = 0;
    o.interleave = 2;
    o.gapMs = 100;
    const ImportResult i = parseShareGpt(kShareGpt, "chats.json", o);
    QCOMPARE(i.requests.size(), size_t(5));
    const char *order[] = {"c0", "c3", "c0", "c3", "c0"};
    const int rounds[] = {0, 0, 1, 1, 2};
    for (size_t k = 0; k < i.requests.size(); ++k) {
        QCOMPARE(i.requests[k].conversation, std::string(order[k]));
        QCOMPARE(i.requests[k].round, rounds[k]);
        QCOMPARE(i.requests[k].id, int64_t(k));
        QCOMPARE(i.requests[k].tMs, int64_t(k) * 100);
    }
    // The limit applies after interleaving.
    o.limit = 3;
    const ImportResult l = parseShareGpt(kShareGpt, "chats.json", o);
    QCOMPARE(l.requests.size(), size_t(3));
    QCOMPARE(l.requests[2].conversation, std::string("c0"));
    QCOMPARE(l.requests[2].round, 1);
}

void TestWorkloadImport::shareGptStrictNamesConversation()
{
    ImportOptions o;
    o.strict = true;
    Error e = expectError([&] { parseShareGpt(kShareGpt, "chats.json", o); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(startsWith(e.what(), "chats.json:conversation 1: turn 0: unknown role 'bing'"), e.what());
    e = expectError([&] {
        parseShareGpt(R"([{"conversations": [{"from": "human", "value": "q"}]},
                          {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": 7}]}])",
                      "s.json", o);
    });
    QCOMPARE(std::string(e.what()),
             std::string("s.json:conversation 1: turn 1: \"value\" is missing or not a string"));
}

void TestWorkloadImport::quoraPairs()
{
    ImportOptions o;
    o.systemPrompt = "Answer briefly.";
    const ImportResult r = parseQuoraPairs(kQuora, "pairs.tsv", o);
    QCOMPARE(r.records, size_t(10)); // the blank line is not a record
    QCOMPARE(r.requests.size(), size_t(10));
    const auto &q = r.requests;
    // Duplicate pair: one intent, the second a paraphrase of the first.
    QCOMPARE(q[0].question, std::string("How do I learn C++?"));
    QCOMPARE(q[0].kind, RequestKind::New);
    QCOMPARE(q[0].ref, int64_t(-1));
    QCOMPARE(q[0].intent, std::string("q1"));
    QCOMPARE(q[1].intent, std::string("q1"));
    QCOMPARE(q[1].kind, RequestKind::Paraphrase);
    QCOMPARE(q[1].ref, int64_t(0));
    // Non-duplicate pair: two intents, a near miss.
    QCOMPARE(q[2].intent, std::string("q3"));
    QCOMPARE(q[3].intent, std::string("q4"));
    QCOMPARE(q[3].kind, RequestKind::NearMiss);
    QCOMPARE(q[3].ref, int64_t(2));
    // Quoted fields: doubled quotes, a tab and a line break inside.
    QCOMPARE(q[4].question, std::string("Is \"x\" a\tquote?"));
    QCOMPARE(q[5].question, std::string("Line one\nline two"));
    QCOMPARE(q[5].kind, RequestKind::Paraphrase);
    // Identical texts: an exact repeat.
    QCOMPARE(q[7].kind, RequestKind::ExactRepeat);
    QCOMPARE(q[7].ref, int64_t(6));
    // CRLF line ends are not part of the text.
    QCOMPARE(q[9].question, std::string("Final?"));
    for (size_t i = 0; i < q.size(); ++i) {
        QCOMPARE(q[i].id, int64_t(i));
        QCOMPARE(q[i].tMs, int64_t(i) * 1000);
        QCOMPARE(q[i].tenant, std::string("quora"));
        QCOMPARE(q[i].systemPromptId, std::string("quora-system"));
        QCOMPARE(q[i].prompt, requestPrompt("Answer briefly.", q[i].question));
    }
    QCOMPARE(q[0].user, std::string("p0"));
    QCOMPARE(q[9].user, std::string("p9"));
}

void TestWorkloadImport::quoraMalformedLinesNamed()
{
    const ImportResult r = parseQuoraPairs(kQuora, "pairs.tsv");
    const auto &w = r.warnings.messages();
    QCOMPARE(r.warnings.total(), size_t(5));
    // Line 4 holds a quoted line break, so the records after it start one line later.
    QCOMPARE(w[0], std::string("pairs.tsv:7: 5 fields, expected 6"));
    QCOMPARE(w[1], std::string("pairs.tsv:8: id 'five' is not a non-negative integer"));
    QCOMPARE(w[2], std::string("pairs.tsv:9: is_duplicate 'yes' is not 0 or 1"));
    QCOMPARE(w[3], std::string("pairs.tsv:10: text after the closing quote of field 4"));
    QCOMPARE(w[4], std::string("pairs.tsv:12: question1 is empty"));
    // An unterminated quote swallows the rest of the file: one warning naming where it opened.
    const ImportResult open = parseQuoraPairs(
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t1\t2\ta\tb\t0\n2\t3\t4\t\"a\n\tb\t0\n",
        "o.tsv");
    QCOMPARE(open.requests.size(), size_t(2));
    QCOMPARE(open.warnings.messages().at(0),
             std::string("o.tsv:3: quoted field 4 opened on line 3 is not closed"));
}

void TestWorkloadImport::quoraErrors()
{
    Error e = expectError([] { parseQuoraPairs("question1\tquestion2\nx\ty\n", "glue.tsv"); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(startsWith(e.what(), "glue.tsv:1: expected the header"), e.what());
    e = expectError(
        [] { parseQuoraPairs("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t2\n", "short.tsv"); });
    QCOMPARE(e.code(), ErrorCode::Format);
    QVERIFY2(contains(e.what(), "short.tsv: nothing to import (1 pairs, 1 skipped; first: short.tsv:2:"),
             e.what());
    e = expectError([] { parseQuoraPairs("", "empty.tsv"); });
    QCOMPARE(e.code(), ErrorCode::Format);
}

void TestWorkloadImport::limitAndOptions()
{
    ImportOptions o;
    o.limit = 3;
    o.tenant = "qq";
    o.gapMs = 0;
    const ImportResult q = parseQuoraPairs(kQuora, "pairs.tsv", o);
    QCOMPARE(q.requests.size(), size_t(3)); // cuts the second pair after its first question
    QCOMPARE(q.records, size_t(2));
    QCOMPARE(q.requests[2].tenant, std::string("qq"));
    QCOMPARE(q.requests[2].tMs, int64_t(0));
    QCOMPARE(q.requests[2].systemPromptId, std::string());
    QCOMPARE(q.requests[2].prompt, std::string("Q: What is a car?\nA:"));
    o.limit = 4;
    const ImportResult s = parseShareGpt(kShareGpt, "chats.json", o);
    QCOMPARE(s.requests.size(), size_t(4));
    QCOMPARE(s.records, size_t(4)); // stopped inside conversation 3
    QCOMPARE(s.warnings.total(), size_t(2));
    ImportOptions bad;
    bad.maxTokens = 0;
    QCOMPARE(expectError([&] { parseShareGpt(kShareGpt, "c.json", bad); }).code(),
             ErrorCode::InvalidArgument);
    bad = {};
    bad.gapMs = -1;
    QCOMPARE(expectError([&] { parseQuoraPairs(kQuora, "p.tsv", bad); }).code(), ErrorCode::InvalidArgument);
}

void TestWorkloadImport::filesAndJsonlRoundTrip()
{
    QTemporaryDir dir;
    const fs::path json = fs::path(dir.path().toStdString()) / "chats.json";
    const fs::path tsv = fs::path(dir.path().toStdString()) / "pairs.tsv";
    kvwb::test::writeFile(json, kShareGpt);
    kvwb::test::writeFile(tsv, kQuora);
    const ImportResult s = importShareGpt(json);
    QVERIFY2(startsWith(s.warnings.messages().at(0), "chats.json:conversation 1"),
             s.warnings.messages()[0].c_str());
    const ImportResult q = importQuoraPairs(tsv);
    QCOMPARE(q.requests.size(), size_t(10));
    // Imported workloads read back through the replay's JSONL reader (unknown intents included).
    for (const ImportResult *r : {&s, &q}) {
        const fs::path out = fs::path(dir.path().toStdString()) / "w.jsonl";
        writeWorkloadJsonl(out, r->requests);
        const WorkloadReadResult back = readWorkloadJsonl(out);
        QVERIFY2(back.warnings.empty(), back.warnings.summary().c_str());
        QCOMPARE(back.requests.size(), r->requests.size());
        for (size_t i = 0; i < back.requests.size(); ++i) {
            QCOMPARE(back.requests[i].prompt, r->requests[i].prompt);
            QCOMPARE(back.requests[i].intent, r->requests[i].intent);
            QCOMPARE(back.requests[i].kind, r->requests[i].kind);
            QCOMPARE(back.requests[i].ref, r->requests[i].ref);
        }
    }
    for (const fs::path &missing :
         {fs::path(dir.path().toStdString()) / "none.json", fs::path(dir.path().toStdString())}) {
        const Error e = expectError([&] { importShareGpt(missing); });
        QCOMPARE(e.code(), ErrorCode::Io);
        QVERIFY2(contains(e.what(), missing.string()), e.what());
    }
    const Error e = expectError([&] { importQuoraPairs(fs::path(dir.path().toStdString()) / "none.tsv"); });
    QCOMPARE(e.code(), ErrorCode::Io);
    QVERIFY2(contains(e.what(), "none.tsv"), e.what());
}

QTEST_GUILESS_MAIN(TestWorkloadImport)
#include "tst_workload_import.moc"
