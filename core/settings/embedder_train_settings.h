// The settings of `kvwb train-embedder` (a sentence embedder: a small BERT-family encoder trained
// contrastively on WordNet question paraphrases, or on a labelled pairs file - the user's own logs
// or a public paraphrase set - from scratch or fine-tuning an encoder), as one plain type and its one table
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
    // Labelled pairs (core/workload/labelled_pairs.h): when set, the embedder learns from them
    // instead of WordNet (concepts, hold-out-every, wordnet-dir and eval-pairs do not apply).
    std::filesystem::path pairs;
    std::filesystem::path init;   // fine-tune this BERT-family encoder (its vocabulary and sizes)
    double validationShare = 0.1; // of the pairs, grouped by shared text, never trained on
    int evalEvery = 100;          // steps between validation passes (pairs only)
    int patience = 5;             // validation passes without a better AUC before stopping (0: never)
    double margin = 0.5;          // cosine a labelled non-duplicate is pushed below
    bool resume = false;          // continue from <out>.train_state when present
    int threads = 0;              // intra-op threads (0: all cores); the engine's, not in the table
    bool force = false;           // replace a non-empty out
};

bool operator==(const EmbedderTrainSettings &x, const EmbedderTrainSettings &y);

using EmbedderTrainFlag = SettingRow<EmbedderTrainSettings>;

// Every setting in the order `kvwb train-embedder --help` lists them (--threads, the engine's, after
// --seed is the command line's own).
const std::vector<EmbedderTrainFlag> &embedderTrainFlags();
const EmbedderTrainFlag *findEmbedderTrainFlag(const std::string &name);

} // namespace kvwb::core
