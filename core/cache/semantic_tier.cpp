#include "core/cache/semantic_tier.h"

#include "core/cache/vector_index.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace kvwb::core {
namespace {

// FNV-1a, 64-bit: deterministic across platforms and runs (std::hash is not).
uint64_t fnv1a(std::string_view s, uint64_t h = 14695981039346656037ull)
{
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

void normaliseInPlace(std::vector<float> &v)
{
    double sq = 0;
    for (float x : v)
        sq += double(x) * x;
    if (sq <= 0)
        return;
    const float inv = float(1.0 / std::sqrt(sq));
    for (float &x : v)
        x *= inv;
}

} // namespace

LexicalEmbedder::LexicalEmbedder(int dim) : m_dim(dim)
{
    if (dim < 1)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("lexical embedder: dim is {}; expected >= 1", dim));
}

int LexicalEmbedder::dim() const
{
    return m_dim;
}

std::string LexicalEmbedder::name() const
{
    return idfFitted() ? fmt::format("lexical-idf-{}", m_dim) : fmt::format("lexical-{}", m_dim);
}

void LexicalEmbedder::fitIdf(const std::vector<std::string> &documents)
{
    std::unordered_map<uint64_t, int> df;
    for (const std::string &d : documents)
        for (const auto &[h, tf] : features(d))
            ++df[h];
    m_idf.clear();
    m_documents = documents.size();
    const double n = double(m_documents);
    for (const auto &[h, count] : df)
        m_idf[h] = float(1.0 + std::log((n + 1.0) / (double(count) + 1.0)));
}

std::vector<float> LexicalEmbedder::embed(const std::string &text)
{
    const auto counts = features(text);
    std::vector<float> v(size_t(m_dim), 0.0f);
    const float unseen = float(1.0 + std::log(double(m_documents) + 1.0));
    for (const auto &[h, tf] : counts) {
        // Bucket from the low bits, sign from bit 63: independent enough that collisions cancel
        // in expectation instead of adding up.
        const float sign = (h >> 63) ? -1.0f : 1.0f;
        float weight = float(1.0 + std::log(double(tf)));
        if (idfFitted()) {
            const auto it = m_idf.find(h);
            weight *= it == m_idf.end() ? unseen : it->second;
        }
        v[size_t(h % uint64_t(m_dim))] += sign * weight;
    }
    normaliseInPlace(v);
    return v;
}

std::unordered_map<uint64_t, int> LexicalEmbedder::features(const std::string &text) const
{
    // Each feature kind hashes under its own prefix so the word "cat" and the 3-gram "cat" differ.
    std::unordered_map<uint64_t, int> counts;
    const auto ws = text::lowerWords(text);
    for (size_t i = 0; i < ws.size(); ++i) {
        const std::string marked = "<" + ws[i] + ">";
        for (size_t n = 3; n <= 5; ++n)
            for (size_t at = 0; at + n <= marked.size(); ++at)
                ++counts[fnv1a(std::string_view(marked).substr(at, n), fnv1a("c:"))];
        ++counts[fnv1a(ws[i], fnv1a("w:"))];
        if (i + 1 < ws.size())
            ++counts[fnv1a(ws[i + 1], fnv1a(" ", fnv1a(ws[i], fnv1a("b:"))))];
    }
    return counts;
}

struct SemanticTier::Impl
{
    // One vector index per namespace (exact up to VectorIndex::kDefaultExactLimit entries, HNSW
    // beyond). Labels are slots of entryOfLabel; a removed entry's label is marked deleted and later
    // reused (add on a deleted label replaces it in place), so a namespace's index holds at most its
    // peak number of live entries.
    struct Index
    {
        std::unique_ptr<VectorIndex> graph;
        std::vector<CacheStore::EntryId> entryOfLabel; // [label] 0 = free
        std::vector<size_t> freeLabels;
        size_t live = 0;
    };
    struct Payload
    {
        std::string ns;
        size_t label = 0;
        std::string prompt;
        CachedResponse response;
    };

    static constexpr size_t kM = 16;
    static constexpr size_t kEfConstruction = 200;
    // HNSW's, for a namespace beyond the exact limit. ef 128: recall@1 on 5k random unit vectors
    // (dim 64) was 0.946 at ef 64 and 0.994 at ef 128 (tests/core/cache/tst_vector_index.cpp); ef
    // bounds the search work, k (<= 8) only how many results come back to filter.
    static constexpr size_t kEfSearch = 128;
    static constexpr size_t kCandidates = 8;
    static constexpr size_t kInitialCapacity = 256;

