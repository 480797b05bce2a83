// Replay ledger: numpy-compatible percentiles, per-tier aggregates and costs of a hand-built ledger,
// the CSV form (every field back exactly, strings with commas, quotes and line breaks, errors naming
// line and column) and /ledgers/<name> in an experiment file (round trip, replace, names, errors).
#include "core/ledger/replay_ledger.h"
#include "core/store/experiment_file.h"
#include "core/store/ledger_store.h"
#include "core/util/error.h"
#include "core/util/text_util.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"
#include "tests/support/tiny_experiment.h"

#include <QTemporaryDir>
#include <QTest>

#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <limits>

using namespace kvwb::core;
namespace fs = std::filesystem;
using kvwb::test::expectError;

namespace {

bool contains(const std::string &haystack, const std::string &needle)
{
    return haystack.find(needle) != std::string::npos;
}

LedgerRow row(int64_t id, TierKind by, std::map<TierKind, bool> hits, int prompt, int reused, int computed,
              int generated, double ttft, double total, bool falseHit = false)
{
    LedgerRow r;
    r.requestId = id;
    r.arrivalMs = id * 100;
    r.tenant = "t0";
    r.model = ModelRole::A;
    r.intent = "n" + std::to_string(id);
    r.answeredBy = by;
    r.tierHits = std::move(hits);
    r.falseHit = falseHit;
    r.promptTokens = prompt;
    r.tokensReused = reused;
    r.tokensComputed = computed;
    r.generatedTokens = generated;
    r.ttftMs = ttft;
    r.totalMs = total;
    return r;
}

// A stack of exact, semantic and prefix tiers: two misses, one exact hit, two semantic hits (one of
// them false), one prefix hit. The second miss carries a stray falseHit flag that must not count.
std::vector<LedgerRow> handLedger()
{
    using T = TierKind;
    const std::map<T, bool> allMiss = {{T::Exact, false}, {T::Semantic, false}, {T::Prefix, false}};
    return {
        row(0, T::None, allMiss, 100, 0, 120, 20, 10, 50),
        row(1, T::Exact, {{T::Exact, true}}, 100, 100, 0, 20, 1, 2),
        row(2, T::Semantic, {{T::Exact, false}, {T::Semantic, true}}, 80, 80, 0, 10, 3, 4, true),
        row(3, T::Prefix, {{T::Exact, false}, {T::Semantic, false}, {T::Prefix, true}}, 200, 150, 80, 30, 6,
            40),
        row(4, T::Semantic, {{T::Exact, false}, {T::Semantic, true}}, 60, 60, 0, 10, 5, 6),
        row(5, T::None, allMiss, 40, 0, 50, 10, 20, 70, true),
    };
}

// Every field set, and strings and doubles a lossy CSV or HDF5 path would mangle.
std::vector<LedgerRow> trickyLedger()
{
    std::vector<LedgerRow> rows = handLedger();
    LedgerRow &a = rows[1];
    a.tenant = "acme, inc.";
    a.intent = "say \"hi\"";
    a.cachedIntent = "two\nlines";
    a.cachedRequestId = 0;
    a.similarity = 1.0 / 3.0;
    a.lookupMs = 0.1 + 0.2;
    a.shadowKl = 1e-300;
    a.shadowExact = 1;
    LedgerRow &b = rows[3];
    b.answeredBy = TierKind::Cross;
    b.tierHits[TierKind::Cross] = true;
    b.model = ModelRole::B;
    b.gate = GateDecision::Pass;
    b.gateValue = -0.0;
    b.similarity = std::numeric_limits<double>::quiet_NaN();
    b.shadowKl = std::numeric_limits<double>::infinity();
    b.intent = "";                   // unknown
    b.cachedIntent = "\r\n,\"\",\r"; // every special character, CRLF inside quotes
    b.ttftMs = 123456.789e-3;
    b.totalMs = -std::numeric_limits<double>::infinity();
    LedgerRow &c = rows[4];
    c.requestId = (int64_t(1) << 53) - 1;
    c.arrivalMs = -(int64_t(1) << 53);
    c.promptTokens = std::numeric_limits<int>::max();
    c.tokensReused = std::numeric_limits<int>::min();
    c.tenant = "caf\xc3\xa9 \xe2\x82\xac";
    c.tierHits.clear(); // no tier consulted
    c.gate = GateDecision::Fail;
    c.gateValue = 4.9406564584124654e-324; // the smallest subnormal
    LedgerRow &d = rows[5];
    d.tierHits[TierKind::Knowledge] = false;
    d.knowledgeNode = "n02958343, \"car\"";
    d.knowledgeVerdict = KnowledgeVerdict::Rejected;
    d.profileApplied = 0;
    LedgerRow &e = rows[0];
    e.answeredBy = TierKind::Knowledge;
    e.tierHits[TierKind::Knowledge] = true;
    e.knowledgeNode = "bus";
    e.knowledgeVerdict = KnowledgeVerdict::Verified;
    e.knowledgeModule = ModuleFate::Recomputed;
    e.profileApplied = 1;
    a.question = "Is a \"car\", in short,\na vehicle?";
    a.answer = "Yes.\r\nA car is a motor vehicle \xe2\x80\x94 caf\xc3\xa9";
    b.answer = std::string(kLedgerTextBytes, 'x');
    return rows;
}

bool sameDouble(double x, double y)
{
    return (std::isnan(x) && std::isnan(y)) || std::memcmp(&x, &y, sizeof x) == 0;
}

// "" when got equals want field by field (doubles bit for bit, NaN as NaN).
QString compareRows(const std::vector<LedgerRow> &got, const std::vector<LedgerRow> &want)
{
    if (got.size() != want.size())
        return QStringLiteral("%1 rows, expected %2").arg(got.size()).arg(want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        const LedgerRow &g = got[i], &w = want[i];
        const auto fail = [&](const char *field) {
            return QStringLiteral("row %1: %2 differs").arg(i).arg(field);
        };
        if (g.requestId != w.requestId || g.arrivalMs != w.arrivalMs ||
            g.cachedRequestId != w.cachedRequestId)
            return fail("an int64 field");
        if (g.tenant != w.tenant || g.model != w.model || g.intent != w.intent ||
            g.cachedIntent != w.cachedIntent || g.gate != w.gate || g.knowledgeNode != w.knowledgeNode ||
            g.knowledgeVerdict != w.knowledgeVerdict || g.knowledgeModule != w.knowledgeModule ||
            g.question != w.question || g.answer != w.answer)
            return fail("a string field");
        if (g.profileApplied != w.profileApplied)
            return fail("profileApplied");
        if (g.answeredBy != w.answeredBy || g.tierHits != w.tierHits)
            return fail("answeredBy or tierHits");
        if (g.falseHit != w.falseHit || g.promptTokens != w.promptTokens ||
            g.tokensReused != w.tokensReused || g.tokensComputed != w.tokensComputed ||
            g.generatedTokens != w.generatedTokens || g.shadowExact != w.shadowExact)
            return fail("an int field");
        if (!sameDouble(g.similarity, w.similarity) || !sameDouble(g.ttftMs, w.ttftMs) ||
            !sameDouble(g.totalMs, w.totalMs) || !sameDouble(g.lookupMs, w.lookupMs) ||
            !sameDouble(g.gateValue, w.gateValue) || !sameDouble(g.shadowKl, w.shadowKl))
            return fail("a double field");
    }
    return {};
}

} // namespace

