// User profiles: drawn per distinct user with a seed (the same users and seed give the same file,
// another seed other profiles, at about the stated weights), rendered as one instruction line, and
// read back with file-and-entry errors for anything malformed.
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
};

QTEST_GUILESS_MAIN(TestUserProfiles)
#include "tst_user_profiles.moc"
