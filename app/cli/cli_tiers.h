// `kvwb bench-tiers`: lookup and insert latency of the cache tiers (exact, semantic, prefix tree) at
// sizes a replay reaches, and the HNSW index's recall@1 against brute force. Prints tables; asserts
// nothing. Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdBenchTiers(const QStringList &args);

} // namespace kvwb::app
