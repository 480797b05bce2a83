// A threshold sweep drawn (the Replay step's threshold sweep window): precision, recall and
// false-hit rate against the threshold, one line each, and the chosen threshold marked where its
// precision and recall lie. The similarity sweep and the verifier's sweep draw the same way.
//
// GUI-thread only (a QChartView). Owns its chart and series. No animations.
#pragma once

#include "core/cache/semantic_sweep.h"

#include <QChartView>

#include <optional>
#include <vector>

class QLineSeries;
class QScatterSeries;

namespace kvwb::ui {

class ThresholdCurveChart : public QChartView
{
    Q_OBJECT

public:
    explicit ThresholdCurveChart(QWidget *parent = nullptr);

    // points: ascending thresholds. marked: the threshold to mark (the suggested or the selected
    // one); nothing is marked when it is not a point's threshold. xTitle names the threshold.
    void setPoints(const std::vector<core::SweepPoint> &points, std::optional<double> marked,
                   const QString &xTitle, const QString &title);
    // Moves the mark to another of the points' thresholds (a selected table row).
    void mark(std::optional<double> threshold);

    QLineSeries *precisionSeries() const { return m_precision; }
    QLineSeries *recallSeries() const { return m_recall; }
    QLineSeries *falseHitSeries() const { return m_falseHits; }
    QScatterSeries *markSeries() const { return m_mark; }

    QSize sizeHint() const override { return {560, 300}; }

private:
    QLineSeries *m_precision = nullptr, *m_recall = nullptr, *m_falseHits = nullptr;
    QScatterSeries *m_mark = nullptr;
    std::vector<core::SweepPoint> m_points;
};

} // namespace kvwb::ui
