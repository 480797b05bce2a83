#include "core/cache/knowledge_recall.h"

#include "core/cache/vector_index.h"
#include "core/util/clock.h"
#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

namespace kvwb::core {

struct KnowledgeRecall::Impl
{
    static constexpr size_t kM = 16;
    static constexpr size_t kEfConstruction = 200;
    static constexpr size_t kEfSearch = 128; // as the semantic tier's index, beyond the exact limit

    std::unique_ptr<VectorIndex> index;
    std::vector<size_t> nodeOfEntry;
    std::vector<std::string> textOfEntry;
    double buildMs = 0;
};

KnowledgeRecall::KnowledgeRecall(const KnowledgeGraph &graph, Embedder &embedder)
    : m(std::make_unique<Impl>())
{
    const auto t0 = Clock::now();
    const size_t dim = size_t(embedder.dim());
    for (size_t n = 0; n < graph.size(); ++n) {
        const ConceptNode &node = graph.nodes()[n];
        const auto add = [&](const std::string &text) {
            if (!text.empty()) {
                m->nodeOfEntry.push_back(n);
                m->textOfEntry.push_back(text);
            }
        };
        add(node.name);
        for (const auto &s : node.synonyms)
            add(s);
        for (const auto &q : node.questions)
            add(q);
    }
    m->index = std::make_unique<VectorIndex>(int(dim), m->textOfEntry.size(), Impl::kM, Impl::kEfConstruction,
                                             Impl::kEfSearch, "knowledge recall index");
    for (size_t e = 0; e < m->textOfEntry.size(); ++e) {
        const std::vector<float> v = embedder.embed(m->textOfEntry[e]);
        if (v.size() != dim)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("knowledge recall: embedder {} returned {} values for '{}', expected {}",
                                    embedder.name(), v.size(), m->textOfEntry[e], dim));
        m->index->add(v.data(), e);
    }
    m->buildMs = msSince(t0);
}

KnowledgeRecall::~KnowledgeRecall() = default;

std::vector<RecallCandidate> KnowledgeRecall::candidates(const std::vector<float> &query, int k,
                                                         double minSimilarity) const
{
    std::vector<RecallCandidate> out;
    if (k < 1 || m->textOfEntry.empty())
        return out;
    if (query.size() != size_t(m->index->dim()))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("knowledge recall: a query of {} values, the index holds {}", query.size(),
                                m->index->dim()));
    // A node owns several entries: look further than k so that k distinct nodes can come back.
    const size_t want = std::min(m->textOfEntry.size(), size_t(k) * 8);
    const auto ranked = m->index->search(query.data(), want); // distance = 1 - cosine, nearest first
    std::unordered_map<size_t, bool> seen;
    for (const auto &[distance, label] : ranked) {
        const double similarity = 1.0 - double(distance);
        if (!(similarity >= minSimilarity) || int(out.size()) >= k) // NaN never passes
            break;
        const size_t node = m->nodeOfEntry[label];
        if (!seen.emplace(node, true).second)
            continue;
        out.push_back({node, similarity, m->textOfEntry[label]});
    }
    return out;
}

size_t KnowledgeRecall::entries() const
{
    return m->textOfEntry.size();
}

double KnowledgeRecall::buildMs() const
{
    return m->buildMs;
}

} // namespace kvwb::core
