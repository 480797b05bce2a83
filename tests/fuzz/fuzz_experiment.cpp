// Experiment files (HDF5): opening, every prompt's text, ids, token spans and alignment and KV of every
// captured layer, and every converter, table, ledger and comparison list the file holds.
#include "core/ledger/replay_ledger.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/store/ledger_store.h"
#include "tests/fuzz/fuzz_input.h"

using namespace kvwb::core;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const auto path = kvwb::fuzz::inputFile(data, size, "fuzz.h5");
    kvwb::fuzz::expectOnlyKvwbErrors([&] {
        const ExperimentReader r = ExperimentReader::open(path);
        for (int p = 0; p < r.promptCount(); ++p) {
            (void)r.prompt(p);
            for (ModelRole m : kRoles)
                for (int layer : r.model(m).capturedLayers) {
                    (void)r.keys(m, layer, p);
                    (void)r.values(m, layer, p);
                }
        }
    });
    // every record of each kind, each one on its own (one bad record must not hide the next)
    const auto each = [&](auto list, auto load) {
        kvwb::fuzz::expectOnlyKvwbErrors([&] {
            for (const std::string &name : list(path))
                kvwb::fuzz::expectOnlyKvwbErrors([&] { (void)load(path, name); });
        });
    };
    each(listConverters, [](const auto &p, const std::string &n) { return loadConverters(p, n); });
    each(listTables, [](const auto &p, const std::string &n) { return loadTable(p, n); });
    each(listLedgers, [](const auto &p, const std::string &n) { return loadLedger(p, n); });
    each(listComparisons, loadComparisons);
    return 0;
}