class TestReplayLedger : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void tierNames();
    void percentileMatchesNumpy_data();
    void percentileMatchesNumpy();
    void percentileEdgeCases();
    void summarizeHandLedger();
    void summarizeEmpty();
    void notServedRowsCountOnlyThere();
    void csvRoundTrip();
    void csvFileWrittenAtomically();
    void ledgerTextIsValidAndBounded();
    void knowledgeRowsAndOlderFiles();
    void csvErrorsNameLineAndColumn_data();
    void csvErrorsNameLineAndColumn();
    void hdf5RoundTrip();
    void hdf5Layout();
    void replaceKeepsOthers();
    void missingName();
    void invalidName_data();
    void invalidName();
    void invalidLedgerLeavesFileUntouched();
};

void TestReplayLedger::tierNames()
{
    for (TierKind t : {TierKind::None, TierKind::Exact, TierKind::Semantic, TierKind::Prefix, TierKind::Cross,
                       TierKind::Knowledge})
        QCOMPARE(parseTierKind(tierKindName(t)), std::optional<TierKind>(t));
    QCOMPARE(std::string(tierKindName(TierKind::Cross)), std::string("cross"));
    QCOMPARE(std::string(tierKindName(TierKind::Knowledge)), std::string("knowledge"));
    QVERIFY(!parseTierKind("Exact"));
    QVERIFY(!parseTierKind(""));
}

