// Replay ledgers in an experiment file: /ledgers/<name>, the rows of core/ledger/replay_ledger.h with
// the settings JSON of the replay that made them.
//
// Threading: any thread; HDF5 calls are serialised by the library (core/store/hdf5_handle.h).
#pragma once

#include "core/ledger/replay_ledger.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kvwb::core {

// /ledgers/<name> of an experiment file (same saving rules as core/store/converter_store.h: validated,
// built unlinked, linked in place; Error(Io) while a capture appends). settingsJson says what was
// replayed (workload, tiers, thresholds, models). Error(InvalidArgument) before anything is written
// for a bad name or settings JSON, a tierHits holding None, or an int64 field beyond +-2^53 (the
// numeric columns are stored as float64). Layout: docs/experiment-format.md, "Replay ledgers".
void saveLedger(const std::filesystem::path &experiment, const std::string &name,
                const std::vector<LedgerRow> &rows, const std::string &settingsJson);
std::vector<std::string> listLedgers(const std::filesystem::path &experiment);
std::vector<LedgerRow> loadLedger(const std::filesystem::path &experiment, const std::string &name,
                                  std::string *settingsJson = nullptr);

} // namespace kvwb::core
