#include "ui/charts/layer_metrics_chart.h"

#include "ui/charts/chart_style.h"

#include <QChart>
#include <QLineSeries>
#include <QValueAxis>

#include <algorithm>
#include <cmath>

namespace kvwb::ui {

namespace {
const char *const kMetrics[] = {"r2_k", "r2_v", "attn_cos"};
}

LayerMetricsChart::LayerMetricsChart(QWidget *parent) : QChartView(parent)
{
    auto *chart = new QChart;
    applyChartStyle(chart);
    chart->setTitle(tr("Converter quality per layer (held-out prompts)"));
    setChart(chart);
    setRenderHint(QPainter::Antialiasing);
    setTable({});
}

void LayerMetricsChart::setTitle(const QString &title)
{
    chart()->setTitle(title);
}

QList<QLineSeries *> LayerMetricsChart::series() const
{
    QList<QLineSeries *> out;
    for (auto *s : chart()->series())
        out << static_cast<QLineSeries *>(s);
    return out;
}

void LayerMetricsChart::setTable(const core::MetricTable &table)
{
    QChart *c = chart();
    c->removeAllSeries();
    for (auto *axis : c->axes())
        c->removeAxis(axis), delete axis;

    auto *x = new QValueAxis;
    styleAxis(x, tr("model B layer"));
    x->setLabelFormat("%d");
    auto *y = new QValueAxis;
    styleAxis(y, tr("R\u00b2 / cosine (1 = perfect)"));
    c->addAxis(x, Qt::AlignBottom);
    c->addAxis(y, Qt::AlignLeft);

    const int layerColumn = table.column("layer");
    double yMin = 0, yMax = 1, xMax = 1;
    for (const char *metric : kMetrics) {
        const int column = table.column(metric);
        if (column < 0)
            continue;
        auto *s = new QLineSeries;
        s->setName(metricLabel(metric));
        QPen pen(metricColor(metric));
        pen.setWidthF(2);
        s->setPen(pen);
        s->setPointsVisible(table.rows.size() <= 48); // markers help read a few layers, clutter many
        QList<QPointF> points;
        for (size_t r = 0; r < table.rows.size(); ++r) {
            const double layer = layerColumn >= 0 ? table.rows[r][size_t(layerColumn)] : double(r);
            const double v = table.rows[r][size_t(column)];
            if (!std::isfinite(v) || !std::isfinite(layer))
                continue;
            points << QPointF(layer, v);
            yMin = std::min(yMin, v);
            yMax = std::max(yMax, v);
            xMax = std::max(xMax, layer);
        }
        s->replace(points);
        c->addSeries(s);
        s->attachAxis(x);
        s->attachAxis(y);
    }
    setScoreRange(y, yMin, yMax);
    setCountAxis(x, xMax);
    c->legend()->setVisible(!c->series().isEmpty());
}

} // namespace kvwb::ui
