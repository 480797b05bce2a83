// Prompt sets whose continuation depends on what the prompt stated earlier: names, numbers and facts
// given in the context and asked for at its end, each prompt with its expected answer. A transfer
// that carries the topic but garbles one name or digit keeps a low mean KL on ordinary prompts; on
// these the answer itself is at stake, and B with no prefix cannot know it.
//
// Kinds (docs/corpus-and-workload.md, "Context prompt sets"):
//   names    "Anna has a dog called Pepper. Tom has a cat called Biscuit. ... Tom's cat is called" ->
//   "Biscuit" numbers  "Anna's room number is 4817. Tom's room number is 2290. ... Tom's room number is" ->
//   "2290" facts    WordNet concepts asked and answered in the Q/A chat format of `kvwb corpus`, then one of
//            them asked again in another wording -> its answer; with `counterfactual`, the answers
//            stated in the context belong to other concepts, so only a model that reads the context
//            (not its memory) gives the expected one.
// `entities` facts are stated, `distance` neutral sentences (names, numbers) or further Q/A turns
// (facts) stand between the last of them and the question, and which entity is asked is drawn.
//
// Seeded (SeededRandom): the output is identical for a seed. Thread-safety: pure functions; the
// WordNet must outlive the call.
#pragma once

#include "core/workload/wordnet.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

enum class ContextKind
{
    Names,
    Numbers,
    Facts
};
const char *contextKindName(ContextKind kind);
// "names", "numbers", "facts"; Error(InvalidArgument) naming the word otherwise.
ContextKind parseContextKind(std::string_view name);

struct ContextPromptOptions
{
    std::vector<ContextKind> kinds{ContextKind::Names, ContextKind::Numbers, ContextKind::Facts};
    int perKind = 100;            // prompts of each kind
    int entities = 3;             // facts stated in each prompt (2..8)
    int distance = 2;             // sentences or Q/A turns between the facts and the question (0..32)
    bool counterfactual = false;  // facts: the context states other concepts' answers
    size_t concepts = 3000;       // facts: the most popular WordNet concepts drawn from
    bool hypernymSentence = true; // facts: answers end with " It is a kind of X." as in `kvwb corpus`
    uint64_t seed = 1;
};
// Error(InvalidArgument) naming the field out of range.
void checkContextPromptOptions(const ContextPromptOptions &options);

struct ContextPrompt
{
    ContextKind kind = ContextKind::Names;
    std::string prompt; // ends where the answer starts (no trailing space)
    std::string answer; // without a leading space: "Biscuit", "2290", "A friend who ..."
    int entities = 0, distance = 0, asked = 0; // asked: which stated fact (0 = the first)
};

// Every kind's prompts, kind by kind in options.kinds order. `wordnet` is needed for facts only
// (nullptr otherwise; Error(InvalidArgument) when facts are asked for without it, Error(Format) when
// it has fewer usable concepts than a prompt needs).
std::vector<ContextPrompt> buildContextPrompts(const ContextPromptOptions &options, const WordNet *wordnet);
// One JSON object a line: kind, split ("validation"), prompt, answer, text (prompt + " " + answer),
// entities, distance, asked. `kvwb compare --prompts` reads prompt and answer.
std::string contextPromptsToJsonl(const std::vector<ContextPrompt> &prompts);

} // namespace kvwb::core
