// The knowledge graph: verification accepts a node's own names (their plurals, past frame names)
// and rejects siblings, hyponyms, texts that name no concept or several; relations must point into the graph;
// freshness follows the TTL and the model fingerprint; JSONL concepts are read with file:line errors; the
// WordNet graph holds the demo's concepts with their relations.
#include "core/knowledge/knowledge_graph.h"
#include "core/util/error.h"
#include "core/workload/wordnet.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>

using namespace kvwb;
using namespace kvwb::core;
namespace fs = std::filesystem;

namespace {

ConceptNode node(const std::string &id, const std::string &name, std::vector<std::string> synonyms,
                 std::vector<ConceptRelation> related)
{
    ConceptNode n;
    n.id = id;
    n.name = name;
    n.synonyms = std::move(synonyms);
    n.related = std::move(related);
    n.knowledge = "What " + name + " is.";
    return n;
}

KnowledgeGraph vehicles()
{
    KnowledgeGraph g;
    g.add(node("vehicle", "motor vehicle", {},
               {{RelationKind::Hyponym, "car"}, {RelationKind::Hyponym, "bus"}}));
    g.add(node("car", "car", {"auto", "automobile"},
               {{RelationKind::Hypernym, "vehicle"},
                {RelationKind::Sibling, "bus"},
                {RelationKind::Hyponym, "sports"}}));
    g.add(node("bus", "bus", {"autobus"},
               {{RelationKind::Hypernym, "vehicle"}, {RelationKind::Sibling, "car"}}));
    g.add(node("sports", "sports car", {"sport car"}, {{RelationKind::Hypernym, "car"}}));
    g.checkRelations();
    return g;
}

} // namespace

