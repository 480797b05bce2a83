#include "app/jobs/replay_job.h"

#include "gpu/model/encoder.h"

#include "app/jobs/job_inputs.h"
#include "core/util/error.h"
#include "core/util/system_memory.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kvwb::app::jobs {

ReplayRequests readReplayRequests(const std::string &workloadPath, int limit)
{
    auto read = core::readWorkloadJsonl(workloadPath);
    ReplayRequests out{std::move(read.requests), std::move(read.warnings)};
    if (limit > 0 && size_t(limit) < out.requests.size())
        out.requests.resize(size_t(limit));
    if (out.requests.empty())
        throw core::Error(core::ErrorCode::Format,
                          workloadPath + ": no requests to replay" +
                              (out.warnings.empty()
                                   ? std::string()
                                   : " (first problem: " + out.warnings.messages().front() + ")"));
    return out;
}

void checkReplayWorkingSet(const ReplayJob &job, const std::vector<core::WorkloadRequest> &requests,
                           const gpu::Model &a, const core::Tokenizer &tokenizerA, const gpu::Model *b,
                           const core::Tokenizer *tokenizerB)
{
    if (requests.empty())
        return;
    const auto longest = std::max_element(requests.begin(), requests.end(), [](const auto &x, const auto &y) {
        return x.prompt.size() < y.prompt.size();
    });
    int generated = 0;
    for (const auto &r : requests)
        generated = std::max(generated, job.options.maxTokens > 0 ? job.options.maxTokens : r.maxTokens);
    const bool prefix = std::find(job.options.tiers.begin(), job.options.tiers.end(),
                                  core::TierKind::Prefix) != job.options.tiers.end();
    const int64_t budget = prefix ? job.options.prefixLimits.maxBytes : 0;
    const int64_t na = int64_t(tokenizerA.encode(longest->prompt, true).size()) + generated;
    int64_t bytes = requestWorkingSetBytes(a, na) + budget, nb = 0;
    if (b && tokenizerB) {
        nb = int64_t(tokenizerB->encode(longest->prompt, true).size()) + generated;
        bytes += 2 * requestWorkingSetBytes(*b, nb) + budget;
    }
    core::checkWorkingSet(
        fmt::format("replaying {}", job.workloadPath), bytes,
        fmt::format(
            "the longest request: {} tokens on A{}{}", na, b ? fmt::format(", {} on B (twice)", nb) : "",
            budget > 0 ? fmt::format("; the prefix tier's {:.2f} GB per model", double(budget) / 1e9) : ""),
        "--max-tokens, a smaller --prefix-bytes or --kv-dtype bf16");
}

std::unique_ptr<core::Embedder> makeEmbedder(const std::string &kind, int layer, const gpu::Model &a,
                                             const core::Tokenizer &tokenizerA,
                                             const std::vector<std::string> &idfDocuments,
                                             const std::string &prefix)
{
    if (kind == "lexical")
        return std::make_unique<core::LexicalEmbedder>();
    if (kind == "lexical-idf") {
        auto e = std::make_unique<core::LexicalEmbedder>();
        e->fitIdf(idfDocuments);
        return e;
    }
    if (kind == "model")
        return std::make_unique<gpu::ModelEmbedder>(a, tokenizerA, layer);
    if (kind.empty())
        throw core::Error(core::ErrorCode::InvalidArgument,
                          "embedder: expected lexical, lexical-idf, model or an embedding model's path");
    // an embedding model of its own, on model A's device and threads
    gpu::LoadOptions o;
    o.device = a.options().device;
    o.threads = a.options().threads;
    return gpu::loadEmbedderModel(kind, o, prefix);
}

std::unique_ptr<gpu::KnowledgeTier> makeKnowledgeTier(const ReplayJob &job, const gpu::Model &b,
                                                      const core::Tokenizer &tokenizerB,
                                                      core::Embedder &embedder)
{
    if (job.knowledgeGraphs.empty())
        throw core::Error(
            core::ErrorCode::InvalidArgument,
            "the knowledge tier needs a graph (--knowledge GRAPH.h5, from kvwb knowledge build)");
    std::vector<gpu::KnowledgeScope> scopes;
    for (const auto &spec : job.knowledgeGraphs) {
        gpu::KnowledgeScope scope;
        std::string path = spec;
        const size_t eq = spec.find('=');
        if (eq != std::string::npos && spec.find('/') > eq) { // "TENANT=PATH"
            scope.tenant = spec.substr(0, eq);
            path = spec.substr(eq + 1);
            if (scope.tenant.empty() || path.empty())
                throw core::Error(core::ErrorCode::InvalidArgument,
                                  "knowledge graph '" + spec + "': expected GRAPH.h5 or TENANT=GRAPH.h5");
        }
        scope.file = core::loadKnowledge(path);
        scopes.push_back(std::move(scope));
    }
    std::vector<core::UserProfile> profiles;
    if (!job.profilesPath.empty())
        profiles = core::readProfiles(job.profilesPath);
    return std::make_unique<gpu::KnowledgeTier>(std::move(scopes), b, tokenizerB, embedder, profiles,
                                                job.knowledge);
}

