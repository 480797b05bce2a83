#include "app/jobs/replay_job.h"

#include "core/util/error.h"

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

std::unique_ptr<core::Embedder> makeEmbedder(const std::string &kind, int layer, const gpu::Model &a,
                                             const core::Tokenizer &tokenizerA)
{
    if (kind == "lexical")
        return std::make_unique<core::LexicalEmbedder>();
    if (kind == "model")
        return std::make_unique<gpu::ModelEmbedder>(a, tokenizerA, layer);
    throw core::Error(core::ErrorCode::InvalidArgument, "embedder '" + kind + "': expected lexical or model");
}

std::string ledgerSettingsJson(const ReplayJob &job, const core::Embedder *embedder, const gpu::Model &a,
                               const gpu::Model *b, bool cancelled)
{
    const auto &o = job.options;
    std::string tiers;
    for (auto t : o.tiers)
        tiers += std::string(tiers.empty() ? "" : ",") + core::tierKindName(t);
    const bool cross = std::find(o.tiers.begin(), o.tiers.end(), core::TierKind::Cross) != o.tiers.end();
    const nlohmann::json settings = {{"workload", job.workloadPath},
                                     {"tiers", tiers},
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
                                     {"cancelled", cancelled},
                                     {"model_a", a.checkpoint().fingerprint()},
                                     {"model_b", b ? b->checkpoint().fingerprint() : ""},
                                     {"device", gpu::deviceName(a.options().device)}};
    return settings.dump();
}

} // namespace kvwb::app::jobs
