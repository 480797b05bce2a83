// Private to gpu/src/align/: what the units behind gpu/align/alignment.h share. They are split by
// seam: alignment_data.cpp reads token rows and geometry from the experiment file and picks source
// layers, alignment_fit.cpp accumulates and solves the ridge maps (and chooses lambda),
// alignment_scores.cpp converts rows and scores them (R^2, cosine, attention output, CKA), and
// alignment_pipeline.cpp runs the whole fit and the sweeps on a prompt split.
//
// Torch-free: the torch code stays inside the .cpp files. Same thread contract as the public header
// (the calling thread, the engine thread, owns the file and the model).
#pragma once

#include "gpu/align/alignment.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvwb::gpu::detail {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The KV geometry of the file's two models: kv heads and head dim of A and B.
struct Geometry
{
    int kvA = 0, hdA = 0, kvB = 0, hdB = 0;
    int widthA() const { return kvA * hdA; } // floats per token row of A
    int widthB() const { return kvB * hdB; } // floats per token row of B
};

Geometry geometry(const core::ExperimentReader &f);

// Features [tokens, layers.size() * widthA] for one prompt: A's rows of each source layer side by
// side (keys or values), paired with B's first `tokens` rows: row t is A's row t, or A's row
// alignment[t] when the prompt was stored with a token alignment (A and B tokenised it differently).
// With token features (core/store/converter_store.h TokenFeatures) the features' columns follow A's:
// [tokens, layers.size() * widthA + features.extraDim(...)], B's layer-0 rows read from the file.
std::vector<float> sourceRows(const core::ExperimentReader &f, const std::vector<int> &layers, int prompt,
                              bool keys, int64_t tokens, const core::TokenFeatures &features = {});
// The token features' columns alone, [tokens, features.extraDim(...)]: what convertRows takes as
// `extra` beside A's rows. Error(InvalidArgument) naming the file when the file's keys are not
// pre-RoPE or B's layer 0 was not captured. rowsA: A's rows of `layers` in B's positions (sourceRows
// without features) when the caller already read them, for the window blocks.
std::vector<float> tokenFeatureRows(const core::ExperimentReader &f, const std::vector<int> &layers,
                                    const core::TokenFeatures &features, int prompt, bool keys,
                                    int64_t tokens, const std::vector<float> *rowsA = nullptr);
// Error(InvalidArgument) naming the file when it cannot give these features (see tokenFeatureRows).
void checkTokenFeatureSource(const core::ExperimentReader &f, const core::TokenFeatures &features,
                             bool headMatched);

// A's rows of one layer paired with every B row of the prompt, [B tokens, widthA]: A's own rows when
// A and B tokenised the prompt identically, else gathered through the prompt's alignment.
std::vector<float> sourceLayerRows(const core::ExperimentReader &f, int layer, int prompt, bool keys);

// Head h's columns of token-major rows x [tokens, blocks * heads * hd] -> [tokens, blocks * hd]:
// head h of every concatenated block (source layer) side by side.
std::vector<float> headColumns(const float *x, int64_t tokens, int blocks, int heads, int hd, int h);

// True when B's rows of the prompt have A rows to pair with: A and B tokenised it identically (row t
// with row t), or the file stores its token alignment (row t with A's row alignment[t]); otherwise
// (different tokenisations in a file without alignments) false, with a warning naming the prompt
// (the first 20 only) when warnings is given.
bool aligned(const core::ExperimentReader &f, int prompt, std::vector<std::string> *warnings);

// The calibration rows a fit takes: (prompt, rows) for the aligned prompts in order, at most
// maxTokens rows in all (0: every row), the last prompt cut short to fit; prompts without an
// alignment are skipped (warned about when warnings is given).
std::vector<std::pair<int, int64_t>> calibrationRows(const core::ExperimentReader &f,
                                                     const std::vector<int> &prompts, int64_t maxTokens,
                                                     std::vector<std::string> *warnings);

// Error(InvalidArgument) naming the file when headMatched and the kv-head counts differ.
void checkHeadMatched(const core::ExperimentReader &f, bool headMatched);

// Error(Config) naming both fingerprints when target is not the file's model B.
void checkTarget(const core::ExperimentReader &f, const Model &target);

// The source layers of targetLayer for a selection: Proportional (the k captured A layers nearest
// the same relative depth), TopK (the first k of `ranked`, see rankSourceLayers) or All (every
// captured A layer); sorted.
std::vector<int> selectSources(const core::ExperimentReader &f, LayerSelection selection, int k,
                               int targetLayer, const std::vector<int> &ranked);

// The index of the lambda of grid whose maps (metrics[i] scores the maps fitted with grid[i]) have
// the best mean key/value R^2; ties within 1e-12 go to the larger, more regularised lambda.
size_t bestLambda(const std::vector<LayerMetrics> &metrics, const std::vector<double> &grid);

