// `kvwb info`: a JSON card for a model (HF directory, GGUF file, llama2.c checkpoint, sentence
// encoder) or an experiment file, read with core/ only (no engine), so the light `kvwb` front end
// runs it. Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdInfo(const QStringList &args);

} // namespace kvwb::app
