#include "gpu/replay/kv_tiers.h"

#include "core/util/clock.h"
#include "core/util/error.h"
#include "gpu/transfer/cross_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvwb::gpu {

using core::ModelRole;
using core::TierLookup;
using core::TierRequest;

PrefixKvTier::PrefixKvTier(const Model *a, const Model *b, const core::TierLimits &limits, int blockSize,
                           core::SharedStore *store, core::FloatType storeDtype)
    : m_shared(store), m_limits(limits), m_block(blockSize), m_storeDtype(core::toDType(storeDtype))
{
    if (blockSize < 1)
        throw core::Error(core::ErrorCode::InvalidArgument,
                          fmt::format("prefix block size must be >= 1, got {}", blockSize));
    const Model *models[2] = {a, b};
    for (int i = 0; i < 2; ++i) {
        ModelStore &s = m_stores[i];
        s.model = models[i];
        if (!s.model)
            continue;
        s.fingerprint = s.model->checkpoint().fingerprint();
        const int elem = floatTypeBytes(s.model->kvDtype()); // the GPU-side caches the tree holds
        s.tree =
            std::make_unique<core::PrefixTree>(limits, blockSize, s.model->config().kvBytesPerToken(elem));
    }
}

PrefixKvTier::ModelStore &PrefixKvTier::storeOf(ModelRole role)
{
    return m_stores[role == ModelRole::A ? 0 : 1];
}

void PrefixKvTier::releaseCaches(ModelStore &s)
{
    if (s.tree)
        for (uint64_t h : s.tree->releasedHandles())
            s.caches.erase(h);
}

void PrefixKvTier::releaseAll()
{
    for (auto &s : m_stores)
        releaseCaches(s);
}

namespace {

// The store key of the block ending at `end` tokens: the token ids up to there, as int32 bytes.
std::string blockKey(const std::vector<int> &tokens, int end)
{
    return std::string(reinterpret_cast<const char *>(tokens.data()), size_t(end) * sizeof(int));
}

} // namespace

