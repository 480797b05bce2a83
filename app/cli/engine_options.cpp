#include "app/cli/engine_options.h"

namespace kvwb::app::cli {

gpu::LoadOptions loadOptions(const QCommandLineParser &p, const QString &dtypeFlag)
{
    gpu::LoadOptions o;
    if (p.isSet("device")) {
        auto d = gpu::parseDevice(str(p.value("device")));
        if (!d)
            throw UsageError{"--device expects cpu or cuda, got '" + str(p.value("device")) + "'"};
        o.device = *d;
    }
    if (p.isSet(dtypeFlag)) {
        auto t = gpu::parseFloatType(str(p.value(dtypeFlag)));
        if (!t)
            throw UsageError{"--" + str(dtypeFlag) + " expects f32, bf16 or f16, got '" +
                             str(p.value(dtypeFlag)) + "'"};
        o.dtype = *t;
    }
    o.threads = intOption(p, "threads", 0, 0, gpu::kMaxThreads);
    if (p.isSet("context"))
        o.context = intOption(p, "context", 0, 1, core::kMaxPositions);
    o.dequantize = p.isSet("dequantize");
    if (p.isSet("kv-dtype")) {
        auto t = gpu::parseFloatType(str(p.value("kv-dtype")));
        if (!t)
            throw UsageError{"--kv-dtype expects f32, bf16 or f16, got '" + str(p.value("kv-dtype")) + "'"};
        o.kvDtype = *t;
    }
    if (p.isSet("prefill-chunk"))
        o.prefillChunk = intOption(p, "prefill-chunk", 0, 1, core::kMaxPositions);
    return o;
}

void addPromptFileOptions(QCommandLineParser &p)
{
    p.addOption(
        {"split", "Only prompts of this corpus split: train, validation or all (default).", "SPLIT", "all"});
    p.addOption({"whole-text", "Use a corpus line's whole text (question and answer), not its prompt."});
    p.addOption({"join", "Join N consecutive documents into one prompt (default 1).", "N", "1"});
}

std::vector<PromptText> readPromptFile(const QCommandLineParser &p, const std::string &path,
                                       std::vector<std::string> &warnings)
{
    PromptFileOptions o;
    o.split = str(p.value("split"));
    if (o.split != "all" && o.split != "train" && o.split != "validation")
        throw UsageError{"--split expects train, validation or all, got '" + o.split + "'"};
    o.join = intOption(p, "join", 1, 1);
    o.wholeText = p.isSet("whole-text");
    return readPromptFile(path, o, warnings);
}

void addEngineOptions(QCommandLineParser &p)
{
    addEngineOptions(
        p, {"dtype", "f32 (default), bf16, or f16 (CUDA only).", "DTYPE", "f32"},
        "Dequantise a GGUF file's quantised weights at load (to --dtype) instead of running them "
        "in their blocks on the CPU (the reference path; about 2-7x the memory).");
}

void addEngineOptions(QCommandLineParser &p, const QCommandLineOption &computeDtype,
                      const QString &dequantizeHelp)
{
    p.addOption({"device", "cpu (default) or cuda.", "DEVICE", "cpu"});
    p.addOption(computeDtype);
    p.addOption({"threads", "Intra-op threads (default: all cores).", "N"});
    p.addOption({"context",
                 "Positions each model serves (default: its config's; LongRoPE models use their long "
                 "factors above the original context).",
                 "N"});
    p.addOption({"dequantize", dequantizeHelp});
    addCacheOptions(p);
}

void addCacheOptions(QCommandLineParser &p)
{
    p.addOption({"kv-dtype",
                 "The KV cache's element type: f32, bf16 or f16 (default: the compute dtype). bf16 halves an "
                 "f32 model's cache; attention reads it widened to f32.",
                 "DTYPE"});
    p.addOption({"prefill-chunk",
                 "Prompt tokens per step through the layers (default 2048): a longer prompt runs in chunks, "
                 "so its activations and attention scores are bounded by one chunk.",
                 "N"});
}

} // namespace kvwb::app::cli