// The metric of a map across heads: the heads' blocks on the diagonal, [n hd, n hd] row-major.
std::vector<double> blockMetric(const std::vector<std::vector<double>> &heads, int hd);

// fitLayerGrid under a layer's metrics (keys, values: per kv head, as TargetMetric holds them).
std::vector<core::LayerConverter>
fitLayerGridWeighted(const core::ExperimentReader &f, int targetLayer, const std::vector<int> &sourceLayers,
                     const std::vector<int> &prompts, const std::vector<double> &lambdas,
                     const std::vector<std::vector<double>> &keyMetric,
                     const std::vector<std::vector<double>> &valueMetric, LayerFitStats *stats,
                     bool headMatched, int64_t maxTokens, const core::TokenFeatures &features = {});
// Each map's validation error in its metric, 1 - SSE_M / SST_M pooled over keys and values (the
// attention-aligned family's lambda choice), per map of `maps` (one grid: the same target and source
// layers, else Error(InvalidArgument)).
std::vector<double> weightedR2(const core::ExperimentReader &f, const std::vector<core::LayerConverter> &maps,
                               const std::vector<int> &prompts,
                               const std::vector<std::vector<double>> &keyMetric,
                               const std::vector<std::vector<double>> &valueMetric);

// alignExperiment for family auto (alignment_auto.cpp): the candidates alignment.h lists, each a fit
// of a concrete family through alignExperiment, scored by transferKl on the validation prompts.
AlignResult alignAuto(const core::ExperimentReader &f, const AlignOptions &o, const Model *target);

// The KL objective's training (kl_fit.cpp): every map of every layer, initialised from `layers`, trained
// jointly through frozen model B (ModelAccess::logitsAfter) on the mean over continuation positions of
// KL(B's own next-token distribution || B's from the converted cache): m = min(continuation, n / 2) of
// a prompt's n tokens run on top of the converted positions before them, the m starting (seeded, each
// epoch anew) anywhere from n / 4 to n - m, where transferKl scores the last m only; Adam,
// `batch` prompts a step, the training prompts in a seeded order each epoch; after each epoch, transferKl
// on the validation prompts, and the epoch with the lowest kept (epoch 0: `layers` themselves), early
// stopping after `patience` epochs without a 0.01 % gain.
struct KlOptions
{
    int epochs = 12;
    double learningRate = 3e-5;
    int patience = 3;
    int batch = 4;
    int continuation = 16;
    int validationPrompts = 32; // at most, of `valid`
    uint64_t seed = 1;
    // No step starts after this time: the kept epoch is the best of those scored, the budget's cut
    // epoch scored too (but not saved as done: a resume trains it again).
    std::optional<core::Clock::time_point> deadline;
    // State after each epoch (maps, the best maps, Adam's moments, the scores) in this directory, and
    // with resume, read back when its key matches (another key: Error(InvalidArgument)).
    std::filesystem::path stateDir;
    std::string key;
    bool resume = false;
    // (step, steps of all epochs) after each step; false cancels.
    std::function<bool(int64_t step, int64_t steps, int epoch)> progress;
};
struct KlFitStats
{
    int epochs = 0;                   // epochs run (this call and any resumed)
    int bestEpoch = 0;                // 0: the KV fit itself was best
    TransferKl start, kept;           // validation scores of `layers` and of the result
    std::vector<double> history;      // validation KL after each epoch
    std::vector<double> trainHistory; // mean training KL of each epoch's steps (as it trained)
    int trainPrompts = 0;             // usable training prompts (aligned, 4 tokens or more)
    int64_t trainTokens = 0;          // continuation positions per epoch
    bool deadlineReached = false, resumed = false;
    double seconds = 0;
};
// What trainKlObjective needs before the fit that precedes it is run: target is the file's B
// (Error(Config)), its weights dense (Error(InvalidArgument) naming the checkpoint), and the training
// and validation prompts each hold one of 4 or more tokens paired with A's rows (Error(InvalidArgument)
// naming the file).
void checkKlTarget(const core::ExperimentReader &f, const Model &target, const std::vector<int> &train,
                   const std::vector<int> &valid);
// nullopt when progress cancelled. Error(InvalidArgument) for no usable training or validation prompt
// or bad options; Error(Config) when target is not the file's B; model B's own errors (quantised
// weights) unchanged.
std::optional<std::vector<core::LayerConverter>>
trainKlObjective(const core::ExperimentReader &f, const std::vector<core::LayerConverter> &layers,
                 const Model &target, const std::vector<int> &train, const std::vector<int> &valid,
                 const KlOptions &options, KlFitStats *stats = nullptr);

} // namespace kvwb::gpu::detail