PrefixKvTier::Match PrefixKvTier::fetchBlocks(ModelStore &s, ModelRole role, const std::string &tenant,
                                              const std::vector<int> &tokens, int64_t nowMs,
                                              core::StoreNote &outcome)
{
    const core::TenantScope scope(m_limits.shareAcrossTenants ? std::string() : tenant, s.fingerprint);
    const int layers = s.model->config().numLayers;
    const int heads = s.model->config().numKvHeads;
    const int hd = s.model->config().headDim;
    const int maxBlocks = int(tokens.size()) / m_block;
    std::vector<std::string> bodies;
    std::vector<core::DType> dtypes; // of each body: blocks of F32, F16 and BF16 are all read
    outcome = core::StoreNote::Miss;
    // every whole block of the prompt in one round trip; the leading run of hits is used
    std::vector<std::string> keys;
    for (int k = 1; k <= maxBlocks; ++k)
        keys.push_back(blockKey(tokens, k * m_block));
    const std::vector<core::StoreGet> found = m_shared->getMany(scope, "prefix", keys, nowMs);
    for (const core::StoreGet &g : found) {
        if (g.outcome != core::StoreOutcome::Hit) {
            if (g.outcome != core::StoreOutcome::Miss)
                outcome = g.outcome == core::StoreOutcome::Refused ? core::StoreNote::Refused
                                                                   : core::StoreNote::Unavailable;
            break;
        }
        const auto &h = g.payload->header;
        if (!core::isKvBodyDType(h.dtype) || h.keyForm != core::KeyForm::PostRope ||
            h.shape != std::vector<int64_t>{layers, 2, heads, m_block, hd}) {
            outcome = core::StoreNote::Refused; // another geometry under this fingerprint: never used
            m_shared->refusedAfterGet();
            break;
        }
        bodies.push_back(g.payload->body);
        dtypes.push_back(h.dtype);
    }
    (void)role;
    const size_t blockFloats = size_t(heads) * size_t(m_block) * size_t(hd); // one K (or V) of a layer
    std::vector<std::vector<float>> blocks; // [layers, 2, heads, block, hd] each
    // A block whose envelope and CRC are valid may still hold NaN, Inf or absurd values (a writer's
    // bug, or a poisoned store): it is refused like a foreign block, and only the blocks before it
    // are used. Never placed in a cache, never blamed on the model's weights.
    for (size_t b = 0; b < bodies.size(); ++b) {
        std::vector<float> values(size_t(layers) * 2 * blockFloats);
        core::unpackKvBody(bodies[b], dtypes[b], values.data(), values.size());
        if (!std::all_of(values.begin(), values.end(), [](float x) {
                return std::isfinite(x) && std::abs(x) <= core::kMaxStoredKvValue;
            })) {
            outcome = core::StoreNote::Refused;
            m_shared->refusedAfterGet();
            break;
        }
        blocks.push_back(std::move(values));
    }
    bodies.resize(blocks.size());
    if (bodies.empty())
        return {};
    if (outcome == core::StoreNote::Miss)
        outcome = core::StoreNote::Hit;
    const int n = int(bodies.size()) * m_block;
    std::vector<core::HeadMajorKv> kv(static_cast<size_t>(layers));
    for (int l = 0; l < layers; ++l) {
        kv[size_t(l)].keys.resize(size_t(heads) * size_t(n) * size_t(hd));
        kv[size_t(l)].values.resize(kv[size_t(l)].keys.size());
        for (size_t b = 0; b < bodies.size(); ++b) {
            const float *base = blocks[b].data() + size_t(l) * 2 * blockFloats;
            for (int part = 0; part < 2; ++part) {
                float *dst = part == 0 ? kv[size_t(l)].keys.data() : kv[size_t(l)].values.data();
                const float *src = base + size_t(part) * blockFloats;
                for (int hh = 0; hh < heads; ++hh)
                    std::memcpy(dst + (size_t(hh) * size_t(n) + b * size_t(m_block)) * size_t(hd),
                                src + size_t(hh) * size_t(m_block) * size_t(hd),
                                size_t(m_block) * size_t(hd) * sizeof(float));
            }
        }
    }
    m_fetched = s.model->newCache();
    m_fetched.assign(std::vector<int>(tokens.begin(), tokens.begin() + n), kv, core::KeyForm::PostRope);
    m_fetchedBlocks = int(bodies.size());
    return Match{n, &m_fetched};
}

void PrefixKvTier::putBlocks(ModelStore &s, const std::string &tenant, const std::vector<int> &tokens,
                             const KvCache &cache, int fromBlock, int64_t nowMs)
{
    const int blocks = std::min(int(tokens.size()), cache.tokens()) / m_block;
    if (blocks <= fromBlock)
        return;
    const core::TenantScope scope(m_limits.shareAcrossTenants ? std::string() : tenant, s.fingerprint);
    const int layers = cache.numLayers(), heads = cache.numKvHeads(), hd = cache.headDim();
    const int total = cache.tokens();
    std::vector<core::HeadMajorKv> host(static_cast<size_t>(layers));
    for (int l = 0; l < layers; ++l)
        host[size_t(l)] = cache.layer(l, core::KeyForm::PostRope);
    const size_t blockFloats = size_t(heads) * size_t(m_block) * size_t(hd);
    std::vector<float> body(size_t(layers) * 2 * blockFloats);
    const core::PayloadHeader h = core::kvPayloadHeader(scope, "prefix", layers, heads, m_block, hd,
                                                        core::KeyForm::PostRope, nowMs, m_storeDtype);
    std::string packed;
    for (int k = fromBlock; k < blocks; ++k) {
        for (int l = 0; l < layers; ++l)
            for (int part = 0; part < 2; ++part) {
                const std::vector<float> &src = part == 0 ? host[size_t(l)].keys : host[size_t(l)].values;
                float *dst = body.data() + (size_t(l) * 2 + size_t(part)) * blockFloats;
                for (int hh = 0; hh < heads; ++hh)
                    std::memcpy(dst + size_t(hh) * size_t(m_block) * size_t(hd),
                                src.data() +
                                    (size_t(hh) * size_t(total) + size_t(k) * size_t(m_block)) * size_t(hd),
                                size_t(m_block) * size_t(hd) * sizeof(float));
            }
        packed.clear();
        core::appendKvBody(packed, body.data(), body.size(), m_storeDtype);
        const std::string env = core::encodePayload(h, packed);
        if (m_shared->put(scope, "prefix", blockKey(tokens, (k + 1) * m_block), env, m_limits.ttlMs, nowMs) !=
            core::StoreOutcome::Hit)
            return; // no server: the rest would fail the same way
        m_storeBytesPut += int64_t(env.size());
        ++m_storeBlocksPut;
    }
}

