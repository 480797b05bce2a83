// The demo embedder's paraphrase data: held-out concepts and validation-only templates never reach
// a training triple, positives share the anchor's concept, hard negatives are siblings asked the
// same way, held-out pairs are labelled by concept, and the separation measures are exact on a
// hand-made example.
#include "core/util/error.h"
#include "core/workload/corpus.h"
#include "core/workload/paraphrase_pairs.h"
#include "core/workload/wordnet.h"
#include "tests/support/expect_error.h"
#include "tests/support/wordnet_fixture.h"

#include <QTemporaryDir>
#include <QtTest>

#include <map>
#include <set>

using namespace kvwb;

class TestParaphrasePairs : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase();
    void triplesKeepTheHoldOut();
    void heldOutPairsAreLabelledByConcept();
    void separationOnAKnownExample();
    void refusals();

private:
    QTemporaryDir m_tmp;
    std::vector<core::ParaphraseConcept> m_concepts;
    // every question each concept can be asked (any template, any lemma) -> concept index
    std::map<std::string, size_t> m_owner;
};

void TestParaphrasePairs::initTestCase()
{
    test::writeWordNetFixture(m_tmp.path().toStdString(), 30, false);
    const auto wn = core::WordNet::load(m_tmp.path().toStdString());
    m_concepts = core::paraphraseConcepts(wn, 40, 4);
    QVERIFY(m_concepts.size() >= 20);
    for (size_t i = 0; i < m_concepts.size(); ++i)
        for (const auto &l : m_concepts[i].lemmas)
            for (const auto &t : core::questionTemplates())
                m_owner[core::renderQuestion(t, l)] = i;
}

void TestParaphrasePairs::triplesKeepTheHoldOut()
{
    std::set<std::string> validationQuestions;
    for (const auto &c : m_concepts)
        for (const auto &l : c.lemmas)
            for (const auto &t : core::questionTemplates())
                if (t.validation)
                    validationQuestions.insert(core::renderQuestion(t, l));
    size_t heldOut = 0, siblings = 0;
    for (const auto &c : m_concepts)
        heldOut += c.heldOut ? 1 : 0;
    QVERIFY(heldOut > 0);
    core::SeededRandom rng(3);
    for (int i = 0; i < 2000; ++i) {
        const auto t = core::sampleTriple(m_concepts, rng);
        for (const std::string *q : {&t.anchor, &t.positive, &t.negative}) {
            QVERIFY2(m_owner.count(*q), q->c_str());
            QVERIFY2(!m_concepts[m_owner[*q]].heldOut, q->c_str());
            QVERIFY2(!validationQuestions.count(*q), q->c_str());
        }
        QVERIFY(t.anchor != t.positive);
        QCOMPARE(m_owner[t.anchor], m_owner[t.positive]);
        QVERIFY(m_owner[t.anchor] != m_owner[t.negative]);
        const auto &sib = m_concepts[m_owner[t.anchor]].siblings;
        siblings += std::count(sib.begin(), sib.end(), m_owner[t.negative]) > 0 ? 1 : 0;
    }
    QVERIFY2(siblings > 800, qPrintable(QString::number(siblings))); // most negatives are near misses
}

void TestParaphrasePairs::heldOutPairsAreLabelledByConcept()
{
    const auto pairs = core::heldOutPairs(m_concepts, 600, 9);
    QCOMPARE(pairs.size(), size_t(600));
    std::map<std::string, int> kinds;
    for (const auto &p : pairs) {
        QVERIFY2(m_owner.count(p.a) && m_owner.count(p.b), (p.a + " | " + p.b).c_str());
        QCOMPARE(p.duplicate, m_owner[p.a] == m_owner[p.b]);
        QVERIFY(p.a != p.b);
        ++kinds[p.kind];
    }
    for (const char *k : {"paraphrase", "held_out_concept", "near_miss", "other_concept"})
        QVERIFY2(kinds[k] > 20, k);
    QCOMPARE(core::heldOutPairs(m_concepts, 50, 9)[7].a, pairs[7].a); // seeded
}

void TestParaphrasePairs::separationOnAKnownExample()
{
    const std::vector<core::LabelledPair> pairs = {{"a", "b", true, "paraphrase"},
                                                   {"c", "d", true, "paraphrase"},
                                                   {"e", "f", true, "synonym"},
                                                   {"g", "h", false, "near_miss"},
                                                   {"i", "j", false, "other_concept"}};
    const std::vector<double> sim = {0.9, 0.8, 0.5, 0.7, 0.1};
    const auto s = core::separation(pairs, sim);
    // duplicates beat non-duplicates in 5 of 6 comparisons (0.5 < 0.7)
    QCOMPARE(s.auc, 5.0 / 6.0);
    QCOMPARE(s.nearMissAuc, 2.0 / 3.0);
    // at 0.8: 2 of 2 right (precision 1, recall 2/3); at 0.5: 3 of 4 (precision 0.75)
    QCOMPARE(s.recallAtPrecision90, 2.0 / 3.0);
    QCOMPARE(s.thresholdAtPrecision90, 0.8);
    QVERIFY_THROWS_EXCEPTION(core::Error, core::separation(pairs, {0.1}));
}

void TestParaphrasePairs::refusals()
{
    const auto wn = core::WordNet::load(m_tmp.path().toStdString());
    const auto e = test::expectError([&] { (void)core::paraphraseConcepts(wn, 10, 1); });
    QVERIFY(QString(e.what()).contains("hold-out-every"));
    std::vector<core::ParaphraseConcept> one(1);
    one[0].lemmas = {"car"};
    core::SeededRandom rng(1);
    QVERIFY_THROWS_EXCEPTION(core::Error, core::sampleTriple(one, rng));
}

QTEST_GUILESS_MAIN(TestParaphrasePairs)
#include "tst_paraphrase_pairs.moc"
