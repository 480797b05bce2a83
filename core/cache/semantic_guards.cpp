#include "core/cache/semantic_guards.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace kvwb::core {

namespace {

struct Word
{
    std::string lower;
    bool capitalised = false; // starts with an upper-case letter
    bool acronym = false;     // two or more letters, all upper-case
    bool first = false;       // the first word of a sentence
};

// Words (letters, digits, apostrophes and inner '.' or ',' of numbers) with their case.
std::vector<Word> words(const std::string &text)
{
    std::vector<Word> out;
    bool sentenceStart = true;
    size_t i = 0;
    while (i < text.size()) {
        const unsigned char c = static_cast<unsigned char>(text[i]);
        if (!std::isalnum(c) && c < 0x80) {
            if (c == '.' || c == '?' || c == '!' || c == '\n')
                sentenceStart = true;
            ++i;
            continue;
        }
        size_t j = i;
        while (j < text.size()) {
            const unsigned char d = static_cast<unsigned char>(text[j]);
            const bool inner = (d == '\'' || d == '.' || d == ',') && j + 1 < text.size() &&
                               std::isalnum(static_cast<unsigned char>(text[j + 1])) && j > i &&
                               (d == '\'' || std::isdigit(static_cast<unsigned char>(text[j - 1])));
            if (!(std::isalnum(d) || d >= 0x80 || inner))
                break;
            ++j;
        }
        Word w;
        const std::string raw = text.substr(i, j - i);
        w.capitalised = std::isupper(static_cast<unsigned char>(raw[0])) != 0;
        int letters = 0, upper = 0;
        for (char ch : raw) {
            const unsigned char u = static_cast<unsigned char>(ch);
            letters += std::isalpha(u) ? 1 : 0;
            upper += std::isupper(u) ? 1 : 0;
            w.lower += char(std::tolower(u));
        }
        w.acronym = letters >= 2 && upper == letters;
        w.first = sentenceStart;
        sentenceStart = false;
        out.push_back(std::move(w));
        i = j;
    }
    return out;
}

// ---- negation and polarity ----

const std::set<std::string> &negators()
{
    static const std::set<std::string> s = {"not",     "no",  "never",   "none",   "nobody", "nothing",
                                            "neither", "nor", "without", "cannot", "nowhere"};
    return s;
}

bool isNegator(const std::string &w)
{
    return negators().count(w) > 0 || (w.size() > 3 && w.compare(w.size() - 3, 3, "n't") == 0) ||
           (w.size() > 2 && w.compare(w.size() - 2, 2, "nt") == 0 &&
            std::set<std::string>{"dont", "doesnt", "didnt", "isnt", "arent", "wasnt", "werent", "cant",
                                  "wont", "shouldnt", "wouldnt", "couldnt", "hasnt", "havent", "hadnt"}
                    .count(w) > 0);
}

// Pairs whose members turn a question around.
const std::map<std::string, std::string> &opposites()
{
    static const std::map<std::string, std::string> m = [] {
        const std::pair<const char *, const char *> pairs[] = {
            {"more", "less"},         {"most", "least"},
            {"best", "worst"},        {"better", "worse"},
            {"before", "after"},      {"above", "below"},
            {"higher", "lower"},      {"highest", "lowest"},
            {"largest", "smallest"},  {"larger", "smaller"},
            {"increase", "decrease"}, {"maximum", "minimum"},
            {"max", "min"},           {"true", "false"},
            {"positive", "negative"}, {"first", "last"},
            {"start", "end"},         {"safe", "dangerous"},
            {"good", "bad"},          {"fastest", "slowest"},
            {"faster", "slower"},     {"advantages", "disadvantages"},
            {"pros", "cons"},         {"love", "hate"},
            {"win", "lose"}};
        std::map<std::string, std::string> out;
        for (const auto &[a, b] : pairs) {
            out.emplace(a, b);
            out.emplace(b, a);
        }
        return out;
    }();
    return m;
}

// A word of one text that is the other text's word with a negating prefix ("unsafe" / "safe").
std::string affixOpposite(const std::set<std::string> &mine, const std::set<std::string> &theirs)
{
    for (const std::string &w : mine)
        for (const char *prefix : {"un", "in", "im", "il", "ir", "dis", "non"}) {
            const size_t n = std::char_traits<char>::length(prefix);
            if (w.size() > n + 2 && w.compare(0, n, prefix) == 0 && theirs.count(w.substr(n)) > 0 &&
                mine.count(w.substr(n)) == 0)
                return w + "' / '" + w.substr(n);
        }
    return {};
}

std::string negationDifference(const std::vector<Word> &a, const std::vector<Word> &b)
{
    int na = 0, nb = 0;
    std::string wa, wb;
    std::set<std::string> sa, sb;
    for (const auto &w : a) {
        sa.insert(w.lower);
        if (isNegator(w.lower)) {
            ++na;
            wa = w.lower;
        }
    }
    for (const auto &w : b) {
        sb.insert(w.lower);
        if (isNegator(w.lower)) {
            ++nb;
            wb = w.lower;
        }
    }
    if (na % 2 != nb % 2)
        return "'" + (na % 2 ? wa : wb) + "' in one question only";
    for (const std::string &w : sa) {
        const auto it = opposites().find(w);
        if (it != opposites().end() && sb.count(it->second) > 0 && sa.count(it->second) == 0 &&
            sb.count(w) == 0)
            return "'" + w + "' / '" + it->second + "'";
    }
    if (auto d = affixOpposite(sa, sb); !d.empty())
        return "'" + d + "'";
    if (auto d = affixOpposite(sb, sa); !d.empty())
        return "'" + d + "'";
    return {};
}

// ---- numbers ----

const std::map<std::string, std::string> &numberWords()
{
    static const std::map<std::string, std::string> m = {
        {"zero", "0"},        {"two", "2"},           {"three", "3"},
        {"four", "4"},        {"five", "5"},          {"six", "6"},
        {"seven", "7"},       {"eight", "8"},         {"nine", "9"},
        {"ten", "10"},        {"eleven", "11"},       {"twelve", "12"},
        {"thirteen", "13"},   {"fourteen", "14"},     {"fifteen", "15"},
        {"sixteen", "16"},    {"seventeen", "17"},    {"eighteen", "18"},
        {"nineteen", "19"},   {"twenty", "20"},       {"thirty", "30"},
        {"forty", "40"},      {"fifty", "50"},        {"hundred", "100"},
        {"thousand", "1000"}, {"million", "1000000"}, {"billion", "1000000000"},
        {"half", "0.5"},      {"dozen", "12"}};
    return m;
}

std::multiset<std::string> numbers(const std::vector<Word> &ws)
{
    std::multiset<std::string> out;
    for (const auto &w : ws) {
        if (std::isdigit(static_cast<unsigned char>(w.lower[0]))) {
            std::string n;
            for (char c : w.lower)
                if (c != ',')
                    n += c;
            out.insert(n);
        } else if (const auto it = numberWords().find(w.lower); it != numberWords().end()) {
            out.insert(it->second);
        }
    }
    return out;
}

std::string join(const std::multiset<std::string> &s)
{
    std::string out;
    for (const auto &x : s)
        out += (out.empty() ? "" : " ") + x;
    return out.empty() ? "none" : out;
}

// ---- named entities ----

const std::set<std::string> &commonCapitalised()
{
    // words written capitalised that name nothing in particular
    static const std::set<std::string> s = {
        "i",    "i'm",   "i've",  "i'd", "i'll", "a",   "an", "the",  "what",   "who",  "how",   "why",
        "when", "where", "which", "is",  "are",  "can", "do", "does", "should", "will", "would", "could"};
    return s;
}

std::set<std::string> entities(const std::vector<Word> &ws)
{
    std::set<std::string> out;
    for (const auto &w : ws)
        if ((w.acronym || (w.capitalised && !w.first)) && commonCapitalised().count(w.lower) == 0 &&
            !std::isdigit(static_cast<unsigned char>(w.lower[0])))
            out.insert(w.lower);
    return out;
}

// ---- question words ----

std::string questionWord(const std::vector<Word> &ws)
{
    static const std::set<std::string> wh = {"who", "whom", "whose", "what", "when", "where", "why", "which"};
    static const std::set<std::string> howWhat = {"many", "much",  "long", "old",
                                                  "far",  "often", "big",  "tall"};
    for (size_t i = 0; i < ws.size(); ++i) {
        const std::string w = ws[i].lower.substr(0, ws[i].lower.find('\'')); // "what's": what
        if (wh.count(w))
            return w == "whom" ? "who" : w;
        if (ws[i].lower == "how")
            return i + 1 < ws.size() && howWhat.count(ws[i + 1].lower) ? "how " + ws[i + 1].lower : "how";
    }
    return {};
}

} // namespace

