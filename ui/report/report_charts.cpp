#include "ui/report/report_charts.h"

#include "ui/charts/chart_style.h"
#include "ui/charts/color_map.h"
#include "ui/report/report_text.h"

#include <QApplication>
#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QBuffer>
#include <QChart>
#include <QChartView>
#include <QFont>
#include <QFontMetrics>
#include <QLegend>
#include <QLineSeries>
#include <QPainter>
#include <QPen>
#include <QStackedBarSeries>
#include <QValueAxis>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <tuple>

namespace kvwb::ui {

namespace {

using report::kChartHeight;
using report::kChartWidth;
using report::percent;
using report::safeName;
using report::shown;
using report::tierLabel;

QImage grabChart(QChart *chart)
{
    chart->setAnimationOptions(QChart::NoAnimation);
    chart->setBackgroundRoundness(0);
    QFont titleFont = chart->titleFont();
    titleFont.setPointSize(13);
    titleFont.setBold(true);
    chart->setTitleFont(titleFont);
    // below the plot, unless a chart with many series asked for a column beside it
    if (chart->series().size() <= 4)
        chart->legend()->setAlignment(Qt::AlignBottom);
    QChartView view(chart); // owns the chart
    view.setRenderHint(QPainter::Antialiasing);
    view.resize(kChartWidth, kChartHeight);
    return view.grab().toImage().convertToFormat(QImage::Format_RGB32);
}

QValueAxis *valueAxis(const QString &title, double lo, double hi, const char *format = "%.2f")
{
    auto *axis = new QValueAxis;
    axis->setTitleText(title);
    axis->setRange(lo, hi);
    axis->setLabelFormat(format);
    return axis;
}

// Range covering values, always including [0, 1] for scores in that range (R^2 can go negative).
std::pair<double, double> scoreRange(const std::vector<double> &values)
{
    double lo = 0, hi = 1;
    for (double v : values)
        if (std::isfinite(v)) {
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
    return {std::floor(lo * 10) / 10, std::ceil(hi * 10) / 10};
}

// rows x cols cells, row 0 at the top; values scaled to [lo, hi] for the colour. The title's second
// line (after '\n') is drawn smaller, as a subtitle.
QImage drawHeatmap(const QString &title, const QString &rowLabel, const QString &colLabel,
                   const QString &scaleLabel, int rows, int cols, const std::vector<double> &data, double lo,
                   double hi)
{
    const int cell = std::clamp(640 / std::max(1, std::max(rows, cols)), 14, 56);
    const int top = 70, bottom = 64, right = 120;
    QFont titleFont("DejaVu Sans");
    titleFont.setPointSize(13);
    titleFont.setBold(true);
    QFont subFont("DejaVu Sans");
    subFont.setPointSize(10);
    const QStringList lines = title.split('\n');
    int textWidth = QFontMetrics(titleFont).horizontalAdvance(lines.first());
    if (lines.size() > 1)
        textWidth = std::max(textWidth, QFontMetrics(subFont).horizontalAdvance(lines[1]));
    textWidth = std::max(textWidth, QFontMetrics(subFont).horizontalAdvance(colLabel));
    const int gridWidth = 80 + cols * cell + right;
    const int w = std::max({gridWidth, textWidth + 40, 420});
    const int left = 80 + (w - gridWidth) / 2; // the grid centred under the title
    const int h = top + rows * cell + bottom;
    QImage image(w, h, QImage::Format_RGB32);
    image.fill(Qt::white);
    QPainter p(&image);
    p.setRenderHint(QPainter::Antialiasing);
    p.setPen(Qt::black);
    p.setFont(titleFont);
    p.drawText(QRect(0, 6, w, 26), Qt::AlignCenter, lines.first());
    if (lines.size() > 1) {
        p.setFont(subFont);
        p.drawText(QRect(0, 32, w, 22), Qt::AlignCenter, lines[1]);
    }
    QFont font("DejaVu Sans");
    font.setPointSize(cell >= 40 ? 9 : 7);
    p.setFont(font);
    const int labelEvery = cell >= 20 ? 1 : (cell >= 14 ? 2 : 4);
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
            const double v = data[size_t(r) * size_t(cols) + size_t(c)];
            const double t = hi > lo ? (v - lo) / (hi - lo) : 0.5;
            const QColor color = viridisColor(t);
            const QRect cellRect(left + c * cell, top + r * cell, cell, cell);
            p.fillRect(cellRect, color);
            if (cell >= 30) {
                const double luma = 0.299 * color.red() + 0.587 * color.green() + 0.114 * color.blue();
                p.setPen(luma > 140 ? Qt::black : Qt::white);
                p.drawText(cellRect, Qt::AlignCenter, QString::fromStdString(shown(v)).left(5));
            }
        }
    }
    p.setPen(Qt::black);
    font.setPointSize(8);
    p.setFont(font);
    for (int r = 0; r < rows; r += labelEvery)
        p.drawText(QRect(left - 40, top + r * cell, 34, cell), Qt::AlignRight | Qt::AlignVCenter,
                   QString::number(r));
    for (int c = 0; c < cols; c += labelEvery)
        p.drawText(QRect(left + c * cell, top + rows * cell + 2, cell, 16), Qt::AlignCenter,
                   QString::number(c));
    p.setFont(subFont);
    const int gridCentre = left + cols * cell / 2;
    p.drawText(QRect(gridCentre - w / 2, top + rows * cell + 22, w, 20), Qt::AlignCenter, colLabel);
    p.save();
    p.translate(left - 58, top + rows * cell / 2);
    p.rotate(-90);
    p.drawText(QRect(-rows * cell / 2 - 60, -10, rows * cell + 120, 20), Qt::AlignCenter, rowLabel);
    p.restore();
    // colour bar
    const int barX = left + cols * cell + 24, barH = std::max(rows * cell, 120);
    for (int y = 0; y < barH; ++y)
        p.fillRect(QRect(barX, top + y, 16, 1), viridisColor(1.0 - double(y) / (barH - 1)));
    p.drawRect(QRect(barX, top, 16, barH));
    font.setPointSize(8);
    p.setFont(font);
    p.drawText(QRect(barX + 20, top - 6, 80, 14), Qt::AlignLeft, QString::fromStdString(shown(hi)));
    p.drawText(QRect(barX + 20, top + barH - 8, 80, 14), Qt::AlignLeft, QString::fromStdString(shown(lo)));
    p.save();
    p.translate(barX + 70, top + barH / 2);
    p.rotate(90);
    p.drawText(QRect(-barH / 2 - 40, -10, barH + 80, 20), Qt::AlignCenter, scaleLabel);
    p.restore();
    return image;
}

// The window's colour for each metric (ui/charts/chart_style.h), so R^2 of keys looks the same in
// the window and in the report.
QColor metricColor(const std::string &column)
{
    return ui::metricColor(QString::fromStdString(column));
}

QLineSeries *lineSeries(const QString &name, const std::vector<std::pair<double, double>> &points)
{
    auto *s = new QLineSeries;
    s->setName(name);
    s->setPointsVisible(true);
    for (const auto &[x, y] : points)
        if (std::isfinite(y))
            s->append(x, y);
    return s;
}

void attach(QChart *chart, QAbstractSeries *series, QAbstractAxis *x, QAbstractAxis *y)
{
    chart->addSeries(series);
    series->attachAxis(x);
    series->attachAxis(y);
}

ReportChart converterLayersChart(const core::ConverterRecord &r)
{
    const auto &t = r.layerMetrics;
    auto *chart = new QChart;
    chart->setTitle(QString("Converter %1: fit quality per layer of model B (held-out prompts)")
                        .arg(QString::fromStdString(r.name)));
    std::vector<double> all;
    const int layerCol = t.column("layer");
    double maxLayer = 0;
    auto *x = new QValueAxis;
    auto *y = new QValueAxis;
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(y, Qt::AlignLeft);
    const std::pair<const char *, const char *> metrics[] = {
        {"r2_k", "R\u00b2 of keys"}, {"r2_v", "R\u00b2 of values"}, {"attn_cos", "attention-output cosine"}};
    for (const auto &[col, label] : metrics) {
        const int c = t.column(col);
        if (c < 0)
            continue;
        std::vector<std::pair<double, double>> pts;
        for (size_t i = 0; i < t.rows.size(); ++i) {
            const double layer = layerCol >= 0 ? t.rows[i][size_t(layerCol)] : double(i);
            pts.emplace_back(layer, t.rows[i][size_t(c)]);
            all.push_back(t.rows[i][size_t(c)]);
            maxLayer = std::max(maxLayer, layer);
        }
        auto *series = lineSeries(label, pts);
        series->setPen(QPen(metricColor(col), 2));
        series->setColor(metricColor(col));
        attach(chart, series, x, y);
    }
    x->setTitleText("model B layer");
    x->setRange(0, std::max(1.0, maxLayer));
    x->setLabelFormat("%d");
    x->setTickCount(int(std::min(maxLayer, 22.0)) + 1);
    const auto [lo, hi] = scoreRange(all);
    y->setTitleText("score (1 = perfect)");
    y->setRange(lo, hi);
    y->setLabelFormat("%.2f");
    return {"converter_" + safeName(r.name) + "_layers", chart->title().toStdString(),
            "Higher is better: R\u00b2 compares converted K/V with B's own; attention-output cosine "
            "compares what B's attention reads with its own queries.",
            grabChart(chart)};
}

ReportChart ckaChart(const core::ConverterRecord &r, const core::Matrix &m, const char *kind)
{
    const QString title = QString("Converter %1: linear CKA of %2\nrows: model B layers, columns: model A "
                                  "layers (1 = same information)")
                              .arg(QString::fromStdString(r.name), kind);
    return {
        "converter_" + safeName(r.name) + "_cka_" + kind, title.toStdString(),
        "Linear CKA near 1 means the two layers carry similar information (it needs no fitted map).",
        drawHeatmap(title, "model B layer", "model A layer", "linear CKA", m.rows, m.cols, m.data, 0.0, 1.0)};
}

std::optional<ReportChart> headChart(const core::ConverterRecord &r, const char *col, const char *label)
{
    const auto &t = r.headMetrics;
    const int lc = t.column("layer"), hc = t.column("head"), vc = t.column(col);
    if (lc < 0 || hc < 0 || vc < 0 || t.rows.empty())
        return std::nullopt;
    int layers = 0, heads = 0;
    for (const auto &row : t.rows) {
        layers = std::max(layers, int(row[size_t(lc)]) + 1);
        heads = std::max(heads, int(row[size_t(hc)]) + 1);
    }
    std::vector<double> data(size_t(layers) * size_t(heads), std::nan(""));
    for (const auto &row : t.rows)
        data[size_t(row[size_t(lc)]) * size_t(heads) + size_t(row[size_t(hc)])] = row[size_t(vc)];
    const auto [lo, hi] = scoreRange(data);
    const QString title = QString("Converter %1: %2\nper model B layer (rows) and kv head (columns)")
                              .arg(QString::fromStdString(r.name), label);
    return ReportChart{
        "converter_" + safeName(r.name) + "_heads_" + col, title.toStdString(),
        "Each cell is one kv head of one B layer; grey cells have no value.",
        drawHeatmap(title, "model B layer", "model B kv head", label, layers, heads, data, lo, hi)};
}

// Sweep: scores against one swept variable, one series per value of another, at fixed third.
std::vector<ReportChart> sweepCharts(const ReportSweep &s)
{
    std::vector<ReportChart> out;
    const auto &t = s.table;
    const int kc = t.column("k"), lc = t.column("lambda"), tc = t.column("train_tokens");
    if (kc < 0 || lc < 0 || tc < 0 || t.rows.empty())
        return out;
    std::set<double> ks, lambdas, tokens;
    for (const auto &row : t.rows) {
        ks.insert(row[size_t(kc)]);
        lambdas.insert(row[size_t(lc)]);
        tokens.insert(row[size_t(tc)]);
    }
    const std::pair<const char *, const char *> metrics[] = {
        {"r2_k", "R\u00b2 K"}, {"r2_v", "R\u00b2 V"}, {"attn_cos", "attn cos"}};
    // (x column, x values, x title, series column, fixed column, fixed value)
    struct Plan
    {
        int xCol;
        const char *xTitle;
        int seriesCol;
        const char *seriesName;
        int fixedCol;
        double fixed;
        const char *suffix;
        QString title;
    };
    std::vector<Plan> plans;
    if (ks.size() > 1)
        plans.push_back({kc, "k (source layers per B layer)", lc, "\u03bb", tc, *tokens.rbegin(), "vs_k",
                         QString("Sweep %1: scores vs k, one line per \u03bb (at %2 calibration tokens)")
                             .arg(QString::fromStdString(s.name))
                             .arg(*tokens.rbegin())});
    if (tokens.size() > 1)
        plans.push_back({tc, "calibration tokens", kc, "k", lc, *lambdas.begin(), "vs_tokens",
                         QString("Sweep %1: scores vs calibration tokens, one line per k (\u03bb = %2)")
                             .arg(QString::fromStdString(s.name))
                             .arg(*lambdas.begin())});
    if (plans.empty() && lambdas.size() > 1)
        plans.push_back({lc, "\u03bb (ridge regularisation)", kc, "k", tc, *tokens.rbegin(), "vs_lambda",
                         QString("Sweep %1: scores vs \u03bb").arg(QString::fromStdString(s.name))});
    for (const Plan &plan : plans) {
        auto *chart = new QChart;
        chart->setTitle(plan.title);
        auto *x = new QValueAxis;
        auto *y = new QValueAxis;
        chart->addAxis(x, Qt::AlignBottom);
        chart->addAxis(y, Qt::AlignLeft);
        std::set<double> seriesValues;
        for (const auto &row : t.rows)
            seriesValues.insert(row[size_t(plan.seriesCol)]);
        std::vector<double> all, xs;
        for (const auto &[col, label] : metrics) {
            const int c = t.column(col);
            if (c < 0)
                continue;
            int styleIndex = 0;
            for (double sv : seriesValues) {
                // colour = metric, dash pattern = the series value (lambda or k)
                const Qt::PenStyle styles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
                const Qt::PenStyle style = styles[styleIndex++ % 4];
                std::vector<std::pair<double, double>> pts;
                for (const auto &row : t.rows)
                    if (row[size_t(plan.seriesCol)] == sv && row[size_t(plan.fixedCol)] == plan.fixed) {
                        pts.emplace_back(row[size_t(plan.xCol)], row[size_t(c)]);
                        all.push_back(row[size_t(c)]);
                        xs.push_back(row[size_t(plan.xCol)]);
                    }
                std::sort(pts.begin(), pts.end());
                if (!pts.empty()) {
                    auto *series = lineSeries(QString("%1 %2=%3").arg(label, plan.seriesName).arg(sv), pts);
                    series->setPen(QPen(metricColor(col), 2, style));
                    series->setColor(metricColor(col));
                    attach(chart, series, x, y);
                }
            }
        }
        // the legend shows each line's dash pattern; beside the plot, one entry a line, so a dozen
        // entries keep their full names
        chart->legend()->setMarkerShape(QLegend::MarkerShapeFromSeries);
        if (chart->series().size() > 4)
            chart->legend()->setAlignment(Qt::AlignRight);
        QFont legendFont = chart->legend()->font();
        legendFont.setPointSize(chart->series().size() > 6 ? 8 : 9);
        chart->legend()->setFont(legendFont);
        const auto [xlo, xhi] = std::minmax_element(xs.begin(), xs.end());
        x->setTitleText(plan.xTitle);
        if (!xs.empty())
            x->setRange(*xlo, *xhi > *xlo ? *xhi : *xlo + 1);
        x->setLabelFormat(plan.xCol == lc ? "%.0e" : "%g");
        const std::set<double> distinctX(xs.begin(), xs.end());
        if (std::string(plan.suffix) == "vs_k" && distinctX.size() >= 2 && distinctX.size() <= 12) {
            x->setTickCount(int(*xhi - *xlo) + 1); // k is an integer: one tick per k
            x->setLabelFormat("%.0f");
        }
        const auto [lo, hi] = scoreRange(all);
        y->setTitleText("score, mean over B layers (1 = perfect)");
        y->setRange(lo, hi);
        y->applyNiceNumbers();
        y->setLabelFormat("%.2f");
        out.push_back({"sweep_" + safeName(s.name) + "_" + plan.suffix, plan.title.toStdString(),
                       "Each point is one fit scored on the same held-out prompts.", grabChart(chart)});
    }
    return out;
}

std::vector<ReportChart> ledgerCharts(const ReportLedger &l)
{
    std::vector<ReportChart> out;
    const QString name = QString::fromStdString(l.name);
    const std::string stem = "ledger_" + safeName(l.name);
    QStringList tiers, allTiers;
    std::vector<core::TierKind> tierKinds, allKinds;
    for (const auto &[kind, agg] : l.summary.tiers) {
        allTiers << QString::fromStdString(tierLabel(kind));
        allKinds.push_back(kind);
        if (kind != core::TierKind::None) {
            tiers << QString::fromStdString(tierLabel(kind));
            tierKinds.push_back(kind);
        }
    }
    if (allKinds.empty())
        return out;
    {
        auto *chart = new QChart;
        chart->setTitle(
            QString("Replay %1: hit rate per cache tier (of the requests that reached it)").arg(name));
        auto *set = new QBarSet("hit rate (%)");
        double hi = 10;
        for (auto k : tierKinds) {
            const auto &a = l.summary.tiers.at(k);
            const double v = a.requests ? 100.0 * double(a.hits) / double(a.requests) : 0.0;
            *set << v;
            hi = std::max(hi, v);
        }
        auto *series = new QBarSeries;
        series->append(set);
        series->setLabelsVisible(true);
        series->setLabelsFormat("@value %");
        series->setLabelsPrecision(3); // significant digits: 97 %, not 97.0443 %
        auto *x = new QBarCategoryAxis;
        x->append(tiers.isEmpty() ? QStringList{"(no tiers)"} : tiers);
        x->setTitleText("cache tier, in stack order");
        chart->addAxis(x, Qt::AlignBottom);
        auto *y = valueAxis("hit rate (%)", 0, std::min(100.0, std::ceil(hi / 10 + 1) * 10), "%.0f");
        chart->addAxis(y, Qt::AlignLeft);
        attach(chart, series, x, y);
        out.push_back({stem + "_hit_rate", chart->title().toStdString(),
                       "Share of the requests that consulted a tier which it answered.", grabChart(chart)});
    }
    {
        auto *chart = new QChart;
        chart->setTitle(QString("Replay %1: time to first token by the tier that answered").arg(name));
        auto *series = new QBarSeries;
        double hi = 1;
        const std::tuple<const char *, int, double core::TierAggregate::*> pcts[] = {
            {"p50", 50, &core::TierAggregate::ttftMsP50},
            {"p95", 95, &core::TierAggregate::ttftMsP95},
            {"p99", 99, &core::TierAggregate::ttftMsP99}};
        for (const auto &[label, pct, member] : pcts) {
            auto *set = new QBarSet(QString("%1 TTFT (ms)").arg(label));
            set->setColor(percentileColor(pct)); // the window's latency colours
            for (auto k : allKinds) {
                const double v = l.summary.tiers.at(k).*member;
                *set << v;
                hi = std::max(hi, v);
            }
            series->append(set);
        }
        auto *x = new QBarCategoryAxis;
        x->append(allTiers);
        x->setTitleText("answered by");
        chart->addAxis(x, Qt::AlignBottom);
        auto *y = valueAxis("time to first token (ms)", 0, hi * 1.1, hi < 10 ? "%.2f" : "%.0f");
        y->applyNiceNumbers();
        chart->addAxis(y, Qt::AlignLeft);
        attach(chart, series, x, y);
        out.push_back({stem + "_ttft", chart->title().toStdString(),
                       "Lower is better; misses show what a request costs without any cache.",
                       grabChart(chart)});
    }
    {
        auto *chart = new QChart;
        chart->setTitle(QString("Replay %1: prompt tokens reused vs computed, by answering tier").arg(name));
        auto *reused = new QBarSet("tokens reused (not computed)");
        auto *computed = new QBarSet("tokens computed (prefill + generated)");
        double hi = 1;
        for (auto k : allKinds) {
            const auto &a = l.summary.tiers.at(k);
            *reused << double(a.tokensReused);
            *computed << double(a.tokensComputed);
            hi = std::max(hi, double(a.tokensReused + a.tokensComputed));
        }
        reused->setColor(reusedTokensColor()); // as in the window's replay charts
        computed->setColor(computedTokensColor());
        auto *series = new QStackedBarSeries;
        series->append(reused);
        series->append(computed);
        auto *x = new QBarCategoryAxis;
        x->append(allTiers);
        x->setTitleText("answered by");
        chart->addAxis(x, Qt::AlignBottom);
        auto *y = valueAxis("tokens", 0, hi * 1.1, "%.0f");
        y->applyNiceNumbers();
        chart->addAxis(y, Qt::AlignLeft);
        attach(chart, series, x, y);
        out.push_back(
            {stem + "_tokens", chart->title().toStdString(),
             fmt::format("Overall {} of prompt tokens were reused.", percent(l.summary.tokenHitRate)),
             grabChart(chart)});
    }
    return out;
}

} // namespace

