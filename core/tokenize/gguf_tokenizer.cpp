#include "core/tokenize/gguf_tokenizer.h"

#include "core/model/byte_level_bpe_json.h"
#include "core/tokenize/bpe_tokenizer.h"
#include "core/tokenize/sentencepiece_tokenizer.h"
#include "core/tokenize/wordpiece_tokenizer.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

namespace kvwb::core {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// llama.cpp's token types (llama_token_type / gguf TokenType).
enum TokenType
{
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
};

const char *kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char *kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json splitThenBytes(const char *pattern)
{
    return {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          byteLevelPreTokenizerJson(false)}}};
}

struct PreTokenizer
{
    const char *name;
    json (*make)();
    bool ignoreMerges;
};

const PreTokenizer kPre[] = {
    {"gpt-2", [] { return byteLevelPreTokenizerJson(true); }, false},
    {"gpt2", [] { return byteLevelPreTokenizerJson(true); }, false},
    {"llama-bpe", [] { return splitThenBytes(kLlama3Pattern); }, true},
    {"llama3", [] { return splitThenBytes(kLlama3Pattern); }, true},
    {"qwen2", [] { return splitThenBytes(kQwen2Pattern); }, false},
    {"deepseek-r1-qwen", [] { return splitThenBytes(kQwen2Pattern); }, false},
    {"smollm",
     [] {
         return json{{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Digits"}, {"individual_digits", true}}, byteLevelPreTokenizerJson(true)}}};
     },
     false},
};

std::string joinNames()
{
    std::string out;
    for (const auto &p : kPre)
        out += (out.empty() ? "" : ", ") + std::string(p.name);
    return out;
}

std::vector<int> tokenTypes(const GgufFile &f, size_t n)
{
    std::vector<int> types(n, kNormal);
    if (const auto *t = f.numberArray("tokenizer.ggml.token_type")) {
        if (t->size() != n)
            throw Error(ErrorCode::Tokenizer,
                        fmt::format("{}: tokenizer.ggml.token_type has {} entries for {} tokens",
                                    f.path().string(), t->size(), n));
        for (size_t i = 0; i < n; ++i)
            types[i] = int((*t)[i]);
    }
    return types;
}

std::optional<int> tokenId(const GgufFile &f, const char *key, size_t n)
{
    const auto v = f.integer(key);
    if (!v)
        return std::nullopt;
    if (*v < 0 || uint64_t(*v) >= n) {
        if (*v == -1 || uint64_t(*v) == 0xFFFFFFFFu)
            return std::nullopt; // "none"
        throw Error(ErrorCode::Tokenizer,
                    fmt::format("{}: {} is {}, outside the {} tokens", f.path().string(), key, *v, n));
    }
    return int(*v);
}

std::string bpeJson(const GgufFile &f, const std::vector<std::string> &tokens)
{
    const std::string file = f.path().string();
    const std::string pre = f.string("tokenizer.ggml.pre").value_or("default");
    const PreTokenizer *chosen = nullptr;
    for (const auto &p : kPre)
        if (pre == p.name)
            chosen = &p;
    if (!chosen)
        throw Error(
            ErrorCode::Unsupported,
            fmt::format("{}: tokenizer.ggml.pre '{}' is not a pre-tokenizer kvwb knows (supported: {})", file,
                        pre, joinNames()));
    const std::vector<int> types = tokenTypes(f, tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i)
        if (const auto bad = text::firstInvalidUtf8(tokens[i]))
            throw Error(ErrorCode::Tokenizer,
                        fmt::format("{}: tokenizer.ggml.tokens entry {} is not valid UTF-8 (byte {})", file,
                                    i, *bad));
    json vocab = json::object(), added = json::array();
    for (size_t i = 0; i < tokens.size(); ++i) {
        vocab[tokens[i]] = i; // every id is in the vocabulary, as llama.cpp sees it (merges may name any)
        if (types[i] == kControl || types[i] == kUserDefined)
            added.push_back(addedTokenJson(int64_t(i), tokens[i], types[i] == kControl));
    }
    // A merge whose parts or result are not tokens can never apply (llama.cpp never looks at it);
    // tokenizer.json's BPE refuses such merges, so they are left out.
    json merges = json::array();
    if (const auto *m = f.stringArray("tokenizer.ggml.merges"))
        for (const auto &s : *m) {
            const size_t sp = s.find(' ');
            if (sp == std::string::npos)
                throw Error(ErrorCode::Tokenizer,
                            fmt::format("{}: tokenizer.ggml.merges entry '{}' is not two tokens", file, s));
            const std::string a = s.substr(0, sp), b = s.substr(sp + 1);
            if (vocab.contains(a) && vocab.contains(b) && vocab.contains(a + b))
                merges.push_back(s);
        }
    // (tokenizer.kvwb.normalizer: the tokenizer.json's NFC, which GGUF has no field for)
    const auto norm = f.string("tokenizer.kvwb.normalizer");
    if (norm && *norm != "NFC")
        throw Error(
            ErrorCode::Unsupported,
            fmt::format("{}: tokenizer.kvwb.normalizer '{}' is not one kvwb writes (NFC)", file, *norm));
    const json normalizer = norm ? json{{"type", "NFC"}} : json();
    const auto bos = tokenId(f, "tokenizer.ggml.bos_token_id", tokens.size());
    const bool addBos = f.boolean("tokenizer.ggml.add_bos_token").value_or(false) && bos;
    return byteLevelBpeJson({.addedTokens = std::move(added),
                             .normalizer = normalizer,
                             .preTokenizer = chosen->make(),
                             .postProcessor = addBos ? bosTemplateJson(tokens[size_t(*bos)], *bos) : json(),
                             .vocab = std::move(vocab),
                             .merges = std::move(merges),
                             .ignoreMerges = chosen->ignoreMerges})
        .dump();
}

// llama.cpp's "bert" vocabulary (convert_hf_to_gguf.py's BertModel.set_vocab) back as the
// tokenizer.json of HF's BertTokenizerFast: the converter wrote a word-initial token "the" as
// "▁the", a continuing "##ing" as "ing", and "[CLS]"-style tokens as they are. GGUF keeps no
// do_lower_case: a vocabulary without an upper-case ASCII letter outside "[...]" tokens is taken
// for an uncased model (BERT uncased, all-MiniLM, bge, gte, e5 all are).
std::string bertJson(const GgufFile &f, const std::vector<std::string> &tokens)
{
    const std::string file = f.path().string();
    const size_t n = tokens.size();
    const std::vector<int> types = tokenTypes(f, n);
    std::vector<std::string> hf(n);
    json vocab = json::object();
    bool cased = false;
    for (size_t i = 0; i < n; ++i) {
        const std::string &t = tokens[i];
        if (const auto bad = text::firstInvalidUtf8(t))
            throw Error(ErrorCode::Tokenizer,
                        fmt::format("{}: tokenizer.ggml.tokens entry {} is not valid UTF-8 (byte {})", file,
                                    i, *bad));
        const bool bracketed = t.size() >= 2 && t.front() == '[' && t.back() == ']';
        if (bracketed)
            hf[i] = t;
        else if (t.starts_with("\u2581") && t.size() > 3)
            hf[i] = t.substr(3);
        else if (t.starts_with("\u2581") || t.empty())
            hf[i] = t; // "▁" alone (an empty HF token) or empty: kept as is, so that it stays unique
        else
            hf[i] = "##" + t;
        if (!bracketed)
            cased |= std::any_of(t.begin(), t.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
        if (vocab.contains(hf[i]))
            throw Error(
                ErrorCode::Tokenizer,
                fmt::format("{}: tokenizer.ggml.tokens entries {} and {} both stand for WordPiece token "
                            "\"{}\"",
                            file, vocab.at(hf[i]).get<size_t>(), i, hf[i]));
        vocab[hf[i]] = i;
    }
    const auto byName = [&](const char *name) -> std::optional<int> {
        if (vocab.contains(name))
            return vocab.at(name).get<int>();
        return std::nullopt;
    };
    const auto firstOf = [&](std::initializer_list<const char *> keys, const char *name) {
        for (const char *k : keys)
            if (const auto id = tokenId(f, k, n))
                return std::optional<int>(id);
        return byName(name);
    };
    const auto unk = firstOf({"tokenizer.ggml.unknown_token_id"}, "[UNK]");
    if (!unk)
        throw Error(
            ErrorCode::Tokenizer,
            file + ": no unknown token (tokenizer.ggml.unknown_token_id is missing and no token is [UNK])");
    const auto cls = firstOf({"tokenizer.ggml.cls_token_id", "tokenizer.ggml.bos_token_id"}, "[CLS]");
    const auto sep = firstOf({"tokenizer.ggml.seperator_token_id", "tokenizer.ggml.eos_token_id"}, "[SEP]");
    const auto pad = firstOf({"tokenizer.ggml.padding_token_id"}, "[PAD]");
    const auto mask = firstOf({"tokenizer.ggml.mask_token_id"}, "[MASK]");
    std::vector<bool> isSpecial(n, false);
    for (size_t i = 0; i < n; ++i)
        isSpecial[i] = types[i] == kControl;
    for (const auto &id : {unk, cls, sep, pad, mask})
        if (id)
            isSpecial[size_t(*id)] = true;
    json added = json::array();
    for (size_t i = 0; i < n; ++i)
        if (isSpecial[i])
            added.push_back({{"id", i},
                             {"content", hf[i]},
                             {"single_word", false},
                             {"lstrip", false},
                             {"rstrip", false},
                             {"normalized", false},
                             {"special", true}});
    json post = nullptr;
    if (cls && sep) {
        const std::string &c = hf[size_t(*cls)], &s = hf[size_t(*sep)];
        post = {{"type", "TemplateProcessing"},
                {"single", json::array({{{"SpecialToken", {{"id", c}, {"type_id", 0}}}},
                                        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                        {{"SpecialToken", {{"id", s}, {"type_id", 0}}}}})},
                {"pair", json::array({{{"SpecialToken", {{"id", c}, {"type_id", 0}}}},
                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                      {{"SpecialToken", {{"id", s}, {"type_id", 0}}}},
                                      {{"Sequence", {{"id", "B"}, {"type_id", 1}}}},
                                      {{"SpecialToken", {{"id", s}, {"type_id", 1}}}}})},
                {"special_tokens",
                 {{c, {{"id", c}, {"ids", {*cls}}, {"tokens", {c}}}},
                  {s, {{"id", s}, {"ids", {*sep}}, {"tokens", {s}}}}}}};
    }
    json padding = nullptr;
    if (pad)
        padding = {{"strategy", "BatchLongest"},
                   {"direction", "Right"},
                   {"pad_to_multiple_of", nullptr},
                   {"pad_id", *pad},
                   {"pad_type_id", 0},
                   {"pad_token", hf[size_t(*pad)]}};
    const json j = {{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", padding},
                    {"added_tokens", added},
                    {"normalizer",
                     {{"type", "BertNormalizer"},
                      {"clean_text", true},
                      {"handle_chinese_chars", true},
                      {"strip_accents", nullptr},
                      {"lowercase", !cased}}},
                    {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
                    {"post_processor", post},
                    {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
                    {"model",
                     {{"type", "WordPiece"},
                      {"unk_token", hf[size_t(*unk)]},
                      {"continuing_subword_prefix", "##"},
                      {"max_input_chars_per_word", 100},
                      {"vocab", vocab}}}};
    return j.dump();
}

// --- protobuf wire format, the little of it a SentencePiece ModelProto needs ---

void varint(std::string &out, uint64_t v)
{
    while (v >= 0x80) {
        out += char(uint8_t(v) | 0x80);
        v >>= 7;
    }
    out += char(uint8_t(v));
}
void tag(std::string &out, int field, int wire)
{
    varint(out, uint64_t(field) << 3 | uint64_t(wire));
}
void lenField(std::string &out, int field, std::string_view bytes)
{
    tag(out, field, 2);
    varint(out, bytes.size());
    out.append(bytes);
}
void intField(std::string &out, int field, int64_t v)
{
    tag(out, field, 0);
    varint(out, uint64_t(v)); // negative int32s are ten bytes, as protobuf writes them
}
void floatField(std::string &out, int field, float v)
{
    tag(out, field, 5);
    char b[4];
    std::memcpy(b, &v, 4);
    out.append(b, 4);
}

std::string spmProto(const GgufFile &f, const std::vector<std::string> &tokens)
{
    const std::string file = f.path().string();
    const std::vector<int> types = tokenTypes(f, tokens.size());
    const auto *scores = f.numberArray("tokenizer.ggml.scores");
    if (scores && scores->size() != tokens.size())
        throw Error(ErrorCode::Tokenizer,
                    fmt::format("{}: tokenizer.ggml.scores has {} entries for {} tokens", file,
                                scores->size(), tokens.size()));
    std::string proto;
    bool hasBytes = false;
    for (size_t i = 0; i < tokens.size(); ++i) {
        int type = types[i];
        if (type < kNormal || type > kByte)
            throw Error(ErrorCode::Tokenizer,
                        fmt::format("{}: token {} has type {}, expected 1 to 6", file, i, type));
        hasBytes |= type == kByte;
        std::string piece;
        lenField(piece, 1, tokens[i]);
        floatField(piece, 2, scores ? float((*scores)[i]) : 0.0f);
        intField(piece, 3, type); // SentencePiece's Type enum has llama.cpp's numbering
        lenField(proto, 1, piece);
    }
    // llama.cpp's SPM defaults: unknown 0, BOS 1, EOS 2 when the keys are absent.
    const std::optional<int> unk = tokenId(f, "tokenizer.ggml.unknown_token_id", tokens.size()).value_or(0);
    const auto bos = tokenId(f, "tokenizer.ggml.bos_token_id", tokens.size());
    const auto eos = tokenId(f, "tokenizer.ggml.eos_token_id", tokens.size());
    const bool addBos = f.boolean("tokenizer.ggml.add_bos_token").value_or(true);
    std::string trainer;
    intField(trainer, 3, 2);  // model_type BPE: llama.cpp's SPM tokenizer merges by score
    intField(trainer, 25, 0); // split_digits false
    intField(trainer, 35, hasBytes ? 1 : 0);
    intField(trainer, 40, unk.value_or(0));
    intField(trainer, 41, addBos && bos ? *bos : -1);
    intField(trainer, 42, eos.value_or(-1));
    intField(trainer, 43, -1);
    lenField(proto, 2, trainer);
    std::string norm;
    lenField(norm, 1, "identity");
    intField(norm, 3, f.boolean("tokenizer.ggml.add_space_prefix").value_or(true) ? 1 : 0);
    intField(norm, 4, f.boolean("tokenizer.ggml.remove_extra_whitespaces").value_or(false) ? 1 : 0);
    intField(norm, 5, 1);
    lenField(proto, 3, norm);
    if (!unk || types[size_t(*unk)] != kUnknown)
        throw Error(ErrorCode::Tokenizer,
                    fmt::format("{}: token {} (tokenizer.ggml.unknown_token_id, default 0) is of type {}, "
                                "not unknown (2)",
                                file, *unk, types[size_t(*unk)]));
    return proto;
}

// A tiny reader of the same wire format, for tokenizer.model.
struct Wire
{
    std::string_view b;
    size_t pos = 0;
    std::string source;

    [[noreturn]] void fail() const
    {
        throw Error(ErrorCode::Tokenizer,
                    fmt::format("{}: malformed SentencePiece model at byte {}", source, pos));
    }
    uint64_t var()
    {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos >= b.size())
                fail();
            const uint8_t c = uint8_t(b[pos++]);
            v |= uint64_t(c & 0x7F) << shift;
            if (!(c & 0x80))
                return v;
        }
        fail();
    }
    // Next field: number, wire type, and for length-delimited its bytes / for varints its value.
    bool next(int &field, int &wire, std::string_view &bytes, uint64_t &value)
    {
        if (pos >= b.size())
            return false;
        const uint64_t t = var();
        field = int(t >> 3);
        wire = int(t & 7);
        switch (wire) {
        case 0:
            value = var();
            break;
        case 1:
        case 5: {
            const size_t n = wire == 1 ? 8 : 4;
            if (b.size() - pos < n)
                fail();
            bytes = b.substr(pos, n);
            pos += n;
            break;
        }
        case 2: {
            const uint64_t n = var();
            if (n > b.size() - pos)
                fail();
            bytes = b.substr(pos, size_t(n));
            pos += size_t(n);
            break;
        }
        default:
            fail();
        }
        return true;
    }
};

void writeSpm(const fs::path &path, GgufWriter &out, int vocabSize)
{
    const std::string bytes = text::readWholeFile(path);
    const std::string src = path.string();
    Wire w{bytes, 0, src};
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    int64_t modelType = 1, unk = 0, bos = 1, eos = 2;
    bool addDummyPrefix = true, removeExtraWs = true;
    std::string normName;
    int field, wire;
    std::string_view sub;
    uint64_t value;
    while (w.next(field, wire, sub, value)) {
        if (wire != 2)
            continue;
        Wire s{sub, 0, src};
        int f2, w2;
        std::string_view b2;
        uint64_t v2;
        if (field == 1) {
            std::string piece;
            float score = 0;
            int type = kNormal;
            while (s.next(f2, w2, b2, v2)) {
                if (f2 == 1 && w2 == 2)
                    piece = std::string(b2);
                else if (f2 == 2 && w2 == 5)
                    std::memcpy(&score, b2.data(), 4);
                else if (f2 == 3 && w2 == 0)
                    type = int(v2);
            }
            tokens.push_back(std::move(piece));
            scores.push_back(score);
            types.push_back(type);
        } else if (field == 2) {
            while (s.next(f2, w2, b2, v2)) {
                if (w2 != 0)
                    continue;
                const int64_t v = int64_t(int32_t(uint32_t(v2)));
                if (f2 == 3)
                    modelType = v;
                else if (f2 == 40)
                    unk = v;
                else if (f2 == 41)
                    bos = v;
                else if (f2 == 42)
                    eos = v;
            }
        } else if (field == 3) {
            while (s.next(f2, w2, b2, v2)) {
                if (f2 == 1 && w2 == 2)
                    normName = std::string(b2);
                else if (f2 == 3 && w2 == 0)
                    addDummyPrefix = v2 != 0;
                else if (f2 == 4 && w2 == 0)
                    removeExtraWs = v2 != 0;
            }
        }
    }
    if (modelType != 2)
        throw Error(
            ErrorCode::Unsupported,
            fmt::format(
                "{}: SentencePiece model type {} cannot be written to GGUF the way llama.cpp reads it "
                "(only BPE, type 2)",
                src, modelType));
    if (!normName.empty() && normName != "identity")
        throw Error(
            ErrorCode::Unsupported,
            fmt::format("{}: SentencePiece normalizer '{}' has no GGUF form (only identity)", src, normName));
    // Ids past the tokenizer's pieces that the model's embedding still has, as
    // convert_hf_to_gguf.py writes them: llama.cpp sizes token_embd from this list.
    for (int i = int(tokens.size()); i < vocabSize; ++i) {
        tokens.push_back(fmt::format("[PAD{}]", i));
        scores.push_back(-1000.0f);
        types.push_back(kUnused);
    }
    out.setString("tokenizer.ggml.model", "llama");
    out.setString("tokenizer.ggml.pre", "default");
    const auto n = tokens.size();
    out.setStrings("tokenizer.ggml.tokens", std::move(tokens));
    out.setF32s("tokenizer.ggml.scores", std::move(scores));
    out.setI32s("tokenizer.ggml.token_type", std::move(types));
    const auto setId = [&](const char *key, int64_t id) {
        if (id >= 0 && uint64_t(id) < n)
            out.setU32(key, uint32_t(id));
    };
    setId("tokenizer.ggml.unknown_token_id", unk);
    setId("tokenizer.ggml.bos_token_id", bos);
    setId("tokenizer.ggml.eos_token_id", eos);
    out.setBool("tokenizer.ggml.add_bos_token", bos >= 0);
    out.setBool("tokenizer.ggml.add_eos_token", false);
    out.setBool("tokenizer.ggml.add_space_prefix", addDummyPrefix);
    out.setBool("tokenizer.ggml.remove_extra_whitespaces", removeExtraWs);
}

// The pre-tokenizer's llama.cpp name, from its tokenizer.json form.
std::optional<std::string> preName(const json &pre)
{
    for (const auto &p : kPre)
        if (p.make() == pre)
            return std::string(p.name);
    // trim_offsets does not change the pieces; compare without it.
    json a = pre;
    const auto strip = [](json &j) {
        if (j.is_object() && j.value("type", "") == "ByteLevel")
            j.erase("trim_offsets");
    };
    strip(a);
    if (a.is_object() && a.contains("pretokenizers"))
        for (auto &x : a["pretokenizers"])
            strip(x);
    for (const auto &p : kPre) {
        json b = p.make();
        strip(b);
        if (b.is_object() && b.contains("pretokenizers"))
            for (auto &x : b["pretokenizers"])
                strip(x);
        if (a == b)
            return std::string(p.name);
    }
    return std::nullopt;
}

void writeBpe(const fs::path &path, GgufWriter &out, int vocabSize)
{
    const std::string src = path.string();
    json j;
    try {
        j = json::parse(text::readWholeFile(path));
    } catch (const json::exception &e) {
        throw Error(ErrorCode::Tokenizer, fmt::format("{}: not JSON: {}", src, e.what()));
    }
    // Load it first: what BpeTokenizer refuses is not written.
    const auto tok = BpeTokenizer::fromJsonText(j.dump(), src);
    const json &model = j.at("model");
    if (model.value("type", "BPE") != "BPE" || model.value("byte_fallback", false))
        throw Error(ErrorCode::Unsupported,
                    fmt::format("{}: only byte-level BPE tokenizer.json files can be written to GGUF", src));
    const auto pre = preName(j.value("pre_tokenizer", json()));
    if (!pre)
        throw Error(
            ErrorCode::Unsupported,
            fmt::format("{}: its pre_tokenizer matches none of the llama.cpp pre-tokenizers kvwb writes ({})",
                        src, joinNames()));
    // GGUF has no normalizer field and llama.cpp's converter drops it. Qwen2/Qwen3's NFC (the only
    // one a byte-level BPE vocabulary ships) is kept as tokenizer.kvwb.normalizer, which llama.cpp
    // ignores and kvwb reads back, so kvwb tokenises the file as the tokenizer.json; any other is
    // refused rather than silently dropped.
    const json normalizer = j.value("normalizer", json());
    const bool nfc = normalizer == json{{"type", "NFC"}};
    if (normalizer != json() && !nfc)
        throw Error(ErrorCode::Unsupported,
                    fmt::format("{}: normalizer {} has no GGUF form (NFC or none)", src, normalizer.dump()));
    if (nfc)
        out.setString("tokenizer.kvwb.normalizer", "NFC");
    // The model's embedding may have more rows than the tokenizer names (vocab_size 49152 with 258
    // pieces): llama.cpp sizes token_embd from this list, so it covers every row.
    const int n = std::max(tok->vocabSize(), vocabSize);
    std::vector<std::string> tokens(static_cast<size_t>(n));
    std::vector<int32_t> types(size_t(n), kUnused);
    for (const auto &[piece, id] : model.at("vocab").items()) {
        const int i = id.get<int>();
        if (i >= 0 && i < n) {
            tokens[size_t(i)] = piece;
            types[size_t(i)] = kNormal;
        }
    }
    for (const auto &a : j.value("added_tokens", json::array())) {
        const int i = a.at("id").get<int>();
        if (i >= 0 && i < n) {
            tokens[size_t(i)] = a.at("content").get<std::string>();
            types[size_t(i)] = a.value("special", false) ? kControl : kUserDefined;
        }
    }
    for (int i = 0; i < n; ++i)
        if (types[size_t(i)] == kUnused)
            tokens[size_t(i)] =
                fmt::format("[PAD{}]", i); // ids no entry names, as convert_hf_to_gguf.py does
    std::vector<std::string> merges;
    for (const auto &m : model.value("merges", json::array()))
        merges.push_back(m.is_string() ? m.get<std::string>()
                                       : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
    out.setString("tokenizer.ggml.model", "gpt2");
    out.setString("tokenizer.ggml.pre", *pre);
    out.setStrings("tokenizer.ggml.tokens", std::move(tokens));
    out.setI32s("tokenizer.ggml.token_type", std::move(types));
    out.setStrings("tokenizer.ggml.merges", std::move(merges));
    if (const auto b = tok->bosId())
        out.setU32("tokenizer.ggml.bos_token_id", uint32_t(*b));
    if (const auto e = tok->eosId())
        out.setU32("tokenizer.ggml.eos_token_id", uint32_t(*e));
    const auto withBos = tok->encode("", true);
    out.setBool("tokenizer.ggml.add_bos_token", !withBos.empty());
    out.setBool("tokenizer.ggml.add_eos_token", false);
}

} // namespace

bool ggufHasTokenizer(const GgufFile &file)
{
    return file.find("tokenizer.ggml.model") != nullptr;
}

std::vector<std::string> ggufPreTokenizerNames()
{
    std::vector<std::string> out;
    for (const auto &p : kPre)
        out.push_back(p.name);
    return out;
}

GgufTokenizerFile ggufTokenizerFile(const GgufFile &f)
{
    const std::string file = f.path().string();
    const auto model = f.string("tokenizer.ggml.model");
    if (!model)
        throw Error(ErrorCode::Tokenizer,
                    file + ": no tokenizer in the file (tokenizer.ggml.model is missing)");
    const auto *tokens = f.stringArray("tokenizer.ggml.tokens");
    if (!tokens || tokens->empty())
        throw Error(ErrorCode::Tokenizer, file + ": tokenizer.ggml.tokens is missing or empty");
    if (*model == "gpt2")
        return {"tokenizer.json", bpeJson(f, *tokens)};
    if (*model == "llama")
        return {"tokenizer.model", spmProto(f, *tokens)};
    if (*model == "bert")
        return {"tokenizer.json", bertJson(f, *tokens)};
    throw Error(ErrorCode::Unsupported,
                fmt::format("{}: tokenizer.ggml.model '{}' is not supported (supported: gpt2, llama, bert)",
                            file, *model));
}

std::unique_ptr<Tokenizer> tokenizerFromGguf(const GgufFile &f)
{
    const GgufTokenizerFile t = ggufTokenizerFile(f);
    const std::string source = f.path().string() + " (tokenizer.ggml.*)";
    if (f.string("tokenizer.ggml.model") == "bert")
        return WordPieceTokenizer::fromJsonText(t.bytes, source);
    if (t.name == "tokenizer.json")
        return BpeTokenizer::fromJsonText(t.bytes, source);
    return SentencePieceTokenizer::fromBytes(t.bytes, source);
}

void copyTokenizerMetadata(const GgufFile &from, GgufWriter &out)
{
    for (const auto &[key, value] : from.metadata())
        if (key.starts_with("tokenizer."))
            out.setValue(key, value);
}

void writeTokenizerToGguf(const fs::path &tokenizerFile, GgufWriter &out, int vocabSize)
{
    const std::string ext = tokenizerFile.extension().string();
    if (ext == ".json")
        return writeBpe(tokenizerFile, out, vocabSize);
    if (ext == ".model")
        return writeSpm(tokenizerFile, out, vocabSize);
    throw Error(ErrorCode::Unsupported,
                fmt::format("{}: only tokenizer.json and tokenizer.model can be written to GGUF",
                            tokenizerFile.string()));
}

} // namespace kvwb::core
