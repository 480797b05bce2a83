// Architecture description of a Llama-family decoder, parsed from a Hugging Face config.json or
// derived from a llama2.c checkpoint header.
//
// Supported model_type values: llama (Llama 2/3, SmolLM), mistral, qwen2, qwen3, phi3, gemma2 and
// gemma3_text (Gemma 3's text model). RoPE scaling is read from both the `rope_scaling` object and
// the newer `rope_parameters` layout (types default, linear, llama3; Gemma 3's per-layer-type
// layout too). Value type; thread-safe to copy and read.
#pragma once

#include "core/util/enum_names.h"

#include <fmt/core.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

// How RoPE pairs the dimensions of one head: HF rotates the two halves (i, i + d/2); Meta and
// llama2.c checkpoints rotate interleaved pairs (2i, 2i + 1).
enum class RopeLayout
{
    RotateHalf,
    Interleaved
};
// The one spelling of a layout in files, JSON, reports and the window: "rotate_half" | "interleaved".
inline constexpr EnumName<RopeLayout> kRopeLayoutNames[] = {{RopeLayout::RotateHalf, "rotate_half"},
                                                            {RopeLayout::Interleaved, "interleaved"}};
KVWB_ENUM_NAMES(RopeLayout, kRopeLayoutNames, ropeLayoutName, parseRopeLayout)

// What one layer's attention sees: the whole prefix, or the last `slidingWindow` positions (Gemma).
enum class LayerAttention
{
    Full,
    Sliding
};

// The gate activation of the gated MLP: SiLU (SwiGLU, Llama) or GELU with the tanh approximation
// (GeGLU, Gemma's gelu_pytorch_tanh).
enum class MlpActivation
{
    Silu,
    GeluTanh
};

struct RopeScaling
{
    std::string type = "default"; // default | linear | llama3 | longrope (Phi-3's, alias "su")
    double factor = 1.0;
    double lowFreqFactor = 1.0;               // llama3 only
    double highFreqFactor = 4.0;              // llama3 only
    int originalMaxPositionEmbeddings = 8192; // llama3 and longrope
    // longrope: per-frequency divisors [headDim/2] for contexts up to / beyond the original one,
    // and the factor cos and sin are multiplied by (HF's attention_scaling; given, or
    // sqrt(1 + ln(max / original) / ln(original)) as transformers computes it).
    std::vector<double> shortFactor;
    std::vector<double> longFactor;
    double attentionFactor = 1.0;
    // longrope: which divisors a loaded model uses, fixed for its whole life as llama.cpp fixes
    // them by its context size (a cache computed with one set is never mixed with the other).
    // Chosen by the engine's context (gpu::LoadOptions::context); not part of config.json.
    bool useLongFactor = false;
    bool operator==(const RopeScaling &) const = default;
};

// What kvwb accepts from a config (ModelConfig::validate), well above every released model
// (Llama 3.1 405B: 126 layers, 128 heads, hidden 16384, vocab 128256): a config beyond them is
// refused before anything is sized from it.
inline constexpr int kMaxLayers = 1024;
inline constexpr int kMaxHeads = 1024;
inline constexpr int kMaxHeadDim = 4096;
inline constexpr int kMaxHidden = 1 << 18;       // 262,144
inline constexpr int kMaxIntermediate = 1 << 20; // 1,048,576
inline constexpr int kMaxVocab = 1 << 24;        // 16,777,216
inline constexpr int kMaxPositions = 1 << 24;    // 16,777,216 tokens

