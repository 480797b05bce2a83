// `kvwb sweep-semantic`: precision, recall and false-hit rate of the semantic tier against its
// similarity threshold on a labelled workload, and the threshold that meets a target false-hit rate
// (core/cache/semantic_sweep.h, docs/cache-tiers.md, "Choosing the threshold").
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdSweepSemantic(const QStringList &args);

} // namespace kvwb::app
