// Sentence embedders on LibTorch: BERT-family encoders (core/model/encoder_config.h: absolute
// positions, post-LayerNorm blocks, bidirectional attention over the unpadded tokens, pooled as the
// model's sentence-transformers files say) and decoder embedders pooled at the last token
// (Qwen3-Embedding: the final-normed hidden state of the last token, EOS appended).
//
// Threading: like gpu::Model, one thread at a time; each call sets its thread count and an
// inference-mode guard on the calling thread.
#pragma once

#include "core/cache/semantic_tier.h"
#include "core/model/encoder_config.h"
#include "gpu/model/model.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kvwb::core {
class Tokenizer;
}

namespace kvwb::gpu {

class Encoder
{
public:
    // Error(Device) for an unusable device/dtype; checkpoint errors propagate unchanged.
    static std::unique_ptr<Encoder> load(const core::EncoderCheckpoint &checkpoint,
                                         const LoadOptions &options);
    ~Encoder();

    const core::EncoderConfig &config() const;
    const core::EncoderCheckpoint &checkpoint() const;

    // The last layer's hidden states of one sequence (ids as the tokenizer gives them, [CLS] and
    // [SEP] included): [ids.size() * hidden] float32, row-major. Error(InvalidArgument) for no ids,
    // more than config().maxPositions, or an id outside the vocabulary.
    std::vector<float> hiddenStates(const std::vector<int> &ids) const;
    // One pooled vector [hidden] per sequence, padded into one batch (padding masked out of
    // attention and pooling), L2-normalised when normalise.
    std::vector<std::vector<float>> embed(const std::vector<std::vector<int>> &batch, bool normalise) const;

private:
    friend class CrossEncoder; // scores pairs with the same weights
    Encoder();
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

// The semantic tier's embedder over a sentence encoder and its tokenizer (loaded from the
// checkpoint's directory or GGUF file). Texts longer than the model's sequence limit keep their
// first tokens and end in [SEP], as sentence-transformers truncates. Vectors are unit length.
class EncoderEmbedder : public core::Embedder
{
public:
    // prefix: text put before every input (e5 wants "query: "; empty for most models).
    EncoderEmbedder(const std::filesystem::path &path, const LoadOptions &options, std::string prefix = {});
    ~EncoderEmbedder() override;
    int dim() const override;
    // "encoder-<model directory or file stem>-<dim>", then "-p<hash of the prefix>" when there is one
    std::string name() const override;
    std::vector<float> embed(const std::string &text) override;
    const Encoder &encoder() const;
    const core::Tokenizer &tokenizer() const;

private:
    std::unique_ptr<Encoder> m_encoder;
    std::unique_ptr<core::Tokenizer> m_tokenizer;
    std::string m_name, m_prefix;
};

// A decoder embedder (Qwen3-Embedding and the like): the final-normed hidden state at the last
// token, EOS appended when the tokenizer did not add it, L2-normalised.
class DecoderEmbedder : public core::Embedder
{
public:
    DecoderEmbedder(const std::filesystem::path &path, const LoadOptions &options, std::string prefix = {});
    ~DecoderEmbedder() override;
    int dim() const override;
    std::string name() const override; // "decoder-last-<model directory or file stem>-<dim>"
    std::vector<float> embed(const std::string &text) override;

private:
    std::unique_ptr<Model> m_model;
    std::unique_ptr<core::Tokenizer> m_tokenizer;
    std::string m_name, m_prefix;
};

// v scaled to unit length (its squared norm summed in double; a zero vector stays zero), as the
// model embedders normalise their pooled state (DecoderEmbedder, replay's ModelEmbedder).
void normaliseInPlace(std::vector<float> &v);

// "lexical" and "lexical-idf" need no model; any other spec is a path: a BERT-family encoder
// (isEncoderModel) becomes an EncoderEmbedder, any other model a DecoderEmbedder. Error naming the
// path when it is neither.
std::unique_ptr<core::Embedder> loadEmbedderModel(const std::filesystem::path &path,
                                                  const LoadOptions &options, const std::string &prefix = {});

} // namespace kvwb::gpu
