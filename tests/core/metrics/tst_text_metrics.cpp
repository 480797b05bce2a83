// Text and correlation metrics against hand-computed values.
#include "core/metrics/text_metrics.h"
#include "core/util/error.h"

#include <QtTest>

#include <cmath>

using namespace kvwb;

class TestTextMetrics : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void words()
    {
        QCOMPARE(core::normalizedWords("A cat, the CAT's hat!"),
                 std::vector<std::string>({"a", "cat", "the", "cat", "s", "hat"}));
        QCOMPARE(core::normalizedWords("  "), std::vector<std::string>());
    }

    void answerFound_data()
    {
        QTest::addColumn<QString>("generated");
        QTest::addColumn<QString>("answer");
        QTest::addColumn<bool>("found");
        QTest::newRow("name with punctuation") << " Biscuit, of course."
                                               << "Biscuit" << true;
        QTest::newRow("case") << "it is called PEPPER"
                              << "Pepper" << true;
        QTest::newRow("number") << " 2290. The"
                                << "2290" << true;
        QTest::newRow("other number") << " 22900"
                                      << "2290" << false;
        QTest::newRow("part of a word") << "Biscuits"
                                        << "Biscuit" << false;
        QTest::newRow("first four words") << "A friend who is often near"
                                          << "A friend who is frequently in the company" << true;
        QTest::newRow("words apart") << "A friend, then who is"
                                     << "A friend who is" << false;
        QTest::newRow("order") << "who friend a is"
                               << "A friend who is" << false;
        QTest::newRow("no word in the answer") << "anything"
                                               << " ... " << false;
        QTest::newRow("empty text") << ""
                                    << "Max" << false;
    }
    void answerFound()
    {
        QFETCH(QString, generated);
        QFETCH(QString, answer);
        QFETCH(bool, found);
        QCOMPARE(core::answerFound(generated.toStdString(), answer.toStdString()), found);
    }

    void rougeL_data()
    {
        QTest::addColumn<QString>("candidate");
        QTest::addColumn<QString>("reference");
        QTest::addColumn<double>("expected");
        // LCS "police the gunman" (3): p = 3/4, r = 3/4
        QTest::newRow("lin 2004") << "police killed the gunman"
                                  << "police kill the gunman" << 0.75;
        // LCS "the gunman" (2) of 4 words each... "the gunman police killed" vs reference
        QTest::newRow("order matters") << "the gunman kill police"
                                       << "police kill the gunman" << 0.5;
        QTest::newRow("identical") << "a b c"
                                   << "A, b c." << 1.0;
        QTest::newRow("disjoint") << "x y"
                                  << "a b" << 0.0;
        QTest::newRow("both empty") << ""
                                    << "" << 1.0;
        QTest::newRow("one empty") << ""
                                   << "a" << 0.0;
        // LCS 2 ("a c"), p = 2/2, r = 2/4 -> F = 2/3
        QTest::newRow("subsequence") << "a c"
                                     << "a b c d" << 2.0 / 3.0;
    }
    void rougeL()
    {
        QFETCH(QString, candidate);
        QFETCH(QString, reference);
        QFETCH(double, expected);
        QVERIFY(std::abs(core::rougeL(candidate.toStdString(), reference.toStdString()) - expected) < 1e-12);
    }

    void wordF1()
    {
        // common {the, cat}: p = 2/3, r = 2/2
        QVERIFY(std::abs(core::wordF1("the cat sat", "The cat") - 0.8) < 1e-12);
        QCOMPARE(core::wordF1("", ""), 1.0);
    }

    void correlations()
    {
        const std::vector<double> x = {1, 2, 3, 4, 5}, y = {2, 4, 6, 8, 10}, z = {5, 4, 3, 2, 1};
        QVERIFY(std::abs(core::pearson(x, y) - 1.0) < 1e-12);
        QVERIFY(std::abs(core::pearson(x, z) + 1.0) < 1e-12);
        // monotone but not linear: Spearman 1, Pearson below 1
        const std::vector<double> cube = {1, 8, 27, 64, 125};
        QVERIFY(std::abs(core::spearman(x, cube) - 1.0) < 1e-12);
        QVERIFY(core::pearson(x, cube) < 0.99);
        // ties take mean ranks: x ranks 1, 2.5, 2.5, 4 vs y ranks 1, 2, 3, 4 -> r = 0.9486832980505138
        QVERIFY(std::abs(core::spearman({1, 2, 2, 3}, {1, 2, 3, 4}) - 0.9486832980505138) < 1e-12);
        QVERIFY(std::isnan(core::pearson({1, 1, 1}, {1, 2, 3})));
        QVERIFY(std::isnan(core::pearson({1}, {1})));
        QVERIFY_THROWS_EXCEPTION(core::Error, core::pearson({1, 2}, {1}));
    }
};

QTEST_GUILESS_MAIN(TestTextMetrics)
#include "tst_text_metrics.moc"
