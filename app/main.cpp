// kvwb: one executable for the workbench and all its headless subcommands.
#include "app/cli/cli.h"
#ifndef KVWB_HEADLESS
#include "app/gui.h"

#include <QApplication>
#endif
#include <QCoreApplication>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <unistd.h>

namespace {

// Subcommands that run no LibTorch work (no forward, no fit): they skip the restart below, which
// would load LibTorch a second time (about half of their start-up).
bool runsNoModel(int argc, char **argv)
{
    if (argc < 2)
        return false; // the window
    const std::string_view name = argv[1];
    for (const char *light : {"--help", "-h", "help", "--version", "info", "upgrade", "tokenize",
                              "make-model", "convert", "report", "corpus", "workload"})
        if (name == light)
            return true;
    return false;
}

} // namespace

int main(int argc, char **argv)
{
    // LibTorch's OpenMP workers spin while OpenBLAS's own threads run the matmuls; on a 2-core
    // machine that made a 128-token prefill 7x slower (229 ms vs 34 ms, docs/engine.md). libgomp
    // reads OMP_WAIT_POLICY once, when it is loaded, so set it and start again.
    if (!std::getenv("OMP_WAIT_POLICY") && !runsNoModel(argc, argv)) {
        ::setenv("OMP_WAIT_POLICY", "passive", 1);
        ::execv("/proc/self/exe", argv); // returns only on failure: then run as we are
    }
    // No arguments, or `open PROJECT`: the window. Everything else is a headless subcommand.
    const bool gui = argc == 1 || (argc >= 2 && std::string_view(argv[1]) == "open");
#ifdef KVWB_HEADLESS
    if (gui) {
        std::fprintf(stderr, "kvwb: this build is headless (KVWB_HEADLESS): no window; run a subcommand "
                             "(kvwb --help)\n");
        return 2;
    }
    QCoreApplication coreApp(argc, argv);
#else
    // `report` draws charts (Qt Charts, QPainter text): a QApplication, offscreen when headless.
    const bool charts = argc >= 2 && std::string_view(argv[1]) == "report";
    if (charts && !std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY") &&
        !std::getenv("QT_QPA_PLATFORM"))
        ::setenv("QT_QPA_PLATFORM", "offscreen", 1);
    std::unique_ptr<QCoreApplication> app;
    if (gui || charts)
        app = std::make_unique<QApplication>(argc, argv);
    else
        app = std::make_unique<QCoreApplication>(argc, argv);
#endif
    QCoreApplication::setApplicationName("kvwb");
    QCoreApplication::setApplicationVersion(KVWB_VERSION " (" KVWB_GIT_COMMIT ")");
#ifndef KVWB_HEADLESS
    if (gui)
        return kvwb::app::runWorkbench(argc >= 3 ? QString::fromLocal8Bit(argv[2]) : QString());
#endif
    QStringList args = QCoreApplication::arguments();
    args.removeFirst();
    if (args.first() == "--help" || args.first() == "-h" || args.first() == "help") {
        std::printf("Usage: kvwb <subcommand> [options]   (kvwb <subcommand> --help for its options)\n\n"
                    "KV Workbench %s: LLM cache and KV-converter experiments.\n\nSubcommands:\n",
                    KVWB_VERSION);
        for (const auto &c : kvwb::app::subcommands())
            std::printf("  %-12s %s\n", c.name, c.summary);
        std::printf("\nWithout arguments (or with `open PROJECT.kvwb`) kvwb opens the workbench window.\n");
        return 0;
    }
    if (args.first() == "--version") {
        std::printf("kvwb %s (%s)\n", KVWB_VERSION, KVWB_GIT_COMMIT);
        return 0;
    }
    return kvwb::app::runSubcommand(args);
}