    int dim;
    double threshold;
    Embedder *embedder = nullptr; // the CacheTier interface's (not owned)
    // The last request's embedding: a request is embedded once for its lookup and its insert.
    bool memoValid = false;
    int64_t memoRequest = 0;
    std::string memoText;
    std::vector<float> memo; // [dim]
    std::unordered_map<std::string, Index> indexes;
    std::unordered_map<CacheStore::EntryId, Payload> entries;
    // Per-entry thresholds (setErrorBound), and the request explored last: its nearest entry, to
    // observe once the request has been computed.
    std::optional<EntryThresholds> bound;
    SemanticGuards guards; // none unless set
    VerifierSettings verifier;

    // The guards, then the verifier, on a candidate past the threshold: true when it may serve. What
    // held it back (or let it through) goes into note.
    bool screen(const std::string &text, const std::string &intent, const std::string &cachedText,
                const std::string &cachedIntent, TierLookup &note) const
    {
        if (const auto check = checkGuards(text, cachedText, guards); check.blocked != SemanticGuard::None) {
            note.guard = check.blocked;
            note.guardedSameIntent =
                intent.empty() || cachedIntent.empty() ? -1 : int(intent == cachedIntent);
            if (!verifier.verifier || !verifier.overrulesGuards)
                return false;
        }
        if (!verifier.verifier)
            return true;
        const auto v = verify(verifier, cachedText, text);
        note.verifier = v.verdict;
        note.verifierScore = v.score;
        note.verifierMs = v.ms;
        if (!v.error.empty())
            note.warnings.push_back("verifier " + verifier.verifier->name() + ": " + v.error +
                                    " (the candidate was not served)");
        return v.verdict == VerifierVerdict::Pass;
    }

    struct Explored
    {
        int64_t requestId = -1;
        CacheStore::EntryId entry = 0;
        double similarity = 0;
    };
    Explored explored;
    CacheStore store; // last: its callback reaches the maps above

    Impl(TierLimits limits, int d, double t)
        : dim(d), threshold(t), store(limits, [this](CacheStore::EntryId id) { dropped(id); })
    {}

    void dropped(CacheStore::EntryId id)
    {
        if (bound)
            bound->forget(id);
        const auto it = entries.find(id);
        if (it == entries.end())
            return; // an insert that failed half-way
        const auto ix = indexes.find(it->second.ns);
        if (ix != indexes.end()) {
            Index &index = ix->second;
            const size_t label = it->second.label;
            index.graph->markDeleted(label);
            index.entryOfLabel[label] = 0;
            index.freeLabels.push_back(label);
            if (--index.live == 0)
                indexes.erase(ix); // a namespace with no entries frees its graph
        }
        entries.erase(it);
    }

    std::vector<float> checked(const std::vector<float> &embedding, const char *where) const
    {
        if (int(embedding.size()) != dim)
            throw Error(ErrorCode::Shape,
                        fmt::format("semantic {}: embedding has {} values; the tier's dim is {}", where,
                                    embedding.size(), dim));
        std::vector<float> v = embedding;
        normaliseInPlace(v); // defensive: similarity = inner product holds only for unit vectors
        return v;
    }

    Index &indexFor(const std::string &ns)
    {
        auto [it, added] = indexes.try_emplace(ns);
        Index &index = it->second;
        if (added) {
            try {
                index.graph = std::make_unique<VectorIndex>(dim, kInitialCapacity, kM, kEfConstruction,
                                                            kEfSearch, "semantic index");
            } catch (...) {
                indexes.erase(it);
                throw;
            }
        }
        return index;
    }

    struct Found
    {
        CacheStore::EntryId id = 0;
        double similarity = 0;
    };

    // The nearest live entry of a namespace. Removed entries are marked deleted, which hnswlib 0.6.2
    // leaves out of searchKnn's results; the entry check below is a second guard, and k > 1 leaves
    // room for it.
    std::optional<Found> nearest(const std::string &ns, const std::vector<float> &q, int64_t nowMs)
    {
        store.expire(nowMs);
        const auto ix = indexes.find(ns);
        if (ix == indexes.end() || ix->second.live == 0)
            return std::nullopt;
        Index &index = ix->second;
        const size_t k = std::min(kCandidates, index.live);
        const auto ranked = index.graph->search(q.data(), k);
        for (const auto &[distance, label] : ranked) {
            if (label >= index.entryOfLabel.size())
                continue;
            const CacheStore::EntryId id = index.entryOfLabel[label];
            if (id != 0 && store.contains(id))
                return Found{id, 1.0 - double(distance)}; // InnerProductSpace distance = 1 - <a, b>
        }
        return std::nullopt;
    }

