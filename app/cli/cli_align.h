// `kvwb align`: fit layer-wise KV converters on an experiment file and store them. Conventions as
// in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdAlign(const QStringList &args);

} // namespace kvwb::app
