// `kvwb replay`: a workload through a stack of cache tiers with real model calls, with a
// per-request ledger (CSV and/or the experiment file). Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdReplay(const QStringList &args);

} // namespace kvwb::app