PrefixKvTier::Match PrefixKvTier::longestPrefix(ModelRole role, const std::string &tenant,
                                                const std::vector<int> &tokens, int64_t nowMs)
{
    ModelStore &s = storeOf(role);
    if (m_shared && s.model)
        return fetchBlocks(s, role, tenant, tokens, nowMs, m_lastOutcome);
    if (!s.tree)
        return {};
    const auto match = s.tree->lookup(core::TenantScope(tenant, s.fingerprint), tokens, nowMs);
    if (match.tokens <= 0)
        return {};
    const auto it = s.caches.find(match.handle);
    if (it == s.caches.end())
        return {};
    return Match{match.tokens, &it->second};
}

TierLookup PrefixKvTier::lookup(const TierRequest &request)
{
    TierLookup out;
    m_fetchedBlocks = 0;
    const auto match = longestPrefix(request.role, request.scope.tenant(), request.tokens, request.nowMs);
    if (m_shared) {
        out.store = m_lastOutcome;
        m_fetchedFor = request.requestId;
    }
    if (!match.cache)
        return out;
    // the last prompt token is always computed: its logits give the first generated token
    const int reused = std::min(match.tokens, int(request.tokens.size()) - 1);
    if (reused <= 0)
        return out;
    auto cache = match.cache->fork();
    cache.truncate(reused);
    out.kv = std::make_unique<KvCachePayload>(std::move(cache));
    out.reusedTokens = reused;
    out.hit = true;
    return out;
}

void PrefixKvTier::insert(const TierRequest &request, core::TierInsert computed)
{
    if (computed.approximate) // converted KV or a placed module is not this model's own
        return;
    ModelStore &s = storeOf(request.role);
    auto *payload = dynamic_cast<KvCachePayload *>(computed.kv.get());
    if (m_shared) {
        // blocks the lookup found are in the store already; the cache stays with the replay
        if (payload && s.model)
            putBlocks(s, request.scope.tenant(), request.tokens, payload->cache,
                      m_fetchedFor == request.requestId ? m_fetchedBlocks : 0, request.nowMs);
        return;
    }
    if (!s.tree || !payload)
        return;
    const uint64_t handle = m_nextHandle++;
    s.caches.emplace(handle, std::move(payload->cache));
    computed.kv.reset();
    s.tree->insert(core::TenantScope(request.scope.tenant(), s.fingerprint), request.tokens, handle,
                   request.nowMs);
    releaseCaches(s);
}

int64_t PrefixKvTier::evict(int64_t nowMs)
{
    int64_t n = 0;
    for (auto &s : m_stores)
        if (s.tree)
            n += s.tree->expire(nowMs);
    releaseAll();
    return n;
}

int64_t PrefixKvTier::invalidateModel(const std::string &modelFingerprint)
{
    if (m_shared)
        return m_shared->invalidateModel(modelFingerprint);
    int64_t n = 0;
    for (auto &s : m_stores)
        if (s.tree)
            n += s.tree->invalidateModel(modelFingerprint);
    releaseAll();
    return n;
}

int64_t PrefixKvTier::invalidateTag(const std::string &tag)
{
    if (m_shared)
        return m_shared->invalidateTag(tag);
    int64_t n = 0;
    for (auto &s : m_stores)
        if (s.tree)
            n += s.tree->invalidateTag(tag);
    releaseAll();
    return n;
}

