// `kvwb tokenize`: encode text with a tokenizer and print the ids, with core/ only (no engine), so
// the light `kvwb` front end runs it. Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdTokenize(const QStringList &args);

} // namespace kvwb::app
