// Ridge regression from sufficient statistics: recovers a known affine map, is independent of
// chunking and merging, shrinks with lambda, and its in-sample R^2 from the sums equals R^2
// computed from the rows.
#include "core/util/error.h"
#include "gpu/align/ridge.h"
#include "tests/support/expect_error.h"

#include <QtTest>

#include <random>

using namespace kvwb;

namespace {

struct Data
{
    std::vector<float> x, y, w, b; // x [n, dx], y [n, dy], w [dx, dy], b [dy]
};

// y = x W + b (+ noise); features with different scales and a shared offset.
Data makeData(int64_t n, int dx, int dy, double noise, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> N(0.0f, 1.0f);
    Data d;
    d.w.resize(size_t(dx * dy));
    d.b.resize(size_t(dy));
    for (float &v : d.w)
        v = N(rng);
    for (float &v : d.b)
        v = 3.0f * N(rng);
    d.x.resize(size_t(n * dx));
    for (int64_t r = 0; r < n; ++r)
        for (int i = 0; i < dx; ++i)
            d.x[size_t(r * dx + i)] = 2.0f + float(1 + i % 3) * N(rng);
    d.y.resize(size_t(n * dy));
    for (int64_t r = 0; r < n; ++r)
        for (int j = 0; j < dy; ++j) {
            double s = d.b[size_t(j)];
            for (int i = 0; i < dx; ++i)
                s += double(d.x[size_t(r * dx + i)]) * d.w[size_t(i * dy + j)];
            d.y[size_t(r * dy + j)] = float(s + noise * N(rng));
        }
    return d;
}

} // namespace

class TestRidge : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void recoversAffineMap()
    {
        const auto d = makeData(2000, 12, 5, 0.0, 1);
        gpu::RidgeAccumulator acc(12, 5);
        acc.add(d.x.data(), d.y.data(), 2000);
        const auto s = acc.solve(0.0);
        for (size_t i = 0; i < d.w.size(); ++i)
            QVERIFY2(std::abs(s.weight[i] - d.w[i]) < 1e-3,
                     qPrintable(QString::number(s.weight[i] - d.w[i])));
        for (size_t j = 0; j < d.b.size(); ++j)
            QVERIFY(std::abs(s.bias[j] - d.b[j]) < 1e-2);
        QVERIFY(acc.r2(s) > 0.999999);
    }

    void chunkingAndMergingDoNotMatter()
    {
        const auto d = makeData(1000, 8, 4, 0.5, 2);
        gpu::RidgeAccumulator whole(8, 4), a(8, 4), b(8, 4);
        whole.add(d.x.data(), d.y.data(), 1000);
        for (int64_t r = 0; r < 1000; r += 137) { // uneven chunks into two shards
            const int64_t n = std::min<int64_t>(137, 1000 - r);
            (r % 2 ? a : b).add(d.x.data() + r * 8, d.y.data() + r * 4, n);
        }
        a.merge(b);
        QCOMPARE(a.rows(), int64_t(1000));
        const auto s1 = whole.solve(0.01), s2 = a.solve(0.01);
        for (size_t i = 0; i < s1.weight.size(); ++i)
            QVERIFY(std::abs(s1.weight[i] - s2.weight[i]) < 1e-5);
        QVERIFY_THROWS_EXCEPTION(core::Error, a.merge(gpu::RidgeAccumulator(8, 5)));
    }

    void lambdaShrinksAndR2Agrees()
    {
        const auto train = makeData(400, 10, 3, 1.0, 3);
        const auto test = makeData(400, 10, 3, 1.0, 3 + 100); // other rows, other map: R^2 ~ 0 or below
        gpu::RidgeAccumulator acc(10, 3);
        acc.add(train.x.data(), train.y.data(), 400);
        double previousNorm = 1e300;
        for (double lambda : {0.0, 0.1, 1.0, 10.0, 1000.0}) {
            const auto s = acc.solve(lambda);
            double norm = 0;
            for (float v : s.weight)
                norm += double(v) * v;
            QVERIFY2(norm < previousNorm, qPrintable(QString("lambda %1").arg(lambda)));
            previousNorm = norm;
            // in-sample R^2 from the sums equals R^2 from the rows
            QVERIFY(std::abs(acc.r2(s) - gpu::ridgeR2(s, train.x.data(), train.y.data(), 400)) < 1e-6);
        }
        const auto s = acc.solve(0.01);
        QVERIFY(acc.r2(s) > 0.8);
        QVERIFY(gpu::ridgeR2(s, test.x.data(), test.y.data(), 400) < 0.2); // a different map does not fit
        // lambda is scale-free: scaling x by 1000 gives the same predictions
        auto scaled = train.x;
        for (float &v : scaled)
            v *= 1000.0f;
        gpu::RidgeAccumulator big(10, 3);
        big.add(scaled.data(), train.y.data(), 400);
        QVERIFY(std::abs(big.r2(big.solve(10.0)) - acc.r2(acc.solve(10.0))) < 1e-4);
    }

    void badInput()
    {
        gpu::RidgeAccumulator acc(3, 2);
        const std::vector<float> x = {1, 2, 3}, y = {1, 2};
        acc.add(x.data(), y.data(), 1);
        QCOMPARE(test::expectError([&] { acc.solve(0.1); }).code(), core::ErrorCode::InvalidArgument);
        acc.add(x.data(), y.data(), 1); // two identical rows: singular without lambda
        QCOMPARE(test::expectError([&] { acc.solve(-1.0); }).code(), core::ErrorCode::InvalidArgument);
        const auto s = acc.solve(0.5); // regularised: fine
        QCOMPARE(s.weight.size(), size_t(6));
        QVERIFY_THROWS_EXCEPTION(core::Error, gpu::RidgeAccumulator(0, 2));
    }
};

QTEST_GUILESS_MAIN(TestRidge)
#include "tst_ridge.moc"
