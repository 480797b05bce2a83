// `kvwb sweep`: converter quality over k x lambda x calibration tokens, stored as a table.
// Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdSweep(const QStringList &args);

} // namespace kvwb::app
