// Shared look of the workbench's Qt Charts: readable fonts at ~800x500, no animations, and one
// colour per metric and per cache tier so the same thing has the same colour in every chart.
//
// GUI-thread only (touches QChart objects).
#pragma once

#include "core/ledger/replay_ledger.h"

#include <QColor>
#include <QString>

class QChart;
class QAbstractAxis;
class QValueAxis;

namespace kvwb::ui {

// Title, legend and axis fonts, margins, and QChart::NoAnimation.
void applyChartStyle(QChart *chart);
// Axis title font and grid colour.
void styleAxis(QAbstractAxis *axis, const QString &title);

// A 0..1 score axis (R^2, cosine) in steps of 0.2, reaching below 0 or above 1 only when the data
// does (R^2 is unbounded below: a bad fit must show how bad, not be clipped at 0).
void setScoreRange(QValueAxis *axis, double dataMin, double dataMax);

// A count axis (requests replayed, layers) that ends where the data ends: 0..max (at least
// minimum), labels at a round step (1, 2 or 5 times a power of ten, about 5 of them) from 0, so the
// last label may fall short of the end but the axis never runs past the data.
void setCountAxis(QValueAxis *axis, double max, double minimum = 1);
// The round step setCountAxis labels a 0..span axis with.
double roundStep(double span, int labels = 5);

QColor tierColor(core::TierKind tier);
// Prompt tokens reused from a cache / computed by the model (replay charts, window and report).
QColor reusedTokensColor();
QColor computedTokensColor();
// A latency percentile's colour: 50 blue, 95 red, 99 purple (window and report alike).
QColor percentileColor(int percentile);
// "r2_k" -> colour of keys, "r2_v" values, "attn_cos" attention; others a fallback palette by index.
QColor metricColor(const QString &metric, int fallbackIndex = 0);
// "r2_k" -> "R² of keys"; unknown names are returned as they are.
QString metricLabel(const QString &metric);

} // namespace kvwb::ui
