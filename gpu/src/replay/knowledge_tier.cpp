#include "gpu/replay/knowledge_tier.h"

#include "core/cache/knowledge_recall.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/workload/corpus.h"
#include "gpu/knowledge/knowledge_modules.h"
#include "gpu/replay/kv_tiers.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace kvwb::gpu {

using core::Clock;
using core::Error;
using core::ErrorCode;
using core::msSince;

struct KnowledgeTier::Impl
{
    const Model &b;
    const core::Tokenizer &tokenizer;
    core::Embedder &embedder;
    KnowledgeTierOptions options;
    std::vector<KnowledgeScope> scopes;
    std::vector<std::unique_ptr<core::KnowledgeRecall>> recall; // [scope]
    std::unordered_map<std::string, core::UserProfile> profiles;
    std::map<std::string, KvCache> heads; // tenant + '\x1f' + system prompt text -> its KV
    std::string fingerprint;
    KnowledgeCosts costs;
    std::vector<std::string> warnings;

    Impl(const Model &model, const core::Tokenizer &tok, core::Embedder &e, KnowledgeTierOptions o)
        : b(model), tokenizer(tok), embedder(e), options(o), fingerprint(model.checkpoint().fingerprint())
    {}

    // The modules of a scope, created empty (B's geometry, computed after BOS) when the file has
    // none, and emptied when they are another model's: each is then recomputed on first use.
    core::KnowledgeModules &modulesOf(KnowledgeScope &s)
    {
        const auto &c = b.config();
        if (!s.file.modules) {
            core::KnowledgeModules mods;
            mods.modelFingerprint = fingerprint;
            mods.modelPath = b.checkpoint().path().string();
            mods.layers = c.numLayers;
            mods.kvHeads = c.numKvHeads;
            mods.headDim = c.headDim;
            if (const auto bos = tokenizer.bosId())
                mods.prefixIds = {*bos};
            s.file.modules = std::move(mods);
        }
        return *s.file.modules;
    }
};

KnowledgeTier::KnowledgeTier(std::vector<KnowledgeScope> scopes, const Model &b,
                             const core::Tokenizer &tokenizerB, core::Embedder &embedder,
                             const std::vector<core::UserProfile> &profiles,
                             const KnowledgeTierOptions &options)
    : m(std::make_unique<Impl>(b, tokenizerB, embedder, options))
{
    const auto &c = b.config();
    for (size_t i = 0; i < scopes.size(); ++i)
        for (size_t j = 0; j < i; ++j)
            if (scopes[i].tenant == scopes[j].tenant)
                throw Error(ErrorCode::InvalidArgument,
                            fmt::format("knowledge tier: two graphs for tenant '{}'",
                                        scopes[i].tenant.empty() ? "(shared)" : scopes[i].tenant));
    for (auto &s : scopes) {
        const std::string who = s.tenant.empty() ? "the shared graph" : "tenant " + s.tenant + "'s graph";
        if (s.file.modules) {
            const auto &mods = *s.file.modules;
            if (mods.layers != c.numLayers || mods.kvHeads != c.numKvHeads || mods.headDim != c.headDim)
                throw Error(ErrorCode::InvalidArgument,
                            fmt::format("knowledge tier: {} holds modules of {} layers x {} KV heads x {}, "
                                        "model B has {} x {} x {}",
                                        who, mods.layers, mods.kvHeads, mods.headDim, c.numLayers,
                                        c.numKvHeads, c.headDim));
            if (mods.modelFingerprint != m->fingerprint) {
                m->warnings.push_back(fmt::format(
                    "knowledge tier: {}'s {} modules were computed by weights {}, model B is {}: each is "
                    "recomputed on first use",
                    who, mods.modules.size(), mods.modelFingerprint.substr(0, 12),
                    m->fingerprint.substr(0, 12)));
                s.file.modules->modules.clear();
                s.file.modules->modelFingerprint = m->fingerprint;
            }
        }
    }
    m->scopes = std::move(scopes);
    for (auto &s : m->scopes) {
        m->recall.push_back(std::make_unique<core::KnowledgeRecall>(s.file.graph, embedder));
        m->costs.indexBuildMs += m->recall.back()->buildMs();
    }
    for (const auto &p : profiles)
        if (!m->profiles.emplace(p.user, p).second)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("knowledge tier: two profiles for user '{}'", p.user));
}

