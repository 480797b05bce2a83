// Guards on semantic hits: a cached answer is not served for a question that differs from the cached
// one in a way embeddings blur - a negation or an opposite ("Is X safe?" / "Is X not safe?", "legal"
// / "illegal"), a number ("3 eggs" / "4 eggs"), a named entity ("Apple" / "Google") or the question
// word ("who" / "when", "how many" / "how much") - however close their embeddings are. Each guard is
// a plain rule over the two texts (lower-cased words, digits and number words, capitalised names and
// acronyms), so a blocked candidate can say why.
//
// Pure functions; thread-safe.
#pragma once

#include "core/util/enum_names.h"

#include <optional>
#include <string>

namespace kvwb::core {

enum class SemanticGuard
{
    None,
    Negation,    // negation or polarity: not / never / n't, un- / in- / il- / dis- opposites, more / less
    Number,      // the numbers (digits or number words) differ
    Entity,      // the named entities (capitalised words past the first, acronyms) differ
    QuestionWord // who / what / when / where / why / which / how many / how much / how long / how ...
};
inline constexpr EnumName<SemanticGuard> kSemanticGuardNames[] = {
    {SemanticGuard::None, ""},
    {SemanticGuard::Negation, "negation"},
    {SemanticGuard::Number, "number"},
    {SemanticGuard::Entity, "entity"},
    {SemanticGuard::QuestionWord, "question-word"}};
KVWB_ENUM_NAMES(SemanticGuard, kSemanticGuardNames, semanticGuardName, parseSemanticGuard)

// Which guards are on.
struct SemanticGuards
{
    bool negation = false, number = false, entity = false, questionWord = false;

    bool any() const { return negation || number || entity || questionWord; }
    static SemanticGuards all() { return {true, true, true, true}; }
    bool operator==(const SemanticGuards &) const = default;
};

// "all", "none", or a comma-separated list of negation, number, entity, question-word; nullopt for
// anything else.
std::optional<SemanticGuards> parseSemanticGuards(const std::string &text);
// "all", "none" or the list, in that order.
std::string semanticGuardsName(const SemanticGuards &guards);

struct GuardCheck
{
    SemanticGuard blocked = SemanticGuard::None; // the first guard (in the enum's order) that fires
    std::string detail; // e.g. "negation: 'not' in one question only", "number: 3 vs 4"
};

// Whether a cached answer to `cached` may serve `request` under `on`.
GuardCheck checkGuards(const std::string &request, const std::string &cached, const SemanticGuards &on);

} // namespace kvwb::core
