// The settings of `kvwb train-embedder` (the demo's sentence embedder: a small BERT-family encoder
// trained contrastively on WordNet question paraphrases), as one plain type and its one table
// (core/settings/setting_table.h): the command line's options; gpu/train/embedder_trainer.h trains
// with this same type.
//
// Plain values and pure functions; thread-safe.
#pragma once

#include "core/settings/setting_table.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kvwb::core {

struct EmbedderTrainSettings
{
    std::filesystem::path out; // the sentence-transformers directory written
    std::filesystem::path wordnetDir = "/usr/share/wordnet";
    size_t concepts = 1000;
    int holdOutEvery = 10; // every 10th concept by rank never trained on (0: none)
    int vocabSize = 4000;
    int hidden = 128;
    int layers = 2;
    int heads = 4;
    int intermediate = 256;
    int maxPositions = 64;
    int steps = 1500;
    int batch = 64; // triples per step
    double lr = 1e-3;
    int warmup = 100;
    double temperature = 0.05;
    size_t evalPairs = 4000;
    uint64_t seed = 1;
    int threads = 0;    // intra-op threads (0: all cores); the engine's, not in the table
    bool force = false; // replace a non-empty out
};

bool operator==(const EmbedderTrainSettings &x, const EmbedderTrainSettings &y);

using EmbedderTrainFlag = SettingRow<EmbedderTrainSettings>;

// Every setting in the order `kvwb train-embedder --help` lists them (--threads, the engine's, after
// --seed is the command line's own).
const std::vector<EmbedderTrainFlag> &embedderTrainFlags();
const EmbedderTrainFlag *findEmbedderTrainFlag(const std::string &name);

} // namespace kvwb::core
