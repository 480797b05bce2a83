// Report data: everything an experiment file holds (provenance, both models, converters with their
// metrics and CKA matrices, sweep tables, replay ledgers, comparison samples) gathered into one value,
// and its machine-readable forms, report.json and csv/*.csv (layout in docs/reports.md). No Qt types:
// the charts (report_charts.h) and the documents (report_builder.h) are drawn from this value.
//
// collectReport reads the file through core/ (ExperimentReader, the converter and ledger stores), so
// it belongs on the thread that owns HDF5 (the engine thread in the GUI, the main thread in
// `kvwb report`). reportJson and writeCsvJson only read the ReportData they are given; ReportData is a
// plain value that owns all its strings and tables. Files are written to NAME.tmp and renamed into
// place (core/util/atomic_file.h). Errors: core::Error naming the file (Io for an unwritable directory).
#pragma once

#include "core/ledger/replay_ledger.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::ui {

// The machine and build that wrote the report (the file's provenance says who wrote the data).
struct ReportEnvironment
{
    std::string appVersion;
    std::string gitCommit;
    std::string qtVersion; // run time, qVersion()
    std::string cpuModel;  // /proc/cpuinfo "model name"; "unknown" elsewhere
    int threads = 0;       // std::thread::hardware_concurrency()
    std::string os;        // QSysInfo::prettyProductName()
    std::string createdUtc;
};

struct ReportSweep
{
    std::string name;
    core::MetricTable table;
    std::string settingsJson;
};

struct ReportLedger
{
    std::string name;
    std::vector<core::LedgerRow> rows;
    core::LedgerSummary summary; // core::summarize(rows) at the default prices
    std::string settingsJson;
};

// One saved comparison list (/comparisons/<name>): prompts answered by A, by B from scratch and by
// B from A's converted cache.
struct ReportComparisons
{
    std::string name;
    std::vector<core::ComparisonSample> samples;
};

// The PDF's paper: A4 (210 x 297 mm) or US Letter (8.5 x 11 in), 15 mm margins.
enum class PaperSize
{
    A4,
    Letter
};

struct ReportData
{
    PaperSize paper = PaperSize::A4; // the PDF's (writePdf, layoutPdf); the other formats have none
    std::filesystem::path experiment;
    uint64_t fileBytes = 0;
    std::string schema;
    core::Provenance provenance;
    core::ModelInfo modelA;
    core::ModelInfo modelB;
    core::ExperimentOptions storage;
    int prompts = 0;
    int64_t tokensA = 0; // KV rows of model A (all prompts)
    int64_t tokensB = 0;
    // Converters without their weights (KvMap::weight/bias emptied: a 22-layer pair carries
    // ~100 MB of them, and a report shows only dimensions, lambdas and metrics).
    std::vector<core::ConverterRecord> converters;
    std::vector<ReportSweep> sweeps;
    std::vector<ReportLedger> ledgers;
    std::vector<ReportComparisons> comparisons;
    ReportEnvironment environment;
    // Canonical JSON (sorted keys, no spaces) of every setting that determined the numbers: storage,
    // model fingerprints, the capture's config hash, each converter's fit settings and splits, each
    // sweep's and ledger's settings, and (only when the file holds comparison lists) the converters
    // each list's samples were produced with. configSha256 is its sha256 (hex).
    std::string configJson;
    std::string configSha256;
    std::vector<std::string> warnings; // e.g. charts left out
};

// One row of the environment table: the experiment file's provenance beside the environment that
// writes the report. The rows are listed once, for csv/environment.csv and the document's Environment
// section. A missing cell (nullopt: not recorded on that side) is empty in the CSV and "-" in the
// document.
struct EnvironmentRow
{
    std::string key;                       // environment.csv's field; empty: the document only
    std::string label;                     // the document's row label
    std::optional<std::string> experiment; // the file's provenance
    std::optional<std::string> report;     // what writes the report
    bool reportInDocument = true;          // false: the document states it elsewhere ("-" in its row)
};

std::vector<EnvironmentRow> environmentRows(const ReportData &data);

// Reads everything. Error(Io) naming a missing/unreadable file; Error(Format) for a damaged one.
ReportData collectReport(const std::filesystem::path &experiment);

// report.json (everything, numbers exact: shortest round-trip form, NaN/inf as null) and one CSV per
// table under csv/ (numbers in shortest round-trip form; nan/inf spelled so); csv/comparisons.csv
// (one row per comparison sample) when the file holds comparison lists. Creates outDir if needed and
// returns the files it wrote.
std::vector<std::filesystem::path> writeCsvJson(ReportData &data, const std::filesystem::path &outDir);

// report.json's text (exposed for tests and File > Export).
std::string reportJson(const ReportData &data);

} // namespace kvwb::ui
