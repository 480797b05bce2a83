// `kvwb generate` (text from a prompt, with TTFT and tok/s) and `kvwb bench` (prefill and decode
// throughput): a model's forward, so kvwb-engine only. Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdGenerate(const QStringList &args);
int cmdBench(const QStringList &args);

} // namespace kvwb::app
