// A workbench project (.kvwb, JSON): which model pair, devices and dtypes, prompt sets, workloads and
// settings an experiment uses. Paths inside are stored relative to the project file so a project
// directory can be moved or shared; resolved() gives absolute paths.
//
// Schema "kvwb-project/1" (docs/project-format.md). Unknown keys are kept on load and written back
// (later versions add sections), so older builds do not destroy newer projects.
// Thread-safety: value type.
#pragma once

#include "core/model/dtype.h"
#include "core/settings/compare_settings.h"
#include "core/settings/fit_settings.h"
#include "core/settings/replay_settings.h"

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
    int context = 0;            // positions served (gpu::LoadOptions::context); 0 = the model's own
};

// Capture settings (section "capture"): what `kvwb capture` takes as flags besides its inputs and
// output (the window's capture request is these and its two paths).
struct CaptureSettings
{
    FloatType storage = FloatType::F32; // KV storage dtype
    int compress = 0;                   // deflate level 0 (off) - 9
    int maxTokens = 0;                  // truncate prompts (0 = the model's context)
    int limit = 0;                      // at most this many prompts (0 = all)
    bool postRope = false;              // store keys after RoPE
};

// Alignment settings (section "alignment"): the fit settings a project keeps (name, selection, k,
// lambda, per-head, family, rank, the MLP's width and epochs, calibration tokens; the others stay at
// their defaults) and the converter in use.
struct ProjectAlignment
{
    FitSettings fit;
    std::string inUse; // converter used by Compare and the cross tier ("" = none chosen)
};

// Compare settings (section "compare"): every Setting row of core::compareFlags() (the prompt the
// Compare step shows, its length, the gate, the recompute share, the prompt set's limit and
// baselines, ...) and the prompt set's file ("prompts"; "" the held-out prompts).
// One default differs from the command line's: the Compare step runs the baselines unless told not to.
struct ProjectCompare : CompareSettings
{
    ProjectCompare() { baselines = true; }
    ProjectCompare(const CompareSettings &s) : CompareSettings(s) {} // the settings a step shows
};

// Knowledge settings (section "knowledge"): the Knowledge step's graph and user profiles, and
// whether the Replay step's knowledge tier uses them.
struct ProjectKnowledge
{
    std::filesystem::path graph;    // "" none (relative to the project file)
    std::filesystem::path profiles; // "" none
    bool useInReplays = false;      // the Replay step's knowledge tier answers through this graph

    bool operator==(const ProjectKnowledge &) const = default;
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
    CaptureSettings capture;
    ProjectAlignment alignment;
    ReplaySettings replay; // section "replay": its Setting rows (core/settings/replay_settings.h)
    ProjectCompare compare;
    ProjectKnowledge knowledge;
    std::string extraJson = "{}"; // sections this version does not interpret, kept verbatim

    // Error(Io) unreadable; Error(Format) not JSON / wrong schema (naming the file); Error(Config)
    // naming the field for missing or mistyped fields.
    static Project load(const std::filesystem::path &file);
    // Writes atomically; paths under the project's directory are stored relative to it.
    void save(const std::filesystem::path &file) const;
    // The JSON save() writes for `file` (equal texts: nothing to save).
    std::string toJson(const std::filesystem::path &file) const;
    // Copy with every path made absolute against the directory of `file`.
    Project resolved(const std::filesystem::path &file) const;
};

} // namespace kvwb::core
