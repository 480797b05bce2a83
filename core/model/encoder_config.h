// Sentence encoders of the BERT family (all-MiniLM, bge, gte v1, e5, and the demo's own embedder):
// their configuration, how they pool and normalise, and their weights.
//
// Opened from a Hugging Face / sentence-transformers directory (config.json with model_type bert,
// model.safetensors, modules.json, 1_Pooling/config.json, sentence_bert_config.json, a tokenizer:
// tokenizer.json or vocab.txt) or from a GGUF file of llama.cpp's "bert" architecture (its tensors
// are exposed under the Hugging Face names, so one forward serves both).
//
// Pooling follows sentence-transformers: the Pooling module's mode (mean, cls, max, lasttoken);
// without modules.json, mean pooling over the attention mask (the sentence-transformers fallback).
// A Normalize module sets normalize; kvwb's semantic index compares unit vectors, so the embedder
// normalises either way and reports what the model asked for.
//
// Thread-safety: immutable after open; weights are read-only mappings kept alive by this object.
#pragma once

#include "core/model/safetensors.h"
#include "core/util/enum_names.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

enum class Pooling
{
    Mean, // over the tokens the attention mask keeps ([CLS] and [SEP] included, as sentence-transformers)
    Cls,  // the first token's state
    Max,  // element-wise max over the kept tokens
    Last  // the last kept token's state (decoder embedders: Qwen3-Embedding)
};
// "mean" | "cls" | "max" | "last"
inline constexpr EnumName<Pooling> kPoolingNames[] = {
    {Pooling::Mean, "mean"}, {Pooling::Cls, "cls"}, {Pooling::Max, "max"}, {Pooling::Last, "last"}};
KVWB_ENUM_NAMES(Pooling, kPoolingNames, poolingName, parsePooling)

// BERT's feed-forward activation: hidden_act "gelu" (erf), "gelu_new" / "gelu_pytorch_tanh" (tanh
// approximation), "relu".
enum class EncoderActivation
{
    Gelu,
    GeluTanh,
    Relu
};
const char *encoderActivationName(EncoderActivation a) noexcept;

struct EncoderConfig
{
    std::string modelType = "bert";
    int vocabSize = 0;
    int hiddenSize = 0;
    int numLayers = 0;
    int numHeads = 0;
    int intermediateSize = 0;
    int maxPositions = 512; // max_position_embeddings
    int typeVocabSize = 2;  // token type (segment) embeddings; every token of a sentence has type 0
    double layerNormEps = 1e-12;
    EncoderActivation activation = EncoderActivation::Gelu;
    Pooling pooling = Pooling::Mean;
    bool normalize = false; // the model ends in a Normalize module
    int maxSeqLength = 0;   // sentence_bert_config.json's max_seq_length; 0 = maxPositions
    // Where the settings came from, for display: "modules.json", "gguf", "default (no modules.json)".
    std::string poolingSource;

    int headDim() const { return numHeads > 0 ? hiddenSize / numHeads : 0; }
    int sequenceLimit() const
    {
        return maxSeqLength > 0 ? std::min(maxSeqLength, maxPositions) : maxPositions;
    }
    int64_t parameterCount() const;
    // Error(Config) naming source and the field at fault: sizes outside kvwb's limits (those of
    // core/model/model_config.h), heads that do not divide the hidden size.
    void validate(const std::string &source) const;
    // config.json text (model_type bert, BertModel).
    std::string toHfJson() const;
};

// The embedders that are names, not model paths: "lexical", "lexical-idf" and "model" (model A's
// hidden states). Any other embedder spec is the path of an embedding model (gpu/model/encoder.h).
bool isBuiltinEmbedder(const std::string &spec);

// True when path is an encoder kvwb can open: a directory or config.json whose model_type is bert
// (or a BERT architecture), or a GGUF file whose general.architecture is bert. Never throws for a
// readable path that is something else (a decoder): it says false.
bool isEncoderModel(const std::filesystem::path &path);

class EncoderCheckpoint
{
public:
    // path: the model directory, its config.json, or a .gguf file. Error(Config) / Error(Format) /
    // Error(Shape) naming the file and field or tensor at fault; every tensor the forward needs is
    // checked for presence and shape here.
    static EncoderCheckpoint open(const std::filesystem::path &path);

    const EncoderConfig &config() const;
    const std::filesystem::path &path() const;
    bool isGguf() const;
    // A tensor under its Hugging Face name without the "bert." prefix
    // ("embeddings.word_embeddings.weight", "encoder.layer.0.attention.self.query.weight", ...).
    // Error(Shape) naming tensor and file when missing or of another shape (empty shape: any).
    TensorRef require(const std::string &name, const std::vector<int64_t> &shape) const;
    bool contains(const std::string &name) const;
    // tokenizer.json, else the directory when it holds vocab.txt; the GGUF file itself.
    std::optional<std::filesystem::path> tokenizerPath() const;
    // sha256 over the weight files, computed on first call.
    std::string fingerprint() const;
    // Every tensor the forward reads, with its shape, in load order.
    static std::vector<std::pair<std::string, std::vector<int64_t>>> requiredTensors(const EncoderConfig &c);

private:
    struct Impl;
    std::shared_ptr<Impl> m_impl;
};

// A sequence-pair classifier's directory (BertForSequenceClassification): config.json's labels
// (num_labels, else the size of id2label, else HF's default 2) and the threshold `kvwb
// train-verifier` recorded for validation precision 0.9 (train_log.json), if any. Error(Config)
// naming config.json when its architectures name no *ForSequenceClassification.
struct CrossEncoderInfo
{
    int labels = 1;
    std::optional<double> recordedThreshold;
};
CrossEncoderInfo crossEncoderInfo(const std::filesystem::path &path);
// The head's tensors after the encoder's: pooler.dense.{weight,bias} [H, H] / [H], classifier.
// {weight,bias} [labels, H] / [labels].
std::vector<std::pair<std::string, std::vector<int64_t>>> crossEncoderHeadTensors(const EncoderConfig &c,
                                                                                  int labels);
// Writes a BertForSequenceClassification directory (one label: a score through a sigmoid): config.json,
// model.safetensors with the encoder and pooler under "bert." and the classifier, F32. weights holds
// the encoder's tensors (EncoderCheckpoint::requiredTensors) and the head's (crossEncoderHeadTensors)
// under their names without "bert.". The tokenizer is the caller's to write.
void writeCrossEncoderHf(const std::filesystem::path &dir, const EncoderConfig &cfg, int labels,
                         const std::map<std::string, std::vector<float>> &weights);

// Writes a sentence-transformers directory: config.json, model.safetensors (F32), modules.json,
// 1_Pooling/config.json, 2_Normalize/ when cfg.normalize, sentence_bert_config.json. weights holds
// every tensor of EncoderCheckpoint::requiredTensors(cfg) under those names (Error(InvalidArgument)
// names one that is missing or of another size). The tokenizer is the caller's to write.
void writeEncoderHf(const std::filesystem::path &dir, const EncoderConfig &cfg,
                    const std::map<std::string, std::vector<float>> &weights);

} // namespace kvwb::core
