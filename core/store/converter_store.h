// Fitted KV converters, their metrics and sweep tables, stored in an experiment file's own groups
// (/converters/<name>, /sweeps/<name>) beside the captured KV (layout in docs/experiment-format.md).
//
// The types here are plain values: gpu/align/alignment.h fits them, gpu/transfer/transfer.h applies them, the
// UI and reports read their metrics. saveConverters/saveTable open the file for writing without SWMR
// (HDF5 1.10 cannot create objects under SWMR), so no capture may be appending at the same time:
// they take the capture's writer lock and fail with Error(Io) while one is.
// A record is built as an unlinked HDF5 object, flushed, then linked in place of the old one, so a
// reader sees either the old record or the complete new one, and a full disk or a killed process
// while the record is written leaves the old record intact. Names starting with '.' are hidden:
// never listed, loaded or saved; a leftover ".<name>.partial" is removed by the next save.
//
// Thread-safety: none; HDF5 calls belong to the engine thread (see core/store/experiment_file.h).
// Errors: core::Error naming the file and the dataset or attribute at fault (Io, Format;
// InvalidArgument for an unknown, bad or hidden name or an inconsistent record).
#pragma once

#include "core/metrics/metric_table.h"
#include "core/store/converter_family.h"
#include "core/store/experiment_file.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kvwb::core {

// One map of a converter, from a source row x [inputDim] to a target row y [outputDim] (row vectors,
// float32, row-major). Its family (core/store/converter_family.h ConverterFamily) says which parts it has:
//   ridge:    y = x W + b                              (weight, bias)
//   low-rank: y = (x D) U + b                          (down, up, bias; weight empty)
//   MLP:      y = x W + b + gelu(x W1 + b1) W2         (weight, bias, hiddenWeight, hiddenBias,
//                                                       outWeight; gelu is the erf form)
// applyKvMap (gpu/align/ridge.h) and the transfer's Converter evaluate all three with one function.
struct KvMap
{
    int inputDim = 0;
    int outputDim = 0;
    double lambda = 0;         // ridge regularisation of the (skip) fit (relative, see gpu/align/ridge.h)
    std::vector<float> weight; // [inputDim, outputDim]; empty when rank > 0
    std::vector<float> bias;   // [outputDim]
    int rank = 0;              // > 0: low-rank, W = D U
    std::vector<float> down;   // D [inputDim, rank]
    std::vector<float> up;     // U [rank, outputDim]
    int hidden = 0;            // > 0: the MLP branch's width
    std::vector<float> hiddenWeight; // W1 [inputDim, hidden]
    std::vector<float> hiddenBias;   // b1 [hidden]
    std::vector<float> outWeight;    // W2 [hidden, outputDim]

    // Numbers the map holds (from the dimensions, so also for a MetricsOnly load).
    int64_t parameterCount() const;
    ConverterFamily family() const; // from the parts present: rank > 0 low-rank, hidden > 0 MLP
};

// The identity map of width dim: weight I, bias 0 (a baseline, and the map of a model aligned with
// itself).
KvMap identityMap(int dim);

// Where a position's token features come from, for B positions 0..n-1 paired with A tokens
// pairing[t] (empty: the same tokenizer, pairing[t] = t): for window block w of position t the
// earlier position whose paired A row it reads (-1: before the prompt), and t's offset one-hot index.
struct TokenFeaturePlan
{
    std::vector<int32_t> windowRows; // [n * window]
    std::vector<int32_t> offset;     // [n], already min(t - s(t), offsets - 1); empty when offsets == 0
};
// Error(InvalidArgument) when pairing is neither empty nor n entries.
TokenFeaturePlan tokenFeaturePlan(const TokenFeatures &features, const std::vector<int32_t> &pairing,
                                  int64_t n);

// The maps that produce one target (B) layer from concatenated source (A) layer rows.
// Full mode: one map per kind, input [sourceLayers.size() * kvHeadsA * headDimA] (the layers'
// token rows side by side, each flattened over heads), output [kvHeadsB * headDimB].
// Head-matched mode (kvHeadsA == kvHeadsB): one map per B kv head h, input
// [sourceLayers.size() * headDimA] (head h of each source layer side by side), output [headDimB].
struct LayerConverter
{
    int targetLayer = 0;
    std::vector<int> sourceLayers; // A's layers, ascending
    bool headMatched = false;
    std::vector<KvMap> keys;   // [1] or [kvHeadsB]
    std::vector<KvMap> values; // [1] or [kvHeadsB]
    TokenFeatures features;    // full mode only: inputDim grows by features.extraDim(...)

