// `kvwb info`, `upgrade`, `tokenize`, `make-model` and `convert`: model, tokenizer and experiment
// files, read and written with core/ only (no engine), so the light `kvwb` front end runs them.
// Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdInfo(const QStringList &args);
int cmdUpgrade(const QStringList &args);
int cmdTokenize(const QStringList &args);
int cmdMakeModel(const QStringList &args);
int cmdConvert(const QStringList &args);

} // namespace kvwb::app
