#include "app/jobs/knowledge_job.h"

#include "core/cache/knowledge_recall.h"
#include "core/util/clock.h"
#include "gpu/knowledge/knowledge_modules.h"

namespace kvwb::app::jobs {

int64_t computeKnowledgeModules(core::KnowledgeFile &file, const gpu::Model &b,
                                const core::Tokenizer &tokenizerB, const std::string &system, int64_t nowMs,
                                const std::function<bool(size_t done, size_t total)> &progress)
{
    core::KnowledgeModules m;
    m.modelFingerprint = b.checkpoint().fingerprint();
    m.modelPath = b.checkpoint().path().string();
    m.layers = b.config().numLayers;
    m.kvHeads = b.config().numKvHeads;
    m.headDim = b.config().headDim;
    m.prefixIds = tokenizerB.encode(system, true);
    int64_t tokens = 0;
    size_t done = 0;
    for (const auto &n : file.graph.nodes()) {
        if (progress && !progress(done, file.graph.size()))
            return tokens;
        const auto ids = tokenizerB.encode(core::moduleText(n), false);
        m.modules.push_back(gpu::computeModule(b, m.prefixIds, ids, n.id, nowMs));
        tokens += int64_t(ids.size());
        ++done;
    }
    if (progress)
        progress(done, file.graph.size());
    file.modules = std::move(m);
    return tokens;
}

KnowledgeTrace traceKnowledge(const core::KnowledgeFile &file, core::Embedder &embedder,
                              const std::string &question, int candidates, double minSimilarity,
                              const std::string &modelFingerprint, int64_t nowMs, int64_t ttlMs,
                              const std::optional<core::UserProfile> &profile)
{
    KnowledgeTrace t;
    const core::KnowledgeRecall recall(file.graph, embedder);
    auto t0 = core::Clock::now();
    const auto found = recall.candidates(embedder.embed(question), candidates, minSimilarity);
    t.recallMs = core::msSince(t0);
    t0 = core::Clock::now();
    for (const auto &c : found) {
        const core::ConceptNode &n = file.graph.nodes()[c.node];
        const auto v = file.graph.verify(n.id, question);
        t.candidates.push_back({n.id, n.name, c.similarity, c.matched, v.accepted, v.reason});
        if (v.accepted && t.chosen.empty())
            t.chosen = n.id;
    }
    t.verifyMs = core::msSince(t0);
    if (!t.chosen.empty()) {
        const core::KnowledgeModule *m = file.modules ? file.modules->find(t.chosen) : nullptr;
        t.freshness = core::freshnessName(core::moduleFreshness(
            m != nullptr, m ? m->builtMs : 0, file.modules ? file.modules->modelFingerprint : "",
            modelFingerprint, nowMs, ttlMs));
        t.moduleTokens = m ? int(m->ids.size()) : 0;
    }
    if (profile)
        t.profileLine = core::profileInstruction(*profile);
    return t;
}

} // namespace kvwb::app::jobs
