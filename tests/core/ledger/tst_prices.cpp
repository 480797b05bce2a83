// Price presets: the built-in file parses and says where its numbers come from; a hand-made ledger
// costs exactly what docs/replay.md ("Prices") says under a preset with round numbers (cached input,
// cache writes, the minimum cacheable prefix, storage per hour, response hits free); the old
// Prices{in, out} figure is unchanged; user files fail with one line naming the file, the preset and
// the field; an unknown preset lists the known ones; the comparison table over several presets.
#include "core/ledger/prices.h"
#include "core/ledger/replay_ledger.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"

#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <set>

using namespace kvwb::core;
using kvwb::test::expectError;

namespace {

bool contains(const std::string &haystack, const std::string &needle)
{
    return haystack.find(needle) != std::string::npos;
}

LedgerRow row(int64_t id, int64_t arrivalMs, TierKind by, std::map<TierKind, bool> hits, int prompt,
              int reused, int generated)
{
    LedgerRow r;
    r.requestId = id;
    r.arrivalMs = arrivalMs;
    r.tenant = "t0";
    r.model = ModelRole::A;
    r.answeredBy = by;
    r.tierHits = std::move(hits);
    r.promptTokens = prompt;
    r.tokensReused = reused;
    r.generatedTokens = generated;
    r.tokensComputed = prompt - reused + generated;
    return r;
}

// A stack of exact and prefix tiers (and one knowledge hit), over one hour of workload time.
std::vector<LedgerRow> handLedger()
{
    using T = TierKind;
    const std::map<T, bool> miss = {{T::Exact, false}, {T::Prefix, false}};
    const std::map<T, bool> prefixHit = {{T::Exact, false}, {T::Prefix, true}};
    constexpr int64_t hour = 3'600'000;
    return {
        // a miss: 1000 prompt tokens written to the prefix tree at t = 0, kept 1 h to the last arrival
        row(0, 0, T::None, miss, 1000, 0, 50),
        // an exact hit: free
        row(1, hour / 2, T::Exact, {{T::Exact, true}}, 1000, 1000, 50),
        // a prefix hit: 1000 reused at the cached price, 200 computed and written
        row(2, hour, T::Prefix, prefixHit, 1200, 1000, 40),
        // a prefix hit shorter than the minimum cacheable prefix (100): 64 reused at the input
        // price; the prompt (150) is long enough for its 86 computed tokens to be written
        row(3, hour, T::Prefix, prefixHit, 150, 64, 10),
        // a knowledge hit: the module's 200 tokens at the cached price, the rewritten prompt's other
        // 100 at input (no KV tier keeps a rewritten prompt)
        row(4, hour, T::Knowledge, {{T::Knowledge, true}}, 300, 200, 20),
        // a miss whose prompt (80) is below the minimum: nothing written, all at input
        row(5, 0, T::None, miss, 80, 0, 5),
    };
}

// Round numbers: input 2, cached 0.5, write 3, output 10, storage 1 per 1M per hour, minimum 100.
const char *kTestPresets = R"({"presets": [
  {"id": "round", "provider": "Test", "model": "m1", "currency": "USD", "input": 2, "cached_input": 0.5,
   "cache_write": 3, "output": 10, "storage_per_million_tokens_hour": 1, "min_cacheable_tokens": 100,
   "source": "tst_prices.cpp", "as_of": "2025-01-01"},
  {"id": "gpu", "provider": "self-hosted", "model": "m2", "cached_input": 0,
   "gpu": {"usd_per_hour": 3.6, "prefill_tokens_per_second": 1000, "decode_tokens_per_second": 100,
           "basis": "measured"}}
]})";

void writeText(const std::string &path, const std::string &text)
{
    std::ofstream(path, std::ios::binary) << text;
}

} // namespace

class TestPrices : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void builtinPresetsParse();
    void exactCostsUnderAPreset();
    void oldPricesUnchanged();
    void gpuPresetDerivesPrices();
    void summaryJsonNamesThePreset();
    void approximateHitsWriteNothing();
    void comparison();
    void fileErrors_data();
    void fileErrors();
    void unknownPreset();
    void fileSpecs();
};

