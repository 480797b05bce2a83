// User profiles of the knowledge tier's personalisation layer (docs/knowledge.md): how each user
// wants answers (verbosity, depth, examples, register), rendered as a short instruction placed after
// a node's knowledge and before the question. Profiles are per user and live in their own JSON file
// beside the workload; nothing of them is ever written into the shared graph.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

enum class Verbosity
{
    Brief,
    Standard,
    Detailed
};
enum class Depth
{
    Beginner,
    Intermediate,
    Expert
};
enum class Register
{
    Casual,
    Neutral,
    Formal
};
const char *verbosityName(Verbosity v) noexcept; // "brief" | "standard" | "detailed"
const char *depthName(Depth d) noexcept;         // "beginner" | "intermediate" | "expert"
const char *registerName(Register r) noexcept;   // "casual" | "neutral" | "formal"
std::optional<Verbosity> parseVerbosity(std::string_view s) noexcept;
std::optional<Depth> parseDepth(std::string_view s) noexcept;
std::optional<Register> parseRegister(std::string_view s) noexcept;

struct UserProfile
{
    std::string user; // the workload's user id, e.g. "u12"
    Verbosity verbosity = Verbosity::Standard;
    Depth depth = Depth::Intermediate;
    bool examples = false; // wants an example
    Register tone = Register::Neutral;
    bool operator==(const UserProfile &) const = default;
};

// The instruction rendered after the knowledge module, one line ending in "\n", e.g.
// "Answer in one short sentence, for a beginner, with an example, casually.\n". The standard,
// intermediate, no-example, neutral profile renders as "" (no instruction: the plain answer).
std::string profileInstruction(const UserProfile &profile);

// One profile per distinct user, in first-seen order, drawn with the seed (core/util/seeded_random.h:
// the same users and seed give the same profiles on every platform). Weights: verbosity brief 30 %,
// standard 40 %, detailed 30 %; depth beginner 40 %, intermediate 35 %, expert 25 %; examples 40 %;
// register casual 30 %, neutral 45 %, formal 25 %.
std::vector<UserProfile> generateProfiles(const std::vector<std::string> &users, uint64_t seed);

// {"profiles": [{"user", "verbosity", "depth", "examples", "register"}, ...]} with the seed recorded.
std::string profilesToJson(const std::vector<UserProfile> &profiles, uint64_t seed);
// Error(Format) naming the file and the entry (index and user) for anything malformed, a duplicate
// user included; Error(Io) when unreadable.
std::vector<UserProfile> readProfiles(const std::filesystem::path &path);

} // namespace kvwb::core