std::optional<SemanticGuards> parseSemanticGuards(const std::string &text)
{
    if (text == "all")
        return SemanticGuards::all();
    if (text == "none" || text.empty())
        return SemanticGuards{};
    SemanticGuards g;
    if (text.back() == ',')
        return std::nullopt; // an empty last item
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        const auto kind = parseSemanticGuard(item);
        if (!kind || *kind == SemanticGuard::None)
            return std::nullopt;
        switch (*kind) {
        case SemanticGuard::Negation:
            g.negation = true;
            break;
        case SemanticGuard::Number:
            g.number = true;
            break;
        case SemanticGuard::Entity:
            g.entity = true;
            break;
        case SemanticGuard::QuestionWord:
            g.questionWord = true;
            break;
        case SemanticGuard::None:
            break;
        }
    }
    return g;
}

std::string semanticGuardsName(const SemanticGuards &g)
{
    if (g == SemanticGuards::all())
        return "all";
    if (!g.any())
        return "none";
    std::string out;
    for (const auto &[on, name] : {std::pair{g.negation, "negation"},
                                   {g.number, "number"},
                                   {g.entity, "entity"},
                                   {g.questionWord, "question-word"}})
        if (on)
            out += (out.empty() ? "" : ",") + std::string(name);
    return out;
}

GuardCheck checkGuards(const std::string &request, const std::string &cached, const SemanticGuards &on)
{
    GuardCheck out;
    if (!on.any())
        return out;
    const auto a = words(request), b = words(cached);
    if (on.negation)
        if (auto d = negationDifference(a, b); !d.empty())
            return {SemanticGuard::Negation, "negation: " + d};
    if (on.number)
        if (const auto na = numbers(a), nb = numbers(b); na != nb)
            return {SemanticGuard::Number, "number: " + join(na) + " vs " + join(nb)};
    if (on.entity)
        if (const auto ea = entities(a), eb = entities(b); ea != eb) {
            std::multiset<std::string> ma(ea.begin(), ea.end()), mb(eb.begin(), eb.end());
            return {SemanticGuard::Entity, "entity: " + join(ma) + " vs " + join(mb)};
        }
    if (on.questionWord)
        if (const auto qa = questionWord(a), qb = questionWord(b); qa != qb)
            return {SemanticGuard::QuestionWord, "question word: " + (qa.empty() ? std::string("none") : qa) +
                                                     " vs " + (qb.empty() ? std::string("none") : qb)};
    return out;
}

} // namespace kvwb::core