void TestPrices::builtinPresetsParse()
{
    const std::vector<PricePreset> all = builtinPricePresets();
    QVERIFY(all.size() >= 6);
    std::set<std::string> providers;
    for (const PricePreset &p : all) {
        providers.insert(p.provider);
        QVERIFY2(!p.source.empty() && p.asOf.size() == 10, p.id.c_str());
        QCOMPARE(p.currency, std::string("USD"));
        QCOMPARE(p.prices.preset, p.id);
    }
    for (const char *provider : {"OpenAI", "Anthropic", "Google", "DeepSeek", "self-hosted"})
        QVERIFY2(providers.count(provider), provider);
    // The old default prices are gpt-4o-mini's list prices; its cached input is half of input.
    const PricePreset &mini = findPricePreset(all, "openai-gpt-4o-mini");
    QCOMPARE(mini.prices.inputPerMillion, 0.15);
    QCOMPARE(mini.prices.outputPerMillion, 0.60);
    QCOMPARE(mini.prices.cachedInputPerMillion, 0.075);
    QCOMPARE(mini.prices.cacheWrite(), 0.15);
    // Anthropic: write 1.25x, read 0.1x of input.
    const PricePreset &sonnet = findPricePreset(all, "anthropic-claude-sonnet-4");
    QCOMPARE(sonnet.prices.cacheWrite(), 1.25 * sonnet.prices.inputPerMillion);
    QCOMPARE(sonnet.prices.cachedInputPerMillion, 0.30);
    // Gemini: storage per hour billed.
    QVERIFY(findPricePreset(all, "google-gemini-2.0-flash").prices.storagePerMillionTokensHour > 0);
    const PricePreset &self = findPricePreset(all, "self-hosted");
    QCOMPARE(self.basis, std::string("projected"));
    QCOMPARE(self.prices.inputPerMillion, 2.5 / (20000 * 3600.0) * 1e6);
    // The listing's JSON reads back as the same presets (derived prices recomputed).
    const std::vector<PricePreset> again = parsePricePresets(pricePresetsJson(all), "listing");
    QCOMPARE(again.size(), all.size());
    for (size_t i = 0; i < all.size(); ++i) {
        QCOMPARE(again[i].id, all[i].id);
        QCOMPARE(again[i].prices.inputPerMillion, all[i].prices.inputPerMillion);
        QCOMPARE(again[i].prices.cacheWrite(), all[i].prices.cacheWrite());
        QCOMPARE(again[i].prices.minCacheableTokens, all[i].prices.minCacheableTokens);
    }
    QVERIFY(
        contains(pricePresetsMarkdown(all), "| openai-gpt-4o-mini | OpenAI | gpt-4o-mini | 0.15 | 0.075 |"));
}

void TestPrices::exactCostsUnderAPreset()
{
    const PricePreset round = findPricePreset(parsePricePresets(kTestPresets, "test"), "round");
    const LedgerSummary s = summarize(handLedger(), round.prices);
    const CostBreakdown &c = s.cost;
    QCOMPARE(c.inputTokens, int64_t(64 + 100 + 80));
    QCOMPARE(c.cachedInputTokens, int64_t(1000 + 200));
    QCOMPARE(c.cacheWriteTokens, int64_t(1000 + 200 + 86));
    QCOMPARE(c.outputTokens, int64_t(50 + 40 + 10 + 20 + 5)); // the exact hit generated nothing
    QCOMPARE(c.storageTokenHours, 1000.0);                    // row 0's 1000 tokens for 1 h
    // USD: 244 x 2 + 1200 x 0.5 + 1286 x 3 + 125 x 10 + 1000 x 1, per million
    QCOMPARE(c.inputUsd, 488e-6);
    QCOMPARE(c.cachedInputUsd, 600e-6);
    QCOMPARE(c.cacheWriteUsd, 3858e-6);
    QCOMPARE(c.outputUsd, 1250e-6);
    QCOMPARE(c.storageUsd, 1000e-6);
    QCOMPARE(s.costUsd, 7196e-6);
    // without caching: 3730 prompt tokens x 2 + 175 generated x 10
    QCOMPARE(s.costUsdNoCache, 9210e-6);
    QCOMPARE(s.prices.preset, std::string("round"));
}

