// Experiment reports: everything an experiment file holds (provenance, both models, converters with
// their metrics and CKA matrices, sweep tables, replay ledgers, comparison samples), gathered into one value
// and written as Markdown, one self-contained HTML file, PDF, and CSV/JSON (layout in docs/reports.md).
//
// The pieces: report_data.h gathers the ReportData and writes report.json and csv/ (no Qt types);
// report_charts.h draws the charts; this header's writers lay out one document (report_document.h)
// as Markdown, HTML or PDF. Including this header gives all of it.
//
// collectReport reads the file through core/ (ExperimentReader, the converter and ledger stores), so
// it belongs on the thread that owns HDF5 (the engine thread in the GUI, the main thread in
// `kvwb report`). The writers only read the ReportData they are given. Charts are drawn with Qt Charts
// and QPainter into QImages, which needs a QApplication (any platform: offscreen works); without one
// the writers leave charts out (ReportData::warnings says so) and writePdf throws Error(Unsupported).
// Every file is written to NAME.tmp and renamed into place (core/util/atomic_file.h), so a reader never
// sees half a report file. Errors: core::Error naming the file (Io for an unwritable directory).
#pragma once

#include "ui/report/report_charts.h"
#include "ui/report/report_data.h"

#include <QSizeF>

#include <filesystem>
#include <memory>
#include <vector>

class QTextDocument;

namespace kvwb::ui {

// Each writer creates outDir if needed and returns the files it wrote (writeCsvJson, with the same
// signature, is in report_data.h).
// report.md plus charts/<id>.png next to it (Markdown cannot embed images portably).
std::vector<std::filesystem::path> writeMarkdown(ReportData &data, const std::filesystem::path &outDir);
// report.html: one file, inline CSS, charts as data:image/png;base64 URIs, no external references.
std::vector<std::filesystem::path> writeHtml(ReportData &data, const std::filesystem::path &outDir);
// report.pdf on data.paper (A4 or Letter), charts as images. Error(Unsupported) without a QApplication.
std::vector<std::filesystem::path> writePdf(ReportData &data, const std::filesystem::path &outDir);
// The document writePdf prints: laid out on data.paper's pages (the page's paint area, in pixels at 96 dpi,
// in *pagePixels when given), with headings, charts and table labels kept with what follows
// (report_pages.h). Needs a QApplication for the charts.
std::unique_ptr<QTextDocument> layoutPdf(ReportData &data, QSizeF *pagePixels = nullptr);

} // namespace kvwb::ui
