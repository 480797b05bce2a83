#include "ui/report/report_builder.h"

#include "core/util/atomic_file.h"
#include "core/util/build_info.h"
#include "core/util/csv.h"
#include "core/util/error.h"
#include "core/util/sha256.h"

#include <QApplication>
#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QBuffer>
#include <QChart>
#include <QChartView>
#include <QDateTime>
#include <QFont>
#include <QFontMetrics>
#include <QLegend>
#include <QLineSeries>
#include <QPageLayout>
#include <QPageSize>
#include <QPainter>
#include <QPdfWriter>
#include <QPen>
#include <QStackedBarSeries>
#include <QSysInfo>
#include <QTextDocument>
#include <QUrl>
#include <QValueAxis>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>

namespace kvwb::ui {

namespace {

namespace fs = std::filesystem;
using core::csvField;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Small helpers

std::string utcNow()
{
    return QDateTime::currentDateTimeUtc().toString(Qt::ISODate).toStdString();
}

std::string cpuModel()
{
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) {
                std::string v = line.substr(colon + 1);
                v.erase(0, v.find_first_not_of(" \t"));
                return v;
            }
        }
    }
    return "unknown";
}

// Exact, shortest round-trip form for CSV ("nan", "inf", "-0" as such).
std::string exact(double v)
{
    return fmt::format("{}", v);
}

// Four significant digits for tables people read.
std::string shown(double v)
{
    if (std::isnan(v))
        return "n/a";
    if (std::isinf(v))
        return v > 0 ? "inf" : "-inf";
    if (v == std::floor(v) && std::fabs(v) < 1e15)
        return fmt::format("{}", int64_t(v));
    return fmt::format("{:.4g}", v);
}

std::string percent(double fraction)
{
    return fmt::format("{:.1f}%", fraction * 100.0);
}

std::string joinInts(const std::vector<int> &v)
{
    std::string s;
    for (size_t i = 0; i < v.size(); ++i)
        s += (i ? "," : "") + std::to_string(v[i]);
    return s;
}

// Writes a file through AtomicFile (NAME.tmp, then rename).
void writeAtomic(const fs::path &path, std::string_view contents)
{
    core::writeFileAtomic(path, contents);
}

void ensureDir(const fs::path &dir)
{
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
        throw core::Error(core::ErrorCode::Io,
                          fmt::format("cannot create report directory {}: {}", dir.string(),
                                      ec ? ec.message() : std::string("not a directory")));
}

json parseSettings(const std::string &text)
{
    if (text.empty())
        return nullptr;
    try {
        return json::parse(text);
    } catch (const json::exception &) {
        return text; // kept verbatim: the stores validate JSON, but a report must never fail on it
    }
}

std::string tableCsv(const core::MetricTable &t)
{
    std::string out;
    for (size_t c = 0; c < t.columns.size(); ++c)
        out += (c ? "," : "") + csvField(t.columns[c]);
    out += "\n";
    for (const auto &row : t.rows) {
        for (size_t c = 0; c < row.size(); ++c)
            out += (c ? "," : "") + exact(row[c]);
        out += "\n";
    }
    return out;
}

std::string matrixCsv(const core::Matrix &m)
{
    std::string out = "b_layer";
    for (int c = 0; c < m.cols; ++c)
        out += ",a_layer_" + std::to_string(c);
    out += "\n";
    for (int r = 0; r < m.rows; ++r) {
        out += std::to_string(r);
        for (int c = 0; c < m.cols; ++c)
            out += "," + exact(m.data[size_t(r) * size_t(m.cols) + size_t(c)]);
        out += "\n";
    }
    return out;
}

json tableJson(const core::MetricTable &t)
{
    return {{"columns", t.columns}, {"rows", t.rows}};
}

json matrixJson(const core::Matrix &m)
{
    json rows = json::array();
    for (int r = 0; r < m.rows; ++r)
        rows.push_back(std::vector<double>(m.data.begin() + ptrdiff_t(r) * m.cols,
                                           m.data.begin() + ptrdiff_t(r + 1) * m.cols));
    return {{"rows", m.rows}, {"cols", m.cols}, {"data", rows}};
}

json modelJson(const core::ModelInfo &m)
{
    const auto &c = m.config;
    return {{"architecture", c.architecture},
            {"model_type", c.modelType},
            {"layers", c.numLayers},
            {"heads", c.numHeads},
            {"kv_heads", c.numKvHeads},
            {"head_dim", c.headDim},
            {"hidden_size", c.hiddenSize},
            {"vocab_size", c.vocabSize},
            {"rope_theta", c.ropeTheta},
            {"rope_layout", c.ropeLayout == core::RopeLayout::Interleaved ? "interleaved" : "rotate_half"},
            {"rope_scaling", c.ropeScaling.type},
            {"rope_scaling_factor", c.ropeScaling.factor},
            {"weights_sha256", m.weightsSha256},
            {"tokenizer_sha256", m.tokenizerSha256},
            {"source_path", m.sourcePath},
            {"captured_layers", m.capturedLayers}};
}

json storageJson(const core::ExperimentOptions &s)
{
    return {{"dtype", core::kvStorageName(s.storage)},
            {"compress", s.compress},
            {"chunk_tokens", s.chunkTokens},
            {"key_form", core::keyFormName(s.keyForm)}};
}

json converterSettingsJson(const core::ConverterRecord &r)
{
    return {{"key_form", core::keyFormName(r.keyForm)},
            {"selection", r.selection},
            {"k", r.k},
            {"lambda_mode", r.lambdaMode},
            {"per_head", r.perHead},
            {"settings", parseSettings(r.settingsJson)},
            {"train_prompts", r.trainPrompts},
            {"valid_prompts", r.validPrompts},
            {"test_prompts", r.testPrompts},
            {"train_tokens", r.trainTokens}};
}

json summaryJson(const core::LedgerSummary &s)
{
    return json::parse(core::ledgerSummaryJson(s));
}

