#include "gpu/replay/replay.h"

#include "core/cache/exact_tier.h"
#include "core/cache/shared_tiers.h"
#include "core/metrics/distributions.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "gpu/model/encoder.h"
#include "gpu/replay/kv_tiers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <thread>

namespace kvwb::gpu {

using core::Clock;
using core::Error;
using core::ErrorCode;
using core::msSince;
using core::TierKind;

ModelEmbedder::ModelEmbedder(const Model &model, const core::Tokenizer &tokenizer, int layer)
    : m_model(model), m_tokenizer(tokenizer), m_layer(layer < 0 ? model.config().numLayers / 2 : layer)
{
    if (m_layer > model.config().numLayers)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("embedder layer {} is outside 0..{}", m_layer, model.config().numLayers));
}

int ModelEmbedder::dim() const
{
    return m_model.config().hiddenSize;
}

std::string ModelEmbedder::name() const
{
    return fmt::format("model-l{}-{}", m_layer, dim());
}

std::vector<float> ModelEmbedder::embed(const std::string &text)
{
    auto ids = m_tokenizer.encode(text, true);
    const int limit = m_model.contextLimit();
    if (int(ids.size()) > limit)
        ids.erase(ids.begin(), ids.end() - limit); // the end of a prompt says what is asked
    std::vector<float> v(size_t(dim()), 0.0f);
    if (ids.empty())
        return v;
    v = m_model.meanHiddenState(ids, m_layer);
    normaliseInPlace(v);
    return v;
}

namespace {

const int kSweepSteps = 11;
const double kSweepThresholds[kSweepSteps] = {0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.93, 0.95, 0.98, 0.99};

bool has(const std::vector<TierKind> &tiers, TierKind t)
{
    return std::find(tiers.begin(), tiers.end(), t) != tiers.end();
}

// The tier objects of a stack: one per kind named in it (a kind named twice is consulted twice),
// plus the prefix store the cross-model tier reads when the stack has no prefix tier of its own.
struct TierSet
{
    std::vector<std::unique_ptr<core::CacheTier>> owned;
    std::vector<core::CacheTier *> all;   // every tier, offered the computed results
    std::vector<core::CacheTier *> stack; // lookup order
};

TierSet buildTiers(const ReplayModels &m, const ReplayOptions &o)
{
    TierSet set;
    std::map<TierKind, core::CacheTier *> byKind;
    PrefixKvTier *prefix = nullptr;
    if (has(o.tiers, TierKind::Prefix) || has(o.tiers, TierKind::Cross)) {
        auto p =
            std::make_unique<PrefixKvTier>(m.a, m.b, o.prefixLimits, o.prefixBlock, o.store, o.storeKvDtype);
        prefix = p.get();
        byKind[TierKind::Prefix] = p.get();
        set.owned.push_back(std::move(p));
    }
    for (TierKind t : o.tiers) {
        if (byKind.count(t))
            continue;
        std::unique_ptr<core::CacheTier> tier;
        switch (t) {
        case TierKind::Exact:
            if (o.store)
                tier = std::make_unique<core::SharedExactTier>(*o.store, o.exactLimits);
            else
                tier = std::make_unique<core::ExactTier>(o.exactLimits);
            break;
        case TierKind::Semantic:
            if (o.store) {
                auto shared = std::make_unique<core::SharedSemanticTier>(*o.store, o.semanticLimits,
                                                                         *m.embedder, o.threshold);
                shared->setGuards(o.guards);
                shared->setVerifier(o.verifier);
                tier = std::move(shared);
            } else {
                auto semantic =
                    std::make_unique<core::SemanticTier>(o.semanticLimits, *m.embedder, o.threshold);
                semantic->setErrorBound(o.semanticBound);
                semantic->setGuards(o.guards);
                semantic->setVerifier(o.verifier);
                tier = std::move(semantic);
            }
            break;
        case TierKind::Cross: {
            tier = std::make_unique<CrossModelTier>(*prefix, *m.a, *m.b, *m.tokenizerA,
                                                    m.tokenizerB ? *m.tokenizerB : *m.tokenizerA,
                                                    *m.converter, o.cross);
            break;
        }
        case TierKind::Knowledge:
            byKind[t] = m.knowledge;
            continue;
        case TierKind::Prefix:
        case TierKind::None:
            break;
        }
        byKind[t] = tier.get();
        set.owned.push_back(std::move(tier));
    }
    for (const auto &[kind, tier] : byKind)
        set.all.push_back(tier);
    for (TierKind t : o.tiers)
        set.stack.push_back(byKind.at(t));
    return set;
}

} // namespace

