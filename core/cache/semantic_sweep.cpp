#include "core/cache/semantic_sweep.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

namespace kvwb::core {

namespace {

void checkTarget(double target)
{
    if (!(target >= 0 && target <= 1))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("target false-hit rate {} is outside [0, 1]", target));
}

void checkGrid(const std::vector<double> &thresholds, double lo, const char *what)
{
    for (size_t i = 0; i < thresholds.size(); ++i)
        if (!(thresholds[i] >= lo && thresholds[i] <= 1) || (i > 0 && !(thresholds[i] > thresholds[i - 1])))
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{} thresholds must be ascending within [{}, 1]", what, lo));
}

// The point at threshold t of scores (NaN never passes) with their correctness.
SweepPoint pointAt(double t, const std::vector<double> &scores, const std::vector<bool> &correct,
                   int64_t shouldHit)
{
    SweepPoint p;
    p.threshold = t;
    for (size_t i = 0; i < scores.size(); ++i)
        if (scores[i] >= t) {
            ++p.hits;
            p.correctHits += correct[i] ? 1 : 0;
        }
    p.precision = p.hits ? double(p.correctHits) / double(p.hits) : 1.0;
    p.falseHitRate = p.hits ? 1.0 - p.precision : 0.0;
    p.recall = shouldHit ? double(p.correctHits) / double(shouldHit) : 0.0;
    return p;
}

} // namespace

SemanticSweep sweepSemantic(const std::vector<LabelledText> &requests, Embedder &embedder, double target,
                            std::vector<double> thresholds, bool includeExact)
{
    checkTarget(target);
    if (thresholds.empty())
        for (int i = 50; i <= 99; ++i)
            thresholds.push_back(i / 100.0);
    checkGrid(thresholds, -1, "sweep");
    SemanticSweep out;
    out.target = target;
    struct Seen
    {
        std::vector<std::vector<float>> vectors;
        std::vector<std::string> intents;
        std::vector<std::string> texts;
        std::vector<size_t> indices;
    };
    std::map<std::string, Seen> byTenant;
    for (size_t index = 0; index < requests.size(); ++index) {
        const LabelledText &r = requests[index];
        Seen &seen = byTenant[r.tenant];
        std::vector<float> v = embedder.embed(r.text);
        for (float x : v)
            if (!std::isfinite(x))
                throw Error(
                    ErrorCode::Config,
                    fmt::format("embedder {}: non-finite value in the embedding of request {} (\"{}\"); "
                                "its weights or configuration are broken",
                                embedder.name(), index + 1, r.text.substr(0, 60)));
        bool exact = false;
        for (const auto &t : seen.texts)
            exact = exact || t == r.text;
        if (!r.intent.empty() && !seen.vectors.empty() && !(exact && !includeExact)) {
            double best = -2;
            size_t bestAt = 0;
            bool sameIntentSeen = false;
            for (size_t j = 0; j < seen.vectors.size(); ++j) {
                double dot = 0;
                for (size_t k = 0; k < v.size(); ++k)
                    dot += double(v[k]) * seen.vectors[j][k];
                if (dot > best) {
                    best = dot;
                    bestAt = j;
                }
                sameIntentSeen = sameIntentSeen || seen.intents[j] == r.intent;
            }
            ++out.scored;
            out.shouldHit += sameIntentSeen ? 1 : 0;
            out.nearest.push_back(best);
            out.nearestCorrect.push_back(seen.intents[bestAt] == r.intent);
            out.scoredRequest.push_back(index);
            out.nearestRequest.push_back(seen.indices[bestAt]);
        } else if (exact && !includeExact && !r.intent.empty()) {
            ++out.exactSkipped;
        }
        seen.vectors.push_back(std::move(v));
        seen.intents.push_back(r.intent);
        seen.texts.push_back(r.text);
        seen.indices.push_back(index);
    }
    for (double t : thresholds) {
        out.points.push_back(pointAt(t, out.nearest, out.nearestCorrect, out.shouldHit));
        const SweepPoint &p = out.points.back();
        if (!out.atTarget && p.hits > 0 && p.falseHitRate <= target)
            out.atTarget = p;
    }
    return out;
}

VerifierSweep sweepVerifier(const std::vector<LabelledText> &requests, const SemanticSweep &sweep,
                            PairVerifier &verifier, double similarityThreshold, double target,
                            std::vector<double> thresholds)
{
    checkTarget(target);
    if (!(similarityThreshold >= -1 && similarityThreshold <= 1))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("similarity threshold {} is outside [-1, 1]", similarityThreshold));
    if (thresholds.empty())
        for (int i = 0; i <= 99; ++i)
            thresholds.push_back(i / 100.0);
    checkGrid(thresholds, 0, "verifier");
    const size_t n = sweep.nearest.size();
    if (sweep.nearestCorrect.size() != n || sweep.scoredRequest.size() != n ||
        sweep.nearestRequest.size() != n)
        throw Error(ErrorCode::InvalidArgument, "the similarity sweep's per-request lists differ in length");
    VerifierSweep out;
    out.similarityThreshold = similarityThreshold;
    out.shouldHit = sweep.shouldHit;
    out.target = target;
    std::vector<double> scores;
    std::vector<bool> correct;
    double totalMs = 0;
    VerifierSettings settings;
    settings.verifier = &verifier;
    for (size_t i = 0; i < n; ++i) {
        if (!(sweep.nearest[i] >= similarityThreshold))
            continue;
        const size_t at = sweep.scoredRequest[i], near = sweep.nearestRequest[i];
        if (at >= requests.size() || near >= requests.size())
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format("the similarity sweep names request {} of {}: not made from these requests",
                            std::max(at, near) + 1, requests.size()));
        const VerifierCheck check = verify(settings, requests[near].text, requests[at].text);
        totalMs += check.ms;
        ++out.candidates;
        out.correctCandidates += sweep.nearestCorrect[i] ? 1 : 0;
        const bool scored = check.verdict != VerifierVerdict::Error;
        out.errors += scored ? 0 : 1;
        scores.push_back(scored ? check.score : std::nan(""));
        correct.push_back(sweep.nearestCorrect[i]);
    }
    out.meanMs = out.candidates ? totalMs / double(out.candidates) : 0.0;
    for (double t : thresholds) {
        out.points.push_back(pointAt(t, scores, correct, out.shouldHit));
        const SweepPoint &p = out.points.back();
        if (!out.atTarget && p.hits > 0 && p.falseHitRate <= target)
            out.atTarget = p;
    }
    return out;
}

} // namespace kvwb::core
