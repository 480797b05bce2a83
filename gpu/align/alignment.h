// Fitting linear maps from model A's KV cache to model B's, one target layer at a time, streaming
// token rows from an experiment file (core/store/experiment_file.h) into ridge accumulators
// (gpu/align/ridge.h), and scoring them: R^2, cosine and relative error per layer and per head, B's attention
// output with converted K/V against its own, and a linear-CKA similarity matrix between the two models.
//
// A token row of model m at layer l is its K (or V) flattened over heads: [kvHeads * headDim]. The
// features of a target layer are the rows of its source layers concatenated (full mode), or, in
// head-matched mode (same kv-head count), head h of each source layer for B's head h only. Keys are
// mapped as the file stores them (pre-RoPE by default, so B's RoPE is applied after conversion).
// B's row t pairs with A's row t when A and B tokenised the prompt identically, else with A's row
// align[t], the token alignment capture stored with the prompt (different tokenizers,
// core/tokenize/token_alignment.h); prompts tokenised differently in a file without alignments are
// skipped with a warning. Splits are by prompt, never by token.
//
// Runs on the calling thread (the engine thread): HDF5 reads and the model must stay on it.
#pragma once

#include "core/settings/fit_settings.h"
#include "core/store/converter_family.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/util/clock.h"
#include "gpu/align/ridge.h"
#include "gpu/model/model.h"

#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::gpu {

// Depth-proportional choice of k source layers for a target layer: the source layer at the same
// relative depth, then its nearest neighbours (k = 1: just that layer).
std::vector<int> proportionalSourceLayers(int targetLayer, int targetLayers, int sourceLayers, int k = 1);

struct LayerFitStats
{
    int64_t rows = 0;                  // token rows the fit used
    std::vector<std::string> warnings; // skipped prompts
};

struct KvFitMetrics
{
    int64_t rows = 0;
    double r2Keys = 0, r2Values = 0;         // pooled R^2 on the evaluated prompts
    double cosKeys = 0, cosValues = 0;       // mean per-token cosine (converted vs B's own)
    double relErrKeys = 0, relErrValues = 0; // ||converted - B||_F / ||B||_F
};

struct LayerMetrics : KvFitMetrics
{
    std::vector<KvFitMetrics> heads; // [B kvHeads]: the same scores on each head's columns
};

// Fits the maps of one target layer from `prompts` (indices into the file), using at most
// maxTokens token rows (0 = all; prompts in the given order, the last one cut). headMatched needs
// equal kv-head counts (Error(InvalidArgument) otherwise). Error(InvalidArgument) naming the file
// when a layer was not captured or fewer than 2 usable rows remain. With token features
// (core::TokenFeatures, full maps only) each row's inputs grow by those features, taken from the
// file (B's layer 0 for its token features; Error(InvalidArgument) naming the file when it has none
// or stores keys after RoPE).
core::LayerConverter fitLayer(const core::ExperimentReader &file, int targetLayer,
                              const std::vector<int> &sourceLayers, const std::vector<int> &prompts,
                              double lambda, LayerFitStats *stats = nullptr, bool headMatched = false,
                              int64_t maxTokens = 0, const core::TokenFeatures &features = {});
// The same accumulation solved for every lambda of `lambdas` (one pass over the data).
std::vector<core::LayerConverter>
fitLayerGrid(const core::ExperimentReader &file, int targetLayer, const std::vector<int> &sourceLayers,
             const std::vector<int> &prompts, const std::vector<double> &lambdas,
             LayerFitStats *stats = nullptr, bool headMatched = false, int64_t maxTokens = 0,
             const core::TokenFeatures &features = {});

// The reduced-rank form of fitLayerGrid: each lambda's ridge solution projected onto its top `rank`
// output directions (RidgeAccumulator::solveReducedRank), from the same one pass over the data.
std::vector<core::LayerConverter>
fitLayerGridLowRank(const core::ExperimentReader &file, int targetLayer, const std::vector<int> &sourceLayers,
                    const std::vector<int> &prompts, const std::vector<double> &lambdas, int rank,
                    LayerFitStats *stats = nullptr, bool headMatched = false, int64_t maxTokens = 0,
                    const core::TokenFeatures &features = {});