void TestReplayLedger::percentileMatchesNumpy_data()
{
    // Expected values worked out by hand with numpy's method: sorted v, i = (n - 1) p / 100,
    // v[floor i] + (v[floor i + 1] - v[floor i]) * frac(i).
    QTest::addColumn<std::vector<double>>("values");
    QTest::addColumn<double>("p");
    QTest::addColumn<double>("expected");
    QTest::newRow("empty") << std::vector<double>{} << 50.0 << 0.0;
    QTest::newRow("single") << std::vector<double>{7} << 99.0 << 7.0;
    QTest::newRow("median of 4") << std::vector<double>{4, 1, 3, 2} << 50.0 << 2.5; // i = 1.5
    QTest::newRow("p25 of 4") << std::vector<double>{1, 2, 3, 4} << 25.0 << 1.75;   // i = 0.75
    QTest::newRow("p0") << std::vector<double>{3, 1, 2} << 0.0 << 1.0;
    QTest::newRow("p100") << std::vector<double>{3, 1, 2} << 100.0 << 3.0;
    QTest::newRow("p40 of 5") << std::vector<double>{15, 20, 35, 40, 50} << 40.0 << 29.0; // i = 1.6
    QTest::newRow("p90 of 5") << std::vector<double>{15, 20, 35, 40, 50} << 90.0 << 46.0; // i = 3.6
    QTest::newRow("p95 of 6") << std::vector<double>{10, 1, 3, 6, 5, 20} << 95.0 << 17.5; // i = 4.75
    QTest::newRow("p99 of 2") << std::vector<double>{10, 20} << 99.0 << 19.9;             // i = 0.99
}

void TestReplayLedger::percentileMatchesNumpy()
{
    QFETCH(std::vector<double>, values);
    QFETCH(double, p);
    QFETCH(double, expected);
    QCOMPARE(percentile(values, p), expected);
}

void TestReplayLedger::percentileEdgeCases()
{
    // numpy interpolates from the upper neighbour when the fraction is >= 0.5: for [0.1, 0.7] at 70
    // that is 0.7 - 0.6 * 0.3 = 0.5199999999999999, one ulp below 0.1 + 0.6 * 0.7 = 0.52.
    QVERIFY(percentile({0.1, 0.7}, 70) == 0.5199999999999999);
    QVERIFY(std::isnan(percentile({1, std::numeric_limits<double>::quiet_NaN()}, 50)));
    // p is in percent, as numpy.percentile: 0.95 is a mistake worth an error, not the 1st percentile.
    for (double p : {-1.0, 100.5, std::numeric_limits<double>::quiet_NaN()}) {
        const Error e = expectError([&] { percentile({1, 2}, p); });
        QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    }
}

