#include "app/cli/cli_report.h"

#include "app/cli/cli_util.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "ui/report/report_builder.h"

#include <QCommandLineParser>

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <set>

namespace kvwb::app {

namespace fs = std::filesystem;
using namespace kvwb::app::cli;

int cmdReport(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"experiment", "Experiment file (HDF5) to report on.", "EXP.h5"});
    p.addOption({"out", "Output directory (created if missing).", "DIR"});
    addForceOption(p);
    p.addOption({"format",
                 "Comma-separated: html, pdf, md, csv (csv includes report.json). Default: all four.", "LIST",
                 "html,pdf,md,csv"});
    p.addOption({"paper", "The PDF's paper: a4 or letter (15 mm margins).", "SIZE", "a4"});
    parse(p, args,
          "Write a report of an experiment file: provenance, models, converters, sweeps and replay ledgers, "
          "with charts (docs/reports.md).");
    if (!p.isSet("experiment") || !p.isSet("out"))
        throw UsageError{"--experiment and --out are required"};
    std::set<std::string> formats;
    for (const QString &f : p.value("format").split(',', Qt::SkipEmptyParts)) {
        std::string name = str(f.trimmed().toLower());
        if (name == "markdown")
            name = "md";
        if (name == "json")
            name = "csv";
        if (name != "html" && name != "pdf" && name != "md" && name != "csv")
            throw UsageError{
                fmt::format("--format: unknown format '{}' (expected html, pdf, md, csv)", name)};
        formats.insert(name);
    }
    if (formats.empty())
        throw UsageError{"--format: give at least one of html, pdf, md, csv"};

    const QString paper = p.value("paper").trimmed().toLower();
    if (paper != "a4" && paper != "letter")
        throw UsageError{fmt::format("--paper: '{}' is not a4 or letter", str(paper))};
    const fs::path experiment = str(p.value("experiment"));
    const fs::path out = outputDirectoryOption(p, "out");
    ui::ReportData data = ui::collectReport(experiment);
    data.paper = paper == "letter" ? ui::PaperSize::Letter : ui::PaperSize::A4;
    const bool pdfImpossible = formats.count("pdf") && !ui::canRenderCharts();
    core::startOutputDirectory(out);
    std::vector<fs::path> written;
    const auto add = [&](std::vector<fs::path> files) {
        written.insert(written.end(), files.begin(), files.end());
    };
    if (formats.count("csv"))
        add(ui::writeCsvJson(data, out));
    if (formats.count("md"))
        add(ui::writeMarkdown(data, out));
    if (formats.count("html"))
        add(ui::writeHtml(data, out));
    if (formats.count("pdf") && !pdfImpossible)
        add(ui::writePdf(data, out));
    for (const auto &f : written)
        std::printf("wrote %s\n", f.string().c_str());
    for (const auto &w : data.warnings)
        std::fprintf(stderr, "kvwb report: warning: %s\n", w.c_str());
    std::printf("configuration sha256 %s\n", data.configSha256.c_str());
    if (pdfImpossible) {
        std::fprintf(
            stderr,
            "kvwb report: error [%s]: %s not written: the PDF needs a QApplication (this kvwb's main "
            "creates a QCoreApplication for subcommands)\n",
            core::errorCodeName(core::ErrorCode::Unsupported), (out / "report.pdf").string().c_str());
        return 1;
    }
    return 0;
}

} // namespace kvwb::app
