#include "ui/charts/chart_style.h"

#include <QAbstractAxis>
#include <QChart>
#include <QHash>
#include <QValueAxis>

#include <algorithm>
#include <array>
#include <cmath>

namespace kvwb::ui {

void applyChartStyle(QChart *chart)
{
    chart->setAnimationOptions(QChart::NoAnimation);
    QFont title = chart->titleFont();
    title.setPointSizeF(12);
    title.setBold(true);
    chart->setTitleFont(title);
    QFont legend = chart->legend()->font();
    legend.setPointSizeF(10);
    chart->legend()->setFont(legend);
    chart->legend()->setAlignment(Qt::AlignBottom);
    chart->setMargins(QMargins(6, 6, 6, 6));
}

void styleAxis(QAbstractAxis *axis, const QString &title)
{
    axis->setTitleText(title);
    QFont f = axis->titleFont();
    f.setPointSizeF(10);
    f.setBold(false);
    axis->setTitleFont(f);
    QFont labels = axis->labelsFont();
    labels.setPointSizeF(9);
    axis->setLabelsFont(labels);
    axis->setGridLineColor(QColor(0xe0, 0xe0, 0xe0));
}

void setScoreRange(QValueAxis *axis, double dataMin, double dataMax)
{
    const double lo = std::min(0.0, std::floor(dataMin / 0.2) * 0.2);
    const double hi = std::max(1.0, std::ceil(dataMax / 0.2) * 0.2);
    axis->setRange(lo, hi);
    axis->setTickCount(int(std::lround((hi - lo) / 0.2)) + 1);
    axis->setLabelFormat("%.1f");
}

double roundStep(double span, int labels)
{
    if (!(span > 0) || labels < 1)
        return 1;
    const double raw = span / labels;
    const double power = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * power >= raw)
            return std::max(1.0, m * power);
    return std::max(1.0, 10 * power);
}

void setCountAxis(QValueAxis *axis, double max, double minimum)
{
    const double top = std::isfinite(max) ? std::max(max, minimum) : minimum;
    axis->setRange(0, top);
    axis->setTickType(QValueAxis::TicksDynamic);
    axis->setTickAnchor(0);
    axis->setTickInterval(roundStep(top));
    axis->setLabelFormat("%.0f");
}

QColor tierColor(core::TierKind tier)
{
    switch (tier) {
    case core::TierKind::Exact:
        return QColor(0x1f, 0x77, 0xb4);
    case core::TierKind::Semantic:
        return QColor(0xff, 0x7f, 0x0e);
    case core::TierKind::Prefix:
        return QColor(0x2c, 0xa0, 0x2c);
    case core::TierKind::Cross:
        return QColor(0x94, 0x67, 0xbd);
    case core::TierKind::Knowledge:
        return QColor(0x8c, 0x56, 0x4b);
    case core::TierKind::None:
        break;
    }
    return QColor(0x40, 0x40, 0x40);
}

QColor reusedTokensColor()
{
    return QColor(0x2c, 0xa0, 0x2c);
}

QColor computedTokensColor()
{
    return QColor(0x7f, 0x7f, 0x7f);
}

QColor percentileColor(int percentile)
{
    if (percentile <= 50)
        return QColor(0x1f, 0x77, 0xb4);
    if (percentile <= 95)
        return QColor(0xd6, 0x27, 0x28);
    return QColor(0x94, 0x67, 0xbd);
}

QColor metricColor(const QString &metric, int fallbackIndex)
{
    if (metric == "r2_k")
        return QColor(0x1f, 0x77, 0xb4);
    if (metric == "r2_v")
        return QColor(0xff, 0x7f, 0x0e);
    if (metric == "attn_cos")
        return QColor(0x2c, 0xa0, 0x2c);
    static const std::array<QColor, 6> palette = {QColor(0x1f, 0x77, 0xb4), QColor(0xff, 0x7f, 0x0e),
                                                  QColor(0x2c, 0xa0, 0x2c), QColor(0xd6, 0x27, 0x28),
                                                  QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b)};
    return palette[size_t(fallbackIndex) % palette.size()];
}

QString metricLabel(const QString &metric)
{
    static const QHash<QString, QString> labels = {
        {"r2_k", QStringLiteral("R\u00b2 of keys")},
        {"r2_v", QStringLiteral("R\u00b2 of values")},
        {"attn_cos", QStringLiteral("attention-output cosine")},
    };
    return labels.value(metric, metric);
}

} // namespace kvwb::ui
