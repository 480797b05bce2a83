#include "core/cache/error_curve.h"

#include "core/util/error.h"
#include "core/util/text_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace kvwb::core {

namespace fs = std::filesystem;
using nlohmann::json;

double ErrorCurve::rateAt(double s) const
{
    if (empty() || std::isnan(s))
        return 1.0;
    const auto it = std::upper_bound(from.begin(), from.end(), s);
    return errorRate[it == from.begin() ? 0 : size_t(it - from.begin()) - 1];
}

ErrorCurve ErrorCurve::fit(std::vector<CumulativePoint> points, std::string source)
{
    for (const auto &p : points)
        if (!std::isfinite(p.threshold) || !std::isfinite(p.hits) || !std::isfinite(p.correct) ||
            p.hits < 0 || p.correct < 0 || p.correct > p.hits + 1e-9)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{}: the point at threshold {} has {} hits and {} correct", source,
                                    p.threshold, p.hits, p.correct));
    std::sort(points.begin(), points.end(),
              [](const CumulativePoint &a, const CumulativePoint &b) { return a.threshold < b.threshold; });
    // one point per threshold; cumulative counts never grow with the threshold
    std::vector<CumulativePoint> cum;
    for (const auto &p : points) {
        if (!cum.empty() && p.threshold == cum.back().threshold)
            continue;
        if (!cum.empty() && (p.hits > cum.back().hits + 1e-9 || p.correct > cum.back().correct + 1e-9))
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{}: {} hits at threshold {} but {} at the lower {}: not a cumulative "
                                    "curve",
                                    source, p.hits, p.threshold, cum.back().hits, cum.back().threshold));
        cum.push_back(p);
    }
    // the bins: [t_i, t_{i+1}) holds hits_i - hits_{i+1}; the last one everything at or above it
    struct Bin
    {
        double from, hits, wrong;
    };
    std::vector<Bin> bins;
    for (size_t i = 0; i < cum.size(); ++i) {
        const double hits = cum[i].hits - (i + 1 < cum.size() ? cum[i + 1].hits : 0.0);
        const double right = cum[i].correct - (i + 1 < cum.size() ? cum[i + 1].correct : 0.0);
        if (hits > 0) // an empty bin's range falls to the bin below it
            bins.push_back({cum[i].threshold, hits, std::clamp(hits - right, 0.0, hits)});
    }
    if (bins.empty())
        throw Error(ErrorCode::InvalidArgument, fmt::format("{}: no threshold has a hit", source));
    // pool-adjacent-violators: rates non-increasing with the similarity
    struct Block
    {
        double from, hits, wrong;
    };
    std::vector<Block> blocks;
    for (const Bin &b : bins) {
        blocks.push_back({b.from, b.hits, b.wrong});
        while (blocks.size() > 1) {
            const Block &hi = blocks.back(), &lo = blocks[blocks.size() - 2];
            if (hi.wrong / hi.hits <= lo.wrong / lo.hits)
                break;
            const Block merged{lo.from, lo.hits + hi.hits, lo.wrong + hi.wrong};
            blocks.pop_back();
            blocks.back() = merged;
        }
    }
    ErrorCurve c;
    c.source = std::move(source);
    for (const Block &b : blocks) {
        c.from.push_back(b.from);
        c.errorRate.push_back(b.wrong / b.hits);
        c.weight.push_back(b.hits);
    }
    return c;
}

namespace {

double number(const json &j, const char *key, const std::string &where)
{
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number())
        throw Error(ErrorCode::Format, fmt::format("{}: \"{}\" is missing or not a number", where, key));
    return it->get<double>();
}

} // namespace

ErrorCurve readErrorCurve(const fs::path &given)
{
    const fs::path path = fs::is_directory(given) ? given / "train_log.json" : given;
    return parseErrorCurve(text::readWholeFile(path), path.string());
}

ErrorCurve parseErrorCurve(std::string_view text, const std::string &name)
{
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception &e) {
        throw Error(ErrorCode::Format, fmt::format("{}: not JSON ({})", name, e.what()));
    }
    std::vector<CumulativePoint> points;
    if (j.is_object() && j.contains("points")) { // kvwb sweep-semantic --json
        if (!j["points"].is_array())
            throw Error(ErrorCode::Format, name + ": \"points\" is not an array");
        size_t i = 0;
        for (const auto &p : j["points"]) {
            const std::string where = fmt::format("{}: points[{}]", name, i++);
            if (!p.is_object())
                throw Error(ErrorCode::Format, where + " is not an object");
            points.push_back(
                {number(p, "threshold", where), number(p, "hits", where), number(p, "correct_hits", where)});
        }
        return ErrorCurve::fit(std::move(points), name + " (threshold sweep)");
    }
    const json *curve = nullptr;
    if (j.is_object() && j.contains("evaluation") && j["evaluation"].is_object() &&
        j["evaluation"].contains("trained") && j["evaluation"]["trained"].is_object())
        curve = &j["evaluation"]["trained"]["curve"];
    if (!curve || !curve->is_array() || curve->empty())
        throw Error(ErrorCode::Format,
                    name + ": neither a threshold sweep (\"points\") nor a trained embedder's log "
                           "(\"evaluation\".\"trained\".\"curve\")");
    // A log without served counts: the lowest threshold serves every validation pair (recall 1), so
    // duplicates = its precision x the pairs, and served = recall x duplicates / precision.
    double duplicates = -1;
    if (!curve->back().contains("served")) {
        const std::string where = name + ": the curve's last point";
        if (number(curve->back(), "recall", where) < 1 - 1e-9)
            throw Error(
                ErrorCode::Format,
                name + ": the curve has no \"served\" counts and does not reach recall 1 to derive them");
        duplicates =
            std::round(number(curve->back(), "precision", where) * number(j, "validation_pairs", name));
    }
    size_t i = 0;
    for (const auto &p : *curve) {
        const std::string where = fmt::format("{}: evaluation.trained.curve[{}]", name, i++);
        if (!p.is_object())
            throw Error(ErrorCode::Format, where + " is not an object");
        const double precision = number(p, "precision", where), recall = number(p, "recall", where);
        if (duplicates >= 0 && !(precision > 0))
            continue; // nothing right among them: how many were served cannot be derived
        const double served =
            duplicates < 0 ? number(p, "served", where) : std::round(recall * duplicates / precision);
        points.push_back({number(p, "threshold", where), served, std::round(precision * served)});
    }
    return ErrorCurve::fit(std::move(points), name + " (validation curve)");
}

} // namespace kvwb::core