// The MLP family's training (gpu/src/align/mlp_fit.cpp): per kind (keys, values) and map
//   y = x W + b + gelu(x W1 + b1) W2,
// the skip path starting at the layer's ridge maps and W2 at zero (so epoch 0 is ridge exactly),
// Adam on the mean squared error of each map divided by its targets' variance, the rows of the
// training prompts streamed through a shuffle buffer each epoch, the epoch with the lowest
// validation loss kept per kind (early stopping after `patience` epochs without a 0.01% gain).
// Seeded: the same options and file give the same maps on the same thread count.
struct MlpOptions
{
    int hidden = 256;                        // branch width
    int epochs = 30;                         // at most
    int batch = 256;                         // rows per step
    double learningRate = 1e-3;              // Adam
    int patience = 3;                        // epochs without gain before a kind stops
    int64_t validationRows = 16384;          // validation rows held in memory for the loss
    int64_t maxTrainRows = 0;                // calibration rows (0 = every training prompt; the last one cut)
    int64_t bufferBytes = int64_t(64) << 20; // shuffle buffer of training rows (both kinds)
    uint64_t seed = 1;
    // No epoch starts after this time (the fit's budget): the kept epoch is the best of those run, and
    // with none run the map is its ridge start (an MLP map whose branch is zero).
    std::optional<core::Clock::time_point> deadline;
    // After each epoch (1-based) of at most `epochs`; return false to cancel.
    std::function<bool(int epoch, int epochs)> progress;
};
struct MlpFitStats
{
    int epochs = 0;                                // epochs run
    int bestEpochKeys = 0, bestEpochValues = 0;    // 0: ridge itself was best
    double ridgeLossKeys = 0, ridgeLossValues = 0; // validation loss at the start (ridge)
    double lossKeys = 0, lossValues = 0;           // of the kept epoch
    int64_t trainRows = 0;                         // rows per epoch
    bool deadlineReached = false;                  // training stopped at options.deadline
    double seconds = 0;
    std::vector<std::string> warnings; // skipped prompts
};
// `ridge`: the layer's fitted ridge maps (full or head-matched). nullopt when progress cancelled.
// Error(InvalidArgument) for bad options, no validation rows or maps that are not ridge.
std::optional<core::LayerConverter> trainMlpLayer(const core::ExperimentReader &file,
                                                  const core::LayerConverter &ridge,
                                                  const std::vector<int> &train,
                                                  const std::vector<int> &valid, const MlpOptions &options,
                                                  MlpFitStats *stats = nullptr);

// Scores a fitted map on other prompts (held out by prompt, never by token).
LayerMetrics evaluateLayer(const core::ExperimentReader &file, const core::LayerConverter &map,
                           const std::vector<int> &prompts);
// Several maps of the same target layer in one pass over the prompts.
std::vector<LayerMetrics> evaluateLayers(const core::ExperimentReader &file,
                                         const std::vector<core::LayerConverter> &maps,
                                         const std::vector<int> &prompts);

// B's rows [tokens, kvHeadsB * headDimB] (token-major) from A's rows of map.sourceLayers:
// source[i] is [tokens, kvHeadsA * headDimA] of map.sourceLayers[i]. keys picks the key maps.
// Error(Shape) naming the layer when the maps do not fit either geometry. extra: the map's token
// features [tokens, map.features.extraDim(...)] (core::TokenFeatures), needed when it has any.
std::vector<float> convertRows(const core::LayerConverter &map, bool keys,
                               const std::vector<const float *> &source, int64_t tokens, int kvHeadsA,
                               int headDimA, int kvHeadsB, int headDimB, const float *extra = nullptr);

// For every B layer t and A's captured layer i: how well a single-layer ridge fit of B's layer t
// from A's layer i (lambda, at most maxTokens calibration rows, as fitLayer takes them) explains
// B's layer on `validation` prompts (mean of key and value R^2). One accumulation per A layer
// against all of B's layers at once. progress(done, of A's layers) returning false cancels (an
// empty result). Error(InvalidArgument) with fewer than 2 aligned calibration rows.
std::vector<std::vector<double>> sourceLayerScores(const core::ExperimentReader &file,
                                                   const std::vector<int> &train,
                                                   const std::vector<int> &validation, double lambda,
                                                   int64_t maxTokens = 0,
                                                   const std::function<bool(int, int)> &progress = {});