core::LedgerRow requestRow(const core::WorkloadRequest &request)
{
    core::LedgerRow row;
    row.requestId = request.id;
    row.arrivalMs = request.tMs;
    row.tenant = request.tenant;
    row.model = request.model;
    row.intent = request.intent;
    row.question = request.question.empty() ? core::ledgerText(request.prompt, true)
                                            : core::ledgerText(request.question);
    return row;
}

namespace {

// Refuses a replay whose tiers lack what they need, or whose options are out of range.
void checkReplay(const std::vector<core::WorkloadRequest> &requests, const ReplayModels &m,
                 const ReplayOptions &o)
{
    if (!m.a || !m.tokenizerA)
        throw Error(ErrorCode::InvalidArgument, "replay needs model A and its tokenizer");
    for (TierKind t : o.tiers)
        if (t == TierKind::None)
            throw Error(ErrorCode::InvalidArgument, "'none' is not a cache tier");
    if (has(o.tiers, TierKind::Semantic) && !m.embedder)
        throw Error(ErrorCode::InvalidArgument, "the semantic tier needs an embedder");
    if (has(o.tiers, TierKind::Cross) && (!m.b || !m.converter))
        throw Error(
            ErrorCode::InvalidArgument,
            "the cross-model tier needs model B and a converter from A to B (kvwb align --experiment)");
    if (has(o.tiers, TierKind::Knowledge) && (!m.b || !m.knowledge))
        throw Error(ErrorCode::InvalidArgument,
                    "the knowledge tier needs model B and a knowledge graph (kvwb knowledge build)");
    if (o.prefixBlock < 1)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("prefix block size must be >= 1, got {}", o.prefixBlock));
    if (o.semanticBound && o.store)
        throw Error(
            ErrorCode::InvalidArgument,
            "per-entry semantic thresholds (--error-bound) keep their evidence in this process: not with "
            "a shared store");
    if (!(o.speed > 0))
        throw Error(ErrorCode::InvalidArgument, fmt::format("replay speed must be > 0, got {}", o.speed));
    if (o.onClock) {
        // On the clock every wait is bounded: the whole span at this speed stays within the arrival
        // limit of a workload (30 days), so no request waits longer.
        int64_t lastMs = 0;
        for (const auto &r : requests)
            lastMs = std::max(lastMs, r.tMs);
        if (double(lastMs) / o.speed > double(core::kMaxArrivalMs))
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format("on the clock at speed {} this workload's last arrival ({} ms) is {:.1f} days "
                            "away, more than {} days: raise --speed or replay without --clock",
                            o.speed, lastMs, double(lastMs) / o.speed / 86400e3,
                            core::kMaxArrivalMs / 86400000));
    }
}

// The model that serves one role's requests, its tokenizer and its checkpoint's fingerprint.
struct Side
{
    const Model *model = nullptr;
    const core::Tokenizer *tokenizer = nullptr;
    std::string fingerprint;
};

const Side &sideOf(const Side (&sides)[2], core::ModelRole role)
{
    return sides[role == core::ModelRole::A ? 0 : 1];
}

// Every request's prompt ids, and whether it fits its model's context.
struct PreparedRequests
{
    std::vector<std::vector<int>> ids;
    std::vector<char> tooLong; // served as "not served: context"
};

// Validate every request before running any: a bad request 900 of 1000 must not cost a replay.
PreparedRequests prepareRequests(const std::vector<core::WorkloadRequest> &requests, const Side (&sides)[2],
                                 const ReplayOptions &o)
{
    PreparedRequests p;
    p.ids.resize(requests.size());
    p.tooLong.assign(requests.size(), 0);
    for (size_t i = 0; i < requests.size(); ++i) {
        const auto &r = requests[i];
        const Side &s = sideOf(sides, r.model);
        if (!s.model)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("request {} asks for model b, but no model B is loaded", r.id));
        if (r.prompt.empty())
            throw Error(ErrorCode::InvalidArgument, fmt::format("request {}: empty prompt", r.id));
        if (r.tenant.find('\x1f') != std::string::npos) // the tiers' namespace separator
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format("request {}: field 'tenant' contains the control character U+001F", r.id));
        p.ids[i] = s.tokenizer->encode(r.prompt, true);
        const int maxTokens = o.maxTokens > 0 ? o.maxTokens : r.maxTokens;
        p.tooLong[i] = int64_t(p.ids[i].size()) + maxTokens > s.model->contextLimit();
    }
    return p;
}

