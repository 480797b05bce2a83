// The HDF5 experiment file, schema "kvwb/2": both models' KV caches for a prompt set, with
// provenance, readable by any HDF5 tool (layout in docs/experiment-format.md).
//
// ExperimentWriter streams prompts into a file opened in HDF5 SWMR mode: each appendPrompt writes
// the prompt's KV rows, token ids and text first, flushes, then extends the offsets datasets that
// define the prompt count and flushes again, so a prompt is durable (and a process killed with
// SIGKILL leaves a file with every earlier prompt intact) once appendPrompt returns.
// ExperimentReader reads one prompt's K or V for one layer, or a token range across prompts of one
// layer, reading only those rows from disk.
//
// Thread-safety: none. Debian's HDF5 is built without thread safety, so readers and writers (and
// any other HDF5 use in the process) must all live on one thread: the engine thread. Writer and
// reader own their HDF5 handles (move-only, closed on destruction); returned data are copies.
// Errors: every failure is a kvwb::core::Error naming the file and the dataset or attribute at
// fault (Io: unreadable/unwritable path or full disk; Format: not HDF5 or inconsistent contents;
// Unsupported: newer schema; Config: models differ from the file's; InvalidArgument/Shape: bad
// caller data).
#pragma once

#include "core/model/dtype.h"
#include "core/model/kv_types.h"
#include "core/model/model_config.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

inline constexpr const char *kExperimentSchema = "kvwb/2";

// How KV values are stored on disk (ExperimentOptions::storage): core::FloatType (core/model/dtype.h),
// f32, f16 or bf16; the API always speaks float32.

// Whether stored keys had RoPE applied (values never do): core::KeyForm (core/model/kv_types.h).

struct ExperimentOptions
{
    FloatType storage = FloatType::F32;
    int compress = 0;      // deflate level 0 (off) .. 9, with the shuffle filter when > 0
    int chunkTokens = 256; // KV chunk rows: [chunkTokens, kvHeads, headDim]
    KeyForm keyForm = KeyForm::PreRope;
    // fsync after each flush, so a prompt also survives power loss, not only a killed process.
    bool syncToDisk = true;
};

// Provenance stored as root attributes. The caller fills qtVersion, torchVersion, device and
// configSha256; ExperimentWriter::create fills appVersion, gitCommit, hdf5Version and createdUtc
// itself, and runId when it is empty (16 random bytes, hex).
struct Provenance
{
    std::string appVersion;
    std::string gitCommit;
    std::string qtVersion;
    std::string torchVersion;
    std::string hdf5Version;
    std::string device;     // e.g. "cpu", "cuda:0 (NVIDIA H200)"
    std::string createdUtc; // ISO 8601, e.g. 2025-01-31T12:00:00Z
    std::string runId;
    std::string configSha256; // sha256 (hex) of the resolved capture configuration
};

// One of the two models, as stored under /models/a or /models/b.
struct ModelInfo
{
    ModelRole role = ModelRole::A; // A (source) or B (target); "a" / "b" in the file
    // What the file stores: architecture, modelType, numLayers, numHeads, numKvHeads, headDim,
    // hiddenSize, vocabSize, ropeTheta, ropeLayout, ropeScaling.type/factor. A reader returns a
    // config with only these fields set.
    ModelConfig config;
    std::string weightsSha256; // Checkpoint::fingerprint()
    std::string tokenizerSha256;
    std::string sourcePath;
    // Layers whose KV the file stores (sorted, unique, each in [0, numLayers)); empty means all.
    // Stored as /models/<role> captured_layers, which always lists them; a reader returns that list.
    std::vector<int> capturedLayers;
};

// One model's share of a prompt, as given to ExperimentWriter::appendPrompt.
struct PromptKv
{
    std::vector<int32_t> ids; // [tokens]
    // [tokens * 2]: token i covers bytes [spans[2i], spans[2i+1]) of the prompt's text
    // (Tokenizer::encodeWithOffsets); empty when unknown (prompts given as ids).
    std::vector<int32_t> spans;
    // One entry per captured layer, in capturedLayers order (all layers when that is empty).
    std::vector<std::vector<float>> keys;   // [captured layers] x [tokens, kvHeads, headDim] float32
    std::vector<std::vector<float>> values; // [captured layers] x [tokens, kvHeads, headDim] float32
};

struct PromptRecord
{
    std::string text;  // UTF-8
    std::string label; // optional (e.g. the workload's intent); "" when none
    PromptKv a;
    PromptKv b;
    // [b tokens]: for each B token the index (within this prompt) of the A token whose row pairs
    // with it (core/tokenize/token_alignment.h), when A and B tokenised the prompt differently;
    // empty when they did not.
    std::vector<int32_t> alignment;
};

