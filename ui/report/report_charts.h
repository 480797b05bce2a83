// Report charts: the report's figures drawn offscreen from a ReportData, per converter (fit quality
// per layer; CKA and per-head heatmaps in ui/charts/color_map.h's viridis, as the Alignment panel
// draws them), per sweep (scores against the swept variables) and per replay ledger (hit rate, TTFT
// and tokens by tier). Line and bar charts are Qt Charts grabbed at kChartWidth x kChartHeight;
// heatmaps are painted with QPainter and sized by their cells (layout in docs/reports.md, "Charts").
//
// Drawing needs a QApplication (any platform: offscreen works) and runs on its thread; without one
// renderCharts returns nothing and adds a warning to ReportData::warnings. Each ReportChart owns its
// image; renderCharts keeps no state.
#pragma once

#include "ui/report/report_data.h"

#include <QByteArray>
#include <QImage>

#include <string>
#include <vector>

namespace kvwb::ui {

// One rendered chart; id is a file-name-safe stem (e.g. "converter_c1_layers").
struct ReportChart
{
    std::string id;
    std::string title;
    std::string caption; // one sentence on how to read it
    QImage image;
};

// True when charts can be drawn (a QApplication exists).
bool canRenderCharts();
// Every chart of the report, in report order; empty (and a warning added) when !canRenderCharts().
std::vector<ReportChart> renderCharts(ReportData &data);

namespace report {

// Size of every Qt Charts image, px; HTML shows every chart at this width.
inline constexpr int kChartWidth = 900;
inline constexpr int kChartHeight = 480;

// The chart's image as PNG bytes (what charts/<id>.png and the HTML data URIs hold).
QByteArray pngBytes(const QImage &image);

} // namespace report

} // namespace kvwb::ui