// What does not fit is not served, marked in the ledger, and counted in one warning per model.
void warnTooLong(const std::vector<core::WorkloadRequest> &requests, const std::vector<char> &tooLong,
                 const Side (&sides)[2], std::vector<std::string> &warnings)
{
    for (const core::ModelRole model : core::kRoles) {
        int64_t n = 0, firstId = -1;
        for (size_t i = 0; i < requests.size(); ++i)
            if (tooLong[i] && requests[i].model == model && n++ == 0)
                firstId = requests[i].id;
        if (n > 0) {
            const Side &s = sideOf(sides, model);
            warnings.push_back(fmt::format(
                "{} requests for model {} do not fit its context of {} tokens (prompt + max_tokens; "
                "the first is request {}): not served, marked not_served=context in the ledger",
                n, core::roleName(model), s.model->contextLimit(), firstId));
        }
    }
}

// What one replay keeps across its requests.
struct ReplayRun
{
    const ReplayOptions &o;
    TierSet tiers;
    ReplayResult &result;
    std::mt19937_64 rng;
    std::uniform_real_distribution<double> uniform;
    std::vector<std::pair<double, bool>> nearestSeen; // (similarity, intent differs) per semantic lookup
    Clock::time_point start;
};

// A request being served: what it is generated with, its ledger row and its timings.
struct Serving
{
    const core::WorkloadRequest &r;
    const Model &model;
    GenerateOptions go;
    double queueMs = 0;
    Clock::time_point t0;
    core::LedgerRow row;
    double modelMs = 0; // model work inside this request (excluded from the overhead)

    // Runs f, counting its time as model work.
    template <class F> void timed(F &&f)
    {
        const auto tm = Clock::now();
        f();
        modelMs += msSince(tm);
    }
};

// What the tier stack handed back for a request: a response, or a cache to continue from.
struct StackFind
{
    std::optional<core::CachedResponse> response;
    std::unique_ptr<core::KvPayload> reuse; // the cache to continue from (KV tier hit)
    int reused = 0;
    int lookupComputed = 0;     // of that cache, positions the tier computed for this request
    std::vector<int> rewritten; // the prompt a tier rewrote (knowledge), else empty
    std::string reusedIntent;
};

// Asks the tiers in lookup order until one hits, noting each tier's evidence in the row.
StackFind lookupStack(ReplayRun &run, const core::TierRequest &request, Serving &sv)
{
    StackFind f;
    core::LedgerRow &row = sv.row;
    for (core::CacheTier *tier : run.tiers.stack) {
        const auto tl = Clock::now();
        core::TierLookup found = tier->lookup(request);
        sv.modelMs += found.modelMs;
        for (auto &w : found.warnings)
            run.result.warnings.push_back(std::move(w));
        if (found.nearestSimilarity) {
            row.similarity = *found.nearestSimilarity;
            run.nearestSeen.push_back({*found.nearestSimilarity, !sv.r.intent.empty() &&
                                                                     !found.nearestIntent.empty() &&
                                                                     found.nearestIntent != sv.r.intent});
        }
        if (found.gate != core::GateDecision::None) {
            row.gate = found.gate;
            row.gateValue = found.gateValue;
        }
        if (!found.knowledge.node.empty() || found.knowledge.module != core::ModuleFate::None) {
            row.knowledgeNode = found.knowledge.node;
            row.knowledgeVerdict = found.knowledge.verdict;
            row.knowledgeModule = found.knowledge.module;
        }
        if (found.knowledge.profileApplied >= 0)
            row.profileApplied = found.knowledge.profileApplied;
        if (found.semanticDecision != core::SemanticDecision::None)
            row.semanticDecision = found.semanticDecision;
        if (found.guard != core::SemanticGuard::None) {
            row.semanticGuard = found.guard;
            row.guardedSameIntent = found.guardedSameIntent;
        }
        if (found.verifier != core::VerifierVerdict::None) {
            row.verifier = found.verifier;
            row.verifierScore = found.verifierScore;
            row.verifierMs = found.verifierMs;
            row.verifiedSameIntent = sv.r.intent.empty() || found.nearestIntent.empty()
                                         ? -1
                                         : int(sv.r.intent == found.nearestIntent);
        }
        // the worst outcome of the request's store calls: unavailable > refused > hit > miss
        row.store = core::worseStoreNote(row.store, found.store);
        row.lookupMs += msSince(tl);
        row.tierHits[tier->kind()] = found.hit;
        if (found.hit) {
            row.answeredBy = tier->kind();
            f.response = std::move(found.response);
            f.reuse = std::move(found.kv);
            f.reused = found.reusedTokens;
            f.lookupComputed = found.computedTokens;
            f.rewritten = std::move(found.prompt);
            f.reusedIntent = std::move(found.reusedIntent);
            break;
        }
    }
    return f;
}

