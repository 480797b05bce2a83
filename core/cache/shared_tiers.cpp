#include "core/cache/shared_tiers.h"

#include "core/cache/exact_tier.h"
#include "core/util/error.h"

namespace kvwb::core {

namespace {

// The sampling string length-prefixed before the normalised prompt (as ExactTier keys).
std::string exactKeyOf(const TierRequest &r)
{
    return std::to_string(r.sampling.size()) + ":" + r.sampling + normalisePrompt(r.prompt);
}

// The ledger's note of a store call's outcome.
StoreNote noteOf(StoreOutcome o)
{
    switch (o) {
    case StoreOutcome::Hit:
        return StoreNote::Hit;
    case StoreOutcome::Miss:
        return StoreNote::Miss;
    case StoreOutcome::Refused:
        return StoreNote::Refused;
    case StoreOutcome::Unavailable:
        break;
    }
    return StoreNote::Unavailable;
}

} // namespace

SharedExactTier::SharedExactTier(SharedStore &store, TierLimits limits) : m_store(store), m_limits(limits) {}

TenantScope SharedExactTier::scopeOf(const TierRequest &r) const
{
    return TenantScope(m_limits.shareAcrossTenants ? std::string() : r.scope.tenant(),
                       r.scope.modelFingerprint());
}

TierLookup SharedExactTier::lookup(const TierRequest &request)
{
    TierLookup out;
    const StoreGet g = m_store.get(scopeOf(request), "exact", exactKeyOf(request), request.nowMs);
    out.store = noteOf(g.outcome);
    if (g.outcome == StoreOutcome::Hit) {
        try {
            out.response = decodeResponseBody(g.payload->body);
            out.hit = true;
        } catch (const Error &e) {
            out.store = StoreNote::Refused;
            m_store.refusedAfterGet();
            out.warnings.push_back(std::string("exact tier: a stored response was refused: ") + e.what());
        }
    } else if (g.outcome == StoreOutcome::Refused || g.outcome == StoreOutcome::Unavailable) {
        out.warnings.push_back("exact tier (" + m_store.describe() + "): " + g.reason);
    }
    return out;
}

void SharedExactTier::insert(const TierRequest &request, TierInsert computed)
{
    if (computed.approximate)
        return;
    const TenantScope scope = scopeOf(request);
    const std::string env = encodeResponsePayload(scope, "exact", computed.response, request.nowMs);
    if (m_store.put(scope, "exact", exactKeyOf(request), env, m_limits.ttlMs, request.nowMs) ==
        StoreOutcome::Hit) {
        ++m_stats.inserts;
        m_stats.bytes += int64_t(env.size());
    }
}

int64_t SharedExactTier::invalidateModel(const std::string &modelFingerprint)
{
    return m_store.invalidateModel(modelFingerprint);
}

int64_t SharedExactTier::invalidateTag(const std::string &tag)
{
    return m_store.invalidateTag(tag);
}

StoreStats SharedExactTier::stats() const
{
    return m_stats;
}

SharedSemanticTier::SharedSemanticTier(SharedStore &store, TierLimits limits, Embedder &embedder,
                                       double threshold)
    : m_store(store), m_embedder(embedder), m_local(limits, embedder.dim(), threshold)
{}

SharedSemanticTier::~SharedSemanticTier() = default;

bool SharedSemanticTier::catchUp()
{
    for (;;) {
        bool available = true;
        const auto entries = m_store.readStream("semantic", m_lastId, 256, &available);
        if (!available)
            return false;
        for (const auto &e : entries) {
            m_lastId = e.id;
            if (m_ownIds.erase(e.id))
                continue; // this worker's own insert, already in its index
            std::string why;
            const auto p = decodePayloadAnyScope(e.data, PayloadKind::Response, "semantic", &why);
            if (!p) {
                ++m_skipped;
                continue;
            }
            try {
                SemanticEntryBody body = decodeSemanticEntryBody(p->body);
                if (body.embedder != m_embedder.name() || int(body.vector.size()) != m_embedder.dim()) {
                    ++m_skipped; // another embedder's vectors are not comparable
                    continue;
                }
                m_local.insert(TenantScope(p->header.tenant, p->header.fingerprint), body.prompt, body.vector,
                               std::move(body.response), p->header.createdMs);
                ++m_fromOthers;
            } catch (const Error &) {
                ++m_skipped;
            }
        }
        if (entries.size() < 256)
            return true;
    }
}

TierLookup SharedSemanticTier::lookup(const TierRequest &request)
{
    TierLookup out;
    out.store = catchUp() ? StoreNote::Miss : StoreNote::Unavailable;
    if (out.store == StoreNote::Unavailable)
        out.warnings.push_back("semantic tier (" + m_store.describe() +
                               "): the stream could not be read; "
                               "answering from this worker's index");
    if (m_embeddedFor != request.requestId) {
        m_embedding = m_embedder.embed(request.embedText);
        m_embeddedFor = request.requestId;
    }
    if (const auto near = m_local.nearest(request.scope, m_embedding, request.nowMs)) {
        out.nearestSimilarity = near->similarity;
        out.nearestIntent = near->response.intent;
    }
    if (auto h = m_local.lookup(request.scope, m_embedding, request.nowMs, request.embedText, request.intent,
                                out)) {
        out.response = std::move(h->response);
        out.hit = true;
        out.store = worseStoreNote(out.store, StoreNote::Hit);
    }
    return out;
}

void SharedSemanticTier::insert(const TierRequest &request, TierInsert computed)
{
    if (computed.approximate)
        return;
    if (m_embeddedFor != request.requestId) {
        m_embedding = m_embedder.embed(request.embedText);
        m_embeddedFor = request.requestId;
    }
    m_local.insert(request.scope, request.embedText, m_embedding, computed.response, request.nowMs);
    const std::string text = encodeSemanticEntryBody(
        SemanticEntryBody{m_embedder.name(), request.embedText, m_embedding, computed.response});
    PayloadHeader h;
    h.kind = PayloadKind::Response;
    h.tier = "semantic";
    h.tenant = request.scope.tenant();
    h.fingerprint = request.scope.modelFingerprint();
    h.dtype = DType::U8;
    h.shape = {int64_t(text.size())};
    h.createdMs = request.nowMs;
    if (const auto id = m_store.appendStream("semantic", encodePayload(h, text)))
        m_ownIds.insert(*id);
}

int64_t SharedSemanticTier::evict(int64_t nowMs)
{
    return m_local.evict(nowMs);
}

int64_t SharedSemanticTier::invalidateModel(const std::string &modelFingerprint)
{
    return m_local.invalidateModel(modelFingerprint);
}

int64_t SharedSemanticTier::invalidateTag(const std::string &tag)
{
    return m_local.invalidateTag(tag);
}

StoreStats SharedSemanticTier::stats() const
{
    return m_local.stats();
}

} // namespace kvwb::core