    int64_t parameterCount() const; // of every key and value map
};

struct ConverterRecord
{
    std::string name; // [A-Za-z0-9_.-]+, not starting with '.'
    KeyForm keyForm = KeyForm::PreRope;
    std::string selection; // "proportional" | "topk" | "all"
    int k = 1;
    std::string lambdaMode; // "fixed" | "auto"
    bool perHead = false;   // asked for; LayerConverter::headMatched says what was done
    ConverterFamily family = ConverterFamily::Ridge; // every map's form (files before it: ridge)
    double fitSeconds = 0;     // wall time of the fit (selection, lambda, solve or training); 0 unknown
    double convertMsPer1k = 0; // converting 1,024 tokens of every B layer's K and V, ms; 0 unknown
    std::string settingsJson;  // everything else that determined the fit (splits, seeds, ...)
    std::string createdUtc;    // ISO 8601; saveConverters fills it (and the two below) when empty
    std::string appVersion;
    std::string gitCommit;
    std::vector<int> trainPrompts; // prompt indices of the experiment used for fitting
    std::vector<int> validPrompts; // used to choose k-layers / lambda
    std::vector<int> testPrompts;  // held out; the metrics below are computed on these
    int64_t trainTokens = 0;
    std::vector<LayerConverter> layers; // one per B layer, index = B layer
    MetricTable layerMetrics;           // one row per B layer (columns: layer, r2_k, r2_v, ...)
    MetricTable headMetrics;            // one row per (B layer, B kv head)
    Matrix ckaKeys;                     // [B layers, A layers] linear CKA of K rows
    Matrix ckaValues;                   // [B layers, A layers] linear CKA of V rows

    int64_t parameterCount() const;                        // of every map of every layer
    int64_t bytes() const { return parameterCount() * 4; } // as stored and converted: float32
};

// Writes (or replaces) /converters/<record.name> in the experiment file. Error(InvalidArgument)
// for a bad name or a record whose maps disagree with their stated dimensions or the file's models.
void saveConverters(const std::filesystem::path &experiment, const ConverterRecord &record);
// Names under /converters, sorted; empty when there are none.
std::vector<std::string> listConverters(const std::filesystem::path &experiment);
enum class ConverterParts
{
    WithMaps,   // everything (what a conversion needs)
    MetricsOnly // every KvMap's float arrays left empty (dimensions, ranks and lambdas read): what
                // panels and reports show, without reading the maps (~100 MB for a 22-layer pair)
};
// Error(InvalidArgument) naming the file and the converter when absent.
ConverterRecord loadConverters(const std::filesystem::path &experiment, const std::string &name,
                               ConverterParts parts = ConverterParts::WithMaps);

// One finished B layer of a fit that trains layer by layer (the MLP family), kept in its own file so
// that an interrupted fit resumes from the next layer (`kvwb align --resume`). `fitKey` says what
// determined the fit (settings, seed, the experiment's run id): a checkpoint of another fit is
// refused, never mixed in. `statsJson` is the layer's training record (epochs, losses, seconds).
// The file is written under a temporary name and renamed, so it is complete or absent.
struct LayerCheckpoint
{
    LayerConverter layer;
    ConverterFamily family = ConverterFamily::Ridge;
    std::string fitKey;
    std::string statsJson;
};
void saveLayerCheckpoint(const std::filesystem::path &file, const LayerCheckpoint &checkpoint);
// Error(Format) naming the file and the field for anything malformed; the maps' shapes are the
// caller's to compare with what it expects.
LayerCheckpoint loadLayerCheckpoint(const std::filesystem::path &file);

// /sweeps/<name>: a MetricTable plus a JSON string saying what was swept (attribute "settings").
void saveTable(const std::filesystem::path &experiment, const std::string &name, const MetricTable &table,
               const std::string &settingsJson);
std::vector<std::string> listTables(const std::filesystem::path &experiment);
MetricTable loadTable(const std::filesystem::path &experiment, const std::string &name,
                      std::string *settingsJson = nullptr);

} // namespace kvwb::core