core::StoreStats PrefixKvTier::stats() const
{
    core::StoreStats total;
    if (m_shared) {
        total.inserts = m_storeBlocksPut;
        total.bytes = m_storeBytesPut;
        return total;
    }
    for (const auto &s : m_stores) {
        if (!s.tree)
            continue;
        total += s.tree->stats();
    }
    return total;
}

CrossModelTier::CrossModelTier(PrefixKvTier &source, const Model &a, const Model &b,
                               const core::Tokenizer &tokenizerA, const core::Tokenizer &tokenizerB,
                               const Converter &converter, CrossTierOptions options)
    : m_source(source), m_a(a), m_b(b), m_tokenizerA(tokenizerA), m_tokenizerB(tokenizerB),
      m_converter(converter), m_options(options)
{}

TierLookup CrossModelTier::lookup(const TierRequest &request)
{
    TierLookup out;
    if (request.role != ModelRole::B)
        return out;
    const std::vector<int> &prompt = request.tokens;
    // A's tree is keyed by A's token ids; B's positions are paired with A's through the byte spans
    // when the two tokenizers disagree on this prompt
    TokenPairing pairing = samePairing(prompt);
    if (m_tokenizerA.encode(request.prompt, true) != prompt) {
        pairing = pairTokens(request.prompt, m_tokenizerA, m_tokenizerB, m_options.alignPolicy);
        if (pairing.idsB != prompt)
            throw core::Error(
                core::ErrorCode::InvalidArgument,
                fmt::format("request {}: model B's tokens differ from its tokenizer's encoding of "
                            "the prompt",
                            request.requestId));
        if (!m_warnedTokenizers)
            out.warnings.push_back(
                fmt::format("request {}: A and B tokenise prompts differently; the cross-model "
                            "tier pairs B's tokens with A's by their byte spans ('{}')",
                            request.requestId, core::alignPolicyName(m_options.alignPolicy)));
        m_warnedTokenizers = true;
    }
    const auto match =
        m_source.longestPrefix(ModelRole::A, request.scope.tenant(), pairing.idsA, request.nowMs);
    out.store = m_source.lastStoreOutcome(); // None unless A's blocks live in a shared store
    if (!match.cache)
        return out;
    // B's leading positions whose A token is in the matched prefix (all of them up to the match on
    // one tokenizer); B's last prompt token is always left for B to process
    int keep = std::min(match.tokens, int(prompt.size()) - 1);
    if (pairing.crossTokenizer()) {
        keep = 0;
        while (keep < int(prompt.size()) - 1 && pairing.alignment[size_t(keep)] < match.tokens)
            ++keep;
    }
    if (keep < m_options.minTokens)
        return out;
    auto source = match.cache->fork();
    if (pairing.crossTokenizer()) {
        const auto t0 = core::Clock::now();
        TokenPairing cut = pairing;
        cut.idsB.resize(size_t(keep) + 1);
        cut.alignment.resize(size_t(keep) + 1);
        source = pairedSourceCache(m_a, source, cut, m_converter.keyForm());
        out.modelMs += core::msSince(t0);
    } else {
        source.truncate(keep);
    }
    if (m_options.gate) {
        const auto t0 = core::Clock::now();
        const GateResult g = qualityGate(m_b, m_converter, source, prompt[size_t(keep)], m_options.gateTail,
                                         m_options.gateSignal, m_options.gateThreshold);
        out.modelMs += core::msSince(t0);
        out.gate = g.passed ? core::GateDecision::Pass : core::GateDecision::Fail;
        out.gateValue = g.value;
        if (!g.passed)
            return out; // fall back to the next tier / B's own prefill, logged in the row
    }
    const auto t0 = core::Clock::now();
    KvCache converted = m_b.newCache();
    m_converter.convert(source, converted);
    const int recomputed = recomputeConverted(m_b, converted, m_options.recompute);
    out.modelMs += core::msSince(t0);
    out.kv = std::make_unique<KvCachePayload>(std::move(converted));
    out.reusedTokens = keep - recomputed;
    out.computedTokens = recomputed; // B's own positions inside the cache handed back
    out.hit = true;
    return out;
}

} // namespace kvwb::gpu
