#include "app/jobs/replay_job.h"

#include "core/store/ledger_store.h"
#include "gpu/model/encoder.h"

#include "app/jobs/job_inputs.h"
#include "core/cache/error_curve.h"
#include "core/ledger/prices.h"
#include "core/model/encoder_config.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/util/atomic_file.h"
#include "core/util/clock.h"
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

void checkReplayWorkingSet(const core::ReplaySettings &settings,
                           const std::vector<core::WorkloadRequest> &requests, const gpu::Model &a,
                           const core::Tokenizer &tokenizerA, const gpu::Model *b,
                           const core::Tokenizer *tokenizerB)
{
    if (requests.empty())
        return;
    const auto longest = std::max_element(requests.begin(), requests.end(), [](const auto &x, const auto &y) {
        return x.prompt.size() < y.prompt.size();
    });
    int generated = 0;
    for (const auto &r : requests)
        generated = std::max(generated, settings.maxTokens > 0 ? settings.maxTokens : r.maxTokens);
    const int64_t budget = settings.uses(core::TierKind::Prefix) ? settings.prefixBytes : 0;
    const int64_t na = int64_t(tokenizerA.encode(longest->prompt, true).size()) + generated;
    int64_t bytes = requestWorkingSetBytes(a, na) + budget, nb = 0;
    if (b && tokenizerB) {
        nb = int64_t(tokenizerB->encode(longest->prompt, true).size()) + generated;
        bytes += 2 * requestWorkingSetBytes(*b, nb) + budget;
    }
    core::checkWorkingSet(
        fmt::format("replaying {}", settings.workload), bytes,
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

std::unique_ptr<gpu::KnowledgeTier> makeKnowledgeTier(const core::ReplaySettings &settings,
                                                      const gpu::Model &b, const core::Tokenizer &tokenizerB,
                                                      core::Embedder &embedder)
{
    if (settings.knowledgeGraphs.empty())
        throw core::Error(
            core::ErrorCode::InvalidArgument,
            "the knowledge tier needs a graph (--knowledge GRAPH.h5, from kvwb knowledge build)");
    std::vector<gpu::KnowledgeScope> scopes;
    for (const auto &spec : settings.knowledgeGraphs) {
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
    if (!settings.profiles.empty())
        profiles = core::readProfiles(settings.profiles);
    return std::make_unique<gpu::KnowledgeTier>(std::move(scopes), b, tokenizerB, embedder, profiles,
                                                knowledgeTierOptions(settings));
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

std::string ledgerSettingsJson(const PreparedReplay &replay, bool cancelled)
{
    const auto &m = replay.models;
    nlohmann::json settings = core::replaySettingsToJson(replay.settings);
    settings["embedder_name"] = replay.embedder ? replay.embedder->name() : replay.settings.embedder;
    if (replay.verifier) {
        settings["verifier_name"] = replay.verifier->name();
        settings["verifier_threshold_used"] = replay.options.verifier.threshold;
    }
    if (replay.options.semanticBound && !replay.options.semanticBound->priorCurve.empty()) {
        const auto &curve = replay.options.semanticBound->priorCurve;
        settings["bound_prior_curve"] = {{"source", curve.source},
                                         {"from", curve.from},
                                         {"error_rate", curve.errorRate},
                                         {"weight", curve.weight}};
    }
    settings["cancelled"] = cancelled;
    settings["model_a"] = m.a->checkpoint().fingerprint();
    settings["model_b"] = m.b ? m.b->checkpoint().fingerprint() : "";
    settings["device"] = gpu::deviceName(m.a->options().device);
    return settings.dump();
}

bool replayNeedsModelB(const core::ReplaySettings &settings,
                       const std::vector<core::WorkloadRequest> &requests)
{
    if (settings.uses(core::TierKind::Cross) || settings.uses(core::TierKind::Knowledge))
        return true;
    return std::any_of(requests.begin(), requests.end(),
                       [](const auto &r) { return r.model == core::ModelRole::B; });
}

gpu::ReplayOptions replayOptions(const core::ReplaySettings &s)
{
    gpu::ReplayOptions o;
    o.tiers = s.tiers;
    o.exactLimits = s.limits(core::TierKind::Exact);
    o.semanticLimits = s.limits(core::TierKind::Semantic);
    o.prefixLimits = s.limits(core::TierKind::Prefix);
    o.threshold = s.threshold;
    o.embedQuestion = s.embedQuestion;
    o.prefixBlock = s.prefixBlock;
    o.cross.minTokens = s.minCrossTokens;
    o.cross.recompute.share = s.crossRecompute;
    o.cross.gateSignal = s.gateSignal;
    o.cross.gateThreshold = s.gateThreshold;
    o.cross.gate = s.gate;
    o.cross.alignPolicy = s.alignPolicy;
    o.onClock = s.onClock;
    o.speed = s.speed;
    o.maxTokens = s.maxTokens;
    o.shadowFraction = s.shadow;
    if (!s.prices.empty()) {
        o.prices = core::resolvePricePreset(s.prices).prices;
    } else {
        o.prices.inputPerMillion = s.priceIn;
        o.prices.outputPerMillion = s.priceOut;
    }
    o.storeKvDtype = s.storeKvDtype;
    o.guards = s.guards;
    if (s.errorBound > 0) {
        core::EntryBoundOptions bound;
        bound.errorBound = s.errorBound;
        bound.confidence = s.boundConfidence;
        bound.minUses = s.boundMinUses;
        if (s.boundPrior == "embedder") {
            if (core::isBuiltinEmbedder(s.embedder))
                throw core::Error(core::ErrorCode::InvalidArgument,
                                  "--bound-prior embedder needs a trained embedder (a directory with its "
                                  "train_log.json); the embedder is " +
                                      s.embedder);
            bound.priorCurve = core::readErrorCurve(s.embedder);
        } else if (!s.boundPrior.empty()) {
            bound.priorCurve = core::readErrorCurve(s.boundPrior);
        }
        o.semanticBound = bound;
    }
    return o;
}

gpu::KnowledgeTierOptions knowledgeTierOptions(const core::ReplaySettings &s)
{
    gpu::KnowledgeTierOptions k = s.knowledge;
    if (k.clockStartMs <= 0)
        k.clockStartMs = core::unixMsNow();
    return k;
}

PreparedReplay prepareReplay(const core::ReplaySettings &settings,
                             std::vector<core::WorkloadRequest> requests, const ReplayModelsIn &in)
{
    core::checkReplaySettings(settings);
    PreparedReplay p;
    p.settings = settings;
    p.requests = std::move(requests);
    p.options = replayOptions(settings); // a price preset resolved before anything loads
    if (!in.a || !in.tokenizerA)
        throw core::Error(core::ErrorCode::InvalidArgument, "a replay needs model A loaded");
    if (replayNeedsModelB(settings, p.requests) && (!in.b || !in.tokenizerB))
        throw core::Error(core::ErrorCode::InvalidArgument,
                          settings.uses(core::TierKind::Cross) || settings.uses(core::TierKind::Knowledge)
                              ? "the cross and knowledge tiers need model B loaded"
                              : "the workload sends requests to model b: load model B");
    if (settings.limit > 0 && size_t(settings.limit) > p.requests.size()) // said, not silently capped
        p.warnings.push_back(
            fmt::format("the limit of {} requests is more than the workload holds: all {} were replayed",
                        settings.limit, p.requests.size()));
    const gpu::Converter *converter = nullptr;
    if (settings.uses(core::TierKind::Cross)) {
        {
            const auto exp = core::ExperimentReader::open(settings.experiment);
            for (const core::ModelRole role : core::kRoles) {
                const gpu::Model &m = role == core::ModelRole::A ? *in.a : *in.b;
                if (m.checkpoint().fingerprint() != exp.model(role).weightsSha256)
                    throw core::Error(
                        core::ErrorCode::Config,
                        fmt::format("{}: model {} at {} has weights fingerprint {}, the converters were "
                                    "fitted for {}",
                                    settings.experiment, core::roleLabel(role),
                                    m.checkpoint().path().string(), m.checkpoint().fingerprint(),
                                    exp.model(role).weightsSha256));
            }
        } // the experiment is closed again: a ledger may be written to it after the replay
        if (in.converter) {
            converter = &in.converter(settings.experiment, settings.converter);
        } else {
            p.ownConverter.emplace(gpu::Converter::create(
                core::loadConverters(settings.experiment, settings.converter), *in.a, *in.b));
            converter = &*p.ownConverter;
        }
    }
    checkReplayWorkingSet(settings, p.requests, *in.a, *in.tokenizerA, in.b, in.tokenizerB);
    std::vector<std::string>
        embedTexts; // what the semantic tier embeds: the lexical-idf embedder's documents
    for (const auto &r : p.requests)
        embedTexts.push_back(settings.embedQuestion && !r.question.empty() ? r.question : r.prompt);
    p.embedder = makeEmbedder(settings.embedder, settings.embedderLayer, *in.a, *in.tokenizerA, embedTexts,
                              settings.embedderPrefix);
    if (!settings.verifier.empty()) { // on the models' device, one request at a time
        p.verifier = std::make_unique<gpu::CrossEncoder>(settings.verifier, in.a->options());
        p.options.verifier.verifier = p.verifier.get();
        p.options.verifier.threshold = settings.verifierThreshold > 0
                                           ? settings.verifierThreshold
                                           : p.verifier->recordedThreshold().value_or(0.5);
        p.options.verifier.overrulesGuards = settings.verifierOverrulesGuards;
    }
    if (settings.uses(core::TierKind::Knowledge)) {
        p.knowledge = makeKnowledgeTier(settings, *in.b, *in.tokenizerB, *p.embedder);
        const auto w = p.knowledge->warnings();
        p.warnings.insert(p.warnings.end(), w.begin(), w.end());
    }
    if (!settings.store.empty()) {
        core::StoreOptions so;
        so.commandTimeoutMs = settings.storeTimeoutMs;
        so.connectTimeoutMs = so.commandTimeoutMs;
        if (!settings.storeKeyFile.empty())
            so.integrityKey = core::readStoreKeyFile(settings.storeKeyFile);
        p.store = core::openSharedStore(settings.store, so);
        if (settings.storeFlush)
            p.store->flush();
        p.options.store = p.store.get();
    }
    p.models = {in.a, in.b, in.tokenizerA, in.tokenizerB, converter, p.embedder.get(), p.knowledge.get()};
    return p;
}

std::string finishReplay(const PreparedReplay &replay, const gpu::ReplayResult &r)
{
    const auto &s = replay.settings;
    const std::string settings = ledgerSettingsJson(replay, r.cancelled);
    if (!s.ledgerCsv.empty())
        core::writeLedgerCsv(s.ledgerCsv, r.rows);
    if (!s.outputs.empty()) {
        std::string lines;
        for (size_t i = 0; i < r.rows.size() && i < r.outputs.size(); ++i)
            lines += nlohmann::json({{"id", r.rows[i].requestId}, {"output", r.outputs[i]}})
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                     "\n";
        core::writeFileAtomic(s.outputs, lines);
    }
    if (!s.ledgerName.empty() && !r.rows.empty())
        core::saveLedger(s.experiment, s.ledgerName, r.rows, settings);
    if (!s.saveKnowledge.empty() && replay.knowledge) {
        const auto &scopes = replay.knowledge->scopes();
        const auto shared =
            std::find_if(scopes.begin(), scopes.end(), [](const auto &x) { return x.tenant.empty(); });
        if (shared == scopes.end())
            throw core::Error(core::ErrorCode::InvalidArgument,
                              "--save-knowledge writes the shared graph; every --knowledge names a tenant");
        core::saveKnowledge(s.saveKnowledge, shared->file);
    }
    return settings;
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
