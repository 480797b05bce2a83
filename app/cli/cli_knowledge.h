// `kvwb knowledge build|show`: the knowledge tier's concept graph file (docs/knowledge.md): build it
// from WordNet or a JSONL of concepts with each node's knowledge computed once by model B as a KV
// module, and show a node with its neighbours, its module and its freshness, or verify a request
// text against a node. Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdKnowledge(const QStringList &args);

} // namespace kvwb::app
