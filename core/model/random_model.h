// Random-weight Llama-family models written in every layout the engine reads: Hugging Face
// directories (config.json + model.safetensors + a byte-level tokenizer.json) and llama2.c
// checkpoints. Used by the test suite (every architecture variant) and by `kvwb make-model` for
// smoke tests and benchmarks without downloading anything. Deterministic for a given seed.
// Thread-safety: pure functions.
#pragma once

#include "core/model/model_config.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace kvwb::core {

struct RandomModelSpec
{
    ModelConfig config; // architecture; vocabSize must be >= 258 for the byte tokenizer
    uint64_t seed = 1;
    double weightStd = 0.08; // normal std of matrices; norms are 1 + N(0, 0.1)
    // A real model's geometry (the presets named after one): written tensor by tensor with each
    // tensor's values drawn from its own seed (seed, name), so memory stays at one chunk whatever
    // the size; the small presets keep one stream in a fixed order (the tests' files).
    bool streamed = false;
};

// Named presets: "tiny" (~40k params), "gqa", "qwen2" (qkv bias), "smollm" (tied), "llama3"
// (llama3 rope scaling), "bias" (attention and MLP biases), "qwen3" / "qwen3-b" (q/k norms),
// "phi3" (fused projections), "phi3-longrope" (and Phi-3 128k's LongRoPE), "gemma2", "gemma3" / "gemma3-b"
// (Gemma's norms, GeGLU, soft-caps, sliding-window layers of 8-12 tokens; gemma3-b has another KV geometry,
// for pairs), "10m" (~10M params, for benchmarks), "135m" (SmolLM-135M's geometry, for speed against
// llama.cpp), "demo-a" / "demo-b" (the demo pair's architectures); and the geometries users run,
// exactly as their config.json has them: "qwen3-0.6b", "qwen3-1.7b", "llama3.2-1b", "llama3.2-3b",
// "qwen2.5-3b", "llama3.1-8b" (streamed). Error(InvalidArgument) otherwise.
RandomModelSpec randomModelPreset(const std::string &name);
std::vector<std::string> randomModelPresetNames();

// HF-named float weights, q/k rows in the order config.ropeLayout expects.
std::map<std::string, std::vector<float>> randomWeights(const RandomModelSpec &spec);

// Writes config.json, model.safetensors (F32, or F16/BF16 when dtype says so) and tokenizer.json:
// the byte-level one below, or `tokenizerJson` (e.g. the real model's tokenizer.json; the caller
// checks that it fits the vocabulary and sets spec.config's BOS and EOS ids to its own).
void writeRandomHfModel(const std::filesystem::path &dir, const RandomModelSpec &spec,
                        const std::string &dtype = "F32", const std::string &tokenizerJson = {});

// Byte-level BPE tokenizer.json with the 256 byte symbols (ids 0..255), <|begin_of_text|> = 256,
// <|end_of_text|> = 257, no merges. Its TemplateProcessing adds BOS.
std::string byteLevelTokenizerJson();

} // namespace kvwb::core
