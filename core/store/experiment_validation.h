// The open-time validation of an experiment file (schema "kvwb/2", docs/experiment-format.md) and
// the layout ExperimentReader and ExperimentWriter hold open: every check of the file's groups,
// attributes, dataset shapes, element types and offsets, each failure an Error(Format) naming the
// file and the group, dataset or attribute at fault; and the checks of the model descriptions a
// writer is created or appended with (Error(InvalidArgument) / Error(Config)).
//
// Internal to core/store: only experiment_file.cpp and experiment_validation.cpp include this header
// (it exposes HDF5 types through core/store/hdf5_handle.h; HDF5 is linked PRIVATE). Thread-safety:
// none, as for every HDF5 call (core/store/hdf5_handle.h).
#pragma once

#include "core/store/experiment_file.h"
#include "core/store/hdf5_handle.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace kvwb::core::detail {

// ---- names in the file ----

// A -> 0, B -> 1: the index of a model's state in the arrays below.
inline int roleIndex(ModelRole role)
{
    return role == ModelRole::A ? 0 : 1;
}
inline ModelRole roleOf(int index)
{
    return index == 0 ? ModelRole::A : ModelRole::B;
}
// The role's letter in the file's paths ("/kv/a/...").
inline char roleLetter(int index)
{
    return index == 0 ? 'a' : 'b';
}

// "/kv/<role>/layer_NNN/<what>" (what: "keys" or "values").
inline std::string layerPath(int model, int layer, const char *what)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "/kv/%c/layer_%03d/%s", roleLetter(model), layer, what);
    return buf;
}

// CRC-32 (zlib's) of stored KV bytes, in pieces of at most 1 GiB (zlib takes a uInt length).
uint32_t crc32Of(const void *data, size_t bytes);

// An empty dataset extendible along its first dimension: [0, rest...], chunked [chunkRows, rest...]
// (deflate > 0: shuffle + deflate at that level); intermediate groups are created.
h5::Dataset createExtendible(hid_t file, const std::string &fileName, const std::string &path, hid_t type,
                             const std::vector<hsize_t> &rest, hsize_t chunkRows, int deflate);

// "0, 5" for messages.
std::string joinLayers(const std::vector<int> &layers);

// The explicit layer list of a model: capturedLayers, or every layer when that is empty.
std::vector<int> resolvedLayers(const ModelInfo &m);

// ---- the file as it is held open ----

struct ModelDatasets
{
    h5::Dataset ids;                 // [tokens] int32
    h5::Dataset spans;               // [tokens, 2] int32 byte spans; closed when the file has none
    h5::Dataset offsets;             // [prompts + 1] int64
    std::vector<h5::Dataset> keys;   // [captured layers] of [tokens, kvHeads, headDim]
    std::vector<h5::Dataset> values; // [captured layers] of [tokens, kvHeads, headDim]
    std::vector<int64_t> committed;  // offsets of committed prompts, [prompts + 1]
    // /kv/<m>/crc32 uint32 [prompts, captured layers, 2]: CRC-32 (zlib) of each committed prompt's
    // stored key (0) and value (1) rows of each captured layer, written with the rows.
    h5::Dataset crc;
    std::vector<uint32_t> crcs; // the committed prompts' rows, flattened
};

// Index of prompt p, captured-layer slot, kind (0 keys, 1 values) in ModelDatasets::crcs.
inline size_t crcIndex(size_t prompt, size_t slot, size_t layers, int kind)
{
    return (prompt * layers + slot) * 2 + size_t(kind);
}
// "/kv/<role>/crc32"
inline std::string crcPath(int model)
{
    return std::string("/kv/") + roleLetter(model) + "/crc32";
}

struct RaggedBytes
{
    h5::Dataset bytes;              // [bytes] uint8
    h5::Dataset offsets;            // [prompts + 1] int64
    std::vector<int64_t> committed; // [prompts + 1]
    std::string bytesPath;
    std::string offsetsPath;
};

struct FileState
{
    std::filesystem::path path;
    std::string name; // path.string(), for messages
    h5::File file;
    std::string schema;
    Provenance provenance;
    std::array<ModelInfo, 2> models;
    ExperimentOptions options;
    std::array<ModelDatasets, 2> kv;
    RaggedBytes text;
    RaggedBytes label;
    // /prompts/b/align [b tokens] int32: B token -> A token of its prompt, -1 throughout a prompt
    // stored without one. With kv[m].spans, present in files created since alignments exist.
    h5::Dataset align;
    bool hasAlignment = false;
    int promptCount = 0;

    int64_t total(int model) const { return kv[size_t(model)].committed.back(); }
};

// ---- validation ----

// Opens every group and dataset of s.file (open already, s.name set) and validates them: schema,
// provenance and model attributes, storage options (from model a's first captured layer's keys),
// offsets (int64 [n], from 0, non-decreasing), and every KV dataset's shape and element type against
// the models and the file's dtype. The prompt count is the number of prompts whose every offsets
// dataset has been extended (see the commit protocol in docs/experiment-format.md). KV datasets
// are opened with a chunk cache of kvCacheBytesPerDataset bytes (0: HDF5's default). checksums:
// open and read /kv/<m>/crc32 (false only while kvwb upgrade adds them to a kvwb/1 file).
void loadState(FileState &s, hsize_t kvCacheBytesPerDataset, bool checksums = true);

// A model description given to ExperimentWriter::create or append: its role, positive geometry,
// and a sorted, unique capturedLayers within the layers (Error(InvalidArgument) naming the model).
void checkModel(const ModelInfo &m, ModelRole expectedRole);

// append: the given model (want) is the file's (have, read by loadState): the same weights and
// tokenizer fingerprints, geometry and captured layers, else Error(Config) naming the file.
void checkSameModel(const std::string &fileName, int model, const ModelInfo &want, const ModelInfo &have);

// appendPrompt: one key and one value tensor per captured layer of each model, each
// [ids, kvHeads, headDim] floats, spans empty or two per id, the alignment empty or one A index
// per B id, else Error(Shape) naming the file, prompt, model and layer or field.
void checkPromptShapes(const FileState &s, const PromptRecord &prompt);

} // namespace kvwb::core::detail
