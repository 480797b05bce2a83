// A naive reference forward of a BERT-family encoder for the tests: plain loops in double precision
// over one sequence, written from the architecture's definition (post-LayerNorm blocks, absolute
// positions, token type 0, bidirectional attention, erf GELU), and sentence-transformers pooling.
// The engine's encoder (gpu/model/encoder.h) is checked against it.
#pragma once

#include "core/model/encoder_config.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvwb::test {

// The last layer's states [ids.size()][hidden].
std::vector<std::vector<double>> referenceEncoder(const core::EncoderCheckpoint &checkpoint,
                                                  const std::vector<int> &ids);
// Pooled as the config says, then L2-normalised.
std::vector<double> referenceSentenceEmbedding(const core::EncoderCheckpoint &checkpoint,
                                               const std::vector<int> &ids);
// Random weights (normal, std 0.2; LayerNorm weights near 1) for every tensor the encoder needs.
std::map<std::string, std::vector<float>> randomEncoderWeights(const core::EncoderConfig &config,
                                                               uint64_t seed);

} // namespace kvwb::test