    SemanticHit hitOf(const Found &f) const
    {
        const Payload &p = entries.at(f.id);
        return SemanticHit{p.response, f.similarity, p.prompt};
    }
};

SemanticTier::SemanticTier(TierLimits limits, int dim, double threshold)
{
    if (dim < 1)
        throw Error(ErrorCode::InvalidArgument, fmt::format("semantic tier: dim is {}; expected >= 1", dim));
    if (!std::isfinite(threshold))
        throw Error(ErrorCode::InvalidArgument, "semantic tier: threshold is not a finite number");
    m_impl = std::make_unique<Impl>(limits, dim, threshold);
}

SemanticTier::SemanticTier(TierLimits limits, Embedder &embedder, double threshold)
    : SemanticTier(limits, embedder.dim(), threshold)
{
    m_impl->embedder = &embedder;
}

SemanticTier::~SemanticTier() = default;
SemanticTier::SemanticTier(SemanticTier &&) noexcept = default;
SemanticTier &SemanticTier::operator=(SemanticTier &&) noexcept = default;

double SemanticTier::threshold() const
{
    return m_impl->threshold;
}

void SemanticTier::setThreshold(double threshold)
{
    if (!std::isfinite(threshold))
        throw Error(ErrorCode::InvalidArgument, "semantic tier: threshold is not a finite number");
    m_impl->threshold = threshold;
}

std::optional<SemanticHit> SemanticTier::nearest(const TenantScope &scope,
                                                 const std::vector<float> &embedding, int64_t nowMs)
{
    Impl &d = *m_impl;
    const auto q = d.checked(embedding, "nearest");
    const auto found = d.nearest(d.store.namespaceOf(scope.tenant(), scope.modelFingerprint()), q, nowMs);
    if (!found)
        return std::nullopt;
    return d.hitOf(*found);
}

std::optional<SemanticHit> SemanticTier::lookup(const TenantScope &scope, const std::vector<float> &embedding,
                                                int64_t nowMs, const std::string &text,
                                                const std::string &intent, TierLookup &note)
{
    Impl &d = *m_impl;
    const auto q = d.checked(embedding, "lookup");
    const auto found = d.nearest(d.store.namespaceOf(scope.tenant(), scope.modelFingerprint()), q, nowMs);
    if (!found || !(found->similarity >= d.threshold)) // NaN never passes
        return std::nullopt;
    auto hit = d.hitOf(*found);
    if (!d.screen(text, intent, hit.cachedPrompt, hit.response.intent, note))
        return std::nullopt;
    if (!d.store.touch(found->id, scope.tenant(), scope.modelFingerprint(), nowMs))
        return std::nullopt;
    return hit;
}

void SemanticTier::setGuards(SemanticGuards guards)
{
    m_impl->guards = guards;
}

const SemanticGuards &SemanticTier::guards() const
{
    return m_impl->guards;
}

void SemanticTier::setVerifier(VerifierSettings verifier)
{
    if (verifier.verifier && !std::isfinite(verifier.threshold))
        throw Error(ErrorCode::InvalidArgument,
                    "semantic tier: the verifier's threshold is not a finite number");
    m_impl->verifier = verifier;
}

std::optional<SemanticHit> SemanticTier::lookup(const TenantScope &scope, const std::vector<float> &embedding,
                                                int64_t nowMs)
{
    Impl &d = *m_impl;
    const auto q = d.checked(embedding, "lookup");
    const auto found = d.nearest(d.store.namespaceOf(scope.tenant(), scope.modelFingerprint()), q, nowMs);
    if (!found || !(found->similarity >= d.threshold)) // NaN never passes
        return std::nullopt;
    if (!d.store.touch(found->id, scope.tenant(), scope.modelFingerprint(), nowMs))
        return std::nullopt;
    return d.hitOf(*found);
}