bool canRenderCharts()
{
    return qobject_cast<QApplication *>(QCoreApplication::instance()) != nullptr;
}

std::vector<ReportChart> renderCharts(ReportData &data)
{
    std::vector<ReportChart> charts;
    if (!canRenderCharts()) {
        const std::string w = "charts left out: drawing them needs a QApplication (QT_QPA_PLATFORM=offscreen "
                              "works without a display)";
        if (std::find(data.warnings.begin(), data.warnings.end(), w) == data.warnings.end())
            data.warnings.push_back(w);
        return charts;
    }
    for (const auto &r : data.converters) {
        if (!r.layerMetrics.rows.empty())
            charts.push_back(converterLayersChart(r));
        if (r.ckaKeys.rows > 0 && r.ckaKeys.cols > 0)
            charts.push_back(ckaChart(r, r.ckaKeys, "keys"));
        if (r.ckaValues.rows > 0 && r.ckaValues.cols > 0)
            charts.push_back(ckaChart(r, r.ckaValues, "values"));
        if (auto c = headChart(r, "r2_k", "R\u00b2 of keys"))
            charts.push_back(std::move(*c));
        if (auto c = headChart(r, "attn_cos", "attention-output cosine"))
            charts.push_back(std::move(*c));
    }
    for (const auto &s : data.sweeps)
        for (auto &c : sweepCharts(s))
            charts.push_back(std::move(c));
    for (const auto &l : data.ledgers)
        for (auto &c : ledgerCharts(l))
            charts.push_back(std::move(c));
    return charts;
}

QByteArray report::pngBytes(const QImage &image)
{
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    image.save(&buffer, "PNG");
    return bytes;
}

} // namespace kvwb::ui
