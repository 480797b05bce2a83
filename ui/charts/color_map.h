// The workbench's one colour map for value grids: viridis, dark blue-violet for low values to yellow
// for high ones. Perceptually uniform and readable by colour-blind users and in grey print, so equal
// steps in value look like equal steps in colour. The Alignment panel's heatmaps
// (ui/charts/heatmap_widget.h) and the report's heatmap images (ui/report/report_charts.h) both use
// it, so a CKA or R^2 map has the same colours on screen and in a report.
//
// Thread-safety: pure functions returning QColor values (no GUI objects), callable from any thread.
#pragma once

#include <QColor>

namespace kvwb::ui {

// The colour of t, a value already scaled to [0, 1] (clamped outside), linear in RGB between viridis
// at 9 evenly spaced stops. NaN and infinities: noValueColor().
QColor viridisColor(double t);
// Cells without a value: light grey, rgb(200, 200, 200), outside the viridis range.
QColor noValueColor();

} // namespace kvwb::ui
