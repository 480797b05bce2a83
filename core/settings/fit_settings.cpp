#include "core/settings/fit_settings.h"

#include "core/settings/setting_rows_p.h"

namespace kvwb::core {

namespace {

using S = FitSettings;
using namespace settings_detail;

// Source layers, lambda, head matching and the map's form.
void mapRows(std::vector<FitFlag> &t)
{
    t.push_back(
        text("experiment", "EXP.h5", "Experiment file from `kvwb capture`.", &S::experiment, Scope::Run));
    {
        // topk takes 8 source layers unless --k, read after it, says otherwise
        FitFlag f = choice(
            "select", "MODE", "Source layers per target layer: proportional (default), topk or all.",
            &S::selection, [](const std::string &v) { return parseLayerSelection(v); }, layerSelectionName,
            "proportional, topk or all");
        f.set = [](S &s, const std::string &v) {
            const auto sel = parseLayerSelection(v);
            if (!sel)
                bad("expects proportional, topk or all, got '" + v + "'");
            s.selection = *sel;
            s.k = *sel == LayerSelection::TopK ? 8 : 1;
        };
        t.push_back(std::move(f));
    }
    t.push_back(integer<S, int>(
        "k", "K", "Source layers per target layer (default 1; topk default 8, capped at A's layers).", &S::k,
        1));
    {
        FitFlag f =
            row<S>("lambda", "L|auto",
                   "Ridge lambda (relative to the mean feature variance), or 'auto' to choose per layer on "
                   "the validation prompts from 1e-4..1 (default 0.01).",
                   Scope::Setting, Kind::Value);
        f.set = [](S &s, const std::string &v) {
            if (v == "auto") {
                s.autoLambda = true;
                return;
            }
            s.lambda = readReal(v, 0.0, 1e6);
            s.autoLambda = false;
        };
        f.get = [](const S &s) {
            return std::vector<std::string>{s.autoLambda ? "auto" : realText(s.lambda)};
        };
        t.push_back(std::move(f));
    }
    t.push_back(toggle("per-head",
                       "Map each B head only from the same head of A (needs equal kv-head counts).",
                       &S::perHead, true, "per_head"));
    t.push_back(choice(
        "family", "auto|ridge|attn-ridge|low-rank|mlp",
        "Form of each map: auto (default: fit ridge, then mlp from it, and keep the one whose converted "
        "cache gives B's next-token distributions the lower KL to B's own on the validation prompts; loads "
        "model B), ridge (y = xW + b), attn-ridge (ridge maps fitted under what B does with them: keys "
        "weighted by B's queries, values by its output projection; loads model B), low-rank (reduced-rank "
        "ridge, needs --rank) or mlp (ridge skip path plus a trained GELU branch).",
        &S::family, [](const std::string &v) { return parseConverterFamily(v); }, converterFamilyName,
        "auto, ridge, attn-ridge, low-rank or mlp"));
    t.push_back(
        real("budget", "S",
             "auto, mlp, kl: stop the MLP's and the KL objective's training after S seconds of the "
             "fit; MLP layers it did not reach keep their ridge maps, the KL objective its best epoch "
             "so far (default 0: no limit).",
             &S::budgetSeconds, 0.0, 1e9));
    t.push_back(integer<S, int>("auto-prompts", "N",
                                "auto, kl: validation prompts on which B's KL chooses the family and the "
                                "KL objective's epoch (default 32).",
                                &S::autoPrompts, 1));
    t.push_back(choice(
        "token-features", "none|all|LIST",
        "Inputs beside A's rows at the paired token (full maps): b (B's own layer-0 K and V at each of "
        "its positions, computed from the token alone), window[=N] (the rows of the N A tokens before, "
        "default 1), offsets[=N] (where the B token sits inside A's, one-hot of N, default 4); all is "
        "b,window=1,offsets=4. For a target tokenizer finer than the source's (default none).",
        &S::tokenFeatures, [](const std::string &v) { return parseTokenFeatures(v); }, tokenFeaturesText,
        "none, all or a comma list of b, window[=N] (N 0-4) and offsets[=N] (N 2-64)"));
    t.push_back(integer<S, int>("rank", "R", "low-rank: the rank of each map.", &S::rank, 1));
    t.push_back(integer<S, int>("hidden", "N", "mlp: the branch's width (default 256).", &S::mlpHidden, 1));
    t.push_back(
        integer<S, int>("epochs", "N", "mlp: at most this many epochs (default 30).", &S::mlpEpochs, 0));
    t.push_back(integer<S, int>("batch", "N", "mlp: rows per step (default 256).", &S::mlpBatch, 1));
    t.push_back(real("learning-rate", "LR", "mlp: Adam's learning rate (default 1e-3).", &S::learningRate,
                     1e-9, 10.0));
    t.push_back(integer<S, int>("patience", "N",
                                "mlp, kl: stop after N epochs without a validation gain (default 3).",
                                &S::patience, 1));
    t.push_back(choice(
        "objective", "kv|kl",
        "What the fit minimises: kv (default: each family's regression of B's K/V rows) or kl (then the "
        "maps trained further through frozen model B, in f32 or bf16 and never its quantised kernels, on "
        "the KL between B's next-token distributions from the converted cache and from its own prefill; "
        "the epoch with the lowest validation KL is kept, the KV fit itself included; loads model B).",
        &S::objective, [](const std::string &v) { return parseFitObjective(v); }, fitObjectiveName,
        "kv or kl"));
    t.push_back(integer<S, int>("kl-epochs", "N",
                                "kl: at most this many passes over the training prompts (default 12).",
                                &S::klEpochs, 1));
    t.push_back(real("kl-learning-rate", "LR", "kl: Adam's learning rate (default 3e-5).", &S::klLearningRate,
                     1e-9, 10.0));
}

// Calibration, naming, scoring, what is stored, and the prompt split.
void runRows(std::vector<FitFlag> &t)
{
    {
        FitFlag f = integer<S, int64_t>("max-train-tokens", "N",
                                        "Calibration tokens (default: every training prompt).",
                                        &S::maxTrainTokens, 0);
        f.set = [](S &s, const std::string &v) { // 0: every training prompt; else at least 2
            const auto n = parseInteger<int64_t>(v);
            s.maxTrainTokens =
                n && *n == 0 ? 0 : readInteger<int64_t>(v, 2, std::numeric_limits<int64_t>::max());
        };
        t.push_back(std::move(f));
    }
    t.push_back(text("name", "NAME",
                     "Converter name under /converters (default 'default'; one in use needs --replace).",
                     &S::name));
    t.push_back(integer<S, int>("attention-prompts", "N",
                                "Test prompts scored by attention-output cosine (default 32).",
                                &S::attentionPrompts, 1));
    t.push_back(toggle("no-attention",
                       "Skip the attention-output cosine (model B is then not loaded, unless the family is "
                       "auto, which scores its candidates with it, or attn-ridge, which fits under it).",
                       &S::attention, false, "attention"));
    t.push_back(toggle("replace",
                       "Store over a converter of the same name (without it, a name in use is refused before "
                       "the fit).",
                       &S::replace, true, "replace", Scope::Run));
    t.push_back(toggle("dry-run", "Fit and print, but do not store the converter.", &S::dryRun, true,
                       "dry_run", Scope::Run));
    t.push_back(
        toggle("resume",
               "mlp, auto, objective kl: continue an interrupted fit of the same settings from its trained "
               "MLP layers and the KL objective's last epoch (kept in EXP.h5.fit-NAME until the converter "
               "is stored).",
               &S::resume, true, "resume", Scope::Run));
    t.push_back(real("valid-fraction", "F", "Prompts held out to choose layers/lambda (default 0.15).",
                     &S::validFraction, 0.0, 0.9));
    t.push_back(real("test-fraction", "F", "Prompts held out for the metrics (default 0.15).",
                     &S::testFraction, 0.0, 0.9));
    t.push_back(integer<S, int64_t>("seed", "S", "Split seed (default 1).", &S::seed, 0));
}

std::vector<FitFlag> makeFlags()
{
    std::vector<FitFlag> t;
    mapRows(t);
    runRows(t);
    return t;
}

} // namespace

KVWB_SETTING_TABLE(FitSettings, fitFlags, findFitFlag, makeFlags)

} // namespace kvwb::core