void TestReplayLedger::summarizeHandLedger()
{
    const LedgerSummary s = summarize(handLedger(), Prices{1.0, 2.0});
    QCOMPARE(s.requests, int64_t(6));
    QCOMPARE(s.hits, int64_t(4));
    QCOMPARE(s.falseHits, int64_t(1)); // row 5's flag is on a miss
    QCOMPARE(s.hitRate, 4.0 / 6.0);
    QCOMPARE(s.falseHitRate, 1.0 / 3.0); // 3 response hits
    QCOMPARE(s.tokensReused, int64_t(390));
    QCOMPARE(s.tokensComputed, int64_t(250));
    QCOMPARE(s.tokenHitRate, 390.0 / 580.0);
    // TTFT sorted 1 3 5 6 10 20; total 2 4 6 40 50 70
    QCOMPARE(s.ttftMsP50, 5.5);
    QCOMPARE(s.ttftMsP95, 17.5);
    QCOMPARE(s.ttftMsP99, 19.5);
    QCOMPARE(s.totalMsP50, 23.0);
    QCOMPARE(s.totalMsP95, 65.0);
    QCOMPARE(s.totalMsP99, 69.0);
    // computed: prompt 100 + 50 + 40 = 190 at $1/M, generated 20 + 30 + 10 = 60 at $2/M
    QCOMPARE(s.costUsd, 310e-6);
    // no cache: prompt 580 at $1/M, generated 100 at $2/M
    QCOMPARE(s.costUsdNoCache, 780e-6);

    QCOMPARE(s.tiers.size(), size_t(4)); // none, exact, semantic, prefix: no cross tier in the stack
    const TierAggregate &none = s.tiers.at(TierKind::None);
    QCOMPARE(none.requests, int64_t(2));
    QCOMPARE(none.hits, int64_t(0));
    QCOMPARE(none.falseHits, int64_t(0));
    QCOMPARE(none.tokensComputed, int64_t(170));
    QCOMPARE(none.ttftMsP50, 15.0);
    QCOMPARE(none.ttftMsP99, 19.9);
    const TierAggregate &exact = s.tiers.at(TierKind::Exact);
    QCOMPARE(exact.requests, int64_t(6));
    QCOMPARE(exact.hits, int64_t(1));
    QCOMPARE(exact.tokensReused, int64_t(100));
    QCOMPARE(exact.ttftMsP95, 1.0);
    const TierAggregate &semantic = s.tiers.at(TierKind::Semantic);
    QCOMPARE(semantic.requests, int64_t(5));
    QCOMPARE(semantic.hits, int64_t(2));
    QCOMPARE(semantic.falseHits, int64_t(1));
    QCOMPARE(semantic.tokensReused, int64_t(140));
    QCOMPARE(semantic.tokensComputed, int64_t(0));
    QCOMPARE(semantic.ttftMsP50, 4.0);
    QCOMPARE(semantic.ttftMsP95, 4.9);
    QCOMPARE(semantic.ttftMsP99, 4.98);
    const TierAggregate &prefix = s.tiers.at(TierKind::Prefix);
    QCOMPARE(prefix.requests, int64_t(3));
    QCOMPARE(prefix.hits, int64_t(1));
    QCOMPARE(prefix.tokensReused, int64_t(150));
    QCOMPARE(prefix.tokensComputed, int64_t(80));
    QCOMPARE(prefix.ttftMsP50, 6.0);

    // Default prices: $0.15 / $0.60 per million.
    const LedgerSummary d = summarize(handLedger());
    QCOMPARE(d.costUsd, (190 * 0.15 + 60 * 0.60) / 1e6);
    QCOMPARE(d.costUsdNoCache, (580 * 0.15 + 100 * 0.60) / 1e6);
}

// Rows a replay did not serve (too long for the context, their worker died) are counted in
// not_served and nowhere else, and survive the CSV.
void TestReplayLedger::notServedRowsCountOnlyThere()
{
    std::vector<LedgerRow> rows(3);
    for (int i = 0; i < 3; ++i) {
        rows[size_t(i)].requestId = i;
        rows[size_t(i)].promptTokens = 10;
        rows[size_t(i)].tokensComputed = 12;
        rows[size_t(i)].generatedTokens = 2;
        rows[size_t(i)].ttftMs = 5;
    }
    rows[1].notServed = NotServed::Context;
    rows[1].tokensComputed = 0;
    rows[2].notServed = NotServed::Worker;
    rows[2].tokensComputed = 0;
    const LedgerSummary s = summarize(rows, Prices{1.0, 2.0});
    QCOMPARE(s.requests, int64_t(1));
    QCOMPARE(s.notServed, int64_t(2));
    QCOMPARE(s.notServedBy.at("context"), int64_t(1));
    QCOMPARE(s.notServedBy.at("worker"), int64_t(1));
    QCOMPARE(s.tokensComputed, int64_t(12));
    QCOMPARE(s.costUsdNoCache, (10 * 1.0 + 2 * 2.0) / 1e6);
    const auto back = ledgerFromCsv(ledgerToCsv(rows), "ledger.csv");
    QCOMPARE(back[1].notServed, NotServed::Context);
    QCOMPARE(back[2].notServed, NotServed::Worker);
    QVERIFY(back[0].notServed == NotServed::No);
    QVERIFY(contains(ledgerSummaryJson(s), "\"not_served\":2"));
}

void TestReplayLedger::summarizeEmpty()
{
    const LedgerSummary s = summarize({});
    QCOMPARE(s.requests, int64_t(0));
    QCOMPARE(s.hitRate, 0.0);
    QCOMPARE(s.tokenHitRate, 0.0);
    QCOMPARE(s.falseHitRate, 0.0);
    QCOMPARE(s.ttftMsP99, 0.0);
    QCOMPARE(s.costUsd, 0.0);
    QCOMPARE(s.tiers.size(), size_t(1));
    QCOMPARE(s.tiers.at(TierKind::None).requests, int64_t(0));
}