// Per B layer, A's captured layers best first by those scores (ties in layer order);
// LayerSelection::TopK takes the first k. Empty when cancelled.
std::vector<std::vector<int>> rankSourceLayers(const core::ExperimentReader &file,
                                               const std::vector<int> &train,
                                               const std::vector<int> &validation, double lambda,
                                               int64_t maxTokens = 0,
                                               const std::function<bool(int, int)> &progress = {});

// B's attention output computed with B's own queries on the converted K/V against the same with
// its own K/V, per layer (cosine of each token's [numHeads * headDim] output, averaged over
// tokens and prompts) and per kv head (the head's query group). `target` must be the file's model
// B (Error(Config) naming both fingerprints otherwise); at most maxPrompts prompts are run.
struct AttentionMetrics
{
    int prompts = 0;
    int64_t tokens = 0;
    std::vector<double> layerCos;             // [B layers]
    std::vector<std::vector<double>> headCos; // [B layers][B kvHeads]
};
AttentionMetrics attentionCosine(const core::ExperimentReader &file,
                                 const std::vector<core::LayerConverter> &layers, const Model &target,
                                 const std::vector<int> &prompts, int maxPrompts = 32);

// What a converter does to B's predictions, on prompts of the file (no model A needed: A's rows are
// the file's). For each prompt of n B tokens (n >= 4), the first n - m positions hold A's rows
// converted (B's RoPE applied) and B runs the last m = min(continuation, n / 2) tokens on top; each of
// those m next-token distributions is compared with B's from its own prefill of the whole prompt
// (KL(own || converted), argmax agreement), and so is B given no prefix at all (the m tokens alone
// from position 0): the floor a converter has to beat. `target` must be the file's model B
// (Error(Config) otherwise); at most maxPrompts aligned prompts of at least 4 tokens are run.
struct TransferKl
{
    int prompts = 0;
    int64_t tokens = 0; // compared positions
    double kl = std::numeric_limits<double>::quiet_NaN(),
           klNoPrefix = std::numeric_limits<double>::quiet_NaN();
    double top1 = std::numeric_limits<double>::quiet_NaN(),
           top1NoPrefix = std::numeric_limits<double>::quiet_NaN();
    // 1 - kl / klNoPrefix: the share of the no-prefix KL the converted cache removes (NaN when the
    // floor is 0 or nothing was compared)
    double gapClosed() const;
};
TransferKl transferKl(const core::ExperimentReader &file, const std::vector<core::LayerConverter> &layers,
                      const Model &target, const std::vector<int> &prompts, int maxPrompts = 32,
                      int continuation = 16);

// The KL objective's loss as its training computes it (B's forward through autograd, in torch's own
// ops, the converted prefix as tensors): the mean over the continuation positions of KL(own ||
// converted) on the prompts transferKl takes, which transferKl computes through B's inference path
// (its kernels and its cache); the two agree to rounding (a test holds them equal).
double klObjectiveLoss(const core::ExperimentReader &file, const std::vector<core::LayerConverter> &layers,
                       const Model &target, const std::vector<int> &prompts, int maxPrompts = 32,
                       int continuation = 16);

// Linear CKA between every (B layer, A layer) pair of token rows, on up to maxTokens rows of the
// prompts: {keys, values}, each [B layers, A layers]; NaN where a layer was not captured.
std::pair<core::Matrix, core::Matrix> linearCka(const core::ExperimentReader &file,
                                                const std::vector<int> &prompts, int64_t maxTokens = 2048);

// Baselines a converter is compared with (kvwb compare --baselines), as converter records of the
// experiment's geometry:
// - the raw source KV: B layer l reads A's layer at the same relative depth unchanged (identity
//   maps, no bias); only when A's and B's KV rows have the same width (kvHeads * headDim), nullopt
//   otherwise;
// - a random map of like's shape: every map a linear map (family ridge, whatever like's family: a
//   low-rank record's factors and an MLP's branch are dropped) whose weight is drawn
//   N(0, 1 / inputDim) (seeded), its bias kept (the fitted bias is the target's mean row, which
//   needs no learning of the map). Records of one shape and seed give the same random maps.
std::optional<core::ConverterRecord> rawSourceRecord(const core::ConverterRecord &like, int layersA,
                                                     int kvDimA, int layersB, int kvDimB);
core::ConverterRecord randomMapRecord(const core::ConverterRecord &like, uint64_t seed);

