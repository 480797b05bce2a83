// `kvwb upgrade`: rewrite an experiment file of an older kvwb as the current schema, with core/ only
// (no engine), so the light `kvwb` front end runs it. Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdUpgrade(const QStringList &args);

} // namespace kvwb::app
