// The BERT encoder's forward as plain torch ops, shared by inference (encoder.cpp) and by the demo
// embedder's contrastive training (gpu/src/train/embedder_trainer.cpp), which needs its gradients.
#pragma once

#include "core/model/encoder_config.h"
#include "core/tokenize/tokenizer.h"

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace kvwb::gpu::detail {

struct EncoderLayerWeights
{
    torch::Tensor qW, qB, kW, kB, vW, vB, oW, oB, ln1W, ln1B, upW, upB, downW, downB, ln2W, ln2B;
};

struct EncoderWeights
{
    torch::Tensor word, position, type, lnW, lnB;
    std::vector<EncoderLayerWeights> layers;

    // Every tensor under its Hugging Face name (EncoderCheckpoint::requiredTensors order).
    std::vector<std::pair<std::string, torch::Tensor *>> named();
};

// ids [B, T] int64, mask [B, T] bool (true: a real token), types [B, T] int64 token types (undefined:
// all 0). Returns the last layer's states [B, T, H].
torch::Tensor encoderHidden(const EncoderWeights &w, const core::EncoderConfig &c, const torch::Tensor &ids,
                            const torch::Tensor &mask, const torch::Tensor &types = {});

// A sequence-pair classifier's head (BertForSequenceClassification): the pooler (dense + tanh over
// [CLS]) and the classifier [labels, H].
struct CrossEncoderHead
{
    torch::Tensor poolW, poolB, clsW, clsB;
    // Under their Hugging Face names (pooler.dense.*, classifier.*).
    std::vector<std::pair<std::string, torch::Tensor *>> named();
};
// [B, labels] logits of the pairs.
torch::Tensor crossEncoderLogits(const EncoderWeights &w, const CrossEncoderHead &head,
                                 const core::EncoderConfig &c, const torch::Tensor &ids,
                                 const torch::Tensor &mask, const torch::Tensor &types);
// P(label 1 / "the same") from logits: sigmoid of one label, softmax's label 1 of more.
torch::Tensor crossEncoderProbability(const torch::Tensor &logits);

// "[CLS] a [SEP] b [SEP]" as the tokenizer encodes each text (its own [CLS]/[SEP]), types 0 then 1,
// the longer text's tokens cut first until the pair fits `limit`.
struct EncodedPair
{
    std::vector<int> ids, types;
};
EncodedPair encodePair(const core::Tokenizer &tokenizer, const std::string &a, const std::string &b,
                       size_t limit);
// [B, H] pooled over the tokens mask keeps.
torch::Tensor poolHidden(const torch::Tensor &hidden, const torch::Tensor &mask, core::Pooling pooling);

} // namespace kvwb::gpu::detail
