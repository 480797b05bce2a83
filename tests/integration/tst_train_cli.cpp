// `kvwb train` end to end: trains its own SentencePiece tokenizer, writes an HF directory that
// `kvwb info`/`generate`/`eval-qa` load, can be interrupted and resumed, trains on a corpus shard,
// and reports bad corpora and bad options.
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <sys/types.h>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

using Run = kvwb::test::KvwbRun;
using kvwb::test::runKvwb;

QString q(const fs::path &p)
{
    return QString::fromStdString(p.string());
}

} // namespace

class TestTrainCli : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    fs::path m_corpus;

private Q_SLOTS:
    void initTestCase()
    {
        m_corpus = fs::path(m_tmp.path().toStdString()) / "corpus.jsonl";
        std::string text;
        const char *things[] = {"cat", "dog", "car", "tree", "house", "river", "bread", "stone"};
        const char *glosses[] = {"A small domestic feline.",      "A loyal domestic canine.",
                                 "A motor vehicle with wheels.",  "A tall perennial woody plant.",
                                 "A building where people live.", "A large natural stream of water.",
                                 "Food made of flour and water.", "A piece of hard rock."};
        const char *templates[] = {"What is a %s?", "Explain %s.", "Define %s.", "Tell me about %s."};
        for (int t = 0; t < 4; ++t)
            for (int i = 0; i < 8; ++i) {
                char question[128];
                std::snprintf(question, sizeof question, templates[t], things[i]);
                const std::string prompt = std::string("Q: ") + question + "\\nA:";
                text += std::string("{\"text\": \"") + prompt + " " + glosses[i] + "\\n\", \"prompt\": \"" +
                        prompt + "\", \"answer\": \"" + glosses[i] + "\", \"rank\": " + std::to_string(i) +
                        ", \"split\": \"" + (t == 3 ? "validation" : "train") + "\"}\n";
            }
        text += "{not json\n";
        test::writeFile(m_corpus, text);
    }

    void trainGenerateEvaluate()
    {
        const fs::path out = fs::path(m_tmp.path().toStdString()) / "model";
        const Run r = runKvwb({"train", "--corpus", q(m_corpus), "--out", q(out), "--preset", "tiny",
                               "--train-tokenizer", "300", "--steps", "12", "--seq-len", "48", "--batch", "4",
                               "--eval-every", "6", "--lr", "1e-2"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(r.err.contains("corpus.jsonl:33: not a JSON object")); // malformed line reported, skipped
        const auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["steps"].toInt(), 12);
        QVERIFY(j["final_val_loss"].toDouble() > 0);
        QVERIFY(fs::exists(out / "tokenizer.model"));
        const Run info = runKvwb({"info", q(out)});
        QCOMPARE(info.exitCode, 0);
        const auto card = QJsonDocument::fromJson(info.out).object();
        QCOMPARE(card["tokenizer"].toObject()["kind"].toString(), QString("sentencepiece"));
        QCOMPARE(card["vocab"].toInt(), 300);
        const Run gen = runKvwb({"generate", "--model", q(out), "--prompt",
                                 "Q: What is a cat?\nA:", "--max-tokens", "6", "--json"});
        QCOMPARE(gen.exitCode, 0);
        QCOMPARE(QJsonDocument::fromJson(gen.out).object()["prompt_ids"].toArray().first().toInt(), 1); // BOS
        const Run eval =
            runKvwb({"eval-qa", "--model", q(out), "--corpus", q(m_corpus), "--json", "--max-tokens", "8"});
        QVERIFY2(eval.exitCode == 0, eval.err.constData());
        const auto e = QJsonDocument::fromJson(eval.out).object();
        QCOMPARE(e["questions"].toInt(), 8);
        QVERIFY(e["word_f1"].toDouble() >= 0.0 && e["word_f1"].toDouble() <= 1.0);
    }

    void resumeContinues()
    {
        const fs::path out = fs::path(m_tmp.path().toStdString()) / "resumed";
        const fs::path tok = fs::path(m_tmp.path().toStdString()) / "model" / "tokenizer.model";
        QStringList args = {
            "train", "--corpus", q(m_corpus), "--out",     q(out), "--preset", "tiny", "--tokenizer",
            q(tok),  "--steps",  "8",         "--seq-len", "32",   "--batch",  "2",    "--checkpoint-every",
            "4"};
        const Run first = runKvwb(args);
        QCOMPARE(first.exitCode, 0);
        args << "--resume";
        const Run again = runKvwb(args); // already complete: resumes at step 8 and writes the same model
        QCOMPARE(again.exitCode, 0);
        const auto a = QJsonDocument::fromJson(first.out).object(),
                   b = QJsonDocument::fromJson(again.out).object();
        QCOMPARE(b["steps"].toInt(), 8);
        QCOMPARE(b["final_val_loss"].toDouble(), a["final_val_loss"].toDouble());
    }

    // Ctrl-C stops between steps with exit code 130 and saved state; --resume then finishes with
    // exactly the result of an uninterrupted run.
    void interruptAndResume()
    {
        const fs::path tok = fs::path(m_tmp.path().toStdString()) / "model" / "tokenizer.model";
        const fs::path whole = fs::path(m_tmp.path().toStdString()) / "whole";
        const fs::path parts = fs::path(m_tmp.path().toStdString()) / "parts";
        auto args = [&](const fs::path &out) {
            return QStringList{
                "train", "--corpus",    q(m_corpus), "--out",        q(out), "--preset",
                "tiny",  "--tokenizer", q(tok),      "--steps",      "400",  "--seq-len",
                "32",    "--batch",     "2",         "--eval-every", "5",    "--checkpoint-every",
                "0",     "--threads",   "1"};
        };
        const Run full = runKvwb(args(whole));
        QCOMPARE(full.exitCode, 0);
        QProcess p;
        p.start(q(test::kvwbBinary()), args(parts));
        QVERIFY(p.waitForStarted());
        QByteArray err;
        while (!err.contains("val ") && p.state() == QProcess::Running) {
            p.waitForReadyRead(100);
            err += p.readAllStandardError();
        }
        ::kill(pid_t(p.processId()), SIGINT);
        QVERIFY(p.waitForFinished(60000));
        err += p.readAllStandardError();
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QCOMPARE(p.exitCode(), 130);
        QVERIFY2(err.contains("continue with --resume"), err.constData());
        QVERIFY(!fs::exists(parts / "model.safetensors"));
        const Run resumed = runKvwb(args(parts) << "--resume");
        QCOMPARE(resumed.exitCode, 0);
        const auto a = QJsonDocument::fromJson(full.out).object(),
                   b = QJsonDocument::fromJson(resumed.out).object();
        QCOMPARE(b["steps"].toInt(), 400);
        QVERIFY(std::abs(a["final_val_loss"].toDouble() - b["final_val_loss"].toDouble()) < 1e-6);
        QVERIFY(std::abs(a["final_loss"].toDouble() - b["final_loss"].toDouble()) < 1e-6);
    }

    // --shard I/N keeps the documents whose concept rank mod N is I, in both splits (ranks of
    // uneven document counts, so the counts name the concepts), or for plain text every N-th line
    // of each split; train_log.json records the shard.
    void shardSelectsDocuments()
    {
        const fs::path dir = fs::path(m_tmp.path().toStdString());
        const fs::path tok = dir / "model" / "tokenizer.model";
        const fs::path ranked = dir / "ranked.jsonl";
        std::string text;
        for (int rank = 0; rank < 4; ++rank) { // rank r: r + 1 training documents, 1 validation
            for (int t = 0; t <= rank + 1; ++t)
                text += "{\"text\": \"Q: What is thing " + std::to_string(rank) + " (" + std::to_string(t) +
                        ")?\\nA: A thing.\\n\", \"rank\": " + std::to_string(rank) + ", \"split\": \"" +
                        (t == rank + 1 ? "validation" : "train") + "\"}\n";
        }
        test::writeFile(ranked, text);
        auto train = [&](const fs::path &corpus, const char *shard, const fs::path &out) {
            return runKvwb({"train", "--corpus",  q(corpus), "--out",
                            q(out),  "--preset",  "tiny",    "--tokenizer",
                            q(tok),  "--steps",   "2",       "--seq-len",
                            "16",    "--batch",   "2",       "--checkpoint-every",
                            "0",     "--threads", "1",       "--shard",
                            shard});
        };
        struct Case
        {
            const char *shard;
            const char *line;
            int train, validation;
        };
        for (const Case &c :
             {Case{"1/2", "shard 1/2: 6 of 10 training documents, 2 of 4 validation", 6, 2},
              Case{"0/2", "shard 0/2: 4 of 10 training documents, 2 of 4 validation", 4, 2},
              Case{"2/3", "shard 2/3: 3 of 10 training documents, 1 of 4 validation", 3, 1}}) {
            const fs::path out =
                dir / ("shard-" + std::to_string(c.train) + "-" + std::to_string(c.validation));
            const Run r = train(ranked, c.shard, out);
            QVERIFY2(r.exitCode == 0, r.err.constData());
            QVERIFY2(r.err.contains(c.line), r.err.constData());
            QFile f(q(out / "train_log.json"));
            QVERIFY(f.open(QIODevice::ReadOnly));
            const auto log = QJsonDocument::fromJson(f.readAll()).object();
            QCOMPARE(log["shard"].toString(), QString(c.shard));
            QCOMPARE(log["train_documents"].toInt(), c.train);
            QCOMPARE(log["validation_documents"].toInt(), c.validation);
        }

        // plain text: lines 20 and 40 are validation; shard 0/2 keeps training lines 1, 3, ..., 37
        // and the first validation line
        const fs::path plain = dir / "plain.txt";
        std::string lines;
        for (int i = 1; i <= 40; ++i)
            lines += "Line " + std::to_string(i) + " of a plain text corpus.\n";
        test::writeFile(plain, lines);
        const Run r = train(plain, "0/2", dir / "shard-plain");
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.err.contains("shard 0/2: 19 of 38 training documents, 1 of 2 validation"),
                 r.err.constData());

        // a shard without validation documents is refused like such a corpus
        const Run empty = train(plain, "2/3", dir / "shard-empty");
        QCOMPARE(empty.exitCode, 1);
        QVERIFY2(empty.err.contains("(shard 2/3): training needs both training and validation documents"),
                 empty.err.constData());

        // eval-qa asks only the shard's questions (m_corpus: 8 concepts, one validation phrasing each)
        const Run eval = runKvwb({"eval-qa", "--model", q(dir / "model"), "--corpus", q(m_corpus), "--json",
                                  "--max-tokens", "2", "--shard", "1/4"});
        QVERIFY2(eval.exitCode == 0, eval.err.constData());
        const auto e = QJsonDocument::fromJson(eval.out).object();
        QCOMPARE(e["questions"].toInt(), 2); // ranks 1 and 5
        QCOMPARE(e["shard"].toString(), QString("1/4"));
    }

    void badShard_data()
    {
        QTest::addColumn<QString>("command");
        QTest::addColumn<QString>("value");
        for (const char *value : {"2/2", "x", "1/0", "-1/2", "1/2/3", "1/"})
            QTest::addRow("train %s", value) << "train" << value;
        for (const char *value : {"2/2", "x"})
            QTest::addRow("eval-qa %s", value) << "eval-qa" << value;
    }

    // refused before the corpus is read: exit code 2 and one line naming the option
    void badShard()
    {
        QFETCH(QString, command);
        QFETCH(QString, value);
        const fs::path dir = fs::path(m_tmp.path().toStdString());
        const QStringList args =
            command == "train"
                ? QStringList{"train",    "--corpus", q(dir / "missing.jsonl"), "--out", q(dir / "never"),
                              "--preset", "tiny",     "--train-tokenizer",      "300",   "--shard",
                              value}
                : QStringList{
                      "eval-qa", "--model", q(dir / "missing-model"), "--corpus", q(dir / "missing.jsonl"),
                      "--shard", value};
        const Run r = runKvwb(args);
        QCOMPARE(r.exitCode, 2);
        QCOMPARE(r.err.trimmed().count('\n'), 0);
        QVERIFY2(
            r.err.contains("--shard expects I/N with 0 <= I < N (e.g. 1/2), got '" + value.toUtf8() + "'"),
            r.err.constData());
        QVERIFY(!fs::exists(dir / "never"));
    }

    // `kvwb train-embedder --pairs`: the skipped line named, the validation table printed, the log
    // in the JSON; a bad pairs file is one line naming it, and nothing is written.
    void trainEmbedderOnPairs()
    {
        const fs::path dir(m_tmp.path().toStdString());
        std::string text;
        const char *topics[] = {"rice", "pasta", "bread", "soup", "salad", "tea",  "coffee", "cake",
                                "eggs", "fish",  "beans", "corn", "lamb",  "tofu", "pie",    "jam"};
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 4; ++j) {
                const std::string a = std::string("how do i make ") + topics[i] + " " + std::to_string(j);
                text += a + "\twhat is the way to make " + topics[i] + " " + std::to_string(j) + "\t1\n";
                text +=
                    a + " at home\thow do i make " + topics[(i + 1) % 16] + " " + std::to_string(j) + "\t0\n";
            }
        text += "a line without its label\n";
        test::writeFile(dir / "pairs.tsv", text);
        const fs::path out = dir / "pair-embedder";
        const Run r = runKvwb({"train-embedder",
                               "--pairs",
                               q(dir / "pairs.tsv"),
                               "--out",
                               q(out),
                               "--vocab",
                               "100",
                               "--hidden",
                               "16",
                               "--layers",
                               "1",
                               "--heads",
                               "2",
                               "--intermediate",
                               "32",
                               "--max-positions",
                               "24",
                               "--steps",
                               "6",
                               "--batch",
                               "8",
                               "--eval-every",
                               "3",
                               "--validation",
                               "0.25",
                               "--threads",
                               "1"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.err.contains("pairs.tsv:129: 1 fields, expected 3"), r.err.constData());
        QVERIFY2(r.err.contains("validation AUC"), r.err.constData());
        QVERIFY2(r.err.contains("validation pairs (grouped by shared text)"), r.err.constData());
        const auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["steps_done"].toInt(), 6);
        QCOMPARE(j["pairs_file"].toObject()["pairs"].toInt(), 128);
        QVERIFY(j["evaluation"].toObject()["trained"].toObject()["curve"].toArray().size() > 1);
        QVERIFY(fs::exists(out / "model.safetensors"));

        test::writeFile(dir / "bad.tsv", "question1\tlabel\nx\t1\n");
        const Run bad =
            runKvwb({"train-embedder", "--pairs", q(dir / "bad.tsv"), "--out", q(dir / "bad-out")});
        QCOMPARE(bad.exitCode, 1);
        QVERIFY2(bad.err.contains("bad.tsv:1: the header names no second text"), bad.err.constData());
        QVERIFY(!fs::exists(dir / "bad-out"));
    }

    void badCorpus()
    {
        const fs::path bad = fs::path(m_tmp.path().toStdString()) / "bad.jsonl";
        test::writeFile(bad, "{\"nottext\": 1}\n[1,2]\n");
        const Run r = runKvwb({"train", "--corpus", q(bad), "--out", q(bad.parent_path() / "x"), "--preset",
                               "tiny", "--train-tokenizer", "300"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("bad.jsonl") && r.err.contains("no documents"), r.err.constData());
    }
};

QTEST_GUILESS_MAIN(TestTrainCli)
#include "tst_train_cli.moc"
