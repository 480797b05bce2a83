// `kvwb train` end to end: trains its own SentencePiece tokenizer, writes an HF directory that
// `kvwb info`/`generate`/`eval-qa` load, can be interrupted and resumed, and reports bad corpora.
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"

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
