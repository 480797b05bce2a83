#include "ui/charts/sweep_chart.h"

#include "ui/charts/chart_style.h"

#include <QChart>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QValueAxis>

#include <algorithm>
#include <cmath>
#include <map>

namespace kvwb::ui {

SweepChart::SweepChart(QWidget *parent) : QChartView(parent)
{
    auto *chart = new QChart;
    applyChartStyle(chart);
    setChart(chart);
    setRenderHint(QPainter::Antialiasing);
}

QList<QLineSeries *> SweepChart::series() const
{
    QList<QLineSeries *> out;
    for (auto *s : chart()->series())
        out << static_cast<QLineSeries *>(s);
    return out;
}

void SweepChart::setTable(const core::MetricTable &table, const QString &metric, XAxis xKind)
{
    QChart *c = chart();
    c->removeAllSeries();
    for (auto *axis : c->axes())
        c->removeAxis(axis), delete axis;

    const std::string xName = xKind == XAxis::K ? "k" : "train_tokens";
    const int xColumn = table.column(xName);
    const int yColumn = table.column(metric.toStdString());
    const QString xTitle =
        xKind == XAxis::K ? tr("k: source (A) layers per converter") : tr("calibration tokens (log scale)");
    c->setTitle(tr("%1 vs %2")
                    .arg(metricLabel(metric),
                         xKind == XAxis::K ? tr("source layers per converter") : tr("calibration tokens")));
    if (table.columns.empty() || table.rows.empty()) {
        c->setTitle(tr("No sweep yet: Run sweep (above) fits converters over k, lambda and calibration "
                       "tokens and draws them here"));
        return;
    }
    if (xColumn < 0 || yColumn < 0) {
        c->setTitle(
            tr("This sweep has no column \"%1\"").arg(xColumn < 0 ? QString::fromStdString(xName) : metric));
        return;
    }

    // Group by the other swept variables that actually vary: a line per lambda (and per k when
    // plotting against tokens), so a fixed variable does not clutter the legend.
    struct GroupColumn
    {
        int index;
        QString label;
    };
    std::vector<GroupColumn> groups;
    QStringList fixed; // swept variables that hold one value here, named in the title
    for (const auto &[name, label] :
         {std::pair("lambda", QStringLiteral("\u03bb")), std::pair("k", QStringLiteral("k")),
          std::pair("train_tokens", QStringLiteral("tokens"))}) {
        const int col = table.column(name);
        if (col < 0 || col == xColumn)
            continue;
        bool varies = false;
        for (const auto &row : table.rows)
            varies = varies || row[size_t(col)] != table.rows.front()[size_t(col)];
        if (varies)
            groups.push_back({col, label});
        else if (!table.rows.empty())
            fixed << QStringLiteral("%1 = %2").arg(label).arg(table.rows.front()[size_t(col)], 0, 'g', 6);
    }
    if (!fixed.isEmpty())
        c->setTitle(c->title() + QStringLiteral(" (") + fixed.join(", ") + QStringLiteral(")"));

    std::map<std::vector<double>, QList<QPointF>> lines;
    double yMin = 0, yMax = 1, xMin = 0, xMax = 0;
    bool any = false;
    for (const auto &row : table.rows) {
        const double x = row[size_t(xColumn)], y = row[size_t(yColumn)];
        if (!std::isfinite(x) || !std::isfinite(y) || (xKind == XAxis::TrainTokens && x <= 0))
            continue;
        std::vector<double> key;
        for (const auto &g : groups)
            key.push_back(row[size_t(g.index)]);
        lines[key] << QPointF(x, y);
        yMin = std::min(yMin, y);
        yMax = std::max(yMax, y);
        xMin = any ? std::min(xMin, x) : x;
        xMax = any ? std::max(xMax, x) : x;
        any = true;
    }

    QAbstractAxis *xAxis = nullptr;
    if (xKind == XAxis::TrainTokens) {
        auto *log = new QLogValueAxis;
        log->setBase(10);
        log->setLabelFormat("%g");
        log->setMinorTickCount(-1); // 2..9 between decades: shows it is a log scale
        if (any)
            log->setRange(std::pow(10, std::floor(std::log10(xMin))),
                          std::pow(10, std::ceil(std::log10(xMax))));
        xAxis = log;
    } else {
        auto *lin = new QValueAxis;
        lin->setLabelFormat("%d");
        if (any) {
            lin->setRange(std::floor(xMin), std::ceil(xMax));
            lin->setTickCount(std::clamp(int(std::ceil(xMax) - std::floor(xMin)) + 1, 2, 17));
        }
        xAxis = lin;
    }
    styleAxis(xAxis, xTitle);
    auto *yAxis = new QValueAxis;
    styleAxis(yAxis, metricLabel(metric) + tr(" (held-out; 1 = perfect)"));
    setScoreRange(yAxis, yMin, yMax);
    c->addAxis(xAxis, Qt::AlignBottom);
    c->addAxis(yAxis, Qt::AlignLeft);

    int index = 0;
    for (auto &[key, points] : lines) {
        std::sort(points.begin(), points.end(),
                  [](const QPointF &a, const QPointF &b) { return a.x() < b.x(); });
        auto *s = new QLineSeries;
        QStringList name;
        for (size_t g = 0; g < groups.size(); ++g)
            name << QStringLiteral("%1 = %2").arg(groups[g].label).arg(key[g], 0, 'g', 4);
        s->setName(name.isEmpty() ? metricLabel(metric) : name.join(", "));
        QPen pen(metricColor(QString(), index++));
        pen.setWidthF(2);
        s->setPen(pen);
        s->setPointsVisible(points.size() <= 48);
        s->replace(points);
        c->addSeries(s);
        s->attachAxis(xAxis);
        s->attachAxis(yAxis);
    }
    c->legend()->setVisible(!lines.empty());
}

} // namespace kvwb::ui
