#include "app/cli/cli_upgrade.h"

#include "app/cli/cli_util.h"
#include "core/store/experiment_file.h"
#include "core/store/experiment_upgrade.h"

#include <QCommandLineParser>

#include <cstdio>
#include <filesystem>

namespace kvwb::app {

namespace fs = std::filesystem;
using namespace kvwb::app::cli;

int cmdUpgrade(const QStringList &args)
{
    QCommandLineParser p;
    parse(p, args,
          "Rewrite an experiment file of an older kvwb (schema kvwb/1) as kvwb/2: fixed-size strings instead "
          "of variable-length ones, and a CRC-32 of every prompt's KV rows. Works on a copy beside the file "
          "and replaces the file only when the copy is complete; a kvwb/2 file is left as it is.",
          "FILE", "Experiment .h5 file.");
    if (p.positionalArguments().size() != 1)
        throw UsageError{"expected exactly one FILE"};
    const fs::path path = str(p.positionalArguments().first());
    const core::UpgradeResult r = core::upgradeExperiment(path);
    if (!r.upgraded)
        std::printf("%s: already %s, nothing to do\n", path.c_str(), r.fromSchema.c_str());
    else
        std::printf("%s: upgraded %s -> %s (%d attributes and %d string datasets rewritten, checksums for "
                    "%d prompts)\n",
                    path.c_str(), r.fromSchema.c_str(), core::kExperimentSchema, r.attributes,
                    r.stringDatasets, r.checksummedPrompts);
    return 0;
}

} // namespace kvwb::app
