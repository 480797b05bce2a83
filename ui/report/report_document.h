// The report as one document: headings, paragraphs, tables, charts, comparison samples and the
// configuration, laid out once from a ReportData and rendered as Markdown or as HTML (the HTML file,
// and through QTextDocument the PDF). Internal to ui/report/; the writers are in report_builder.h.
//
// Thread-safety: pure functions over the data and charts they are given (no Qt objects are created,
// so any thread); the charts are referenced only while rendering. The result is the caller's.
#pragma once

#include "ui/report/report_charts.h"
#include "ui/report/report_data.h"

#include <functional>
#include <string>
#include <vector>

namespace kvwb::ui::report {

// Maps a chart to an image reference: a file path for Markdown, a data URI for HTML, a resource URL
// for PDF.
using ChartSource = std::function<std::string(const ReportChart &)>;

// report.md's text; charts as ![title](charts/<id>.png).
std::string renderMarkdown(const ReportData &data, const std::vector<ReportChart> &charts);
// An HTML page titled title; withCss adds the stylesheet (QTextDocument ignores most of it), charts are
// <img src="imageSrc(chart)" width="imageWidth">.
std::string renderHtml(const ReportData &data, const std::vector<ReportChart> &charts,
                       const std::string &title, bool withCss, const ChartSource &imageSrc, int imageWidth);

} // namespace kvwb::ui::report
