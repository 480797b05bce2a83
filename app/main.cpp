// kvwb: the light front end. It links Qt Core and core/ only, so the subcommands that run no model
// and draw nothing (--help, --version and the Runs::FrontEnd rows of app/cli/subcommands.cpp: info,
// upgrade, tokenize, make-model, convert, corpus, workload, bench-tiers) start without the dynamic
// loader pulling in LibTorch (~300 shared libraries) or Qt Widgets. For the window and every other
// subcommand it execs kvwb-engine, the whole program, with the same arguments (docs/engine.md,
// "Start-up").
#include "app/cli/cli.h"

#include <QCoreApplication>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

// Replaces this process with kvwb-engine, found from this executable: beside it in the build tree,
// in ../lib/kvwb/ when installed (bin/kvwb, lib/kvwb/kvwb-engine). Returns only by exiting 1;
// `what` names what needed the engine in that message.
[[noreturn]] void execEngine(char **argv, const std::string &what)
{
    kvwb::app::setOpenMpDefaults(); // before the engine loads libgomp
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (ec) {
        std::fprintf(stderr, "kvwb: cannot find kvwb-engine: /proc/self/exe is unreadable (%s)\n",
                     ec.message().c_str());
        std::exit(1);
    }
    const fs::path dir = self.parent_path();
    std::string tried;
    for (const fs::path &engine :
         {dir / "kvwb-engine", (dir.parent_path() / "lib" / "kvwb" / "kvwb-engine")}) {
        ::execv(engine.c_str(), argv); // returns only on failure
        if (errno != ENOENT) {
            std::fprintf(stderr, "kvwb: cannot run %s: %s\n", engine.c_str(), std::strerror(errno));
            std::exit(1);
        }
        tried += (tried.empty() ? "" : " or ") + engine.string();
    }
    std::fprintf(stderr, "kvwb: %s runs in kvwb-engine, which is missing: no %s\n", what.c_str(),
                 tried.c_str());
    std::exit(1);
}

} // namespace

int main(int argc, char **argv)
{
    using namespace kvwb;
    const std::string_view first = argc >= 2 ? argv[1] : "";
    if (const auto code = app::runTopLevelOption(first))
        return *code;
    // No arguments, or `open PROJECT`: the window.
    const app::Subcommand *c = app::findSubcommand(first);
    if (argc < 2 || first == "open" || (c && !c->run))
        execEngine(argv,
                   argc < 2 || first == "open" ? std::string("the window") : "'" + std::string(first) + "'");
    if (!c)
        return app::unknownSubcommand(argv[1]);
    QCoreApplication coreApp(argc, argv);
    app::setApplicationIdentity();
    QStringList args = QCoreApplication::arguments();
    args.removeFirst();
    return app::runSubcommand(*c, args);
}
