// `kvwb archive export|import|show`: a whole run as one zip file (core/settings/run_archive.h), with
// core/ only, so the light `kvwb` front end runs it. Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdArchive(const QStringList &args);

} // namespace kvwb::app
