#include "ui/report/report_builder.h"

#include "core/util/atomic_file.h"
#include "core/util/build_info.h"
#include "core/util/error.h"
#include "ui/report/report_document.h"
#include "ui/report/report_pages.h"
#include "ui/report/report_text.h"

#include <QBuffer>
#include <QFont>
#include <QPageLayout>
#include <QPageSize>
#include <QPdfWriter>
#include <QTextDocument>
#include <QUrl>

#include <memory>
#include <string_view>

namespace kvwb::ui {

namespace {

namespace fs = std::filesystem;
using report::ensureDir;
using report::kChartWidth;
using report::pngBytes;

const std::vector<ReportChart> &chartsOf(ReportData &data, std::vector<ReportChart> &storage)
{
    storage = renderCharts(data);
    return storage;
}

} // namespace

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
        core::writeFileAtomic(png, std::string_view(bytes.constData(), size_t(bytes.size())));
        written.push_back(png);
    }
    const fs::path md = outDir / "report.md";
    core::writeFileAtomic(md, report::renderMarkdown(data, charts));
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
    core::writeFileAtomic(
        html, report::renderHtml(data, charts, "KV Workbench report: " + data.experiment.filename().string(),
                                 true, dataUri, kChartWidth));
    return {html};
}

namespace {

QPageLayout pageLayout(PaperSize paper)
{
    return QPageLayout(QPageSize(paper == PaperSize::Letter ? QPageSize::Letter : QPageSize::A4),
                       QPageLayout::Portrait, QMarginsF(15, 15, 15, 15), QPageLayout::Millimeter);
}

} // namespace

std::unique_ptr<QTextDocument> layoutPdf(ReportData &data, QSizeF *pagePixels)
{
    std::vector<ReportChart> storage;
    const auto &charts = chartsOf(data, storage);
    auto doc = std::make_unique<QTextDocument>();
    QFont font("DejaVu Sans");
    font.setPointSize(8);
    doc->setDefaultFont(font);
    for (const auto &c : charts)
        doc->addResource(QTextDocument::ImageResource, QUrl(QString::fromStdString("chart:" + c.id)),
                         c.image);
    // A4 at 15 mm margins leaves 180 mm; QTextDocument lays out at the writer's 96 dpi-ish logical
    // resolution, so a 640 px wide image fills about the text width.
    doc->setHtml(QString::fromStdString(report::renderHtml(
        data, charts, "KV Workbench report", false, [](const ReportChart &c) { return "chart:" + c.id; },
        640)));
    const QSizeF size = pageLayout(data.paper).paintRectPixels(96).size();
    if (pagePixels)
        *pagePixels = size;
    doc->setPageSize(size);
    report::keepWithNext(*doc);
    return doc;
}

std::vector<fs::path> writePdf(ReportData &data, const fs::path &outDir)
{
    if (!canRenderCharts())
        throw core::Error(
            core::ErrorCode::Unsupported,
            "the PDF report needs a QApplication (run kvwb report with the offscreen platform)");
    ensureDir(outDir);
    const auto doc = layoutPdf(data);
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    {
        QPdfWriter writer(&buffer);
        writer.setPageLayout(pageLayout(data.paper));
        writer.setResolution(96);
        writer.setTitle(
            QString::fromStdString("KV Workbench report: " + data.experiment.filename().string()));
        writer.setCreator("kvwb " + QString(core::appVersion()));
        doc->print(&writer);
    }
    buffer.close();
    const fs::path pdf = outDir / "report.pdf";
    core::writeFileAtomic(pdf, std::string_view(bytes.constData(), size_t(bytes.size())));
    return {pdf};
}

} // namespace kvwb::ui
