// `kvwb bench-transfer`: conversion time against B's prefill at several prompt lengths.
// Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdBenchTransfer(const QStringList &args);

} // namespace kvwb::app
