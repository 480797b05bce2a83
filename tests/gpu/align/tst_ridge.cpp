// Ridge regression from sufficient statistics: recovers a known affine map, is independent of
// chunking and merging, shrinks with lambda, and its in-sample R^2 from the sums equals R^2
// computed from the rows.
#include "core/util/error.h"
#include "gpu/align/ridge.h"
#include "tests/support/expect_error.h"

#include <QtTest>

#include <cmath>
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

    // Ridge under an output metric (the attention-aligned family): the identity metric is plain ridge;
    // without shrinkage any metric recovers the planted map; under strong shrinkage a metric that weighs
    // one output direction (B's queries use it, the others barely) keeps that direction close to the
    // planted map where plain ridge shrinks every direction alike - a far smaller error in the
    // metric at a worse plain R^2.
    void weightedRidgeFollowsTheMetric()
    {
        const int dx = 8, dy = 4;
        const auto d = makeData(400, dx, dy, 0.0, 9);
        gpu::RidgeAccumulator acc(dx, dy);
        acc.add(d.x.data(), d.y.data(), 400);
        std::vector<double> eye(size_t(dy * dy), 0.0);
        for (int i = 0; i < dy; ++i)
            eye[size_t(i * dy + i)] = 2.5; // any scale: the metric is normalised
        for (double lambda : {0.0, 0.3}) {
            const auto plain = acc.solve(lambda), weighted = acc.solveWeighted(lambda, eye);
            for (size_t i = 0; i < plain.weight.size(); ++i)
                QVERIFY2(std::abs(plain.weight[i] - weighted.weight[i]) < 1e-4,
                         qPrintable(QString::number(plain.weight[i] - weighted.weight[i])));
            for (size_t j = 0; j < plain.bias.size(); ++j)
                QVERIFY(std::abs(plain.bias[j] - weighted.bias[j]) < 1e-3);
        }
        // a rotated metric weighing one direction u: M = 100 u u^T + 0.01 (I - u u^T)
        const double u[dy] = {0.5, -0.5, 0.5, 0.5};
        std::vector<double> metric(size_t(dy * dy));
        for (int i = 0; i < dy; ++i)
            for (int j = 0; j < dy; ++j)
                metric[size_t(i * dy + j)] = 99.99 * u[i] * u[j] + (i == j ? 0.01 : 0.0);
        const auto exact = acc.solveWeighted(0.0, metric);
        for (size_t i = 0; i < d.w.size(); ++i)
            QVERIFY2(std::abs(exact.weight[i] - d.w[i]) < 1e-3,
                     qPrintable(QString::number(exact.weight[i] - d.w[i])));
        // error of a map in the metric, over the rows: sum (xW + b - y) M (xW + b - y)^T
        const auto metricError = [&](const core::KvMap &m) {
            const auto pred = gpu::applyKvMap(m, d.x.data(), 400);
            double e = 0;
            for (int r = 0; r < 400; ++r)
                for (int i = 0; i < dy; ++i)
                    for (int j = 0; j < dy; ++j)
                        e += (pred[size_t(r * dy + i)] - d.y[size_t(r * dy + i)]) *
                             metric[size_t(i * dy + j)] *
                             (pred[size_t(r * dy + j)] - d.y[size_t(r * dy + j)]);
            return e;
        };
        const auto plain = acc.solve(1.0), weighted = acc.solveWeighted(1.0, metric);
        qInfo("lambda 1: metric error ridge %.3f, weighted %.3f; R^2 ridge %.4f, weighted %.4f",
              metricError(plain), metricError(weighted), acc.r2(plain), acc.r2(weighted));
        QVERIFY(metricError(weighted) < 0.4 * metricError(plain));
        QVERIFY(acc.r2(weighted) < acc.r2(plain));
        // bad metrics are refused, naming what is wrong
        auto asymmetric = metric;
        asymmetric[1] += 1;
        auto nan = metric;
        nan[5] = std::nan("");
        for (const auto &bad :
             {std::vector<double>(3, 1.0), asymmetric, nan, std::vector<double>(size_t(dy * dy), 0.0)})
            QCOMPARE(test::expectError([&] { acc.solveWeighted(0.1, bad); }).code(),
                     core::ErrorCode::InvalidArgument);
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

    // applyKvMap against each family's formula written out with loops (gelu in its erf form): the
    // one evaluation scoring and transfer share.
    void everyFamilyEvaluatesItsFormula()
    {
        std::mt19937_64 rng(3);
        std::normal_distribution<float> N(0.0f, 1.0f);
        const int in = 7, out = 5, rank = 3, hidden = 6, rows = 4;
        auto fill = [&](std::vector<float> &v, size_t n) {
            v.resize(n);
            for (float &x : v)
                x = N(rng);
        };
        std::vector<float> x;
        fill(x, size_t(rows * in));
        for (auto family :
             {core::ConverterFamily::Ridge, core::ConverterFamily::LowRank, core::ConverterFamily::Mlp}) {
            core::KvMap m;
            m.inputDim = in;
            m.outputDim = out;
            fill(m.bias, out);
            if (family == core::ConverterFamily::LowRank) {
                m.rank = rank;
                fill(m.down, size_t(in * rank));
                fill(m.up, size_t(rank * out));
            } else {
                fill(m.weight, size_t(in * out));
            }
            if (family == core::ConverterFamily::Mlp) {
                m.hidden = hidden;
                fill(m.hiddenWeight, size_t(in * hidden));
                fill(m.hiddenBias, size_t(hidden));
                fill(m.outWeight, size_t(hidden * out));
            }
            QCOMPARE(m.family(), family);
            const auto got = gpu::applyKvMap(m, x.data(), rows);
            QCOMPARE(got.size(), size_t(rows * out));
            for (int r = 0; r < rows; ++r) {
                const float *xr = x.data() + r * in;
                for (int j = 0; j < out; ++j) {
                    double y = m.bias[size_t(j)];
                    for (int i = 0; i < in; ++i) {
                        double w = 0;
                        if (m.rank > 0)
                            for (int k = 0; k < rank; ++k)
                                w += double(m.down[size_t(i * rank + k)]) * m.up[size_t(k * out + j)];
                        else
                            w = m.weight[size_t(i * out + j)];
                        y += xr[i] * w;
                    }
                    for (int h = 0; h < m.hidden; ++h) {
                        double a = m.hiddenBias[size_t(h)];
                        for (int i = 0; i < in; ++i)
                            a += double(xr[i]) * m.hiddenWeight[size_t(i * hidden + h)];
                        y += 0.5 * a * (1 + std::erf(a / std::sqrt(2.0))) * m.outWeight[size_t(h * out + j)];
                    }
                    QVERIFY2(std::abs(got[size_t(r * out + j)] - y) < 1e-4 * (1 + std::abs(y)),
                             qPrintable(QString("%1 row %2 output %3: %4 vs %5")
                                            .arg(core::converterFamilyName(family))
                                            .arg(r)
                                            .arg(j)
                                            .arg(got[size_t(r * out + j)])
                                            .arg(y)));
                }
            }
        }
        // a map whose parts do not match its dimensions is refused naming the part
        core::KvMap bad;
        bad.inputDim = in;
        bad.outputDim = out;
        bad.rank = 2;
        fill(bad.down, size_t(in * 2));
        fill(bad.up, size_t(2 * out - 1));
        fill(bad.bias, out);
        const auto e = test::expectError([&] { gpu::applyKvMap(bad, x.data(), rows); });
        QCOMPARE(e.code(), core::ErrorCode::Shape);
        QVERIFY2(QString(e.what()).contains("down or up"), e.what());
    }
};

QTEST_GUILESS_MAIN(TestRidge)
#include "tst_ridge.moc"
