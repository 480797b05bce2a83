#include "app/cli/cli_capture.h"

#include "app/cli/engine_options.h"
#include "app/jobs/capture_job.h"
#include "core/store/experiment_file.h"
#include "core/tokenize/token_alignment.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/error.h"
#include "core/util/sha256.h"
#include "core/util/system_memory.h"
#include "gpu/capture/capture.h"
#include "gpu/model/device.h"
#include "gpu/model/model.h"

#include <QDateTime>
#include <QUuid>
#include <QtGlobal>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <random>

namespace kvwb::app {

using namespace kvwb::app::cli;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

core::FloatType parseStorage(const QString &s)
{
    if (const auto kind = core::parseFloatType(str(s)))
        return *kind;
    throw UsageError{"--dtype expects f32, f16 or bf16, got '" + str(s) + "'"};
}

struct LoadedPair
{
    std::unique_ptr<gpu::Model> a, b;
    std::unique_ptr<core::Tokenizer> tokA, tokB;
    fs::path tokPathA, tokPathB;
};

LoadedPair loadPair(const fs::path &pathA, const fs::path &pathB, const gpu::LoadOptions &o)
{
    LoadedPair p;
    p.a = gpu::Model::load(pathA, o);
    p.b = gpu::Model::load(pathB, o);
    p.tokPathA = modelTokenizerPath(*p.a);
    p.tokPathB = modelTokenizerPath(*p.b);
    p.tokA = core::loadTokenizer(p.tokPathA);
    p.tokB = core::loadTokenizer(p.tokPathB);
    return p;
}

// "0,5,8-11" -> {0, 5, 8, 9, 10, 11}, sorted and unique, each below numLayers; an unset flag is
// empty (every layer), which the file records as the full list.
std::vector<int> layerList(const QCommandLineParser &p, const char *flag, int numLayers)
{
    if (!p.isSet(flag))
        return {};
    const QString text = p.value(flag);
    const auto usage = [&](const std::string &why) {
        return UsageError{fmt::format("--{} {}: {}", flag, str(text), why)};
    };
    std::vector<int> layers;
    for (const QString &part : text.split(',', Qt::SkipEmptyParts)) {
        const QStringList ends = part.trimmed().split('-');
        bool okLo = false, okHi = false;
        int lo = -1, hi = -1;
        if (ends.size() == 1) {
            lo = hi = ends.front().trimmed().toInt(&okLo);
            okHi = okLo;
        } else if (ends.size() == 2) {
            lo = ends.front().trimmed().toInt(&okLo);
            hi = ends.back().trimmed().toInt(&okHi);
        }
        if (!okLo || !okHi || lo < 0 || hi < lo)
            throw usage(
                fmt::format("expects comma-separated layer indices or ranges like 0-3, got '{}'", str(part)));
        if (hi >= numLayers)
            throw usage(fmt::format("layer {} is out of range: the model has {} layers (0-{})", hi, numLayers,
                                    numLayers - 1));
        for (int l = lo; l <= hi; ++l)
            layers.push_back(l);
    }
    if (layers.empty())
        throw usage("no layers");
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    return layers;
}

} // namespace

