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
// With options.pairs, it learns from a labelled pairs file instead (core/workload/labelled_pairs.h:
// the user's logs or a public paraphrase set): a new encoder with a WordPiece vocabulary built from
// the training texts, or the encoder at options.init fine-tuned (its vocabulary and sizes). The
// pairs are split by shared text into training and validation; each step's loss is InfoNCE of each
// duplicate's first text against its second, every other second text, and the texts of the
// batch's labelled non-duplicates, plus a squared hinge that pushes each labelled non-duplicate's
// cosine below the margin. Every evalEvery steps the validation AUC is measured; the best weights
// are kept, training stops after `patience` passes without a better AUC, and the state (weights,
// best weights, optimizer, counters) is saved under <out>.train_state so that `resume` continues
// an interrupted run exactly (batch s is a pure function of seed and s). The log holds the
// validation AUC, average precision, the threshold for precision 0.9 and the precision/recall
// curve, beside the lexical embedders' on the same pairs.
//
// Threading: runs on the calling thread and sets torch's thread count there; the progress callback
// returns false to stop (nothing is written to out then; a --pairs run keeps its state to resume).
#pragma once

#include "core/settings/embedder_train_settings.h"
#include "core/workload/labelled_pairs.h"
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
    double averagePrecision = 0;
    std::vector<core::PrPoint> curve; // precision/recall over thresholds, highest first
};

struct EmbedderTrainResult
{
    bool cancelled = false;
    double seconds = 0;
    int64_t parameters = 0;
    int vocabSize = 0;
    std::vector<std::pair<int, double>> losses; // (step, mean loss over the steps since the last)
    std::vector<EmbedderEvaluation> evaluation;
    // --pairs only
    int stepsDone = 0;
    int bestStep = 0;          // the step whose weights were written
    bool stoppedEarly = false; // patience ran out before the last step
    bool resumedFrom = false;  // continued from a saved state
    size_t trainPairs = 0, validationPairs = 0;
    std::vector<std::pair<int, double>> validationAuc; // (step, AUC) per validation pass
    std::vector<std::string> warnings;                 // the pairs file's skipped lines (first ones)
    size_t warningCount = 0;
};

// Called after every step; valAuc is the validation AUC on a validation step, NaN otherwise. False
// cancels.
using EmbedderProgressFn = std::function<bool(int step, int steps, double loss, double valAuc)>;

EmbedderTrainResult trainEmbedder(const EmbedderTrainOptions &options,
                                  const EmbedderProgressFn &progress = {});

// `kvwb train-verifier`: the same training on a labelled pairs file (options.pairs required), for a
// cross-encoder (gpu/model/cross_encoder.h): a new encoder or options.init's (an embedder's
// encoder, or a cross-encoder with its head), a pooler and a one-label classifier, trained with
// binary cross-entropy on batches of half duplicates and half not; validation, early stopping,
// state and resume as above, the evaluation scored by the written model reloaded. The log's
// at_precision_0_9 threshold is the one the replay's verifier uses by default. (temperature and
// margin do not apply.)
EmbedderTrainResult trainVerifier(const EmbedderTrainOptions &options,
                                  const EmbedderProgressFn &progress = {});

} // namespace kvwb::gpu
