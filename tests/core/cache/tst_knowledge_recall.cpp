// The knowledge tier's vector recall: every name, synonym and question of a node is an entry; a
// query comes back as distinct nodes, best first, with the entry that matched; the floor and k are
// honoured; a wrong-sized query is refused. Recall proposes a sibling for a near miss, which is
// why verification follows it (core/knowledge/knowledge_graph.h).
#include "core/cache/knowledge_recall.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"

#include <QTest>

using namespace kvwb::core;
using kvwb::test::expectError;

namespace {

ConceptNode node(const std::string &id, std::vector<std::string> synonyms, std::vector<std::string> questions)
{
    ConceptNode n;
    n.id = id;
    n.name = id;
    n.synonyms = std::move(synonyms);
    n.questions = std::move(questions);
    n.knowledge = "What a " + id + " is.";
    return n;
}

KnowledgeGraph graph()
{
    KnowledgeGraph g;
    g.add(node("car", {"automobile", "motorcar"}, {"What is a car?", "How does a car work?"}));
    g.add(node("bus", {"autobus", "coach"}, {"What is a bus?"}));
    g.add(node("rifle", {}, {"Give me the definition of rifle."}));
    g.add(node("river", {}, {"What is a river?"}));
    return g;
}

} // namespace

class TestKnowledgeRecall : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void entriesAndDistinctNodes()
    {
        const KnowledgeGraph g = graph();
        LexicalEmbedder e;
        const KnowledgeRecall r(g, e);
        QCOMPARE(r.entries(), size_t(5 + 4 + 2 + 2)); // car, bus, rifle, river: names + synonyms + questions
        QVERIFY(r.buildMs() >= 0);
        const auto c = r.candidates(e.embed("How does a car work?"), 3, -1.0);
        QCOMPARE(c.size(), size_t(3));
        QCOMPARE(g.nodes()[c[0].node].id, std::string("car"));
        QCOMPARE(c[0].matched, std::string("How does a car work?"));
        QVERIFY(std::abs(c[0].similarity - 1.0) < 1e-5);
        QVERIFY(c[0].node != c[1].node && c[1].node != c[2].node && c[0].node != c[2].node);
        QVERIFY(c[0].similarity >= c[1].similarity && c[1].similarity >= c[2].similarity);
        // a synonym finds its node
        QCOMPARE(g.nodes()[r.candidates(e.embed("automobile"), 1, 0.0).at(0).node].id, std::string("car"));
    }

    void floorAndK()
    {
        const KnowledgeGraph g = graph();
        LexicalEmbedder e;
        const KnowledgeRecall r(g, e);
        QCOMPARE(r.candidates(e.embed("What is a bus?"), 1, 0.0).size(), size_t(1));
        QVERIFY(r.candidates(e.embed("zzzz qqqq"), 4, 0.99).empty());
        QVERIFY(r.candidates(e.embed("What is a bus?"), 0, 0.0).empty());
        for (const auto &c : r.candidates(e.embed("What is a bus?"), 4, 0.3))
            QVERIFY(c.similarity >= 0.3);
    }

    // A near miss: recall's best for "What is a carp?" is the car, which verification then refuses.
    void nearMissNeedsVerification()
    {
        const KnowledgeGraph g = graph();
        LexicalEmbedder e;
        const KnowledgeRecall r(g, e);
        const auto c = r.candidates(e.embed("What is a carp?"), 1, 0.3);
        QCOMPARE(c.size(), size_t(1));
        QCOMPARE(g.nodes()[c[0].node].id, std::string("car"));
        QVERIFY(!g.verify("car", "What is a carp?").accepted);
    }

    void wrongQuerySize()
    {
        const KnowledgeGraph g = graph();
        LexicalEmbedder e(64);
        const KnowledgeRecall r(g, e);
        const Error err = expectError([&] { r.candidates(std::vector<float>(65, 0.1f), 1, 0.0); });
        QCOMPARE(err.code(), ErrorCode::InvalidArgument);
        QVERIFY2(std::string(err.what()).find("a query of 65 values, the index holds 64") !=
                     std::string::npos,
                 err.what());
    }

    void emptyGraph()
    {
        const KnowledgeGraph g;
        LexicalEmbedder e;
        const KnowledgeRecall r(g, e);
        QCOMPARE(r.entries(), size_t(0));
        QVERIFY(r.candidates(e.embed("car"), 3, 0.0).empty());
    }
};

QTEST_GUILESS_MAIN(TestKnowledgeRecall)
#include "tst_knowledge_recall.moc"
