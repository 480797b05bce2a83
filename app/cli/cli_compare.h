// `kvwb compare`: B from scratch vs B from A's converted cache vs A, per prompt and over a set.
// Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdCompare(const QStringList &args);

} // namespace kvwb::app
