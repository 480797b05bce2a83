// A Llama-family decoder loaded with LibTorch: prefill, single-step decode and sampled generation
// over a KvCache that callers may fill from outside.
//
// Supports HF (rotate-half RoPE) and llama2.c (interleaved RoPE) checkpoints, MHA and GQA, q/k/v bias
// (Qwen2), tied embeddings, llama3 RoPE scaling, f32/bf16 on CPU and f32/bf16/f16 on CUDA.
//
// Threading: a Model is used by one thread at a time (the engine thread). Every entry point sets
// torch's intra-op thread count and an InferenceMode guard on the calling thread, so jobs may run on
// any thread as long as they do not overlap. Progress and token callbacks run on that thread and
// return false to cancel; cancellation is reported in the result, never thrown.
#pragma once

#include "core/model/checkpoint.h"
#include "core/model/memory_estimate.h"
#include "core/model/model_config.h"
#include "gpu/model/device.h"
#include "gpu/model/kv_cache.h"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::gpu {

namespace detail {
struct ModelAccess; // gpu/src/model/model_grad_p.h: B's forward through autograd
}

// The most intra-op threads a job may ask for (each costs a stack and a spinning worker).
inline constexpr int kMaxThreads = 1024;

struct LoadOptions
{
    Device device = Device::Cpu;
    FloatType dtype = FloatType::F32;
    int threads = 0; // intra-op threads; 0 = all cores, at most kMaxThreads
    // Positions the model serves; 0 = the config's (core::ModelConfig::contextLimit), at most
    // max_position_embeddings. LongRoPE (Phi-3 128k) uses its long divisors when this exceeds the
    // original context, as llama.cpp does for a context above it.
    int context = 0;
    // GGUF block-quantised weights (Q4_0 ... Q6_K) on the CPU stay in their blocks and run through
    // the quantised kernels (core/model/quant_kernels.h): a Q4_K_M file holds about a sixth of its
    // f32 size. true: dequantise them at load to `dtype`, as every other device does (the reference
    // the kernels are checked against).
    bool dequantize = false;
    // The KV cache's element type; unset = the compute dtype. bf16 halves an f32 model's cache
    // (keys and values are rounded once as they are written; attention widens them back to f32).
    std::optional<FloatType> kvDtype;
    // Prompt tokens per step through the layers in a long prefill (llama.cpp's ubatch); 0 =
    // core::kPrefillChunk. A prompt's activations, mask and attention scores are bounded by one
    // chunk, so a 32k-token prompt needs no [32k, 32k] matrix.
    int prefillChunk = 0;
};

// fraction in [0, 1]; return false to cancel.
using ProgressFn = std::function<bool(double fraction, const std::string &stage)>;

struct SamplingOptions
{
    double temperature = 0.0; // 0 = greedy (argmax), deterministic
    int topK = 0;             // 0 = off
    double topP = 1.0;        // 1 = off
    uint64_t seed = 0;
};

struct GenerateOptions
{
    int maxTokens = 64;
    SamplingOptions sampling;
    std::vector<int> stopTokens; // generation stops after emitting one of these
    bool stopAtEos = true;       // also stop at the config's eos ids
};

struct GenerateStats
{
    int promptTokens = 0;
    int reusedTokens = 0;  // prompt tokens taken from the supplied cache, not recomputed
    int prefillTokens = 0; // prompt tokens computed
    int generatedTokens = 0;
    double ttftMs = 0; // start of the call to the first sampled token
    double prefillMs = 0;
    double decodeMs = 0; // all steps after the first token
    double prefillTokPerS = 0;
    double decodeTokPerS = 0;
};

enum class StopReason
{
    MaxTokens,
    StopToken,
    ContextFull,
    Cancelled
};
const char *stopReasonName(StopReason r) noexcept;

struct GenerateResult
{
    std::vector<int> outputIds;  // generated ids (excluding the prompt)
    std::vector<float> logprobs; // log p of each generated id under the unmodified distribution
    StopReason stopReason = StopReason::MaxTokens;
    GenerateStats stats;
};

