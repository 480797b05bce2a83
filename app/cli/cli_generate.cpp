#include "app/cli/cli_generate.h"

#include "app/cli/engine_options.h"
#include "core/model/checkpoint.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/error.h"
#include "core/util/system_memory.h"
#include "gpu/model/device.h"
#include "gpu/model/model.h"

#include <QCommandLineParser>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

namespace kvwb::app {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace kvwb::app::cli;

namespace {

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

} // namespace

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
                  {"dtype", gpu::floatTypeName(opts.dtype)},
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
    const int ctx = model->contextLimit() > 0 ? model->contextLimit() : 1 << 30;
    std::mt19937_64 rng(1);
    json rows = json::array();
    const bool asJson = p.isSet("json");
    if (!asJson) {
        std::printf("model: %s (%s, %.2fM params, %d layers, %d/%d heads, head dim %d)\n",
                    c.architecture.c_str(), model->checkpoint().path().c_str(), c.parameterCount() / 1e6,
                    c.numLayers, c.numHeads, c.numKvHeads, c.headDim);
        std::printf("device: %s, dtype %s, torch %s\n\n", gpu::describeDevice(opts.device).c_str(),
                    gpu::floatTypeName(opts.dtype), gpu::torchVersion().c_str());
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
                                 {"dtype", gpu::floatTypeName(opts.dtype)},
                                 {"kv_dtype", gpu::floatTypeName(model->kvDtype())},
                                 {"threads",
                                  opts.threads > 0 ? opts.threads : int(std::thread::hardware_concurrency())},
                                 {"rows", rows},
                                 {"weight_bytes", model->deviceBytes()},
                                 {"peak_rss_bytes", core::peakResidentBytes().value_or(0)}}
                                .dump(2, ' ', false, json::error_handler_t::replace)
                                .c_str());
    else
        std::printf("\nweights held: %.1f MB; peak resident memory (VmHWM): %.1f MB\n",
                    double(model->deviceBytes()) / 1e6, double(core::peakResidentBytes().value_or(0)) / 1e6);
    return 0;
}

} // namespace kvwb::app
