// `kvwb corpus` and `kvwb workload`: build the Q/A training corpus and a request workload from a
// WordNet database, or import a workload from ShareGPT or Quora pairs (docs/corpus-and-workload.md). Run on
// the main thread of a headless process.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdCorpus(const QStringList &args);
int cmdWorkload(const QStringList &args);

} // namespace kvwb::app
