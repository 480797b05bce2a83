// Knowledge graph jobs shared by `kvwb knowledge` and the window's Knowledge step (engine thread):
// computing a graph's KV modules with model B, and tracing one request's path through a graph
// (recall's candidates, each one's verification, the chosen node's module freshness and the
// profile line that would be rendered), exactly as the knowledge tier decides it.
//
// Threading: the engine thread (or a subcommand's main thread); models outlive the calls.
#pragma once

#include "core/cache/semantic_tier.h"
#include "core/knowledge/user_profiles.h"
#include "core/store/knowledge_store.h"
#include "core/tokenize/tokenizer.h"
#include "gpu/model/model.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::app::jobs {

// Every node's module computed by model B after BOS + `system`; progress(done, total) may stop it
// (returns false), which leaves file.modules unset. Returns the tokens computed.
int64_t computeKnowledgeModules(core::KnowledgeFile &file, const gpu::Model &b,
                                const core::Tokenizer &tokenizerB, const std::string &system, int64_t nowMs,
                                const std::function<bool(size_t done, size_t total)> &progress = {});

struct TraceCandidate
{
    std::string node;
    std::string name;
    double similarity = 0;
    std::string matched;   // the entry recall matched (a name, synonym or question)
    bool accepted = false; // graph verification
    std::string reason;    // verification's one line
};

struct KnowledgeTrace
{
    std::vector<TraceCandidate> candidates; // best first
    std::string chosen;                     // the first accepted node ("" none: answered from scratch)
    std::string freshness;                  // the chosen node's module: fresh | stale | missing
    int moduleTokens = 0;
    std::string profileLine; // what the personalisation layer renders for the user ("" none)
    double recallMs = 0, verifyMs = 0;
};

// The path a question would take through the graph under the knowledge tier's rules
// (gpu/replay/knowledge_tier.h): modelFingerprint is model B's (freshness), ttlMs as the tier's.
KnowledgeTrace traceKnowledge(const core::KnowledgeFile &file, core::Embedder &embedder,
                              const std::string &question, int candidates, double minSimilarity,
                              const std::string &modelFingerprint, int64_t nowMs, int64_t ttlMs,
                              const std::optional<core::UserProfile> &profile);

} // namespace kvwb::app::jobs
