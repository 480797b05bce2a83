// Gate precision / recall against hand-counted cases.
#include "core/metrics/gate_curve.h"
#include "core/util/error.h"

#include <QtTest>

#include <cmath>

using namespace kvwb;

class TestGateCurve : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void countsByHand()
    {
        // tail_kl-like (lower passes): prompts 0-2 good, 3-4 bad; signal 0.01 0.05 0.3 0.2 0.6
        const std::vector<double> signal = {0.01, 0.05, 0.3, 0.2, 0.6};
        const std::vector<bool> good = {true, true, true, false, false};
        auto p = core::gatePoint(signal, good, 0.1, false); // passes 0, 1
        QCOMPARE(p.passRate, 0.4);
        QCOMPARE(p.precision, 1.0);
        QVERIFY(std::abs(p.recall - 2.0 / 3.0) < 1e-12);
        p = core::gatePoint(signal, good, 0.3, false); // passes 0, 1, 2, 3
        QCOMPARE(p.precision, 0.75);
        QCOMPARE(p.recall, 1.0);
        p = core::gatePoint(signal, good, 0.0, false); // nothing passes
        QVERIFY(std::isnan(p.precision));
        QCOMPARE(p.recall, 0.0);
        // kv_cos-like (higher passes)
        p = core::gatePoint({0.9, 0.5}, {true, false}, 0.8, true);
        QCOMPARE(p.precision, 1.0);
        QCOMPARE(p.recall, 1.0);
        QCOMPARE(p.passRate, 0.5);
    }

    void curveAndChoice()
    {
        const std::vector<double> signal = {0.01, 0.05, 0.3, 0.2, 0.6, 0.05};
        const std::vector<bool> good = {true, true, true, false, false, true};
        const auto curve = core::gateCurve(signal, good, false);
        QCOMPARE(curve.size(), size_t(5)); // distinct values, ascending
        QCOMPARE(curve.front().threshold, 0.01);
        QCOMPARE(curve.back().threshold, 0.6);
        QCOMPARE(curve.back().passRate, 1.0);
        // precision 1 reaches recall 3/4 at 0.05; at 0.3 precision is 4/5
        const auto strict = core::bestThreshold(curve, 1.0);
        QVERIFY(strict);
        QCOMPARE(strict->threshold, 0.05);
        QCOMPARE(strict->recall, 0.75);
        const auto loose = core::bestThreshold(curve, 0.8);
        QVERIFY(loose);
        QCOMPARE(loose->threshold, 0.3);
        QCOMPARE(loose->recall, 1.0);
        QVERIFY(!core::bestThreshold(core::gateCurve({0.5}, {false}, false), 0.5));
        QVERIFY(core::gateCurve({}, {}, true).empty());
    }

    void errors()
    {
        QVERIFY_THROWS_EXCEPTION(core::Error, core::gatePoint({1.0}, {true, false}, 0.5, true));
        QVERIFY_THROWS_EXCEPTION(core::Error, core::gatePoint({NAN}, {true}, 0.5, true));
    }
};

QTEST_GUILESS_MAIN(TestGateCurve)
#include "tst_gate_curve.moc"
