// A model on disk: its configuration, its weights by Hugging Face tensor name, its fingerprint, and
// where its tokenizer is.
//
// Opens a Hugging Face directory (config.json + model.safetensors or a sharded index), a GGUF file
// (core/model/gguf_model.h: quantised tensors keep their block type in TensorInfo::dtype and are
// dequantised by toFloatVector or the engine as it loads), or a llama2.c checkpoint (.bin: legacy
// 7-int32 header, or the "ak42" version-1 float32 export). llama2.c
// weights are exposed under HF names (model.layers.N.self_attn.q_proj.weight, ...) with their
// original row order, and config().ropeLayout == Interleaved says how to rotate them.
//
// Thread-safety: immutable after open; weights are read-only memory mappings kept alive by this
// object and its copies.
#pragma once

#include "core/model/model_config.h"
#include "core/model/safetensors.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::core {

enum class CheckpointFormat
{
    HfSafetensors,
    Llama2cLegacy,
    Llama2cV1,
    Gguf
};
const char *checkpointFormatName(CheckpointFormat f) noexcept;

class Checkpoint
{
public:
    // path: an HF model directory, its config.json, a .gguf file, or a llama2.c .bin file.
    static Checkpoint open(const std::filesystem::path &path);

    const ModelConfig &config() const;
    CheckpointFormat format() const;
    const std::filesystem::path &path() const;

    bool contains(const std::string &hfName) const;
    // Throws Error(Shape) naming the tensor and file when missing or when its shape differs from
    // expectedShape (skip the shape check by passing an empty vector).
    TensorRef require(const std::string &hfName, const std::vector<int64_t> &expectedShape) const;
    std::vector<std::string> tensorNames() const;
    uint64_t weightBytes() const; // bytes of all tensors as stored

    // Checks every tensor the architecture needs exists with the right shape; Error(Shape) names
    // the first one at fault. Called by open().
    void validateTensors() const;

    // The tokenizer next to the model: tokenizer.json, then tokenizer.model, then tokenizer.bin in
    // the model directory (for a .bin checkpoint: tokenizer.bin in the same directory); for a GGUF
    // file the file itself when its metadata holds a tokenizer (loadTokenizer reads it).
    std::optional<std::filesystem::path> tokenizerPath() const;

    // sha256 (hex) over the weight files' bytes in order; computed on first call, then cached.
    std::string fingerprint() const;

private:
    struct Impl;
    std::shared_ptr<Impl> m_impl;
};

// Write an HF directory (config.json + model.safetensors, F32) with the same function as `from`;
// interleaved-RoPE q/k rows are permuted to rotate-half order. The tokenizer file is copied if
// present (a GGUF file's tokenizer is in its metadata: core/tokenize/gguf_tokenizer.h writes it).
void convertToHf(const Checkpoint &from, const std::filesystem::path &outDir);

// Write a llama2.c checkpoint (version 0: legacy 7-int header; version 1: "ak42" 256-byte header)
// from float weights under HF names, already in llama2.c's interleaved-RoPE row order. lm_head.weight
// is written (and the classifier marked separate) unless cfg.tieWordEmbeddings. The legacy
// freq_cis arrays, which llama2.c's run.c skips, are written as zeros. Requires
// cfg.headDim * cfg.numHeads == cfg.hiddenSize, the only geometry llama2.c can express.
// Error(InvalidArgument) names a missing or wrongly sized tensor; Error(Io) names the path.
void writeLlama2c(const std::filesystem::path &out, const ModelConfig &cfg,
                  const std::map<std::string, std::vector<float>> &hfNamedWeights, int version);

} // namespace kvwb::core
