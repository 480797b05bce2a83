// A cross-encoder: a BERT-family sequence-pair classifier that reads two questions together and
// says whether they ask the same - the semantic tier's verifier (core/cache/semantic_verifier.h).
//
// Loaded from a Hugging Face directory of BertForSequenceClassification (sentence-transformers'
// CrossEncoder saves the same layout): config.json (architectures *ForSequenceClassification,
// num_labels or id2label), model.safetensors (the encoder with or without the "bert." prefix, then
// bert.pooler.dense.* and classifier.*), and a tokenizer (tokenizer.json or vocab.txt). The pair is
// "[CLS] a [SEP] b [SEP]" with token types 0 then 1, truncated longest-first to the model's limit;
// the pooler (dense + tanh over [CLS]) feeds the classifier. One label: the score is its sigmoid;
// two or more: the softmax probability of label 1 (HF's "duplicate"/"entailment" convention for
// binary pair classifiers). `kvwb train-verifier` writes such a directory (gpu/train/embedder_trainer.h).
//
// Threading: like Encoder, one thread at a time; each call sets its thread count there.
#pragma once

#include "core/cache/semantic_verifier.h"
#include "gpu/model/model.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace kvwb::gpu {

class CrossEncoder : public core::PairVerifier
{
public:
    // Error(Config) naming the file and field when the directory is not a sequence-pair classifier;
    // Error(Shape) naming a missing or misshapen tensor; Error(Config) when no tokenizer is beside it.
    CrossEncoder(const std::filesystem::path &path, const LoadOptions &options);
    ~CrossEncoder() override;
    // P(the two texts ask the same), in [0, 1].
    double score(const std::string &cached, const std::string &request) override;
    std::string name() const override; // "cross-<directory name>"
    int labels() const;
    // The threshold `kvwb train-verifier` measured for validation precision 0.9 (its train_log.json),
    // when the directory has one.
    std::optional<double> recordedThreshold() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

// True when path is a directory (or its config.json) whose architectures name a
// *ForSequenceClassification model of the BERT family. Never throws.
bool isCrossEncoderModel(const std::filesystem::path &path);

} // namespace kvwb::gpu
