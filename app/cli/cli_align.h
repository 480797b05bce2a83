// `kvwb align` (fit and store KV converters), `kvwb sweep` (k x lambda x calibration-size tables),
// `kvwb compare` (B from scratch vs B from A's converted cache vs A) and `kvwb bench-transfer`
// (conversion vs prefill time). Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdAlign(const QStringList &args);
int cmdSweep(const QStringList &args);
int cmdCompare(const QStringList &args);
int cmdBenchTransfer(const QStringList &args);

} // namespace kvwb::app
