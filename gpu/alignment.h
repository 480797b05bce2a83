// Fitting linear maps from model A's KV cache to model B's, one target layer at a time, streaming
// token rows from an experiment file (core/experiment_file.h) into ridge accumulators (gpu/ridge.h).
//
// A token row of model m at layer l is its K (or V) flattened over heads: [kvHeads * headDim]. The
// features of a target layer are the rows of its source layers concatenated; keys are mapped as the
// file stores them (pre-RoPE by default, so B's RoPE can be applied after conversion). Prompts whose
// token ids differ between A and B (different tokenizers) have no row-to-row correspondence and are
// skipped with a warning.
//
// Runs on the calling thread; HDF5 reads must stay on the thread that owns the reader.
#pragma once

#include "core/experiment_file.h"
#include "gpu/ridge.h"

#include <string>
#include <vector>

namespace kvwb::gpu {

// Depth-proportional choice of k source layers for a target layer: the source layer at the same
// relative depth, then its nearest neighbours (k = 1: just that layer).
std::vector<int> proportionalSourceLayers(int targetLayer, int targetLayers, int sourceLayers, int k = 1);

struct LayerMap
{
    int targetLayer = 0;
    std::vector<int> sourceLayers; // A's layers whose rows are concatenated as features
    RidgeSolution keys;            // [sum of source row widths] -> [B kvHeads * headDim]
    RidgeSolution values;
};

struct LayerFitStats
{
    int64_t rows = 0;                  // token rows the fit used
    std::vector<std::string> warnings; // skipped prompts
};

struct LayerMetrics
{
    int64_t rows = 0;
    double r2Keys = 0, r2Values = 0;         // pooled R^2 on the evaluated prompts
    double cosKeys = 0, cosValues = 0;       // mean per-token cosine (converted vs B's own)
    double relErrKeys = 0, relErrValues = 0; // ||converted - B||_F / ||B||_F
};

// Fits the maps of one target layer from `prompts` (indices into the file). Error(InvalidArgument)
// naming the file when a layer was not captured or fewer than 2 usable rows remain.
LayerMap fitLayer(const core::ExperimentReader &file, int targetLayer, const std::vector<int> &sourceLayers,
                  const std::vector<int> &prompts, double lambda, LayerFitStats *stats = nullptr);

// Scores a fitted map on other prompts (held out by prompt, never by token).
LayerMetrics evaluateLayer(const core::ExperimentReader &file, const LayerMap &map,
                           const std::vector<int> &prompts);

// The k source layers whose single-layer fits explain the target layer best on `validation`
// prompts (mean of key and value R^2), returned in layer order. Reads the file once per A layer.
std::vector<int> topKSourceLayers(const core::ExperimentReader &file, int targetLayer, int k,
                                  const std::vector<int> &train, const std::vector<int> &validation,
                                  double lambda);

// The lambda of `grid` with the best mean key/value R^2 on `validation` prompts (ties: the larger,
// i.e. the more regularised, lambda).
double chooseLambda(const core::ExperimentReader &file, int targetLayer, const std::vector<int> &sourceLayers,
                    const std::vector<int> &train, const std::vector<int> &validation,
                    const std::vector<double> &grid = {1e-4, 1e-3, 1e-2, 1e-1, 1.0});

} // namespace kvwb::gpu
