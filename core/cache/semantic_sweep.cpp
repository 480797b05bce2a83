#include "core/cache/semantic_sweep.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

namespace kvwb::core {

SemanticSweep sweepSemantic(const std::vector<LabelledText> &requests, Embedder &embedder, double target,
                            std::vector<double> thresholds, bool includeExact)
{
    if (!(target >= 0 && target <= 1))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("target false-hit rate {} is outside [0, 1]", target));
    if (thresholds.empty())
        for (int i = 50; i <= 99; ++i)
            thresholds.push_back(i / 100.0);
    for (size_t i = 0; i < thresholds.size(); ++i)
        if (!(thresholds[i] >= -1 && thresholds[i] <= 1) || (i > 0 && !(thresholds[i] > thresholds[i - 1])))
            throw Error(ErrorCode::InvalidArgument, "sweep thresholds must be ascending within [-1, 1]");
    SemanticSweep out;
    out.target = target;
    struct Seen
    {
        std::vector<std::vector<float>> vectors;
        std::vector<std::string> intents;
        std::vector<std::string> texts;
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
        } else if (exact && !includeExact && !r.intent.empty()) {
            ++out.exactSkipped;
        }
        seen.vectors.push_back(std::move(v));
        seen.intents.push_back(r.intent);
        seen.texts.push_back(r.text);
    }
    for (double t : thresholds) {
        SweepPoint p;
        p.threshold = t;
        for (size_t i = 0; i < out.nearest.size(); ++i)
            if (out.nearest[i] >= t) {
                ++p.hits;
                p.correctHits += out.nearestCorrect[i] ? 1 : 0;
            }
        p.precision = p.hits ? double(p.correctHits) / double(p.hits) : 1.0;
        p.falseHitRate = p.hits ? 1.0 - p.precision : 0.0;
        p.recall = out.shouldHit ? double(p.correctHits) / double(out.shouldHit) : 0.0;
        out.points.push_back(p);
        if (!out.atTarget && p.hits > 0 && p.falseHitRate <= target)
            out.atTarget = p;
    }
    return out;
}

} // namespace kvwb::core
