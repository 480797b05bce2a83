// `kvwb corpus wordnet` and `kvwb workload wordnet` end to end against the WordNet fixture:
// help, output files, determinism, and one-line errors with exit codes 1 (missing data) and 2 (usage).
#include "core/workload/workload.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"
#include "tests/support/wordnet_fixture.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <sys/stat.h>

namespace fs = std::filesystem;

namespace {

using Run = kvwb::test::KvwbRun;
using kvwb::test::runKvwb;

} // namespace

class TestWordNetCli : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    QString m_wn;

    QString out(const char *name) const { return m_tmp.filePath(name); }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        m_wn = m_tmp.filePath("wn");
        kvwb::test::writeWordNetFixture(m_wn.toStdString(), 20);
    }

    void help_data()
    {
        QTest::addColumn<QString>("cmd");
        QTest::newRow("corpus") << "corpus";
        QTest::newRow("workload") << "workload";
    }
    void help()
    {
        QFETCH(QString, cmd);
        const Run r = runKvwb({cmd, "--help"});
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.contains("Usage:") && r.out.contains("--wordnet-dir"));
    }

    void corpusDeterministic()
    {
        const QStringList args = {"corpus",     "wordnet", "--wordnet-dir", m_wn,
                                  "--concepts", "10",      "--seed",        "3"};
        const Run a = runKvwb(args + QStringList{"--out", out("c1.jsonl")});
        QCOMPARE(a.exitCode, 0);
        QVERIFY2(a.out.contains("10 concepts"), a.out.constData());
        QVERIFY(a.err.contains("warnings")); // the fixture has malformed lines
        QCOMPARE(runKvwb(args + QStringList{"--out", out("c2.jsonl")}).exitCode, 0);
        const std::string c1 = kvwb::test::readFile(out("c1.jsonl").toStdString());
        QCOMPARE(kvwb::test::readFile(out("c2.jsonl").toStdString()), c1);
        QVERIFY(c1.find("\"split\":\"validation\"") != std::string::npos);
    }

    // `kvwb corpus context`: the kinds asked for, seeded, names and numbers without WordNet, and the
    // options of the other source refused.
    void contextPromptSet()
    {
        const QStringList args = {"corpus",  "context", "--wordnet-dir", m_wn,
                                  "--count", "7",       "--distance",    "1"};
        const Run a = runKvwb(args + QStringList{"--out", out("ctx1.jsonl")});
        QCOMPARE(a.exitCode, 0);
        QVERIFY2(a.out.contains(
                     "21 prompts (7 each of names, numbers, facts), 3 facts stated, 1 sentence or turn"),
                 a.out.constData());
        QCOMPARE(runKvwb(args + QStringList{"--out", out("ctx2.jsonl")}).exitCode, 0);
        const std::string c1 = kvwb::test::readFile(out("ctx1.jsonl").toStdString());
        QCOMPARE(kvwb::test::readFile(out("ctx2.jsonl").toStdString()), c1);
        for (const char *field : {"\"kind\":\"facts\"", "\"answer\":", "\"split\":\"validation\""})
            QVERIFY2(c1.find(field) != std::string::npos, field);
        const Run n = runKvwb({"corpus", "context", "--wordnet-dir", "/nonexistent/wn", "--kinds", "numbers",
                               "--count", "3", "--out", out("ctx3.jsonl")});
        QVERIFY2(n.exitCode == 0, n.err.constData()); // no WordNet read for numbers
        const std::string c3 = kvwb::test::readFile(out("ctx3.jsonl").toStdString());
        QCOMPARE(std::count(c3.begin(), c3.end(), '\n'), 3);
        for (const auto &[extra, message] : std::vector<std::pair<QStringList, QString>>{
                 {{"--kinds", "names,dates"}, "--kinds: unknown context kind 'dates'"},
                 {{"--kinds", "names,names"}, "'names' given twice"},
                 {{"--entities", "1"}, "--entities expects an integer in [2, 8]"},
                 {{"--min-examples", "2"}, "--min-examples applies to the wordnet source only"},
                 {{"--kinds", "numbers", "--counterfactual"}, "apply to the facts kind only"}}) {
            const Run r = runKvwb(QStringList{"corpus", "context", "--out", out("bad.jsonl")} + extra);
            QCOMPARE(r.exitCode, 2);
            QVERIFY2(r.err.contains(message.toUtf8()), r.err.constData());
            QVERIFY(!fs::exists(out("bad.jsonl").toStdString()));
        }
        const Run w =
            runKvwb({"corpus", "wordnet", "--wordnet-dir", m_wn, "--count", "5", "--out", out("bad.jsonl")});
        QCOMPARE(w.exitCode, 2);
        QVERIFY2(w.err.contains("--count applies to the context source only"), w.err.constData());
    }

    void workloadReadsBack()
    {
        const Run r = runKvwb({"workload", "wordnet", "--wordnet-dir", m_wn, "--out", out("w.jsonl"),
                               "--requests", "300", "--tenants", "2", "--system-words", "0,20"});
        QCOMPARE(r.exitCode, 0);
        QVERIFY2(r.out.contains("300 requests"), r.out.constData());
        const auto back = kvwb::core::readWorkloadJsonl(out("w.jsonl").toStdString());
        QCOMPARE(back.requests.size(), size_t(300));
        QVERIFY(back.warnings.empty());
    }

    // Writers never replace a FIFO, a device or a directory at --out (they used to rename over it:
    // as root, `--out /dev/null` turned /dev/null into a regular file).
    void neverReplacesANonRegularOutput()
    {
        const std::string fifo = out("fifo").toStdString();
        QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
        for (const QStringList &args : {QStringList{"workload", "wordnet", "--wordnet-dir", m_wn,
                                                    "--requests", "20", "--out", out("fifo")},
                                        QStringList{"corpus", "wordnet", "--wordnet-dir", m_wn, "--concepts",
                                                    "5", "--out", out("fifo")}}) {
            const Run r = runKvwb(args);
            QCOMPARE(r.exitCode, 1);
            QVERIFY2(r.err.contains("fifo (--out): is a FIFO; kvwb replaces only regular files"),
                     r.err.constData());
            QVERIFY(std::filesystem::is_fifo(fifo));
            QVERIFY(!std::filesystem::exists(fifo + ".tmp"));
        }
    }

    void errors_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("message");
        QTest::newRow("missing dir") << QStringList{"corpus",          "wordnet", "--wordnet-dir",
                                                    "/nonexistent/wn", "--out",   "x"}
                                     << 1 << "wordnet-base";
        QTest::newRow("unknown source")
            << QStringList{"corpus", "wikipedia", "--out", "x"} << 2 << "wikipedia";
        QTest::newRow("no out") << QStringList{"workload", "wordnet"} << 2 << "--out";
        QTest::newRow("probabilities")
            << QStringList{"workload", "wordnet", "--out", "x", "--p-repeat", "0.7", "--p-paraphrase", "0.7"}
            << 2 << "<= 1";
        QTest::newRow("bad zipf") << QStringList{"workload", "wordnet", "--out", "x", "--zipf", "-1"} << 2
                                  << "--zipf";
    }
    void errors()
    {
        QFETCH(QStringList, args);
        QFETCH(int, code);
        QFETCH(QString, message);
        const Run r = runKvwb(args);
        QCOMPARE(r.exitCode, code);
        QVERIFY2(r.err.contains(message.toUtf8()) && r.err.count('\n') == 1, r.err.constData());
    }
};

QTEST_GUILESS_MAIN(TestWordNetCli)
#include "tst_wordnet_cli.moc"