void TestReplayLedger::csvRoundTrip()
{
    const std::vector<LedgerRow> rows = trickyLedger();
    const std::string csv = ledgerToCsv(rows);
    QVERIFY(
        csv.rfind("request_id,arrival_ms,tenant,model,intent,answered_by,hit_exact,hit_semantic,hit_prefix,"
                  "hit_cross,hit_knowledge,cached_intent,",
                  0) == 0);
    QVERIFY(contains(csv, "\"acme, inc.\""));
    QVERIFY(contains(csv, "\"say \"\"hi\"\"\""));
    QVERIFY(contains(csv, "\"two\nlines\""));
    QString e = compareRows(ledgerFromCsv(csv, "ledger.csv"), rows);
    QVERIFY2(e.isEmpty(), qPrintable(e));

    // Spreadsheets write CRLF between records; the CRLF inside the quoted field must survive.
    std::string crlf;
    bool quoted = false;
    for (char c : csv) {
        quoted = c == '"' ? !quoted : quoted;
        crlf += (c == '\n' && !quoted) ? std::string("\r\n") : std::string(1, c);
    }
    e = compareRows(ledgerFromCsv(crlf + "\r\n", "ledger.csv"), rows);
    QVERIFY2(e.isEmpty(), qPrintable(e));

    // An empty ledger is its header.
    QVERIFY(ledgerFromCsv(ledgerToCsv({}), "empty.csv").empty());
}

// Questions and answers are kept as valid UTF-8 of at most kLedgerTextBytes, cut at a character
// boundary with the cut marked (an answer decoded from tokens may end inside a character).
void TestReplayLedger::ledgerTextIsValidAndBounded()
{
    const std::string ell = "\xe2\x80\xa6";
    QCOMPARE(ledgerText("What is a car?"), std::string("What is a car?"));
    QCOMPARE(ledgerText(""), std::string());
    // A stray continuation byte and a lead byte cut short: each becomes U+FFFD.
    QCOMPARE(ledgerText("a\x80"
                        "b\xe2\x82"),
             std::string("a\xef\xbf\xbd"
                         "b\xef\xbf\xbd\xef\xbf\xbd"));
    // Exactly the limit is kept whole; one byte more is cut, the cut marked.
    const std::string full(kLedgerTextBytes, 'q');
    QCOMPARE(ledgerText(full), full);
    const std::string cut = ledgerText(full + "r");
    QCOMPARE(cut.size(), kLedgerTextBytes);
    QCOMPARE(cut.substr(cut.size() - 3), ell);
    QCOMPARE(cut.substr(0, kLedgerTextBytes - 3), full.substr(0, kLedgerTextBytes - 3));
    // Two-byte characters: the cut never splits one.
    std::string wide;
    for (size_t i = 0; i < kLedgerTextBytes; ++i)
        wide += "\xc3\xa9";
    for (bool keepEnd : {false, true}) {
        const std::string t = ledgerText(wide, keepEnd);
        QVERIFY(t.size() <= kLedgerTextBytes);
        QVERIFY(!text::firstInvalidUtf8(t).has_value());
        QCOMPARE(keepEnd ? t.substr(0, 3) : t.substr(t.size() - 3), ell);
    }
    // keepEnd keeps a long prompt's end, where its question is.
    const std::string prompt = std::string(5000, 's') + "\n\nQ: What is a car?\nA:";
    const std::string kept = ledgerText(prompt, true);
    QCOMPARE(kept.size(), kLedgerTextBytes);
    QVERIFY(kept.rfind(ell, 0) == 0);
    QVERIFY(kept.ends_with("\n\nQ: What is a car?\nA:"));
}

