// Family auto: fit the candidate converters alignment.h lists and keep the one whose converted cache
// brings B's next-token distributions closest to B's own on the validation prompts (not R^2: a map
// can explain more of B's rows and still move B's predictions further).
#include "gpu/src/align/alignment_p.h"

#include "core/util/clock.h"
#include "core/util/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

namespace kvwb::gpu::detail {

using core::ConverterFamily;
using core::Error;
using core::ErrorCode;

namespace {

// Features per B layer above which "every A layer" becomes top k (the ridge system is features^2).
constexpr int kMaxWideFeatures = 4096;
// A ridge candidate that closes this share of the no-prefix gap leaves the MLP too little to win.
constexpr double kGoodEnough = 0.99;

// The wide ridge candidate's fit settings: every captured A layer, or the top k that stay within
// kMaxWideFeatures, with lambda auto.
core::FitSettings wideSettings(const core::ExperimentReader &f, core::FitSettings s)
{
    const int captured = int(f.model(core::ModelRole::A).capturedLayers.size());
    const int width = geometry(f).widthA();
    s.family = ConverterFamily::Ridge;
    s.autoLambda = true;
    if (int64_t(captured) * width <= kMaxWideFeatures) {
        s.selection = LayerSelection::All;
        s.k = captured;
    } else {
        s.selection = LayerSelection::TopK;
        s.k = std::clamp(kMaxWideFeatures / std::max(1, width), 1, captured);
    }
    return s;
}

// The token-feature candidate (core::TokenFeatures): the better plain ridge's settings with B's own
// layer-0 rows and the offsets beside A's rows, and the previous A token's rows when the wider inputs
// stay within kMaxWideFeatures; nullopt when the fit already asks for features or the file cannot
// give them (keys after RoPE, B's layer 0 not captured, head-matched maps).
std::optional<core::FitSettings> featureSettings(const core::ExperimentReader &f, core::FitSettings s, int k)
{
    if (s.tokenFeatures.any() || s.perHead || f.storage().keyForm != core::KeyForm::PreRope)
        return std::nullopt;
    const auto &capB = f.model(core::ModelRole::B).capturedLayers;
    if (std::find(capB.begin(), capB.end(), 0) == capB.end())
        return std::nullopt;
    // every input counts against the cap: A's rows of k layers, B's layer-0 K and V and the offsets;
    // the window's k more rows only when they still fit
    const Geometry g = geometry(f);
    const core::TokenFeatures with{1, true, 4}, without{0, true, 4};
    const int64_t inputs = int64_t(k) * g.widthA() + with.extraDim(k, g.widthA(), g.widthB());
    s.tokenFeatures = inputs <= kMaxWideFeatures ? with : without;
    return s;
}

nlohmann::json scoreJson(double v)
{
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json candidateJson(const AutoCandidate &c)
{
    return {{"family", core::converterFamilyName(c.family)},
            {"selection", layerSelectionName(c.selection)},
            {"k", c.k},
            {"lambda_mode", c.autoLambda ? "auto" : "fixed"},
            {"token_features", core::tokenFeaturesText(c.features)},
            {"valid_kl", scoreJson(c.score.kl)},
            {"valid_kl_no_prefix", scoreJson(c.score.klNoPrefix)},
            {"valid_gap_closed", scoreJson(c.score.gapClosed())},
            {"valid_top1", scoreJson(c.score.top1)},
            {"valid_prompts", c.score.prompts},
            {"valid_tokens", c.score.tokens},
            {"fit_seconds", c.fitSeconds},
            {"deadline_reached", c.deadlineReached}};
}

} // namespace

AlignResult alignAuto(const core::ExperimentReader &f, const AlignOptions &o, const Model *target)
{
    if (!target)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: family auto chooses the converter by model B's validation KL and needs "
                                "model B loaded; load it or choose a family (ridge, low-rank, mlp)",
                                f.path().string()));
    checkTarget(f, *target);
    const auto started = core::Clock::now();
    const auto elapsed = [&] { return core::msSince(started) / 1000; };
    // the plan: ridge as asked, the wide ridge unless that is what was asked, then the MLP
    std::vector<core::FitSettings> ridges;
    ridges.push_back(o.fit);
    ridges.back().family = ConverterFamily::Ridge;
    const core::FitSettings wide = wideSettings(f, o.fit);
    const bool asked = o.fit.autoLambda && o.fit.selection == wide.selection &&
                       (wide.selection == LayerSelection::All || o.fit.k == wide.k);
    if (!asked)
        ridges.push_back(wide);
    // attention ridge 1, token features 1, the MLP 4 ridge fits in the progress
    const double steps = double(ridges.size()) + 6;
    double done = 0;

