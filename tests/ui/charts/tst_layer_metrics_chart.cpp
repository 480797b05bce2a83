// LayerMetricsChart and SweepChart: series built from metric tables (points, names, axes, log axis
// for tokens), NaN skipped, and screenshots for a person to look at.
#include "tests/support/screenshot.h"
#include "tests/support/synthetic_ledger.h"
#include "ui/charts/chart_style.h"
#include "ui/charts/layer_metrics_chart.h"
#include "ui/charts/sweep_chart.h"

#include <QChart>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QValueAxis>
#include <QtTest>

#include <cmath>
#include <limits>

using namespace kvwb;

namespace {

core::MetricTable layerMetrics(int layers)
{
    core::MetricTable t;
    t.columns = {"layer", "r2_k", "r2_v", "attn_cos", "mse_k"};
    for (int l = 0; l < layers; ++l)
        t.rows.push_back(
            {double(l), 0.97 - 0.035 * l, 0.9 - 0.05 * l + 0.02 * std::sin(l), 0.995 - 0.01 * l, 0.1 * l});
    return t;
}

// k in 1..4, lambda in {1e-3, 1e-1, 10}, tokens in {1k, 4k, 16k, 64k}.
core::MetricTable sweep()
{
    core::MetricTable t;
    t.columns = {"k", "lambda", "train_tokens", "r2_k", "r2_v", "attn_cos"};
    for (double lambda : {1e-3, 1e-1, 10.0})
        for (int k = 1; k <= 4; ++k)
            for (double tokens : {1024.0, 4096.0, 16384.0, 65536.0}) {
                const double fit =
                    1 - 0.5 / (k * std::sqrt(tokens / 1024.0)) - 0.02 * std::log10(lambda * 1000);
                t.rows.push_back({double(k), lambda, tokens, fit, fit - 0.05, 0.5 + fit / 2});
            }
    return t;
}

} // namespace

class TestLayerMetricsChart : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void roundSteps()
    {
        QCOMPARE(ui::roundStep(60), 20.0);
        QCOMPARE(ui::roundStep(5), 1.0);
        QCOMPARE(ui::roundStep(29), 10.0);
        QCOMPARE(ui::roundStep(1000), 200.0);
        QCOMPARE(ui::roundStep(2), 1.0); // never below one request or layer
        QCOMPARE(ui::roundStep(0), 1.0);
    }

    void layerSeries()
    {
        ui::LayerMetricsChart chart;
        QVERIFY(chart.series().isEmpty());
        core::MetricTable t = layerMetrics(6);
        t.rows[2][2] = std::numeric_limits<double>::quiet_NaN();
        chart.setTable(t);
        const auto series = chart.series();
        QCOMPARE(series.size(), 3);
        QCOMPARE(series[0]->name(), QString("R\u00b2 of keys"));
        QCOMPARE(series[1]->name(), QString("R\u00b2 of values"));
        QCOMPARE(series[2]->name(), QString("attention-output cosine"));
        QCOMPARE(series[0]->count(), 6);
        QCOMPARE(series[1]->count(), 5); // the NaN is left out
        QCOMPARE(series[0]->at(3), QPointF(3, 0.97 - 0.035 * 3));
        QCOMPARE(chart.chart()->animationOptions(), QChart::NoAnimation);
        const auto axes = chart.chart()->axes(Qt::Horizontal);
        QCOMPARE(axes.size(), 1);
        QCOMPARE(axes[0]->titleText(), QString("model B layer"));
        QCOMPARE(qobject_cast<QValueAxis *>(axes[0])->max(),
                 5.0); // the last layer, not a round number past it
        QVERIFY(!chart.chart()->axes(Qt::Vertical)[0]->titleText().isEmpty());

        // Without a layer column the row index is the layer; a table without metrics shows nothing.
        core::MetricTable noLayer;
        noLayer.columns = {"r2_v"};
        noLayer.rows = {{0.5}, {0.25}};
        chart.setTable(noLayer);
        QCOMPARE(chart.series().size(), 1);
        QCOMPARE(chart.series()[0]->at(1), QPointF(1, 0.25));
        chart.setTable({});
        QVERIFY(chart.series().isEmpty());
    }

    void sweepVersusK()
    {
        ui::SweepChart chart;
        core::MetricTable t = sweep();
        // Fix tokens to 16k so only lambda varies besides k.
        std::erase_if(t.rows, [](const auto &row) { return row[2] != 16384.0; });
        chart.setTable(t, "r2_k", ui::SweepChart::XAxis::K);
        const auto series = chart.series();
        QCOMPARE(series.size(), 3);
        QCOMPARE(series[0]->name(), QString("\u03bb = 0.001"));
        QCOMPARE(series[2]->name(), QString("\u03bb = 10"));
        QCOMPARE(series[0]->count(), 4);
        QCOMPARE(series[0]->at(0).x(), 1.0);
        QCOMPARE(series[0]->at(3).x(), 4.0);
        QVERIFY(chart.chart()->axes(Qt::Horizontal)[0]->titleText().startsWith("k"));
        QCOMPARE(chart.chart()->animationOptions(), QChart::NoAnimation);
    }

    void sweepVersusTokens()
    {
        ui::SweepChart chart;
        chart.setTable(sweep(), "attn_cos", ui::SweepChart::XAxis::TrainTokens);
        // lambda and k both vary: a line per pair.
        QCOMPARE(chart.series().size(), 12);
        QCOMPARE(chart.series()[0]->name(), QString("\u03bb = 0.001, k = 1"));
        QCOMPARE(chart.series()[0]->count(), 4);
        auto *log = qobject_cast<QLogValueAxis *>(chart.chart()->axes(Qt::Horizontal)[0]);
        QVERIFY(log);
        QCOMPARE(log->min(), 1000.0);
        QCOMPARE(log->max(), 100000.0);
        chart.setTable(sweep(), "no_such_metric", ui::SweepChart::XAxis::K);
        QVERIFY(chart.series().isEmpty());
        QVERIFY(chart.chart()->title().contains("no_such_metric"));
    }

    void screenshots()
    {
        ui::LayerMetricsChart layers;
        layers.setTable(layerMetrics(16));
        layers.resize(800, 500);
        KVWB_VERIFY_SCREENSHOT(&layers, "layer_metrics_chart");

        core::MetricTable t = sweep();
        std::erase_if(t.rows, [](const auto &row) { return row[2] != 16384.0; });
        ui::SweepChart byK;
        byK.setTable(t, "r2_k", ui::SweepChart::XAxis::K);
        byK.resize(800, 500);
        KVWB_VERIFY_SCREENSHOT(&byK, "sweep_chart_k");

        core::MetricTable tokens = sweep();
        std::erase_if(tokens.rows, [](const auto &row) { return row[0] != 2.0; });
        ui::SweepChart byTokens;
        byTokens.setTable(tokens, "r2_v", ui::SweepChart::XAxis::TrainTokens);
        byTokens.resize(800, 500);
        KVWB_VERIFY_SCREENSHOT(&byTokens, "sweep_chart_tokens");
    }
};

QTEST_MAIN(TestLayerMetricsChart)
#include "tst_layer_metrics_chart.moc"
