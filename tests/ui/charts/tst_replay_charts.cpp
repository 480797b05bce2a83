// ReplayCharts: 50,000 rows fed in batches of 500 keep every series within the point budget, the
// lines end at the exact cumulative values, clear() resets; batch time is printed, not asserted.
#include "tests/support/screenshot.h"
#include "tests/support/synthetic_ledger.h"
#include "ui/charts/chart_style.h"
#include "ui/charts/replay_charts.h"

#include <QChart>
#include <QChartView>
#include <QElapsedTimer>
#include <QLineSeries>
#include <QValueAxis>
#include <QtTest>

#include <map>

using namespace kvwb;
using core::TierKind;

class TestReplayCharts : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void streamsDecimated()
    {
        constexpr int total = 50000, batch = 500;
        const std::vector<core::LedgerRow> rows = testing::realisticLedger(total);
        ui::ReplayCharts charts;
        charts.resize(1000, 700);
        charts.show();
        QVERIFY(QTest::qWaitForWindowExposed(&charts));
        QCOMPARE(charts.hitRateSeries(TierKind::Exact), nullptr); // tiers appear as they are seen

        int64_t hits = 0, responseHits = 0, falseHits = 0, reused = 0;
        std::map<TierKind, int64_t> tierHits;
        qint64 slowestNs = 0, totalNs = 0;
        for (int first = 0; first < total; first += batch) {
            const std::vector<core::LedgerRow> chunk(rows.begin() + first, rows.begin() + first + batch);
            QElapsedTimer timer;
            timer.start();
            charts.addRows(chunk);
            // Include the repaint the GUI would do after the batch.
            charts.repaint();
            const qint64 ns = timer.nsecsElapsed();
            slowestNs = std::max(slowestNs, ns);
            totalNs += ns;
            for (const auto &r : chunk) {
                hits += r.answeredBy != TierKind::None;
                tierHits[r.answeredBy] += 1;
                const bool response = r.answeredBy == TierKind::Exact || r.answeredBy == TierKind::Semantic;
                responseHits += response;
                falseHits += response && r.falseHit;
                reused += r.tokensReused;
            }
            const double n = first + batch;
            QCOMPARE(charts.hitRateSeries(TierKind::None)->points().back(), QPointF(n, 100.0 * hits / n));
        }
        qInfo("addRows + repaint per batch of %d rows: mean %.2f ms, slowest %.2f ms", batch,
              totalNs / 1e6 / (total / batch), slowestNs / 1e6);

        QCOMPARE(charts.requestCount(), int64_t(total));
        const auto series = charts.allSeries();
        QCOMPARE(series.size(), 10); // 4 tiers + all tiers, false hits, p50, p95, reused, computed
        for (QLineSeries *s : series) {
            QVERIFY2(s->count() <= 1100, qPrintable(s->name() + ": " + QString::number(s->count())));
            QVERIFY2(s->count() >= 400, qPrintable(s->name())); // decimated, not starved
            QCOMPARE(s->points().back().x(), double(total));
        }
        for (TierKind t : {TierKind::Exact, TierKind::Semantic, TierKind::Prefix, TierKind::Cross}) {
            QVERIFY(charts.hitRateSeries(t));
            QCOMPARE(charts.hitRateSeries(t)->points().back().y(), 100.0 * tierHits[t] / total);
        }
        QCOMPARE(charts.hitRateSeries(TierKind::None)->points().back().y(), 100.0 * hits / total);
        QCOMPARE(charts.falseHitRateSeries()->points().back().y(), 100.0 * falseHits / responseHits);
        QCOMPARE(charts.tokensReusedSeries()->points().back().y(), reused / 1000.0);
        // p95 of the last 500 TTFTs, exactly as core::percentile computes it.
        std::vector<double> window;
        for (int i = total - 500; i < total; ++i)
            window.push_back(rows[size_t(i)].ttftMs);
        QCOMPARE(charts.ttftSeries(95)->points().back().y(), core::percentile(window, 95));
        QCOMPARE(charts.ttftSeries(50)->points().back().y(), core::percentile(window, 50));
        // The points are evenly spaced and increasing in x (decimation kept the shape uniform).
        const auto pts = charts.hitRateSeries(TierKind::None)->points();
        for (qsizetype i = 1; i < pts.size(); ++i)
            QVERIFY(pts[i].x() > pts[i - 1].x());
        // Axes follow the data: x reaches the last request, y holds the highest hit rate.
        auto *x = qobject_cast<QValueAxis *>(
            charts.chartView(ui::ReplayCharts::Chart::HitRate)->chart()->axes(Qt::Horizontal)[0]);
        // ... and stops there (it ran past the data to the next round number)
        QVERIFY(x);
        QCOMPARE(x->max(), double(total));
        QCOMPARE(x->tickType(), QValueAxis::TicksDynamic);
        QCOMPARE(x->tickAnchor(), 0.0);
        QCOMPARE(x->tickInterval(), ui::roundStep(total));
        QCOMPARE(charts.chartView(ui::ReplayCharts::Chart::HitRate)->chart()->animationOptions(),
                 QChart::NoAnimation);

        // The legend lays itself out on a posted LayoutRequest, which grab() does not deliver.
        QCoreApplication::processEvents();
        KVWB_VERIFY_SCREENSHOT(&charts, "replay_charts");

        charts.clear();
        QCOMPARE(charts.requestCount(), int64_t(0));
        QCOMPARE(charts.hitRateSeries(TierKind::Exact), nullptr);
        for (QLineSeries *s : charts.allSeries())
            QCOMPARE(s->count(), 0);
        charts.addRows(testing::patternedLedger(10));
        QCOMPARE(charts.hitRateSeries(TierKind::None)->points().back(), QPointF(10, 80.0));
        QCOMPARE(charts.hitRateSeries(TierKind::Exact)->points().back(), QPointF(10, 30.0));
    }

    // A short early run, so that the first seconds of a replay also read well.
    void screenshotEarly()
    {
        ui::ReplayCharts charts;
        charts.resize(1000, 700);
        charts.addRows(testing::realisticLedger(3000));
        KVWB_VERIFY_SCREENSHOT(&charts, "replay_charts_early");
    }
};

QTEST_MAIN(TestReplayCharts)
#include "tst_replay_charts.moc"
