// `kvwb capture` end to end: a file any HDF5 tool lists, append on matching models, refusal on
// others, --layers-a/--layers-b selection, and a capture killed with SIGKILL mid-run that leaves
// every reported prompt intact.
#include "core/model/random_model.h"
#include "core/store/experiment_file.h"
#include "core/store/knowledge_store.h"
#include "core/tokenize/tokenizer.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <sys/types.h>

using namespace kvwb;
namespace fs = std::filesystem;
using test::runKvwb;

namespace {
QString q(const fs::path &p)
{
    return QString::fromStdString(p.string());
}
} // namespace

class TestCaptureCli : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    fs::path m_dir;

private Q_SLOTS:
    void initTestCase()
    {
        m_dir = m_tmp.path().toStdString();
        core::writeRandomHfModel(m_dir / "a", core::randomModelPreset("tiny"));
        core::writeRandomHfModel(m_dir / "b", core::randomModelPreset("llama3"));
        core::writeRandomHfModel(m_dir / "c", core::randomModelPreset("gqa"));
        std::string prompts;
        for (int i = 0; i < 300; ++i)
            prompts += "Question " + std::to_string(i) + ": what does the cache hold for prompt number " +
                       std::to_string(i) + "?\n";
        test::writeFile(m_dir / "prompts.txt", prompts);
        test::writeFile(m_dir / "few.jsonl",
                        "{\"prompt\": \"one\", \"intent\": \"n1\"}\n{\"prompt\": \"two\"}\nnot json\n");
    }

    void captureAppendRefuse()
    {
        const fs::path out = m_dir / "e.h5";
        const QStringList base = {"capture",      "--model-a", q(m_dir / "a"), "--model-b",
                                  q(m_dir / "b"), "--out",     q(out)};
        auto r = runKvwb(base + QStringList{"--prompts", q(m_dir / "few.jsonl"), "--dtype", "f16", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(r.err.contains("few.jsonl:3: not a JSON object"));
        auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["prompts_written"].toInt(), 2);
        QCOMPARE(j["appended"].toBool(), false);
        r = runKvwb(base + QStringList{"--prompts", q(m_dir / "prompts.txt"), "--limit", "3", "--json"});
        QCOMPARE(r.exitCode, 0);
        j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["appended"].toBool(), true);
        QCOMPARE(j["first_prompt"].toInt(), 2);
        QVERIFY(r.err.contains("appending with the file's storage (f16")); // flags asked for f32
        {
            const auto rd = core::ExperimentReader::open(out);
            QCOMPARE(rd.promptCount(), 5);
            QCOMPARE(rd.prompt(0).label, std::string("n1"));
            QCOMPARE(rd.storage().storage, core::FloatType::F16);
        }
        // other models: refused, exit 1, one line naming both fingerprints
        r = runKvwb({"capture", "--model-a", q(m_dir / "a"), "--model-b", q(m_dir / "c"), "--out", q(out),
                     "--prompts", q(m_dir / "few.jsonl")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("e.h5"), r.err.constData());
        // another kind of HDF5 file at --out: refused before it is opened for writing (it grew by a
        // megabyte, 41 KB -> 1.09 MB, and was then refused)
        {
            core::KnowledgeFile k;
            core::ConceptNode n;
            n.id = "c0";
            n.name = "car";
            n.knowledge = "A car is a vehicle.";
            k.graph.add(n);
            core::saveKnowledge(m_dir / "graph.h5", k);
        }
        const std::string before = test::readFile(m_dir / "graph.h5");
        r = runKvwb({"capture", "--model-a", q(m_dir / "a"), "--model-b", q(m_dir / "b"), "--out",
                     q(m_dir / "graph.h5"), "--prompts", q(m_dir / "few.jsonl")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("graph.h5") && r.err.contains("kvwb-knowledge/1"), r.err.constData());
        QVERIFY(test::readFile(m_dir / "graph.h5") == before);
        // a capture the file system cannot hold is refused before the first prompt, with the projection
        // (the free-disk figure injected)
        qputenv("KVWB_TEST_DISK_AVAILABLE", "1000");
        r = runKvwb({"capture", "--model-a", q(m_dir / "a"), "--model-b", q(m_dir / "b"), "--out",
                     q(m_dir / "full.h5"), "--prompts", q(m_dir / "few.jsonl")});
        qunsetenv("KVWB_TEST_DISK_AVAILABLE");
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("full.h5: capturing 2 prompts") && r.err.contains("GB free; not started"),
                 r.err.constData());
        QVERIFY(!fs::exists(m_dir / "full.h5"));
        // the projection is what the capture writes: the KV bytes of the file (f16, uncompressed here)
        r = runKvwb({"capture", "--model-a", q(m_dir / "a"), "--model-b", q(m_dir / "b"), "--out",
                     q(m_dir / "sized.h5"), "--prompts", q(m_dir / "few.jsonl"), "--dtype", "f16", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const qint64 projected =
            qint64(QJsonDocument::fromJson(r.out).object()["projected_bytes"].toDouble());
        QVERIFY(projected > 0);
        const qint64 size = qint64(fs::file_size(m_dir / "sized.h5"));
        QVERIFY2(size > projected && size < 4 * projected + (2 << 20),
                 qPrintable(QString("file %1 bytes, projected KV %2").arg(size).arg(projected)));
        // kvwb info describes the experiment
        r = runKvwb({"info", q(out)});
        QCOMPARE(r.exitCode, 0);
        const auto card = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(card["schema"].toString(), QString("kvwb/2"));
        QCOMPARE(card["prompts"].toInt(), 5);
        QCOMPARE(card["storage"].toObject()["dtype"].toString(), QString("f16"));
        QCOMPARE(card["models"].toObject()["b"].toObject()["kv_heads"].toInt(), 2);
        // any HDF5 tool can list it
        const QString h5ls = QStandardPaths::findExecutable("h5ls");
        if (h5ls.isEmpty())
            QSKIP("h5ls (hdf5-tools) not installed");
        QProcess ls;
        ls.start(h5ls, {"-r", q(out)});
        QVERIFY(ls.waitForFinished());
        const QByteArray listing = ls.readAllStandardOutput();
        QVERIFY2(listing.contains("/kv/b/layer_001/keys"), listing.constData());
    }

    // Capture writes each prompt as it goes: its peak resident memory (peak_rss_bytes, the process's
    // VmHWM) does not grow with the number of prompts. 40 prompts of ~300 tokens hold ~55 MB more KV
    // than 10 (6 KB a token of B); the two peaks stay within 16 MB.
    void peakMemoryDoesNotGrowWithPrompts()
    {
        if (test::headlessBuild())
            QSKIP("the integration build runs it");
        core::RandomModelSpec wide = core::randomModelPreset("gqa");
        wide.config.numLayers = 6;
        wide.config.numKvHeads = 2;
        wide.config.numHeads = 4;
        wide.config.headDim = 64;
        wide.config.hiddenSize = 256;
        core::writeRandomHfModel(m_dir / "wide", wide);
        std::string text;
        const std::string filler = " the cache holds keys and values for every layer of every token";
        for (int i = 0; i < 40; ++i) {
            char head[32];
            std::snprintf(head, sizeof head, "Prompt %d:", i);
            std::string line(head);
            while (line.size() < 300)
                line.append(filler);
            line.resize(300);
            text.append(line).push_back('\n');
        }
        test::writeFile(m_dir / "long40.txt", text);
        auto peak = [&](int n) {
            const fs::path out = m_dir / ("peak" + std::to_string(n) + ".h5");
            auto r = runKvwb({"capture", "--model-a", q(m_dir / "a"), "--model-b", q(m_dir / "wide"), "--out",
                              q(out), "--prompts", q(m_dir / "long40.txt"), "--limit", QString::number(n),
                              "--json", "--threads", "1"});
            if (r.exitCode != 0)
                qWarning("%s", r.err.constData());
            const auto j = QJsonDocument::fromJson(r.out).object();
            return std::pair{qint64(j["peak_rss_bytes"].toDouble()), qint64(j["tokens_b"].toDouble())};
        };
        const auto [p10, t10] = peak(10);
        const auto [p40, t40] = peak(40);
        QVERIFY(p10 > 0 && t40 > 3 * t10);
        qInfo("peak resident: 10 prompts %.1f MB, 40 prompts %.1f MB (%lld and %lld tokens of B)", p10 / 1e6,
              p40 / 1e6, (long long)t10, (long long)t40);
        QVERIFY2(p40 < p10 + (16 << 20),
                 qPrintable(QString("10 prompts: %1 MB, 40 prompts: %2 MB").arg(p10 / 1e6).arg(p40 / 1e6)));
    }

    void layerSelection()
    {
        const fs::path out = m_dir / "layers.h5";
        const QStringList base = {"capture",   "--model-a",    q(m_dir / "a"),
                                  "--model-b", q(m_dir / "b"), "--out",
                                  q(out),      "--prompts",    q(m_dir / "few.jsonl")};
        // out of range for B (2 layers): a usage error naming the flag, no file
        auto r = runKvwb(base + QStringList{"--layers-b", "0,7"});
        QVERIFY2(r.exitCode != 0 && r.err.contains("--layers-b"), r.err.constData());
        QVERIFY(!fs::exists(out));
        r = runKvwb(base + QStringList{"--layers-a", "0-0", "--layers-b", "1,0-1,0", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        // the same selection spelled differently appends
        r = runKvwb(base + QStringList{"--layers-a", "0", "--layers-b", "0-1"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        {
            const auto rd = core::ExperimentReader::open(out);
            QCOMPARE(rd.promptCount(), 4);
            QCOMPARE(rd.model(core::ModelRole::A).capturedLayers, std::vector<int>{0});
            QCOMPARE(rd.model(core::ModelRole::B).capturedLayers, (std::vector<int>{0, 1}));
        }
        QVERIFY(fs::remove(out));
        r = runKvwb(base + QStringList{"--layers-b", "1"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(core::ExperimentReader::open(out).model(core::ModelRole::B).capturedLayers,
                 std::vector<int>{1});
        // appending with another selection is refused, naming both lists
        r = runKvwb(base + QStringList{"--layers-b", "0"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("layers (0) differ from the file's (1)"), r.err.constData());
    }

    void killedCaptureLosesNothing()
    {
        const fs::path out = m_dir / "killed.h5";
        QProcess p;
        p.start(q(test::kvwbBinary()), {"capture", "--model-a", q(m_dir / "a"), "--model-b", q(m_dir / "b"),
                                        "--out", q(out), "--prompts", q(m_dir / "prompts.txt")});
        QVERIFY(p.waitForStarted());
        // progress lines "captured N/300" come every 10 prompts: kill after the second report
        QByteArray err;
        int reported = 0;
        const QRegularExpression re("captured (\\d+)/300");
        while (reported < 20 && p.state() == QProcess::Running) {
            p.waitForReadyRead(100);
            err += p.readAllStandardError();
            auto it = re.globalMatch(QString::fromUtf8(err));
            while (it.hasNext())
                reported = it.next().captured(1).toInt();
        }
        QVERIFY2(reported >= 20, err.constData());
        QVERIFY2(QRegularExpression("captured 20/300 prompts, about \\d+ s left")
                     .match(QString::fromUtf8(err))
                     .hasMatch(),
                 err.constData()); // the time left at the pace so far
        ::kill(pid_t(p.processId()), SIGKILL);
        p.waitForFinished();
        QCOMPARE(p.exitStatus(), QProcess::CrashExit);
        const auto tok = core::loadTokenizer(m_dir / "a");
        {
            const auto rd = core::ExperimentReader::open(out);
            QVERIFY2(rd.promptCount() >= reported,
                     qPrintable(QString("%1 < %2").arg(rd.promptCount()).arg(reported)));
            for (int i = 0; i < rd.promptCount(); ++i) {
                const std::string text = "Question " + std::to_string(i) +
                                         ": what does the cache hold for prompt number " + std::to_string(i) +
                                         "?";
                QCOMPARE(rd.prompt(i).text, text);
                const auto ids = tok->encode(text, true);
                QCOMPARE(rd.prompt(i).b.ids, std::vector<int32_t>(ids.begin(), ids.end()));
                QCOMPARE(rd.keys(core::ModelRole::B, 1, i).size(),
                         ids.size() * 2 * 32); // llama3 preset: 2 kv heads of 32
            }
        }
        // and the file can be appended to afterwards
        const auto r = runKvwb({"capture", "--model-a", q(m_dir / "a"), "--model-b", q(m_dir / "b"), "--out",
                                q(out), "--prompts", q(m_dir / "few.jsonl"), "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(QJsonDocument::fromJson(r.out).object()["appended"].toBool(), true);
    }
};

QTEST_GUILESS_MAIN(TestCaptureCli)
#include "tst_capture_cli.moc"
