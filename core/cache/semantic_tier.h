// Semantic response cache (GPTCache style): a response is reused when the embedding of a new
// prompt is within a cosine threshold of a cached prompt's, within the same namespace (tenant,
// unless shared, and model fingerprint). One hnswlib HNSW index (inner product on unit vectors)
// per namespace; evicted or invalidated entries are marked deleted in the index.
//
// Embedders turn text into unit vectors: LexicalEmbedder needs no model (hashed character n-grams
// and words); gpu/ provides one that mean-pools a loaded model's hidden states.
//
// Thread-safety: none (engine thread); hnswlib forbids inserts during queries.
#pragma once

#include "core/cache/cache_store.h"
#include "core/cache/cache_tier.h"
#include "core/cache/entry_thresholds.h"

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvwb::core {

class Embedder
{
public:
    virtual ~Embedder() = default;
    virtual int dim() const = 0;
    virtual std::string name() const = 0; // e.g. "lexical-512"
    // A unit-length vector [dim] (all zeros only for text with nothing to embed).
    virtual std::vector<float> embed(const std::string &text) = 0;
};

// Feature hashing (FNV-1a) of lower-cased character 3..5-grams within words and of word unigrams
// and bigrams into dim buckets with signs, sublinear counts, L2-normalised. Deterministic.
class LexicalEmbedder : public Embedder
{
public:
    explicit LexicalEmbedder(int dim = 512);
    int dim() const override;
    std::string name() const override; // "lexical-512", "lexical-idf-512" once fitted
    std::vector<float> embed(const std::string &text) override;

    // Inverse document frequencies from a set of texts (no labels): each feature then weighs
    // (1 + log tf) x (1 + log((N + 1) / (df + 1))), so words every question shares ("what", "is")
    // count less than the ones that tell questions apart. A feature no document had weighs as a
    // feature of df 0. Fitting again replaces the weights.
    void fitIdf(const std::vector<std::string> &documents);
    bool idfFitted() const { return !m_idf.empty() || m_documents > 0; }

private:
    std::unordered_map<uint64_t, int> features(const std::string &text) const;
    int m_dim;
    std::unordered_map<uint64_t, float> m_idf;
    size_t m_documents = 0;
};

struct SemanticHit
{
    CachedResponse response;
    double similarity = 0; // cosine to the cached prompt's embedding
    std::string cachedPrompt;
};

class SemanticTier : public CacheTier
{
public:
    // threshold: cosine similarity a hit needs (GPTCache's default is 0.8). dim: embedding size.
    SemanticTier(TierLimits limits, int dim, double threshold);
    // As a CacheTier: requests are embedded (their embedText) with `embedder`, which must outlive
    // the tier.
    SemanticTier(TierLimits limits, Embedder &embedder, double threshold);
    ~SemanticTier();
    SemanticTier(SemanticTier &&) noexcept;
    SemanticTier &operator=(SemanticTier &&) noexcept;

    double threshold() const;
    void setThreshold(double threshold);
    // Per-entry thresholds under an error bound (core/cache/entry_thresholds.h): the threshold
    // becomes a floor, and above it each entry serves only when its estimated error stays under
    // the bound; the other requests are computed and their outcome observed (the entry's answer was
    // right when the computed request has the entry's intent, both known, else when the computed
    // answer equals the entry's). CacheTier lookups and inserts only. nullopt: the global threshold.
    void setErrorBound(std::optional<EntryBoundOptions> options);
    // Guards (core/cache/semantic_guards.h) on CacheTier lookups: a candidate above the threshold
    // whose question differs from the cached one as a guard says is not served (nor counted a use).
    void setGuards(SemanticGuards guards);
    const SemanticGuards &guards() const;
    // A second stage on CacheTier lookups (core/cache/semantic_verifier.h): a candidate past the
    // threshold and the guards serves only when the verifier passes it (fails closed); with
    // overrulesGuards a guarded candidate is verified too and serves on a pass. The verifier must
    // outlive the tier. Default: none.
    void setVerifier(VerifierSettings verifier);
    // The nearest visible entry (any similarity; nullopt when the namespace is empty), without
    // applying the threshold, and without counting a use: for threshold sweeps.
    std::optional<SemanticHit> nearest(const TenantScope &scope, const std::vector<float> &embedding,
                                       int64_t nowMs);
    // The nearest entry if its similarity >= threshold (counts a use), else nullopt.
    std::optional<SemanticHit> lookup(const TenantScope &scope, const std::vector<float> &embedding,
                                      int64_t nowMs);
    // The same with the guards applied to `text` against the candidate's cached text: a blocked
    // candidate is reported in `note` (its guard, whether its intent was `intent`) and not served.
    std::optional<SemanticHit> lookup(const TenantScope &scope, const std::vector<float> &embedding,
                                      int64_t nowMs, const std::string &text, const std::string &intent,
                                      TierLookup &note);
    void insert(const TenantScope &scope, const std::string &prompt, const std::vector<float> &embedding,
                CachedResponse response, int64_t nowMs, const std::vector<std::string> &tags = {});
    int64_t invalidateModel(const std::string &modelFingerprint) override;
    int64_t invalidateTag(const std::string &tag) override;
    StoreStats stats() const override;

    // CacheTier (needs the embedder constructor): the nearest entry is reported (similarity and
    // intent) whether or not it passes the threshold; each request is embedded once.
    TierKind kind() const override { return TierKind::Semantic; }
    TierLookup lookup(const TierRequest &request) override;
    void insert(const TierRequest &request, TierInsert computed) override;
    int64_t evict(int64_t nowMs) override;

private:
    const std::vector<float> &embeddingOf(const TierRequest &request);
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace kvwb::core
