// Trains the demo's own sentence embedder: a small BERT-family encoder (mean pooling, normalised)
// with a WordPiece vocabulary built from the demo's questions, trained contrastively (InfoNCE over
// cosine similarities: each anchor against its positive, every other positive in the batch and
// every hard negative) on the paraphrase triples of core/workload/paraphrase_pairs.h, and written
// as a sentence-transformers directory (EncoderCheckpoint reads it like a downloaded model) with
// vocab.txt, tokenizer_config.json and train_log.json.
//
// The log holds the held-out evaluation: the same labelled pairs (validation-only wordings and
// held-out concepts) scored by the trained embedder, the lexical embedder and its IDF variant
// (fitted on the pairs' texts, as the semantic tier fits it on the texts it embeds).
//
// Threading: runs on the calling thread and sets torch's thread count there; the progress callback
// returns false to stop (nothing is written then).
#pragma once

#include "core/settings/embedder_train_settings.h"
#include "core/workload/paraphrase_pairs.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kvwb::gpu {

// What `kvwb train-embedder` takes (core/settings/embedder_train_settings.h).
using EmbedderTrainOptions = core::EmbedderTrainSettings;

struct EmbedderEvaluation
{
    std::string embedder; // "trained", "lexical", "lexical-idf"
    core::PairSeparation separation;
};

struct EmbedderTrainResult
{
    bool cancelled = false;
    double seconds = 0;
    int64_t parameters = 0;
    int vocabSize = 0;
    std::vector<std::pair<int, double>> losses; // (step, mean loss over the steps since the last)
    std::vector<EmbedderEvaluation> evaluation;
};

// fraction in [0, 1]; false cancels.
using EmbedderProgressFn = std::function<bool(int step, int steps, double loss)>;

EmbedderTrainResult trainEmbedder(const EmbedderTrainOptions &options,
                                  const EmbedderProgressFn &progress = {});

} // namespace kvwb::gpu
