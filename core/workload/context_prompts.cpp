#include "core/workload/context_prompts.h"

#include "core/util/error.h"
#include "core/util/seeded_random.h"
#include "core/workload/corpus.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>

namespace kvwb::core {

namespace {

constexpr std::array kPeople{"Anna", "Tom", "Lily", "Ben",  "Sara", "Omar", "Mia",  "Jack", "Nora", "Leo",
                             "Ella", "Sam", "Ruth", "Ivan", "Zoe",  "Hugo", "Maya", "Paul", "Ines", "Kai"};
constexpr std::array kPets{"dog", "cat", "horse", "parrot", "rabbit", "goat", "pony", "hamster"};
constexpr std::array kPetNames{"Pepper", "Biscuit", "Luna",  "Max",   "Rosie",  "Toby",  "Daisy",
                               "Milo",   "Coco",    "Bella", "Oscar", "Ziggy",  "Hazel", "Rocky",
                               "Mabel",  "Jasper",  "Olive", "Felix", "Ginger", "Pip"};
constexpr std::array kFiller{"The sky was grey that morning.",
                             "A train passed in the distance.",
                             "It had rained the night before.",
                             "The shop on the corner was closed.",
                             "Somebody was playing music next door.",
                             "The kettle began to boil.",
                             "A bird sat on the fence.",
                             "The wind moved the curtains.",
                             "The clock on the wall ticked.",
                             "There was fresh bread on the table.",
                             "The street lights came on one by one.",
                             "A dog barked somewhere down the road.",
                             "The window was open a little.",
                             "Nobody said anything for a while.",
                             "The radio was playing an old song.",
                             "Leaves were falling in the garden."};
constexpr int kMaxEntities = 8, kMaxDistance = 16;

// k distinct indices below n, in draw order.
std::vector<size_t> distinct(SeededRandom &rng, size_t n, size_t k)
{
    std::vector<size_t> all(n);
    for (size_t i = 0; i < n; ++i)
        all[i] = i;
    for (size_t i = 0; i < k; ++i)
        std::swap(all[i], all[i + rng.below(n - i)]);
    all.resize(k);
    return all;
}

std::string filler(SeededRandom &rng, int distance)
{
    std::string out;
    for (size_t i : distinct(rng, kFiller.size(), size_t(distance)))
        out += std::string(" ") + kFiller[i];
    return out;
}

ContextPrompt namesPrompt(SeededRandom &rng, const ContextPromptOptions &o)
{
    const auto people = distinct(rng, kPeople.size(), size_t(o.entities));
    const auto names = distinct(rng, kPetNames.size(), size_t(o.entities));
    std::vector<size_t> pets;
    for (int i = 0; i < o.entities; ++i)
        pets.push_back(rng.below(kPets.size()));
    std::string text;
    for (int i = 0; i < o.entities; ++i)
        text += fmt::format("{}{} has a {} called {}.", i ? " " : "", kPeople[people[size_t(i)]],
                            kPets[pets[size_t(i)]], kPetNames[names[size_t(i)]]);
    text += filler(rng, o.distance);
    const size_t asked = rng.below(size_t(o.entities));
    text += fmt::format(" {}'s {} is called", kPeople[people[asked]], kPets[pets[asked]]);
    return {ContextKind::Names, text, kPetNames[names[asked]], o.entities, o.distance, int(asked)};
}

ContextPrompt numbersPrompt(SeededRandom &rng, const ContextPromptOptions &o)
{
    const auto people = distinct(rng, kPeople.size(), size_t(o.entities));
    std::vector<int> numbers;
    while (numbers.size() < size_t(o.entities)) {
        const int n = 100 + int(rng.below(9900)); // 3 or 4 digits
        if (std::find(numbers.begin(), numbers.end(), n) == numbers.end())
            numbers.push_back(n);
    }
    std::string text;
    for (int i = 0; i < o.entities; ++i)
        text += fmt::format("{}{}'s room number is {}.", i ? " " : "", kPeople[people[size_t(i)]],
                            numbers[size_t(i)]);
    text += filler(rng, o.distance);
    const size_t asked = rng.below(size_t(o.entities));
    text += fmt::format(" {}'s room number is", kPeople[people[asked]]);
    return {ContextKind::Numbers, text, std::to_string(numbers[asked]), o.entities, o.distance, int(asked)};
}

// The Q/A chat format of `kvwb corpus`: stated turns in training wordings, the question in a
// validation wording (one the demo models never trained on).
ContextPrompt factsPrompt(SeededRandom &rng, const ContextPromptOptions &o,
                          const std::vector<Concept> &concepts,
                          const std::vector<const QuestionTemplate *> &stated,
                          const std::vector<const QuestionTemplate *> &asking)
{
    const size_t turns = size_t(o.entities + o.distance);
    // the stated concepts, then (counterfactual) the concepts whose answers they are given
    const auto drawn = distinct(rng, concepts.size(), turns + (o.counterfactual ? size_t(o.entities) : 0));
    std::vector<std::string> answers;
    for (size_t i = 0; i < turns; ++i)
        answers.push_back(concepts[drawn[i]].answer);
    if (o.counterfactual)
        for (size_t i = 0; i < size_t(o.entities); ++i)
            answers[i] = concepts[drawn[turns + i]].answer;
    std::string text;
    std::vector<std::string> lemmas;
    for (size_t i = 0; i < turns; ++i) {
        const auto &c = concepts[drawn[i]];
        lemmas.push_back(c.lemmas[rng.below(c.lemmas.size())]);
        text += trainingText(renderQuestion(*stated[rng.below(stated.size())], lemmas.back()), answers[i]);
    }
    const size_t asked = rng.below(size_t(o.entities));
    text += promptFor(renderQuestion(*asking[rng.below(asking.size())], lemmas[asked]));
    return {ContextKind::Facts, text, answers[asked], o.entities, o.distance, int(asked)};
}

} // namespace

const char *contextKindName(ContextKind kind)
{
    switch (kind) {
    case ContextKind::Names:
        return "names";
    case ContextKind::Numbers:
        return "numbers";
    case ContextKind::Facts:
        return "facts";
    }
    return "?";
}

ContextKind parseContextKind(std::string_view name)
{
    for (auto k : {ContextKind::Names, ContextKind::Numbers, ContextKind::Facts})
        if (name == contextKindName(k))
            return k;
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("unknown context kind '{}' (names, numbers or facts)", name));
}

