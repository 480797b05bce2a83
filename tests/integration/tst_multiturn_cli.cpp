// `kvwb workload multiturn` and `kvwb workload rounds` end to end against the WordNet fixture: a
// conversation workload that reads back with its rounds, the prompt cost per policy on stderr (and
// as JSON), the per-round table of a ledger, and usage errors (exit 2).
#include "core/ledger/replay_ledger.h"
#include "core/model/random_model.h"
#include "core/workload/corpus.h"
#include "core/workload/workload.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"
#include "tests/support/wordnet_fixture.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <fmt/format.h>

#include <cmath>

using Run = kvwb::test::KvwbRun;
using kvwb::test::runKvwb;

class TestMultiturnCli : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    QString m_wn;

    QString path(const char *name) const { return m_tmp.filePath(name); }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        m_wn = m_tmp.filePath("wn");
        kvwb::test::writeWordNetFixture(m_wn.toStdString(), 50);
    }

    void multiturnAndRounds()
    {
        const Run r = runKvwb({"workload", "multiturn", "--wordnet-dir", m_wn, "--out", path("mt.jsonl"),
                               "--users", "3", "--rounds", "4", "--system-tokens", "20", "--concepts", "30",
                               "--history-policy", "window:1"});
        QCOMPARE(r.exitCode, 0);
        QVERIFY2(r.out.contains("12 requests, 3 users x 4 rounds, history policy window:1"),
                 r.out.constData());
        QVERIFY2(r.err.contains("prompt cost per history policy") && r.err.contains("summary:1") &&
                     r.err.contains("full"),
                 r.err.constData());
        const auto w = kvwb::core::readWorkloadJsonl(path("mt.jsonl").toStdString());
        QVERIFY(w.warnings.empty());
        QCOMPARE(w.requests.size(), size_t(12));
        QCOMPARE(w.requests[4].round, 1);
        QCOMPARE(w.requests[4].conversation, std::string("u1"));

        const Run j = runKvwb({"workload", "multiturn", "--wordnet-dir", m_wn, "--out", path("mt2.jsonl"),
                               "--users", "2", "--rounds", "3", "--concepts", "30", "--json"});
        QCOMPARE(j.exitCode, 0);
        const QJsonObject o = QJsonDocument::fromJson(j.out).object();
        QCOMPARE(o["requests"].toInt(), 6);
        QCOMPARE(o["policies"].toArray().size(), 3);
        QCOMPARE(o["policies"].toArray()[0].toObject()["policy"].toString(), QString("full"));

        // A ledger: round 0 misses, later rounds hit half their prompt tokens.
        std::vector<kvwb::core::LedgerRow> rows;
        for (const auto &q : w.requests) {
            kvwb::core::LedgerRow row;
            row.requestId = q.id;
            row.model = kvwb::core::ModelRole::A;
            row.tenant = q.tenant;
            row.promptTokens = 100;
            row.answeredBy = q.round == 0 ? kvwb::core::TierKind::None : kvwb::core::TierKind::Prefix;
            row.tokensReused = q.round == 0 ? 0 : 50;
            rows.push_back(row);
        }
        kvwb::core::writeLedgerCsv(path("l.csv").toStdString(), rows);
        const Run t =
            runKvwb({"workload", "rounds", "--workload", path("mt.jsonl"), "--ledger", path("l.csv")});
        QCOMPARE(t.exitCode, 0);
        QVERIFY2(t.out.contains("token hit rate"), t.out.constData());
        QVERIFY2(t.out.contains("     0         3     0.000           0.000"), t.out.constData());
        QVERIFY2(t.out.contains("     3         3     1.000           0.500"), t.out.constData());
        const Run tj = runKvwb(
            {"workload", "rounds", "--workload", path("mt.jsonl"), "--ledger", path("l.csv"), "--json"});
        QCOMPARE(tj.exitCode, 0);
        const QJsonArray rounds = QJsonDocument::fromJson(tj.out).object()["rounds"].toArray();
        QCOMPARE(rounds.size(), 4);
        QCOMPARE(rounds[1].toObject()["token_hit_rate"].toDouble(), 0.5);
        QCOMPARE(rounds[1].toObject()["rouge_l_vs_reference"].toDouble(), -1.0); // no outputs given

        // The quality cost of a policy: answers against the reference policy's, per round. Round 0
        // answers agree; later ones agree on request ids divisible by 3 only.
        std::string mine, ref;
        for (const auto &q : w.requests) {
            const bool same = q.round == 0 || q.id % 3 == 0;
            ref += fmt::format(R"({{"id":{},"output":"a b c d"}})", q.id) + "\n";
            mine += fmt::format(R"({{"id":{},"output":"{}"}})", q.id, same ? "a b c d" : "a b x y") + "\n";
        }
        kvwb::test::writeFile(path("mine.jsonl").toStdString(), mine);
        kvwb::test::writeFile(path("ref.jsonl").toStdString(), ref);
        const Run q =
            runKvwb({"workload", "rounds", "--workload", path("mt.jsonl"), "--ledger", path("l.csv"),
                     "--outputs", path("mine.jsonl"), "--reference-outputs", path("ref.jsonl"), "--json"});
        QVERIFY2(q.exitCode == 0, q.err.constData());
        const QJsonArray qr = QJsonDocument::fromJson(q.out).object()["rounds"].toArray();
        QCOMPARE(qr[0].toObject()["rouge_l_vs_reference"].toDouble(), 1.0);
        QCOMPARE(qr[0].toObject()["same_answer_as_reference"].toDouble(), 1.0);
        for (int round = 1; round < 4; ++round) {
            int same = 0, n = 0;
            for (const auto &x : w.requests)
                if (x.round == round) {
                    ++n;
                    same += x.id % 3 == 0;
                }
            const double wantRouge = (same + (n - same) * 0.5) / n; // "a b x y" vs "a b c d": LCS 2 of 4
            QCOMPARE(qr[round].toObject()["same_answer_as_reference"].toDouble(), double(same) / n);
            QVERIFY(std::abs(qr[round].toObject()["rouge_l_vs_reference"].toDouble() - wantRouge) < 1e-12);
        }
        // outputs alone, or a malformed outputs file: one clear line
        const Run alone = runKvwb({"workload", "rounds", "--workload", path("mt.jsonl"), "--ledger",
                                   path("l.csv"), "--outputs", path("mine.jsonl")});
        QCOMPARE(alone.exitCode, 2);
        kvwb::test::writeFile(path("bad.jsonl").toStdString(), "{\"id\":0,\"output\":\"x\"}\nnot json\n");
        const Run bad =
            runKvwb({"workload", "rounds", "--workload", path("mt.jsonl"), "--ledger", path("l.csv"),
                     "--outputs", path("bad.jsonl"), "--reference-outputs", path("ref.jsonl")});
        QVERIFY(bad.exitCode != 0);
        QVERIFY2(bad.err.contains("bad.jsonl:2:"), bad.err.constData());
    }

    // kvwb summarise on a random model: rounds up to --keep keep their full history; later rounds
    // carry the model's summary of the older rounds, then the kept round verbatim, then the question;
    // one summary per conversation and length; a workload that is not full-history is refused.
    void modelWrittenSummaries()
    {
        kvwb::core::writeRandomHfModel(m_tmp.filePath("m").toStdString(),
                                       kvwb::core::randomModelPreset("gqa"));
        Run r = runKvwb({"workload", "multiturn", "--wordnet-dir", m_wn, "--out", path("full.jsonl"),
                         "--users", "2", "--rounds", "4", "--system-tokens", "10", "--concepts", "30",
                         "--history-policy", "full"});
        QCOMPARE(r.exitCode, 0);
        r = runKvwb({"summarise", "--workload", path("full.jsonl"), "--model", path("m"), "--keep", "1",
                     "--max-tokens", "4", "--out", path("sum.jsonl"), "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonObject cost = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(cost["summaries"].toInt(), 2 * 2); // rounds 2 and 3 of each conversation
        QVERIFY(cost["summary_tokens"].toInt() > 0);
        const auto full = kvwb::core::readWorkloadJsonl(path("full.jsonl").toStdString()).requests;
        const auto sum = kvwb::core::readWorkloadJsonl(path("sum.jsonl").toStdString()).requests;
        QCOMPARE(sum.size(), full.size());
        const std::string marker = "Summary of the earlier conversation (written by the model): ";
        for (size_t i = 0; i < sum.size(); ++i) {
            QCOMPARE(sum[i].id, full[i].id);
            QCOMPARE(sum[i].round, full[i].round);
            if (full[i].round <= 1) {
                QCOMPARE(sum[i].prompt, full[i].prompt);
                continue;
            }
            QVERIFY2(sum[i].prompt.find(marker) != std::string::npos, sum[i].prompt.c_str());
            const std::string question = kvwb::core::promptFor(full[i].question);
            QVERIFY(sum[i].prompt.size() >= question.size() &&
                    sum[i].prompt.compare(sum[i].prompt.size() - question.size(), question.size(),
                                          question) == 0);
            QVERIFY(sum[i].prompt.size() < full[i].prompt.size() + 200);
        }
        // a windowed workload does not carry each previous prompt: refused, naming the request
        r = runKvwb({"workload", "multiturn", "--wordnet-dir", m_wn, "--out", path("win.jsonl"), "--users",
                     "2", "--rounds", "4", "--system-tokens", "10", "--concepts", "30", "--history-policy",
                     "window:1"});
        QCOMPARE(r.exitCode, 0);
        r = runKvwb(
            {"summarise", "--workload", path("win.jsonl"), "--model", path("m"), "--out", path("x.jsonl")});
        QVERIFY(r.exitCode != 0);
        QVERIFY2(r.err.contains("not a full-history workload"), r.err.constData());
        QVERIFY(!QFile::exists(path("x.jsonl")));
    }

    void usageErrors_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        QTest::newRow("policy") << QStringList{"workload", "multiturn",        "--out",
                                               "x",        "--history-policy", "lru"}
                                << "history policy 'lru'";
        QTest::newRow("wordnet option")
            << QStringList{"workload", "multiturn", "--out", "x", "--requests", "5"}
            << "--requests applies to the wordnet source only";
        QTest::newRow("rounds needs both")
            << QStringList{"workload", "rounds", "--workload", "w.jsonl"} << "--ledger";
        QTest::newRow("out is not for rounds")
            << QStringList{"workload", "rounds", "--out", "x"} << "--out applies to";
    }
    void usageErrors()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        const Run r = runKvwb(args);
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains(message.toUtf8()), r.err.constData());
    }
};

QTEST_GUILESS_MAIN(TestMultiturnCli)
#include "tst_multiturn_cli.moc"
