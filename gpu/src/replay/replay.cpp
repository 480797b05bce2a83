#include "gpu/replay/replay.h"

#include "core/util/error.h"
#include "core/cache/exact_tier.h"
#include "core/cache/prefix_tree.h"
#include "gpu/src/clock_p.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <unordered_map>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;
using core::TierKind;
using detail::Clock;
using detail::msSince;

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
    double norm = 0;
    for (float x : v)
        norm += double(x) * x;
    if (norm > 0)
        for (float &x : v)
            x = float(x / std::sqrt(norm));
    return v;
}

namespace {

const int kSweepSteps = 11;
const double kSweepThresholds[kSweepSteps] = {0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.93, 0.95, 0.98, 0.99};

bool has(const std::vector<TierKind> &tiers, TierKind t)
{
    return std::find(tiers.begin(), tiers.end(), t) != tiers.end();
}

// Per model: its prefix tree and the KV caches the tree's handles point at.
struct ModelState
{
    const Model *model = nullptr;
    const core::Tokenizer *tokenizer = nullptr;
    std::string fingerprint;
    std::unique_ptr<core::PrefixTree> tree;
    std::unordered_map<uint64_t, KvCache> caches;

    void releaseCaches()
    {
        if (tree)
            for (uint64_t h : tree->releasedHandles())
                caches.erase(h);
    }
};

double firstTokenKl(const std::vector<float> &scratch, const std::vector<float> &hit)
{
    const size_t vocab = scratch.size();
    auto logZ = [&](const std::vector<float> &x) {
        const double m = *std::max_element(x.begin(), x.end());
        double s = 0;
        for (float v : x)
            s += std::exp(double(v) - m);
        return m + std::log(s);
    };
    const double zp = logZ(scratch), zq = logZ(hit);
    double kl = 0;
    for (size_t j = 0; j < vocab; ++j) {
        const double lp = double(scratch[j]) - zp, lq = double(hit[j]) - zq;
        kl += std::exp(lp) * (lp - lq);
    }
    return std::max(kl, 0.0);
}

} // namespace

