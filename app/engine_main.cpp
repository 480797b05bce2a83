// kvwb-engine: the whole program, the window and every subcommand, linked with LibTorch (kvwb_gpu)
// and, unless headless, Qt Widgets and Charts. The `kvwb` front end (app/main.cpp) execs it for
// the window and the Runs::Engine subcommands, argv unchanged; run directly it works the same.
#include "app/cli/cli.h"
#include "gpu/model/device.h"
#ifndef KVWB_HEADLESS
#include "app/gui.h"

#include <QApplication>
#endif
#include <QCoreApplication>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <unistd.h>

int main(int argc, char **argv)
{
    using namespace kvwb;
    const std::string_view first = argc >= 2 ? argv[1] : "";
    const app::Subcommand *c = app::findSubcommand(first);
    // No arguments, or `open PROJECT`: the window. Everything else is a headless subcommand.
    const bool gui = argc == 1 || first == "open";
    // LibTorch's OpenMP workers spin while OpenBLAS's own threads run the matmuls; on a 2-core
    // machine that made a 128-token prefill 7x slower (229 ms vs 34 ms, docs/engine.md). libgomp
    // reads OMP_WAIT_POLICY once, when it is loaded (before main, here), so the front end sets it
    // before it execs this program; run directly without it, set it and start again - unless the
    // command runs no model, where the restart would only load LibTorch twice.
    //
    // OpenBLAS, loaded with LibTorch, picks its kernels when it is loaded too, and Debian 12's falls
    // back to SSE3 ones on CPUs newer than itself (gpu/model/device.h, blasCoreOverride): set
    // OPENBLAS_CORETYPE to the family the CPU runs and start again, once.
    if (gui || (c && c->runs == app::Runs::Engine)) {
        bool restart = app::setOpenMpDefaults();
        if (!std::getenv("OPENBLAS_CORETYPE")) {
            const std::string core = gpu::blasCoreOverride();
            if (!core.empty()) {
                ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
                restart = true;
            }
        }
        if (restart)
            ::execv("/proc/self/exe", argv); // returns only on failure: then run as we are
    }
#ifdef KVWB_HEADLESS
    if (gui) {
        std::fprintf(stderr, "kvwb: this build is headless (KVWB_HEADLESS): no window; run a subcommand "
                             "(kvwb --help)\n");
        return 2;
    }
    QCoreApplication coreApp(argc, argv);
#else
    // `report` draws charts (Qt Charts, QPainter text): a QApplication, offscreen when headless.
    const bool charts = first == "report";
    if (charts && !std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY") &&
        !std::getenv("QT_QPA_PLATFORM"))
        ::setenv("QT_QPA_PLATFORM", "offscreen", 1);
    std::unique_ptr<QCoreApplication> qtApp;
    if (gui || charts)
        qtApp = std::make_unique<QApplication>(argc, argv);
    else
        qtApp = std::make_unique<QCoreApplication>(argc, argv);
#endif
    app::setApplicationIdentity();
#ifndef KVWB_HEADLESS
    if (gui)
        return app::runWorkbench(argc >= 3 ? QString::fromLocal8Bit(argv[2]) : QString());
#endif
    if (const auto code = app::runTopLevelOption(first))
        return *code;
    if (!c)
        return app::unknownSubcommand(argv[1]);
    QStringList args = QCoreApplication::arguments();
    args.removeFirst();
    return app::runSubcommand(*c, args);
}
