// `kvwb prices` end to end: the preset table, a ledger CSV costed under chosen presets (text and
// JSON), and `kvwb replay --prices`: one-line usage errors before any model loads.
#include "core/ledger/replay_ledger.h"
#include "tests/support/kvwb_process.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

using kvwb::test::runKvwb;
using namespace kvwb::core;

class TestPricesCli : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void listsPresets()
    {
        const auto r = runKvwb({"prices"});
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.contains("| openai-gpt-4o-mini | OpenAI | gpt-4o-mini | 0.15 | 0.075 | 0.15 | 0.6 |"));
        QVERIFY(r.out.contains("self-hosted"));
        QVERIFY(r.out.contains("https://"));
        const auto j = runKvwb({"prices", "--json", "--presets", "deepseek-chat"});
        QCOMPARE(j.exitCode, 0);
        const QJsonArray presets = QJsonDocument::fromJson(j.out).object()["presets"].toArray();
        QCOMPARE(presets.size(), 1);
        QCOMPARE(presets[0].toObject()["cached_input"].toDouble(), 0.028);
    }

    void costsALedger()
    {
        QTemporaryDir dir;
        const QString csv = dir.filePath("ledger.csv");
        LedgerRow miss;
        miss.answeredBy = TierKind::None;
        miss.tierHits = {{TierKind::Exact, false}, {TierKind::Prefix, false}};
        miss.promptTokens = 2000;
        miss.tokensComputed = 2100;
        miss.generatedTokens = 100;
        LedgerRow hit = miss;
        hit.requestId = 1;
        hit.answeredBy = TierKind::Prefix;
        hit.tierHits[TierKind::Prefix] = true;
        hit.tokensReused = 1500;
        hit.tokensComputed = 600;
        writeLedgerCsv(csv.toStdString(), {miss, hit});
        const auto r = runKvwb(
            {"prices", "--ledger", csv, "--presets", "openai-gpt-4o,anthropic-claude-sonnet-4", "--json"});
        QCOMPARE(r.exitCode, 0);
        const QJsonArray rows = QJsonDocument::fromJson(r.out).array();
        QCOMPARE(rows.size(), 2);
        // gpt-4o: 2500 computed prompt tokens x 2.50 + 1500 cached x 1.25 + 200 generated x 10
        QCOMPARE(rows[0].toObject()["cost_usd"].toDouble(), (2500 * 2.5 + 1500 * 1.25 + 200 * 10.0) / 1e6);
        QCOMPARE(rows[0].toObject()["cost_usd_no_cache"].toDouble(), (4000 * 2.5 + 200 * 10.0) / 1e6);
        // Sonnet: the 2500 computed tokens are written at 3.75, the 1500 reused read at 0.30
        QCOMPARE(rows[1].toObject()["cost_usd"].toDouble(), (2500 * 3.75 + 1500 * 0.3 + 200 * 15.0) / 1e6);
        const auto t = runKvwb({"prices", "--ledger", csv, "--presets", "openai-gpt-4o"});
        QCOMPARE(t.exitCode, 0);
        QVERIFY2(t.out.contains("| openai-gpt-4o | OpenAI | gpt-4o | 0.010125 | 0.012000 | 15.6 |"),
                 t.out.constData());
    }

    void usageErrors()
    {
        const auto both =
            runKvwb({"replay", "--workload", "none.jsonl", "--prices", "openai-gpt-4o", "--price-in", "1"});
        QCOMPARE(both.exitCode, 2);
        QVERIFY(both.err.contains("--prices and --price-in/--price-out exclude each other"));
        const auto unknown = runKvwb({"replay", "--workload", "none.jsonl", "--prices", "gpt-9"});
        QCOMPARE(unknown.exitCode, 1);
        QVERIFY(unknown.err.contains("unknown price preset 'gpt-9' (known: openai-gpt-4o,"));
        QCOMPARE(unknown.err.count('\n'), 1);
        const auto missing = runKvwb({"prices", "--ledger", "no-such-ledger.csv"});
        QCOMPARE(missing.exitCode, 1);
        QVERIFY(missing.err.contains("no-such-ledger.csv"));
    }
};

QTEST_GUILESS_MAIN(TestPricesCli)
#include "tst_prices_cli.moc"
