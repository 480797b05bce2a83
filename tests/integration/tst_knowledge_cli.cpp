// `kvwb knowledge build|show` end to end: a graph from a JSONL of concepts with modules computed by a
// random model B, the node shown with its neighbours, module and freshness, verification from the
// command line, and bad input refused with one line naming the file and line.
#include "core/model/random_model.h"
#include "core/store/knowledge_store.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

using namespace kvwb;
namespace fs = std::filesystem;
using test::runKvwb;

namespace {
QString q(const fs::path &p)
{
    return QString::fromStdString(p.string());
}
} // namespace

class TestKnowledgeCli : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    fs::path m_dir;

private Q_SLOTS:
    void initTestCase()
    {
        m_dir = m_tmp.path().toStdString();
        core::writeRandomHfModel(m_dir / "b", core::randomModelPreset("gqa"));
        test::writeFile(
            m_dir / "c.jsonl",
            R"({"id": "car", "name": "car", "synonyms": ["automobile"], "knowledge": "A motor vehicle with four wheels.", "related": [{"kind": "sibling", "id": "bus"}]})"
            "\n"
            R"({"id": "bus", "name": "bus", "knowledge": "A vehicle carrying many passengers.", "related": [{"kind": "sibling", "id": "car"}]})"
            "\n");
    }

    void buildAndShow()
    {
        const fs::path graph = m_dir / "g.h5";
        auto r = runKvwb({"knowledge", "build", "--from", q(m_dir / "c.jsonl"), "--model-b", q(m_dir / "b"),
                          "--system", "You answer questions.", "--out", q(graph), "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["nodes"].toInt(), 2);
        QCOMPARE(j["modules"].toInt(), 2);
        QCOMPARE(j["relations"].toObject()["sibling"].toInt(), 2);
        QVERIFY(j["module_tokens"].toInt() > 20);
        QVERIFY(j["module_compute_ms"].toDouble() > 0);

        const auto k = core::loadKnowledge(graph);
        QCOMPARE(k.modules->layers, core::randomModelPreset("gqa").config.numLayers);
        QVERIFY(k.modules->prefixIds.size() > 1); // BOS + the system text

        r = runKvwb({"knowledge", "show", q(graph), "--node", "car"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        auto n = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(n["name"].toString(), QString("car"));
        QCOMPARE(n["freshness"].toString(), QString("fresh"));
        QCOMPARE(n["related"].toArray()[0].toObject()["name"].toString(), QString("bus"));
        QVERIFY(n["module_tokens"].toInt() > 0);
        // another model B in use now: the modules are stale
        auto other = core::randomModelPreset("gqa");
        other.seed = 2;
        core::writeRandomHfModel(m_dir / "b2", other);
        r = runKvwb({"knowledge", "show", q(graph), "--node", "car", "--model-b", q(m_dir / "b2")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(QJsonDocument::fromJson(r.out).object()["freshness"].toString(), QString("stale"));

        r = runKvwb({"knowledge", "show", q(graph), "--node", "car", "--verify", "what is an automobile?"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(QJsonDocument::fromJson(r.out).object()["accepted"].toBool(), true);
        r = runKvwb({"knowledge", "show", q(graph), "--node", "car", "--verify", "what is a bus?"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        n = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(n["accepted"].toBool(), false);
        QCOMPARE(n["mentioned"].toString(), QString("bus"));

        r = runKvwb({"knowledge", "show", q(graph)});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(QJsonDocument::fromJson(r.out).object()["freshness"].toObject()["fresh"].toInt(), 2);

        // placement: recomputing every module token is computing the text (KL 0, the same top-1)
        r = runKvwb({"knowledge", "placement", q(graph), "--model-b", q(m_dir / "b"), "--boundary", "0,1000",
                     "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto pl = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(pl["nodes"].toInt(), 2);
        const auto placed = pl["placed"].toArray();
        QCOMPARE(placed.size(), 2);
        QVERIFY(placed[0].toObject()["kl_mean"].toDouble() >= 0);
        QVERIFY2(placed[1].toObject()["kl_mean"].toDouble() < 1e-6, r.out.constData());
        QCOMPARE(placed[1].toObject()["top1_agreement"].toDouble(), 1.0);
        QVERIFY(pl["without_module"].toObject()["kl_mean"].toDouble() >
                placed[1].toObject()["kl_mean"].toDouble());
        r = runKvwb({"knowledge", "placement", q(graph), "--model-b", q(m_dir / "b2")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("the modules were computed by weights"), r.err.constData());
    }

    void profilesForAWorkload()
    {
        test::writeFile(
            m_dir / "w.jsonl",
            R"({"id":0,"t_ms":0,"tenant":"t0","user":"u1","model":"b","intent":"car","max_tokens":4,"prompt":"Q: car?\nA:"})"
            "\n"
            R"({"id":1,"t_ms":5,"tenant":"t0","user":"u2","model":"b","intent":"bus","max_tokens":4,"prompt":"Q: bus?\nA:"})"
            "\n"
            R"({"id":2,"t_ms":9,"tenant":"t1","user":"u1","model":"b","intent":"bus","max_tokens":4,"prompt":"Q: bus?\nA:"})"
            "\n");
        auto r = runKvwb({"knowledge", "profiles", "--workload", q(m_dir / "w.jsonl"), "--out",
                          q(m_dir / "p.json"), "--seed", "4"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("2 profiles for 3 requests"), r.out.constData());
        const auto first = test::readFile(m_dir / "p.json");
        r = runKvwb({"knowledge", "profiles", "--workload", q(m_dir / "w.jsonl"), "--out",
                     q(m_dir / "p2.json"), "--seed", "4"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(test::readFile(m_dir / "p2.json"), first); // seeded: the same file
        const auto j = QJsonDocument::fromJson(QByteArray::fromStdString(first)).object();
        QCOMPARE(j["profiles"].toArray().size(), 2);
        QCOMPARE(j["profiles"].toArray()[0].toObject()["user"].toString(), QString("u1"));
        r = runKvwb({"knowledge", "profiles", "--workload", q(m_dir / "w.jsonl")});
        QCOMPARE(r.exitCode, 2);
    }

    void badInput()
    {
        test::writeFile(m_dir / "bad.jsonl",
                        "{\"id\": \"a\", \"name\": \"a\", \"knowledge\": \"k\"}\n[1, 2]\n");
        auto r = runKvwb({"knowledge", "build", "--from", q(m_dir / "bad.jsonl"), "--no-modules", "--out",
                          q(m_dir / "bad.h5")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("bad.jsonl:2: a concept is a JSON object"), r.err.constData());
        QVERIFY(!fs::exists(m_dir / "bad.h5"));
        r = runKvwb({"knowledge", "build", "--from", q(m_dir / "c.jsonl"), "--out", q(m_dir / "x.h5")});
        QCOMPARE(r.exitCode, 2); // neither --model-b nor --no-modules
        r = runKvwb({"knowledge", "fly"});
        QCOMPARE(r.exitCode, 2);
        r = runKvwb({"knowledge", "show", q(m_dir / "c.jsonl"), "--node", "car"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("c.jsonl"), r.err.constData());
        r = runKvwb({"knowledge", "build", "--from", q(m_dir / "c.jsonl"), "--no-modules", "--out",
                     q(m_dir / "g2.h5")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        r = runKvwb({"knowledge", "show", q(m_dir / "g2.h5"), "--node", "plane"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("no node 'plane'"), r.err.constData());
        r = runKvwb({"knowledge", "show", q(m_dir / "g2.h5"), "--node", "bus"});
        QCOMPARE(QJsonDocument::fromJson(r.out).object()["freshness"].toString(), QString("missing"));
    }
};

QTEST_GUILESS_MAIN(TestKnowledgeCli)
#include "tst_knowledge_cli.moc"
