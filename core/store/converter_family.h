// How a converter is shaped: which A layers feed each B layer (LayerSelection) and which form its maps
// take (ConverterFamily; core/store/converter_store.h KvMap holds the parts). One spelling each for
// flags, JSON, projects, experiment files and reports.
//
// Plain values and pure functions; thread-safe.
#pragma once

#include "core/util/enum_names.h"

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

} // namespace kvwb::core
