#include "app/cli/cli.h"
#include "app/cli/cli_align.h"
#include "app/cli/cli_capture.h"
#include "app/cli/cli_replay.h"
#ifndef KVWB_HEADLESS
#include "app/cli/cli_report.h"
#endif
#include "app/cli/cli_tiers.h"
#include "app/cli/cli_train.h"
#include "app/cli/cli_util.h"
#include "app/cli/cli_wordnet.h"

#include "core/model/checkpoint.h"
#include "core/model/gguf_model.h"
#include "core/model/memory_estimate.h"
#include "core/model/random_model.h"
#include "core/store/experiment_file.h"
#include "core/store/experiment_upgrade.h"
#include "core/tokenize/gguf_tokenizer.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "gpu/model/device.h"
#include "gpu/model/model.h"

#include <QCommandLineParser>
#include <QFile>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <new>
#include <random>
#include <stdexcept>
#include <thread>

namespace kvwb::app {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace kvwb::app::cli;

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
    const int ctx = c.maxPositionEmbeddings > 0 ? c.maxPositionEmbeddings : 2048;
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
    return j;
}

int cmdInfo(const QStringList &args)
{
    QCommandLineParser p;
    parse(p, args,
          "Print a JSON card: for a model its architecture, shapes, RoPE, tokenizer, fingerprint and memory "
          "estimate; for an experiment file (.h5) its provenance, models, storage and prompt count.",
          "PATH",
          "HF model directory (or its config.json), .gguf file, llama2.c .bin checkpoint, or experiment .h5 "
          "file.");
    if (p.positionalArguments().size() != 1)
        throw UsageError{"expected exactly one PATH"};
    const fs::path path = str(p.positionalArguments().first());
    const json card = path.extension() == ".h5" || path.extension() == ".hdf5" ? experimentCard(path) : [&] {
        const auto ck = core::Checkpoint::open(path);
        return modelCard(ck, ck.tokenizerPath());
    }();
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
    const std::string text = p.isSet("text") ? str(p.value("text")) : readTextFile(p.value("text-file"));
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
size_t completeUtf8Prefix(const std::string &s)
{
    size_t n = s.size();
    size_t i = n;
    int back = 0;
    while (i > 0 && back < 4) {
        const unsigned char c = static_cast<unsigned char>(s[i - 1]);
        if ((c & 0xc0) != 0x80) { // lead byte or ASCII
            const int need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
            return (n - (i - 1)) >= size_t(need) ? n : i - 1;
        }
        --i;
        ++back;
    }
    return n;
}

int cmdGenerate(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"model", "HF model directory, .gguf file or llama2.c .bin.", "PATH"});
    p.addOption({"tokenizer", "Tokenizer (default: the one beside the model).", "PATH"});
    p.addOption({"prompt", "Prompt text (encoded with the model's special tokens, e.g. BOS).", "STR"});
    p.addOption({"prompt-ids", "Prompt as comma-separated token ids.", "IDS"});
    p.addOption({"max-tokens", "Tokens to generate (default 64).", "N", "64"});
    p.addOption({"temperature", "0 = greedy (default).", "T", "0"});
    p.addOption({"top-k", "Sample from the K most likely tokens (0 = off).", "K", "0"});
    p.addOption({"top-p", "Nucleus sampling mass (1 = off).", "P", "1"});
    p.addOption({"seed", "Sampling seed (default 0).", "S", "0"});
    p.addOption({"stop", "Extra stop token ids, comma-separated.", "IDS"});
    p.addOption({"ignore-eos", "Do not stop at the model's end-of-sequence tokens."});
    p.addOption({"json", "Print one JSON object instead of streaming text."});
    addEngineOptions(p);
    parse(p, args, "Generate text from a prompt, streaming tokens as they are produced.");
    if (!p.isSet("model"))
        throw UsageError{"--model is required"};
    if (p.isSet("prompt") == p.isSet("prompt-ids"))
        throw UsageError{"give exactly one of --prompt or --prompt-ids"};
    gpu::GenerateOptions go;
    go.maxTokens = intOption(p, "max-tokens", 64, 0);
    go.sampling.temperature = doubleOption(p, "temperature", 0.0, 0.0, 100.0);
    go.sampling.topK = intOption(p, "top-k", 0, 0);
    go.sampling.topP = doubleOption(p, "top-p", 1.0, 0.0, 1.0);
    if (p.isSet("seed")) {
        bool ok = false;
        go.sampling.seed = p.value("seed").toULongLong(&ok);
        if (!ok)
            throw UsageError{"--seed expects a non-negative integer"};
    }
    if (p.isSet("stop"))
        go.stopTokens = parseIdList(p.value("stop"), "--stop");
    go.stopAtEos = !p.isSet("ignore-eos");
    const auto opts = loadOptions(p);

    const auto ck = core::Checkpoint::open(str(p.value("model")));
    std::unique_ptr<core::Tokenizer> tok;
    std::optional<fs::path> tokPath =
        p.isSet("tokenizer") ? std::optional<fs::path>(str(p.value("tokenizer"))) : ck.tokenizerPath();
    if (tokPath) {
        tok = core::loadTokenizer(*tokPath);
        core::checkTokenizerFitsModel(*tok, ck.config(), tokPath->string());
    }
    std::vector<int> prompt;
    if (p.isSet("prompt")) {
        if (!tok)
            throw core::Error(core::ErrorCode::Tokenizer,
                              ck.path().string() +
                                  ": no tokenizer beside the model; pass --tokenizer or --prompt-ids");
        prompt = tok->encode(str(p.value("prompt")), true);
    } else {
        prompt = parseIdList(p.value("prompt-ids"), "--prompt-ids");
    }
    auto model = gpu::Model::load(ck, opts);
    const bool asJson = p.isSet("json");
    // Streams only text that can no longer change: decoding more ids may complete a UTF-8 sequence
    // (byte-level BPE) or replace a U+FFFD placeholder (SentencePiece byte fallback), so hold back an
    // incomplete tail and a trailing U+FFFD, and print only when the new text extends what was shown.
    std::string printed;
    std::vector<int> soFar;
    auto stableText = [&](const std::string &text) {
        size_t upto = completeUtf8Prefix(text);
        static const std::string replacement = "\xEF\xBF\xBD";
        while (upto >= 3 && text.compare(upto - 3, 3, replacement) == 0)
            upto -= 3;
        return text.substr(0, upto);
    };
    auto onToken = [&](int id, float) {
        if (asJson || !tok)
            return true;
        soFar.push_back(id);
        const std::string stable = stableText(tok->decode(soFar, /*skipSpecial=*/true));
        if (stable.size() > printed.size() && stable.compare(0, printed.size(), printed) == 0) {
            std::fwrite(stable.data() + printed.size(), 1, stable.size() - printed.size(), stdout);
            std::fflush(stdout);
            printed = stable;
        }
        return true;
    };
    const auto r = model->generate(prompt, go, onToken);
    const std::string text = tok ? tok->decode(r.outputIds, /*skipSpecial=*/true) : std::string();
    if (asJson) {
        json j = {{"prompt_ids", prompt},
                  {"output_ids", r.outputIds},
                  {"text", text},
                  {"logprobs", r.logprobs},
                  {"stop_reason", gpu::stopReasonName(r.stopReason)},
                  {"prompt_tokens", r.stats.promptTokens},
                  {"generated_tokens", r.stats.generatedTokens},
                  {"ttft_ms", r.stats.ttftMs},
                  {"prefill_ms", r.stats.prefillMs},
                  {"decode_ms", r.stats.decodeMs},
                  {"prefill_tok_s", r.stats.prefillTokPerS},
                  {"decode_tok_s", r.stats.decodeTokPerS},
                  {"device", gpu::deviceName(opts.device)},
                  {"dtype", gpu::computeTypeName(opts.dtype)},
                  {"fingerprint", ck.fingerprint()}};
        std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    } else {
        if (tok) {
            if (text.compare(0, printed.size(), printed) == 0)
                std::fwrite(text.data() + printed.size(), 1, text.size() - printed.size(), stdout);
            else // the stream showed a placeholder that later bytes replaced: print the final text
                std::printf("\n%s", text.c_str());
            std::printf("\n");
        } else {
            std::string line;
            for (size_t i = 0; i < r.outputIds.size(); ++i)
                line += (i ? " " : "") + std::to_string(r.outputIds[i]);
            std::printf("%s\n", line.c_str());
        }
        std::fflush(stdout);
        std::fprintf(stderr,
                     "[%d prompt + %d generated tokens, stop: %s] TTFT %.1f ms, prefill %.1f tok/s, decode "
                     "%.1f tok/s\n",
                     r.stats.promptTokens, r.stats.generatedTokens, gpu::stopReasonName(r.stopReason),
                     r.stats.ttftMs, r.stats.prefillTokPerS, r.stats.decodeTokPerS);
    }
    return 0;
}