// A response tier's hit: the cached answer, checked against a fresh generation when shadowed.
void serveCached(Serving &sv, const core::CachedResponse &response, const std::vector<int> &prompt,
                 bool shadow, std::vector<std::string> &outputs)
{
    core::LedgerRow &row = sv.row;
    row.cachedIntent = response.intent;
    row.cachedRequestId = response.requestId;
    row.falseHit = !sv.r.intent.empty() && !response.intent.empty() && response.intent != sv.r.intent;
    row.generatedTokens = int(response.outputIds.size());
    row.tokensReused = row.promptTokens;
    row.tokensComputed = 0;
    row.ttftMs = row.totalMs = msSince(sv.t0) + sv.queueMs;
    outputs.push_back(response.text);
    if (shadow)
        sv.timed([&] {
            row.shadowExact = sv.model.generate(prompt, sv.go).outputIds == response.outputIds ? 1 : 0;
        });
}

// Generates the answer (continuing from a KV tier's cache if one hit), shadows it against a fresh
// run when asked, and offers what was computed to every tier.
void serveComputed(ReplayRun &run, Serving &sv, StackFind &f, const std::vector<int> &input, bool shadow,
                   const core::TierRequest &request, const core::Tokenizer &tokenizer)
{
    const Model &model = sv.model;
    core::LedgerRow &row = sv.row;
    KvCache cache = f.reuse ? std::move(static_cast<KvCachePayload &>(*f.reuse).cache) : model.newCache();
    std::vector<float> hitLogits;
    if (shadow && f.reuse)
        sv.timed([&] {
            auto probe = cache.fork();
            hitLogits = model.forward(
                std::vector<int>(input.begin() + f.reused + f.lookupComputed, input.end()), probe);
        });
    double firstMs = -1;
    GenerateResult gen;
    sv.timed([&] {
        gen = model.generate(input, cache, sv.go, [&](int, float) {
            if (firstMs < 0)
                firstMs = msSince(sv.t0);
            return true;
        });
    });
    row.ttftMs = (firstMs < 0 ? msSince(sv.t0) : firstMs) + sv.queueMs;
    row.totalMs = msSince(sv.t0) + sv.queueMs;
    row.generatedTokens = gen.stats.generatedTokens;
    row.tokensReused = std::max(0, gen.stats.reusedTokens - f.lookupComputed);
    row.tokensComputed = gen.stats.prefillTokens + gen.stats.generatedTokens + f.lookupComputed;
    if (!f.reusedIntent.empty()) {
        row.cachedIntent = f.reusedIntent;
        row.falseHit = !sv.r.intent.empty() && f.reusedIntent != sv.r.intent;
    }
    const std::string text = tokenizer.decode(gen.outputIds, true);
    if (shadow)
        sv.timed([&] {
            auto fresh = model.newCache();
            const auto scratchLogits = model.forward(input, fresh);
            row.shadowKl = core::klDivergence(scratchLogits, hitLogits);
            row.shadowExact = model.generate(input, sv.go).outputIds == gen.outputIds ? 1 : 0;
        });
    run.result.outputs.push_back(text);
    // Offer what was computed to every tier. An answer and a cache that descend from an approximate
    // hit (converted KV, a knowledge module) are not the model's own: no tier keeps them, so no
    // later hit, exact or prefix, serves them as if they were (core/cache/cache_tier.h).
    const bool approximate = core::isApproximate(row.answeredBy);
    const core::CachedResponse cr{text, gen.outputIds, sv.r.intent, sv.r.id};
    std::unique_ptr<core::KvPayload> computed;
    if (!approximate)
        computed = std::make_unique<KvCachePayload>(std::move(cache));
    for (core::CacheTier *tier : run.tiers.all)
        tier->insert(request, core::TierInsert{cr, computed, approximate});
}