struct PromptSplit
{
    std::vector<int> train, valid, test;
};
// A seeded shuffle of 0..count-1 cut into train / valid / test (each non-empty when count >= 3).
PromptSplit splitPrompts(int count, double validFraction, double testFraction, uint64_t seed);

// The selection enum and its names are core's (core/store/converter_family.h).
using core::LayerSelection;
using core::layerSelectionName;
using core::parseLayerSelection;

// What model B does with each layer's keys and values, as metrics of their rows (the attention-aligned
// ridge family fits under them; docs/transfer.md): per B layer, per kv head, [headDim, headDim]
// row-major. Keys: sum over key positions n of R_n^T (sum of q_m q_m^T over the queries m >= n that see
// n, every query head of the kv head) R_n, B's own post-RoPE queries on the prompts (at most maxPrompts
// aligned ones), R_n the rotation at n when the file keeps keys before RoPE (else none). Values: the
// Gram of B's output projection over the query heads the kv head serves. Error(InvalidArgument) when
// no prompt is aligned; Error(Config) when target is not the file's B; the checkpoint names a missing
// tensor.
struct TargetMetric
{
    std::vector<std::vector<std::vector<double>>> keys, values; // [layers][kvHeads][hd * hd]
    int prompts = 0;
    int64_t tokens = 0;
};
// chunkValues bounds the doubles of suffix sums held at once per layer (256 MB by default: an 8 B
// model's 8 kv heads of 128 take 256 key positions at a time); the result does not depend on it.
TargetMetric targetMetric(const core::ExperimentReader &f, const Model &target,
                          const std::vector<int> &prompts, int maxPrompts,
                          int64_t chunkValues = int64_t(1) << 25);

// One converter family a `family auto` fit tried, scored on the validation prompts (transferKl).
struct AutoCandidate
{
    core::ConverterFamily family = core::ConverterFamily::Ridge;
    LayerSelection selection = LayerSelection::Proportional;
    int k = 1; // source layers per B layer (all: A's captured layers)
    bool autoLambda = false;
    core::TokenFeatures features; // inputs beside A's rows (none for the plain candidates)
    TransferKl score;             // on the validation prompts
    double fitSeconds = 0;        // this candidate's fit and score
    bool deadlineReached = false; // mlp: the budget ended its training early
};

// One line for the log: "auto: mlp (all, k 4, lambda auto): validation KL 0.0930 (no prefix 1.4450),
// 93.6 % of the gap, top-1 0.947, 32 prompts, fit 812.3 s".
std::string autoCandidateLine(const AutoCandidate &c);

struct AlignOptions
{
    // What shapes the converter: its name, selection, k, lambda, family, rank, the MLP's training,
    // the split and the seed (the window's and `kvwb align`'s settings, core/settings/fit_settings.h).
    // experiment, attention and dryRun are the caller's; with autoLambda, each layer's lambda is the
    // one of lambdaGrid with the best mean key/value R^2 on the validation prompts (ties: the larger,
    // more regularised lambda). perHead: head-matched maps when kv-head counts agree (else full, warned).
    core::FitSettings fit;
    std::vector<double> lambdaGrid = {1e-4, 1e-3, 1e-2, 1e-1, 1.0};
    int64_t ckaTokens = 2048;
    int64_t mlpValidationRows = 16384;          // MlpOptions::validationRows
    int64_t mlpBufferBytes = int64_t(64) << 20; // MlpOptions::bufferBytes
    // Layer checkpoints of the MLP family (minutes of training per layer): when set, each trained B
    // layer is saved as checkpointDir/layer-NNN.h5 (core::saveLayerCheckpoint), and with fit.resume a
    // layer whose checkpoint was written by the same fit (every setting that shapes the maps, the seed
    // and the experiment's run id) is read back instead of trained again; one written by another fit
    // is refused with Error(InvalidArgument). The caller removes the directory once the converter is
    // saved. Without it, fit.resume does nothing.
    std::filesystem::path checkpointDir;
    // fraction in [0, 1]; return false to cancel.
    std::function<bool(double fraction, const std::string &stage)> progress;
    // family auto: each candidate as soon as it is scored (ridge first), for the log.
    std::function<void(const AutoCandidate &)> onCandidate;
};

// The MLP training of `options` (its seed is fit.seed, its calibration rows fit.maxTrainTokens).
MlpOptions mlpOptions(const AlignOptions &options);

