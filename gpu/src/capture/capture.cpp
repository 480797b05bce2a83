#include "gpu/capture/capture.h"

#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/util/sha256.h"
#include "core/util/warning_list.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>

namespace kvwb::gpu {

namespace {

using core::Clock;
using core::msSince;

// Prefill one model on ids from an empty cache and copy the given layers out, token-major.
core::PromptKv captureModel(const Model &model, const std::vector<int> &ids, const std::vector<int> &layers,
                            KeyForm form, double &prefillMs, double &readMs)
{
    core::PromptKv kv;
    kv.ids.assign(ids.begin(), ids.end());
    auto cache = model.newCache();
    const auto t0 = Clock::now();
    model.forward(ids, cache);
    prefillMs += msSince(t0);
    const auto t1 = Clock::now();
    for (int l : layers) {
        auto layer = cache.layerTokenMajor(l, form);
        kv.keys.push_back(std::move(layer.keys));
        kv.values.push_back(std::move(layer.values));
    }
    readMs += msSince(t1);
    return kv;
}

std::vector<int> encodeFor(const core::Tokenizer &tok, const Model &model, const std::string &text,
                           const CaptureOptions &o, size_t index, core::WarningList &warnings)
{
    auto ids = tok.encode(text, o.addSpecial);
    const int limit = o.maxTokens > 0 ? std::min(o.maxTokens, model.contextLimit()) : model.contextLimit();
    if (limit > 0 && int(ids.size()) > limit) {
        warnings.add(fmt::format("prompt {}: {} tokens truncated to {} for {}", index, ids.size(), limit,
                                 model.checkpoint().path().filename().string()));
        ids.resize(size_t(limit));
    }
    return ids;
}

// The explicit list the writer expects (empty = all layers), checked against the file so that a
// caller passing different lists to the writer and to capturePrompts fails before any prompt.
std::vector<int> layersFor(core::ModelRole role, const std::vector<int> &requested, const Model &model,
                           const core::ExperimentWriter &writer)
{
    std::vector<int> layers = requested;
    if (layers.empty())
        for (int l = 0; l < model.config().numLayers; ++l)
            layers.push_back(l);
    const std::vector<int> &file = writer.capturedLayers(role);
    if (layers != file)
        throw core::Error(core::ErrorCode::Config,
                          fmt::format("{}: capture layers of model {} ({}) differ from the file's ({})",
                                      writer.path().string(), core::roleName(role), fmt::join(layers, ", "),
                                      fmt::join(file, ", ")));
    return layers;
}

} // namespace

core::ModelInfo describeModel(core::ModelRole role, const Model &model,
                              const std::filesystem::path &tokenizerPath)
{
    core::ModelInfo info;
    info.role = role;
    info.config = model.config();
    info.weightsSha256 = model.checkpoint().fingerprint();
    info.tokenizerSha256 = core::sha256Files({tokenizerPath});
    info.sourcePath = std::filesystem::absolute(model.checkpoint().path()).lexically_normal().string();
    return info;
}

CaptureResult capturePrompts(core::ExperimentWriter &writer, const Model &a, const core::Tokenizer &tokA,
                             const Model &b, const core::Tokenizer &tokB,
                             const std::vector<CapturePrompt> &prompts, const CaptureOptions &o,
                             const CaptureProgressFn &progress)
{
    core::checkTokenizerFitsModel(tokA, a.config(), "model A's tokenizer");
    core::checkTokenizerFitsModel(tokB, b.config(), "model B's tokenizer");
    // the file decides the key form (an appended file keeps the one it was created with)
    const KeyForm form = writer.storage().keyForm;
    const std::vector<int> layersA = layersFor(core::ModelRole::A, o.layersA, a, writer);
    const std::vector<int> layersB = layersFor(core::ModelRole::B, o.layersB, b, writer);
    CaptureResult r;
    core::WarningList warnings(20);
    r.firstPrompt = writer.promptCount();
    for (size_t i = 0; i < prompts.size(); ++i) {
        const auto idsA =
            prompts[i].idsA.empty() ? encodeFor(tokA, a, prompts[i].text, o, i, warnings) : prompts[i].idsA;
        const auto idsB =
            prompts[i].idsB.empty() ? encodeFor(tokB, b, prompts[i].text, o, i, warnings) : prompts[i].idsB;
        if (idsA.empty() || idsB.empty()) {
            warnings.add(fmt::format("prompt {}: no tokens, skipped", i));
            continue;
        }
        core::PromptRecord rec;
        rec.text = prompts[i].text;
        rec.label = prompts[i].label;
        rec.a = captureModel(a, idsA, layersA, form, r.timings.prefillMsA, r.timings.readMs);
        rec.b = captureModel(b, idsB, layersB, form, r.timings.prefillMsB, r.timings.readMs);
        for (const auto *kv : {&rec.a, &rec.b})
            for (size_t l = 0; l < kv->keys.size(); ++l)
                r.timings.kvBytes += int64_t(kv->keys[l].size() + kv->values[l].size()) * 4;
        const auto t0 = Clock::now();
        writer.appendPrompt(rec);
        r.timings.writeMs += msSince(t0);
        ++r.promptsWritten;
        r.tokensA += int64_t(idsA.size());
        r.tokensB += int64_t(idsB.size());
        if (progress && !progress(r.promptsWritten, int(prompts.size()))) {
            r.cancelled = i + 1 < prompts.size();
            break;
        }
    }
    r.warnings = warnings.messages();
    return r;
}

} // namespace kvwb::gpu
