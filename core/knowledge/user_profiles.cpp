#include "core/knowledge/user_profiles.h"

#include "core/knowledge/knowledge_graph.h"
#include "core/util/error.h"
#include "core/util/seeded_random.h"
#include "core/util/text_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <iterator>
#include <unordered_set>

namespace kvwb::core {

namespace {

// Index i of the weights (percent, summing to 100) that a uniform draw falls in.
size_t pick(SeededRandom &rng, std::initializer_list<int> weights)
{
    const size_t r = rng.below(100);
    size_t i = 0, sum = 0;
    for (int w : weights) {
        sum += size_t(w);
        if (r < sum)
            return i;
        ++i;
    }
    return weights.size() - 1;
}

} // namespace

std::string profileInstruction(const UserProfile &p)
{
    std::vector<std::string> parts;
    if (p.verbosity == Verbosity::Brief)
        parts.emplace_back("in one short sentence");
    else if (p.verbosity == Verbosity::Detailed)
        parts.emplace_back("in detail");
    if (p.depth == Depth::Beginner)
        parts.emplace_back("for a beginner");
    else if (p.depth == Depth::Expert)
        parts.emplace_back("for an expert");
    if (p.examples)
        parts.emplace_back("with an example");
    if (p.tone == Register::Casual)
        parts.emplace_back("casually");
    else if (p.tone == Register::Formal)
        parts.emplace_back("formally");
    if (parts.empty())
        return "";
    return "Answer " + text::join(parts, ", ") + ".\n";
}

namespace {

constexpr std::string_view kExampleMark = " For example: \"";
constexpr std::string_view kCasual = "Sure! ", kFormal = "Certainly. ";
constexpr std::string_view kBeginner = "Simply put: ", kExpert = "Technically: ";

bool startsWith(std::string_view s, std::string_view p)
{
    return s.substr(0, p.size()) == p;
}

// Sentences begun in a text: pieces between '.', '!' or '?' followed by a space or the end that
// hold a letter (a truncated last sentence counts).
int sentences(std::string_view s)
{
    int n = 0;
    bool letter = false;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (std::isalpha(static_cast<unsigned char>(c)))
            letter = true;
        if ((c == '.' || c == '!' || c == '?') && (i + 1 == s.size() || s[i + 1] == ' ')) {
            n += letter ? 1 : 0;
            letter = false;
        }
    }
    return n + (letter ? 1 : 0);
}

} // namespace

AnswerParts answerParts(const KnowledgeGraph &graph, const ConceptNode &node)
{
    AnswerParts a;
    std::string_view k = node.knowledge;
    std::string_view answer = k.substr(0, std::min(k.find(kExampleMark), k.size()));
    for (size_t at = k.find(kExampleMark); at != std::string_view::npos; at = k.find(kExampleMark, at + 1)) {
        const size_t open = at + kExampleMark.size();
        const size_t close = k.find('"', open);
        if (close == std::string_view::npos)
            break;
        a.examples.emplace_back(k.substr(open, close - open));
    }
    const size_t end = answer.find(". ");
    a.gloss = std::string(answer.substr(0, end == std::string_view::npos ? answer.size() : end + 1));
    if (end != std::string_view::npos)
        a.rest = std::string(answer.substr(end + 2));
    a.synonyms = node.synonyms;
    for (const ConceptNode *h : graph.neighbours(node.id, RelationKind::Hyponym))
        a.kinds.push_back(h->name);
    return a;
}

