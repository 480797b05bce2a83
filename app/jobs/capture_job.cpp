#include "app/jobs/capture_job.h"

#include "app/jobs/job_inputs.h"
#include "core/util/build_info.h"
#include "core/util/error.h"
#include "core/util/sha256.h"
#include "core/util/system_memory.h"
#include "gpu/model/device.h"

#include <QDateTime>
#include <QUuid>
#include <QtGlobal>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <optional>
#include <sys/statvfs.h>

namespace kvwb::app::jobs {

namespace fs = std::filesystem;
using nlohmann::json;

core::Provenance runProvenance(const gpu::LoadOptions &o, const std::string &configJson)
{
    core::Provenance p;
    p.appVersion = core::appVersion();
    p.gitCommit = core::gitCommit();
    p.qtVersion = qVersion();
    p.torchVersion = gpu::torchVersion();
    p.device = gpu::describeDevice(o.device);
    p.createdUtc = QDateTime::currentDateTimeUtc().toString(Qt::ISODate).toStdString();
    p.runId = QUuid::createUuid().toString(QUuid::WithoutBraces).toStdString();
    p.configSha256 = core::sha256Hex(std::string_view(configJson));
    return p;
}

namespace {

CaptureProjection projectCapture(const gpu::Model &a, const core::Tokenizer &tokA, const gpu::Model &b,
                                 const core::Tokenizer &tokB, const std::vector<gpu::CapturePrompt> &prompts,
                                 const gpu::CaptureOptions &o)
{
    const int64_t valueBytes = o.file.storage == core::FloatType::F32 ? 4 : 2;
    const auto perToken = [&](const gpu::Model &m, const std::vector<int> &layers) {
        const auto &c = m.config();
        const int64_t n = layers.empty() ? c.numLayers : int64_t(layers.size());
        return n * 2 * int64_t(c.numKvHeads) * c.headDim * valueBytes;
    };
    const auto tokens = [&](const gpu::Model &m, const core::Tokenizer &tok, const std::string &text,
                            const std::vector<int> &given) {
        const int limit = o.maxTokens > 0 ? std::min(o.maxTokens, m.contextLimit()) : m.contextLimit();
        const int64_t n =
            given.empty() ? int64_t(tok.encode(text, o.addSpecial).size()) : int64_t(given.size());
        return limit > 0 ? std::min<int64_t>(n, limit) : n;
    };
    CaptureProjection p;
    for (const auto &prompt : prompts) {
        const int64_t na = tokens(a, tokA, prompt.text, prompt.idsA),
                      nb = tokens(b, tokB, prompt.text, prompt.idsB);
        p.tokensA += na;
        p.tokensB += nb;
        p.longestA = std::max(p.longestA, na);
        p.longestB = std::max(p.longestB, nb);
    }
    p.workingSetBytes = requestWorkingSetBytes(a, p.longestA) + requestWorkingSetBytes(b, p.longestB);
    p.bytes = p.tokensA * perToken(a, o.layersA) + p.tokensB * perToken(b, o.layersB);
    return p;
}

} // namespace

FileCapture captureIntoFile(const fs::path &out, const gpu::Model &a, const core::Tokenizer &tokA,
                            const gpu::Model &b, const core::Tokenizer &tokB,
                            const std::vector<gpu::CapturePrompt> &prompts, gpu::CaptureOptions co,
                            const std::string &promptsSource, const gpu::CaptureProgressFn &progress,
                            const std::function<void(const CaptureProjection &)> &projected)
{
    auto infoA = gpu::describeModel(core::ModelRole::A, a, modelTokenizerPath(a));
    auto infoB = gpu::describeModel(core::ModelRole::B, b, modelTokenizerPath(b));
    // The same lists go to the writer (what the file records) and to the capture (what is read);
    // empty means every layer.
    infoA.capturedLayers = co.layersA;
    infoB.capturedLayers = co.layersB;
    const json config = {{"model_a", infoA.weightsSha256},
                         {"model_b", infoB.weightsSha256},
                         {"prompts", promptsSource},
                         {"dtype", core::floatTypeName(co.file.storage)},
                         {"compress", co.file.compress},
                         {"max_tokens", co.maxTokens},
                         {"key_form", core::keyFormName(co.file.keyForm)},
                         {"device", gpu::deviceName(a.options().device)},
                         {"compute_dtype", gpu::floatTypeName(a.options().dtype)},
                         {"kv_dtype", gpu::floatTypeName(a.kvDtype())},
                         {"layers_a", co.layersA},
                         {"layers_b", co.layersB}};
    FileCapture fc;
    // What it will write, against what the file system holds: refused before the first prompt
    // rather than stopped by a full disk (tests inject the figure: KVWB_TEST_DISK_AVAILABLE).
    fc.projected = projectCapture(a, tokA, b, tokB, prompts, co);
    {
        std::optional<int64_t> free;
        if (const char *injected = std::getenv("KVWB_TEST_DISK_AVAILABLE")) {
            free = std::strtoll(injected, nullptr, 10);
        } else {
            struct statvfs st
            {
            };
            const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
            if (::statvfs(dir.c_str(), &st) == 0)
                free = int64_t(st.f_bavail) * int64_t(st.f_frsize);
        }
        if (free && fc.projected.bytes > *free)
            throw core::Error(
                core::ErrorCode::Io,
                fmt::format("{}: capturing {} prompts ({} tokens of A, {} of B) writes about {:.2f} "
                            "GB of KV ({}, uncompressed), and its file system has {:.2f} GB free; "
                            "not started (fewer prompts, --max-tokens, --layers-a/-b or --dtype "
                            "bf16 write less)",
                            out.string(), prompts.size(), fc.projected.tokensA, fc.projected.tokensB,
                            double(fc.projected.bytes) / 1e9, core::floatTypeName(co.file.storage),
                            double(*free) / 1e9));
    }
    core::checkWorkingSet(fmt::format("capturing {}", out.string()), fc.projected.workingSetBytes,
                          fmt::format("the longest prompt's KV caches, their f32 copies and activations: {} "
                                      "tokens of A, {} of B",
                                      fc.projected.longestA, fc.projected.longestB),
                          "--max-tokens caps the prompts; --kv-dtype bf16 halves the caches");
    if (projected) // once it will start
        projected(fc.projected);
    fc.appended = fs::exists(out);
    auto writer = fc.appended ? core::ExperimentWriter::append(out, infoA, infoB)
                              : core::ExperimentWriter::create(
                                    out, co.file, runProvenance(a.options(), config.dump()), infoA, infoB);
    if (fc.appended) {
        // the file's own storage settings win; say so when the request asked for something else
        const auto existing = writer.storage();
        if (existing.storage != co.file.storage || existing.keyForm != co.file.keyForm)
            fc.warnings.push_back(
                fmt::format("{}: appending with the file's storage ({}, {} keys), not the requested",
                            out.filename().string(), core::floatTypeName(existing.storage),
                            core::keyFormName(existing.keyForm)));
        co.file = existing;
    }
    fc.storage = co.file;
    fc.result = gpu::capturePrompts(writer, a, tokA, b, tokB, prompts, co, progress);
    writer.close();
    fc.warnings.insert(fc.warnings.end(), fc.result.warnings.begin(), fc.result.warnings.end());
    return fc;
}

} // namespace kvwb::app::jobs
