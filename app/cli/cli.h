// Headless subcommands of the kvwb executable. Each takes its own arguments (argv[0] is the
// subcommand name), prints to stdout/stderr and returns the process exit code:
// 0 success, 1 a kvwb::core::Error (printed as "kvwb <cmd>: error [<code name>]: <message>"),
// 2 bad usage.
#pragma once

#include <QStringList>

namespace kvwb::app {

struct Subcommand
{
    const char *name;
    const char *summary;
    int (*run)(const QStringList &args);
};

const std::vector<Subcommand> &subcommands();
int runSubcommand(const QStringList &args); // args[0] = subcommand

} // namespace kvwb::app
