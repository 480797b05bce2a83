#include "app/jobs/capture_job.h"

#include "app/jobs/job_inputs.h"
#include "core/util/build_info.h"
#include "core/util/sha256.h"
#include "gpu/model/device.h"

#include <QDateTime>
#include <QUuid>
#include <QtGlobal>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

FileCapture captureIntoFile(const fs::path &out, const gpu::Model &a, const core::Tokenizer &tokA,
                            const gpu::Model &b, const core::Tokenizer &tokB,
                            const std::vector<gpu::CapturePrompt> &prompts, gpu::CaptureOptions co,
                            const std::string &promptsSource, const gpu::CaptureProgressFn &progress)
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
                         {"dtype", core::kvStorageName(co.file.storage)},
                         {"compress", co.file.compress},
                         {"max_tokens", co.maxTokens},
                         {"key_form", core::keyFormName(co.file.keyForm)},
                         {"device", gpu::deviceName(a.options().device)},
                         {"compute_dtype", gpu::computeTypeName(a.options().dtype)},
                         {"layers_a", co.layersA},
                         {"layers_b", co.layersB}};
    FileCapture fc;
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
                            out.filename().string(), core::kvStorageName(existing.storage),
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
