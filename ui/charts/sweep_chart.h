// Sweep curves from a sweep MetricTable (columns k, lambda, train_tokens and metrics such as r2_k,
// r2_v, attn_cos; one row per fitted configuration): a metric against k (source layers per
// converter) with one line per lambda, or against calibration tokens on a log axis with one line
// per value of whatever else varies (lambda, k). Answers "how many layers / tokens are enough".
//
// GUI-thread only (a QChartView). Owns its chart and series. No animations.
#pragma once

#include "core/metrics/metric_table.h"

#include <QChartView>

class QLineSeries;

namespace kvwb::ui {

class SweepChart : public QChartView
{
    Q_OBJECT

public:
    enum class XAxis
    {
        K,          // column "k", linear
        TrainTokens // column "train_tokens", log10
    };

    explicit SweepChart(QWidget *parent = nullptr);

    // metric: a column of table (e.g. "r2_k"). Rows whose x or metric is not finite are skipped
    // (and x <= 0 on the log axis). A missing column leaves the chart empty with a title saying so.
    void setTable(const core::MetricTable &table, const QString &metric, XAxis x);

    // One series per group, ordered by the grouping value(s), points sorted by x.
    QList<QLineSeries *> series() const;

    QSize sizeHint() const override { return {800, 500}; }
};

} // namespace kvwb::ui