void TestPrices::oldPricesUnchanged()
{
    // Prices{in, out}: computed prompt tokens at in, generated at out, reuse free, no minimum.
    const LedgerSummary s = summarize(handLedger(), Prices{1.0, 2.0});
    // computed prompt: 1000 + 200 + 86 + 100 + 80 = 1466; generated 125
    QCOMPARE(s.costUsd, (1466 * 1.0 + 125 * 2.0) / 1e6);
    // no minimum: row 5's 80 tokens are written too; counted, billed at the input price
    QCOMPARE(s.cost.cacheWriteTokens, int64_t(1366));
    QCOMPARE(s.cost.cacheWriteUsd, 1366e-6);
    QCOMPARE(s.cost.cachedInputUsd, 0.0);
    const LedgerSummary d = summarize(handLedger());
    QCOMPARE(d.costUsd, (1466 * 0.15 + 125 * 0.60) / 1e6);
}

void TestPrices::gpuPresetDerivesPrices()
{
    // $3.60 per hour: 1000 prefill tok/s = 3.6M tokens per hour = $1 per million; decode $10.
    const PricePreset gpu = findPricePreset(parsePricePresets(kTestPresets, "test"), "gpu");
    QCOMPARE(gpu.basis, std::string("measured"));
    QCOMPARE(gpu.prices.inputPerMillion, 1.0);
    QCOMPARE(gpu.prices.outputPerMillion, 10.0);
    QCOMPARE(gpu.prices.cacheWrite(), 1.0);
    const LedgerSummary s = summarize(handLedger(), gpu.prices);
    QCOMPARE(s.costUsd, (1466 * 1.0 + 125 * 10.0) / 1e6);
}

// What a cross-model hit produced is never cached (core/cache/cache_tier.h): its computed tokens are
// billed at the input price, none written; a prefix hit's are written as before.
void TestPrices::approximateHitsWriteNothing()
{
    using T = TierKind;
    const PricePreset round = findPricePreset(parsePricePresets(kTestPresets, "test"), "round");
    const std::map<T, bool> crossHit = {{T::Prefix, false}, {T::Cross, true}};
    const LedgerSummary s = summarize({row(0, 0, T::Cross, crossHit, 1200, 1000, 10)}, round.prices);
    QCOMPARE(s.cost.cachedInputTokens, int64_t(1000));
    QCOMPARE(s.cost.inputTokens, int64_t(200));
    QCOMPARE(s.cost.cacheWriteTokens, int64_t(0));
    QCOMPARE(s.approximateHits, int64_t(1));
    QVERIFY(contains(ledgerSummaryJson(s), "\"approximate_hits\":1"));
    const LedgerSummary p =
        summarize({row(0, 0, T::Prefix, {{T::Prefix, true}}, 1200, 1000, 10)}, round.prices);
    QCOMPARE(p.cost.cacheWriteTokens, int64_t(200));
    QCOMPARE(p.approximateHits, int64_t(0));
}

void TestPrices::summaryJsonNamesThePreset()
{
    const PricePreset round = findPricePreset(parsePricePresets(kTestPresets, "test"), "round");
    const std::string j = ledgerSummaryJson(summarize(handLedger(), round.prices));
    QVERIFY(contains(j, "\"prices\":{"));
    QVERIFY(contains(j, "\"preset\":\"round\""));
    QVERIFY(contains(j, "\"cache_write_tokens\":1286"));
    QVERIFY(contains(ledgerSummaryJson(summarize(handLedger(), Prices{1.0, 2.0})), "\"preset\":\"custom\""));
}

