#include "ui/charts/replay_charts.h"

#include "ui/charts/chart_style.h"

#include <QChart>
#include <QChartView>
#include <QGridLayout>
#include <QLineSeries>
#include <QValueAxis>

#include <algorithm>
#include <cmath>

namespace kvwb::ui {

namespace {

QString tierLegend(core::TierKind tier)
{
    switch (tier) {
    case core::TierKind::Exact:
        return QObject::tr("exact");
    case core::TierKind::Semantic:
        return QObject::tr("semantic");
    case core::TierKind::Prefix:
        return QObject::tr("prefix KV");
    case core::TierKind::Cross:
        return QObject::tr("cross-model KV");
    case core::TierKind::Knowledge:
        return QObject::tr("knowledge");
    case core::TierKind::None:
        break;
    }
    return QObject::tr("all tiers");
}

double percentOf(int64_t part, int64_t whole)
{
    return whole > 0 ? 100.0 * double(part) / double(whole) : 0.0;
}

} // namespace

ReplayCharts::ReplayCharts(QWidget *parent) : QWidget(parent)
{
    m_hit = makeChart(tr("Hit rate by tier (cumulative)"), tr("% answered"));
    m_falseHit = makeChart(tr("False-hit rate (cumulative)"), tr("% of hits"));
    m_latency = makeChart(tr("Time to first token (last %1 requests)").arg(m_window), tr("TTFT (ms)"));
    m_tokens = makeChart(tr("Tokens reused vs. computed (cumulative)"), tr("k tokens"));

    auto track = [this](ChartParts &chart, const QString &name, const QColor &color,
                        std::function<double()> f, Qt::PenStyle style = Qt::SolidLine) {
        return &addTrack(chart, name, color, std::move(f), style);
    };
    // Every tier's series exists from the start; it joins the chart when the tier is first seen.
    for (auto tier : {core::TierKind::Exact, core::TierKind::Semantic, core::TierKind::Prefix,
                      core::TierKind::Cross, core::TierKind::Knowledge}) {
        Track *t = track(m_hit, tierLegend(tier), tierColor(tier),
                         [this, tier] { return percentOf(m_tierHits[tier], m_requests); });
        m_hit.chart->removeSeries(t->series);
        t->series->setParent(this); // owned here while not in the chart
        m_tierTracks.emplace(tier, std::move(*t));
        m_fixedTracks.pop_back();
    }
    m_anyTier = track(
        m_hit, tierLegend(core::TierKind::None), QColor(0x30, 0x30, 0x30),
        [this] { return percentOf(m_hits, m_requests); }, Qt::DashLine);
    m_falseHitTrack = track(m_falseHit, tr("false hits / response hits"), QColor(0xd6, 0x27, 0x28),
                            [this] { return percentOf(m_falseHits, m_responseHits); });
    m_p50 =
        track(m_latency, tr("p50 (median)"), percentileColor(50), [this] { return windowPercentile(50); });
    m_p95 = track(m_latency, tr("p95"), percentileColor(95), [this] { return windowPercentile(95); });
    m_reused = track(m_tokens, tr("reused from caches"), reusedTokensColor(),
                     [this] { return double(m_tokensReused) / 1000.0; });
    m_computed = track(m_tokens, tr("computed"), computedTokensColor(),
                       [this] { return double(m_tokensComputed) / 1000.0; });

    auto *grid = new QGridLayout(this);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->setSpacing(4);
    grid->addWidget(m_hit.view, 0, 0);
    grid->addWidget(m_falseHit.view, 0, 1);
    grid->addWidget(m_latency.view, 1, 0);
    grid->addWidget(m_tokens.view, 1, 1);
    publish();
}

ReplayCharts::~ReplayCharts() = default;

ReplayCharts::ChartParts ReplayCharts::makeChart(const QString &title, const QString &yTitle)
{
    ChartParts parts;
    parts.chart = new QChart;
    applyChartStyle(parts.chart);
    parts.chart->setTitle(title);
    parts.x = new QValueAxis;
    styleAxis(parts.x, tr("requests replayed"));
    parts.x->setLabelFormat("%.0f");
    parts.y = new QValueAxis;
    styleAxis(parts.y, yTitle);
    parts.chart->addAxis(parts.x, Qt::AlignBottom);
    parts.chart->addAxis(parts.y, Qt::AlignLeft);
    parts.view = new QChartView(parts.chart, this);
    parts.view->setRenderHint(QPainter::Antialiasing);
    parts.view->setMinimumSize(300, 170);
    return parts;
}

ReplayCharts::Track &ReplayCharts::addTrack(ChartParts &chart, const QString &name, const QColor &color,
                                            std::function<double()> value, Qt::PenStyle style)
{
    Track t;
    t.series = new QLineSeries;
    t.series->setName(name);
    QPen pen(color);
    pen.setWidthF(2);
    pen.setStyle(style);
    t.series->setPen(pen);
    t.value = std::move(value);
    chart.chart->addSeries(t.series);
    t.series->attachAxis(chart.x);
    t.series->attachAxis(chart.y);
    // Tier tracks live in m_tierTracks; the fixed ones here. Both containers keep addresses stable.
    m_fixedTracks.push_back(std::move(t));
    return m_fixedTracks.back();
}

void ReplayCharts::ensureTier(core::TierKind tier)
{
    if (tier == core::TierKind::None || m_seenTiers.count(tier))
        return;
    // A tier's line and legend entry appear when the stack first reports it, so a stack without
    // the semantic tier shows no flat "semantic" line at 0 %. Its history is already there: zeros
    // at every sample so far, which is what it answered. Rows list their tiers in stack order, so
    // the legend comes out in stack order too.
    m_seenTiers.insert(tier);
    QLineSeries *series = m_tierTracks.at(tier).series;
    m_hit.chart->addSeries(series);
    series->attachAxis(m_hit.x);
    series->attachAxis(m_hit.y);
}

void ReplayCharts::hideTiers()
{
    for (core::TierKind tier : m_seenTiers) {
        QLineSeries *series = m_tierTracks.at(tier).series;
        m_hit.chart->removeSeries(series);
        series->setParent(this); // owned here while not in the chart
    }
    m_seenTiers.clear();
}

double ReplayCharts::windowPercentile(double p)
{
    return core::percentile(std::vector<double>(m_ttftWindow.begin(), m_ttftWindow.end()), p);
}

void ReplayCharts::sample()
{
    const double x = double(m_requests);
    for (auto &t : m_fixedTracks)
        t.points << QPointF(x, t.value());
    for (auto &[tier, t] : m_tierTracks)
        t.points << QPointF(x, t.value());
    if (m_anyTier->points.size() <= MaxPoints)
        return;
    // Points sit at x = stride * (i + 1); keeping the odd i leaves x = 2 stride * (j + 1), evenly
    // spaced again at twice the stride.
    const auto thin = [](QList<QPointF> &points) {
        QList<QPointF> kept;
        kept.reserve(points.size() / 2 + 1);
        for (qsizetype i = 1; i < points.size(); i += 2)
            kept << points[i];
        points = std::move(kept);
    };
    for (auto &t : m_fixedTracks)
        thin(t.points);
    for (auto &[tier, t] : m_tierTracks)
        thin(t.points);
    m_stride *= 2;
}

void ReplayCharts::addRows(const std::vector<core::LedgerRow> &rows)
{
    if (rows.empty())
        return;
    for (const core::LedgerRow &r : rows) {
        for (const auto &[tier, hit] : r.tierHits)
            ensureTier(tier);
        ensureTier(r.answeredBy);
        ++m_requests;
        if (r.answeredBy != core::TierKind::None) {
            ++m_hits;
            ++m_tierHits[r.answeredBy];
        }
        if (r.answeredBy == core::TierKind::Exact || r.answeredBy == core::TierKind::Semantic ||
            r.answeredBy == core::TierKind::Knowledge) {
            ++m_responseHits;
            m_falseHits += r.falseHit ? 1 : 0;
        }
        m_tokensReused += r.tokensReused;
        m_tokensComputed += r.tokensComputed;
        m_ttftWindow.push_back(r.ttftMs);
        if (int(m_ttftWindow.size()) > m_window)
            m_ttftWindow.pop_front();
        if (m_requests % m_stride == 0)
            sample();
    }
    publish();
}

void ReplayCharts::publish()
{
    // The history plus the value right now, unless the last sample is already now.
    const auto show = [this](Track &t) {
        QList<QPointF> points = t.points;
        if (m_requests > 0 && (points.isEmpty() || points.back().x() != double(m_requests)))
            points << QPointF(double(m_requests), t.value());
        t.series->replace(points);
    };
    for (auto &t : m_fixedTracks)
        show(t);
    std::vector<const Track *> hitTracks{m_anyTier};
    for (auto &[tier, t] : m_tierTracks) {
        show(t);
        if (m_seenTiers.count(tier))
            hitTracks.push_back(&t);
    }
    rescale(m_hit, hitTracks, 100);
    rescale(m_falseHit, {m_falseHitTrack}, 100);
    rescale(m_latency, {m_p50, m_p95}, 0);
    rescale(m_tokens, {m_reused, m_computed}, 0);
}

void ReplayCharts::rescale(ChartParts &chart, const std::vector<const Track *> &tracks, double cap)
{
    double top = 0;
    for (const Track *t : tracks)
        for (const QPointF &p : t->series->points())
            top = std::max(top, p.y());
    for (const QLineSeries *s : m_refSeries)
        if (s->chart() == chart.chart)
            for (const QPointF &p : s->points())
                top = std::max(top, p.y());
    // Headroom above the highest line, then round numbers; percentages run 0-5 at least (an empty
    // chart's 0-1 read as a fraction) and stop at 100.
    top = top > 0 ? top * 1.1 : 1.0;
    if (cap > 0)
        top = std::clamp(top, 5.0, cap);
    chart.y->setRange(0, top);
    chart.y->applyNiceNumbers();
    const double shown = chart.y->max();
    chart.y->setLabelFormat(shown >= 10 ? "%.0f" : shown >= 1 ? "%.1f" : "%.2f");
    setCountAxis(chart.x, double(std::max(m_requests, m_refRequests)), 10);
}

void ReplayCharts::clear()
{
    m_requests = m_hits = m_responseHits = m_falseHits = m_tokensReused = m_tokensComputed = 0;
    m_tierHits.clear();
    m_ttftWindow.clear();
    m_stride = 1;
    hideTiers();
    for (auto &t : m_fixedTracks)
        t.points.clear();
    for (auto &[tier, t] : m_tierTracks)
        t.points.clear();
    publish();
}

QChartView *ReplayCharts::chartView(Chart chart) const
{
    switch (chart) {
    case Chart::HitRate:
        return m_hit.view;
    case Chart::FalseHitRate:
        return m_falseHit.view;
    case Chart::Latency:
        return m_latency.view;
    case Chart::Tokens:
        return m_tokens.view;
    }
    return nullptr;
}

QLineSeries *ReplayCharts::hitRateSeries(core::TierKind tier) const
{
    if (tier == core::TierKind::None)
        return m_anyTier->series;
    return m_seenTiers.count(tier) ? m_tierTracks.at(tier).series : nullptr;
}

QLineSeries *ReplayCharts::falseHitRateSeries() const
{
    return m_falseHitTrack->series;
}

QLineSeries *ReplayCharts::ttftSeries(int percentile) const
{
    return percentile == 95 ? m_p95->series : m_p50->series;
}

QLineSeries *ReplayCharts::tokensReusedSeries() const
{
    return m_reused->series;
}

void ReplayCharts::setReference(const std::vector<core::LedgerRow> &rows, const QString &name)
{
    for (QLineSeries *s : m_refSeries) {
        s->chart()->removeSeries(s);
        delete s;
    }
    m_refSeries.clear();
    m_refName = rows.empty() ? QString() : name;
    m_refRequests = int64_t(rows.size());
    if (!rows.empty()) {
        // The same lines, computed the same way, by a second (never shown) set of charts.
        ReplayCharts ref;
        ref.addRows(rows);
        const std::pair<ChartParts *, QLineSeries *> lines[] = {
            {&m_hit, ref.m_anyTier->series},   {&m_falseHit, ref.m_falseHitTrack->series},
            {&m_latency, ref.m_p50->series},   {&m_latency, ref.m_p95->series},
            {&m_tokens, ref.m_reused->series}, {&m_tokens, ref.m_computed->series}};
        for (const auto &[chart, from] : lines) {
            auto *s = new QLineSeries;
            s->setName(QStringLiteral("%1: %2").arg(name, from->name()));
            QPen pen = from->pen();
            QColor c = pen.color();
            c.setAlpha(150);
            pen.setColor(c);
            pen.setStyle(Qt::DotLine);
            s->setPen(pen);
            s->replace(from->points());
            chart->chart->addSeries(s);
            s->attachAxis(chart->x);
            s->attachAxis(chart->y);
            m_refSeries.push_back(s);
        }
    }
    publish();
}

QList<QLineSeries *> ReplayCharts::referenceSeries() const
{
    return QList<QLineSeries *>(m_refSeries.begin(), m_refSeries.end());
}

QList<QLineSeries *> ReplayCharts::allSeries() const
{
    QList<QLineSeries *> out;
    for (const auto &t : m_fixedTracks)
        out << t.series;
    for (core::TierKind tier : m_seenTiers)
        out << m_tierTracks.at(tier).series;
    return out;
}

} // namespace kvwb::ui