    AlignResult out;
    std::vector<AlignResult> fits;
    // one candidate fitted with settings s over `share` steps of the progress, scored on validation
    const auto fitCandidate = [&](const core::FitSettings &s, double share) -> bool {
        AlignOptions co = o;
        co.fit = s;
        co.onCandidate = nullptr;
        const double from = done;
        co.progress = [&, from, share](double fr, const std::string &stage) {
            return !o.progress ||
                   o.progress((from + share * fr) / steps,
                              fmt::format("auto, {}: {}", core::converterFamilyName(s.family), stage));
        };
        const auto t0 = core::Clock::now();
        AlignResult r = alignExperiment(f, co, target);
        done += share;
        if (r.cancelled)
            return false;
        AutoCandidate c;
        c.family = s.family;
        c.selection = s.selection;
        c.k = r.record.k;
        c.autoLambda = s.autoLambda;
        c.features = s.tokenFeatures;
        c.score = transferKl(f, r.record.layers, *target, r.record.validPrompts, o.fit.autoPrompts);
        c.fitSeconds = core::msSince(t0) / 1000;
        c.deadlineReached = r.deadlineReached;
        if (c.score.tokens == 0)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{}: no validation prompt of at least 4 tokens to score the converters "
                                    "on; capture more prompts or raise --valid-fraction",
                                    f.path().string()));
        out.candidates.push_back(c);
        if (o.onCandidate)
            o.onCandidate(c);
        fits.push_back(std::move(r));
        return true;
    };
    for (const auto &s : ridges)
        if (!fitCandidate(s, 1.0)) {
            out.cancelled = true;
            return out;
        }
    const auto bestOf = [&](size_t n) {
        size_t b = 0;
        for (size_t i = 1; i < n; ++i)
            if (out.candidates[i].score.kl < out.candidates[b].score.kl)
                b = i;
        return b;
    };
    // the better ridge's settings again, under what B does with the maps (closed form, seconds)
    const size_t bestPlain = bestOf(ridges.size());
    {
        core::FitSettings attention = ridges[bestPlain];
        attention.family = ConverterFamily::AttnRidge;
        if (!fitCandidate(attention, 1.0)) {
            out.cancelled = true;
            return out;
        }
        ridges.push_back(attention); // fits[i] and ridges[i] stay in step for the MLP's start below
    }
    // and with B's token features beside A's rows (what a finer target tokenizer needs)
    if (const auto features = featureSettings(f, ridges[bestPlain], out.candidates[bestPlain].k)) {
        if (!fitCandidate(*features, 1.0)) {
            out.cancelled = true;
            return out;
        }
        ridges.push_back(*features);
    }
    const auto best = [&] {
        size_t b = 0;
        for (size_t i = 1; i < out.candidates.size(); ++i)
            if (out.candidates[i].score.kl < out.candidates[b].score.kl)
                b = i;
        return b;
    };
    const size_t bestRidge = best(); // of the ridge maps, plain or attention-aligned
    std::string skipped;
    if (out.candidates[bestRidge].score.gapClosed() >= kGoodEnough)
        skipped = fmt::format("ridge closes {:.1f} % of the no-prefix KL gap on the validation prompts",
                              100 * out.candidates[bestRidge].score.gapClosed());
    else if (o.fit.budgetSeconds > 0 && elapsed() >= o.fit.budgetSeconds)
        skipped = fmt::format("the {} s budget is spent", o.fit.budgetSeconds);
    if (skipped.empty()) {
        core::FitSettings mlp = ridges[bestRidge];
        mlp.family = ConverterFamily::Mlp;
        // an interrupted auto fit continues its MLP from the layers it trained (the caller's checkpoint
        // directory); the ridge candidates are fitted again, in seconds
        mlp.resume = o.fit.resume;
        if (o.fit.budgetSeconds > 0)
            mlp.budgetSeconds = std::max(1e-3, o.fit.budgetSeconds - elapsed());
        if (!fitCandidate(mlp, 4.0)) {
            out.cancelled = true;
            return out;
        }
    } else {
        out.warnings.push_back("family auto did not fit the MLP: " + skipped);
    }
    out.chosen = int(best());
    AlignResult &kept = fits[size_t(out.chosen)];
    out.record = std::move(kept.record);
    out.resumedLayers = kept.resumedLayers;
    out.warnings.insert(out.warnings.end(), kept.warnings.begin(), kept.warnings.end());
    out.record.fitSeconds = elapsed(); // what the choice cost, every candidate included
    auto settings = nlohmann::json::parse(out.record.settingsJson);
    nlohmann::json list = nlohmann::json::array();
    for (const auto &c : out.candidates)
        list.push_back(candidateJson(c));
    settings["auto"] = {
        {"chosen", out.chosen},         {"criterion", "lowest validation KL of B's next-token distributions"},
        {"prompts", o.fit.autoPrompts}, {"budget_seconds", o.fit.budgetSeconds},
        {"mlp_skipped", skipped},       {"candidates", list}};
    out.record.settingsJson = settings.dump();
    if (o.progress)
        o.progress(1.0, "done");
    return out;
}

} // namespace kvwb::gpu::detail

namespace kvwb::gpu {

std::string autoCandidateLine(const AutoCandidate &c)
{
    const auto &v = c.score;
    return fmt::format(
        "auto: {} ({}, k {}, lambda {}{}): validation KL {:.4f} (no prefix {:.4f}), {:.1f} % of "
        "the gap, top-1 {:.3f}, {} prompts, fit {:.1f} s{}",
        core::converterFamilyName(c.family), layerSelectionName(c.selection), c.k,
        c.autoLambda ? "auto" : "fixed",
        c.features.any() ? ", token features " + core::tokenFeaturesText(c.features) : "", v.kl, v.klNoPrefix,
        100 * v.gapClosed(), v.top1, v.prompts, c.fitSeconds,
        c.deadlineReached ? ", cut short by the budget" : "");
}

} // namespace kvwb::gpu