KnowledgeTier::~KnowledgeTier() = default;

core::TierLookup KnowledgeTier::lookup(const core::TierRequest &request)
{
    core::TierLookup out;
    if (request.role != core::ModelRole::B || request.scope.modelFingerprint() != m->fingerprint)
        return out; // the modules are model B's
    auto &costs = m->costs;
    ++costs.lookups;
    const std::string &tenant = request.scope.tenant();

    // Recall over every graph this tenant may see, best first.
    auto t = Clock::now();
    const std::vector<float> q = m->embedder.embed(request.embedText);
    costs.embedMs += msSince(t);
    t = Clock::now();
    struct Candidate
    {
        size_t scope;
        core::RecallCandidate c;
    };
    std::vector<Candidate> found;
    for (size_t s = 0; s < m->scopes.size(); ++s) {
        if (!m->scopes[s].tenant.empty() && m->scopes[s].tenant != tenant)
            continue;
        for (auto &c : m->recall[s]->candidates(q, m->options.candidates, m->options.minSimilarity))
            found.push_back({s, std::move(c)});
    }
    std::stable_sort(found.begin(), found.end(),
                     [](const Candidate &x, const Candidate &y) { return x.c.similarity > y.c.similarity; });
    if (found.size() > size_t(std::max(m->options.candidates, 1)))
        found.resize(size_t(m->options.candidates));
    costs.recallMs += msSince(t);
    if (found.empty())
        return out; // no node near enough: answered from scratch

    // Verification: the first candidate whose own name is the concept the question names.
    t = Clock::now();
    const Candidate *chosen = nullptr;
    for (const auto &c : found) {
        const auto &graph = m->scopes[c.scope].file.graph;
        if (!m->options.verify || graph.verify(graph.nodes()[c.c.node].id, request.embedText).accepted) {
            chosen = &c;
            break;
        }
    }
    costs.verifyMs += msSince(t);
    if (!chosen) {
        ++costs.rejected;
        out.knowledge.node = m->scopes[found.front().scope].file.graph.nodes()[found.front().c.node].id;
        out.knowledge.verdict = core::KnowledgeVerdict::Rejected;
        return out;
    }
    KnowledgeScope &scope = m->scopes[chosen->scope];
    core::ConceptNode &node = *scope.file.graph.find(scope.file.graph.nodes()[chosen->c.node].id);
    out.knowledge.node = node.id;
    out.knowledge.verdict = core::KnowledgeVerdict::Verified;

    // The rewritten prompt: [system prompt] [module] [profile line] "Q: question\nA:".
    std::string head, tail = request.prompt;
    if (!request.question.empty())
        if (auto h = core::promptHead(request.prompt, request.question)) {
            head = std::move(*h);
            tail = core::promptFor(request.question);
        }
    const auto profile = m->profiles.find(request.user);
    const std::string line =
        profile == m->profiles.end() ? std::string() : core::profileInstruction(profile->second);
    out.knowledge.profileApplied = line.empty() ? 0 : 1;
    const std::vector<int> headIds = m->tokenizer.encode(head, true);
    const std::vector<int> restIds = m->tokenizer.encode(line + tail, false);

    // The node's module: reused when fresh, else computed now and counted.
    core::KnowledgeModules &mods = m->modulesOf(scope);
    const int64_t now = m->options.clockStartMs + request.nowMs;
    const core::KnowledgeModule *module = mods.find(node.id);
    const auto freshness =
        core::moduleFreshness(module != nullptr, module ? module->builtMs : 0, mods.modelFingerprint,
                              m->fingerprint, now, m->options.ttlMs);
    const size_t moduleTokens =
        module ? module->ids.size() : m->tokenizer.encode(core::moduleText(node), false).size();
    if (headIds.size() + moduleTokens + restIds.size() + size_t(std::max(request.maxTokens, 0)) >
        size_t(m->b.contextLimit())) {
        out.warnings.push_back(fmt::format(
            "request {}: knowledge node {} does not fit model B's context ({} + {} + {} tokens and {} to "
            "generate): answered without it",
            request.requestId, node.id, headIds.size(), moduleTokens, restIds.size(), request.maxTokens));
        out.knowledge.module = core::ModuleFate::TooLong;
        return out;
    }
    if (freshness != core::Freshness::Fresh) {
        t = Clock::now();
        core::KnowledgeModule fresh = computeModule(
            m->b, mods.prefixIds, m->tokenizer.encode(core::moduleText(node), false), node.id, now);
        const double ms = msSince(t);
        costs.recomputeMs += ms;
        out.modelMs += ms;
        ++costs.modulesRecomputed;
        costs.recomputedTokens += int64_t(mods.prefixIds.size() + fresh.ids.size());
        out.computedTokens += int(fresh.ids.size());
        auto it = std::find_if(mods.modules.begin(), mods.modules.end(),
                               [&](const core::KnowledgeModule &x) { return x.nodeId == node.id; });
        if (it != mods.modules.end())
            *it = std::move(fresh);
        else
            mods.modules.push_back(std::move(fresh));
        module = mods.find(node.id);
        node.verifiedMs = now;
        out.knowledge.module = core::ModuleFate::Recomputed;
    } else {
        out.knowledge.module = core::ModuleFate::Reused;
    }

    // The system prompt's KV, computed once per tenant and text.
    const std::string key = tenant + '\x1f' + head;
    auto h = m->heads.find(key);
    if (h == m->heads.end()) {
        t = Clock::now();
        KvCache c = m->b.newCache();
        m->b.forward(headIds, c);
        const double ms = msSince(t);
        costs.prefixMs += ms;
        out.modelMs += ms;
        costs.prefixTokens += int64_t(headIds.size());
        out.computedTokens += int(headIds.size());
        h = m->heads.emplace(key, std::move(c)).first;
    }
    KvCache cache = h->second.fork();
    t = Clock::now();
    const int boundary = std::min<int>(m->options.boundary, int(module->ids.size()));
    const double boundaryMs = placeModule(m->b, cache, *module, boundary);
    costs.placeMs += msSince(t);
    out.modelMs += boundaryMs;
    out.computedTokens += boundary;

    out.prompt = headIds;
    out.prompt.insert(out.prompt.end(), module->ids.begin(), module->ids.end());
    out.prompt.insert(out.prompt.end(), restIds.begin(), restIds.end());
    out.hit = true;
    out.reusedTokens = std::max(0, cache.tokens() - out.computedTokens);
    out.kv = std::make_unique<KvCachePayload>(std::move(cache));
    out.reusedIntent = node.id;
    ++node.reuseCount;
    return out;
}