void TestPrices::comparison()
{
    const std::vector<PricePreset> presets = parsePricePresets(kTestPresets, "test");
    const std::vector<PriceComparisonRow> rows = comparePrices(handLedger(), presets);
    QCOMPARE(rows.size(), size_t(2));
    QCOMPARE(rows[0].preset, std::string("round"));
    QCOMPARE(rows[0].costUsd, 7196e-6);
    QCOMPARE(rows[0].costUsdNoCache, 9210e-6);
    QCOMPARE(rows[0].savingPercent, 100.0 * (1.0 - 7196.0 / 9210.0));
    QCOMPARE(rows[1].preset, std::string("gpu"));
    QCOMPARE(rows[1].costUsdNoCache, (3730 * 1.0 + 175 * 10.0) / 1e6);
    const std::string md = priceComparisonMarkdown(rows);
    QVERIFY2(contains(md, "| round | Test | m1 | 0.007196 | 0.009210 | 21.9 |"), md.c_str());
    QVERIFY(contains(priceComparisonJson(rows), "\"saving_percent\""));
    // No rows: nothing to save, no division by zero.
    QCOMPARE(comparePrices({}, presets)[0].savingPercent, 0.0);
}

void TestPrices::fileErrors_data()
{
    QTest::addColumn<QString>("json");
    QTest::addColumn<int>("code");
    QTest::addColumn<QString>("message");
    const QString ok = R"("id": "x", "provider": "p", "model": "m", "cached_input": 0)";
    QTest::newRow("not json") << "{\"presets\": [" << int(ErrorCode::Format) << "mine.json: not JSON";
    QTest::newRow("number too large")
        << "{" + ok + R"(, "input": 1e999, "output": 1})" << int(ErrorCode::Format) << "mine.json: not JSON";
    QTest::newRow("missing input") << "{" + ok + R"(, "output": 1})" << int(ErrorCode::Config)
                                   << "mine.json: preset 0 (x): field 'input' is missing";
    QTest::newRow("missing id") << R"({"presets": [{"provider": "p"}]})" << int(ErrorCode::Config)
                                << "mine.json: preset 0: field 'id' is missing";
    QTest::newRow("another schema")
        << R"({"schema": "kvwb-prices/2", "presets": []})" << int(ErrorCode::Config)
        << "mine.json: field 'schema' is \"kvwb-prices/2\"; this kvwb reads kvwb-prices/1";
    QTest::newRow("negative price")
        << "{" + ok + R"(, "input": 1, "output": 1, "cache_write": -1})" << int(ErrorCode::Config)
        << "mine.json: preset 0 (x): field 'cache_write' is -1: a price cannot be negative";
    QTest::newRow("huge price")
        << "{" + ok + R"(, "input": 1e308, "output": 1})" << int(ErrorCode::Config)
        << "mine.json: preset 0 (x): field 'input' is 1e+308: more than kvwb's limit of 1e+09";
    QTest::newRow("string price") << "{" + ok + R"(, "input": "1", "output": 1})" << int(ErrorCode::Config)
                                  << "field 'input' must be a number, got \"1\"";
    QTest::newRow("misspelt field") << "{" + ok + R"(, "input": 1, "output": 1, "cache_wirte": 2})"
                                    << int(ErrorCode::Config) << "field 'cache_wirte' is not a preset field";
    QTest::newRow("currency") << "{" + ok + R"(, "input": 1, "output": 1, "currency": "EUR"})"
                              << int(ErrorCode::Config)
                              << "field 'currency' is 'EUR': kvwb bills in USD only";
    QTest::newRow("zero throughput")
        << "{" + ok +
               R"(, "gpu": {"usd_per_hour": 2, "prefill_tokens_per_second": 0, "decode_tokens_per_second": 1}})"
        << int(ErrorCode::Config) << "field 'gpu.prefill_tokens_per_second' is 0";
    QTest::newRow("gpu and input") << "{" + ok + R"(, "input": 1, "output": 1, "gpu": {}})"
                                   << int(ErrorCode::Config) << "field 'gpu' and input/output both given";
    QTest::newRow("bad minimum") << "{" + ok + R"(, "input": 1, "output": 1, "min_cacheable_tokens": 1.5})"
                                 << int(ErrorCode::Config)
                                 << "field 'min_cacheable_tokens' must be a whole number";
    QTest::newRow("bad id")
        << R"({"id": "a/b", "provider": "p", "model": "m", "input": 1, "cached_input": 0, "output": 1})"
        << int(ErrorCode::Config) << "field 'id' 'a/b' must be letters";
    QTest::newRow("duplicate id") << "{\"presets\": [{" + ok + R"(, "input": 1, "output": 1}, {)" + ok +
                                         R"(, "input": 2, "output": 2}]})"
                                  << int(ErrorCode::Config) << "mine.json: preset id 'x' appears twice";
    QTest::newRow("presets not a list")
        << R"({"presets": 3})" << int(ErrorCode::Config) << "field 'presets' must be an array";
}