void SemanticTier::insert(const TenantScope &scope, const std::string &prompt,
                          const std::vector<float> &embedding, CachedResponse response, int64_t nowMs,
                          const std::vector<std::string> &tags)
{
    Impl &d = *m_impl;
    const auto v = d.checked(embedding, "insert");
    const std::string &tenant = scope.tenant(), &modelFingerprint = scope.modelFingerprint();
    const std::string ns = d.store.namespaceOf(tenant, modelFingerprint);
    const int64_t bytes = int64_t(prompt.size() + response.text.size() +
                                  response.outputIds.size() * sizeof(int) + size_t(d.dim) * sizeof(float));
    const auto id = d.store.insert(EntryScope{tenant, modelFingerprint, tags}, bytes, nowMs);
    if (!id)
        return;
    try {
        Impl::Index &index = d.indexFor(ns);
        size_t label;
        if (!index.freeLabels.empty()) {
            label = index.freeLabels.back();
        } else {
            label = index.entryOfLabel.size();
        }
        index.graph->add(v.data(), label); // grows the graph when label is beyond its capacity
        if (!index.freeLabels.empty() && index.freeLabels.back() == label)
            index.freeLabels.pop_back();
        else
            index.entryOfLabel.push_back(0);
        index.entryOfLabel[label] = *id;
        ++index.live;
        d.entries.emplace(*id, Impl::Payload{ns, label, prompt, std::move(response)});
    } catch (...) {
        d.store.erase(*id); // no payload yet: the callback finds nothing to drop
        throw;
    }
}

int64_t SemanticTier::invalidateModel(const std::string &modelFingerprint)
{
    return m_impl->store.invalidateModel(modelFingerprint);
}

int64_t SemanticTier::invalidateTag(const std::string &tag)
{
    return m_impl->store.invalidateTag(tag);
}

StoreStats SemanticTier::stats() const
{
    return m_impl->store.stats();
}

const std::vector<float> &SemanticTier::embeddingOf(const TierRequest &request)
{
    Impl &d = *m_impl;
    if (!d.embedder)
        throw Error(ErrorCode::InvalidArgument, "the semantic tier needs an embedder");
    if (!d.memoValid || d.memoRequest != request.requestId || d.memoText != request.embedText) {
        d.memo = d.embedder->embed(request.embedText);
        d.memoRequest = request.requestId;
        d.memoText = request.embedText;
        d.memoValid = true;
    }
    return d.memo;
}

TierLookup SemanticTier::lookup(const TierRequest &request)
{
    TierLookup out;
    const auto &embedding = embeddingOf(request);
    if (const auto near = nearest(request.scope, embedding, request.nowMs)) {
        out.nearestSimilarity = near->similarity;
        out.nearestIntent = near->response.intent;
    }
    if (m_impl->bound) {
        Impl &d = *m_impl;
        const auto q = d.checked(embedding, "lookup");
        const auto found = d.nearest(
            d.store.namespaceOf(request.scope.tenant(), request.scope.modelFingerprint()), q, request.nowMs);
        if (!found || !(found->similarity >= d.threshold)) // NaN never passes
            return out;
        if (!d.screen(request.embedText, request.intent, d.hitOf(*found).cachedPrompt, out.nearestIntent,
                      out))
            return out; // neither served nor explored: computed
        const auto estimate = d.bound->decide(found->id, found->similarity);
        if (estimate.serve && d.store.touch(found->id, request.scope.tenant(),
                                            request.scope.modelFingerprint(), request.nowMs)) {
            out.response = d.hitOf(*found).response;
            out.hit = true;
            out.semanticDecision = SemanticDecision::Serve;
        } else {
            d.explored = Impl::Explored{request.requestId, found->id, found->similarity};
            out.semanticDecision = SemanticDecision::Explore;
        }
        return out;
    }
    if (auto h = lookup(request.scope, embedding, request.nowMs, request.embedText, request.intent, out)) {
        out.response = std::move(h->response);
        out.hit = true;
    }
    return out;
}

void SemanticTier::setErrorBound(std::optional<EntryBoundOptions> options)
{
    m_impl->bound.reset();
    if (options)
        m_impl->bound.emplace(*options);
    m_impl->explored = {};
}

void SemanticTier::insert(const TierRequest &request, TierInsert computed)
{
    Impl &d = *m_impl;
    if (d.bound && d.explored.requestId == request.requestId) {
        const auto it = d.entries.find(d.explored.entry);
        if (it != d.entries.end()) {
            const CachedResponse &cached = it->second.response;
            const bool labelled = !cached.intent.empty() && !computed.response.intent.empty();
            const bool right =
                labelled ? cached.intent == computed.response.intent : cached.text == computed.response.text;
            // an approximate answer's text is no ground truth; its request's intent is
            if (labelled || !computed.approximate)
                d.bound->observe(d.explored.entry, d.explored.similarity, right);
        }
        d.explored = {};
    }
    if (computed.approximate)
        return;
    const auto &embedding = embeddingOf(request);
    insert(request.scope, request.embedText, embedding, computed.response, request.nowMs);
}

int64_t SemanticTier::evict(int64_t nowMs)
{
    return m_impl->store.expire(nowMs);
}

} // namespace kvwb::core
