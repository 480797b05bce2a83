#include "core/tokenize/tokenizer.h"

#include "core/model/gguf.h"
#include "core/model/model_config.h"
#include "core/tokenize/bpe_tokenizer.h"
#include "core/tokenize/gguf_tokenizer.h"
#include "core/tokenize/llama2c_tokenizer.h"
#include "core/tokenize/sentencepiece_tokenizer.h"
#include "core/util/error.h"

#include <system_error>

namespace kvwb::core {

namespace fs = std::filesystem;

namespace {

enum class Kind
{
    Json,
    SentencePiece,
    Llama2c
};

// By extension first (tokenizer.json, *.model, *.bin), so renamed copies still load.
std::optional<Kind> kindOfFile(const fs::path &p)
{
    const std::string ext = p.extension().string();
    if (ext == ".json")
        return Kind::Json;
    if (ext == ".model")
        return Kind::SentencePiece;
    if (ext == ".bin")
        return Kind::Llama2c;
    return std::nullopt;
}

} // namespace

std::unique_ptr<Tokenizer> loadTokenizer(const fs::path &path)
{
    std::error_code ec;
    fs::path file = path;
    if (fs::is_directory(path, ec)) {
        // tokenizer.json is the authoritative HF file when both it and tokenizer.model exist.
        bool found = false;
        for (const char *name : {"tokenizer.json", "tokenizer.model", "tokenizer.bin"}) {
            if (fs::is_regular_file(path / name, ec)) {
                file = path / name;
                found = true;
                break;
            }
        }
        if (!found)
            throw Error(ErrorCode::Io,
                        path.string() +
                            ": directory holds no tokenizer.json, tokenizer.model or tokenizer.bin");
    } else if (!fs::exists(path, ec)) {
        throw Error(ErrorCode::Io, path.string() + ": no such file or directory");
    }
    if (file.extension() == ".gguf" || GgufFile::looksLikeGguf(file))
        return tokenizerFromGguf(GgufFile::open(file));
    const auto kind = kindOfFile(file);
    if (!kind)
        throw Error(ErrorCode::Tokenizer, file.string() +
                                              ": cannot tell the tokenizer format from the name (expected "
                                              "tokenizer.json, tokenizer.model or tokenizer.bin)");
    switch (*kind) {
    case Kind::Json:
        return BpeTokenizer::fromJsonFile(file);
    case Kind::SentencePiece:
        return SentencePieceTokenizer::fromFile(file);
    case Kind::Llama2c:
        return Llama2cTokenizer::fromFile(file);
    }
    throw Error(ErrorCode::Internal, "unreachable tokenizer kind");
}

void checkTextSize(std::string_view text, const std::string &tokenizerSource)
{
    if (text.size() > kMaxTextBytes)
        throw Error(ErrorCode::InvalidArgument, tokenizerSource + ": a text of " +
                                                    std::to_string(text.size()) +
                                                    " bytes is more than a tokenizer takes (" +
                                                    std::to_string(kMaxTextBytes >> 20) + " MiB)");
}

void checkTokenizerFitsModel(const Tokenizer &tok, const ModelConfig &config,
                             const std::string &tokenizerSource)
{
    // A model may have more embedding rows than the tokenizer has ids (padded for efficiency, e.g.
    // Qwen2's 151936 rows for 151665 ids); the other way round would index past the embedding.
    if (tok.vocabSize() > config.vocabSize)
        throw Error(ErrorCode::Tokenizer,
                    tokenizerSource + ": tokenizer has " + std::to_string(tok.vocabSize()) +
                        " ids but the model's vocab_size is " + std::to_string(config.vocabSize));
    // tokenizer.bin has no entry count of its own: run.c reads exactly vocab_size entries. A file
    // cut at an entry boundary would otherwise load a prefix of the vocabulary and tokenize wrongly.
    if (tok.kind() == "llama2c" && tok.vocabSize() != config.vocabSize)
        throw Error(ErrorCode::Tokenizer,
                    tokenizerSource + ": tokenizer.bin has " + std::to_string(tok.vocabSize()) +
                        " entries but the model's vocab_size is " + std::to_string(config.vocabSize) +
                        " (truncated or for another model)");
}

} // namespace kvwb::core
