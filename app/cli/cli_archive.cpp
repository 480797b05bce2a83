#include "app/cli/cli_archive.h"

#include "app/cli/cli_util.h"
#include "core/settings/run_archive.h"

#include <QCommandLineParser>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>

namespace kvwb::app {

namespace fs = std::filesystem;
using namespace kvwb::app::cli;

namespace {

std::string bytesText(uint64_t n)
{
    if (n >= (uint64_t(1) << 30))
        return fmt::format("{:.1f} GiB", double(n) / double(uint64_t(1) << 30));
    if (n >= (uint64_t(1) << 20))
        return fmt::format("{:.1f} MiB", double(n) / double(uint64_t(1) << 20));
    return fmt::format("{:.1f} KiB", double(n) / 1024.0);
}

void printManifest(const core::ArchiveManifest &m)
{
    std::printf("project %s, written %s by kvwb %s\n", m.project.c_str(), m.createdUtc.c_str(),
                m.appVersion.c_str());
    for (const auto &model : m.models)
        std::printf("model %s: %s%s\n", model.role.c_str(), model.path.c_str(),
                    model.weightsSha256.empty()
                        ? " (weights fingerprint unknown)"
                        : fmt::format(" (weights sha256 {}...)", model.weightsSha256.substr(0, 16)).c_str());
    uint64_t total = 0;
    for (const auto &f : m.files) {
        std::printf("  %-40s %12s\n", f.path.c_str(), bytesText(f.bytes).c_str());
        total += f.bytes;
    }
    std::printf("%zu files, %s\n", m.files.size(), bytesText(total).c_str());
    for (const auto &l : m.leftOut)
        std::printf("left out: %s\n", l.c_str());
}

int exportArchive(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"out", "The archive to write (.zip).", "FILE"});
    addForceOption(p);
    parse(p, args,
          "Write a whole run as one zip file: the project, its experiment file (prompts, converters, "
          "comparisons, sweeps, ledgers), the data files it names, and a manifest with the models' paths "
          "and fingerprints (never their weights) and every file's SHA-256.",
          "PROJECT", "The project file (.kvwb).");
    if (p.positionalArguments().size() != 1)
        throw UsageError{"expected exactly one PROJECT"};
    if (!p.isSet("out"))
        throw UsageError{"--out is required"};
    const fs::path out = outputFileOption(p, "out");
    const core::ArchiveManifest m =
        core::exportRunArchive(str(p.positionalArguments().first()), out, p.isSet("force"));
    std::printf("wrote %s\n", out.c_str());
    printManifest(m);
    return 0;
}

int importArchive(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"into", "The folder to extract into (new, or empty).", "DIR"});
    p.addOption({"model-a", "Where model A is on this machine (rewrites the project's path).", "PATH"});
    p.addOption({"model-b", "Where model B is on this machine.", "PATH"});
    p.addOption({"embedder", "Where the Replay step's embedding model is on this machine.", "PATH"});
    p.addOption({"json", "Print the imported project and the models still missing as JSON."});
    parse(p, args,
          "Extract a run archive (kvwb archive export) into a new folder, checking every file against the "
          "manifest, and say which models are not where the project names them.",
          "ARCHIVE", "The run archive (.zip).");
    if (p.positionalArguments().size() != 1)
        throw UsageError{"expected exactly one ARCHIVE"};
    if (!p.isSet("into"))
        throw UsageError{"--into is required"};
    std::map<std::string, fs::path> remap;
    for (const char *role : {"a", "b"})
        if (p.isSet(QString("model-") + role))
            remap[role] = str(p.value(QString("model-") + role));
    if (p.isSet("embedder"))
        remap["embedder"] = str(p.value("embedder"));
    const core::ImportedRun run =
        core::importRunArchive(str(p.positionalArguments().first()), str(p.value("into")), remap);
    if (p.isSet("json")) {
        nlohmann::ordered_json j{{"project", run.project.string()}, {"missing_models", run.missingModels}};
        std::printf("%s\n", j.dump(2).c_str());
        return 0;
    }
    std::printf("extracted %zu files into %s\nproject: %s\n", run.manifest.files.size(),
                run.project.parent_path().parent_path().c_str(), run.project.c_str());
    for (const auto &[role, path] : run.missingModels)
        std::printf("model %s is not at %s on this machine: pass --model-%s PATH, or choose it in the Models "
                    "step\n",
                    role.c_str(), path.c_str(), role == "embedder" ? "embedder" : role.c_str());
    for (const auto &l : run.manifest.leftOut)
        std::printf("left out when archived: %s\n", l.c_str());
    return 0;
}

int showArchive(const QStringList &args)
{
    QCommandLineParser p;
    parse(p, args, "Print a run archive's manifest: the project, the models, the files and their sizes.",
          "ARCHIVE", "The run archive (.zip).");
    if (p.positionalArguments().size() != 1)
        throw UsageError{"expected exactly one ARCHIVE"};
    printManifest(core::readArchiveManifest(str(p.positionalArguments().first())));
    return 0;
}

} // namespace

int cmdArchive(const QStringList &args)
{
    const bool action = args.size() >= 2 && (args[1] == "export" || args[1] == "import" || args[1] == "show");
    if (!action) {
        if (args.size() >= 2 && (args[1] == "--help" || args[1] == "-h")) {
            std::printf("Usage: kvwb archive export|import|show [options]\n\n"
                        "  export  Write a project's whole run as one zip file\n"
                        "  import  Extract a run archive into a new folder\n"
                        "  show    Print a run archive's manifest\n"
                        "Each action has --help.\n");
            return 0;
        }
        throw UsageError{"expected an action: export, import or show (kvwb archive --help)"};
    }
    QStringList rest = args;
    rest.removeAt(1);
    if (args[1] == "export")
        return exportArchive(rest);
    return args[1] == "import" ? importArchive(rest) : showArchive(rest);
}

} // namespace kvwb::app
