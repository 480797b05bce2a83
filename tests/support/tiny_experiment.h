// Test helper: a tiny model description and an empty experiment file holding a pair of them, for
// the stores that only need a valid experiment file (converters, ledgers, comparisons, reports).
#pragma once

#include "core/store/experiment_file.h"

#include <QTemporaryDir>

#include <filesystem>

namespace kvwb::test {

// A Llama-style model: numLayers layers, 2 heads / 1 kv head of size 4, hidden 8, vocab 100;
// fingerprints are 64 times the role letter, the source path /models/<role>.
core::ModelInfo tinyModelInfo(char role, int numLayers = 1);

// dir/exp.h5 created (no prompts) for tinyModelInfo('a') and ('b'); its path.
std::filesystem::path makeTinyExperiment(const QTemporaryDir &dir, int numLayers = 1);

} // namespace kvwb::test
