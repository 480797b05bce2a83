// `kvwb upgrade`: rewrites an experiment file of schema kvwb/1 as kvwb/2, the only reader of
// HDF5 variable-length strings left in kvwb.
//
// kvwb/1 kept its string attributes, the replay ledgers' text columns and the comparison samples as
// variable-length strings, which live in HDF5's global heap; HDF5 1.10 reads a global-heap object
// without checking the sizes stored with it, so one damaged byte there crashes the reader. kvwb/2
// stores fixed-size strings and bytes + offsets datasets instead, and adds /kv/<m>/crc32 (a CRC-32
// of each prompt's stored KV rows per layer). Every other reader refuses kvwb/1 files
// (h5::checkSchema) and names this command.
//
// The upgrade works on a copy beside the file (<file>.upgrade.tmp, so it needs the file's size in
// free space), holds the file's writer lock throughout, and renames the copy over the file only
// when it is complete: an interrupted upgrade leaves the kvwb/1 file as it was. It trusts the
// file's variable-length strings: run it on files you made, not on ones that may be damaged.
//
// Thread-safety: none, as for every HDF5 call (core/store/hdf5_handle.h).
#pragma once

#include <filesystem>
#include <string>

namespace kvwb::core {

struct UpgradeResult
{
    std::string fromSchema;     // the file's schema before ("kvwb/1", or kvwb/2 when nothing was done)
    bool upgraded = false;      // false: already kvwb/2, file untouched
    int attributes = 0;         // variable-length string attributes rewritten as fixed-size
    int stringDatasets = 0;     // variable-length string datasets rewritten as bytes + offsets
    int checksummedPrompts = 0; // committed prompts whose KV rows got their CRC-32s
};

// Error(Io) for an unreadable or unwritable file or a held writer lock, Error(Format) when it is
// not a kvwb experiment file (or of a schema other than kvwb/1 and kvwb/2), Error(Unsupported) for
// a newer schema.
UpgradeResult upgradeExperiment(const std::filesystem::path &path, bool syncToDisk = true);

} // namespace kvwb::core
