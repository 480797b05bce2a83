// Cross-model KV transfer: convert model A's cache of a prompt into model B's KV space with fitted
// per-layer maps (gpu/alignment.h), place it in B's cache (B's RoPE applied on the way in), and let
// B continue from there without prefilling the converted prefix.
//
// Runs on the calling thread (the engine thread); both models and the caches stay on it.
#pragma once

#include "core/experiment_file.h"
#include "gpu/alignment.h"
#include "gpu/model.h"

#include <vector>

namespace kvwb::gpu {

// One map per layer of B (index = B layer), all fitted on keys of the same form.
struct ConverterSet
{
    std::vector<LayerMap> layers;
    core::KeyForm keyForm = core::KeyForm::PreRope; // the form the key maps were fitted on
};

// B's layers for A's cached positions: [B layers] of [kvHeadsB, tokens, headDimB] (head-major, as
// KvCache::assign takes them), keys in converters.keyForm. Error(Shape) names the layer whose map
// does not fit A's or B's geometry.
std::vector<LayerKv> convertCache(const ConverterSet &converters, const KvCache &sourceCache,
                                  const Model &target);

struct TransferResult
{
    GenerateResult generation;  // B's output; stats.reusedTokens = converted positions
    double sourcePrefillMs = 0; // A's forward over the prefix
    double convertMs = 0;       // maps applied, host <-> device copies, B's cache filled
};

// A prefills prompt[0 .. n-2], its cache is converted into B's, and B processes the last prompt token
// and generates. prompt must have at least 2 tokens and be valid for both models.
TransferResult transferGenerate(const Model &source, const Model &target, const ConverterSet &converters,
                                const std::vector<int> &prompt, const GenerateOptions &options);

} // namespace kvwb::gpu
