#include "gpu/capture/capture.h"

#include "core/tokenize/token_alignment.h"
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

// The prompt's ids (and their byte spans) for one model, cut to its context.
core::Encoding encodeFor(const core::Tokenizer &tok, const Model &model, const std::string &text,
                         const CaptureOptions &o, size_t index, core::WarningList &warnings)
{
    auto e = tok.encodeWithOffsets(text, o.addSpecial);
    const int limit = o.maxTokens > 0 ? std::min(o.maxTokens, model.contextLimit()) : model.contextLimit();
    if (limit > 0 && int(e.ids.size()) > limit) {
        warnings.add(fmt::format("prompt {}: {} tokens truncated to {} for {}", index, e.ids.size(), limit,
                                 model.checkpoint().path().filename().string()));
        e.ids.resize(size_t(limit));
        e.spans.resize(size_t(limit));
    }
    return e;
}

std::vector<int32_t> flatSpans(const core::Encoding &e)
{
    std::vector<int32_t> out;
    out.reserve(e.spans.size() * 2);
    for (const auto &s : e.spans) {
        out.push_back(s.begin);
        out.push_back(s.end);
    }
    return out;
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
        core::Encoding encA, encB;
        if (prompts[i].idsA.empty())
            encA = encodeFor(tokA, a, prompts[i].text, o, i, warnings);
        else
            encA.ids = prompts[i].idsA;
        if (prompts[i].idsB.empty())
            encB = encodeFor(tokB, b, prompts[i].text, o, i, warnings);
        else
            encB.ids = prompts[i].idsB;
        const std::vector<int> &idsA = encA.ids, &idsB = encB.ids;
        if (idsA.empty() || idsB.empty()) {
            warnings.add(fmt::format("prompt {}: no tokens, skipped", i));
            continue;
        }
        core::PromptRecord rec;
        rec.text = prompts[i].text;
        rec.label = prompts[i].label;
        rec.a = captureModel(a, idsA, layersA, form, r.timings.prefillMsA, r.timings.readMs);
        rec.b = captureModel(b, idsB, layersB, form, r.timings.prefillMsB, r.timings.readMs);
        const bool spans = encA.spans.size() == idsA.size() && encB.spans.size() == idsB.size();
        if (spans) {
            rec.a.spans = flatSpans(encA);
            rec.b.spans = flatSpans(encB);
        }
        // Identical ids pair row t with row t; otherwise B's rows pair through the alignment.
        if (idsA != idsB) {
            if (!spans)
                warnings.add(fmt::format("prompt {}: models A and B have different ids given as ids (no "
                                         "text offsets): stored without an alignment, fitting skips it",
                                         i));
            else if (!writer.storesAlignment())
                warnings.add(fmt::format("prompt {}: A and B tokenised it differently, but {} predates "
                                         "token alignments: stored without one, fitting skips it",
                                         i, writer.path().filename().string()));
            else
                rec.alignment = core::alignTokens(core::alignSide(encA, tokA), core::alignSide(encB, tokB),
                                                  o.alignPolicy);
            if (rec.alignment.size() == idsB.size())
                ++r.promptsAligned;
        }
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
