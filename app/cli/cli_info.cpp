#include "app/cli/cli_info.h"

#include "app/cli/cli_util.h"
#include "core/model/checkpoint.h"
#include "core/model/encoder_config.h"
#include "core/model/gguf_model.h"
#include "core/model/memory_estimate.h"
#include "core/store/experiment_file.h"
#include "core/tokenize/tokenizer.h"

#include <QCommandLineParser>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

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
               {{"dtype", core::floatTypeName(st.storage)},
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

} // namespace kvwb::app
