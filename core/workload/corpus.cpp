#include "core/workload/corpus.h"

#include "core/util/atomic_file.h"
#include "core/util/seeded_random.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <unordered_set>

namespace kvwb::core {

namespace {

std::string lower(std::string_view s)
{
    std::string out(s);
    for (char &c : out)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

bool isUpper(char c)
{
    return std::isupper(static_cast<unsigned char>(c)) != 0;
}

std::string capitalised(std::string_view s)
{
    std::string out(s);
    if (!out.empty())
        out[0] = char(std::toupper(static_cast<unsigned char>(out[0])));
    return out;
}

void replaceAll(std::string &s, std::string_view from, std::string_view to)
{
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
        s.replace(pos, from.size(), to);
}

} // namespace

const std::vector<QuestionTemplate> &questionTemplates()
{
    // Order is part of the format: training picks index into it. Append, never reorder.
    static const std::vector<QuestionTemplate> all = {
        {"what_is", "What is {a x}?", false, false},
        {"whats", "What's {a x}?", false, false},
        {"explain", "Explain {x}.", false, false},
        {"define_simple", "Define {x} in simple terms.", false, false},
        {"what_does_mean", "What does '{x}' mean?", false, false},
        {"tell_me", "Tell me about {x}.", false, false},
        {"what_is_it", "{X}: what is it?", false, false},
        {"describe", "Can you describe {x}?", false, false},
        {"definition_of", "Give me the definition of {x}.", false, false},
        {"meaning_of", "Meaning of {x}?", false, false},
        {"lower_what_is", "what is {a x}", false, true},
        {"lower_define", "define {x}", false, true},
        {"word_meant", "What is meant by the word '{x}'?", false, false},
        // Validation only: wordings the models never see in training.
        {"like_to_know", "I'd like to know what {x} means.", true, false},
        {"could_you_tell", "Could you tell me what {a x} is?", true, false},
        {"lower_meaning", "{x} meaning", true, true},
    };
    return all;
}

const QuestionTemplate *findTemplate(std::string_view id)
{
    for (const auto &t : questionTemplates())
        if (id == t.id)
            return &t;
    return nullptr;
}

std::string indefiniteArticle(std::string_view lemma)
{
    if (lemma.empty())
        return "a";
    const size_t firstSpace = lemma.find(' ');
    const std::string_view first = lemma.substr(0, firstSpace);
    const bool allCaps = std::all_of(first.begin(), first.end(),
                                     [](char c) { return !std::isalpha((unsigned char)c) || isUpper(c); });
    if (allCaps && first.size() <= 5 && std::isalpha(static_cast<unsigned char>(first[0]))) {
        // Acronyms are read letter by letter: "an FBI agent", "a CD".
        return std::string_view("AEFHILMNORSX").find(first[0]) != std::string_view::npos ? "an" : "a";
    }
    if (isUpper(lemma[0]))
        return ""; // proper noun: "What is Paris?"
    const std::string w = lower(lemma);
    for (std::string_view p : {"hour", "honest", "honor", "honour", "heir"})
        if (w.starts_with(p))
            return "an";
    // Vowel letters with a consonant sound: "a unit", "a eulogy", "a one-way street".
    for (std::string_view p : {"uni", "use", "usu", "uti", "ute", "eu", "ewe", "once", "uran", "urin", "ufo"})
        if (w.starts_with(p))
            return "a";
    if (w == "one" || w.starts_with("one ") || w.starts_with("one-"))
        return "a";
    return std::string_view("aeiou").find(w[0]) != std::string_view::npos ? "an" : "a";
}

std::string renderQuestion(const QuestionTemplate &t, std::string_view lemma)
{
    std::string q = t.pattern;
    const std::string article = indefiniteArticle(lemma);
    replaceAll(q, "{a x}", article.empty() ? std::string(lemma) : article + " " + std::string(lemma));
    replaceAll(q, "{X}", capitalised(lemma));
    replaceAll(q, "{x}", lemma);
    return t.lowercase ? lower(q) : q;
}

std::string promptFor(std::string_view question)
{
    return "Q: " + std::string(question) + "\nA:";
}

std::optional<std::string> promptHead(std::string_view prompt, std::string_view question)
{
    const std::string suffix = promptFor(question);
    if (prompt.size() < suffix.size() || prompt.substr(prompt.size() - suffix.size()) != suffix)
        return std::nullopt;
    return std::string(prompt.substr(0, prompt.size() - suffix.size()));
}

std::string trainingText(std::string_view question, std::string_view answer)
{
    return promptFor(question) + " " + std::string(answer) + "\n";
}

std::string answerFor(const WordNet &wn, const Synset &s, bool withHypernym)
{
    std::string a = capitalised(s.definition);
    if (!a.empty() && a.back() != '.' && a.back() != '!' && a.back() != '?')
        a += '.';
    if (withHypernym && !s.hypernyms.empty()) {
        const Synset *h = wn.find(s.hypernyms.front());
        if (h && !h->lemmas.empty()) {
            const std::string &hl = h->lemmas.front();
            if (s.instance) {
                const std::string art = indefiniteArticle(hl);
                a += " It is " + (art.empty() ? hl : art + " " + hl) + ".";
            } else {
                a += " It is a kind of " + hl + ".";
            }
        }
    }
    return a;
}

std::vector<Concept> selectConcepts(const WordNet &wn, size_t count, bool withHypernym)
{
    std::vector<Concept> out;
    std::unordered_set<std::string> owned; // lower-cased lemmas already given to a more popular sense
    for (const Synset *s : wn.byPopularity('n')) {
        if (out.size() >= count)
            break;
        std::vector<std::string> mine;
        for (const auto &l : s->lemmas) {
            const std::string key = lower(l);
            // A lemma belongs to its most popular sense even when that sense is skipped below
            // (no definition): a question must never have two answers.
            if (owned.insert(key).second)
                mine.push_back(l);
        }
        if (mine.empty() || s->definition.empty())
            continue;
        Concept c;
        c.synset = s;
        c.rank = int(out.size());
        c.lemmas = std::move(mine);
        c.answer = answerFor(wn, *s, withHypernym);
        out.push_back(std::move(c));
    }
    return out;
}

CorpusBuilder::CorpusBuilder(const WordNet &wordnet, CorpusOptions options)
    : m_wordnet(wordnet), m_options(options)
{}

int CorpusBuilder::examplesFor(int64_t tagCount, int64_t maxTagCount) const
{
    int trainTemplates = 0;
    for (const auto &t : questionTemplates())
        trainTemplates += t.validation ? 0 : 1;
    const int hi = m_options.maxPerConcept > 0 ? m_options.maxPerConcept : trainTemplates;
    const int lo = std::min(std::max(m_options.minPerConcept, 1), hi);
    // Log scale: WordNet tag counts span 0..~1000 for the top 3000 nouns; linear would give the
    // long tail almost nothing.
    const double w =
        maxTagCount > 0 ? std::log1p(double(std::max<int64_t>(tagCount, 0))) / std::log1p(double(maxTagCount))
                        : 0.0;
    return int(std::ceil(lo + (hi - lo) * std::min(w, 1.0) - 1e-9));
}

Corpus CorpusBuilder::build() const
{
    const auto concepts = selectConcepts(m_wordnet, m_options.concepts, m_options.hypernymSentence);
    std::vector<const QuestionTemplate *> train, valid;
    for (const auto &t : questionTemplates())
        (t.validation ? valid : train).push_back(&t);
    SeededRandom rng(m_options.seed);
    const int64_t maxTag = concepts.empty() ? 0 : concepts.front().synset->tagCount;

    Corpus corpus;
    corpus.concepts = concepts.size();
    std::vector<CorpusExample> trainEx, validEx;
    for (const auto &c : concepts) {
        const size_t T = train.size(), L = c.lemmas.size();
        std::vector<size_t> tOrder(T), lOrder(L);
        for (size_t i = 0; i < T; ++i)
            tOrder[i] = i;
        for (size_t i = 0; i < L; ++i)
            lOrder[i] = i;
        rng.shuffle(tOrder);
        rng.shuffle(lOrder);
        // The diagonal (i mod T, i mod L) for i < max(T, L) visits every template and every lemma
        // without repeating a pair; the remaining pairs follow in random order.
        std::vector<std::pair<size_t, size_t>> pairs;
        std::vector<char> used(T * L, 0);
        for (size_t i = 0; i < std::max(T, L); ++i) {
            const size_t t = tOrder[i % T], l = lOrder[i % L];
            used[t * L + l] = 1;
            pairs.emplace_back(t, l);
        }
        std::vector<std::pair<size_t, size_t>> rest;
        for (size_t t = 0; t < T; ++t)
            for (size_t l = 0; l < L; ++l)
                if (!used[t * L + l])
                    rest.emplace_back(t, l);
        rng.shuffle(rest);
        pairs.insert(pairs.end(), rest.begin(), rest.end());
        size_t n = size_t(examplesFor(c.synset->tagCount, maxTag));
        n = std::min(std::max(n, L), T * L);
        for (size_t i = 0; i < n; ++i) {
            const auto &[t, l] = pairs[i];
            const std::string q = renderQuestion(*train[t], c.lemmas[l]);
            trainEx.push_back({c.synset->id, c.rank, c.lemmas[l], train[t]->id, false, q, c.answer});
        }
        for (size_t v = 0; v < valid.size(); ++v) {
            const size_t l = lOrder[v % L];
            const std::string q = renderQuestion(*valid[v], c.lemmas[l]);
            validEx.push_back({c.synset->id, c.rank, c.lemmas[l], valid[v]->id, true, q, c.answer});
        }
    }
    rng.shuffle(trainEx);
    rng.shuffle(validEx);
    corpus.trainCount = trainEx.size();
    corpus.validationCount = validEx.size();
    corpus.examples = std::move(trainEx);
    corpus.examples.insert(corpus.examples.end(), std::make_move_iterator(validEx.begin()),
                           std::make_move_iterator(validEx.end()));
    return corpus;
}

std::string corpusToJsonl(const Corpus &corpus)
{
    std::string out;
    for (const auto &e : corpus.examples) {
        nlohmann::ordered_json j;
        j["synset"] = e.synset;
        j["rank"] = e.rank;
        j["lemma"] = e.lemma;
        j["template"] = e.templateId;
        j["split"] = e.validation ? "validation" : "train";
        j["question"] = e.question;
        j["prompt"] = promptFor(e.question);
        j["answer"] = e.answer;
        j["text"] = trainingText(e.question, e.answer);
        out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += '\n';
    }
    return out;
}

void writeCorpusJsonl(const std::filesystem::path &path, const Corpus &corpus)
{
    writeFileAtomic(path, corpusToJsonl(corpus));
}

} // namespace kvwb::core