struct PromptTokens
{
    std::vector<int32_t> ids;   // [tokens]
    std::vector<int32_t> spans; // [tokens * 2] byte spans as in PromptKv; empty when not stored
    int64_t firstToken = 0;     // row of token 0 in every layer's KV dataset of this model
};

struct PromptInfo
{
    std::string text;
    std::string label;
    PromptTokens a;
    PromptTokens b;
    // [b tokens] as PromptRecord::alignment; empty when none was stored (identical tokenisation,
    // or a file written before alignments existed).
    std::vector<int32_t> alignment;
};

class ExperimentWriter
{
public:
    // Creates a new file (Error(InvalidArgument) if path exists): the skeleton with every group,
    // attribute and (empty) dataset is written to path + ".tmp" and renamed into place, so path is
    // either absent or a valid empty experiment. Error(Io) names an unwritable path;
    // Error(InvalidArgument) names the model and index of a bad capturedLayers entry. Only the
    // captured layers get KV datasets.
    static ExperimentWriter create(const std::filesystem::path &path, const ExperimentOptions &options,
                                   const Provenance &provenance, const ModelInfo &a, const ModelInfo &b);
    // Opens an existing file for appending (recovering it after a crash: rows past the last
    // committed prompt are dropped). Storage options come from the file. Error(Config) naming both
    // fingerprints when a model's weights fingerprint differs from the file's (or its geometry does,
    // or its capturedLayers, empty meaning all, differ from the file's captured_layers).
    static ExperimentWriter append(const std::filesystem::path &path, const ModelInfo &a, const ModelInfo &b,
                                   bool syncToDisk = true);

    ExperimentWriter(ExperimentWriter &&) noexcept;
    ExperimentWriter &operator=(ExperimentWriter &&) noexcept;
    ~ExperimentWriter(); // closes without throwing; committed prompts are safe either way

    // Writes the prompt and makes it durable; returns its index. Error(Shape) when a model's
    // keys/values do not have one entry per captured layer of ids.size() * numKvHeads * headDim
    // floats, its spans are neither empty nor 2 per id, or the alignment is neither empty nor one
    // A index in [0, a.ids.size()) per B id. Spans and alignment are dropped in a file that does
    // not store them (storesAlignment()).
    // Error(Io) (disk full, ...) leaves every earlier prompt intact; the writer then refuses
    // further prompts.
    int appendPrompt(const PromptRecord &prompt);
    int promptCount() const;
    // The file's storage settings (dtype, compression, chunking, key form): on append these are the
    // file's, whatever the caller asked for when it was created.
    ExperimentOptions storage() const;
    int64_t totalTokens(ModelRole model) const;
    const std::filesystem::path &path() const;
    // The layers of model 'a' or 'b' the file stores, explicit (never empty), in PromptKv order.
    const std::vector<int> &capturedLayers(ModelRole model) const;
    // Whether the file has the token span and alignment datasets (every file this kvwb creates;
    // not one written before them, whose new prompts then store neither).
    bool storesAlignment() const;
    // Flushes and closes; Error(Io) if the final flush fails. Idempotent.
    void close();

private:
    struct Impl;
    explicit ExperimentWriter(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

class ExperimentReader
{
public:
    // Opens and validates the file (also one left by a crashed or still running writer: only
    // committed prompts are visible). Error(Io): missing/unreadable; Error(Format): not HDF5 or
    // datasets disagreeing with attributes (naming the dataset); Error(Unsupported): newer schema.
    static ExperimentReader open(const std::filesystem::path &path);

    ExperimentReader(ExperimentReader &&) noexcept;
    ExperimentReader &operator=(ExperimentReader &&) noexcept;
    ~ExperimentReader();

    const std::string &schema() const;
    const Provenance &provenance() const;
    const ModelInfo &model(ModelRole role) const;
    ExperimentOptions storage() const; // storage, compress, chunkTokens, keyForm of the file
    // Whether the file has the token span and alignment datasets (see ExperimentWriter).
    bool storesAlignment() const;

    int promptCount() const;
    PromptInfo prompt(int index) const;
    int64_t totalTokens(ModelRole model) const; // committed KV rows of that model

    // One prompt's keys or values for one layer: [tokens, kvHeads, headDim] float32. layer is the
    // model's real layer index; Error(InvalidArgument) when it is out of range or was not captured.
    std::vector<float> keys(ModelRole model, int layer, int prompt) const;
    std::vector<float> values(ModelRole model, int layer, int prompt) const;
    // Rows [firstToken, firstToken + count) of one layer, across prompt boundaries:
    // [count, kvHeads, headDim] float32. Reads only those rows (a hyperslab).
    std::vector<float> keyRange(ModelRole model, int layer, int64_t firstToken, int64_t count) const;
    std::vector<float> valueRange(ModelRole model, int layer, int64_t firstToken, int64_t count) const;

    const std::filesystem::path &path() const;

private:
    struct Impl;
    explicit ExperimentReader(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

} // namespace kvwb::core
