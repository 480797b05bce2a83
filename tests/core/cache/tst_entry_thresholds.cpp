// Per-entry thresholds under an error bound (core/cache/entry_thresholds.h): on synthetic entries
// whose answers are right above their own (unknown) similarity thresholds, with noise, the share
// of wrong answers among the served ones stays under the bound while most requests that could be
// served are; an entry without evidence is never served; options are checked.
#include "core/cache/entry_thresholds.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"

#include <QtTest>

#include <cmath>
#include <limits>
#include <random>

using namespace kvwb;

class TestEntryThresholds : public QObject
{
    Q_OBJECT

    struct Run
    {
        int64_t served = 0, servedWrong = 0, servable = 0, requests = 0;
    };

    // entries with true thresholds in [lo, hi]; P(right | s) = 1 / (1 + exp(-slope (s - t)))
    static Run simulate(double bound, double lo, double hi, double slope, int entries, uint64_t seed)
    {
        core::EntryBoundOptions o;
        o.errorBound = bound;
        core::EntryThresholds et(o);
        std::mt19937_64 rng(seed);
        std::uniform_real_distribution<double> u(0, 1);
        std::vector<double> t(entries);
        for (double &x : t)
            x = lo + (hi - lo) * u(rng);
        Run run;
        for (int i = 0; i < 12000; ++i) {
            const int e = int(u(rng) * entries);
            const double s = 0.5 + 0.5 * u(rng);
            const double pRight = 1.0 / (1.0 + std::exp(-slope * (s - t[size_t(e)])));
            const bool right = u(rng) < pRight;
            ++run.requests;
            run.servable += pRight >= 1 - bound;
            const auto d = et.decide(uint64_t(e), s);
            if (d.serve) {
                ++run.served;
                run.servedWrong += right ? 0 : 1;
            } else {
                et.observe(uint64_t(e), s, right); // computed instead: its outcome is known
            }
        }
        return run;
    }

private Q_SLOTS:
    void boundHoldsOnSyntheticEntries_data()
    {
        QTest::addColumn<double>("bound");
        QTest::addColumn<double>("lo");
        QTest::addColumn<double>("hi");
        QTest::addColumn<double>("slope");
        QTest::addColumn<int>(
            "entries"); // 12,000 requests over them: a tighter bound needs more evidence each
        QTest::newRow("5%, spread thresholds") << 0.05 << 0.6 << 0.95 << 60.0 << 60;
        QTest::newRow("10%, spread thresholds") << 0.10 << 0.6 << 0.95 << 60.0 << 60;
        QTest::newRow("5%, noisy curves") << 0.05 << 0.7 << 0.9 << 25.0 << 60;
        QTest::newRow("2%, sharp curves") << 0.02 << 0.55 << 0.95 << 200.0 << 15;
    }

    void boundHoldsOnSyntheticEntries()
    {
        QFETCH(double, bound);
        QFETCH(double, lo);
        QFETCH(double, hi);
        QFETCH(double, slope);
        QFETCH(int, entries);
        for (uint64_t seed : {1u, 2u, 3u}) {
            const Run r = simulate(bound, lo, hi, slope, entries, seed);
            const double rate = r.served ? double(r.servedWrong) / double(r.served) : 0.0;
            const QString what = QString("seed %1: served %2 of %3 (servable %4), %5 wrong (%6)")
                                     .arg(seed)
                                     .arg(r.served)
                                     .arg(r.requests)
                                     .arg(r.servable)
                                     .arg(r.servedWrong)
                                     .arg(rate);
            qInfo("%s", qPrintable(what));
            QVERIFY2(rate <= bound, qPrintable(what));
            QVERIFY2(r.served > r.servable / 5, qPrintable(what)); // serves, not merely refuses
        }
    }

    void noEvidenceNoServe()
    {
        core::EntryThresholds et(core::EntryBoundOptions{});
        auto d = et.decide(7, 0.99);
        QVERIFY(!d.serve);
        QCOMPARE(d.errorUpper, 1.0);
        // another entry's evidence alone does not serve this one
        for (int i = 0; i < 50; ++i)
            et.observe(1, 0.9, true);
        QVERIFY(et.decide(1, 0.95).serve);
        QVERIFY(!et.decide(7, 0.95).serve);
        // a NaN or infinite similarity is never served, whatever the evidence
        QVERIFY(!et.decide(1, std::nan("")).serve);
        QVERIFY(!et.decide(1, std::numeric_limits<double>::infinity()).serve);
        // its own wrong answer above s stops it
        et.observe(1, 0.97, false);
        const auto after = et.decide(1, 0.95);
        QCOMPARE(after.ownErrors, int64_t(1));
        QVERIFY(!after.serve);
        et.forget(1);
        QCOMPARE(et.observations(), int64_t(0));
        QVERIFY(!et.decide(1, 0.95).serve);
    }

    // One lucky match is not evidence: an entry serves only after minUses right outcomes at or
    // below the similarity (a generous prior and bound, so that only the count decides).
    void tooLittleEvidenceDoesNotServe()
    {
        core::EntryBoundOptions o;
        o.errorBound = 0.5;
        o.priorWeight = 0;
        o.minUses = 3;
        core::EntryThresholds et(o);
        for (int i = 0; i < 50; ++i)
            et.observe(9, 0.9, true); // other entries' evidence: the pooled rate is 0
        et.observe(1, 0.90, true);
        et.observe(1, 0.91, true);
        QVERIFY(!et.decide(1, 0.95).serve);
        QCOMPARE(et.decide(1, 0.95).ownSuccesses, int64_t(2));
        et.observe(1, 0.99, true); // right, but above 0.95: no evidence for 0.95
        QVERIFY(!et.decide(1, 0.95).serve);
        QVERIFY(et.decide(1, 0.995).serve);
        et.observe(1, 0.92, true);
        QVERIFY(et.decide(1, 0.95).serve);
        o.minUses = 1; // the estimator before: one right outcome sufficed (0 of 1 wrong: upper bound 0.62)
        o.errorBound = 0.9;
        core::EntryThresholds one(o);
        one.observe(1, 0.9, true);
        QVERIFY(one.decide(1, 0.95).serve);
        o.minUses = 0;
        QCOMPARE(test::expectError([&] { core::EntryThresholds{o}; }).code(),
                 core::ErrorCode::InvalidArgument);
    }

    void badOptions()
    {
        for (double bound : {0.0, 1.0, -0.1, std::nan("")}) {
            core::EntryBoundOptions o;
            o.errorBound = bound;
            QCOMPARE(test::expectError([&] { core::EntryThresholds{o}; }).code(),
                     core::ErrorCode::InvalidArgument);
        }
        core::EntryBoundOptions o;
        o.confidence = 0.2;
        QCOMPARE(test::expectError([&] { core::EntryThresholds{o}; }).code(),
                 core::ErrorCode::InvalidArgument);
    }
};

QTEST_GUILESS_MAIN(TestEntryThresholds)
#include "tst_entry_thresholds.moc"