// Knowledge hits stand for a node's intent: a false one counts like a false response hit; rejected
// candidates and recomputed modules are the tier's own counts. A ledger written before the
// knowledge tier's columns existed still reads, every row "not consulted".
void TestReplayLedger::knowledgeRowsAndOlderFiles()
{
    using T = TierKind;
    std::vector<LedgerRow> rows = handLedger();
    for (auto &r : rows)
        r.tierHits[T::Knowledge] = false;
    rows[0].answeredBy = T::Knowledge;
    rows[0].tierHits[T::Knowledge] = true;
    rows[0].knowledgeVerdict = KnowledgeVerdict::Verified;
    rows[0].knowledgeModule = ModuleFate::Recomputed;
    rows[0].falseHit = true; // the node of another intent
    rows[5].knowledgeVerdict = KnowledgeVerdict::Rejected;
    rows[5].falseHit = true; // a miss: must not count
    const LedgerSummary s = summarize(rows);
    const TierAggregate &k = s.tiers.at(T::Knowledge);
    QCOMPARE(k.requests, int64_t(6));
    QCOMPARE(k.hits, int64_t(1));
    QCOMPARE(k.falseHits, int64_t(1));
    QCOMPARE(k.rejected, int64_t(1));
    QCOMPARE(k.modulesRecomputed, int64_t(1));
    QCOMPARE(s.falseHits, int64_t(2));   // row 2's semantic one and the knowledge one
    QCOMPARE(s.falseHitRate, 2.0 / 4.0); // of 3 response hits + 1 knowledge hit
    QVERIFY(contains(ledgerSummaryJson(s), "\"rejected\":1"));

    // The same CSV without the knowledge columns, as an older kvwb wrote it.
    const std::vector<LedgerRow> plain = handLedger();
    std::string csv = ledgerToCsv(plain), old;
    std::vector<std::string> lines;
    for (size_t at = 0; at < csv.size();) {
        const size_t nl = csv.find('\n', at);
        lines.push_back(csv.substr(at, nl - at));
        at = nl + 1;
    }
    std::vector<std::string> header;
    for (size_t at = 0; at <= lines[0].size();) {
        const size_t comma = std::min(lines[0].find(',', at), lines[0].size());
        header.push_back(lines[0].substr(at, comma - at));
        at = comma + 1;
    }
    for (const auto &line : lines) {
        std::vector<std::string> cells;
        for (size_t at = 0; at <= line.size();) {
            const size_t comma = std::min(line.find(',', at), line.size());
            cells.push_back(line.substr(at, comma - at));
            at = comma + 1;
        }
        std::string kept;
        for (size_t c = 0; c < cells.size(); ++c)
            if (header[c].rfind("knowledge_", 0) != 0 && header[c] != "hit_knowledge" &&
                header[c] != "profile_applied")
                kept += (kept.empty() ? "" : ",") + cells[c];
        old += kept + "\n";
    }
    QVERIFY(!contains(old, "knowledge"));
    const QString e = compareRows(ledgerFromCsv(old, "old.csv"), plain);
    QVERIFY2(e.isEmpty(), qPrintable(e));
}

void TestReplayLedger::csvFileWrittenAtomically()
{
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "ledger.csv";
    writeLedgerCsv(path, trickyLedger());
    QVERIFY(!fs::exists(path.string() + ".tmp"));
    const QString e = compareRows(ledgerFromCsv(kvwb::test::readFile(path), "ledger.csv"), trickyLedger());
    QVERIFY2(e.isEmpty(), qPrintable(e));
    const Error err =
        expectError([&] { writeLedgerCsv(fs::path(dir.path().toStdString()) / "no/dir/x.csv", {}); });
    QCOMPARE(err.code(), ErrorCode::Io);
    QVERIFY2(contains(err.what(), "no/dir/x.csv"), err.what());
}

void TestReplayLedger::csvErrorsNameLineAndColumn_data()
{
    // Row 0 (lines 2-3) holds "two\nlines" in a quoted field, so row 1 starts on line 4.
    QTest::addColumn<QString>("edit");
    QTest::addColumn<QString>("message");
    QTest::newRow("bad integer") << "prompt_tokens=x"
                                 << "ledger.csv:4: column prompt_tokens: 'x' is not";
    QTest::newRow("int overflow") << "prompt_tokens=2147483648"
                                  << "ledger.csv:4: column prompt_tokens";
    QTest::newRow("bad number") << "ttft_ms=1.5ms"
                                << "ledger.csv:4: column ttft_ms: '1.5ms' is not a number";
    QTest::newRow("bad tier") << "answered_by=cache"
                              << "ledger.csv:4: column answered_by: 'cache'";
    QTest::newRow("bad hit") << "hit_exact=yes"
                             << "ledger.csv:4: column hit_exact: 'yes' is not 1, 0 or empty";
    QTest::newRow("bad flag") << "false_hit=2"
                              << "ledger.csv:4: column false_hit: '2' is not 0 or 1";
    QTest::newRow("bad gate") << "gate=maybe"
                              << "ledger.csv:4: column gate: 'maybe' is not pass, fail or empty";
    QTest::newRow("bad module") << "knowledge_module=kept"
                                << "ledger.csv:4: column knowledge_module: 'kept' is not reused, recomputed, "
                                   "too-long or empty";
    QTest::newRow("bad store")
        << "store=Hit"
        << "ledger.csv:4: column store: 'Hit' is not hit, miss, refused, unavailable or "
           "empty";
    QTest::newRow("bad not served")
        << "not_served=late"
        << "ledger.csv:4: column not_served: 'late' is not context, worker or empty";
    QTest::newRow("missing column") << "drop gate"
                                    << "ledger.csv:1: column gate is missing";
    QTest::newRow("short row") << "truncate"
                               << "ledger.csv:4: 42 fields, the header has 43";
    QTest::newRow("unclosed quote") << "unclosed"
                                    << "ledger.csv:4: quoted field";
    QTest::newRow("empty") << "empty"
                           << "ledger.csv: no header row";
}

