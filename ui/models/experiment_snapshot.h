// What the panels show of an experiment file: its models and prompt counts, every stored converter
// (maps, metrics, CKA), sweep table, replay ledger and comparison sample list. The engine thread reads it
// (HDF5 stays there, app/engine/engine_controller.h) and hands the GUI an immutable snapshot.
#pragma once

#include "core/ledger/replay_ledger.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"

#include <QString>

#include <string>
#include <utility>
#include <vector>

namespace kvwb::ui {

struct ExperimentSnapshot
{
    QString path;
    core::ModelInfo a, b;
    core::ExperimentOptions storage; // the file's KV storage, compression, chunking, key form
    int prompts = 0;
    int64_t tokensA = 0, tokensB = 0;
    std::vector<core::ConverterRecord> converters; // metrics only: maps' weights and biases empty
    std::vector<std::pair<std::string, core::MetricTable>> sweeps;                        // name, table
    std::vector<std::pair<std::string, std::vector<core::LedgerRow>>> ledgers;            // name, rows
    std::vector<std::pair<std::string, std::vector<core::ComparisonSample>>> comparisons; // name, samples
};

} // namespace kvwb::ui