std::string renderAnswer(const AnswerParts &a, const UserProfile &p)
{
    std::string out;
    if (p.tone == Register::Casual)
        out += kCasual;
    else if (p.tone == Register::Formal)
        out += kFormal;
    if (p.depth == Depth::Beginner)
        out += kBeginner;
    else if (p.depth == Depth::Expert)
        out += kExpert;
    out += a.gloss;
    if (p.examples && !a.examples.empty())
        out += std::string(kExampleMark) + a.examples.front() + "\".";
    if (p.verbosity != Verbosity::Brief && !a.rest.empty())
        out += " " + a.rest;
    if (p.verbosity == Verbosity::Detailed) {
        if (!a.synonyms.empty())
            out += " It is also called " + text::join(a.synonyms, ", ") + ".";
        if (!a.kinds.empty()) {
            std::vector<std::string> kinds(a.kinds.begin(),
                                           a.kinds.begin() + std::min<size_t>(a.kinds.size(), 3));
            out += " Kinds of it include " + text::join(kinds, ", ") + ".";
        }
    }
    return out;
}

ProfileFit profileFit(const std::string &answer, const UserProfile &p, bool exampleAvailable)
{
    ProfileFit f;
    std::string_view s = answer;
    while (!s.empty() && s.front() == ' ')
        s.remove_prefix(1);
    const bool casual = startsWith(s, kCasual), formal = startsWith(s, kFormal);
    f.tone = p.tone == Register::Casual ? casual : p.tone == Register::Formal ? formal : !casual && !formal;
    if (casual)
        s.remove_prefix(kCasual.size());
    else if (formal)
        s.remove_prefix(kFormal.size());
    const bool beginner = startsWith(s, kBeginner), expert = startsWith(s, kExpert);
    f.depth = p.depth == Depth::Beginner ? beginner
              : p.depth == Depth::Expert ? expert
                                         : !beginner && !expert;
    if (beginner)
        s.remove_prefix(kBeginner.size());
    else if (expert)
        s.remove_prefix(kExpert.size());
    std::string body(s);
    const size_t ex = body.find(kExampleMark.substr(1)); // "For example: \"" anywhere
    const bool hasExample = ex != std::string::npos;
    f.examples = hasExample == (p.examples && exampleAvailable);
    if (hasExample) { // the example is not one of the answer's sentences
        const size_t close = body.find("\".", ex + kExampleMark.size() - 1);
        body.erase(ex, close == std::string::npos ? std::string::npos : close + 2 - ex);
    }
    const int n = sentences(body);
    f.verbosity = p.verbosity == Verbosity::Brief ? n == 1 : n >= 2;
    return f;
}

// The seeded draws below index the name tables by weight position: one row per value, no alias
// rows, or the same seed would give other profiles.
static_assert(std::size(kVerbosityNames) == 3 && std::size(kDepthNames) == 3 &&
              std::size(kRegisterNames) == 3);

std::vector<PersonalDocument> personalisedCorpus(const KnowledgeGraph &graph,
                                                 const std::vector<std::string> &systemPrompts, int perNode,
                                                 uint64_t seed)
{
    SeededRandom rng(seed);
    std::vector<PersonalDocument> out;
    for (const ConceptNode &n : graph.nodes()) {
        const AnswerParts parts = answerParts(graph, n);
        for (int i = 0; i < perNode; ++i) {
            PersonalDocument d;
            d.nodeId = n.id;
            d.profile.user = "train";
            d.profile.verbosity = kVerbosityNames[pick(rng, {30, 40, 30})].value;
            d.profile.depth = kDepthNames[pick(rng, {40, 35, 25})].value;
            d.profile.examples = pick(rng, {60, 40}) == 1;
            d.profile.tone = kRegisterNames[pick(rng, {30, 45, 25})].value;
            const bool withKnowledge = rng.below(4) != 0;
            const bool withSystem = !systemPrompts.empty() && rng.below(5) < 3;
            const std::string question =
                n.questions.empty() ? "What is " + n.name + "?" : n.questions[rng.below(n.questions.size())];
            const std::string system = withSystem ? systemPrompts[rng.below(systemPrompts.size())] : "";
            d.split = rng.below(20) == 0 ? "validation" : "train";
            d.prompt = (system.empty() ? "" : system + "\n\n") + (withKnowledge ? moduleText(n) : "") +
                       profileInstruction(d.profile) + "Q: " + question + "\nA:";
            d.answer = renderAnswer(parts, d.profile);
            out.push_back(std::move(d));
        }
    }
    return out;
}