void TestReplayLedger::csvErrorsNameLineAndColumn()
{
    QFETCH(QString, edit);
    QFETCH(QString, message);
    std::vector<LedgerRow> rows = handLedger();
    rows[0].cachedIntent = "two\nlines";
    std::string csv = ledgerToCsv(rows);
    // Row 1 is the 4th line of the text; rewrite one of its cells.
    size_t start = 0;
    for (int i = 0; i < 3; ++i)
        start = csv.find('\n', start) + 1;
    const size_t end = csv.find('\n', start);
    const std::string header = csv.substr(0, csv.find('\n'));
    std::vector<std::string> names, cells;
    for (size_t p = 0, q; p <= header.size(); p = q + 1) {
        q = std::min(header.find(',', p), header.size());
        names.push_back(header.substr(p, q - p));
    }
    const std::string line = csv.substr(start, end - start);
    for (size_t p = 0, q; p <= line.size(); p = q + 1) {
        q = std::min(line.find(',', p), line.size());
        cells.push_back(line.substr(p, q - p));
    }
    QCOMPARE(cells.size(), names.size());
    const std::string e = edit.toStdString();
    if (e == "drop gate") {
        csv.replace(0, header.size(), std::string(header).replace(header.find(",gate,"), 6, ",gatex,"));
    } else if (e == "truncate") {
        csv.replace(start, end - start, line.substr(0, line.rfind(',')));
    } else if (e == "unclosed") {
        csv.replace(start, end - start, "\"" + line);
    } else if (e == "empty") {
        csv.clear();
    } else {
        const std::string column = e.substr(0, e.find('='));
        const size_t c = size_t(std::find(names.begin(), names.end(), column) - names.begin());
        QVERIFY(c < names.size());
        cells[c] = e.substr(e.find('=') + 1);
        std::string joined;
        for (size_t i = 0; i < cells.size(); ++i)
            joined += (i ? "," : "") + cells[i];
        csv.replace(start, end - start, joined);
    }
    const Error err = expectError([&] { ledgerFromCsv(csv, "ledger.csv"); });
    QCOMPARE(err.code(), ErrorCode::Format);
    QVERIFY2(contains(err.what(), message.toStdString()), err.what());
}

void TestReplayLedger::hdf5RoundTrip()
{
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    QVERIFY(listLedgers(path).empty()); // create() leaves /ledgers empty
    const std::vector<LedgerRow> rows = trickyLedger();
    const std::string settings =
        R"({"workload": "w.jsonl", "tiers": ["exact", "semantic"], "note": "caf\u00e9"})";
    saveLedger(path, "run-2.b", rows, settings);
    saveLedger(path, "empty", {}, "");
    QCOMPARE(listLedgers(path), (std::vector<std::string>{"empty", "run-2.b"}));
    std::string got;
    const QString e = compareRows(loadLedger(path, "run-2.b", &got), rows);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    QCOMPARE(got, settings);
    QVERIFY(loadLedger(path, "empty", &got).empty());
    QCOMPARE(got, std::string());
    // Still an experiment file.
    QCOMPARE(ExperimentReader::open(path).promptCount(), 0);
}