// Called for every generated token; return false to stop (reported as Cancelled).
using TokenFn = std::function<bool(int id, float logprob)>;

class Model
{
public:
    // Loads weights onto the device. Returns nullptr when progress returned false (cancelled).
    // Error(Device) for an unusable device/dtype; checkpoint errors propagate unchanged.
    static std::unique_ptr<Model> load(const core::Checkpoint &checkpoint, const LoadOptions &options,
                                       const ProgressFn &progress = {});
    static std::unique_ptr<Model> load(const std::filesystem::path &path, const LoadOptions &options,
                                       const ProgressFn &progress = {});
    ~Model();

    const core::ModelConfig &config() const;
    const core::Checkpoint &checkpoint() const;
    const LoadOptions &options() const;
    // The KV cache's element type (options().kvDtype, else the compute dtype).
    FloatType kvDtype() const;
    int64_t deviceBytes() const; // bytes of weights on the device
    int contextLimit() const;    // positions served (LoadOptions::context or the config's limit)

    KvCache newCache() const;

    // Runs ids at positions cache.tokens().. and appends their K/V to the cache.
    // Returns logits, float32 row-major: [ids.size(), vocab] if allLogits else [1, vocab] (last).
    std::vector<float> forward(const std::vector<int> &ids, KvCache &cache, bool allLogits = false) const;

    // forward() that also returns every layer's queries after RoPE, as attention used them:
    // [numLayers] of [numHeads, ids.size(), headDim] float32 (alignment metrics score B's attention
    // output with converted K/V against its own using these).
    std::vector<std::vector<float>> queries(const std::vector<int> &ids, KvCache &cache) const;
    // Both at once, from one pass: forward()'s logits, and each layer's queries into *queries as
    // queries() returns them (the quality gate's attention-output cosine reads the queries of the
    // positions whose logits it also needs).
    std::vector<float> forward(const std::vector<int> &ids, KvCache &cache, bool allLogits,
                               std::vector<std::vector<float>> *queries) const;

    // Layer 0's K (pre-RoPE, after the key norm where the model has one) and V of each of ids, as
    // forward() would write them: [numKvHeads, ids.size(), headDim] float32 each. They depend on the
    // token alone (its embedding, normed and projected), so no attention and no cache: what token-
    // feature converters (core::TokenFeatures::targetTokens) read beside A's rows.
    HeadMajorKv tokenLocalKv(const std::vector<int> &ids) const;

    // Mean over tokens of the residual stream after `layer` blocks (0 = embeddings, numLayers = the
    // last block's output before the final norm): [hiddenSize] float32. For embedding texts.
    std::vector<float> meanHiddenState(const std::vector<int> &ids, int layer) const;
    // The last token's hidden state after the final norm: [hiddenSize] float32 (decoder embedders
    // pooled at the last token, Qwen3-Embedding).
    std::vector<float> lastHiddenState(const std::vector<int> &ids) const;

    // Generates after prompt. The cache may already hold a prefix of the prompt (same ids): that
    // prefix is reused, not recomputed; anything in the cache past the common prefix is dropped.
    // At least the last prompt token is always computed (its logits pick the first new token).
    // On return the cache holds prompt + generated tokens (minus the last sampled one).
    GenerateResult generate(const std::vector<int> &prompt, KvCache &cache, const GenerateOptions &options,
                            const TokenFn &onToken = {}, const std::atomic_bool *cancel = nullptr) const;

    // Convenience: fresh cache.
    GenerateResult generate(const std::vector<int> &prompt, const GenerateOptions &options,
                            const TokenFn &onToken = {}, const std::atomic_bool *cancel = nullptr) const;

private:
    friend struct detail::ModelAccess;
    Model();
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

// Picks the next token from logits [vocab] (float32). Exposed for tests.
int sampleToken(const float *logits, int vocab, const SamplingOptions &options, uint64_t step,
                float *logprob);

} // namespace kvwb::gpu
