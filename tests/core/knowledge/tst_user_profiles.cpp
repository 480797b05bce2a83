// User profiles: drawn per distinct user with a seed (the same users and seed give the same file,
// another seed other profiles, at about the stated weights), rendered as one instruction line, and
// read back with file-and-entry errors for anything malformed.
#include "core/knowledge/knowledge_graph.h"
#include "core/knowledge/user_profiles.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>

using namespace kvwb;
using namespace kvwb::core;
namespace fs = std::filesystem;

class TestUserProfiles : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void instructions()
    {
        UserProfile p;
        QCOMPARE(profileInstruction(p), std::string()); // the plain answer
        p.verbosity = Verbosity::Brief;
        p.depth = Depth::Beginner;
        p.examples = true;
        p.tone = Register::Casual;
        QCOMPARE(profileInstruction(p),
                 std::string("Answer in one short sentence, for a beginner, with an example, casually.\n"));
        p = {};
        p.verbosity = Verbosity::Detailed;
        p.depth = Depth::Expert;
        p.tone = Register::Formal;
        QCOMPARE(profileInstruction(p), std::string("Answer in detail, for an expert, formally.\n"));
    }

    void seededAndPerUser()
    {
        std::vector<std::string> users;
        for (int i = 0; i < 2000; ++i)
            users.push_back("u" + std::to_string(i % 1000)); // each user twice
        const auto a = generateProfiles(users, 7), b = generateProfiles(users, 7),
                   c = generateProfiles(users, 8);
        QCOMPARE(a.size(), size_t(1000));
        QVERIFY(a == b);
        QVERIFY(a != c);
        QCOMPARE(a.front().user, std::string("u0"));
        int brief = 0, beginner = 0, examples = 0, casual = 0;
        for (const auto &p : a) {
            brief += p.verbosity == Verbosity::Brief;
            beginner += p.depth == Depth::Beginner;
            examples += p.examples;
            casual += p.tone == Register::Casual;
        }
        // 1,000 draws: within 5 points of the stated 30 / 40 / 40 / 30 %
        QVERIFY2(std::abs(brief - 300) < 50 && std::abs(beginner - 400) < 50 &&
                     std::abs(examples - 400) < 50 && std::abs(casual - 300) < 50,
                 qPrintable(QString("%1 %2 %3 %4").arg(brief).arg(beginner).arg(examples).arg(casual)));
    }

    void fileRoundTripAndErrors()
    {
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "p.json";
        const auto ps = generateProfiles({"u1", "u2", "u3"}, 3);
        test::writeFile(path, profilesToJson(ps, 3));
        QVERIFY(readProfiles(path) == ps);
        const auto fails = [&](const std::string &text, const char *want) {
            test::writeFile(path, text);
            const auto e = test::expectError([&] { readProfiles(path); });
            QCOMPARE(e.code(), ErrorCode::Format);
            QVERIFY2(QString(e.what()).contains(want), e.what());
        };
        const std::string ok =
            R"({"user": "u1", "verbosity": "brief", "depth": "expert", "examples": true, "register": "formal"})";
        fails("[", "not JSON");
        fails(R"({"users": []})", "an array 'profiles'");
        fails(R"({"profiles": [)" + ok + "," + ok + "]}", "profiles[1] (u1): a second profile for this user");
        fails(
            R"({"profiles": [{"user": "u9", "verbosity": "chatty", "depth": "expert", "examples": true, "register": "formal"}]})",
            "profiles[0] (u9): verbosity 'chatty' is not brief, standard or detailed");
        fails(
            R"({"profiles": [{"user": "u9", "verbosity": "brief", "depth": "expert", "register": "formal"}]})",
            "field 'examples' is missing");
        fails(R"({"profiles": [{"verbosity": "brief"}]})", "profiles[0]: an object with a string 'user'");
    }

    // The personalised answer: its parts from a node, each dimension rendered as documented, and the
    // fit judged from the text alone (every rendering fits its own profile and, on some dimension,
    // not another's).
    void renderedAnswersFitTheirProfile()
    {
        KnowledgeGraph g;
        ConceptNode car;
        car.id = "car";
        car.name = "car";
        car.synonyms = {"auto", "automobile"};
        car.knowledge =
            "A motor vehicle with four wheels. It is a kind of motor vehicle. For example: \"he needs a "
            "car to get to work\".";
        car.related = {{RelationKind::Hyponym, "cab"}};
        ConceptNode cab;
        cab.id = "cab";
        cab.name = "cab";
        cab.knowledge = "A car driven by a person whose job is to take passengers where they want to go.";
        g.add(car);
        g.add(cab);
        const AnswerParts a = answerParts(g, *g.find("car"));
        QCOMPARE(a.gloss, std::string("A motor vehicle with four wheels."));
        QCOMPARE(a.rest, std::string("It is a kind of motor vehicle."));
        QCOMPARE(a.examples, std::vector<std::string>{"he needs a car to get to work"});
        QCOMPARE(a.kinds, std::vector<std::string>{"cab"});
        QVERIFY(answerParts(g, *g.find("cab")).examples.empty());

        UserProfile p;
        QCOMPARE(renderAnswer(a, p),
                 std::string("A motor vehicle with four wheels. It is a kind of motor vehicle."));
        p = {"u", Verbosity::Brief, Depth::Beginner, true, Register::Casual};
        QCOMPARE(renderAnswer(a, p),
                 std::string("Sure! Simply put: A motor vehicle with four wheels. For example: "
                             "\"he needs a car to get to work\"."));
        p = {"u", Verbosity::Detailed, Depth::Expert, false, Register::Formal};
        QCOMPARE(
            renderAnswer(a, p),
            std::string("Certainly. Technically: A motor vehicle with four wheels. It is a kind of motor "
                        "vehicle. It is also called auto, automobile. Kinds of it include cab."));

        std::vector<UserProfile> all;
        for (auto v : {Verbosity::Brief, Verbosity::Standard, Verbosity::Detailed})
            for (auto d : {Depth::Beginner, Depth::Intermediate, Depth::Expert})
                for (bool e : {false, true})
                    for (auto t : {Register::Casual, Register::Neutral, Register::Formal})
                        all.push_back({"u", v, d, e, t});
        for (const auto &mine : all) {
            const std::string text = renderAnswer(a, mine);
            QVERIFY2(profileFit(text, mine, true).all(), text.c_str());
            for (const auto &other : all) {
                const bool sameFitClass =
                    (mine.verbosity == Verbosity::Brief) == (other.verbosity == Verbosity::Brief) &&
                    mine.depth == other.depth && mine.examples == other.examples && mine.tone == other.tone;
                QCOMPARE(profileFit(text, other, true).all(), sameFitClass);
            }
        }
        // A truncated second sentence still makes the answer more than brief; no example to give
        // is no misfit.
        p = {"u", Verbosity::Brief, Depth::Intermediate, true, Register::Neutral};
        QVERIFY(!profileFit("A motor vehicle. It is a", p, true).verbosity);
        QVERIFY(profileFit("A motor vehicle.", p, false).all());
        QVERIFY(!profileFit("A motor vehicle.", p, true).examples);
    }

    void personalisedCorpusIsSeededAndComplete()
    {
        KnowledgeGraph g;
        for (const char *id : {"car", "bus", "river"}) {
            ConceptNode n;
            n.id = id;
            n.name = id;
            n.questions = {std::string("What is a ") + id + "?"};
            n.knowledge = std::string("The ") + id + ". It is a kind of thing.";
            g.add(n);
        }
        const auto docs = personalisedCorpus(g, {"You answer questions."}, 40, 7);
        QCOMPARE(docs.size(), size_t(120));
        QVERIFY(personalisedCorpus(g, {"You answer questions."}, 40, 7)[77].prompt == docs[77].prompt);
        int withKnowledge = 0, withSystem = 0, validation = 0;
        for (const auto &d : docs) {
            const ConceptNode &n = *g.find(d.nodeId);
            QVERIFY(d.prompt.size() > 3 && d.prompt.substr(d.prompt.size() - 3) == "\nA:");
            QVERIFY(d.prompt.find("Q: " + n.questions[0]) != std::string::npos);
            QVERIFY(d.prompt.find(profileInstruction(d.profile)) != std::string::npos);
            QCOMPARE(d.answer, renderAnswer(answerParts(g, n), d.profile));
            withKnowledge += d.prompt.find(moduleText(n)) != std::string::npos;
            withSystem += d.prompt.rfind("You answer questions.\n\n", 0) == 0;
            validation += d.split == "validation";
        }
        QVERIFY(withKnowledge > 70 && withKnowledge < 110); // 3 in 4
        QVERIFY(withSystem > 50 && withSystem < 95);        // 3 in 5
        QVERIFY(validation >= 1 && validation < 20);        // 1 in 20
    }
};

QTEST_GUILESS_MAIN(TestUserProfiles)
#include "tst_user_profiles.moc"
