// User profiles of the knowledge tier's personalisation layer (docs/knowledge.md): how each user
// wants answers (verbosity, depth, examples, register), rendered as a short instruction placed after
// a node's knowledge and before the question. Profiles are per user and live in their own JSON file
// beside the workload; nothing of them is ever written into the shared graph.
//
// Thread-safety: plain values.
#pragma once

#include "core/util/enum_names.h"

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
inline constexpr EnumName<Verbosity> kVerbosityNames[] = {
    {Verbosity::Brief, "brief"}, {Verbosity::Standard, "standard"}, {Verbosity::Detailed, "detailed"}};
inline constexpr EnumName<Depth> kDepthNames[] = {
    {Depth::Beginner, "beginner"}, {Depth::Intermediate, "intermediate"}, {Depth::Expert, "expert"}};
inline constexpr EnumName<Register> kRegisterNames[] = {
    {Register::Casual, "casual"}, {Register::Neutral, "neutral"}, {Register::Formal, "formal"}};
KVWB_ENUM_NAMES(Verbosity, kVerbosityNames, verbosityName, parseVerbosity)
KVWB_ENUM_NAMES(Depth, kDepthNames, depthName, parseDepth)
KVWB_ENUM_NAMES(Register, kRegisterNames, registerName, parseRegister)

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

// The pieces of a concept's answer a personalised rendering is made of, taken from a node of the
// graph: its knowledge text split at " For example: " into the answer (the first sentence of which
// is the gloss, the rest "It is a kind of ...") and the examples; its synonyms; the names of its
// hyponyms in the graph.
struct AnswerParts
{
    std::string gloss;                 // "Equipment designed to serve a specific function."
    std::string rest;                  // "It is a kind of equipment." ("" when none)
    std::vector<std::string> examples; // quoted examples, without quotes
    std::vector<std::string> synonyms;
    std::vector<std::string> kinds; // hyponym names
};
class KnowledgeGraph;
struct ConceptNode;
AnswerParts answerParts(const KnowledgeGraph &graph, const ConceptNode &node);

// The answer written for a profile, as the demo's personalised model is trained to write it
// (docs/knowledge.md, "Personalisation"): an opener for the register ("Sure! " casual,
// "Certainly. " formal), one for the depth ("Simply put: " beginner, "Technically: " expert), the
// gloss, an example when wanted and available, then nothing more (brief), the rest (standard), or
// the rest plus "It is also called ..." and "Kinds of it include ..." (detailed).
std::string renderAnswer(const AnswerParts &parts, const UserProfile &profile);

// Whether an answer fits a profile, dimension by dimension, judged from the text alone: the
// register and depth openers, an example iff wanted (and one exists), one sentence iff brief.
struct ProfileFit
{
    bool verbosity = false, depth = false, examples = false, tone = false;
    bool all() const { return verbosity && depth && examples && tone; }
};
ProfileFit profileFit(const std::string &answer, const UserProfile &profile, bool exampleAvailable);

// Training documents that teach a model to render a node's knowledge for a profile (the demo's
// personalised model, docs/knowledge.md): per node, `perNode` documents, each with a profile drawn
// as generateProfiles draws them, one of the node's questions, the node's module text (3 in 4
// documents; the rest teach the profile without knowledge) and, in 3 of 5, one of the system
// prompts. text = [system + "\n\n"] [moduleText] [profileInstruction] "Q: q\nA: " answer "\n".
// One document in 20 is "validation". Deterministic for the seed.
struct PersonalDocument
{
    std::string nodeId;
    std::string split;  // "train" | "validation"
    std::string prompt; // everything before the answer
    std::string answer; // renderAnswer for the profile
    UserProfile profile;
};
std::vector<PersonalDocument> personalisedCorpus(const KnowledgeGraph &graph,
                                                 const std::vector<std::string> &systemPrompts, int perNode,
                                                 uint64_t seed);

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
