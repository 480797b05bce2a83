// Paired bootstrap intervals: exact cases, errors, and coverage of a known difference on
// synthetic prompts at the stated rate.
#include "core/metrics/bootstrap.h"
#include "core/util/error.h"

#include <QtTest>

#include <cmath>
#include <random>

using namespace kvwb;

class TestBootstrap : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void exactCases()
    {
        const std::vector<double> b = {0.5, 1.0, 2.0, 4.0, 0.25};
        std::vector<double> a, shifted;
        for (double x : b) {
            a.push_back(0.1 * x);
            shifted.push_back(x + 0.3);
        }
        // a constant per-prompt difference: every resample has it
        const auto d = core::meanDifference(shifted, b);
        QVERIFY(std::abs(d.estimate - 0.3) < 1e-12);
        QVERIFY(std::abs(d.lo - 0.3) < 1e-12 && std::abs(d.hi - 0.3) < 1e-12);
        // a at a tenth of b on every prompt: 90% of the gap closed, whatever is drawn
        const auto g = core::gapClosed(a, b);
        QVERIFY(std::abs(g.estimate - 0.9) < 1e-12);
        QVERIFY(std::abs(g.lo - 0.9) < 1e-12 && std::abs(g.hi - 0.9) < 1e-12);
        QCOMPARE(QString::fromStdString(core::formatInterval(g)), QString("0.900 [0.900, 0.900]"));
        // seeded: the same interval twice, another seed another one
        std::vector<double> noisy, base;
        std::mt19937_64 rng(3);
        std::uniform_real_distribution<double> u(0.0, 1.0);
        for (int i = 0; i < 30; ++i) {
            noisy.push_back(u(rng));
            base.push_back(u(rng));
        }
        const auto one = core::meanDifference(noisy, base), two = core::meanDifference(noisy, base);
        QCOMPARE(one.lo, two.lo);
        QCOMPARE(one.hi, two.hi);
        core::BootstrapOptions other;
        other.seed = 9;
        const auto three = core::meanDifference(noisy, base, other);
        QVERIFY(three.lo != one.lo || three.hi != one.hi);
        QVERIFY(one.lo < one.estimate && one.estimate < one.hi);
        // the mean alone: the plain mean, inside its interval, which is as wide as the mean
        // difference against a constant (the same draws)
        const auto m = core::meanInterval(noisy);
        double sum = 0;
        for (double x : noisy)
            sum += x;
        QVERIFY(std::abs(m.estimate - sum / 30) < 1e-12);
        QVERIFY(m.lo < m.estimate && m.estimate < m.hi);
        const auto shiftedMean = core::meanDifference(noisy, std::vector<double>(30, 0.0));
        QVERIFY(std::abs(m.lo - shiftedMean.lo) < 1e-12 && std::abs(m.hi - shiftedMean.hi) < 1e-12);
    }

    void errors()
    {
        const auto code = [](auto &&f) {
            try {
                f();
            } catch (const core::Error &e) {
                return e.code();
            }
            return core::ErrorCode::Io; // not thrown
        };
        const std::vector<double> two = {1, 2}, three = {1, 2, 3};
        QCOMPARE(code([&] { core::meanDifference(two, three); }), core::ErrorCode::InvalidArgument);
        QCOMPARE(code([&] { core::meanDifference({1.0}, {2.0}); }), core::ErrorCode::InvalidArgument);
        QCOMPARE(code([] { core::meanInterval({1.0}); }), core::ErrorCode::InvalidArgument);
        QCOMPARE(code([&] {
                     core::meanDifference({1.0, NAN}, {2.0, 1.0});
                 }),
                 core::ErrorCode::InvalidArgument);
        core::BootstrapOptions bad;
        bad.level = 1.0;
        QCOMPARE(code([&] { core::meanDifference(two, two, bad); }), core::ErrorCode::InvalidArgument);
        bad.level = 0.95;
        bad.resamples = 10;
        QCOMPARE(code([&] { core::meanDifference(two, two, bad); }), core::ErrorCode::InvalidArgument);
        // a gap of zero has no share: NaN, not a number made up
        const auto g = core::gapClosed({0.0, 0.0}, {0.0, 0.0});
        QVERIFY(std::isnan(g.estimate));
    }

    // 400 synthetic experiments of 40 prompts: each prompt has a difficulty shared by both sides
    // (sd 1) plus its own noise per side (sd 0.5), and side a is 0.2 worse on average. The 95%
    // interval of the difference must cover 0.2 in about 95% of experiments (percentile intervals
    // run a little narrow at 40 prompts: 91-98% accepted, ~4 binomial standard deviations), and
    // pairing must remove the shared difficulty: an unpaired interval would be ~0.98 wide
    // (2 x 1.96 x sqrt(2.5 / 40)), a paired one ~0.44 (sqrt(0.5 / 40)).
    void coversTheTrueDifferenceAtItsRate()
    {
        std::mt19937_64 rng(2024);
        std::normal_distribution<double> difficulty(0.0, 1.0), noise(0.0, 0.5);
        core::BootstrapOptions o;
        o.resamples = 1000;
        int covered = 0;
        double width = 0;
        const int experiments = 400, prompts = 40;
        for (int e = 0; e < experiments; ++e) {
            std::vector<double> a(prompts), b(prompts);
            for (int i = 0; i < prompts; ++i) {
                const double d = difficulty(rng);
                a[size_t(i)] = d + 0.2 + noise(rng);
                b[size_t(i)] = d + noise(rng);
            }
            o.seed = uint64_t(e) + 1;
            const auto iv = core::meanDifference(a, b, o);
            covered += iv.lo <= 0.2 && 0.2 <= iv.hi;
            width += iv.hi - iv.lo;
        }
        const double rate = double(covered) / experiments;
        qInfo("coverage %.3f, mean width %.3f", rate, width / experiments);
        QVERIFY2(rate >= 0.91 && rate <= 0.98, qPrintable(QString("coverage %1").arg(rate)));
        QVERIFY2(width / experiments < 0.6, qPrintable(QString("mean width %1").arg(width / experiments)));
    }
};

QTEST_GUILESS_MAIN(TestBootstrap)
#include "tst_bootstrap.moc"
