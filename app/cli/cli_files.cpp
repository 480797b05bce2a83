#include "app/cli/cli_files.h"

#include "app/cli/cli_util.h"
#include "core/model/checkpoint.h"
#include "core/model/encoder_config.h"
#include "core/model/gguf_model.h"
#include "core/model/memory_estimate.h"
#include "core/model/random_model.h"
#include "core/store/experiment_file.h"
#include "core/store/experiment_upgrade.h"
#include "core/tokenize/gguf_tokenizer.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <QCommandLineParser>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>

namespace kvwb::app {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace kvwb::app::cli;

namespace {

json modelCard(const core::Checkpoint &ck, const std::optional<fs::path> &tokenizerPath)
{
    const auto &c = ck.config();
    json rope = {
        {"theta", c.ropeTheta}, {"layout", ropeLayoutName(c.ropeLayout)}, {"scaling", c.ropeScaling.type}};
    if (c.ropeScaling.type != "default") {
        rope["factor"] = c.ropeScaling.factor;
        if (c.ropeScaling.type == "llama3") {
            rope["low_freq_factor"] = c.ropeScaling.lowFreqFactor;
            rope["high_freq_factor"] = c.ropeScaling.highFreqFactor;
            rope["original_max_position_embeddings"] = c.ropeScaling.originalMaxPositionEmbeddings;
        } else if (c.ropeScaling.type == "longrope") {
            // the short divisors serve the original context by default; --context above it
            // switches a loaded model to the long ones
            rope["original_max_position_embeddings"] = c.ropeScaling.originalMaxPositionEmbeddings;
            rope["attention_factor"] = c.ropeScaling.attentionFactor;
            rope["default_context"] = c.contextLimit();
        }
    }
    if (c.ropeLocalTheta) // Gemma 3: the sliding layers' base
        rope["local_theta"] = *c.ropeLocalTheta;
    json j = {{"path", ck.path().string()},
              {"format", core::checkpointFormatName(ck.format())},
              {"architecture", c.architecture},
              {"model_type", c.modelType},
              {"layers", c.numLayers},
              {"hidden_size", c.hiddenSize},
              {"intermediate_size", c.intermediateSize},
              {"heads", c.numHeads},
              {"kv_heads", c.numKvHeads},
              {"head_dim", c.headDim},
              {"vocab", c.vocabSize},
              {"context", c.maxPositionEmbeddings},
              {"parameters", c.parameterCount()},
              {"bytes", ck.weightBytes()},
              {"qkv_bias", c.qkvBias},
              {"tied_embeddings", c.tieWordEmbeddings},
              {"rms_norm_eps", c.rmsNormEps},
              {"rope", rope},
              {"kv_bytes_per_token_f32", c.kvBytesPerToken(4)},
              {"fingerprint", ck.fingerprint()}};
    if (!c.layerAttention.empty()) {
        std::vector<int> sliding;
        for (int l = 0; l < c.numLayers; ++l)
            if (c.isSlidingLayer(l))
                sliding.push_back(l);
        j["sliding_window"] = c.slidingWindow;
        j["sliding_layers"] = sliding;
    }
    const int ctx = c.contextLimit() > 0 ? c.contextLimit() : 2048;
    j["memory_estimate"] = {{"context_tokens", ctx},
                            {"f32_bytes", core::estimateMemory(c, 4, ctx).totalBytes()},
                            {"bf16_bytes", core::estimateMemory(c, 2, ctx).totalBytes()}};
    if (ck.format() == core::CheckpointFormat::Gguf) {
        const auto file = core::GgufFile::open(ck.path());
        const auto sum = core::ggufSummary(file);
        json types = json::object();
        for (const auto &t : sum.types)
            types[t.type] = {{"tensors", t.tensors}, {"bytes", t.bytes}};
        j["gguf"] = {{"version", sum.version},
                     {"architecture", sum.architecture},
                     {"name", sum.name},
                     {"tensor_types", types},
                     {"file_bytes", file.fileSize()},
                     {"dequantised_f32_bytes", sum.elements * 4},
                     {"dequantised_bf16_bytes", sum.elements * 2}};
    }
    if (tokenizerPath) {
        const auto tok = core::loadTokenizer(*tokenizerPath);
        j["tokenizer"] = {
            {"kind", tok->kind()}, {"path", tokenizerPath->string()}, {"vocab", tok->vocabSize()}};
    } else {
        j["tokenizer"] = nullptr;
    }
    return j;
}

// What an experiment file holds: provenance, both models, storage, prompts and sizes.
json experimentCard(const fs::path &path)
{
    const auto r = core::ExperimentReader::open(path);
    const auto &pv = r.provenance();
    const auto st = r.storage();
    json j = {{"path", path.string()},
              {"schema", r.schema()},
              {"file_bytes", fs::file_size(path)},
              {"prompts", r.promptCount()},
              {"storage",
               {{"dtype", core::kvStorageName(st.storage)},
                {"compress", st.compress},
                {"chunk_tokens", st.chunkTokens},
                {"key_form", core::keyFormName(st.keyForm)}}},
              {"provenance",
               {{"app_version", pv.appVersion},
                {"git_commit", pv.gitCommit},
                {"qt_version", pv.qtVersion},
                {"torch_version", pv.torchVersion},
                {"hdf5_version", pv.hdf5Version},
                {"device", pv.device},
                {"created_utc", pv.createdUtc},
                {"run_id", pv.runId},
                {"config_sha256", pv.configSha256}}}};
    for (const core::ModelRole role : core::kRoles) {
        const auto &m = r.model(role);
        const auto &c = m.config;
        const int64_t tokens = r.totalTokens(role);
        j["models"][core::roleName(role)] = {{"architecture", c.architecture},
                                             {"layers", c.numLayers},
                                             {"kv_heads", c.numKvHeads},
                                             {"head_dim", c.headDim},
                                             {"captured_layers", m.capturedLayers},
                                             {"tokens", tokens},
                                             {"weights_sha256", m.weightsSha256},
                                             {"tokenizer_sha256", m.tokenizerSha256},
                                             {"source_path", m.sourcePath}};
    }
    // Different tokenizers: how many prompts pair B's rows with A's through a token alignment, and
    // how many cannot be paired at all (a file from before alignments were stored).
    int aligned = 0, same = 0, unpaired = 0;
    for (int i = 0; i < r.promptCount(); ++i) {
        const auto info = r.prompt(i);
        if (!info.alignment.empty())
            ++aligned;
        else if (info.a.ids == info.b.ids)
            ++same;
        else
            ++unpaired;
    }
    j["token_alignment"] = {{"in_use", aligned > 0},
                            {"same_tokenizer", r.model(core::ModelRole::A).tokenizerSha256 ==
                                                   r.model(core::ModelRole::B).tokenizerSha256},
                            {"stored", r.storesAlignment()},
                            {"prompts_aligned", aligned},
                            {"prompts_same_tokens", same},
                            {"prompts_unpaired", unpaired}};
    return j;
}

core::DType ggufWeightType(const std::string &name)
{
    for (core::DType t : {core::DType::F32, core::DType::F16, core::DType::BF16, core::DType::Q8_0,
                          core::DType::Q4_0, core::DType::Q4_1, core::DType::Q5_0, core::DType::Q5_1,
                          core::DType::Q4_K, core::DType::Q5_K, core::DType::Q6_K})
        if (name == core::dtypeName(t))
            return t;
    throw UsageError{"weight type " + name +
                     " is not one of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"};
}

// The checkpoint as GGUF, its tokenizer (when it has one) in the metadata; prints what stayed F32.
void writeGgufFrom(const core::Checkpoint &ck, const fs::path &out, core::DType type)
{
    core::GgufWriter w;
    if (const auto tok = ck.tokenizerPath()) {
        if (tok->extension() == ".gguf") {
            // GGUF to GGUF: carry every tokenizer key over as it is
            const auto src = core::GgufFile::open(*tok);
            core::copyTokenizerMetadata(src, w);
        } else {
            core::writeTokenizerToGguf(*tok, w, ck.config().vocabSize);
        }
    }
    for (const std::string &note : core::writeGguf(ck, out, type, std::move(w)))
        std::fprintf(stderr, "%s\n", note.c_str());
}

} // namespace

namespace {

// A sentence encoder's card: its geometry, pooling, normalisation, sequence limit, tokenizer and
// fingerprint.
json encoderCard(const fs::path &path)
{
    const auto ck = core::EncoderCheckpoint::open(path);
    const core::EncoderConfig &c = ck.config();
    json card = {{"path", ck.path().string()},
                 {"kind", "sentence encoder"},
                 {"format", ck.isGguf() ? "gguf" : "hf_safetensors"},
                 {"model_type", c.modelType},
                 {"layers", c.numLayers},
                 {"hidden_size", c.hiddenSize},
                 {"heads", c.numHeads},
                 {"intermediate_size", c.intermediateSize},
                 {"vocab_size", c.vocabSize},
                 {"max_positions", c.maxPositions},
                 {"max_seq_length", c.sequenceLimit()},
                 {"activation", core::encoderActivationName(c.activation)},
                 {"pooling", core::poolingName(c.pooling)},
                 {"pooling_from", c.poolingSource},
                 {"normalize", c.normalize},
                 {"parameters", c.parameterCount()},
                 {"sha256", ck.fingerprint()}};
    if (const auto tok = ck.tokenizerPath()) {
        const auto t = core::loadTokenizer(*tok);
        card["tokenizer"] = {{"path", tok->string()}, {"kind", t->kind()}, {"vocab_size", t->vocabSize()}};
    }
    return card;
}

} // namespace

int cmdInfo(const QStringList &args)
{
    QCommandLineParser p;
    parse(p, args,
          "Print a JSON card: for a model its architecture, shapes, RoPE, tokenizer, fingerprint and memory "
          "estimate; for an experiment file (.h5) its provenance, models, storage and prompt count.",
          "PATH",
          "HF model directory (or its config.json), .gguf file, llama2.c .bin checkpoint, sentence-encoder "
          "directory or GGUF, or experiment .h5 file.");
    if (p.positionalArguments().size() != 1)
        throw UsageError{"expected exactly one PATH"};
    const fs::path path = str(p.positionalArguments().first());
    json card;
    if (path.extension() == ".h5" || path.extension() == ".hdf5") {
        card = experimentCard(path);
    } else if (core::isEncoderModel(path)) { // a sentence-embedding model (BERT family)
        card = encoderCard(path);
    } else {
        const auto ck = core::Checkpoint::open(path);
        card = modelCard(ck, ck.tokenizerPath());
    }
    std::printf("%s\n", card.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
}

int cmdUpgrade(const QStringList &args)
{
    QCommandLineParser p;
    parse(p, args,
          "Rewrite an experiment file of an older kvwb (schema kvwb/1) as kvwb/2: fixed-size strings instead "
          "of variable-length ones, and a CRC-32 of every prompt's KV rows. Works on a copy beside the file "
          "and replaces the file only when the copy is complete; a kvwb/2 file is left as it is.",
          "FILE", "Experiment .h5 file.");
    if (p.positionalArguments().size() != 1)
        throw UsageError{"expected exactly one FILE"};
    const fs::path path = str(p.positionalArguments().first());
    const core::UpgradeResult r = core::upgradeExperiment(path);
    if (!r.upgraded)
        std::printf("%s: already %s, nothing to do\n", path.c_str(), r.fromSchema.c_str());
    else
        std::printf("%s: upgraded %s -> %s (%d attributes and %d string datasets rewritten, checksums for "
                    "%d prompts)\n",
                    path.c_str(), r.fromSchema.c_str(), core::kExperimentSchema, r.attributes,
                    r.stringDatasets, r.checksummedPrompts);
    return 0;
}

int cmdTokenize(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption(
        {"tokenizer", "tokenizer.json, tokenizer.model, tokenizer.bin, or a model directory.", "PATH"});
    p.addOption({"text", "Text to encode.", "STR"});
    p.addOption({"text-file", "File whose whole contents are encoded.", "FILE"});
    p.addOption({"add-special", "Add the tokenizer's special tokens (e.g. BOS)."});
    p.addOption({"json", "Print JSON with ids and pieces."});
    parse(p, args, "Encode text and print the token ids.");
    if (!p.isSet("tokenizer"))
        throw UsageError{"--tokenizer is required"};
    if (p.isSet("text") == p.isSet("text-file"))
        throw UsageError{"give exactly one of --text or --text-file"};
    const std::string text =
        p.isSet("text") ? str(p.value("text")) : readTextFile(p.value("text-file"), core::kMaxTextBytes);
    const auto tok = core::loadTokenizer(str(p.value("tokenizer")));
    const auto ids = tok->encode(text, p.isSet("add-special"));
    if (p.isSet("json")) {
        json j = {{"ids", ids}, {"count", ids.size()}, {"kind", tok->kind()}};
        json ps = json::array();
        for (int id : ids)
            ps.push_back(tok->piece(id));
        j["pieces"] = ps;
        std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    } else {
        std::string line;
        for (size_t i = 0; i < ids.size(); ++i)
            line += (i ? " " : "") + std::to_string(ids[i]);
        std::printf("%s\n", line.c_str());
    }
    return 0;
}

// Length of the longest prefix of s that ends on a UTF-8 character boundary.
int cmdMakeModel(const QStringList &args)
{
    QCommandLineParser p;
    QStringList presets;
    for (const auto &n : core::randomModelPresetNames())
        presets << QString::fromStdString(n);
    p.addOption({"preset", "One of: " + presets.join(", ") + " (default tiny).", "NAME", "tiny"});
    p.addOption({"out", "Output directory (HF layout).", "DIR"});
    p.addOption({"seed", "Weight seed (default 1).", "S", "1"});
    p.addOption(
        {"weight-dtype",
         "F32 (default), F16 or BF16 safetensors; with --format gguf also Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
         "Q4_K, Q5_K, Q6_K.",
         "DTYPE", "F32"});
    p.addOption({"format", "hf (default: a directory) or gguf (one .gguf file at --out).", "FORMAT", "hf"});
    p.addOption(
        {"tokenizer",
         "A tokenizer.json to ship instead of the byte-level one (e.g. the real model's for a preset of "
         "its geometry); it must fit the preset's vocabulary, and its BOS and end-of-text ids go into "
         "config.json.",
         "FILE"});
    addForceOption(p);
    parse(p, args,
          "Write a random-weight Llama-family model (config.json, model.safetensors, tokenizer.json; or one "
          "GGUF file) for smoke tests and benchmarks.");
    if (!p.isSet("out"))
        throw UsageError{"--out is required"};
    auto spec = core::randomModelPreset(str(p.value("preset")));
    spec.seed = uint64_t(intOption(p, "seed", 1, 0));
    std::string tokenizerJson; // empty: the byte-level tokenizer
    if (p.isSet("tokenizer")) {
        const fs::path path = str(p.value("tokenizer"));
        if (path.extension() != ".json")
            throw UsageError{"--tokenizer takes a tokenizer.json, not " + path.string()};
        const auto tok = core::loadTokenizer(path);
        core::checkTokenizerFitsModel(*tok, spec.config, path.string());
        tokenizerJson = core::text::readWholeFile(path, uint64_t(64) << 20);
        // the BOS it adds (none for Qwen), not a piece that merely has the name
        const auto with = tok->encode("a", true), without = tok->encode("a", false);
        spec.config.bosTokenId =
            with.size() > without.size() ? std::optional<int>(with.front()) : std::nullopt;
        spec.config.eosTokenIds.clear();
        for (const char *end : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>", "<eos>"})
            if (const auto id = tok->pieceToId(end)) {
                spec.config.eosTokenIds = {*id};
                break;
            }
        if (spec.config.eosTokenIds.empty() && tok->eosId())
            spec.config.eosTokenIds = {*tok->eosId()};
    }
    const std::string format = str(p.value("format"));
    if (format == "gguf") {
        const core::DType type = ggufWeightType(str(p.value("weight-dtype")));
        const fs::path out = outputFileOption(p, "out");
        fs::path dir = out;
        dir += ".hf.kvwb-tmp";
        std::error_code ec;
        fs::remove_all(dir, ec);
        const core::TempPathGuard removeDir(dir); // also when writing fails half-way
        // a real geometry goes through bf16 (half the disk; its values are drawn at bf16 precision anyway)
        core::writeRandomHfModel(dir, spec, spec.streamed ? "BF16" : "F32", tokenizerJson);
        writeGgufFrom(core::Checkpoint::open(dir), out, type);
    } else if (format == "hf") {
        core::writeDirectoryAtomic(str(p.value("out")), "--out", p.isSet("force"), [&](const fs::path &tmp) {
            core::writeRandomHfModel(tmp, spec, str(p.value("weight-dtype")), tokenizerJson);
        });
    } else {
        throw UsageError{"--format must be hf or gguf, not " + format};
    }
    std::printf("wrote %s (%s, %.2fM parameters)\n", qPrintable(p.value("out")),
                qPrintable(p.value("preset")), spec.config.parameterCount() / 1e6);
    return 0;
}

int cmdConvert(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"model", "Model to convert (HF directory, .gguf file or llama2.c .bin).", "PATH"});
    p.addOption({"out", "Output HF directory, or .gguf file with --to gguf.", "PATH"});
    p.addOption({"to", "hf (default) or gguf.", "FORMAT", "hf"});
    p.addOption(
        {"weight-type",
         "With --to gguf: F32 (default), F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K for "
         "the matrices (norms and biases stay F32).",
         "TYPE", "F32"});
    addForceOption(p);
    parse(
        p, args,
        "Convert a checkpoint to a Hugging Face directory (llama2.c and GGUF llama q/k rows are permuted to "
        "rotate-half RoPE order; GGUF tensors are dequantised to F32), or to a GGUF file with the tokenizer "
        "in its metadata.");
    if (!p.isSet("model") || !p.isSet("out"))
        throw UsageError{"--model and --out are required"};
    const auto ck = core::Checkpoint::open(str(p.value("model")));
    const std::string to = str(p.value("to"));
    if (to == "gguf") {
        const core::DType type = ggufWeightType(str(p.value("weight-type")));
        writeGgufFrom(ck, outputFileOption(p, "out"), type);
    } else if (to == "hf") {
        core::writeDirectoryAtomic(str(p.value("out")), "--out", p.isSet("force"), [&](const fs::path &tmp) {
            core::convertToHf(ck, tmp);
            if (ck.format() == core::CheckpointFormat::Gguf && ck.tokenizerPath()) {
                const auto t = core::ggufTokenizerFile(core::GgufFile::open(ck.path()));
                core::writeFileAtomic(tmp / t.name, t.bytes);
            }
        });
    } else {
        throw UsageError{"--to must be hf or gguf, not " + to};
    }
    std::printf("wrote %s\n", qPrintable(p.value("out")));
    return 0;
}

} // namespace kvwb::app