void checkContextPromptOptions(const ContextPromptOptions &o)
{
    const auto bad = [](const char *field, const std::string &why) {
        throw Error(ErrorCode::InvalidArgument, fmt::format("{}: {}", field, why));
    };
    if (o.kinds.empty())
        bad("kinds", "at least one kind");
    if (o.perKind < 1 || o.perKind > 1000000)
        bad("count", fmt::format("{} is not in 1..1000000", o.perKind));
    if (o.entities < 2 || o.entities > kMaxEntities)
        bad("entities", fmt::format("{} is not in 2..{}", o.entities, kMaxEntities));
    if (o.distance < 0 || o.distance > kMaxDistance)
        bad("distance", fmt::format("{} is not in 0..{}", o.distance, kMaxDistance));
    if (o.concepts < 1)
        bad("concepts", "at least 1");
}

std::vector<ContextPrompt> buildContextPrompts(const ContextPromptOptions &o, const WordNet *wordnet)
{
    checkContextPromptOptions(o);
    const bool facts = std::find(o.kinds.begin(), o.kinds.end(), ContextKind::Facts) != o.kinds.end();
    std::vector<Concept> concepts;
    std::vector<const QuestionTemplate *> stated, asking;
    if (facts) {
        if (!wordnet)
            throw Error(ErrorCode::InvalidArgument, "facts need WordNet");
        concepts = selectConcepts(*wordnet, o.concepts, o.hypernymSentence);
        const size_t need = size_t(o.entities + o.distance + (o.counterfactual ? o.entities : 0));
        if (concepts.size() < need)
            throw Error(ErrorCode::Format, fmt::format("{}: {} usable concepts, a facts prompt needs {}",
                                                       wordnet->dir().string(), concepts.size(), need));
        for (const auto &t : questionTemplates())
            (t.validation ? asking : stated).push_back(&t);
    }
    std::vector<ContextPrompt> out;
    for (size_t k = 0; k < o.kinds.size(); ++k) {
        // one stream per kind, so a kind's prompts do not change with the kinds beside it
        SeededRandom rng(o.seed * 1000003u + uint64_t(o.kinds[k]));
        for (int i = 0; i < o.perKind; ++i)
            switch (o.kinds[k]) {
            case ContextKind::Names:
                out.push_back(namesPrompt(rng, o));
                break;
            case ContextKind::Numbers:
                out.push_back(numbersPrompt(rng, o));
                break;
            case ContextKind::Facts:
                out.push_back(factsPrompt(rng, o, concepts, stated, asking));
                break;
            }
    }
    return out;
}

std::string contextPromptsToJsonl(const std::vector<ContextPrompt> &prompts)
{
    std::string out;
    for (const auto &p : prompts) {
        nlohmann::ordered_json j;
        j["kind"] = contextKindName(p.kind);
        j["split"] = "validation";
        j["prompt"] = p.prompt;
        j["answer"] = p.answer;
        j["text"] = p.prompt + " " + p.answer;
        j["entities"] = p.entities;
        j["distance"] = p.distance;
        j["asked"] = p.asked;
        out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += '\n';
    }
    return out;
}

} // namespace kvwb::core
