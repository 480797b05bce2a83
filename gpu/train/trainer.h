// Trains a Llama-architecture model from token sequences with LibTorch autograd and writes a
// Hugging Face directory (config.json, model.safetensors, tokenizer) that Model::load reads like
// any downloaded checkpoint.
//
// AdamW (decoupled weight decay on matrices only), linear warmup then cosine decay to minLr, global
// gradient-norm clipping, a fixed seed for initialisation and for every batch (batch b of step s is
// a pure function of seed and s, so a resumed run draws exactly the batches an uninterrupted run
// would), periodic validation loss, and checkpoint/resume through <out>/train_state/.
//
// Threading: runs on the calling thread (the engine thread in the GUI); sets torch's thread count
// there. The progress callback runs on that thread and returns false to stop: the state is saved so
// a later call with resume = true continues; cancellation is reported in the result, not thrown.
#pragma once

#include "core/model/model_config.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::gpu {

struct TrainOptions
{
    core::ModelConfig model; // architecture (RotateHalf RoPE); vocabSize >= tokenizer size
    int seqLen = 128;        // tokens per training row
    int batchSize = 16;      // rows per step
    int steps = 1000;
    double lr = 3e-3;
    double minLr = 3e-4;
    int warmupSteps = 50;
    double weightDecay = 0.1;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double gradClip = 1.0;
    uint64_t seed = 1;
    int evalEvery = 100;             // steps between validation losses (and at the end)
    int evalRows = 64;               // validation rows per evaluation (fixed across evaluations)
    int checkpointEvery = 200;       // steps between train_state saves (0 = only at the end / on cancel)
    int threads = 0;                 // intra-op threads; 0 = all cores
    std::string weightDtype = "F32"; // F32 | BF16 | F16 storage in model.safetensors
    bool resume = false;             // continue from <out>/train_state if present
    std::string shard;               // "I/N" when the data is a corpus shard (logged; resume checks it)
    // Fine-tuning: start from this model's weights (an HF directory of the same architecture)
    // instead of random ones. Every parameter must be there with the trained shape.
    std::filesystem::path initFrom;
};

// Each sequence is one document (e.g. one question/answer), already with BOS/EOS as wanted. Rows
// start at a document boundary and run on into the following documents.
struct TrainData
{
    std::vector<std::vector<int>> train;
    std::vector<std::vector<int>> validation;
};

struct TrainProgress
{
    int step = 0; // steps completed
    int steps = 0;
    double loss = 0; // training loss of this step (nats/token)
    double lr = 0;
    double gradNorm = 0;           // before clipping
    std::optional<double> valLoss; // set on evaluation steps
    double tokensPerSecond = 0;    // training tokens per second so far (this run)
};

struct TrainResult
{
    int stepsDone = 0;
    bool cancelled = false;
    double finalLoss = 0;    // mean training loss over the last evalEvery steps
    double finalValLoss = 0; // nats/token on the validation rows; perplexity = exp(finalValLoss)
    double seconds = 0;
    std::vector<TrainProgress> evaluations; // one entry per validation pass
};

using TrainProgressFn = std::function<bool(const TrainProgress &)>;

// Trains and writes outDir/{config.json, model.safetensors, train_log.json}; copies tokenizerFile
// (tokenizer.model / tokenizer.json) into outDir when given. Error(InvalidArgument) for empty data
// or token ids outside the vocabulary (naming the document index).
TrainResult trainModel(const TrainOptions &options, const TrainData &data,
                       const std::filesystem::path &outDir,
                       const std::optional<std::filesystem::path> &tokenizerFile = std::nullopt,
                       const TrainProgressFn &progress = {});

// Mean next-token loss (nats/token) of a saved model on the validation rows that trainModel would
// build from `data` with `options` (same seqLen/evalRows/seed). Used to check that a reloaded model
// scores exactly what training reported.
double validationLoss(const std::filesystem::path &modelDir, const TrainOptions &options,
                      const TrainData &data);

} // namespace kvwb::gpu
