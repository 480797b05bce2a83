// Question/answer training corpus built from WordNet noun concepts, for the two demo models.
//
// selectConcepts() picks the N most popular usable noun synsets and gives each lemma to its most
// popular sense, so that one question never has two answers. CorpusBuilder renders every concept
// through phrasing templates and every owned synonym, split BY TEMPLATE: validation templates
// never appear in training, so validation measures generalisation to unseen wording. Output is
// seeded (SeededRandom over std::mt19937_64) and reproducible byte-for-byte for a seed.
// The text formats are documented in docs/corpus-and-workload.md.
//
// Thread-safety: free functions and a const build(); the WordNet must outlive the builder and the
// Concepts (they point into it).
#pragma once

#include "core/workload/wordnet.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

// One way of asking "what is X?". Placeholders: {x} the lemma, {a x} the lemma with its
// indefinite article ("a car", "an apple", "Paris"), {X} the lemma with a capital first letter.
struct QuestionTemplate
{
    const char *id;      // stable name written into the corpus and workload ("what_is")
    const char *pattern; // e.g. "What is {a x}?"
    bool validation;     // true: only ever used for the validation split
    bool lowercase;      // true: the whole question is lower-cased (users who type lazily)
};

// The fixed template table: 13 training templates, then 3 validation-only ones.
const std::vector<QuestionTemplate> &questionTemplates();
const QuestionTemplate *findTemplate(std::string_view id);
// "a" or "an" for a common noun (vowel sound heuristics: "an hour", "a unit", "an FBI agent"),
// "" for a proper noun (capitalised lemma, e.g. "Paris").
std::string indefiniteArticle(std::string_view lemma);
std::string renderQuestion(const QuestionTemplate &t, std::string_view lemma);

// The chat format both models are trained on and queried with.
// promptFor("What is a car?") == "Q: What is a car?\nA:"
std::string promptFor(std::string_view question);
// What comes before promptFor(question) in a prompt that ends with it (a workload's system prompt
// and its "\n\n", or ""); nullopt when the prompt does not end with it.
std::optional<std::string> promptHead(std::string_view prompt, std::string_view question);
// trainingText(q, a) == promptFor(q) + " " + a + "\n"
std::string trainingText(std::string_view question, std::string_view answer);

struct Concept
{
    const Synset *synset = nullptr;  // points into the WordNet
    int rank = 0;                    // 0 = most popular selected concept
    std::vector<std::string> lemmas; // lemmas this concept owns, in WordNet order (never empty)
    std::string answer;              // definition, capitalised, ending with '.', plus hypernym sentence
};

// The answer text for a synset: definition with a capital first letter and a final '.', followed
// (when withHypernym and s has one) by " It is a kind of <first lemma of first hypernym>." or, for
// an instance, " It is <a> <hypernym lemma>.".
std::string answerFor(const WordNet &wn, const Synset &s, bool withHypernym);

// The `count` most popular noun synsets (WordNet::byPopularity order) that have a definition and at
// least one lemma not already owned by a more popular synset (case-insensitive).
std::vector<Concept> selectConcepts(const WordNet &wn, size_t count, bool withHypernym = true);

struct CorpusOptions
{
    size_t concepts = 3000;
    uint64_t seed = 1;
    bool hypernymSentence = true; // append " It is a kind of X." to answers
    // Training examples per concept grow with log popularity from minPerConcept (least popular
    // selected concept) to maxPerConcept (the most popular); 0 = the number of training templates.
    // Always at least one per owned lemma and at most templates x lemmas. See docs.
    int minPerConcept = 4;
    int maxPerConcept = 0;
};

struct CorpusExample
{
    std::string synset;     // "n02958343"
    int rank = 0;           // concept popularity rank, 0 = most popular
    std::string lemma;      // the synonym the question uses
    std::string templateId; // QuestionTemplate::id
    bool validation = false;
    std::string question; // "What is a car?"
    std::string answer;   // "A motor vehicle with four wheels. It is a kind of motor vehicle."
};

struct Corpus
{
    std::vector<CorpusExample> examples; // training examples (shuffled), then validation (shuffled)
    size_t concepts = 0;
    size_t trainCount = 0;
    size_t validationCount = 0;
};

class CorpusBuilder
{
public:
    CorpusBuilder(const WordNet &wordnet, CorpusOptions options);
    Corpus build() const;
    // Training examples a concept with this tag count gets before the per-lemma floor and the
    // templates x lemmas cap (maxTagCount: that of the most popular selected concept).
    int examplesFor(int64_t tagCount, int64_t maxTagCount) const;

private:
    const WordNet &m_wordnet;
    CorpusOptions m_options;
};

// One JSON object a line: {"synset","rank","lemma","template","split","question","prompt","answer","text"}.
std::string corpusToJsonl(const Corpus &corpus);
void writeCorpusJsonl(const std::filesystem::path &path, const Corpus &corpus);

} // namespace kvwb::core