std::vector<UserProfile> generateProfiles(const std::vector<std::string> &users, uint64_t seed)
{
    SeededRandom rng(seed);
    std::vector<UserProfile> out;
    std::unordered_set<std::string> seen;
    for (const auto &u : users) {
        if (!seen.insert(u).second)
            continue;
        UserProfile p;
        p.user = u;
        p.verbosity = kVerbosityNames[pick(rng, {30, 40, 30})].value;
        p.depth = kDepthNames[pick(rng, {40, 35, 25})].value;
        p.examples = pick(rng, {60, 40}) == 1;
        p.tone = kRegisterNames[pick(rng, {30, 45, 25})].value;
        out.push_back(std::move(p));
    }
    return out;
}

std::string profilesToJson(const std::vector<UserProfile> &profiles, uint64_t seed)
{
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto &p : profiles) {
        nlohmann::ordered_json j;
        j["user"] = p.user;
        j["verbosity"] = verbosityName(p.verbosity);
        j["depth"] = depthName(p.depth);
        j["examples"] = p.examples;
        j["register"] = registerName(p.tone);
        list.push_back(std::move(j));
    }
    nlohmann::ordered_json root;
    root["seed"] = seed;
    root["profiles"] = std::move(list);
    return root.dump(2) + "\n";
}

std::vector<UserProfile> readProfiles(const std::filesystem::path &path)
{
    const std::string name = path.string();
    nlohmann::json root;
    try {
        root = nlohmann::json::parse(text::readWholeFile(path));
    } catch (const nlohmann::json::exception &e) {
        throw Error(ErrorCode::Format, name + ": not JSON (" + e.what() + ")");
    }
    if (!root.is_object() || !root.contains("profiles") || !root["profiles"].is_array())
        throw Error(ErrorCode::Format, name + ": expected an object with an array 'profiles'");
    std::vector<UserProfile> out;
    std::unordered_set<std::string> seen;
    size_t i = 0;
    for (const auto &j : root["profiles"]) {
        const std::string at = fmt::format("{}: profiles[{}]", name, i++);
        if (!j.is_object() || !j.contains("user") || !j["user"].is_string())
            throw Error(ErrorCode::Format, at + ": an object with a string 'user' expected");
        UserProfile p;
        p.user = j["user"].get<std::string>();
        const std::string who = at + " (" + p.user + ")";
        if (!seen.insert(p.user).second)
            throw Error(ErrorCode::Format, who + ": a second profile for this user");
        const auto field = [&](const char *key) {
            if (!j.contains(key) || !j[key].is_string())
                throw Error(ErrorCode::Format,
                            who + fmt::format(": field '{}' is missing or not a string", key));
            return j[key].get<std::string>();
        };
        const auto bad = [&](const char *key, const std::string &v, const char *allowed) {
            return Error(ErrorCode::Format, who + fmt::format(": {} '{}' is not {}", key, v, allowed));
        };
        const auto v = field("verbosity");
        const auto d = field("depth");
        const auto r = field("register");
        p.verbosity = parseVerbosity(v).value_or(Verbosity::Standard);
        if (!parseVerbosity(v))
            throw bad("verbosity", v, "brief, standard or detailed");
        if (!parseDepth(d))
            throw bad("depth", d, "beginner, intermediate or expert");
        if (!parseRegister(r))
            throw bad("register", r, "casual, neutral or formal");
        p.depth = *parseDepth(d);
        p.tone = *parseRegister(r);
        if (!j.contains("examples") || !j["examples"].is_boolean())
            throw Error(ErrorCode::Format, who + ": field 'examples' is missing or not true/false");
        p.examples = j["examples"].get<bool>();
        out.push_back(std::move(p));
    }
    return out;
}

} // namespace kvwb::core
