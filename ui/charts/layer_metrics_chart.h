// Line chart of per-layer converter quality: R^2 of keys, R^2 of values and attention-output
// cosine (columns r2_k, r2_v, attn_cos of a ConverterRecord::layerMetrics table) against the
// model B layer index (column "layer", or the row index when absent). Missing metric columns are
// left out; NaN values break the line rather than draw it to zero.
//
// GUI-thread only (a QChartView). Owns its chart and series. No animations: the chart is redrawn
// whenever a fit finishes and must appear at once.
#pragma once

#include "core/metrics/metric_table.h"

#include <QChartView>

class QLineSeries;

namespace kvwb::ui {

class LayerMetricsChart : public QChartView
{
    Q_OBJECT

public:
    explicit LayerMetricsChart(QWidget *parent = nullptr);

    void setTable(const core::MetricTable &table);
    // A second converter's table drawn beside the shown one (dotted, paler, "<name>: R² of keys"),
    // on the next setTable; an empty table removes it.
    void setReference(const core::MetricTable &table, const QString &name);
    void setTitle(const QString &title);

    // The series shown, in the order r2_k, r2_v, attn_cos (only those present in the table).
    QList<QLineSeries *> series() const;

    QSize sizeHint() const override { return {800, 500}; }

private:
    core::MetricTable m_reference;
    QString m_referenceName;
};

} // namespace kvwb::ui