int cmdBench(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"lengths", "Prompt lengths (default 128,512,2048; capped at the model's context).", "LIST",
                 "128,512,2048"});
    p.addOption({"decode-tokens", "Decode steps timed after each prefill (default 32).", "N", "32"});
    p.addOption({"repeats", "Runs per length; the median is reported (default 3).", "N", "3"});
    p.addOption({"json", "Print JSON rows instead of a table."});
    addEngineOptions(p);
    parse(p, args, "Measure prefill and decode throughput at several prompt lengths.", "MODEL",
          "HF model directory, .gguf file or llama2.c .bin.");
    if (p.positionalArguments().size() != 1)
        throw UsageError{"expected exactly one MODEL path"};
    const auto opts = loadOptions(p);
    const int decodeTokens = intOption(p, "decode-tokens", 32, 1);
    const int repeats = intOption(p, "repeats", 3, 1);
    std::vector<int> lengths = parseIdList(p.value("lengths"), "--lengths");
    auto model = gpu::Model::load(str(p.positionalArguments().first()), opts);
    const auto &c = model->config();
    const int ctx = c.maxPositionEmbeddings > 0 ? c.maxPositionEmbeddings : 1 << 30;
    std::mt19937_64 rng(1);
    json rows = json::array();
    const bool asJson = p.isSet("json");
    if (!asJson) {
        std::printf("model: %s (%s, %.2fM params, %d layers, %d/%d heads, head dim %d)\n",
                    c.architecture.c_str(), model->checkpoint().path().c_str(), c.parameterCount() / 1e6,
                    c.numLayers, c.numHeads, c.numKvHeads, c.headDim);
        std::printf("device: %s, dtype %s, torch %s\n\n", gpu::describeDevice(opts.device).c_str(),
                    gpu::computeTypeName(opts.dtype), gpu::torchVersion().c_str());
        std::printf("| prompt tokens | prefill ms | prefill tok/s | decode tok/s | KV MiB |\n");
        std::printf("|--------------:|-----------:|--------------:|-------------:|-------:|\n");
    }
    for (int len : lengths) {
        const int n = std::min(len, ctx - decodeTokens);
        if (n < 1)
            continue;
        std::vector<double> prefillMs, decodeTps;
        int64_t kvBytes = 0;
        for (int rep = 0; rep < repeats; ++rep) {
            std::vector<int> ids(static_cast<size_t>(n));
            for (int &id : ids)
                id = int(rng() % uint64_t(c.vocabSize));
            auto cache = model->newCache();
            const auto t0 = std::chrono::steady_clock::now();
            auto logits = model->forward(ids, cache);
            const auto t1 = std::chrono::steady_clock::now();
            int next = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
            for (int s = 0; s < decodeTokens; ++s) {
                logits = model->forward({next}, cache);
                next = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
            }
            const auto t2 = std::chrono::steady_clock::now();
            prefillMs.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            decodeTps.push_back(decodeTokens / std::chrono::duration<double>(t2 - t1).count());
            kvBytes = cache.bytes();
        }
        std::sort(prefillMs.begin(), prefillMs.end());
        std::sort(decodeTps.begin(), decodeTps.end());
        const double pm = prefillMs[prefillMs.size() / 2], dt = decodeTps[decodeTps.size() / 2];
        const double pt = n / (pm / 1000.0);
        if (asJson)
            rows.push_back({{"prompt_tokens", n},
                            {"prefill_ms", pm},
                            {"prefill_tok_s", pt},
                            {"decode_tok_s", dt},
                            {"kv_bytes", kvBytes}});
        else
            std::printf("| %13d | %10.1f | %13.1f | %12.1f | %6.2f |\n", n, pm, pt, dt, kvBytes / 1048576.0);
        std::fflush(stdout);
    }
    if (asJson)
        std::printf("%s\n", json{{"device", gpu::deviceName(opts.device)},
                                 {"dtype", gpu::computeTypeName(opts.dtype)},
                                 {"threads",
                                  opts.threads > 0 ? opts.threads : int(std::thread::hardware_concurrency())},
                                 {"rows", rows}}
                                .dump(2, ' ', false, json::error_handler_t::replace)
                                .c_str());
    return 0;
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
    p.addOption({"force", "Replace --out when it exists and is not empty."});
    parse(p, args,
          "Write a random-weight Llama-family model (config.json, model.safetensors, tokenizer.json; or one "
          "GGUF file) for smoke tests and benchmarks.");
    if (!p.isSet("out"))
        throw UsageError{"--out is required"};
    auto spec = core::randomModelPreset(str(p.value("preset")));
    spec.seed = uint64_t(intOption(p, "seed", 1, 0));
    const std::string format = str(p.value("format"));
    if (format == "gguf") {
        const core::DType type = ggufWeightType(str(p.value("weight-dtype")));
        const fs::path out = str(p.value("out"));
        if (fs::exists(out) && !p.isSet("force"))
            throw UsageError{out.string() + " exists; pass --force to replace it"};
        fs::path dir = out;
        dir += ".hf.tmp";
        std::error_code ec;
        fs::remove_all(dir, ec);
        core::writeRandomHfModel(dir, spec, "F32");
        try {
            writeGgufFrom(core::Checkpoint::open(dir), out, type);
        } catch (...) {
            fs::remove_all(dir, ec);
            throw;
        }
        fs::remove_all(dir, ec);
    } else if (format == "hf") {
        core::writeDirectoryAtomic(
            str(p.value("out")), p.isSet("force"), "--force",
            [&](const fs::path &tmp) { core::writeRandomHfModel(tmp, spec, str(p.value("weight-dtype"))); });
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
    p.addOption({"force", "Replace --out when it exists."});
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
        const fs::path out = str(p.value("out"));
        if (fs::exists(out) && !p.isSet("force"))
            throw UsageError{out.string() + " exists; pass --force to replace it"};
        writeGgufFrom(ck, out, type);
    } else if (to == "hf") {
        core::writeDirectoryAtomic(
            str(p.value("out")), p.isSet("force"), "--force", [&](const fs::path &tmp) {
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

} // namespace

const std::vector<Subcommand> &subcommands()
{
    static const std::vector<Subcommand> all = {
        {"info",
         "Print a model card (JSON) for an HF directory, GGUF file or llama2.c checkpoint, or an experiment "
         "file.",
         cmdInfo},
        {"upgrade", "Rewrite an experiment file of an older kvwb (schema kvwb/1) as kvwb/2.", cmdUpgrade},
        {"tokenize", "Encode text with a tokenizer and print the ids.", cmdTokenize},
        {"generate", "Generate from a prompt (greedy or sampled), with TTFT and tok/s.", cmdGenerate},
        {"bench", "Prefill/decode throughput at several prompt lengths.", cmdBench},
        {"make-model", "Write a random-weight model for smoke tests and benchmarks.", cmdMakeModel},
        {"convert", "Convert a checkpoint to a Hugging Face directory or a GGUF file.", cmdConvert},
        {"train", "Train a Llama-architecture model on a corpus (AdamW, cosine, resumable).", cmdTrain},
        {"eval-qa", "Score a model's greedy answers to corpus questions (exact match, word F1).", cmdEvalQa},
        {"capture", "Capture both models' KV caches for a prompt set into an HDF5 experiment file.",
         cmdCapture},
        {"bench-capture", "Capture cost: bare prefill vs KV writes, with and without compression.",
         cmdBenchCapture},
        {"bench-tiers", "Cache tier latency (exact, semantic, prefix tree) and HNSW recall.", cmdBenchTiers},
        {"align", "Fit layer-wise KV converters from A to B on an experiment file and store them.", cmdAlign},
        {"sweep", "Converter quality over k x lambda x calibration tokens, stored as a table.", cmdSweep},
        {"compare", "B from scratch vs B from A's converted cache vs A: KL, top-1, ROUGE-L, TTFT, gate.",
         cmdCompare},
        {"bench-transfer", "Conversion vs prefill time at several prompt lengths.", cmdBenchTransfer},
        {"replay", "Replay a workload through exact, semantic, prefix and cross-model cache tiers.",
         cmdReplay},
#ifndef KVWB_HEADLESS
        {"report", "Write an experiment's report: HTML (charts embedded), PDF, Markdown, CSV/JSON.",
         cmdReport},
#endif
        {"corpus", "Write a Q/A training corpus (JSONL) from WordNet concepts.", cmdCorpus},
        {"workload", "Write a request workload (JSONL) for cache replay: WordNet, ShareGPT or Quora pairs.",
         cmdWorkload},
    };
    return all;
}

namespace {

// An error is one line on stderr: HDF5 and foreign messages may carry newlines, and names taken
// from a file may carry control characters.
std::string oneLine(std::string s)
{
    for (char &c : s)
        if (c == '\n' || c == '\r' || c == '\t')
            c = ' ';
        else if ((unsigned char)c < 0x20 || c == 0x7f)
            c = '?';
    while (!s.empty() && s.back() == ' ')
        s.pop_back();
    return s;
}

// The arguments that name existing files or directories, for an error that cannot name its
// culprit itself ("its input").
std::string inputFiles(const QStringList &args)
{
    std::string out;
    for (qsizetype i = 1; i < args.size(); ++i) {
        std::error_code ec;
        const fs::path p = str(args[i]);
        if (!args[i].startsWith('-') && fs::exists(p, ec))
            out += (out.empty() ? "" : ", ") + p.string();
    }
    return out.empty() ? std::string("its input") : out;
}

} // namespace

int runSubcommand(const QStringList &args)
{
    const std::string name = str(args.first());
    for (const auto &c : subcommands()) {
        if (name != c.name)
            continue;
        try {
            return c.run(args);
        } catch (const HelpShown &h) {
            return h.code;
        } catch (const UsageError &e) {
            std::fprintf(stderr, "kvwb %s: %s (see kvwb %s --help)\n", c.name, oneLine(e.message).c_str(),
                         c.name);
            return 2;
        } catch (const core::Error &e) {
            std::fprintf(stderr, "kvwb %s: error [%s]: %s\n", c.name, core::errorCodeName(e.code()),
                         oneLine(e.what()).c_str());
            return 1;
        } catch (const std::bad_alloc &) {
            // An allocation sized from an input no reader bounded: say which inputs were in play.
            std::fprintf(stderr, "kvwb %s: error [resource]: out of memory while reading %s\n", c.name,
                         oneLine(inputFiles(args)).c_str());
            return 1;
        } catch (const std::length_error &e) {
            std::fprintf(stderr, "kvwb %s: error [resource]: a size read from %s is too large (%s)\n", c.name,
                         oneLine(inputFiles(args)).c_str(), oneLine(e.what()).c_str());
            return 1;
        } catch (const std::exception &e) {
            std::fprintf(stderr, "kvwb %s: internal error: %s\n", c.name, oneLine(e.what()).c_str());
            return 1;
        }
    }
    std::fprintf(stderr, "kvwb: unknown subcommand '%s' (kvwb --help lists them)\n", name.c_str());
    return 2;
}

} // namespace kvwb::app
