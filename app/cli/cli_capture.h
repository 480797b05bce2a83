// `kvwb capture` (both models' KV caches for a prompt set into an HDF5 experiment file) and
// `kvwb bench-capture` (prefill vs write cost of capture). Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

#include <filesystem>
#include <string>
#include <vector>

namespace kvwb::app {

int cmdCapture(const QStringList &args);
int cmdBenchCapture(const QStringList &args);

} // namespace kvwb::app