struct AlignResult
{
    core::ConverterRecord record; // maps, metrics, CKA, splits (not yet saved)
    std::vector<std::string> warnings;
    bool cancelled = false;
    int resumedLayers = 0;        // layers read from checkpoints instead of trained
    bool deadlineReached = false; // fit.budgetSeconds ended the MLP's training in some layer
    // family auto: every candidate in the order tried, and the index of the one kept (its record)
    std::vector<AutoCandidate> candidates;
    int chosen = -1;
    // objective kl: one line for the log, what the training through B did to the validation KL
    // ("KL objective: validation KL 0.0930 -> 0.0712 (no prefix 1.4450), ..."); empty otherwise
    std::string klObjective;
};

// The whole fit: split, select sources, choose lambda, fit every B layer, score on the test
// prompts (attention-output cosine only when target is given: NaN otherwise).
// fit.budgetSeconds > 0 bounds the MLP's training (MlpOptions::deadline from the fit's start).
// Family auto (gpu/src/align/alignment_auto.cpp) needs target (Error(InvalidArgument) without it)
// and fits, in this order: ridge with the fit's selection, ridge on every captured A layer with lambda
// auto (top k = 4096 / A's row width when every layer would exceed 4,096 features; skipped when the
// fit already asks for that), attention-aligned ridge (family AttnRidge) with the better one's
// settings, ridge with B's token features (core::TokenFeatures b, offsets 4, and window 1 when all
// of the map's inputs stay within 4,096; when the fit asks for none and the file's keys are pre-RoPE
// with B's layer 0 captured) with the better plain ridge's settings, then the MLP from the best of these; the
// MLP is skipped when that ridge already closes 99 % of the no-prefix KL gap or the budget is spent. It keeps
// the candidate with the lowest validation KL (transferKl on the validation prompts, at most fit.autoPrompts
// of them; ties: the earlier, cheaper one). The record's settings JSON gains "auto": the candidates and their
// scores, and which was chosen.
// Objective kl (fit.objective; needs target with dense weights, the training and validation prompts each
// holding one of 4 or more paired tokens: Error(InvalidArgument), checked before any fitting) fits the
// family as above, then trains every map of every layer jointly through frozen B (torch's autograd
// through B's forward in its compute dtype, on its device) on the KL between B's next-token
// distributions from the converted cache and from its own prefill: m = min(16, n / 2) tokens of a
// training prompt of n run on top of the converted positions before them, the m starting (seeded, each
// epoch anew) anywhere from n / 4 to n - m. Adam at fit.klLearningRate, 4 prompts a step, a seeded
// order each epoch, at most fit.klEpochs epochs, each scored by transferKl on the validation prompts
// (at most fit.autoPrompts; the last m tokens of each); the epoch with the lowest validation KL is kept
// (the KV fit itself when none is lower), fit.patience epochs without a 0.01 % gain stop it, and no
// epoch starts after fit.budgetSeconds of the fit. The maps keep their family and shapes. With
// checkpointDir the state after each whole epoch is kept there (kl-state.pt) and fit.resume continues
// it. The record's settings gain "objective": "kl" and "kl": the scores before and after, per epoch.
AlignResult alignExperiment(const core::ExperimentReader &file, const AlignOptions &options,
                            const Model *target);

// Sweeps: every combination of ks x lambdas x calibration-token counts, fitted on the same split and
// scored on the same test prompts; one table row each with columns
// k, lambda, train_tokens, r2_k, r2_v, cos_k, cos_v, rel_k, rel_v, attn_cos (layer means).
struct SweepOptions
{
    LayerSelection selection = LayerSelection::Proportional;
    std::vector<int> ks = {1};
    std::vector<double> lambdas = {0.01};
    std::vector<int64_t> trainTokens = {0}; // 0 = all
    bool perHead = false;
    double validFraction = 0.15, testFraction = 0.15;
    uint64_t seed = 1;
    int attentionPrompts = 16;
    std::function<bool(double fraction, const std::string &stage)> progress;
};
struct SweepResult
{
    core::MetricTable table;
    std::vector<std::string> warnings;
    bool cancelled = false; // progress returned false: the table holds the rows done so far
};
// Top-k rankings use the same calibration tokens as the row they serve.
SweepResult sweepAlignment(const core::ExperimentReader &file, const SweepOptions &options,
                           const Model *target);

} // namespace kvwb::gpu