ReplayResult replayWorkload(const std::vector<core::WorkloadRequest> &requests, const ReplayModels &m,
                            const ReplayOptions &o, const ReplayEventFn &onRow)
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
    if (o.prefixBlock < 1)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("prefix block size must be >= 1, got {}", o.prefixBlock));
    if (!(o.speed > 0))
        throw Error(ErrorCode::InvalidArgument, fmt::format("replay speed must be > 0, got {}", o.speed));

    ModelState states[2];
    states[0].model = m.a;
    states[0].tokenizer = m.tokenizerA;
    states[1].model = m.b;
    states[1].tokenizer = m.tokenizerB ? m.tokenizerB : m.tokenizerA;
    const bool keepPrefixes = has(o.tiers, TierKind::Prefix) || has(o.tiers, TierKind::Cross);
    for (auto &s : states) {
        if (!s.model)
            continue;
        s.fingerprint = s.model->checkpoint().fingerprint();
        const int elem = s.model->options().dtype == ComputeType::F32 ? 4 : 2;
        if (keepPrefixes)
            s.tree = std::make_unique<core::PrefixTree>(o.prefixLimits, o.prefixBlock,
                                                        s.model->config().kvBytesPerToken(elem));
    }

    // Validate every request before running any: a bad request 900 of 1000 must not cost a replay.
    std::vector<std::vector<int>> ids(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
        const auto &r = requests[i];
        if (r.model != "a" && r.model != "b")
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format("request {}: unknown model '{}' (expected \"a\" or \"b\")", r.id, r.model));
        const ModelState &s = states[r.model == "a" ? 0 : 1];
        if (!s.model)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("request {} asks for model b, but no model B is loaded", r.id));
        if (r.prompt.empty())
            throw Error(ErrorCode::InvalidArgument, fmt::format("request {}: empty prompt", r.id));
        ids[i] = s.tokenizer->encode(r.prompt, true);
        const int maxTokens = o.maxTokens > 0 ? o.maxTokens : r.maxTokens;
        if (int(ids[i].size()) + maxTokens > s.model->contextLimit())
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format(
                    "request {}: prompt of {} tokens + max_tokens {} exceeds model {}'s context of {}", r.id,
                    ids[i].size(), maxTokens, r.model, s.model->contextLimit()));
    }

    ReplayResult result;
    core::ExactTier exact(o.exactLimits);
    std::unique_ptr<core::SemanticTier> semantic;
    if (has(o.tiers, TierKind::Semantic))
        semantic = std::make_unique<core::SemanticTier>(o.semanticLimits, m.embedder->dim(), o.threshold);
    std::mt19937_64 rng(o.seed);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::vector<std::pair<double, bool>> nearestSeen; // (similarity, intent differs) per semantic lookup
    bool warnedTokenizers = false;
    const auto start = Clock::now();

    for (size_t i = 0; i < requests.size(); ++i) {
        const auto &r = requests[i];
        const std::vector<int> &prompt = ids[i];
        ModelState &s = states[r.model == "a" ? 0 : 1];
        const Model &model = *s.model;
        GenerateOptions go;
        go.maxTokens = o.maxTokens > 0 ? o.maxTokens : r.maxTokens;
        const std::string sampling = fmt::format("greedy max={}", go.maxTokens);

        double queueMs = 0;
        if (o.onClock) {
            const double due = double(r.tMs) / o.speed, now = msSince(start);
            if (due > now)
                std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(due - now));
            else
                queueMs = now - due; // still busy with earlier requests: the wait counts as latency
        }
        const auto t0 = Clock::now();
        core::LedgerRow row;
        row.requestId = r.id;
        row.arrivalMs = r.tMs;
        row.tenant = r.tenant;
        row.model = r.model;
        row.intent = r.intent;
        row.promptTokens = int(prompt.size());

        double modelMs = 0; // model work inside this request (excluded from the overhead)
        auto timed = [&](auto &&f) {
            const auto tm = Clock::now();
            f();
            modelMs += msSince(tm);
        };
        std::optional<core::CachedResponse> response;
        std::optional<KvCache> reuse; // the cache to continue from (prefix / cross hit)
        int reused = 0;
        std::vector<float> embedding;
        const std::string &embedText = o.embedQuestion && !r.question.empty() ? r.question : r.prompt;
        for (TierKind tier : o.tiers) {
            const auto tl = Clock::now();
            bool hit = false;
            switch (tier) {
            case TierKind::Exact:
                response =
                    exact.lookup({r.tenant, s.fingerprint, core::normalisePrompt(r.prompt), sampling}, r.tMs);
                hit = response.has_value();
                break;
            case TierKind::Semantic: {
                if (embedding.empty())
                    embedding = m.embedder->embed(embedText);
                const auto near = semantic->nearest(r.tenant, s.fingerprint, embedding, r.tMs);
                if (near) {
                    row.similarity = near->similarity;
                    nearestSeen.push_back({near->similarity, !r.intent.empty() &&
                                                                 !near->response.intent.empty() &&
                                                                 near->response.intent != r.intent});
                }
                if (auto h = semantic->lookup(r.tenant, s.fingerprint, embedding, r.tMs)) {
                    response = h->response;
                    hit = true;
                }
                break;
            }
            case TierKind::Prefix: {
                if (!s.tree)
                    break;
                const auto match = s.tree->lookup(r.tenant, s.fingerprint, prompt, r.tMs);
                if (match.tokens > 0) {
                    auto it = s.caches.find(match.handle);
                    if (it != s.caches.end()) {
                        reused = std::min(match.tokens, int(prompt.size()) - 1);
                        reuse = it->second.fork();
                        reuse->truncate(reused);
                        hit = reused > 0;
                    }
                }
                break;
            }
            case TierKind::Cross: {
                if (r.model != "b")
                    break;
                ModelState &sa = states[0];
                // A's tree is keyed by A's token ids: the two tokenizers must agree on this prompt
                if (sa.tokenizer->encode(r.prompt, true) != prompt) {
                    if (!warnedTokenizers)
                        result.warnings.push_back(fmt::format(
                            "request {}: A and B tokenise prompts differently; the cross-model tier "
                            "skips such prompts",
                            r.id));
                    warnedTokenizers = true;
                    break;
                }
                const auto match = sa.tree->lookup(r.tenant, sa.fingerprint, prompt, r.tMs);
                if (match.tokens < o.minCrossTokens)
                    break;
                auto it = sa.caches.find(match.handle);
                if (it == sa.caches.end())
                    break;
                const int keep = std::min(match.tokens, int(prompt.size()) - 1);
                auto source = it->second.fork();
                source.truncate(keep);
                if (o.gate) {
                    GateResult g;
                    timed([&] {
                        g = qualityGate(model, *m.converter, source, prompt[size_t(keep)], o.gateTail,
                                        o.gateSignal, o.gateThreshold);
                    });
                    row.gate = g.passed ? "pass" : "fail";
                    row.gateValue = g.value;
                    if (!g.passed)
                        break; // fall back to the next tier / B's own prefill, logged in the row
                }
                reuse = model.newCache();
                timed([&] { m.converter->convert(source, *reuse); });
                reused = keep;
                hit = true;
                break;
            }
            case TierKind::None:
                break;
            }
            row.lookupMs += msSince(tl);
            row.tierHits[tier] = hit;
            if (hit) {
                row.answeredBy = tier;
                break;
            }
        }

        const bool shadow =
            row.answeredBy != TierKind::None && o.shadowFraction > 0 && uniform(rng) < o.shadowFraction;
        if (response) {
            row.cachedIntent = response->intent;
            row.cachedRequestId = response->requestId;
            row.falseHit = !r.intent.empty() && !response->intent.empty() && response->intent != r.intent;
            row.generatedTokens = int(response->outputIds.size());
            row.tokensReused = row.promptTokens;
            row.tokensComputed = 0;
            row.ttftMs = row.totalMs = msSince(t0) + queueMs;
            if (shadow)
                timed([&] {
                    row.shadowExact = model.generate(prompt, go).outputIds == response->outputIds ? 1 : 0;
                });
        } else {
            std::vector<float> hitLogits;
            if (shadow && reuse)
                timed([&] {
                    auto probe = reuse->fork();
                    hitLogits = model.forward(std::vector<int>(prompt.begin() + reused, prompt.end()), probe);
                });
            KvCache cache = reuse ? std::move(*reuse) : model.newCache();
            double firstMs = -1;
            GenerateResult gen;
            timed([&] {
                gen = model.generate(prompt, cache, go, [&](int, float) {
                    if (firstMs < 0)
                        firstMs = msSince(t0);
                    return true;
                });
            });
            row.ttftMs = (firstMs < 0 ? msSince(t0) : firstMs) + queueMs;
            row.totalMs = msSince(t0) + queueMs;
            row.generatedTokens = gen.stats.generatedTokens;
            row.tokensReused = gen.stats.reusedTokens;
            row.tokensComputed = gen.stats.prefillTokens + gen.stats.generatedTokens;
            const std::string text = s.tokenizer->decode(gen.outputIds, true);
            if (shadow)
                timed([&] {
                    auto fresh = model.newCache();
                    const auto scratchLogits = model.forward(prompt, fresh);
                    row.shadowKl = firstTokenKl(scratchLogits, hitLogits);
                    row.shadowExact = model.generate(prompt, go).outputIds == gen.outputIds ? 1 : 0;
                });
            // cache what was computed, in every tier of the stack
            core::CachedResponse cr{text, gen.outputIds, r.intent, r.id};
            if (has(o.tiers, TierKind::Exact))
                exact.insert({r.tenant, s.fingerprint, core::normalisePrompt(r.prompt), sampling}, cr, r.tMs);
            if (semantic) {
                if (embedding.empty())
                    embedding = m.embedder->embed(embedText);
                semantic->insert(r.tenant, s.fingerprint, embedText, embedding, cr, r.tMs);
            }
            if (s.tree) {
                const uint64_t handle = uint64_t(i) + 1;
                s.caches.emplace(handle, std::move(cache));
                s.tree->insert(r.tenant, s.fingerprint, prompt, handle, r.tMs);
                s.releaseCaches();
            }
        }
        result.overheadMs.push_back(std::max(0.0, msSince(t0) - modelMs));
        result.rows.push_back(row);
        if (onRow && !onRow(result.rows.back(), int(i) + 1, int(requests.size()))) {
            result.cancelled = true;
            break;
        }
    }
    result.summary = core::summarize(result.rows, o.prices);
    result.thresholdSweep.columns = {"threshold", "hit_rate", "false_hit_rate", "hits", "false_hits"};
    for (double t : kSweepThresholds) {
        double hits = 0, falseHits = 0;
        for (const auto &[sim, differs] : nearestSeen)
            if (sim >= t) {
                ++hits;
                falseHits += differs ? 1 : 0;
            }
        const double n = double(std::max<size_t>(nearestSeen.size(), 1));
        result.thresholdSweep.rows.push_back(
            {t, hits / n, hits > 0 ? falseHits / hits : 0.0, hits, falseHits});
    }
    return result;
}

} // namespace kvwb::gpu