class TestKnowledgeGraph : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void verificationAcceptsOnlyTheNodesOwnNames()
    {
        const auto g = vehicles();
        auto v = g.verify("car", "What is an Automobile, in two lines?");
        QVERIFY2(v.accepted, v.reason.c_str());
        QCOMPARE(v.mentioned, std::string("car"));
        QCOMPARE(v.matched, std::string("automobile"));
        QVERIFY(g.verify("car", "explain CAR").accepted);

        v = g.verify("car", "What is a bus?"); // a sibling: the near miss
        QVERIFY(!v.accepted);
        QCOMPARE(v.mentioned, std::string("bus"));
        QVERIFY2(v.reason.find("its sibling") != std::string::npos, v.reason.c_str());

        v = g.verify("car", "What is a sports car?"); // the longer, more specific name wins
        QVERIFY(!v.accepted);
        QCOMPARE(v.mentioned, std::string("sports"));
        QVERIFY2(v.reason.find("its hyponym") != std::string::npos, v.reason.c_str());
        QVERIFY(g.verify("sports", "What is a sports car?").accepted);

        v = g.verify("car", "What is a motor vehicle?"); // the hypernym
        QVERIFY(!v.accepted);
        QVERIFY2(v.reason.find("its hypernym") != std::string::npos, v.reason.c_str());

        QVERIFY(!g.verify("car", "How is the weather?").accepted);              // no concept
        QVERIFY(!g.verify("car", "Which is faster, a car or a bus?").accepted); // two concepts
        QVERIFY(!g.verify("car", "carpets and buses").accepted);                // whole words only
        QVERIFY(!g.verify("plane", "What is a car?").accepted);                 // not a node
        QCOMPARE(g.neighbours("car", RelationKind::Sibling).size(), size_t(1));
        QCOMPARE(g.neighbours("car").size(), size_t(3));
    }

    // Names that frame the questions ("word" in "What is meant by the word 'car'?") are looked past
    // when the text names another concept, and count when it names nothing else; regular plurals
    // name their singular unless the plural is a name itself; "does" is not a plural of "doe".
    void frameNamesAndPlurals()
    {
        KnowledgeGraph g;
        const auto add = [&](const std::string &id, const std::string &name,
                             std::vector<std::string> synonyms) {
            ConceptNode n = node(id, name, std::move(synonyms), {});
            n.questions = {"What is meant by the word '" + name + "'?",
                           "Define " + name + " in simple terms.", "What is the meaning of " + name + "?"};
            g.add(std::move(n));
        };
        add("car", "car", {"automobile"});
        add("bus", "bus", {});
        add("word", "word", {});
        add("inch", "inch", {"in"});
        add("meaning", "meaning", {});
        add("body", "body", {});
        add("box", "box", {});
        add("arm", "arm", {});
        add("arms", "arms", {"weapon"});
        add("doe", "doe", {});
        add("term", "term", {}); // "terms" frames "Define X in simple terms."
        for (const char *w : {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
                              "kappa", "lambda", "mu", "nu", "xi", "omicron"})
            add(w, w, {});
        QVERIFY(g.isFrameName("word"));
        QVERIFY(g.isFrameName("in"));
        QVERIFY(g.isFrameName("Meaning"));
        QVERIFY(!g.isFrameName("term")); // the questions say "terms": a frame as written (below)
        QVERIFY(!g.isFrameName("car"));
        QVERIFY(!g.isFrameName("nothing"));

        for (const auto *q : {"What is meant by the word 'car'?", "Define car in simple terms.",
                              "What is the meaning of automobile?"}) {
            const auto v = g.verify("car", q);
            QVERIFY2(v.accepted, (std::string(q) + ": " + v.reason).c_str());
        }
        auto v = g.verify("car", "What is meant by the word 'bus'?");
        QVERIFY(!v.accepted);
        QCOMPARE(v.mentioned, std::string("bus"));
        QVERIFY(g.verify("term", "What is a term?").accepted);
        QVERIFY(g.verify("word", "What is a word?").accepted);        // a frame name alone names its node
        QVERIFY(g.verify("inch", "How long is an inch?").accepted);   // "inch" itself is no frame
        QVERIFY(!g.verify("word", "the meaning of a word").accepted); // two frame names, nothing else

        v = g.verify("car", "How fast are cars?");
        QVERIFY2(v.accepted, v.reason.c_str());
        QCOMPARE(v.matched, std::string("car"));
        QVERIFY(g.verify("bus", "Where do buses stop?").accepted);
        QVERIFY(g.verify("body", "How many bodies are there?").accepted);
        QVERIFY(g.verify("box", "Stack the boxes").accepted);
        QVERIFY(!g.verify("car", "cars or buses?").accepted); // two concepts
        v = g.verify("arms", "the right to bear arms");       // a name itself, not arm's plural
        QVERIFY(v.accepted);
        QCOMPARE(v.mentioned, std::string("arms"));
        QVERIFY(g.verify("car", "How does a car work?").accepted); // "does" names no doe
        QVERIFY(!g.verify("bus", "What is a bu?").accepted);
    }

    void badNodesAndRelationsAreRefused()
    {
        KnowledgeGraph g = vehicles();
        auto e = test::expectError([&] { g.add(node("car", "car again", {}, {})); });
        QVERIFY2(QString(e.what()).contains("concept 'car' is in the graph already"), e.what());
        e = test::expectError([&] { g.add(node("x y", "x", {}, {})); });
        QVERIFY2(QString(e.what()).contains("an id is"), e.what());
        auto bad = node("z", "zebra", {}, {});
        bad.confidence = 1.5;
        e = test::expectError([&] { g.add(bad); });
        QVERIFY2(QString(e.what()).contains("confidence 1.5 is outside [0, 1]"), e.what());
        bad = node("z", "zebra", {}, {});
        bad.knowledge.clear();
        QCOMPARE(test::expectError([&] { g.add(bad); }).code(), ErrorCode::InvalidArgument);
        g.add(node("z", "zebra", {}, {{RelationKind::Sibling, "horse"}}));
        e = test::expectError([&] { g.checkRelations(); });
        QVERIFY2(
            QString(e.what()).contains("concept 'z': sibling relation to 'horse', which is not in the graph"),
            e.what());
    }

    void freshness()
    {
        QCOMPARE(moduleFreshness(false, 0, "", "m1", 10, 0), Freshness::Missing);
        QCOMPARE(moduleFreshness(true, 0, "m1", "m1", 1'000'000, 0), Freshness::Fresh); // no TTL
        QCOMPARE(moduleFreshness(true, 100, "m1", "m1", 150, 60), Freshness::Fresh);
        QCOMPARE(moduleFreshness(true, 100, "m1", "m1", 161, 60), Freshness::Stale); // older than its TTL
        QCOMPARE(moduleFreshness(true, 100, "m1", "m2", 101, 60), Freshness::Stale); // another model
        QCOMPARE(std::string(freshnessName(Freshness::Stale)), std::string("stale"));
    }

    void conceptsFromJsonl()
    {
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "c.jsonl";
        test::writeFile(
            path,
            R"({"id": "gd", "name": "gradient descent", "synonyms": ["steepest descent"], "knowledge": "An optimiser.", "related": [{"kind": "sibling", "id": "newton"}], "questions": ["How does gradient descent work?"]})"
            "\n\n"
            R"({"id": "newton", "name": "Newton method", "knowledge": "A root finder.", "confidence": 0.5, "verified_ms": 7})"
            "\n");
        const auto g = graphFromJsonl(path, 99);
        QCOMPARE(g.size(), size_t(2));
        QCOMPARE(g.find("gd")->questions.size(), size_t(1));
        QCOMPARE(g.find("gd")->verifiedMs, int64_t(99));
        QCOMPARE(g.find("gd")->source, path.string() + ":1");
        QCOMPARE(g.find("newton")->verifiedMs, int64_t(7));
        QCOMPARE(g.find("newton")->confidence, 0.5);
        QVERIFY(g.verify("gd", "explain steepest descent mathematically").accepted);
        QVERIFY(!g.verify("gd", "what is Newton method?").accepted);

        const auto fails = [&](const std::string &text, const char *want) {
            test::writeFile(path, text);
            const auto e = test::expectError([&] { graphFromJsonl(path, 0); });
            QCOMPARE(e.code(), ErrorCode::Format);
            QVERIFY2(QString(e.what()).contains(want), e.what());
        };
        fails("{\"id\": \"a\", \"name\": \"a\", \"knowledge\": \"k\"}\n{oops\n", "c.jsonl:2: not JSON");
        fails("{\"id\": \"a\", \"knowledge\": \"k\"}\n", "c.jsonl:1: field 'name' is missing");
        fails("{\"id\": \"a\", \"name\": \"a\", \"knowledge\": \"k\", \"verified_ms\": -5}\n",
              "c.jsonl:1: field 'verified_ms' is -5 (Unix ms, >= 0)");
        fails("{\"id\": \"a\", \"name\": \"a\", \"knowledge\": \"k\", \"synonyms\": [3]}\n",
              "c.jsonl:1: field 'synonyms' is not an array of strings");
        fails("{\"id\": \"a\", \"name\": \"a\", \"knowledge\": \"k\", \"related\": [{\"kind\": \"cousin\", "
              "\"id\": \"b\"}]}\n",
              "related kind 'cousin'");
        fails("{\"id\": \"a\", \"name\": \"a\", \"knowledge\": \"k\", \"related\": [{\"kind\": \"hyponym\", "
              "\"id\": \"b\"}]}\n",
              "hyponym relation to 'b', which is not in the graph");
        fails("{\"id\": \"a\", \"name\": \"a\", \"knowledge\": \"k\"}\n{\"id\": \"a\", \"name\": \"b\", "
              "\"knowledge\": \"k\"}\n",
              "c.jsonl:2: concept 'a' is in the graph already");
        fails("\n\n", "no concepts");
    }

    void wordNetGraph()
    {
        const fs::path dir = WordNet::kDefaultDir;
        if (!fs::exists(dir / "data.noun"))
            QSKIP("wordnet-base is not installed");
        const auto wn = WordNet::load(dir);
        const auto g = graphFromWordNet(wn, 300, 42);
        QCOMPARE(g.size(), size_t(300));
        g.checkRelations();
        const ConceptNode *car = g.find("n02958343");
        QVERIFY(car);
        QCOMPARE(car->name, std::string("car"));
        QVERIFY(std::find(car->synonyms.begin(), car->synonyms.end(), "automobile") != car->synonyms.end());
        QVERIFY2(car->knowledge.find("A motor vehicle with four wheels") == 0, car->knowledge.c_str());
        QCOMPARE(car->verifiedMs, int64_t(42));
        QCOMPARE(car->source, std::string("wordnet-3.0 n02958343"));
        QVERIFY(!car->questions.empty());
        size_t related = 0;
        for (const auto &n : g.nodes())
            related += n.related.size();
        QVERIFY2(related > 0, "no relations among the 300 most popular concepts");
        QVERIFY(g.verify("n02958343", "What is an automobile?").accepted);
        for (const auto *sibling : g.neighbours("n02958343", RelationKind::Sibling))
            QVERIFY(!g.verify("n02958343", "What is " + sibling->name + "?").accepted);
    }
};

QTEST_GUILESS_MAIN(TestKnowledgeGraph)
#include "tst_knowledge_graph.moc"