void TestReplayLedger::hdf5Layout()
{
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    saveLedger(path, "r", handLedger(), "{}");
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    QVERIFY(f >= 0);
    const hid_t numbers = H5Dopen2(f, "/ledgers/r/numbers", H5P_DEFAULT);
    QVERIFY(numbers >= 0);
    const hid_t space = H5Dget_space(numbers);
    hsize_t dims[2] = {0, 0};
    QCOMPARE(H5Sget_simple_extent_ndims(space), 2);
    H5Sget_simple_extent_dims(space, dims, nullptr);
    QCOMPARE(dims[0], hsize_t(6));
    // the 21 of a single process + the fleet's worker + guarded_same_intent + the verifier's score,
    // time and same-intent
    QCOMPARE(dims[1], hsize_t(26));
    QVERIFY(H5Aexists(numbers, "columns") > 0);
    H5Sclose(space);
    H5Dclose(numbers);
    for (const char *name : {"tenant", "model", "intent", "cached_intent", "answered_by", "gate", "store",
                             "route", "semantic_decision"}) {
        // bytes + offsets, like the prompts' text: nothing variable-length in a kvwb/2 file
        for (const std::string suffix : {"", "_offsets"}) {
            const hid_t ds = H5Dopen2(f, (std::string("/ledgers/r/") + name + suffix).c_str(), H5P_DEFAULT);
            QVERIFY2(ds >= 0, name);
            const hid_t type = H5Dget_type(ds);
            QCOMPARE(H5Tget_class(type), H5T_INTEGER);
            QCOMPARE(H5Tget_size(type), suffix.empty() ? size_t(1) : size_t(8));
            H5Tclose(type);
            H5Dclose(ds);
        }
    }
    QVERIFY(H5Aexists_by_name(f, "/ledgers/r", "settings", H5P_DEFAULT) > 0);
    H5Fclose(f);
}

void TestReplayLedger::replaceKeepsOthers()
{
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    saveLedger(path, "a", handLedger(), R"({"v": 1})");
    saveLedger(path, "b", trickyLedger(), "");
    std::vector<LedgerRow> shorter = handLedger();
    shorter.resize(2);
    shorter[1].tenant = "replaced";
    saveLedger(path, "a", shorter, R"({"v": 2})");
    QCOMPARE(listLedgers(path), (std::vector<std::string>{"a", "b"}));
    std::string settings;
    QString e = compareRows(loadLedger(path, "a", &settings), shorter);
    QVERIFY2(e.isEmpty(), qPrintable(e));
    QCOMPARE(settings, std::string(R"({"v": 2})"));
    e = compareRows(loadLedger(path, "b"), trickyLedger());
    QVERIFY2(e.isEmpty(), qPrintable(e));
}

void TestReplayLedger::missingName()
{
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    saveLedger(path, "present", handLedger(), "");
    const Error e = expectError([&] { loadLedger(path, "absent"); });
    QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(e.what(), "no ledger 'absent'") && contains(e.what(), "present") &&
                 contains(e.what(), path.string()),
             e.what());
    const Error io = expectError([&] { listLedgers(path.parent_path() / "none.h5"); });
    QCOMPARE(io.code(), ErrorCode::Io);
}

void TestReplayLedger::invalidName_data()
{
    QTest::addColumn<QString>("name");
    QTest::newRow("empty") << "";
    QTest::newRow("slash") << "a/b";
    QTest::newRow("space") << "a b";
    QTest::newRow("hidden") << ".a.partial";
}

void TestReplayLedger::invalidName()
{
    QFETCH(QString, name);
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    const std::string n = name.toStdString();
    for (int op = 0; op < 2; ++op) {
        const Error e = expectError([&] {
            if (op == 0)
                saveLedger(path, n, handLedger(), "");
            else
                loadLedger(path, n);
        });
        QCOMPARE(e.code(), ErrorCode::InvalidArgument);
        QVERIFY2(contains(e.what(), "ledger name '" + n + "'"), e.what());
    }
}

void TestReplayLedger::invalidLedgerLeavesFileUntouched()
{
    QTemporaryDir dir;
    const fs::path path = kvwb::test::makeTinyExperiment(dir);
    saveLedger(path, "keep", handLedger(), "");
    const std::string before = kvwb::test::readFile(path);
    std::vector<LedgerRow> big = handLedger();
    big[2].requestId = (int64_t(1) << 53) + 1;
    Error e = expectError([&] { saveLedger(path, "keep", big, ""); });
    QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(e.what(), "row 2 request_id"), e.what());
    std::vector<LedgerRow> noneTier = handLedger();
    noneTier[0].tierHits[TierKind::None] = false;
    e = expectError([&] { saveLedger(path, "keep", noneTier, ""); });
    QVERIFY2(contains(e.what(), "row 0 tierHits holds 'none'"), e.what());
    e = expectError([&] { saveLedger(path, "keep", handLedger(), "{\"v\": "); });
    QVERIFY2(contains(e.what(), "settings is not valid JSON"), e.what());
    QVERIFY(kvwb::test::readFile(path) == before);
}

QTEST_GUILESS_MAIN(TestReplayLedger)
#include "tst_replay_ledger.moc"
