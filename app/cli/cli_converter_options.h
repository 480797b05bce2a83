// Options and JSON the converter subcommands share (`kvwb align`, `kvwb sweep`, `kvwb compare`):
// the model overrides, the prompt split, layer selection, and metric tables as JSON. Conventions as
// in app/cli/cli.h.
#pragma once

#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "gpu/align/alignment.h"
#include "gpu/model/model.h"

#include <QCommandLineParser>
#include <QString>

#include <nlohmann/json.hpp>

#include <memory>
#include <vector>

namespace kvwb::app::cli {

// JSON number, or null for NaN (a metric that was not computed).
nlohmann::json jsonNumber(double v);
// --model-a / --model-b: the pair's paths when not the ones the experiment file records.
void addModelOptions(QCommandLineParser &p);
// The experiment file's model `role`: --model-a / --model-b when set, else the path the file records;
// Error(Io) when it does not exist, Error(Config) when its weights are not the ones captured.
std::unique_ptr<gpu::Model> loadFileModel(const core::ExperimentReader &file, core::ModelRole role,
                                          const QCommandLineParser &p, const gpu::LoadOptions &o);
// --select's value; UsageError naming the accepted values.
gpu::LayerSelection parseSelection(const QString &s);
// --valid-fraction, --test-fraction, --seed: the prompt split.
void addSplitOptions(QCommandLineParser &p);
// A metric table as one JSON object per row (NaN as null); a matrix as rows of numbers.
std::vector<nlohmann::json> tableJson(const core::MetricTable &t);
nlohmann::json matrixJson(const core::Matrix &m);

} // namespace kvwb::app::cli
