#include "ui/charts/threshold_curve_chart.h"

#include "ui/charts/chart_style.h"

#include <QChart>
#include <QLineSeries>
#include <QScatterSeries>
#include <QValueAxis>

#include <cmath>

namespace kvwb::ui {

ThresholdCurveChart::ThresholdCurveChart(QWidget *parent) : QChartView(parent)
{
    auto *chart = new QChart;
    applyChartStyle(chart);
    setChart(chart);
    setRenderHint(QPainter::Antialiasing);
    setMinimumHeight(220);
}

void ThresholdCurveChart::setPoints(const std::vector<core::SweepPoint> &points, std::optional<double> marked,
                                    const QString &xTitle, const QString &title)
{
    QChart *c = chart();
    c->removeAllSeries();
    for (auto *axis : c->axes())
        c->removeAxis(axis), delete axis;
    m_points = points;
    c->setTitle(title);
    const auto line = [&](const QString &name, QColor colour) {
        auto *s = new QLineSeries;
        s->setName(name);
        QPen pen(colour);
        pen.setWidthF(2);
        s->setPen(pen);
        c->addSeries(s);
        return s;
    };
    m_precision = line(tr("precision"), QColor(0x1f, 0x77, 0xb4));
    m_recall = line(tr("recall"), QColor(0x2c, 0xa0, 0x2c));
    m_falseHits = line(tr("false-hit rate"), QColor(0xd6, 0x27, 0x28));
    m_mark = new QScatterSeries;
    m_mark->setName(tr("chosen"));
    m_mark->setMarkerSize(10);
    m_mark->setColor(QColor(0x40, 0x40, 0x40));
    c->addSeries(m_mark);
    double lo = 1, hi = 0;
    for (const auto &p : points) {
        if (!std::isfinite(p.threshold))
            continue;
        // with no hit a precision is a convention (1), not a measurement: not drawn
        if (p.hits > 0) {
            m_precision->append(p.threshold, p.precision);
            m_falseHits->append(p.threshold, p.falseHitRate);
        }
        m_recall->append(p.threshold, p.recall);
        lo = std::min(lo, p.threshold);
        hi = std::max(hi, p.threshold);
    }
    auto *x = new QValueAxis;
    styleAxis(x, xTitle);
    // whole tenths at the ends, a label every tenth (every fifth of the range when it is wide)
    const double from = points.empty() ? 0 : std::floor(lo * 10 + 1e-9) / 10;
    const double to = std::max(from + 0.1, points.empty() ? 1 : std::ceil(hi * 10 - 1e-9) / 10);
    const int tenths = int(std::lround((to - from) * 10));
    x->setRange(from, to);
    x->setTickCount(tenths <= 10 ? tenths + 1 : tenths % 2 == 0 ? tenths / 2 + 1 : 6);
    x->setLabelFormat("%.1f");
    auto *y = new QValueAxis;
    styleAxis(y, tr("share"));
    y->setRange(0, 1);
    y->setTickCount(6);
    y->setLabelFormat("%.1f");
    c->addAxis(x, Qt::AlignBottom);
    c->addAxis(y, Qt::AlignLeft);
    for (auto *s : c->series()) {
        s->attachAxis(x);
        s->attachAxis(y);
    }
    mark(marked);
}

void ThresholdCurveChart::mark(std::optional<double> threshold)
{
    m_mark->clear();
    if (!threshold)
        return;
    for (const auto &p : m_points)
        if (std::abs(p.threshold - *threshold) < 1e-9) {
            m_mark->append(p.threshold, p.precision);
            m_mark->append(p.threshold, p.recall);
        }
}

} // namespace kvwb::ui
