// The tokenizer.json of a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2: HF's ByteLevel decoder
// over a BPE model without unknown token, dropout or byte fallback), as kvwb writes it: the random
// and demo models' (core::byteLevelTokenizerJson, core/model/random_model.h) and the one a GGUF
// "gpt2" vocabulary stands for (core/tokenize/gguf_tokenizer.h). In core/model so that both rooms
// may include it. Header-only; pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace kvwb::core {

// The ByteLevel pre-tokenizer without a prefix space; useRegex: split with GPT-2's regex first.
inline nlohmann::json byteLevelPreTokenizerJson(bool useRegex)
{
    return {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", useRegex}};
}

// One added_tokens entry: a special (control) token, or a user-defined one, which is normalized.
inline nlohmann::json addedTokenJson(int64_t id, const std::string &content, bool special)
{
    return {{"id", id},        {"content", content},     {"single_word", false}, {"lstrip", false},
            {"rstrip", false}, {"normalized", !special}, {"special", special}};
}

// The TemplateProcessing post-processor that puts the special token `token` (id `id`) before every
// single sequence (add_bos_token).
inline nlohmann::json bosTemplateJson(const std::string &token, int64_t id)
{
    using nlohmann::json;
    return {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", token}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"pair", json::array()},
            {"special_tokens",
             {{token, {{"id", token}, {"ids", json::array({id})}, {"tokens", json::array({token})}}}}}};
}

// What differs between the byte-level BPE tokenizers kvwb writes.
struct ByteLevelBpeParts
{
    nlohmann::json addedTokens = nlohmann::json::array(); // addedTokenJson() entries
    nlohmann::json normalizer;                            // null: none
    nlohmann::json preTokenizer;
    nlohmann::json postProcessor;                    // null: none
    nlohmann::json vocab = nlohmann::json::object(); // {token: id}
    nlohmann::json merges = nlohmann::json::array(); // "left right" strings
    bool ignoreMerges = false; // a whole word in the vocabulary is one token, merges or not (Llama 3)
};

// The whole tokenizer.json (nlohmann::json: its keys are written sorted).
inline nlohmann::json byteLevelBpeJson(ByteLevelBpeParts parts)
{
    using nlohmann::json;
    return {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", std::move(parts.addedTokens)},
        {"normalizer", std::move(parts.normalizer)},
        {"pre_tokenizer", std::move(parts.preTokenizer)},
        {"post_processor", std::move(parts.postProcessor)},
        {"decoder",
         {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", parts.ignoreMerges},
          {"vocab", std::move(parts.vocab)},
          {"merges", std::move(parts.merges)}}}};
}

} // namespace kvwb::core
