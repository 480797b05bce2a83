// The kvwb subcommands: one table of every subcommand (app/cli/subcommands.cpp) with its summary
// and the executable that runs it, and the dispatch. Two executables share the table: the light
// `kvwb` front end (Qt Core and core/ only: no LibTorch, no Qt Widgets) runs the subcommands that
// need neither the engine nor the window and execs kvwb-engine for the others; kvwb-engine runs
// every one (app/main.cpp, app/engine_main.cpp; docs/architecture.md).
//
// Each subcommand takes its own arguments (args[0] is the subcommand name), prints to
// stdout/stderr and returns the process exit code: 0 success, 1 a kvwb::core::Error (printed as
// "kvwb <cmd>: error [<code name>]: <message>"), 2 bad usage. Main thread of a kvwb process only.
#pragma once

#include <QStringList>

#include <optional>
#include <string_view>
#include <vector>

namespace kvwb::app {

// The executable a subcommand runs in.
enum class Runs
{
    FrontEnd, // `kvwb` itself: core/ and Qt Core only
    Engine,   // kvwb-engine: a model forward, a fit or training (LibTorch), or charts (Qt Widgets)
};

struct Subcommand
{
    const char *name;
    const char *summary;
    Runs runs;
    // Null in the front end's table for a Runs::Engine subcommand: the front end forwards those.
    int (*run)(const QStringList &args);
};

// Every subcommand in `--help` order. subcommands.cpp is compiled into each executable, the front
// end's with KVWB_FRONT_END, so the front end's table names no engine code but lists it all.
const std::vector<Subcommand> &subcommands();
const Subcommand *findSubcommand(std::string_view name); // nullptr when there is none
// Runs c (which must have a run function) on args, turning what it throws into one line on stderr
// and an exit code.
int runSubcommand(const Subcommand &c, const QStringList &args);
// `kvwb --help`: usage, then every subcommand with its summary.
void printUsage();
// What both executables answer before any subcommand: `--help` / `-h` / `help` and `--version`
// print and give 0; anything else gives nullopt.
std::optional<int> runTopLevelOption(std::string_view first);
// `kvwb <name>` with no such subcommand: one line on stderr, exit code 2.
int unknownSubcommand(const char *name);
// The application name and version Qt reports (QCoreApplication must exist).
void setApplicationIdentity();
// The OpenMP settings the engine runs with, set in the environment unless the user set
// OMP_WAIT_POLICY: passive (LibTorch's workers spinning while OpenBLAS's threads ran the matmuls made
// a 128-token prefill 7x slower on 2 cores), with GOMP_SPINCOUNT=3000 unless set (a futex wake for
// every oneDNN product made 2-thread bf16 prefill slower than 1-thread; docs/engine.md, "OpenMP
// wait policy"). libgomp reads them once, when it is loaded: call before LibTorch is. Returns
// whether it set anything.
bool setOpenMpDefaults();

} // namespace kvwb::app
