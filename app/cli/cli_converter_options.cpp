#include "app/cli/cli_converter_options.h"

#include "app/cli/cli_util.h"
#include "core/model/checkpoint.h"
#include "core/util/error.h"

#include <fmt/format.h>

#include <cmath>

namespace kvwb::app::cli {

using nlohmann::json;
namespace fs = std::filesystem;

json jsonNumber(double v)
{
    return std::isfinite(v) ? json(v) : json(nullptr);
}

void addModelOptions(QCommandLineParser &p)
{
    p.addOption({"model-a", "Model A (default: the path the experiment file records).", "PATH"});
    p.addOption({"model-b", "Model B (default: the path the experiment file records).", "PATH"});
}

std::unique_ptr<gpu::Model> loadFileModel(const core::ExperimentReader &file, core::ModelRole role,
                                          const QCommandLineParser &p, const gpu::LoadOptions &o)
{
    const QString flag = role == core::ModelRole::A ? "model-a" : "model-b";
    const auto &info = file.model(role);
    const fs::path path = p.isSet(flag) ? fs::path(str(p.value(flag))) : fs::path(info.sourcePath);
    if (!fs::exists(path))
        throw core::Error(core::ErrorCode::Io,
                          fmt::format("{}: model {} was captured from {}, which does not exist; pass --{}",
                                      file.path().string(), core::roleLabel(role), path.string(), str(flag)));
    const auto ck = core::Checkpoint::open(path);
    if (ck.fingerprint() != info.weightsSha256)
        throw core::Error(
            core::ErrorCode::Config,
            fmt::format("{}: model {} at {} has weights fingerprint {}, the file was captured with {}",
                        file.path().string(), core::roleLabel(role), path.string(), ck.fingerprint(),
                        info.weightsSha256));
    return gpu::Model::load(ck, o);
}

gpu::LayerSelection parseSelection(const QString &s)
{
    if (const auto selection = gpu::parseLayerSelection(str(s)))
        return *selection;
    throw UsageError{"--select expects proportional, topk or all, got '" + str(s) + "'"};
}

void addSplitOptions(QCommandLineParser &p)
{
    p.addOption({"valid-fraction", "Prompts held out to choose layers/lambda (default 0.15).", "F", "0.15"});
    p.addOption({"test-fraction", "Prompts held out for the metrics (default 0.15).", "F", "0.15"});
    addSeedOption(p, "Split seed");
}

std::vector<json> tableJson(const core::MetricTable &t)
{
    std::vector<json> rows;
    for (const auto &r : t.rows) {
        json j;
        for (size_t c = 0; c < t.columns.size(); ++c)
            j[t.columns[c]] = jsonNumber(r[c]);
        rows.push_back(j);
    }
    return rows;
}

json matrixJson(const core::Matrix &m)
{
    json rows = json::array();
    for (int r = 0; r < m.rows; ++r) {
        json row = json::array();
        for (int c = 0; c < m.cols; ++c)
            row.push_back(jsonNumber(m.data[size_t(r) * size_t(m.cols) + size_t(c)]));
        rows.push_back(row);
    }
    return rows;
}

} // namespace kvwb::app::cli