int cmdCapture(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"model-a", "Source model (HF directory, .gguf file or llama2.c .bin).", "PATH"});
    p.addOption({"model-b", "Target model.", "PATH"});
    p.addOption({"prompts",
                 "Prompts: text (one per line) or JSONL (workload/corpus: 'prompt', label 'intent').",
                 "FILE"});
    p.addOption(
        {"out", "Experiment file (HDF5); appended to when it exists and holds the same models.", "EXP.h5"});
    p.addOption({"dtype", "KV storage: f32 (default), f16 or bf16.", "DTYPE", "f32"});
    p.addOption({"compress", "Deflate (+ shuffle) the KV datasets."});
    p.addOption({"compress-level", "Deflate level 1-9 (default 4).", "N", "4"});
    p.addOption({"max-tokens", "Truncate prompts to N tokens (default: the model's context).", "N"});
    p.addOption({"post-rope", "Store keys after RoPE (default: before)."});
    p.addOption({"layers-a", "Capture only these layers of A, e.g. 0,5,8-11 (default: all).", "LIST"});
    p.addOption({"layers-b", "Capture only these layers of B (default: all).", "LIST"});
    p.addOption({"limit", "Capture at most N prompts.", "N"});
    addEngineOptions(p, {"compute-dtype", "Engine dtype: f32 (default), bf16, f16 (CUDA).", "DTYPE", "f32"},
                     "Dequantise GGUF quantised weights at load instead of running them in their blocks on "
                     "the CPU.");
    p.addOption({{"pair-policy", "align-policy"}, // --align-policy: the older name, still accepted
                 "Where A and B tokenise a prompt differently, which overlapping A token each B token pairs "
                 "with: last (default: the one covering the end of B's token), first or longest.",
                 "POLICY",
                 "last"});
    p.addOption({"json", "Print the summary as JSON."});
    addPromptFileOptions(p);
    parse(p, args,
          "Run both models over a prompt set and store each layer's (or the selected layers') K and V in an "
          "HDF5 experiment file.");
    for (const char *req : {"model-a", "model-b", "prompts", "out"})
        if (!p.isSet(req))
            throw UsageError{std::string("--") + req + " is required"};
    const auto o = loadOptions(p, "compute-dtype");
    gpu::CaptureOptions co;
    co.file.storage = parseStorage(p.value("dtype"));
    co.file.compress = p.isSet("compress") ? intOption(p, "compress-level", 4, 1) : 0;
    if (co.file.compress > 9)
        throw UsageError{"--compress-level expects 1-9"};
    co.file.keyForm = p.isSet("post-rope") ? core::KeyForm::PostRope : core::KeyForm::PreRope;
    co.maxTokens = intOption(p, "max-tokens", 0, 1);
    if (const auto policy = core::parseAlignPolicy(str(p.value("pair-policy"))))
        co.alignPolicy = *policy;
    else
        throw UsageError{"--pair-policy expects first, last or longest"};
    std::vector<std::string> warnings;
    std::vector<gpu::CapturePrompt> prompts;
    for (auto &t : readPromptFile(p, str(p.value("prompts")), warnings))
        prompts.push_back({std::move(t.text), std::move(t.label), {}, {}});
    if (p.isSet("limit"))
        prompts.resize(std::min(prompts.size(), size_t(intOption(p, "limit", 0, 1))));
    auto pair = loadPair(str(p.value("model-a")), str(p.value("model-b")), o);
    co.layersA = layerList(p, "layers-a", pair.a->config().numLayers);
    co.layersB = layerList(p, "layers-b", pair.b->config().numLayers);
    const fs::path out = str(p.value("out"));
    const bool asJson = p.isSet("json");
    std::optional<InterruptScope> ctrlC(std::in_place);
    const auto started = std::chrono::steady_clock::now();
    const auto fc = jobs::captureIntoFile(
        out, *pair.a, *pair.tokA, *pair.b, *pair.tokB, prompts, co, str(p.value("prompts")),
        [&](int done, int total) {
            if (!asJson && (done % 10 == 0 || done == total)) {
                // the time left at the pace so far (prompts of the same file are alike in length)
                const double s =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
                if (done > 0 && done < total)
                    std::fprintf(stderr, "\rcaptured %d/%d prompts, about %.0f s left   ", done, total,
                                 s / done * (total - done));
                else
                    std::fprintf(stderr, "\rcaptured %d/%d prompts in %.1f s          ", done, total, s);
            }
            return !InterruptScope::interrupted();
        },
        [&](const jobs::CaptureProjection &projected) {
            if (!asJson)
                std::fprintf(stderr,
                             "capture: %zu prompts, %lld tokens of A and %lld of B: about "
                             "%.1f MB of KV (%s, uncompressed); %.1f MB of working memory per prompt\n",
                             prompts.size(), (long long)projected.tokensA, (long long)projected.tokensB,
                             double(projected.bytes) / 1e6, core::floatTypeName(co.file.storage),
                             double(projected.workingSetBytes) / 1e6);
        });
    ctrlC.reset();
    const auto &r = fc.result;
    const bool appending = fc.appended;
    if (!asJson)
        std::fprintf(stderr, "\n");
    warnings.insert(warnings.end(), fc.warnings.begin(), fc.warnings.end());
    for (const auto &w : warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    const json summary = {{"out", out.string()},
                          {"appended", appending},
                          {"projected_bytes", fc.projected.bytes},
                          {"working_set_bytes", fc.projected.workingSetBytes},
                          {"prompts_written", r.promptsWritten},
                          {"first_prompt", r.firstPrompt},
                          {"cancelled", r.cancelled},
                          {"tokens_a", r.tokensA},
                          {"tokens_b", r.tokensB},
                          {"prompts_aligned", r.promptsAligned},
                          {"align_policy", core::alignPolicyName(co.alignPolicy)},
                          {"prefill_ms_a", r.timings.prefillMsA},
                          {"prefill_ms_b", r.timings.prefillMsB},
                          {"read_ms", r.timings.readMs},
                          {"write_ms", r.timings.writeMs},
                          {"file_bytes", fs::file_size(out)},
                          {"peak_rss_bytes", core::peakResidentBytes().value_or(0)},
                          {"warnings", warnings.size()}};
    if (asJson)
        std::printf("%s\n", summary.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    else
        std::printf(
            "%s: %d prompts (%lld + %lld tokens) %s, file %.2f MB; prefill %.0f + %.0f ms, write %.0f ms; "
            "peak resident %.0f MB\n",
            out.c_str(), r.promptsWritten, (long long)r.tokensA, (long long)r.tokensB,
            appending ? "appended" : "written", fs::file_size(out) / 1e6, r.timings.prefillMsA,
            r.timings.prefillMsB, r.timings.writeMs, double(core::peakResidentBytes().value_or(0)) / 1e6);
    return r.cancelled ? 130 : 0;
}

int cmdBenchCapture(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"model-a", "Source model (default: the demo project's models/a).", "PATH"});
    p.addOption({"model-b", "Target model (default: the demo project's models/b).", "PATH"});
    p.addOption({"lengths", "Prompt lengths in tokens (default 128,512,2048).", "LIST", "128,512,2048"});
    p.addOption({"prompts", "Prompts per length (default 8).", "N", "8"});
    p.addOption({"dir", "Where to write the temporary files (default: the system temp dir).", "DIR"});
    p.addOption({"threads", "Intra-op threads (default: all cores).", "N"});
    parse(p, args,
          "Measure capture cost: bare prefill of both models vs writing their KV to an experiment file, "
          "uncompressed and compressed.");
    const fs::path root = demoProjectDir() / "models";
    const fs::path pathA = p.isSet("model-a") ? fs::path(str(p.value("model-a"))) : root / "a";
    const fs::path pathB = p.isSet("model-b") ? fs::path(str(p.value("model-b"))) : root / "b";
    gpu::LoadOptions o;
    o.threads = intOption(p, "threads", 0, 0, gpu::kMaxThreads);
    auto pair = loadPair(pathA, pathB, o);
    const auto lengths = parseIdList(p.value("lengths"), "--lengths");
    const int n = intOption(p, "prompts", 8, 1);
    const fs::path dir = p.isSet("dir") ? fs::path(str(p.value("dir"))) : fs::temp_directory_path();
    const auto infoA = gpu::describeModel(core::ModelRole::A, *pair.a, pair.tokPathA);
    const auto infoB = gpu::describeModel(core::ModelRole::B, *pair.b, pair.tokPathB);
    std::printf("capture benchmark: A %s, B %s, %d prompts per row, f32 storage, device %s\n\n",
                pathA.c_str(), pathB.c_str(), n, gpu::describeDevice(o.device).c_str());
    std::printf("| tokens | compress | prefill A+B ms | write ms | write MB/s | overhead vs prefill | "
                "bytes/token |\n");
    std::printf("|-------:|:--------:|---------------:|---------:|-----------:|--------------------:|--------"
                "----:|\n");
    std::mt19937_64 rng(7);
    for (int len : lengths) {
        if (len > pair.a->contextLimit() || len > pair.b->contextLimit())
            std::fprintf(stderr, "note: %d tokens is past a model's context (%d/%d): timing only\n", len,
                         pair.a->contextLimit(), pair.b->contextLimit());
        std::vector<gpu::CapturePrompt> prompts(static_cast<size_t>(n));
        for (auto &pr : prompts) {
            pr.text = fmt::format("random {} tokens", len);
            for (int i = 0; i < len; ++i) {
                pr.idsA.push_back(3 + int(rng() % uint64_t(pair.a->config().vocabSize - 3)));
            }
            pr.idsB = pr.idsA;
        }
        for (int compress : {0, 4}) {
            const fs::path file = dir / fmt::format("kvwb-bench-capture-{}-{}.h5", len, compress);
            fs::remove(file);
            gpu::CaptureOptions co;
            co.file.compress = compress;
            {
                auto writer = core::ExperimentWriter::create(
                    file, co.file, jobs::runProvenance(o, json{{"bench", len}}.dump()), infoA, infoB);
                const auto r =
                    gpu::capturePrompts(writer, *pair.a, *pair.tokA, *pair.b, *pair.tokB, prompts, co);
                writer.close();
                const double prefill = r.timings.prefillMsA + r.timings.prefillMsB;
                const double mbps = r.timings.kvBytes / 1e6 / (r.timings.writeMs / 1000.0);
                const double perToken = double(fs::file_size(file)) / double(r.tokensA);
                std::printf("| %6d | %8s | %14.1f | %8.1f | %10.1f | %18.1f%% | %11.0f |\n", len,
                            compress ? "deflate4" : "off", prefill, r.timings.writeMs, mbps,
                            100.0 * (r.timings.writeMs + r.timings.readMs) / prefill, perToken);
                std::fflush(stdout);
            }
            fs::remove(file);
        }
    }
    std::printf(
        "\nwrite MB/s counts float32 K/V bytes handed to the writer; overhead = (read-out + write) / bare "
        "prefill; bytes/token = file size / tokens (both models).\n");
    return 0;
}

} // namespace kvwb::app
