// kvwb: one executable for the workbench and all its headless subcommands.
#include "app/cli.h"

#include <QCoreApplication>

#include <cstdio>

int main(int argc, char **argv)
{
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName("kvwb");
    QCoreApplication::setApplicationVersion(KVWB_VERSION " (" KVWB_GIT_COMMIT ")");
    QStringList args = QCoreApplication::arguments();
    args.removeFirst();
    if (args.isEmpty() || args.first() == "--help" || args.first() == "-h" || args.first() == "help") {
        std::printf("Usage: kvwb <subcommand> [options]   (kvwb <subcommand> --help for its options)\n\n"
                    "KV Workbench %s: LLM cache and KV-converter experiments.\n\nSubcommands:\n",
                    KVWB_VERSION);
        for (const auto &c : kvwb::app::subcommands())
            std::printf("  %-12s %s\n", c.name, c.summary);
        return args.isEmpty() ? 2 : 0;
    }
    if (args.first() == "--version") {
        std::printf("kvwb %s (%s)\n", KVWB_VERSION, KVWB_GIT_COMMIT);
        return 0;
    }
    return kvwb::app::runSubcommand(args);
}
