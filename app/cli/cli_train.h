// `kvwb train` (train a model from a corpus) and `kvwb eval-qa` (greedy question answering against
// the corpus's reference answers). Same conventions as the other subcommands (app/cli/cli.h).
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdTrain(const QStringList &args);
// `kvwb train-embedder`: the demo's own sentence embedder (gpu/train/embedder_trainer.h).
int cmdTrainEmbedder(const QStringList &args);
int cmdTrainVerifier(const QStringList &args);
int cmdEvalQa(const QStringList &args);

} // namespace kvwb::app