struct ModelConfig
{
    std::string architecture; // e.g. LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Llama2c
    std::string modelType;    // llama | mistral | qwen2 | qwen3 | phi3 | gemma2 | gemma3_text | llama2c
    int hiddenSize = 0;
    int intermediateSize = 0;
    int numLayers = 0;
    int numHeads = 0;
    int numKvHeads = 0;
    int headDim = 0; // defaults to hiddenSize / numHeads when config.json has no head_dim
    int vocabSize = 0;
    int maxPositionEmbeddings = 0;
    double rmsNormEps = 1e-5;
    double ropeTheta = 10000.0;
    RopeScaling ropeScaling;
    RopeLayout ropeLayout = RopeLayout::RotateHalf;
    bool tieWordEmbeddings = false;
    bool qkvBias = false; // q/k/v projections carry a bias (Qwen2 always; Llama attention_bias)
    bool oBias = false;   // o_proj carries a bias (Llama attention_bias only)
    bool mlpBias = false;
    // Per-head RMSNorm of queries and keys over head_dim (self_attn.q_norm / k_norm, [head_dim]),
    // after the projections and before RoPE (Qwen3).
    bool qkNorm = false;
    // Phi-3 stores q/k/v as one self_attn.qkv_proj ([q + 2 kv, hidden]) and gate/up as one
    // mlp.gate_up_proj ([2 intermediate, hidden]); Checkpoint shows them split under the Llama names.
    bool fusedProjections = false;
    // Gemma 2/3: every RMSNorm (layers, final, q/k) scales by (1 + weight), multiplied in f32 before
    // the cast back (Gemma2RMSNorm); Llama's scales by weight after the cast.
    bool unitOffsetNorm = false;
    // Gemma: the embeddings are multiplied by sqrt(hidden_size), rounded to the compute dtype first
    // (HF's normalizer: sqrt(2304) = 48 exactly, sqrt(1152) = 33.94 becomes 34 in bf16).
    bool scaleEmbeddings = false;
    // Gemma: post_attention_layernorm ([hidden]) normalises the attention output before the residual
    // add, and pre_feedforward_layernorm / post_feedforward_layernorm ([hidden] each) wrap the MLP.
    bool sandwichNorms = false;
    MlpActivation activation = MlpActivation::Silu;
    // Attention scores are scaled by queryPreAttnScalar^-0.5 when given (Gemma), else headDim^-0.5.
    std::optional<double> queryPreAttnScalar;
    // Soft-capping: x -> cap * tanh(x / cap); of the scaled attention scores before the mask
    // (Gemma 2 attn_logit_softcapping), and of the output logits (final_logit_softcapping).
    std::optional<double> attnLogitSoftcap;
    std::optional<double> finalLogitSoftcap;
    // [numLayers] what each layer attends to, or empty: every layer attends to the whole prefix.
    std::vector<LayerAttention> layerAttention;
    // Tokens a sliding layer's query sees, itself included: the query at position i attends to the
    // keys j with i - slidingWindow < j <= i. 0 when no layer slides.
    int slidingWindow = 0;
    // RoPE base of the sliding layers when it differs from rope_theta (Gemma 3's
    // rope_local_base_freq; never scaled); nullopt: every layer uses rope_theta and ropeScaling.
    std::optional<double> ropeLocalTheta;
    std::optional<int> bosTokenId;
    std::vector<int> eosTokenIds;
    std::string torchDtype; // as written in config.json, informational

    // Parse config.json. Error(Io) if unreadable, Error(Format) if not JSON, Error(Config) naming
    // the field for missing/invalid fields, Error(Unsupported) for unknown model_type/architecture.
    static ModelConfig fromHfJsonFile(const std::filesystem::path &configJson);
    static ModelConfig fromHfJsonText(std::string_view text, const std::string &sourceName);
    // Serialise back to an HF config.json that fromHfJsonText reads to an equal config.
    std::string toHfJson() const;

    // Error(Config) naming `source` and the field when dimensions are inconsistent.
    void validate(const std::string &source) const;

    // Positions a loaded model serves: max_position_embeddings, or for LongRoPE with the short
    // divisors the original context they hold for (Phi-3-mini-128k: 4096 of 131072).
    int contextLimit() const;
    // The factor RoPE multiplies cos and sin by (LongRoPE's attention factor; else 1).
    double ropeAttentionFactor() const;

    // Whether layer `layer` (0-based) is a sliding-window layer.
    bool isSlidingLayer(int layer) const;
    // Layer `layer`'s RoPE inverse frequencies after scaling, [headDim / 2]; theta_i = pos * invFreq[i].
    // The same for every layer except in Gemma 3, whose sliding layers use rope_local_base_freq.
    std::vector<double> ropeInvFreq(int layer) const;

    int64_t parameterCount() const;
    // K and V bytes per token over all layers for the given element size.
    int64_t kvBytesPerToken(int bytesPerElement) const;

    bool operator==(const ModelConfig &) const = default;
};

// hiddenSize / numHeads: the head size of a config that gives none. Error(Config) with `message`
// formatted from (source, hiddenSize, numHeads) when numHeads does not divide hiddenSize.
int headDimFromHidden(int hiddenSize, int numHeads, const std::string &source,
                      fmt::format_string<const std::string &, int, int> message);

} // namespace kvwb::core
