// Run archives: a whole run as one zip file, to move to another machine or keep beside a paper. It
// holds the project file, the experiment file (its prompts, converters, comparisons, sweeps and
// ledgers), the data files the project names (prompt sets, workloads, corpus, the Compare prompt
// set, the knowledge graph and profiles, a price file), and a manifest: the models' paths and
// fingerprints - never their weights -, every file's size and SHA-256, and what was left out (a
// file the project names that is not there). A project never holds the shared store's key file (a
// run setting), so no archive does.
//
// Layout (docs/project-format.md, "Run archives"): kvwb-archive.json first, then run/<project>.kvwb,
// run/<experiment>.h5 and run/data/<file>. The archived project names its files relative to itself
// and its models by their absolute paths on the machine that wrote it.
//
// Thread-safety: functions on values and files; run them off the GUI thread for big experiments.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace kvwb::core {

inline constexpr const char *kArchiveSchema = "kvwb-archive/1";
inline constexpr const char *kArchiveManifestName = "kvwb-archive.json";

struct ArchivedModel
{
    std::string role;          // "a", "b" or "embedder"
    std::string path;          // where it was, on the machine that wrote the archive
    std::string weightsSha256; // the experiment file's record of its weights ("" unknown)
    std::string architecture;  // e.g. "llama" ("" unknown)
};

struct ArchivedFile
{
    std::string path; // inside the archive, e.g. "run/data/prompts.txt"
    uint64_t bytes = 0;
    std::string sha256;
};

struct ArchiveManifest
{
    std::string createdUtc;
    std::string appVersion;
    std::string project; // the project file's path inside the archive
    std::vector<ArchivedModel> models;
    std::vector<ArchivedFile> files;  // in archive order, the project first
    std::vector<std::string> leftOut; // one line each: what was not archived and why
    std::string toJson() const;
    // Error(Format) naming `source` and the field for anything but a manifest this build can trust.
    static ArchiveManifest fromJson(const std::string &json, const std::string &source);
};

// Writes the run of the project saved at projectFile to out, a zip file: to out + ".tmp", then
// renamed. An existing out is replaced only when replace is set (Error(InvalidArgument) naming it
// otherwise). A file the project names that does not exist is left out and listed in leftOut.
// Error(Io) naming the file that cannot be read or written, or that changed while it was archived.
ArchiveManifest exportRunArchive(const std::filesystem::path &projectFile, const std::filesystem::path &out,
                                 bool replace = false);

struct ImportedRun
{
    std::filesystem::path project; // the extracted project file
    ArchiveManifest manifest;
    // Models the project names whose paths do not exist here: role "a" / "b" / "embedder" -> the
    // path the project names (after remapping).
    std::map<std::string, std::string> missingModels;
};

// Extracts archive into `into` (which must not exist, or be an empty folder): every entry is checked
// against the manifest as it streams - a path inside run/ without "..", a regular file the manifest
// lists once, its size and SHA-256 - and the whole run is written to a temporary folder beside
// `into` and renamed into place, so `into` is either absent or complete. remap ("a", "b" or
// "embedder" -> path) points the project at models where they are here. Error(Format) naming the
// archive and the entry at fault; Error(Io) for a folder that cannot be written or lacks the room.
ImportedRun importRunArchive(const std::filesystem::path &archive, const std::filesystem::path &into,
                             const std::map<std::string, std::filesystem::path> &remap = {});

// The manifest alone (the first entry), checked as importRunArchive checks it.
ArchiveManifest readArchiveManifest(const std::filesystem::path &archive);

} // namespace kvwb::core
