// WordNet database reader: synset fields, gloss splitting, sense-key counts -> popularity, warnings
// for malformed lines (file:line), and the install hint when the database is missing.
#include "core/util/error.h"
#include "core/workload/wordnet.h"
#include "tests/support/test_paths.h"
#include "tests/support/wordnet_fixture.h"

#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <chrono>

using namespace kvwb::core;
namespace fs = std::filesystem;

namespace {

QStringList toList(const std::vector<std::string> &v)
{
    QStringList out;
    for (const auto &s : v)
        out << QString::fromStdString(s);
    return out;
}

QStringList ids(const std::vector<const Synset *> &v)
{
    QStringList out;
    for (const Synset *s : v)
        out << QString::fromStdString(s->id);
    return out;
}

} // namespace

class TestWordNet : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    fs::path m_dir;
    kvwb::test::WordNetFixture m_fixture;

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        m_dir = fs::path(m_tmp.path().toStdString()) / "wn";
        m_fixture = kvwb::test::writeWordNetFixture(m_dir);
    }

    void synsetFields()
    {
        const auto wn = WordNet::load(m_dir);
        const Synset *car = wn.find("n00002100");
        QVERIFY(car);
        QCOMPARE(car->pos, 'n');
        QCOMPARE(car->offset, 2100u);
        QCOMPARE(car->lexFile, 6);
        QCOMPARE(toList(car->lemmas), QStringList({"car", "auto", "automobile", "motorcar"}));
        QCOMPARE(car->definition,
                 std::string(
                     "a motor vehicle with four wheels; usually propelled by an internal combustion engine"));
        QCOMPARE(toList(car->examples), QStringList({"he needs a car to get to work"}));
        QCOMPARE(toList(car->hypernyms), QStringList({"n00002000"}));
        QVERIFY(car->hyponyms.empty());
        QVERIFY(!car->instance);
        QCOMPARE(car->tagCount, int64_t(100 + 5 + 20));

        const Synset *hour = wn.find("n00004000");
        QVERIFY(hour);
        QCOMPARE(toList(hour->lemmas), QStringList({"hour", "hr", "60 minutes"}));
        QCOMPARE(toList(hour->examples), QStringList({"a lunch hour", "he spent an hour waiting"}));

        const Synset *paris = wn.find("n00005000");
        QVERIFY(paris);
        QVERIFY(paris->instance);
        QCOMPARE(toList(paris->lemmas), QStringList({"Paris", "City of Light", "French capital"}));
        QCOMPARE(toList(wn.find("n00006000")->hyponyms), QStringList({"n00005000"}));
        QCOMPARE(toList(wn.find("n00002000")->hyponyms),
                 QStringList({"n00002100", "n00002200", "n00002300", "n00002400", "n00002500"}));
        QVERIFY(!wn.find("n99999999"));
    }

    void cleanLemma_data()
    {
        QTest::addColumn<QString>("raw");
        QTest::addColumn<QString>("clean");
        QTest::newRow("plain") << "car"
                               << "car";
        QTest::newRow("underscores") << "internal_combustion_engine"
                                     << "internal combustion engine";
        QTest::newRow("predicative") << "ready_to_hand(p)"
                                     << "ready to hand";
        QTest::newRow("attributive") << "outback(a)"
                                     << "outback";
        QTest::newRow("postnominal") << "galore(ip)"
                                     << "galore";
        QTest::newRow("case kept") << "City_of_Light"
                                   << "City of Light";
    }
    void cleanLemma()
    {
        QFETCH(QString, raw);
        QFETCH(QString, clean);
        QCOMPARE(QString::fromStdString(kvwb::core::cleanLemma(raw.toStdString())), clean);
    }

    void splitGloss_data()
    {
        QTest::addColumn<QString>("gloss");
        QTest::addColumn<QString>("definition");
        QTest::addColumn<QStringList>("examples");
        QTest::newRow("definition only") << "a motor vehicle"
                                         << "a motor vehicle" << QStringList();
        QTest::newRow("one example") << "a motor vehicle; \"he needs a car\""
                                     << "a motor vehicle" << QStringList({"he needs a car"});
        QTest::newRow("two examples") << "time; \"a lunch hour\"; \"an hour later\""
                                      << "time" << QStringList({"a lunch hour", "an hour later"});
        QTest::newRow("semicolons in definition") << "a; b; c"
                                                  << "a; b; c" << QStringList();
        QTest::newRow("only an example") << "\"just this\""
                                         << "" << QStringList({"just this"});
        QTest::newRow("unterminated quote") << "def; \"open"
                                            << "def" << QStringList({"open"});
    }
    void splitGloss()
    {
        QFETCH(QString, gloss);
        QFETCH(QString, definition);
        QFETCH(QStringList, examples);
        std::string def;
        std::vector<std::string> ex;
        kvwb::core::splitGloss(gloss.toStdString(), def, ex);
        QCOMPARE(QString::fromStdString(def), definition);
        QCOMPARE(toList(ex), examples);
    }

    void popularityOrder()
    {
        const auto wn = WordNet::load(m_dir);
        const auto ranked = wn.byPopularity('n');
        // car 125, hour 60, apple 50, boat 40, vehicle 35, truck 30, bicycle 25, orange 15, fruit 12,
        // banana 10, Paris 8, railcar 7, pear 3, entity 2, then the zero counts by lemma count.
        QCOMPARE(ids(ranked).mid(0, 14),
                 QStringList({"n00002100", "n00004000", "n00003100", "n00002400", "n00002000", "n00002200",
                              "n00002300", "n00003200", "n00003000", "n00003300", "n00005000", "n00002500",
                              "n00003400", "n00001740"}));
        // Ties on count (0): more lemmas first (gadget has 2), then id.
        QCOMPARE(ids(ranked).mid(14), QStringList({"n00007000", "n00006000"}));
        QCOMPARE(wn.find("n00002500")->tagCount, int64_t(7)); // "car" sense 2 -> the railcar synset
    }

    void lookupAndSiblings()
    {
        const auto wn = WordNet::load(m_dir);
        QCOMPARE(ids(wn.lookup("car")), QStringList({"n00002100", "n00002500"}));
        QCOMPARE(ids(wn.lookup("Automobile")), QStringList({"n00002100"}));
        QCOMPARE(ids(wn.lookup("city of light")), QStringList({"n00005000"}));
        QVERIFY(wn.lookup("zebra").empty());
        QCOMPARE(ids(wn.siblings(*wn.find("n00002100"))),
                 QStringList({"n00002200", "n00002300", "n00002400", "n00002500"}));
        QVERIFY(wn.siblings(*wn.find("n00001740")).empty()); // the root has no hypernym
    }

    void malformedLinesWarn()
    {
        const auto wn = WordNet::load(m_dir);
        const auto &w = wn.warnings();
        QCOMPARE(w.total(), m_fixture.badDataLines.size() + m_fixture.badIndexLines.size() +
                                m_fixture.badCountLines.size() + 1);
        const QStringList msgs = toList(w.messages());
        for (int line : m_fixture.badDataLines) {
            const QString prefix = QString("data.noun:%1: bad synset line (").arg(line);
            QVERIFY2(
                std::any_of(msgs.begin(), msgs.end(), [&](const QString &m) { return m.startsWith(prefix); }),
                qPrintable(prefix + " not in:\n" + msgs.join('\n')));
        }
        for (int line : m_fixture.badIndexLines)
            QVERIFY(msgs.filter(QString("index.noun:%1: bad index line").arg(line)).size() == 1);
        for (int line : m_fixture.badCountLines)
            QVERIFY(msgs.filter(QString("cntlist.rev:%1: ").arg(line)).size() == 1);
        // Stale sense keys: one summary naming their lines, and their counts are not misattributed.
        QCOMPARE(wn.unmatchedSenseKeys(), m_fixture.unmatchedCountLines.size());
        const QStringList summary = msgs.filter("sense keys match no synset");
        QCOMPARE(summary.size(), 1);
        QVERIFY2(summary.first().contains(QString("first at lines %1, %2")
                                              .arg(m_fixture.unmatchedCountLines[0])
                                              .arg(m_fixture.unmatchedCountLines[1])),
                 qPrintable(summary.first()));
        // Good lines around the bad ones still load.
        QVERIFY(wn.find("n00002200") && wn.find("n00002300"));
        QCOMPARE(wn.synsets().size(), size_t(16));
    }

    void warningCap()
    {
        WordNetOptions o;
        o.maxWarnings = 2;
        const auto wn = WordNet::load(m_dir, o);
        QCOMPARE(wn.warnings().messages().size(), size_t(2));
        QVERIFY(wn.warnings().total() > 2);
        QVERIFY(QString::fromStdString(wn.warnings().summary()).contains("more"));
    }

    void missingDirectoryNamesPackage()
    {
        const fs::path missing = m_dir / "nope";
        try {
            WordNet::load(missing);
            QFAIL("expected an error");
        } catch (const Error &e) {
            QCOMPARE(e.code(), ErrorCode::Io);
            const QString msg = e.what();
            QVERIFY2(msg.contains("wordnet-base") && msg.contains(QString::fromStdString(missing.string())),
                     e.what());
        }
    }

    void missingFileNamesPackage()
    {
        QTemporaryDir d;
        const fs::path dir = d.path().toStdString();
        kvwb::test::writeWordNetFixture(dir);
        fs::remove(dir / "cntlist.rev");
        try {
            WordNet::load(dir);
            QFAIL("expected an error");
        } catch (const Error &e) {
            QCOMPARE(e.code(), ErrorCode::Io);
            QVERIFY2(QString(e.what()).contains("cntlist.rev") && QString(e.what()).contains("wordnet-base"),
                     e.what());
        }
    }

    // The installed Princeton WordNet 3.0, when present (Debian package wordnet-base).
    void realWordNet()
    {
        const fs::path dir = WordNet::kDefaultDir;
        if (!fs::exists(dir / "data.noun"))
            QSKIP("wordnet-base is not installed");
        const auto t0 = std::chrono::steady_clock::now();
        const auto wn = WordNet::load(dir);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        qInfo("loaded %zu noun synsets in %.0f ms, %zu warnings", wn.synsets().size(), ms,
              wn.warnings().total());
        // Only the summary of stale cntlist.rev keys (265 in WordNet 3.0, ~1.5% of noun keys).
        QVERIFY2(wn.warnings().total() <= 1, wn.warnings().summary().c_str());
        QVERIFY(wn.unmatchedSenseKeys() < 500);
        QCOMPARE(wn.synsets().size(), size_t(82115));
        const auto cars = wn.lookup("car");
        QVERIFY(!cars.empty());
        QCOMPARE(cars.front()->id, std::string("n02958343"));
        QCOMPARE(ids(wn.lookup("automobile")).first(), QString("n02958343"));
        const auto ranked = wn.byPopularity('n');
        const auto pos = std::find(ranked.begin(), ranked.end(), cars.front()) - ranked.begin();
        qInfo("car is noun synset #%td by popularity (tag count %lld)", pos + 1,
              (long long)cars.front()->tagCount);
        QVERIFY(pos < 3000);
    }
};

QTEST_APPLESS_MAIN(TestWordNet)
#include "tst_wordnet.moc"
