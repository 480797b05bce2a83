// `kvwb make-model`: write a random-weight model (HF directory or GGUF file) for smoke tests and
// benchmarks, with core/ only (no engine), so the light `kvwb` front end runs it. Conventions as in
// app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdMakeModel(const QStringList &args);

} // namespace kvwb::app