int64_t KnowledgeTier::evict(int64_t)
{
    return 0;
}

int64_t KnowledgeTier::invalidateModel(const std::string &modelFingerprint)
{
    int64_t removed = 0;
    for (auto &s : m->scopes)
        if (s.file.modules && s.file.modules->modelFingerprint == modelFingerprint) {
            removed += int64_t(s.file.modules->modules.size());
            s.file.modules->modules.clear();
        }
    if (modelFingerprint == m->fingerprint)
        m->heads.clear();
    return removed;
}

int64_t KnowledgeTier::invalidateTag(const std::string &tag)
{
    int64_t removed = 0;
    for (auto &s : m->scopes)
        if (s.file.modules) {
            auto &mods = s.file.modules->modules;
            const auto before = mods.size();
            mods.erase(std::remove_if(mods.begin(), mods.end(),
                                      [&](const core::KnowledgeModule &x) { return x.nodeId == tag; }),
                       mods.end());
            removed += int64_t(before - mods.size());
        }
    return removed;
}

core::StoreStats KnowledgeTier::stats() const
{
    core::StoreStats st;
    for (const auto &s : m->scopes)
        if (s.file.modules)
            for (const auto &mod : s.file.modules->modules) {
                ++st.entries;
                for (const auto &l : mod.layers)
                    st.bytes += int64_t((l.keys.size() + l.values.size()) * sizeof(float));
            }
    st.inserts = m->costs.modulesRecomputed;
    return st;
}

const std::vector<KnowledgeScope> &KnowledgeTier::scopes() const
{
    return m->scopes;
}

const KnowledgeCosts &KnowledgeTier::costs() const
{
    return m->costs;
}

std::vector<std::string> KnowledgeTier::warnings() const
{
    return m->warnings;
}

} // namespace kvwb::gpu
