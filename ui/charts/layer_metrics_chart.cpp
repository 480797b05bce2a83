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

void LayerMetricsChart::setReference(const core::MetricTable &table, const QString &name)
{
    m_reference = table;
    m_referenceName = name;
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

    double yMin = 0, yMax = 1, xMax = 1;
    // The shown table's lines, then the reference's (dotted, paler) over the same axes.
    const auto draw = [&](const core::MetricTable &t, const QString &prefix, bool reference) {
        const int layerColumn = t.column("layer");
        for (const char *metric : kMetrics) {
            const int column = t.column(metric);
            if (column < 0)
                continue;
            auto *s = new QLineSeries;
            s->setName(prefix + metricLabel(metric));
            QColor colour = metricColor(metric);
            if (reference)
                colour.setAlpha(150);
            QPen pen(colour);
            pen.setWidthF(2);
            pen.setStyle(reference ? Qt::DotLine : Qt::SolidLine);
            s->setPen(pen);
            s->setPointsVisible(!reference && t.rows.size() <= 48); // markers help read a few layers
            QList<QPointF> points;
            for (size_t r = 0; r < t.rows.size(); ++r) {
                const double layer = layerColumn >= 0 ? t.rows[r][size_t(layerColumn)] : double(r);
                const double v = t.rows[r][size_t(column)];
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
    };
    draw(table, QString(), false);
    if (!m_reference.rows.empty())
        draw(m_reference, m_referenceName + QStringLiteral(": "), true);
    setScoreRange(y, yMin, yMax);
    setCountAxis(x, xMax);
    c->legend()->setVisible(!c->series().isEmpty());
}

} // namespace kvwb::ui