json ledgerRowJson(const core::LedgerRow &r)
{
    json hits = json::object();
    for (const auto &[kind, hit] : r.tierHits)
        hits[core::tierKindName(kind)] = hit;
    return {{"request_id", r.requestId},
            {"arrival_ms", r.arrivalMs},
            {"tenant", r.tenant},
            {"model", r.model},
            {"intent", r.intent},
            {"answered_by", core::tierKindName(r.answeredBy)},
            {"tier_hits", hits},
            {"cached_intent", r.cachedIntent},
            {"cached_request_id", r.cachedRequestId},
            {"similarity", r.similarity},
            {"false_hit", r.falseHit},
            {"prompt_tokens", r.promptTokens},
            {"tokens_reused", r.tokensReused},
            {"tokens_computed", r.tokensComputed},
            {"generated_tokens", r.generatedTokens},
            {"ttft_ms", r.ttftMs},
            {"total_ms", r.totalMs},
            {"lookup_ms", r.lookupMs},
            {"gate", r.gate},
            {"gate_value", r.gateValue},
            {"shadow_kl", r.shadowKl},
            {"shadow_exact", r.shadowExact}};
}

// A name made safe for a file name (the stores allow [A-Za-z0-9_.-], so this is a no-op for them).
std::string safeName(const std::string &name)
{
    std::string s = name;
    for (char &c : s)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
            c = '_';
    return s;
}

// ---------------------------------------------------------------------------------------------
// Charts

constexpr int kChartWidth = 900;
constexpr int kChartHeight = 480;

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

