// How a converter is shaped: which A layers feed each B layer (LayerSelection) and which form its maps
// take (ConverterFamily; core/store/converter_store.h KvMap holds the parts). One spelling each for
// flags, JSON, projects, experiment files and reports.
//
// Plain values and pure functions; thread-safe.
#pragma once

#include "core/util/enum_names.h"

#include <cstdint>
#include <optional>
#include <string>

namespace kvwb::core {

// How a converter picks the A layers that feed each B layer.
enum class LayerSelection
{
    Proportional, // depth-proportional, k nearest (k = 1: the layer at the same relative depth)
    TopK,         // top k by single-layer validation R^2
    All           // every captured A layer
};
inline constexpr EnumName<LayerSelection> kLayerSelectionNames[] = {
    {LayerSelection::Proportional, "proportional"},
    {LayerSelection::TopK, "topk"},
    {LayerSelection::All, "all"}};
KVWB_ENUM_NAMES(LayerSelection, kLayerSelectionNames, layerSelectionName, parseLayerSelection)

// The form of each map of a converter. Head-matched fitting (each B kv head from the same A head only)
// is a mode of every family, not a family of its own.
enum class ConverterFamily
{
    Ridge,   // y = x W + b, closed-form ridge
    LowRank, // y = (x D) U + b, reduced-rank regression: rank r bounds the mapper's size
    Mlp,     // y = x W + b + gelu(x W1 + b1) W2: ridge skip path plus a trained nonlinear branch
    // A fit setting, never a stored converter's family: fit ridge, then the MLP, and keep the one whose
    // converted cache gives B's next-token distributions the lowest KL to B's own on held-out prompts
    // (gpu/align/alignment.h alignExperiment).
    Auto,
    // A fit setting too: ridge maps (stored as ridge) fitted under the metric of what B does with them,
    // keys weighted by B's queries (E[q q^T] of the target layer, RoPE-aligned), values by B's output
    // projection; needs model B (gpu/align/alignment.h).
    AttnRidge
};
// "ridge" | "low_rank" | "mlp" | "auto" | "attn_ridge"; "low-rank" and "attn-ridge" (the command line's
// spellings) are read as low_rank and attn_ridge.
inline constexpr EnumName<ConverterFamily> kConverterFamilyNames[] = {
    {ConverterFamily::Ridge, "ridge"},
    {ConverterFamily::LowRank, "low_rank"},
    {ConverterFamily::Mlp, "mlp"},
    {ConverterFamily::Auto, "auto"},
    {ConverterFamily::AttnRidge, "attn_ridge"},
    {ConverterFamily::LowRank, "low-rank"},
    {ConverterFamily::AttnRidge, "attn-ridge"}};
KVWB_ENUM_NAMES(ConverterFamily, kConverterFamilyNames, converterFamilyName, parseConverterFamily)

// What a fit minimises once the maps are fitted. Kv: the regression of B's K/V rows (each family's own
// fit). Kl: then trains the maps further through frozen model B on the KL between B's next-token
// distributions from the converted cache and from its own prefill (gpu/align/alignment.h).
enum class FitObjective
{
    Kv,
    Kl
};
inline constexpr EnumName<FitObjective> kFitObjectiveNames[] = {{FitObjective::Kv, "kv"},
                                                                {FitObjective::Kl, "kl"}};
KVWB_ENUM_NAMES(FitObjective, kFitObjectiveNames, fitObjectiveName, parseFitObjective)

// Inputs a full-mode map takes beside A's rows at the paired token (what a finer target tokenizer
// needs: B positions paired with one A token all see the same A row). For B position t paired with
// A token a[t], let s(t) be the first position of the run of B positions paired with a[t] (the same
// tokenizer: s(t) = t). After A's rows at a[t] (each source layer), in this order:
//   window blocks   w = 1..window: A's rows (each source layer, the map's kind) of the token paired
//                   with position s_w - 1, where s_1 = s(t) and s_{w+1} = s(s_w - 1): the A tokens
//                   before this one; zeros before the prompt's start;
//   target tokens   B's own layer-0 K (pre-RoPE) and V at t, [2 * kvHeadsB * headDimB]: a function of
//                   B's token alone that B computes without attention (gpu::Model::tokenLocalKv);
//   offsets         one-hot of min(t - s(t), offsets - 1): where t sits inside A's token.
// None of them (the default) is the plain map of A's rows. Keys must be converted pre-RoPE.
struct TokenFeatures
{
    int window = 0;            // 0..4
    bool targetTokens = false; // B's layer-0 K and V
    int offsets = 0;           // 0 or 2..64
    bool any() const { return window > 0 || targetTokens || offsets > 0; }
    // Inputs beside the sourceLayers * widthA of A's rows at a[t].
    int64_t extraDim(int sourceLayers, int widthA, int widthB) const
    {
        return int64_t(window) * sourceLayers * widthA + (targetTokens ? 2 * int64_t(widthB) : 0) + offsets;
    }
    bool operator==(const TokenFeatures &) const = default;
};
// Error(InvalidArgument) naming `where` for a window outside 0..4 or offsets outside {0, 2..64}.
void checkTokenFeatures(const TokenFeatures &features, const std::string &where);
// "none", or e.g. "window 1, B tokens, offsets 4".
std::string describeTokenFeatures(const TokenFeatures &features);
// The flag's spelling: "none", "all" (window 1, B tokens, offsets 4) or a comma list of b,
// window[=N] (1 without N), offsets[=N] (4 without N); nullopt for anything else or bad numbers.
std::optional<TokenFeatures> parseTokenFeatures(const std::string &text);
// The canonical spelling parseTokenFeatures reads back: "none" or e.g. "b,window=1,offsets=4".
std::string tokenFeaturesText(const TokenFeatures &features);

} // namespace kvwb::core
