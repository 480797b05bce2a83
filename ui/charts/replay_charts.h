// The Replay panel's live charts, in a 2 x 2 grid over "requests replayed":
//   hit rate by tier: cumulative share of requests each tier answered, plus all tiers together (%);
//   false-hit rate: cumulative false hits / response (exact + semantic) hits (%), as core::summarize;
//   TTFT p50 and p95 over a sliding window of the last requests (ms);
//   tokens reused from caches and tokens computed, cumulative (thousands).
//
// Fed in batches (addRows from a GUI timer, ~10 per second, never per row). Stays smooth on long
// runs: each series keeps at most MaxPoints points (one point every `stride` requests; when the
// limit is reached every other point is dropped and the stride doubles), plus the current value
// as its last point, so the line always ends at the exact value so far. One QLineSeries::replace
// and one axis rescale per series per batch; no animations.
//
// GUI-thread only (a QWidget). Owns its charts; keeps counters, not the rows.
#pragma once

#include "core/ledger/replay_ledger.h"

#include <QWidget>

#include <deque>
#include <functional>
#include <map>
#include <set>

class QChart;
class QChartView;
class QLineSeries;
class QValueAxis;

namespace kvwb::ui {

class ReplayCharts : public QWidget
{
    Q_OBJECT

public:
    static constexpr int MaxPoints = 1000;

    enum class Chart
    {
        HitRate,
        FalseHitRate,
        Latency,
        Tokens
    };

    explicit ReplayCharts(QWidget *parent = nullptr);
    ~ReplayCharts() override;

    void addRows(const std::vector<core::LedgerRow> &rows);
    void clear();

    int64_t requestCount() const { return m_requests; }
    QChartView *chartView(Chart chart) const;
    // The hit-rate line of one tier, or of all tiers together for TierKind::None; nullptr for a
    // tier not seen yet.
    QLineSeries *hitRateSeries(core::TierKind tier) const;
    QLineSeries *falseHitRateSeries() const;
    QLineSeries *ttftSeries(int percentile) const; // 50 or 95
    QLineSeries *tokensReusedSeries() const;
    QList<QLineSeries *> allSeries() const;

    // A second ledger beside the one shown, drawn over it dotted and paler ("<name>: all tiers",
    // its false-hit rate, TTFT p50/p95, tokens reused and computed), the x axes spanning both.
    // Empty rows remove it. It stays through clear() and addRows(): the shown ledger can change
    // under it.
    void setReference(const std::vector<core::LedgerRow> &rows, const QString &name);
    QString referenceName() const { return m_refName; }
    int64_t referenceRequestCount() const { return m_refRequests; }
    QList<QLineSeries *> referenceSeries() const;

    QSize sizeHint() const override { return {1000, 700}; }

private:
    // One line: its decimated history and how to read its current value from the counters.
    struct Track
    {
        QLineSeries *series = nullptr;
        QList<QPointF> points; // sampled at x = stride, 2 stride, ... (requests replayed)
        std::function<double()> value;
    };
    struct ChartParts
    {
        QChartView *view = nullptr;
        QChart *chart = nullptr;
        QValueAxis *x = nullptr;
        QValueAxis *y = nullptr;
    };

    ChartParts makeChart(const QString &title, const QString &yTitle);
    Track &addTrack(ChartParts &chart, const QString &name, const QColor &color,
                    std::function<double()> value, Qt::PenStyle style = Qt::SolidLine);
    void ensureTier(core::TierKind tier);
    void hideTiers();
    void sample();
    void publish();
    void rescale(ChartParts &chart, const std::vector<const Track *> &tracks, double cap);
    double windowPercentile(double p);

    ChartParts m_hit, m_falseHit, m_latency, m_tokens;
    std::map<core::TierKind, Track> m_tierTracks; // every tier, shown once seen
    std::set<core::TierKind> m_seenTiers;
    Track *m_anyTier = nullptr;
    Track *m_falseHitTrack = nullptr;
    Track *m_p50 = nullptr, *m_p95 = nullptr;
    Track *m_reused = nullptr, *m_computed = nullptr;
    std::deque<Track> m_fixedTracks; // stable addresses for the pointers above

    int64_t m_stride = 1;
    int64_t m_requests = 0;
    int64_t m_hits = 0;
    std::map<core::TierKind, int64_t> m_tierHits;
    int64_t m_responseHits = 0;
    int64_t m_falseHits = 0;
    int64_t m_tokensReused = 0;
    int64_t m_tokensComputed = 0;
    // The reference ledger's lines (each in one of the charts above) and its length.
    std::vector<QLineSeries *> m_refSeries;
    QString m_refName;
    int64_t m_refRequests = 0;
    const int m_window = 500;        // requests in the TTFT percentile window
    std::deque<double> m_ttftWindow; // [<= m_window] TTFT ms of the latest requests
};

} // namespace kvwb::ui
