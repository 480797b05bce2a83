#include "app/cli/cli.h"
#include "app/cli/cli_util.h"

#include "core/util/build_info.h"
#include "core/util/error.h"

#include <QCoreApplication>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <stdexcept>
#include <string>

namespace kvwb::app {

namespace fs = std::filesystem;
using namespace kvwb::app::cli;

namespace {

// An error is one line on stderr: HDF5 and foreign messages may carry newlines, and names taken
// from a file may carry control characters.
std::string oneLine(std::string s)
{
    for (char &c : s)
        if (c == '\n' || c == '\r' || c == '\t')
            c = ' ';
        else if ((unsigned char)c < 0x20 || c == 0x7f)
            c = '?';
    while (!s.empty() && s.back() == ' ')
        s.pop_back();
    return s;
}

// The arguments that name existing files or directories, for an error that cannot name its
// culprit itself ("its input").
std::string inputFiles(const QStringList &args)
{
    std::string out;
    for (qsizetype i = 1; i < args.size(); ++i) {
        std::error_code ec;
        const fs::path p = str(args[i]);
        if (!args[i].startsWith('-') && fs::exists(p, ec))
            out += (out.empty() ? "" : ", ") + p.string();
    }
    return out.empty() ? std::string("its input") : out;
}

} // namespace

const Subcommand *findSubcommand(std::string_view name)
{
    for (const auto &c : subcommands())
        if (name == c.name)
            return &c;
    return nullptr;
}

void printUsage()
{
    std::printf("Usage: kvwb <subcommand> [options]   (kvwb <subcommand> --help for its options)\n\n"
                "KV Workbench %s: LLM cache and KV-converter experiments.\n\nSubcommands:\n",
                core::appVersion());
    for (const auto &c : subcommands())
        std::printf("  %-14s %s\n", c.name, c.summary);
    std::printf("\nWithout arguments (or with `open PROJECT.kvwb`) kvwb opens the workbench window.\n");
}

std::optional<int> runTopLevelOption(std::string_view first)
{
    if (first == "--help" || first == "-h" || first == "help") {
        printUsage();
        return 0;
    }
    if (first == "--version") {
        std::printf("kvwb %s (%s)\n", core::appVersion(), core::gitCommit());
        return 0;
    }
    return std::nullopt;
}

int unknownSubcommand(const char *name)
{
    std::fprintf(stderr, "kvwb: unknown subcommand '%s' (kvwb --help lists them)\n", name);
    return 2;
}

void setApplicationIdentity()
{
    QCoreApplication::setApplicationName("kvwb");
    QCoreApplication::setApplicationVersion(QString("%1 (%2)").arg(core::appVersion(), core::gitCommit()));
}

bool setOpenMpDefaults()
{
    if (std::getenv("OMP_WAIT_POLICY"))
        return false;
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    if (!std::getenv("GOMP_SPINCOUNT"))
        ::setenv("GOMP_SPINCOUNT", "3000", 1);
    return true;
}

int runSubcommand(const Subcommand &c, const QStringList &args)
{
    try {
        return c.run(args);
    } catch (const HelpShown &h) {
        return h.code;
    } catch (const UsageError &e) {
        std::fprintf(stderr, "kvwb %s: %s (see kvwb %s --help)\n", c.name, oneLine(e.message).c_str(),
                     c.name);
        return 2;
    } catch (const core::Error &e) {
        std::fprintf(stderr, "kvwb %s: error [%s]: %s\n", c.name, core::errorCodeName(e.code()),
                     oneLine(e.what()).c_str());
        return 1;
    } catch (const std::bad_alloc &) {
        // An allocation sized from an input no reader bounded: say which inputs were in play.
        std::fprintf(stderr, "kvwb %s: error [resource]: out of memory while reading %s\n", c.name,
                     oneLine(inputFiles(args)).c_str());
        return 1;
    } catch (const std::length_error &e) {
        std::fprintf(stderr, "kvwb %s: error [resource]: a size read from %s is too large (%s)\n", c.name,
                     oneLine(inputFiles(args)).c_str(), oneLine(e.what()).c_str());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "kvwb %s: internal error: %s\n", c.name, oneLine(e.what()).c_str());
        return 1;
    }
}

} // namespace kvwb::app
