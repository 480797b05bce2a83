// A workbench project (.kvwb, JSON): which model pair, devices and dtypes, prompt sets, workloads and
// settings an experiment uses. Paths inside are stored relative to the project file so a project
// directory can be moved or shared; resolved() gives absolute paths.
//
// Schema "kvwb-project/1" (docs/project-format.md). Unknown keys are kept on load and written back
// (later versions add sections), so older builds do not destroy newer projects.
// Thread-safety: value type.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::core {

struct ProjectModel
{
    std::filesystem::path path; // HF directory or llama2.c .bin (relative to the project file)
    std::string device = "cpu"; // cpu | cuda
    std::string dtype = "f32";  // f32 | bf16 | f16
};

struct Project
{
    std::string name;
    std::string description;
    ProjectModel modelA;                             // source
    ProjectModel modelB;                             // target
    std::vector<std::filesystem::path> promptSets;   // text or JSONL prompt files
    std::vector<std::filesystem::path> workloads;    // workload JSONL files
    std::optional<std::filesystem::path> corpus;     // corpus JSONL (training / QA evaluation)
    std::optional<std::filesystem::path> experiment; // HDF5 experiment file
    std::string extraJson = "{}"; // sections this version does not interpret, kept verbatim

    // Error(Io) unreadable; Error(Format) not JSON / wrong schema (naming the file); Error(Config)
    // naming the field for missing or mistyped fields.
    static Project load(const std::filesystem::path &file);
    // Writes atomically; paths under the project's directory are stored relative to it.
    void save(const std::filesystem::path &file) const;
    // Copy with every path made absolute against the directory of `file`.
    Project resolved(const std::filesystem::path &file) const;
};

} // namespace kvwb::core
