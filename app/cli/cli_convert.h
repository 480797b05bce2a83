// `kvwb convert`: a checkpoint as a Hugging Face directory or a GGUF file, with core/ only (no
// engine), so the light `kvwb` front end runs it. Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdConvert(const QStringList &args);

} // namespace kvwb::app