// Viridis, five stops, linear in between: perceptually ordered and readable in grey print.
QColor viridis(double t)
{
    static const QColor stops[] = {QColor(68, 1, 84), QColor(59, 82, 139), QColor(33, 145, 140),
                                   QColor(94, 201, 98), QColor(253, 231, 37)};
    if (!std::isfinite(t))
        return QColor(200, 200, 200);
    t = std::clamp(t, 0.0, 1.0) * 4.0;
    const int i = std::min(3, int(t));
    const double f = t - i;
    const QColor &a = stops[i], &b = stops[i + 1];
    return QColor(int(a.red() + f * (b.red() - a.red())), int(a.green() + f * (b.green() - a.green())),
                  int(a.blue() + f * (b.blue() - a.blue())));
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
            const QColor color = viridis(t);
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
        p.fillRect(QRect(barX, top + y, 16, 1), viridis(1.0 - double(y) / (barH - 1)));
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

// One colour per metric in every line chart, so R^2 of keys looks the same everywhere.
QColor metricColor(const std::string &column)
{
    if (column == "r2_k")
        return QColor(31, 119, 180);
    if (column == "r2_v")
        return QColor(44, 160, 44);
    return QColor(255, 127, 14); // attn_cos
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

QString tierLabel(core::TierKind k)
{
    return k == core::TierKind::None ? QString("miss (model ran)") : QString(core::tierKindName(k));
}

std::vector<ReportChart> ledgerCharts(const ReportLedger &l)
{
    std::vector<ReportChart> out;
    const QString name = QString::fromStdString(l.name);
    const std::string stem = "ledger_" + safeName(l.name);
    QStringList tiers, allTiers;
    std::vector<core::TierKind> tierKinds, allKinds;
    for (const auto &[kind, agg] : l.summary.tiers) {
        allTiers << tierLabel(kind);
        allKinds.push_back(kind);
        if (kind != core::TierKind::None) {
            tiers << tierLabel(kind);
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
        const std::pair<const char *, double core::TierAggregate::*> pcts[] = {
            {"p50", &core::TierAggregate::ttftMsP50},
            {"p95", &core::TierAggregate::ttftMsP95},
            {"p99", &core::TierAggregate::ttftMsP99}};
        for (const auto &[label, member] : pcts) {
            auto *set = new QBarSet(QString("%1 TTFT (ms)").arg(label));
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
        reused->setColor(QColor(33, 145, 140));
        computed->setColor(QColor(200, 90, 60));
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

QByteArray pngBytes(const QImage &image)
{
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    image.save(&buffer, "PNG");
    return bytes;
}

// ---------------------------------------------------------------------------------------------
// Comparison samples

std::string htmlEscape(const std::string &s);

// Invalid UTF-8 (a piece holding part of a character) as U+FFFD: HTML, PDF and JSON need valid text.
std::string validUtf8(const std::string &s)
{
    return QString::fromUtf8(s.data(), qsizetype(s.size())).toStdString();
}

// True when s does not end inside a multi-byte UTF-8 sequence.
bool endsOnCharacter(const std::string &s)
{
    size_t i = s.size(), continuation = 0;
    while (i > 0 && continuation < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
        --i;
        ++continuation;
    }
    if (i == 0 || continuation == 4)
        return true; // stray continuation bytes: nothing later completes them
    const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
    const size_t need = lead < 0x80             ? 1
                        : (lead & 0xE0) == 0xC0 ? 2
                        : (lead & 0xF0) == 0xE0 ? 3
                        : (lead & 0xF8) == 0xF0 ? 4
                                                : 1;
    return continuation + 1 >= need;
}

// A run of tokens holding whole characters: byte-level BPE can split one character over two
// pieces, and marking or shading half a character would produce invalid text.
struct Segment
{
    std::string text;
    int first = -1; // token indices; -1: the path has no pieces (text only)
    int last = -1;
};

std::vector<Segment> segmentsOf(const core::ComparisonPath &p)
{
    std::vector<Segment> out;
    if (p.pieces.empty()) {
        if (!p.text.empty())
            out.push_back({p.text, -1, -1});
        return out;
    }
    Segment cur;
    for (size_t i = 0; i < p.pieces.size(); ++i) {
        if (cur.first < 0)
            cur.first = int(i);
        cur.text += p.pieces[i];
        cur.last = int(i);
        if (endsOnCharacter(cur.text) || i + 1 == p.pieces.size()) {
            cur.text = validUtf8(cur.text);
            out.push_back(std::move(cur));
            cur = Segment{};
        }
    }
    return out;
}

bool holds(const Segment &g, int token)
{
    return g.first >= 0 && token >= g.first && token <= g.last;
}

// At most 400 characters of the prompt, with how much was left out.
std::string promptShown(const std::string &prompt, std::string *note)
{
    constexpr qsizetype kMax = 400;
    const QString q = QString::fromUtf8(prompt.data(), qsizetype(prompt.size()));
    if (q.size() <= kMax) {
        *note = fmt::format("{} characters", q.size());
        return q.toStdString();
    }
    *note = fmt::format("first {} of {} characters", kMax, q.size());
    return q.left(kMax).toStdString() + "\u2026";
}

std::string divergenceText(const core::ComparisonSample &s)
{
    return s.firstDivergence < 0 ? std::string("none (identical continuations)")
                                 : fmt::format("token {}", s.firstDivergence);
}

std::string comparisonMetrics(const core::ComparisonSample &s)
{
    return fmt::format("KL to scratch {} nats (no-prefix floor {} nats); top-1 agreement {}; ROUGE-L {}; "
                       "TTFT scratch {} ms vs transfer {} ms (source prefill {} ms, convert {} ms); first "
                       "divergence: {}; gate {} = {} vs threshold {}: {}.",
                       shown(s.meanKl), shown(s.klNoPrefix), percent(s.top1), shown(s.rougeL),
                       shown(s.scratch.ttftMs), shown(s.transfer.ttftMs), shown(s.sourcePrefillMs),
                       shown(s.convertMs), divergenceText(s), s.gateSignal.empty() ? "-" : s.gateSignal,
                       shown(s.gateValue), shown(s.gateThreshold), s.gatePassed ? "passed" : "failed");
}

struct PathView
{
    const char *label;
    const core::ComparisonPath *path;
    bool marked;  // scratch and transfer: the first divergence is marked
    bool shadeKl; // transfer: tokens shaded by per-token KL
    std::string note;
};

std::vector<PathView> pathViews(const core::ComparisonSample &s)
{
    const auto tokens = [](const core::ComparisonPath &p) {
        return fmt::format("{} token(s), prompt {} token(s)", p.ids.size(), p.promptTokens);
    };
    return {
        {"A", &s.a, false, false, "model A, " + tokens(s.a)},
        {"B scratch", &s.scratch, true, false, "model B from its own prefill, " + tokens(s.scratch)},
        {"B transfer", &s.transfer, true, true,
         fmt::format("model B from A's cache converted by {}, {}, {} reused",
                     s.converter.empty() ? "-" : s.converter, tokens(s.transfer), s.transfer.reusedTokens)}};
}

// A fence longer than any run of backticks in text.
std::string fenceFor(const std::string &text)
{
    size_t longest = 0, run = 0;
    for (char c : text) {
        run = c == '`' ? run + 1 : 0;
        longest = std::max(longest, run);
    }
    return std::string(std::max<size_t>(3, longest + 1), '`');
}

std::string comparisonMarkdown(const core::ComparisonSample &s)
{
    std::string md;
    const auto block = [&](const std::string &text) {
        const std::string fence = fenceFor(text);
        md += fence + "text\n" + text + "\n" + fence + "\n\n";
    };
    std::string note;
    const std::string prompt = promptShown(validUtf8(s.prompt), &note);
    md += "**Prompt** (" + note + "):\n\n";
    block(prompt);
    for (const PathView &v : pathViews(s)) {
        std::string text;
        const int fd = v.marked ? s.firstDivergence : -1;
        for (const Segment &g : segmentsOf(*v.path))
            text += holds(g, fd) ? "\u00ab" + g.text + "\u00bb" : g.text;
        if (fd >= 0 && size_t(fd) >= v.path->pieces.size())
            text += "\u00ab(end)\u00bb";
        md += "**" + std::string(v.label) + "** (" + v.note + "):\n\n";
        block(text);
    }
    md += comparisonMetrics(s) + "\n\n";
    return md;
}

// White at 0 nats to red at 2 nats or more.
std::string klColour(double kl)
{
    const double t = std::clamp(std::isfinite(kl) ? kl / 2.0 : 1.0, 0.0, 1.0);
    const int gb = int(std::lround(255.0 * (1.0 - t)));
    return fmt::format("#ff{:02x}{:02x}", gb, gb);
}

std::string comparisonHtml(const core::ComparisonSample &s)
{
    const char *pre = "<pre style=\"white-space:pre-wrap;background:#f8f8f8;border:1px solid #ddd;"
                      "padding:4px;margin:0.2em 0 0.6em 0\">";
    std::string h = "<div class=\"comparison\" style=\"margin:0.5em 0 1.2em 0\">\n";
    std::string note;
    const std::string prompt = promptShown(validUtf8(s.prompt), &note);
    h += "<p><b>Prompt</b> (" + htmlEscape(note) + "):</p>" + pre + htmlEscape(prompt) + "</pre>\n";
    for (const PathView &v : pathViews(s)) {
        const int fd = v.marked ? s.firstDivergence : -1;
        std::string body;
        for (const Segment &g : segmentsOf(*v.path)) {
            std::string piece = htmlEscape(g.text);
            if (v.shadeKl && g.first >= 0 && size_t(g.first) < v.path->kl.size()) {
                double kl = 0;
                for (int t = g.first; t <= g.last && size_t(t) < v.path->kl.size(); ++t)
                    kl = std::max(kl, v.path->kl[size_t(t)]);
                piece = fmt::format("<span style=\"background-color:{}\" title=\"KL {} nats\">{}</span>",
                                    klColour(kl), shown(kl), piece);
            }
            if (holds(g, fd))
                piece = "<b><u class=\"divergence\" style=\"text-decoration:underline;color:#b00000\">" +
                        piece + "</u></b>";
            body += piece;
        }
        if (fd >= 0 && size_t(fd) >= v.path->pieces.size())
            body +=
                "<b><u class=\"divergence\" style=\"text-decoration:underline;color:#b00000\">(end)</u></b>";
        h += "<p><b>" + std::string(v.label) + "</b> (" + htmlEscape(v.note) + "):</p>" + pre + body +
             "</pre>\n";
    }
    h += "<p>" + htmlEscape(comparisonMetrics(s)) + "</p>\n</div>\n";
    return h;
}

std::string comparisonsCsv(const std::vector<ReportComparisons> &lists)
{
    std::string out =
        "list,sample,converter,prompt,a_text,scratch_text,transfer_text,a_tokens,scratch_tokens,"
        "transfer_tokens,first_divergence,mean_kl,kl_no_prefix,top1,rouge_l,prompt_tokens_a,"
        "prompt_tokens_b,reused_tokens,ttft_ms_a,ttft_ms_scratch,ttft_ms_transfer,"
        "decode_tok_per_s_a,decode_tok_per_s_scratch,decode_tok_per_s_transfer,source_prefill_ms,"
        "convert_ms,gate_signal,gate_value,gate_threshold,gate_passed,created_utc\n";
    for (const auto &l : lists)
        for (size_t i = 0; i < l.samples.size(); ++i) {
            const core::ComparisonSample &s = l.samples[i];
            out += fmt::format(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}"
                "\n",
                csvField(l.name), i, csvField(s.converter), csvField(s.prompt), csvField(s.a.text),
                csvField(s.scratch.text), csvField(s.transfer.text), s.a.ids.size(), s.scratch.ids.size(),
                s.transfer.ids.size(), s.firstDivergence, exact(s.meanKl), exact(s.klNoPrefix), exact(s.top1),
                exact(s.rougeL), s.a.promptTokens, s.scratch.promptTokens, s.transfer.reusedTokens,
                exact(s.a.ttftMs), exact(s.scratch.ttftMs), exact(s.transfer.ttftMs),
                exact(s.a.decodeTokPerS), exact(s.scratch.decodeTokPerS), exact(s.transfer.decodeTokPerS),
                exact(s.sourcePrefillMs), exact(s.convertMs), csvField(s.gateSignal), exact(s.gateValue),
                exact(s.gateThreshold), s.gatePassed ? 1 : 0, csvField(s.createdUtc));
        }
    return out;
}

// ---------------------------------------------------------------------------------------------
// The document: one list of blocks rendered to Markdown, HTML and (via QTextDocument) PDF.

struct Block
{
    enum Kind
    {
        Heading,
        Para,
        Table,
        Chart,
        Code,
        Comparison
    } kind = Para;
    int level = 2;
    std::string text;
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;
    const ReportChart *chart = nullptr;
    const core::ComparisonSample *sample = nullptr; // Comparison blocks
};

struct Doc
{
    std::vector<Block> blocks;
    Block &add(Block::Kind kind)
    {
        blocks.emplace_back();
        blocks.back().kind = kind;
        return blocks.back();
    }
    void heading(int level, std::string text)
    {
        Block &b = add(Block::Heading);
        b.level = level;
        b.text = std::move(text);
    }
    void para(std::string text) { add(Block::Para).text = std::move(text); }
    void code(std::string text) { add(Block::Code).text = std::move(text); }
    void table(std::vector<std::string> header, std::vector<std::vector<std::string>> rows)
    {
        Block &b = add(Block::Table);
        b.header = std::move(header);
        b.rows = std::move(rows);
    }
    void chart(const ReportChart &c) { add(Block::Chart).chart = &c; }
    void comparison(const core::ComparisonSample &sample) { add(Block::Comparison).sample = &sample; }
    void metricTable(const core::MetricTable &t)
    {
        std::vector<std::vector<std::string>> rows;
        for (const auto &r : t.rows) {
            std::vector<std::string> cells;
            for (double v : r)
                cells.push_back(shown(v));
            rows.push_back(std::move(cells));
        }
        table(t.columns, std::move(rows));
    }
    void matrixTable(const core::Matrix &m)
    {
        std::vector<std::string> header{"B \\ A"};
        for (int c = 0; c < m.cols; ++c)
            header.push_back(std::to_string(c));
        std::vector<std::vector<std::string>> rows;
        for (int r = 0; r < m.rows; ++r) {
            std::vector<std::string> cells{std::to_string(r)};
            for (int c = 0; c < m.cols; ++c)
                cells.push_back(fmt::format("{:.3f}", m.data[size_t(r) * size_t(m.cols) + size_t(c)]));
            rows.push_back(std::move(cells));
        }
        table(std::move(header), std::move(rows));
    }
};

void addCharts(Doc &doc, const std::vector<ReportChart> &charts, const std::string &prefix)
{
    for (const auto &c : charts)
        if (c.id.rfind(prefix, 0) == 0)
            doc.chart(c);
}

Doc buildDoc(const ReportData &d, const std::vector<ReportChart> &charts)
{
    Doc doc;
    doc.heading(1, "KV Workbench report: " + d.experiment.filename().string());
    doc.para(
        fmt::format("Experiment file {} ({} bytes, schema {}), {} prompts ({} tokens for model A, {} for "
                    "model B), {} converter(s), {} sweep(s), {} replay ledger(s). Configuration hash "
                    "(sha256 of every setting below): {}.",
                    d.experiment.string(), d.fileBytes, d.schema, d.prompts, d.tokensA, d.tokensB,
                    d.converters.size(), d.sweeps.size(), d.ledgers.size(), d.configSha256));

    doc.heading(2, "Environment");
    doc.para("Left: what wrote the experiment file (its provenance). Right: what wrote this report.");
    const auto &p = d.provenance;
    const auto &e = d.environment;
    doc.table({"", "experiment file", "this report"}, {{"kvwb version", p.appVersion, e.appVersion},
                                                       {"git commit", p.gitCommit, e.gitCommit},
                                                       {"Qt", p.qtVersion, e.qtVersion},
                                                       {"LibTorch", p.torchVersion, "-"},
                                                       {"HDF5", p.hdf5Version, "-"},
                                                       {"device / CPU", p.device, e.cpuModel},
                                                       {"threads", "-", std::to_string(e.threads)},
                                                       {"OS", "-", e.os},
                                                       {"created (UTC)", p.createdUtc, e.createdUtc},
                                                       {"run id", p.runId, "-"},
                                                       {"capture config sha256", p.configSha256, "-"}});

    doc.heading(2, "Models");
    const auto row = [&](const std::string &label, auto get) {
        return std::vector<std::string>{label, get(d.modelA), get(d.modelB)};
    };
    const auto cfgInt = [](auto member) {
        return [member](const core::ModelInfo &m) { return std::to_string(m.config.*member); };
    };
    doc.table({"", "model A (source)", "model B (target)"},
              {row("architecture", [](const core::ModelInfo &m) { return m.config.architecture; }),
               row("model type", [](const core::ModelInfo &m) { return m.config.modelType; }),
               row("layers", cfgInt(&core::ModelConfig::numLayers)),
               row("heads", cfgInt(&core::ModelConfig::numHeads)),
               row("kv heads", cfgInt(&core::ModelConfig::numKvHeads)),
               row("head dim", cfgInt(&core::ModelConfig::headDim)),
               row("hidden size", cfgInt(&core::ModelConfig::hiddenSize)),
               row("vocab size", cfgInt(&core::ModelConfig::vocabSize)),
               row("RoPE",
                   [](const core::ModelInfo &m) {
                       return fmt::format("theta {}, {}, scaling {} x{}", m.config.ropeTheta,
                                          m.config.ropeLayout == core::RopeLayout::Interleaved
                                              ? "interleaved"
                                              : "rotate_half",
                                          m.config.ropeScaling.type, m.config.ropeScaling.factor);
                   }),
               row("captured layers", [](const core::ModelInfo &m) { return joinInts(m.capturedLayers); }),
               row("weights sha256", [](const core::ModelInfo &m) { return m.weightsSha256; }),
               row("tokenizer sha256", [](const core::ModelInfo &m) { return m.tokenizerSha256; }),
               row("source", [](const core::ModelInfo &m) { return m.sourcePath; })});
    doc.table({"storage", "value"}, {{"KV dtype", core::kvStorageName(d.storage.storage)},
                                     {"deflate level", std::to_string(d.storage.compress)},
                                     {"chunk rows", std::to_string(d.storage.chunkTokens)},
                                     {"stored keys", core::keyFormName(d.storage.keyForm)},
                                     {"prompts", std::to_string(d.prompts)},
                                     {"tokens A / B", fmt::format("{} / {}", d.tokensA, d.tokensB)}});

    for (const auto &r : d.converters) {
        doc.heading(2, "Converter " + r.name);
        doc.table({"setting", "value"},
                  {{"key form", core::keyFormName(r.keyForm)},
                   {"source-layer selection", fmt::format("{} (k = {})", r.selection, r.k)},
                   {"lambda", r.lambdaMode},
                   {"per-head maps asked for", r.perHead ? "yes" : "no"},
                   {"train / valid / test prompts", fmt::format("{} / {} / {}", r.trainPrompts.size(),
                                                                r.validPrompts.size(), r.testPrompts.size())},
                   {"train tokens", std::to_string(r.trainTokens)},
                   {"fitted", fmt::format("{} by kvwb {} ({})", r.createdUtc, r.appVersion, r.gitCommit)},
                   {"settings", r.settingsJson.empty() ? "-" : r.settingsJson}});
        addCharts(doc, charts, "converter_" + safeName(r.name) + "_");
        doc.heading(3, "Per-layer metrics (held-out prompts)");
        doc.metricTable(r.layerMetrics);
        if (!r.headMetrics.rows.empty()) {
            doc.heading(3, "Per-head metrics");
            doc.metricTable(r.headMetrics);
        }
        if (r.ckaKeys.rows > 0) {
            doc.heading(3, "Linear CKA of keys (rows: B layers, columns: A layers)");
            doc.matrixTable(r.ckaKeys);
        }
        if (r.ckaValues.rows > 0) {
            doc.heading(3, "Linear CKA of values (rows: B layers, columns: A layers)");
            doc.matrixTable(r.ckaValues);
        }
    }
    for (const auto &s : d.sweeps) {
        doc.heading(2, "Sweep " + s.name);
        if (!s.settingsJson.empty())
            doc.para("Settings: " + s.settingsJson);
        addCharts(doc, charts, "sweep_" + safeName(s.name) + "_");
        doc.metricTable(s.table);
    }
    for (const auto &l : d.ledgers) {
        const auto &s = l.summary;
        doc.heading(2, "Replay ledger " + l.name);
        if (!l.settingsJson.empty())
            doc.para("Settings: " + l.settingsJson);
        doc.table(
            {"measure", "value"},
            {{"requests", std::to_string(s.requests)},
             {"hits (any tier)", fmt::format("{} ({})", s.hits, percent(s.hitRate))},
             {"false hits", fmt::format("{} ({} of response hits)", s.falseHits, percent(s.falseHitRate))},
             {"tokens reused / computed", fmt::format("{} / {} (token hit rate {})", s.tokensReused,
                                                      s.tokensComputed, percent(s.tokenHitRate))},
             {"TTFT p50 / p95 / p99 (ms)",
              fmt::format("{} / {} / {}", shown(s.ttftMsP50), shown(s.ttftMsP95), shown(s.ttftMsP99))},
             {"total p50 / p95 / p99 (ms)",
              fmt::format("{} / {} / {}", shown(s.totalMsP50), shown(s.totalMsP95), shown(s.totalMsP99))},
             {"cost (USD), with / without cache",
              fmt::format("{:.6f} / {:.6f}", s.costUsd, s.costUsdNoCache)}});
        std::vector<std::vector<std::string>> tierRows;
        for (const auto &[kind, a] : s.tiers)
            tierRows.push_back(
                {tierLabel(kind).toStdString(), std::to_string(a.requests), std::to_string(a.hits),
                 a.requests ? percent(double(a.hits) / double(a.requests)) : "-", std::to_string(a.falseHits),
                 std::to_string(a.tokensReused), std::to_string(a.tokensComputed), shown(a.ttftMsP50),
                 shown(a.ttftMsP95), shown(a.ttftMsP99)});
        doc.heading(3, "Per tier");
        doc.table({"tier", "requests", "hits", "hit rate", "false hits", "tokens reused", "tokens computed",
                   "TTFT p50 ms", "p95", "p99"},
                  std::move(tierRows));
        addCharts(doc, charts, "ledger_" + safeName(l.name) + "_");
        doc.para(fmt::format("All {} ledger rows are in csv/ledger_{}.csv and report.json.", l.rows.size(),
                             safeName(l.name)));
    }
    if (!d.comparisons.empty()) {
        doc.heading(2, "Comparison samples");
        doc.para("Each prompt answered three ways: by model A, by model B from its own prefill (B scratch) "
                 "and by model B from A's converted cache (B transfer). The first token where scratch and "
                 "transfer differ is marked (bold and underlined in HTML and PDF, between \u00ab and "
                 "\u00bb in Markdown). In HTML and PDF each transfer token is shaded by its KL to scratch: "
                 "white at 0 nats, red at 2 nats or more. Every field is in csv/comparisons.csv and "
                 "report.json.");
        for (const auto &c : d.comparisons) {
            doc.heading(3, fmt::format("Comparison list {} ({} sample(s))", c.name, c.samples.size()));
            for (size_t i = 0; i < c.samples.size(); ++i) {
                doc.heading(4, fmt::format("Sample {}", i));
                doc.comparison(c.samples[i]);
            }
        }
    }
    doc.heading(2, "Configuration");
    doc.para("sha256 " + d.configSha256 + " of this canonical JSON (sorted keys):");
    doc.code(d.configJson);
    if (!d.warnings.empty()) {
        doc.heading(2, "Warnings");
        for (const auto &w : d.warnings)
            doc.para(w);
    }
    return doc;
}

std::string mdCell(const std::string &s)
{
    std::string out;
    for (char c : s) {
        if (c == '|')
            out += "\\|";
        else if (c == '\n')
            out += ' ';
        else
            out += c;
    }
    return out;
}

std::string renderMarkdown(const Doc &doc)
{
    std::string md;
    for (const auto &b : doc.blocks) {
        switch (b.kind) {
        case Block::Heading:
            md += std::string(size_t(b.level), '#') + " " + b.text + "\n\n";
            break;
        case Block::Para:
            md += b.text + "\n\n";
            break;
        case Block::Code:
            md += "```json\n" + b.text + "\n```\n\n";
            break;
        case Block::Comparison:
            md += comparisonMarkdown(*b.sample);
            break;
        case Block::Chart:
            md +=
                "![" + b.chart->title + "](charts/" + b.chart->id + ".png)\n\n*" + b.chart->caption + "*\n\n";
            break;
        case Block::Table: {
            md += "|";
            for (const auto &h : b.header)
                md += " " + mdCell(h) + " |";
            md += "\n|";
            for (size_t i = 0; i < b.header.size(); ++i)
                md += "---|";
            md += "\n";
            for (const auto &r : b.rows) {
                md += "|";
                for (const auto &c : r)
                    md += " " + mdCell(c) + " |";
                md += "\n";
            }
            md += "\n";
            break;
        }
        }
    }
    return md;
}

std::string htmlEscape(const std::string &s)
{
    std::string out;
    for (char c : s) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        default:
            out += c;
        }
    }
    return out;
}

// imageSrc maps a chart to its src attribute: a data URI for HTML, a resource URL for PDF.
std::string renderHtml(const Doc &doc, const std::string &title, bool withCss,
                       const std::function<std::string(const ReportChart &)> &imageSrc, int imageWidth)
{
    std::string h =
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + htmlEscape(title) + "</title>\n";
    if (withCss)
        h += "<style>\n"
             "body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:2em auto;max-width:1000px;"
             "color:#222;line-height:1.4}\n"
             "h1{border-bottom:2px solid #3b528b}h2{margin-top:2em;border-bottom:1px solid #ccc}\n"
             "table{border-collapse:collapse;margin:0.8em 0;font-size:0.85em}\n"
             "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}"
             "th{background:#eef}tr:nth-child(even) td{background:#fafafa}\n"
             "td{font-variant-numeric:tabular-nums;word-break:break-all}\n"
             "figure{margin:1em 0}figcaption{color:#555;font-size:0.9em}img{max-width:100%}\n"
             "pre{background:#f4f4f4;padding:0.8em;white-space:pre-wrap;word-break:break-all;font-size:0.8em}"
             "\n"
             "</style>\n";
    h += "</head><body>\n";
    for (const auto &b : doc.blocks) {
        switch (b.kind) {
        case Block::Heading:
            h += fmt::format("<h{0}>{1}</h{0}>\n", b.level, htmlEscape(b.text));
            break;
        case Block::Para:
            h += "<p>" + htmlEscape(b.text) + "</p>\n";
            break;
        case Block::Code:
            h += "<pre>" + htmlEscape(b.text) + "</pre>\n";
            break;
        case Block::Comparison:
            h += comparisonHtml(*b.sample);
            break;
        case Block::Chart:
            h += fmt::format(
                "<figure><img src=\"{}\" alt=\"{}\" width=\"{}\"><figcaption>{}</figcaption></figure>\n",
                imageSrc(*b.chart), htmlEscape(b.chart->title), imageWidth, htmlEscape(b.chart->caption));
            break;
        case Block::Table:
            h += "<table border=\"1\" cellspacing=\"0\" cellpadding=\"3\"><tr>";
            for (const auto &c : b.header)
                h += "<th>" + htmlEscape(c) + "</th>";
            h += "</tr>\n";
            for (const auto &r : b.rows) {
                h += "<tr>";
                for (const auto &c : r)
                    h += "<td>" + htmlEscape(c) + "</td>";
                h += "</tr>\n";
            }
            h += "</table>\n";
            break;
        }
    }
    h += "</body></html>\n";
    return h;
}

const std::vector<ReportChart> &chartsOf(ReportData &data, std::vector<ReportChart> &storage)
{
    storage = renderCharts(data);
    return storage;
}

} // namespace

// -------------------------------------------------------------------------------------------------

ReportData collectReport(const fs::path &experiment)
{
    ReportData d;
    d.experiment = experiment;
    {
        const auto r = core::ExperimentReader::open(experiment); // closed before the stores open it
        d.schema = r.schema();
        d.provenance = r.provenance();
        d.modelA = r.model('a');
        d.modelB = r.model('b');
        d.storage = r.storage();
        d.prompts = r.promptCount();
        d.tokensA = r.totalTokens('a');
        d.tokensB = r.totalTokens('b');
    }
    std::error_code ec;
    d.fileBytes = fs::file_size(experiment, ec);
    for (const auto &name : core::listConverters(experiment)) {
        d.converters.push_back(core::loadConverters(experiment, name, core::ConverterParts::MetricsOnly));
    }
    for (const auto &name : core::listTables(experiment)) {
        ReportSweep s;
        s.name = name;
        s.table = core::loadTable(experiment, name, &s.settingsJson);
        d.sweeps.push_back(std::move(s));
    }
    for (const auto &name : core::listLedgers(experiment)) {
        ReportLedger l;
        l.name = name;
        l.rows = core::loadLedger(experiment, name, &l.settingsJson);
        l.summary = core::summarize(l.rows);
        d.ledgers.push_back(std::move(l));
    }
    for (const auto &name : core::listComparisons(experiment))
        d.comparisons.push_back({name, core::loadComparisons(experiment, name)});
    d.environment.appVersion = core::appVersion();
    d.environment.gitCommit = core::gitCommit();
    d.environment.qtVersion = qVersion();
    d.environment.cpuModel = cpuModel();
    d.environment.threads = int(std::thread::hardware_concurrency());
    d.environment.os = QSysInfo::prettyProductName().toStdString();
    d.environment.createdUtc = utcNow();

    json config = {{"capture_config_sha256", d.provenance.configSha256},
                   {"storage", storageJson(d.storage)},
                   {"models",
                    {{"a",
                      {{"weights_sha256", d.modelA.weightsSha256},
                       {"tokenizer_sha256", d.modelA.tokenizerSha256},
                       {"captured_layers", d.modelA.capturedLayers}}},
                     {"b",
                      {{"weights_sha256", d.modelB.weightsSha256},
                       {"tokenizer_sha256", d.modelB.tokenizerSha256},
                       {"captured_layers", d.modelB.capturedLayers}}}}},
                   {"converters", json::object()},
                   {"sweeps", json::object()},
                   {"ledgers", json::object()}};
    for (const auto &r : d.converters)
        config["converters"][r.name] = converterSettingsJson(r);
    for (const auto &s : d.sweeps)
        config["sweeps"][s.name] = parseSettings(s.settingsJson);
    for (const auto &l : d.ledgers)
        config["ledgers"][l.name] = parseSettings(l.settingsJson);
    // The converter behind each list's transfer paths determined its numbers (the texts and metrics
    // are results). Only present when there are lists, so older reports keep their hash.
    // The gate's signal and threshold decided each sample's pass/fail, so they count too.
    for (const auto &c : d.comparisons) {
        std::set<std::string> converters, gates;
        for (const auto &s : c.samples) {
            converters.insert(validUtf8(s.converter));
            gates.insert(fmt::format("{} {}", validUtf8(s.gateSignal), s.gateThreshold));
        }
        config["comparisons"][c.name] = {{"converters", converters}, {"gates", gates}};
    }
    d.configJson = config.dump();
    d.configSha256 = core::sha256Hex(std::string_view(d.configJson));
    return d;
}

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

std::vector<fs::path> writeMarkdown(ReportData &data, const fs::path &outDir)
{
    ensureDir(outDir);
    std::vector<ReportChart> storage;
    const auto &charts = chartsOf(data, storage);
    std::vector<fs::path> written;
    if (!charts.empty())
        ensureDir(outDir / "charts");
    for (const auto &c : charts) {
        const fs::path png = outDir / "charts" / (c.id + ".png");
        const QByteArray bytes = pngBytes(c.image);
        writeAtomic(png, std::string_view(bytes.constData(), size_t(bytes.size())));
        written.push_back(png);
    }
    const fs::path md = outDir / "report.md";
    writeAtomic(md, renderMarkdown(buildDoc(data, charts)));
    written.insert(written.begin(), md);
    return written;
}

std::vector<fs::path> writeHtml(ReportData &data, const fs::path &outDir)
{
    ensureDir(outDir);
    std::vector<ReportChart> storage;
    const auto &charts = chartsOf(data, storage);
    const auto dataUri = [](const ReportChart &c) {
        return "data:image/png;base64," + pngBytes(c.image).toBase64().toStdString();
    };
    const fs::path html = outDir / "report.html";
    writeAtomic(html, renderHtml(buildDoc(data, charts),
                                 "KV Workbench report: " + data.experiment.filename().string(), true, dataUri,
                                 kChartWidth));
    return {html};
}

std::vector<fs::path> writePdf(ReportData &data, const fs::path &outDir)
{
    if (!canRenderCharts())
        throw core::Error(
            core::ErrorCode::Unsupported,
            "the PDF report needs a QApplication (run kvwb report with the offscreen platform)");
    ensureDir(outDir);
    std::vector<ReportChart> storage;
    const auto &charts = chartsOf(data, storage);
    QTextDocument doc;
    QFont font("DejaVu Sans");
    font.setPointSize(8);
    doc.setDefaultFont(font);
    for (const auto &c : charts)
        doc.addResource(QTextDocument::ImageResource, QUrl(QString::fromStdString("chart:" + c.id)), c.image);
    // A4 at 15 mm margins leaves 180 mm; QTextDocument lays out at the writer's 96 dpi-ish logical
    // resolution, so a 640 px wide image fills about the text width.
    doc.setHtml(QString::fromStdString(renderHtml(
        buildDoc(data, charts), "KV Workbench report", false,
        [](const ReportChart &c) { return "chart:" + c.id; }, 640)));
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    {
        QPdfWriter writer(&buffer);
        writer.setPageLayout(QPageLayout(QPageSize(QPageSize::A4), QPageLayout::Portrait,
                                         QMarginsF(15, 15, 15, 15), QPageLayout::Millimeter));
        writer.setResolution(96);
        writer.setTitle(
            QString::fromStdString("KV Workbench report: " + data.experiment.filename().string()));
        writer.setCreator("kvwb " + QString(core::appVersion()));
        doc.setPageSize(writer.pageLayout().paintRectPixels(96).size());
        doc.print(&writer);
    }
    buffer.close();
    const fs::path pdf = outDir / "report.pdf";
    writeAtomic(pdf, std::string_view(bytes.constData(), size_t(bytes.size())));
    return {pdf};
}

std::string reportJson(const ReportData &d)
{
    const auto &p = d.provenance;
    const auto &e = d.environment;
    json j = {{"format", "kvwb-report/1"},
              {"experiment",
               {{"path", d.experiment.string()},
                {"file_bytes", d.fileBytes},
                {"schema", d.schema},
                {"prompts", d.prompts},
                {"tokens", {{"a", d.tokensA}, {"b", d.tokensB}}},
                {"storage", storageJson(d.storage)}}},
              {"provenance",
               {{"app_version", p.appVersion},
                {"git_commit", p.gitCommit},
                {"qt_version", p.qtVersion},
                {"torch_version", p.torchVersion},
                {"hdf5_version", p.hdf5Version},
                {"device", p.device},
                {"created_utc", p.createdUtc},
                {"run_id", p.runId},
                {"config_sha256", p.configSha256}}},
              {"environment",
               {{"app_version", e.appVersion},
                {"git_commit", e.gitCommit},
                {"qt_version", e.qtVersion},
                {"cpu_model", e.cpuModel},
                {"threads", e.threads},
                {"os", e.os},
                {"created_utc", e.createdUtc}}},
              {"models", {{"a", modelJson(d.modelA)}, {"b", modelJson(d.modelB)}}},
              {"configuration", {{"sha256", d.configSha256}, {"settings", json::parse(d.configJson)}}},
              {"converters", json::array()},
              {"sweeps", json::array()},
              {"ledgers", json::array()},
              {"comparisons", json::array()},
              {"warnings", d.warnings}};
    for (const auto &r : d.converters) {
        json c = converterSettingsJson(r);
        c["name"] = r.name;
        c["created_utc"] = r.createdUtc;
        c["app_version"] = r.appVersion;
        c["git_commit"] = r.gitCommit;
        json layers = json::array();
        for (const auto &l : r.layers) {
            json maps = json::array();
            for (const auto *kind : {&l.keys, &l.values})
                for (const auto &m : *kind)
                    maps.push_back({{"kind", kind == &l.keys ? "keys" : "values"},
                                    {"input_dim", m.inputDim},
                                    {"output_dim", m.outputDim},
                                    {"lambda", m.lambda}});
            layers.push_back({{"target_layer", l.targetLayer},
                              {"source_layers", l.sourceLayers},
                              {"head_matched", l.headMatched},
                              {"maps", maps}});
        }
        c["layers"] = layers;
        c["layer_metrics"] = tableJson(r.layerMetrics);
        c["head_metrics"] = tableJson(r.headMetrics);
        c["cka_keys"] = matrixJson(r.ckaKeys);
        c["cka_values"] = matrixJson(r.ckaValues);
        j["converters"].push_back(c);
    }
    for (const auto &s : d.sweeps)
        j["sweeps"].push_back(
            {{"name", s.name}, {"settings", parseSettings(s.settingsJson)}, {"table", tableJson(s.table)}});
    for (const auto &l : d.ledgers) {
        json rows = json::array();
        for (const auto &r : l.rows)
            rows.push_back(ledgerRowJson(r));
        j["ledgers"].push_back({{"name", l.name},
                                {"settings", parseSettings(l.settingsJson)},
                                {"summary", summaryJson(l.summary)},
                                {"rows", rows}});
    }
    for (const auto &c : d.comparisons) {
        json samples = json::array();
        for (const auto &s : c.samples)
            samples.push_back(json::parse(core::comparisonSampleJson(s)));
        j["comparisons"].push_back({{"name", c.name}, {"samples", samples}});
    }
    return j.dump(1);
}

std::vector<fs::path> writeCsvJson(ReportData &data, const fs::path &outDir)
{
    ensureDir(outDir);
    const fs::path csvDir = outDir / "csv";
    ensureDir(csvDir);
    std::vector<fs::path> written;
    const auto put = [&](const fs::path &path, const std::string &text) {
        writeAtomic(path, text);
        written.push_back(path);
    };
    put(outDir / "report.json", reportJson(data));
    {
        std::string models = "field,a,b\n";
        const json a = modelJson(data.modelA), b = modelJson(data.modelB);
        for (auto it = a.begin(); it != a.end(); ++it) {
            const auto text = [](const json &v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
            models += csvField(it.key()) + "," + csvField(text(it.value())) + "," +
                      csvField(text(b[it.key()])) + "\n";
        }
        put(csvDir / "models.csv", models);
    }
    {
        const auto &p = data.provenance;
        const auto &e = data.environment;
        std::string env = "field,experiment_file,this_report\n";
        const std::vector<std::array<std::string, 3>> rows = {
            {"app_version", p.appVersion, e.appVersion},
            {"git_commit", p.gitCommit, e.gitCommit},
            {"qt_version", p.qtVersion, e.qtVersion},
            {"torch_version", p.torchVersion, ""},
            {"hdf5_version", p.hdf5Version, ""},
            {"device_or_cpu", p.device, e.cpuModel},
            {"threads", "", std::to_string(e.threads)},
            {"created_utc", p.createdUtc, e.createdUtc},
            {"run_id", p.runId, ""},
            {"config_sha256", p.configSha256, data.configSha256}};
        for (const auto &r : rows)
            env += csvField(r[0]) + "," + csvField(r[1]) + "," + csvField(r[2]) + "\n";
        put(csvDir / "environment.csv", env);
    }
    for (const auto &r : data.converters) {
        const std::string stem = "converter_" + safeName(r.name);
        put(csvDir / (stem + "_layers.csv"), tableCsv(r.layerMetrics));
        put(csvDir / (stem + "_heads.csv"), tableCsv(r.headMetrics));
        put(csvDir / (stem + "_cka_keys.csv"), matrixCsv(r.ckaKeys));
        put(csvDir / (stem + "_cka_values.csv"), matrixCsv(r.ckaValues));
    }
    for (const auto &s : data.sweeps)
        put(csvDir / ("sweep_" + safeName(s.name) + ".csv"), tableCsv(s.table));
    for (const auto &l : data.ledgers) {
        put(csvDir / ("ledger_" + safeName(l.name) + ".csv"), core::ledgerToCsv(l.rows));
        std::string tiers =
            "tier,requests,hits,false_hits,tokens_reused,tokens_computed,ttft_ms_p50,ttft_ms_p95,"
            "ttft_ms_p99\n";
        for (const auto &[kind, a] : l.summary.tiers)
            tiers += fmt::format("{},{},{},{},{},{},{},{},{}\n", core::tierKindName(kind), a.requests, a.hits,
                                 a.falseHits, a.tokensReused, a.tokensComputed, exact(a.ttftMsP50),
                                 exact(a.ttftMsP95), exact(a.ttftMsP99));
        put(csvDir / ("ledger_" + safeName(l.name) + "_tiers.csv"), tiers);
    }
    if (!data.comparisons.empty())
        put(csvDir / "comparisons.csv", comparisonsCsv(data.comparisons));
    return written;
}

} // namespace kvwb::ui
