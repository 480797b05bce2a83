// Per-entry thresholds under an error bound (core/cache/entry_thresholds.h): on synthetic entries
// whose answers are right above their own (unknown) similarity thresholds, with noise, the share
// of wrong answers among the served ones stays under the bound while most requests that could be
// served are; an entry without evidence is never served; options are checked. The prior's error
// curve (core/cache/error_curve.h): fitted from cumulative sweep points (bins, pool-adjacent-
// violators), read from a sweep's JSON and a trained embedder's log, and what it changes in the
// decision.
#include "core/cache/entry_thresholds.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"

#include <QtTest>

#include <cmath>
#include <cstring>
#include <fstream>
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

    void errorCurveFit()
    {
        // cumulative: 0.5 -> 100 hits (50 right), 0.7 -> 60 (40), 0.9 -> 20 (19); given out of order
        auto c = core::ErrorCurve::fit({{0.9, 20, 19}, {0.5, 100, 50}, {0.7, 60, 40}}, "t");
        QCOMPARE(c.from, (std::vector<double>{0.5, 0.7, 0.9}));
        QCOMPARE(c.errorRate, (std::vector<double>{30.0 / 40, 19.0 / 40, 1.0 / 20}));
        QCOMPARE(c.weight, (std::vector<double>{40, 40, 20}));
        QCOMPARE(c.rateAt(0.3), 0.75); // below the first threshold: the lowest bin's
        QCOMPARE(c.rateAt(0.7), 0.475);
        QCOMPARE(c.rateAt(0.95), 0.05);
        QCOMPARE(c.rateAt(std::nan("")), 1.0);
        // a higher bin more often wrong than the one below is pooled with it (weighted)
        c = core::ErrorCurve::fit({{0.5, 100, 70}, {0.7, 80, 52}, {0.9, 20, 19}}, "t");
        // bins: [0.5,0.7) 20 hits, 2 wrong (0.1); [0.7,0.9) 60 hits, 27 wrong (0.45): pooled
        QCOMPARE(c.from, (std::vector<double>{0.5, 0.9}));
        QCOMPARE(c.errorRate, (std::vector<double>{(2.0 + 27.0) / 80, 1.0 / 20}));
        // an empty bin's range falls to the one below
        c = core::ErrorCurve::fit({{0.5, 10, 5}, {0.6, 4, 4}, {0.7, 4, 4}}, "t");
        QCOMPARE(c.from, (std::vector<double>{0.5, 0.7}));
        QCOMPARE(c.rateAt(0.65), 5.0 / 6);
        for (const auto &bad : std::vector<std::vector<core::CumulativePoint>>{
                 {{0.5, 10, 5}, {0.7, 12, 5}},  // more hits at a higher threshold
                 {{0.5, 10, 11}},               // more right than hits
                 {{0.5, -1, 0}},                // a negative count
                 {{std::nan(""), 10, 5}},       // no threshold
                 {{0.5, 0, 0}, {0.9, 0, 0}}}) { // no hit anywhere
            QCOMPARE(test::expectError([&] { core::ErrorCurve::fit(bad, "t"); }).code(),
                     core::ErrorCode::InvalidArgument);
        }
    }

    void errorCurveFiles()
    {
        QTemporaryDir tmp;
        const std::filesystem::path dir = tmp.path().toStdString();
        const auto write = [&](const std::string &name, const std::string &text) {
            std::ofstream(dir / name) << text;
            return dir / name;
        };
        // kvwb sweep-semantic --json
        auto c = core::readErrorCurve(
            write("sweep.json", R"({"points": [{"threshold": 0.5, "hits": 100, "correct_hits": 50},
                                               {"threshold": 0.9, "hits": 20, "correct_hits": 19}]})"));
        QCOMPARE(c.errorRate, (std::vector<double>{49.0 / 80, 1.0 / 20}));
        QVERIFY(c.source.find("threshold sweep") != std::string::npos);
        // a trained embedder's log, with served counts; and given by its directory
        std::filesystem::create_directories(dir / "emb");
        const std::string log =
            R"({"validation_pairs": 10, "evaluation": {"trained": {"curve": [
                 {"threshold": 0.9, "precision": 1.0, "recall": 0.5, "served": 2},
                 {"threshold": 0.6, "precision": 0.75, "recall": 0.75, "served": 4},
                 {"threshold": 0.1, "precision": 0.4, "recall": 1.0, "served": 10}]}}})";
        write("emb/train_log.json", log);
        c = core::readErrorCurve(dir / "emb");
        QCOMPARE(c.from, (std::vector<double>{0.1, 0.6, 0.9}));
        QCOMPARE(c.errorRate, (std::vector<double>{5.0 / 6, 0.5, 0.0}));
        // an older log without served counts: derived from the validation pairs (4 duplicates)
        std::string old = log;
        for (const char *cut : {R"(, "served": 2)", R"(, "served": 4)", R"(, "served": 10)"})
            old.erase(old.find(cut), std::strlen(cut));
        QCOMPARE(core::readErrorCurve(write("old.json", old)).errorRate, c.errorRate);
        // faults name the file and the field
        const auto e = test::expectError([&] {
            core::readErrorCurve(write("bad.json", R"({"points": [{"threshold": 0.5, "hits": 3}]})"));
        });
        QCOMPARE(e.code(), core::ErrorCode::Format);
        QVERIFY2(QString(e.what()).contains("bad.json: points[0]: \"correct_hits\" is missing"), e.what());
        QCOMPARE(test::expectError([&] { core::readErrorCurve(write("x.json", "{\"a\": 1}")); }).code(),
                 core::ErrorCode::Format);
        QCOMPARE(test::expectError([&] { core::readErrorCurve(write("y.json", "not json")); }).code(),
                 core::ErrorCode::Format);
        QCOMPARE(test::expectError([&] { core::readErrorCurve(dir / "none.json"); }).code(),
                 core::ErrorCode::Io);
    }

    // The pooled rate an entry's evidence is drawn towards: from its own first outcomes alone, three
    // right answers make a 0% pooled rate and serve at a 10% bound; a measured curve that says this
    // similarity is wrong 40% of the time holds it back until the evidence outweighs it, and a
    // curve that says 0% lets it serve.
    void priorCurveDecides()
    {
        core::EntryBoundOptions o;
        o.errorBound = 0.1;
        o.minUses = 3;
        core::EntryThresholds pooledOnly(o);
        o.priorCurve = core::ErrorCurve::fit({{0.5, 100, 60}, {0.9, 50, 30}}, "risky");
        core::EntryThresholds risky(o);
        o.priorCurve = core::ErrorCurve::fit({{0.5, 100, 100}}, "safe");
        core::EntryThresholds safe(o);
        for (auto *et : {&pooledOnly, &risky, &safe})
            for (double s : {0.90, 0.91, 0.92})
                et->observe(1, s, true);
        QVERIFY(pooledOnly.decide(1, 0.95).serve);
        QCOMPARE(pooledOnly.decide(1, 0.95).priorRate, 0.0);
        const auto held = risky.decide(1, 0.95);
        QVERIFY(!held.serve);
        QVERIFY(std::abs(held.priorRate - 20 * 0.4 / 23) < 1e-12);
        QVERIFY(safe.decide(1, 0.95).serve);
        // the evidence outweighs the curve: many right answers across entries
        for (int e = 2; e < 60; ++e)
            for (int i = 0; i < 6; ++i)
                risky.observe(uint64_t(e), 0.9, true);
        for (int i = 0; i < 40; ++i)
            risky.observe(1, 0.93, true);
        QVERIFY(risky.decide(1, 0.95).serve);
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