void TestPrices::fileErrors()
{
    QFETCH(QString, json);
    QFETCH(int, code);
    QFETCH(QString, message);
    const Error e = expectError([&] { parsePricePresets(json.toStdString(), "mine.json"); });
    QCOMPARE(int(e.code()), code);
    QVERIFY2(contains(e.what(), message.toStdString()), e.what());
    // One line: scripts and the CLI print it as it is.
    QVERIFY(!contains(e.what(), "\n"));
}

void TestPrices::unknownPreset()
{
    const Error e = expectError([] { resolvePricePreset("gpt-5-ultra"); });
    QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(e.what(), "unknown price preset 'gpt-5-ultra' (known: openai-gpt-4o, "), e.what());
    QVERIFY(contains(e.what(), "self-hosted"));
    QCOMPARE(resolvePricePreset("deepseek-chat").provider, std::string("DeepSeek"));
    const Error e2 = expectError([] { resolvePricePresets("openai-gpt-4o,nope"); });
    QVERIFY(contains(e2.what(), "'nope'"));
    QCOMPARE(resolvePricePresets("").size(), builtinPricePresets().size());
    QCOMPARE(resolvePricePresets(" openai-gpt-4o , self-hosted ").size(), size_t(2));
}

void TestPrices::fileSpecs()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string two = dir.filePath("two.json").toStdString();
    writeText(two, kTestPresets);
    const Error e = expectError([&] { resolvePricePreset(two); });
    QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    QVERIFY2(contains(e.what(), "holds 2 price presets (round, gpu): pick one with " + two + "#ID"),
             e.what());
    QCOMPARE(resolvePricePreset(two + "#gpu").prices.inputPerMillion, 1.0);
    const Error e2 = expectError([&] { resolvePricePreset(two + "#nope"); });
    QVERIFY2(contains(e2.what(), "no price preset 'nope' (it holds: round, gpu)"), e2.what());
    // A file of one preset (the object on its own) needs no #ID.
    const std::string one = dir.filePath("one.json").toStdString();
    writeText(one,
              R"({"id": "mine", "provider": "p", "model": "m", "input": 4, "cached_input": 1, "output": 8})");
    const PricePreset mine = resolvePricePreset(one);
    QCOMPARE(mine.id, std::string("mine"));
    QCOMPARE(mine.prices.cacheWrite(), 4.0); // no write premium unless the file says so
    QCOMPARE(mine.prices.minCacheableTokens, int64_t(0));
    const std::vector<PricePreset> both = resolvePricePresets("openai-gpt-4o," + one);
    QCOMPARE(both.size(), size_t(2));
    QCOMPARE(both[1].id, std::string("mine"));
    // A missing file names its path.
    const Error io = expectError([&] { resolvePricePreset(dir.filePath("none.json").toStdString()); });
    QCOMPARE(io.code(), ErrorCode::Io);
    QVERIFY(contains(io.what(), "none.json"));
    // A bad file names itself.
    const std::string bad = dir.filePath("bad.json").toStdString();
    writeText(bad,
              R"({"id": "b", "provider": "p", "model": "m", "input": -2, "cached_input": 1, "output": 8})");
    const Error e3 = expectError([&] { resolvePricePreset(bad); });
    QVERIFY2(contains(e3.what(), bad + ": preset 0 (b): field 'input' is -2"), e3.what());
}

QTEST_GUILESS_MAIN(TestPrices)
#include "tst_prices.moc"
