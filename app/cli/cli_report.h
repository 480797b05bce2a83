// `kvwb report`: an experiment file's report (HTML, PDF, Markdown, CSV/JSON) written headless.
// Conventions as in app/cli/cli.h. Charts and the PDF need the process to run a QApplication (any
// platform; offscreen without a display); under a bare QCoreApplication the report leaves the charts
// out with a warning and fails (exit 1) only when a PDF was asked for.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdReport(const QStringList &args);

} // namespace kvwb::app