std::string knowledgeCostsJson(const gpu::KnowledgeTier &tier)
{
    const auto &c = tier.costs();
    nlohmann::json scopes = nlohmann::json::array();
    for (const auto &s : tier.scopes()) {
        std::vector<const core::ConceptNode *> nodes;
        int64_t reused = 0, withModule = s.file.modules ? int64_t(s.file.modules->modules.size()) : 0;
        for (const auto &n : s.file.graph.nodes()) {
            nodes.push_back(&n);
            reused += n.reuseCount > 0;
        }
        std::stable_sort(nodes.begin(), nodes.end(),
                         [](const auto *x, const auto *y) { return x->reuseCount > y->reuseCount; });
        nlohmann::json top = nlohmann::json::array();
        for (size_t i = 0; i < nodes.size() && i < 10 && nodes[i]->reuseCount > 0; ++i)
            top.push_back(
                {{"id", nodes[i]->id}, {"name", nodes[i]->name}, {"reuse_count", nodes[i]->reuseCount}});
        scopes.push_back({{"tenant", s.tenant},
                          {"nodes", s.file.graph.size()},
                          {"nodes_reused", reused},
                          {"modules", withModule},
                          {"most_reused", top}});
    }
    const nlohmann::json j = {{"lookups", c.lookups},
                              {"embed_ms", c.embedMs},
                              {"recall_ms", c.recallMs},
                              {"verify_ms", c.verifyMs},
                              {"place_ms", c.placeMs},
                              {"prefix_ms", c.prefixMs},
                              {"recompute_ms", c.recomputeMs},
                              {"modules_recomputed", c.modulesRecomputed},
                              {"recomputed_tokens", c.recomputedTokens},
                              {"prefix_tokens", c.prefixTokens},
                              {"rejected", c.rejected},
                              {"index_build_ms", c.indexBuildMs},
                              {"scopes", scopes}};
    return j.dump();
}

std::string ledgerSettingsJson(const ReplayJob &job, const core::Embedder *embedder, const gpu::Model &a,
                               const gpu::Model *b, bool cancelled)
{
    const auto &o = job.options;
    std::string tiers;
    for (auto t : o.tiers)
        tiers += std::string(tiers.empty() ? "" : ",") + core::tierKindName(t);
    const bool cross = std::find(o.tiers.begin(), o.tiers.end(), core::TierKind::Cross) != o.tiers.end();
    const bool knowledge =
        std::find(o.tiers.begin(), o.tiers.end(), core::TierKind::Knowledge) != o.tiers.end();
    std::string graphs;
    for (const auto &g : job.knowledgeGraphs)
        graphs += (graphs.empty() ? "" : ",") + g;
    const nlohmann::json settings = {
        {"workload", job.workloadPath},
        {"tiers", tiers},
        {"embedder_prefix", job.embedderPrefix},
        {"threshold", o.threshold},
        {"embedder", embedder ? embedder->name() : job.embedder},
        {"embed", o.embedQuestion ? "question" : "prompt"},
        {"block", o.prefixBlock},
        {"eviction", core::evictionName(o.exactLimits.eviction)},
        {"share_tenants", o.exactLimits.shareAcrossTenants},
        {"gate", o.gate ? gpu::gateSignalName(o.gateSignal) : "off"},
        {"gate_threshold", o.gateThreshold},
        {"clock", o.onClock},
        {"speed", o.speed},
        {"max_tokens", o.maxTokens},
        {"limit", job.limit},
        {"converter", cross ? job.converter : ""},
        {"align_policy", cross ? core::alignPolicyName(o.alignPolicy) : ""},
        {"knowledge", knowledge ? graphs : ""},
        {"profiles", knowledge ? job.profilesPath : ""},
        {"knowledge_verify", knowledge && job.knowledge.verify},
        {"knowledge_candidates", job.knowledge.candidates},
        {"knowledge_min_similarity", job.knowledge.minSimilarity},
        {"knowledge_ttl_ms", job.knowledge.ttlMs},
        {"knowledge_boundary", job.knowledge.boundary},
        {"store", o.store ? o.store->describe() : ""},
        {"store_kv_dtype", o.store ? core::dtypeName(o.storeKvDtype) : ""},
        {"error_bound", o.semanticBound ? o.semanticBound->errorBound : 0.0},
        {"bound_confidence", o.semanticBound ? o.semanticBound->confidence : 0.0},
        {"cancelled", cancelled},
        {"model_a", a.checkpoint().fingerprint()},
        {"model_b", b ? b->checkpoint().fingerprint() : ""},
        {"device", gpu::deviceName(a.options().device)}};
    return settings.dump();
}

std::string storeStatsJson(core::SharedStore &store)
{
    const core::SharedStoreStats s = store.stats();
    const core::StoreServerInfo info = store.serverInfo();
    const nlohmann::json j = {{"url", store.describe()},
                              {"gets", s.gets},
                              {"hits", s.hits},
                              {"puts", s.puts},
                              {"refused", s.refused},
                              {"unavailable", s.unavailable},
                              {"reconnects", s.reconnects},
                              {"bytes_sent", s.bytesSent},
                              {"bytes_received", s.bytesReceived},
                              {"net_ms", s.netMs},
                              {"server",
                               {{"used_bytes", info.usedBytes},
                                {"max_bytes", info.maxBytes},
                                {"eviction_policy", info.evictionPolicy},
                                {"evicted_keys", info.evictedKeys},
                                {"expired_keys", info.expiredKeys},
                                {"keys", info.keys}}}};
    return j.dump();
}

} // namespace kvwb::app::jobs
