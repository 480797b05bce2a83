// `kvwb knowledge build|show` end to end: a graph from a JSONL of concepts with modules computed by a
// random model B, the node shown with its neighbours, module and freshness, verification from the
// command line, the knowledge tier in `kvwb replay`, and bad input refused with one line naming the
// file and line.
#include "core/ledger/replay_ledger.h"
#include "core/model/random_model.h"
#include "core/store/knowledge_store.h"
#include "core/store/ledger_store.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

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
        // a module holding NaN (written so, with a valid checksum: a writer's bug, not damage): an
        // error naming the node, not "kl_mean": null and exit 0
        {
            auto k = core::loadKnowledge(graph);
            for (auto &mod : k.modules->modules)
                mod.layers[0].keys[0] = std::nanf("");
            core::saveKnowledge(m_dir / "nan-graph.h5", k);
        }
        r = runKvwb({"knowledge", "placement", q(m_dir / "nan-graph.h5"), "--model-b", q(m_dir / "b")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("its placed KV module gives a non-finite KL") && r.err.contains("NaN or Inf"),
                 r.err.constData());
    }

    // The knowledge tier in a replay: verified nodes answer through their modules with the user's
    // profile rendered, a near miss is rejected by verification (and is a false hit without it), a
    // tenant's own graph serves no other tenant, stale modules are recomputed once and counted, and
    // the graph written back holds reuse counts but nothing of a user.
    void replayThroughTheKnowledgeTier()
    {
        test::writeFile(
            m_dir / "k.jsonl",
            R"({"id": "car", "name": "car", "synonyms": ["automobile"], "questions": ["What is a car?"], "knowledge": "A motor vehicle with four wheels.", "related": [{"kind": "sibling", "id": "bus"}]})"
            "\n"
            R"({"id": "bus", "name": "bus", "questions": ["What is a bus?"], "knowledge": "A vehicle carrying many passengers.", "related": [{"kind": "sibling", "id": "car"}]})"
            "\n");
        const fs::path graph = m_dir / "kg.h5";
        auto r = runKvwb({"knowledge", "build", "--from", q(m_dir / "k.jsonl"), "--model-b", q(m_dir / "b"),
                          "--out", q(graph)});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        // A question's path: recall's near miss refused by verification; a synonym accepted.
        r = runKvwb({"knowledge", "show", q(graph), "--trace", "What is a carp?"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        auto tr = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(tr["chosen"].toString(), QString());
        QCOMPARE(tr["candidates"].toArray()[0].toObject()["node"].toString(), QString("car"));
        QCOMPARE(tr["candidates"].toArray()[0].toObject()["accepted"].toBool(), false);
        test::writeFile(
            m_dir / "kp.json",
            R"({"profiles": [{"user": "u1", "verbosity": "brief", "depth": "beginner", "examples": true, "register": "casual"},)"
            R"( {"user": "u2", "verbosity": "standard", "depth": "intermediate", "examples": false, "register": "neutral"}]})");
        r = runKvwb({"knowledge", "show", q(graph), "--trace", "What is an automobile?", "--profiles",
                     q(m_dir / "kp.json"), "--user", "u1"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        tr = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(tr["chosen"].toString(), QString("car"));
        QCOMPARE(tr["freshness"].toString(), QString("fresh"));
        QVERIFY(tr["module_tokens"].toInt() > 0);
        QCOMPARE(tr["profile_line"].toString(),
                 QString("Answer in one short sentence, for a beginner, with an example, casually.\n"));

        const std::string system = "You answer questions about words.";
        std::string w;
        const auto add = [&](int id, const char *tenant, const char *user, const char *intent,
                             const std::string &question) {
            QJsonObject o{{"id", id},
                          {"t_ms", id * 10},
                          {"tenant", tenant},
                          {"user", user},
                          {"model", "b"},
                          {"intent", intent},
                          {"max_tokens", 3},
                          {"question", QString::fromStdString(question)},
                          {"prompt", QString::fromStdString(system + "\n\nQ: " + question + "\nA:")}};
            w += QJsonDocument(o).toJson(QJsonDocument::Compact).toStdString() + "\n";
        };
        add(0, "t0", "u1", "car", "What is a car?");
        add(1, "t0", "u2", "bus", "What is a bus?");
        add(2, "t0", "u3", "carp", "What is a carp?");
        add(3, "t1", "u4", "car", "What is an automobile?");
        test::writeFile(m_dir / "kw.jsonl", w);
        const auto replay = [&](QStringList extra, const fs::path &csv) {
            QStringList args{"replay",       "--workload", q(m_dir / "kw.jsonl"), "--model-a",
                             q(m_dir / "b"), "--model-b",  q(m_dir / "b"),        "--tiers",
                             "knowledge",    "--profiles", q(m_dir / "kp.json"),  "--ledger",
                             q(csv),         "--json"};
            args += extra;
            auto out = runKvwb(args);
            if (out.exitCode != 0)
                qWarning("%s", out.err.constData());
            return std::make_pair(QJsonDocument::fromJson(out.out).object(),
                                  core::ledgerFromCsv(test::readFile(csv), csv.string()));
        };

        const auto [j, rows] =
            replay({"--knowledge", q(graph), "--save-knowledge", q(m_dir / "after.h5")}, m_dir / "k1.csv");
        QCOMPARE(rows.size(), size_t(4));
        const auto k = j["tiers"].toObject()["knowledge"].toObject();
        QCOMPARE(k["requests"].toInt(), 4);
        QCOMPARE(k["hits"].toInt(), 3);
        QCOMPARE(k["false_hits"].toInt(), 0);
        QCOMPARE(k["rejected"].toInt(), 1);
        QCOMPARE(k["modules_recomputed"].toInt(), 0);
        QCOMPARE(rows[0].answeredBy, core::TierKind::Knowledge);
        QCOMPARE(rows[0].knowledgeNode, std::string("car"));
        QCOMPARE(rows[0].knowledgeVerdict, core::KnowledgeVerdict::Verified);
        QCOMPARE(rows[0].knowledgeModule, core::ModuleFate::Reused);
        QCOMPARE(rows[0].profileApplied, 1); // u1: brief, beginner, example, casual
        QCOMPARE(rows[1].knowledgeNode, std::string("bus"));
        QCOMPARE(rows[1].profileApplied, 0); // u2's profile renders no instruction
        QCOMPARE(rows[2].answeredBy, core::TierKind::None);
        QCOMPARE(rows[2].knowledgeNode, std::string("car")); // recall's proposal ...
        QCOMPARE(rows[2].knowledgeVerdict,
                 core::KnowledgeVerdict::Rejected);          // ... names no concept of the graph
        QCOMPARE(rows[3].knowledgeNode, std::string("car")); // a synonym, another tenant: the shared graph
        QCOMPARE(rows[3].answeredBy, core::TierKind::Knowledge);
        for (int i : {0, 1, 3}) {
            // the module's tokens were reused; the system prompt was computed once per tenant
            QVERIFY(rows[size_t(i)].tokensReused > 0);
            QCOMPARE(rows[size_t(i)].tokensReused + rows[size_t(i)].tokensComputed,
                     rows[size_t(i)].promptTokens + rows[size_t(i)].generatedTokens);
        }
        // Reused: the module alone at a tenant's first request (its system prompt is computed then),
        // the system prompt too at the next one.
        const auto before = core::loadKnowledge(graph), after = core::loadKnowledge(m_dir / "after.h5");
        const int carTokens = int(before.modules->find("car")->ids.size()),
                  busTokens = int(before.modules->find("bus")->ids.size());
        QCOMPARE(rows[0].tokensReused, carTokens);
        QVERIFY(rows[1].tokensReused > busTokens);
        QCOMPARE(rows[3].tokensReused, carTokens);
        QCOMPARE(j["knowledge"].toObject()["rejected"].toInt(), 1);

        // The graph written back: reuse counts, and no trace of a user or a profile.
        QCOMPARE(after.graph.find("car")->reuseCount, int64_t(2));
        QCOMPARE(after.graph.find("bus")->reuseCount, int64_t(1));
        for (const auto &n : after.graph.nodes()) {
            auto same = *before.graph.find(n.id);
            same.reuseCount = n.reuseCount;
            QVERIFY(same == n);
            QCOMPARE(after.modules->find(n.id)->ids, before.modules->find(n.id)->ids);
        }

        // Without verification the near miss is answered from the car's knowledge: a false hit.
        const auto [jn, rowsN] = replay({"--knowledge", q(graph), "--no-verify"}, m_dir / "k2.csv");
        QCOMPARE(jn["tiers"].toObject()["knowledge"].toObject()["false_hits"].toInt(), 1);
        QCOMPARE(rowsN[2].answeredBy, core::TierKind::Knowledge);
        QVERIFY(rowsN[2].falseHit);

        // A tenant's own graph: t1's request finds no node.
        const auto [jt, rowsT] = replay({"--knowledge", "t0=" + q(graph)}, m_dir / "k3.csv");
        QCOMPARE(rowsT[0].answeredBy, core::TierKind::Knowledge);
        QCOMPARE(rowsT[3].answeredBy, core::TierKind::None);
        QCOMPARE(rowsT[3].knowledgeNode, std::string());

        // Stale modules (older than the TTL at the workload's clock): recomputed at first use,
        // counted, then fresh for the next request of that node.
        const qint64 later = before.modules->modules.front().builtMs + 1000000000LL;
        const auto [js, rowsS] = replay({"--knowledge", q(graph), "--knowledge-ttl-ms", "1000",
                                         "--knowledge-clock-start", QString::number(later)},
                                        m_dir / "k4.csv");
        QCOMPARE(js["tiers"].toObject()["knowledge"].toObject()["modules_recomputed"].toInt(), 2);
        QCOMPARE(rowsS[0].knowledgeModule, core::ModuleFate::Recomputed);
        QCOMPARE(rowsS[1].knowledgeModule, core::ModuleFate::Recomputed);
        QCOMPARE(rowsS[3].knowledgeModule, core::ModuleFate::Reused);
        QVERIFY(rowsS[0].tokensComputed > rows[0].tokensComputed); // the module's tokens were computed

        // The economics: the same requests answered by each arm, stored for the report.
        r = runKvwb({"capture", "--model-a", q(m_dir / "b"), "--model-b", q(m_dir / "b"), "--prompts",
                     q(m_dir / "kw.jsonl"), "--limit", "1", "--out", q(m_dir / "ev.h5")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        r = runKvwb({"knowledge", "evaluate", "--workload", q(m_dir / "kw.jsonl"), "--model-a",
                     q(m_dir / "b"), "--model-b", q(m_dir / "b"), "--knowledge", q(graph), "--profiles",
                     q(m_dir / "kp.json"), "--ledger-dir", q(m_dir / "ev"), "--experiment",
                     q(m_dir / "ev.h5"), "--save", "ev", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto ev = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(ev["requests"].toInt(), 4);
        QCOMPARE(ev["rejected"].toInt(), 1);
        QCOMPARE(ev["build"].toObject()["modules"].toInt(), 2);
        QStringList arms;
        for (const auto a : ev["arms"].toArray())
            arms << a.toObject()["arm"].toString();
        QCOMPARE(arms, (QStringList{"no cache", "semantic cache", "knowledge tier",
                                    "knowledge tier, unverified", "knowledge in the prompt"}));
        for (const auto a : ev["arms"].toArray()) {
            // answer length by the asker's verbosity: u1 is brief, u2 and the profile-less standard
            const auto words = a.toObject()["answer_words"].toObject();
            QCOMPARE(words.keys(), (QStringList{"brief", "detailed", "standard"}));
            QCOMPARE(words["detailed"].toDouble(), 0.0); // nobody asked for detail
        }
        const auto evRows =
            core::ledgerFromCsv(test::readFile(m_dir / "ev" / "knowledge-tier-unverified.csv"), "unverified");
        QCOMPARE(evRows.size(), size_t(4));
        QVERIFY(evRows[2].falseHit); // the carp answered from the car's knowledge
        QVERIFY(fs::exists(m_dir / "ev" / "answers.csv"));
        for (const char *arm : {"no-cache", "semantic-cache", "knowledge-tier", "knowledge-tier-unverified",
                                "knowledge-in-the-prompt"})
            QCOMPARE(core::loadLedger(m_dir / "ev.h5", std::string("ev.") + arm).size(), size_t(4));

        // Refused before any model runs.
        r = runKvwb({"replay", "--workload", q(m_dir / "kw.jsonl"), "--model-a", q(m_dir / "b"), "--tiers",
                     "knowledge"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("--knowledge"), r.err.constData());
        r = runKvwb({"replay", "--workload", q(m_dir / "kw.jsonl"), "--model-a", q(m_dir / "b"), "--model-b",
                     q(m_dir / "b"), "--tiers", "knowledge", "--knowledge", q(m_dir / "k.jsonl")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("k.jsonl"), r.err.constData());
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