// Serves one request that fits its model's context (waiting for its arrival on the clock) and
// returns its ledger row; its output and overhead are appended to the result.
core::LedgerRow serveRequest(ReplayRun &run, const core::WorkloadRequest &r, const Side &s,
                             const std::vector<int> &prompt)
{
    const ReplayOptions &o = run.o;
    GenerateOptions go;
    go.maxTokens = o.maxTokens > 0 ? o.maxTokens : r.maxTokens;
    const std::string sampling = fmt::format("greedy max={}", go.maxTokens);

    double queueMs = 0;
    if (o.onClock) {
        const double due = double(r.tMs) / o.speed, now = msSince(run.start);
        if (due > now)
            std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(due - now));
        else
            queueMs = now - due; // still busy with earlier requests: the wait counts as latency
    }
    Serving sv{r, *s.model, go, queueMs, Clock::now(), requestRow(r)};
    sv.row.promptTokens = int(prompt.size());

    const std::string &embedText = o.embedQuestion && !r.question.empty() ? r.question : r.prompt;
    const core::TierRequest request{core::TenantScope(r.tenant, s.fingerprint),
                                    r.model,
                                    r.id,
                                    r.tMs,
                                    r.prompt,
                                    embedText,
                                    prompt,
                                    sampling,
                                    r.intent,
                                    r.user,
                                    r.question,
                                    go.maxTokens};
    StackFind found = lookupStack(run, request, sv);
    const std::vector<int> &input = found.rewritten.empty() ? prompt : found.rewritten;
    sv.row.promptTokens = int(input.size());

    const bool shadow = sv.row.answeredBy != TierKind::None && o.shadowFraction > 0 &&
                        run.uniform(run.rng) < o.shadowFraction;
    if (found.response)
        serveCached(sv, *found.response, prompt, shadow, run.result.outputs);
    else
        serveComputed(run, sv, found, input, shadow, request, *s.tokenizer);
    sv.row.answer = core::ledgerText(run.result.outputs.back());
    run.result.overheadMs.push_back(std::max(0.0, msSince(sv.t0) - sv.modelMs));
    return sv.row;
}

// The semantic threshold sweep: at each threshold, how many lookups would have hit, and how many
// of those hits would have been of another intent.
core::MetricTable thresholdSweep(const std::vector<std::pair<double, bool>> &nearestSeen)
{
    core::MetricTable sweep;
    sweep.columns = {"threshold", "hit_rate", "false_hit_rate", "hits", "false_hits"};
    for (double t : kSweepThresholds) {
        double hits = 0, falseHits = 0;
        for (const auto &[sim, differs] : nearestSeen)
            if (sim >= t) {
                ++hits;
                falseHits += differs ? 1 : 0;
            }
        const double n = double(std::max<size_t>(nearestSeen.size(), 1));
        sweep.rows.push_back({t, hits / n, hits > 0 ? falseHits / hits : 0.0, hits, falseHits});
    }
    return sweep;
}

} // namespace

ReplayResult replayWorkload(const std::vector<core::WorkloadRequest> &requests, const ReplayModels &m,
                            const ReplayOptions &o, const ReplayEventFn &onRow)
{
    checkReplay(requests, m, o);
    Side sides[2];
    sides[0] = {m.a, m.tokenizerA, m.a->checkpoint().fingerprint()};
    if (m.b)
        sides[1] = {m.b, m.tokenizerB ? m.tokenizerB : m.tokenizerA, m.b->checkpoint().fingerprint()};

    ReplayResult result;
    const PreparedRequests prepared = prepareRequests(requests, sides, o);
    warnTooLong(requests, prepared.tooLong, sides, result.warnings);
    ReplayRun run{o,
                  buildTiers(m, o),
                  result,
                  std::mt19937_64(o.seed),
                  std::uniform_real_distribution<double>(0.0, 1.0),
                  {},
                  Clock::now()};

    for (size_t i = 0; i < requests.size(); ++i) {
        const auto &r = requests[i];
        const std::vector<int> &prompt = prepared.ids[i];
        const Side &s = sideOf(sides, r.model);
        if (prepared.tooLong[i]) {
            core::LedgerRow row = requestRow(r);
            row.promptTokens = int(prompt.size());
            row.notServed = core::NotServed::Context;
            result.rows.push_back(row);
            result.outputs.emplace_back();
            result.overheadMs.push_back(0);
        } else {
            result.rows.push_back(serveRequest(run, r, s, prompt));
        }
        if (onRow && !onRow(result.rows.back(), int(i) + 1, int(requests.size()))) {
            result.cancelled = true;
            break;
        }
    }
    result.summary = core::summarize(result.rows, o.prices);
    for (const core::CacheTier *tier : run.tiers.all)
        result.tierStats[tier->kind()] = tier->stats();
    result.thresholdSweep = thresholdSweep(run.nearestSeen);
    return result;
}

} // namespace kvwb::gpu
