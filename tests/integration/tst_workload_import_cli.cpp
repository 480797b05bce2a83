// `kvwb workload sharegpt` and `kvwb workload quora` end to end: output that reads back as a
// workload, warnings on stderr and a summary on stdout, --limit/--gap-ms/--system-prompt, and
// one-line errors with exit codes 1 (bad input, naming the file) and 2 (usage).
#include "core/workload/workload.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>

namespace {

using Run = kvwb::test::KvwbRun;
using kvwb::test::runKvwb;

const char *kShareGpt = R"([
  {"id": "a", "conversations": [
    {"from": "human", "value": "What is a car?"}, {"from": "gpt", "value": "A road vehicle."},
    {"from": "human", "value": "And a bus?"}]},
  {"id": "bad", "conversations": [{"from": "gpt", "value": "no question"}]},
  {"id": "b", "conversations": [{"from": "user", "value": "Hi?"}]}
])";

const char *kQuora = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                     "0\t1\t2\tHow do I learn C++?\t\"Best way to \"\"learn\"\" C++?\"\t1\n"
                     "1\t3\t4\tWhat is a car?\tWhat is a bus?\t0\n"
                     "2\t5\n";

} // namespace

class TestWorkloadImportCli : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;

    QString path(const char *name) const { return m_tmp.filePath(name); }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        kvwb::test::writeFile(path("chats.json").toStdString(), kShareGpt);
        kvwb::test::writeFile(path("pairs.tsv").toStdString(), kQuora);
        kvwb::test::writeFile(path("broken.json").toStdString(), "[{\"id\": ");
    }

    void help()
    {
        const Run r = runKvwb({"workload", "--help"});
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.contains("sharegpt") && r.out.contains("--input") && r.out.contains("--gap-ms"));
    }

    void shareGpt()
    {
        const Run r = runKvwb({"workload", "sharegpt", "--input", path("chats.json"), "--out",
                               path("s.jsonl"), "--gap-ms", "500"});
        QCOMPARE(r.exitCode, 0);
        QVERIFY2(r.out.contains("3 requests from 3 conversations") && r.out.contains("(1 skipped)"),
                 r.out.constData());
        QVERIFY2(r.err.contains("chats.json:conversation 1: no human turn"), r.err.constData());
        const auto back = kvwb::core::readWorkloadJsonl(path("s.jsonl").toStdString());
        QVERIFY(back.warnings.empty());
        QCOMPARE(back.requests.size(), size_t(3));
        QCOMPARE(back.requests[1].tMs, int64_t(500));
        QVERIFY(back.requests[1].prompt.rfind(back.requests[0].prompt, 0) == 0);
        QCOMPARE(back.requests[2].user, std::string("c2"));
    }

    void quora()
    {
        const Run r = runKvwb({"workload", "quora", "--input", path("pairs.tsv"), "--out", path("q.jsonl"),
                               "--limit", "3", "--system-prompt", "Be brief."});
        QCOMPARE(r.exitCode, 0);
        QVERIFY2(r.out.contains("3 requests from 2 pairs"), r.out.constData());
        QVERIFY2(r.out.contains("kinds: new 2 paraphrase 1\n"), r.out.constData());
        const auto back = kvwb::core::readWorkloadJsonl(path("q.jsonl").toStdString());
        QCOMPARE(back.requests.size(), size_t(3));
        QCOMPARE(back.requests[1].question, std::string("Best way to \"learn\" C++?"));
        QCOMPARE(back.requests[1].intent, std::string("q1"));
        QCOMPARE(back.requests[2].prompt, std::string("Be brief.\n\nQ: What is a car?\nA:"));
        // Without --limit the malformed last line is reported with its line number.
        const Run all =
            runKvwb({"workload", "quora", "--input", path("pairs.tsv"), "--out", path("q2.jsonl")});
        QCOMPARE(all.exitCode, 0);
        QVERIFY2(all.err.contains("pairs.tsv:4: 2 fields, expected 6"), all.err.constData());
        QVERIFY2(all.out.contains("kinds: near_miss 1 new 2 paraphrase 1\n"), all.out.constData());
    }

    void errors_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("message");
        QTest::newRow("missing input")
            << QStringList{"workload", "sharegpt", "--input", path("none.json"), "--out", path("x.jsonl")}
            << 1 << "none.json: no such file";
        QTest::newRow("not json") << QStringList{"workload",          "sharegpt", "--input",
                                                 path("broken.json"), "--out",    path("x.jsonl")}
                                  << 1 << "broken.json: not valid JSON";
        QTest::newRow("not quora") << QStringList{"workload",         "quora", "--input",
                                                  path("chats.json"), "--out", path("x.jsonl")}
                                   << 1 << "chats.json:1: expected the header";
        QTest::newRow("no input") << QStringList{"workload", "quora", "--out", path("x.jsonl")} << 2
                                  << "--input";
        QTest::newRow("wordnet option")
            << QStringList{"workload", "sharegpt",      "--input", path("chats.json"),
                           "--out",    path("x.jsonl"), "--zipf",  "1.2"}
            << 2 << "--zipf applies to the wordnet source only";
        QTest::newRow("system prompt")
            << QStringList{"workload", "sharegpt",      "--input",         path("chats.json"),
                           "--out",    path("x.jsonl"), "--system-prompt", "x"}
            << 2 << "--system-prompt applies to quora only";
        QTest::newRow("import option")
            << QStringList{"workload", "wordnet", "--out", path("x.jsonl"), "--input", "f"} << 2
            << "--input applies to the sharegpt and quora sources only";
        QTest::newRow("unknown source")
            << QStringList{"workload", "lmsys", "--out", path("x.jsonl")} << 2 << "unknown source 'lmsys'";
    }
    void errors()
    {
        QFETCH(QStringList, args);
        QFETCH(int, code);
        QFETCH(QString, message);
        const Run r = runKvwb(args);
        QCOMPARE(r.exitCode, code);
        QVERIFY2(r.err.contains(message.toUtf8()) && r.err.count('\n') == 1, r.err.constData());
        QVERIFY(!QFile::exists(path("x.jsonl")));
    }
};

QTEST_GUILESS_MAIN(TestWorkloadImportCli)
#include "tst_workload_import_cli.moc"
