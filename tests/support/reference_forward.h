// A naive reference forward pass for the tests: plain loops in double precision, llama2.c run.c
// style, one token at a time with its own KV cache. Slow and obviously correct; the engine is checked
// against it. Handles both RoPE layouts, GQA, q/k/v(/o) bias, tied embeddings, scaled RoPE, Qwen3's
// q/k norms, Phi-3's fused projections and Gemma 2/3 ((1 + w) norms, embedding scale, GeGLU, the
// four norms per layer, soft-capping, sliding-window layers, per-layer RoPE) and Phi-3's LongRoPE.
#pragma once

#include "core/model/checkpoint.h"

#include <vector>

namespace kvwb::test {

// Logits for every position: [ids.size()][vocab]. preRopeKeys, when given, receives every layer's
// keys before RoPE: [layers][ids.size()][kvHeads * headDim]. longRopeFactors: a LongRoPE model
// rotates with its long divisors (else the short ones), as HF does past the original context.
std::vector<std::vector<double>>
referenceForward(const core::Checkpoint &checkpoint, const std::vector<int> &ids,
                 std::vector<std::vector<std::vector<double>>> *preRopeKeys = nullptr,
                 bool longRopeFactors = false);

// max_i |a_i - b_i| / max(1e-6, max_i |b_i|): error relative to the scale of the reference.
double maxRelativeError(const std::vector<float> &a, const std::vector<double> &b);
double maxRelativeError(const std::vector<float> &a, const std::vector<float> &b);

} // namespace kvwb::test
