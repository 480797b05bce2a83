// How well a semantic cache's similarity threshold separates the requests it may answer from the
// near misses it must not, on a labelled request set (`kvwb sweep-semantic`, docs/cache-tiers.md,
// "Choosing the threshold"). Every request is compared with every earlier request of its tenant
// (exact cosine, no approximate index: the measurement must not carry an index's recall error), as
// a cache that stored every request would: its nearest earlier request is what the tier would
// serve. With intent labels (duplicates share one; near misses differ):
//   a request "should hit" when an earlier request of its tenant has its intent;
//   at threshold t it hits when its nearest similarity >= t, correctly when that nearest request has
//   its intent;
//   precision = correct / hits, recall = correct / should-hit, false-hit rate = 1 - precision.
// Requests without an intent are not scored; a request whose text equals an earlier one's is left
// to the exact tier (not scored) unless includeExact.
//
// Thread-safety: pure functions; the embedder is used from the calling thread only.
#pragma once

#include "core/cache/semantic_tier.h"
#include "core/cache/semantic_verifier.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::core {

struct LabelledText
{
    std::string tenant;
    std::string text;   // what the tier embeds (the question)
    std::string intent; // "" unlabelled
};

struct SweepPoint
{
    double threshold = 0;
    int64_t hits = 0;
    int64_t correctHits = 0;
    double precision = 0;    // 1 when there are no hits
    double recall = 0;       // correct hits / should-hit requests
    double falseHitRate = 0; // 1 - precision (0 when there are no hits)
};

struct SemanticSweep
{
    int64_t scored = 0;    // labelled requests with at least one earlier request of their tenant
    int64_t shouldHit = 0; // of them, with an earlier request of the same intent
    int64_t exactSkipped = 0;
    std::vector<SweepPoint> points; // ascending thresholds
    // The lowest threshold of the grid whose false-hit rate is at most the target (with a hit),
    // and its point: the most recall the target allows. nullopt when no threshold meets it.
    std::optional<SweepPoint> atTarget;
    double target = 0;
    // Per scored request: its nearest similarity and whether that nearest has its intent (for
    // charts and per-case analysis).
    std::vector<double> nearest;
    std::vector<bool> nearestCorrect;
    // Per scored request: its index in the requests and its nearest earlier request's (the pair a
    // verifier would judge).
    std::vector<size_t> scoredRequest, nearestRequest;
};

// The verifier's threshold against the same labelled requests: every scored request whose nearest
// similarity is >= similarityThreshold is a candidate the tier would send to the verifier; the
// verifier scores (nearest's text, request's text) and at verifier threshold v the candidate serves
// when its score >= v (a NaN score or a verifier that throws never serves: it fails closed, as in
// the replay). Precision over the served; recall over the sweep's should-hit requests, so it reads
// beside the similarity sweep's.
struct VerifierSweep
{
    double similarityThreshold = 0;
    int64_t candidates = 0;         // scored requests at or above the similarity threshold
    int64_t correctCandidates = 0;  // of them, whose nearest has their intent
    int64_t shouldHit = 0;          // the similarity sweep's
    int64_t errors = 0;             // candidates the verifier gave no number for
    double meanMs = 0;              // per verifier call
    std::vector<SweepPoint> points; // ascending verifier thresholds
    // The lowest verifier threshold whose false-hit rate is at most the target (with a hit).
    std::optional<SweepPoint> atTarget;
    double target = 0;
};

// thresholds: ascending within [0, 1] (empty: 0.00, 0.01, ..., 0.99). Error(InvalidArgument) for a
// target outside [0, 1], a similarity threshold outside [-1, 1] or a bad grid; Error(InvalidArgument)
// when the sweep was not made from these requests (an index out of range).
VerifierSweep sweepVerifier(const std::vector<LabelledText> &requests, const SemanticSweep &sweep,
                            PairVerifier &verifier, double similarityThreshold, double targetFalseHitRate,
                            std::vector<double> thresholds = {});

// thresholds: ascending, each in [-1, 1] (empty: 0.50, 0.51, ..., 0.99). Error(InvalidArgument) for a
// target outside [0, 1] or a threshold grid that is not ascending within [-1, 1].
SemanticSweep sweepSemantic(const std::vector<LabelledText> &requests, Embedder &embedder,
                            double targetFalseHitRate, std::vector<double> thresholds = {},
                            bool includeExact = false);

} // namespace kvwb::core
