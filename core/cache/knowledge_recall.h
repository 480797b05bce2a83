// Vector recall of the knowledge tier (docs/knowledge.md, "Matching"): every node's name, synonyms
// and typical questions embedded by the semantic tier's embedder into one hnswlib index (inner
// product over unit vectors); a query returns the nodes of its nearest entries, best first, each
// node once. Recall only proposes: graph verification (core/knowledge/knowledge_graph.h) decides.
//
// Thread-safety: none (engine thread): the embedder is stateful and hnswlib's search keeps a
// visited list per index.
#pragma once

#include "core/cache/semantic_tier.h"
#include "core/knowledge/knowledge_graph.h"

#include <memory>
#include <string>
#include <vector>

namespace kvwb::core {

struct RecallCandidate
{
    size_t node = 0;       // index into the graph's nodes()
    double similarity = 0; // cosine of the query and the node's nearest entry
    std::string matched;   // that entry's text (a name, a synonym or a question)
};

class KnowledgeRecall
{
public:
    // Embeds every entry of the graph (which must outlive the index, unchanged in its nodes).
    // Error(InvalidArgument) when the embedder returns vectors of another size than its dim().
    KnowledgeRecall(const KnowledgeGraph &graph, Embedder &embedder);
    ~KnowledgeRecall();
    KnowledgeRecall(const KnowledgeRecall &) = delete;
    KnowledgeRecall &operator=(const KnowledgeRecall &) = delete;

    // Up to k nodes whose nearest entry has similarity >= minSimilarity, best first.
    std::vector<RecallCandidate> candidates(const std::vector<float> &query, int k,
                                            double minSimilarity) const;
    size_t entries() const;
    double buildMs() const; // embedding and indexing every entry

private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

} // namespace kvwb::core
