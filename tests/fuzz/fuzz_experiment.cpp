// Experiment files (HDF5): opening, every prompt's text, ids and KV of every captured layer, and
// every converter, table, ledger and comparison list the file holds.
#include "core/cache/replay_ledger.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
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
    kvwb::fuzz::expectOnlyKvwbErrors([&] {
        for (const std::string &name : listConverters(path))
            kvwb::fuzz::expectOnlyKvwbErrors([&] { (void)loadConverters(path, name); });
    });
    kvwb::fuzz::expectOnlyKvwbErrors([&] {
        for (const std::string &name : listTables(path))
            kvwb::fuzz::expectOnlyKvwbErrors([&] { (void)loadTable(path, name); });
    });
    kvwb::fuzz::expectOnlyKvwbErrors([&] {
        for (const std::string &name : listLedgers(path))
            kvwb::fuzz::expectOnlyKvwbErrors([&] { (void)loadLedger(path, name); });
    });
    kvwb::fuzz::expectOnlyKvwbErrors([&] {
        for (const std::string &name : listComparisons(path))
            kvwb::fuzz::expectOnlyKvwbErrors([&] { (void)loadComparisons(path, name); });
    });
    return 0;
}
