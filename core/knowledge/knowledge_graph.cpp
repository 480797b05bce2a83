#include "core/knowledge/knowledge_graph.h"

#include "core/util/error.h"
#include "core/util/text_util.h"
#include "core/workload/corpus.h"
#include "core/workload/wordnet.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace kvwb::core {

namespace {

std::string nameKey(std::string_view name)
{
    return text::join(text::lowerWords(name), " ");
}

bool validId(const std::string &id)
{
    return !id.empty() && id.size() <= 256 && std::all_of(id.begin(), id.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' || c == '-';
    });
}

} // namespace

const char *freshnessName(Freshness f) noexcept
{
    switch (f) {
    case Freshness::Fresh:
        return "fresh";
    case Freshness::Stale:
        return "stale";
    case Freshness::Missing:
        return "missing";
    }
    return "?";
}

std::string moduleText(const ConceptNode &node)
{
    return node.knowledge + "\n";
}

Freshness moduleFreshness(bool hasModule, int64_t builtMs, const std::string &moduleModel,
                          const std::string &currentModel, int64_t nowMs, int64_t ttlMs)
{
    if (!hasModule)
        return Freshness::Missing;
    if (moduleModel != currentModel || (ttlMs > 0 && nowMs - builtMs > ttlMs))
        return Freshness::Stale;
    return Freshness::Fresh;
}

void KnowledgeGraph::add(ConceptNode node)
{
    const std::string at = "concept '" + node.id + "'";
    if (!validId(node.id))
        throw Error(ErrorCode::InvalidArgument,
                    at + ": an id is 1-256 characters of letters, digits, '_', '.', ':' and '-'");
    if (m_byId.count(node.id))
        throw Error(ErrorCode::InvalidArgument, at + " is in the graph already");
    if (text::lowerWords(node.name).empty())
        throw Error(ErrorCode::InvalidArgument, at + ": the name has no letters or digits");
    if (node.knowledge.empty())
        throw Error(ErrorCode::InvalidArgument, at + ": the knowledge text is empty");
    if (!(node.confidence >= 0 && node.confidence <= 1))
        throw Error(ErrorCode::InvalidArgument,
                    at + fmt::format(": confidence {} is outside [0, 1]", node.confidence));
    if (node.reuseCount < 0)
        throw Error(ErrorCode::InvalidArgument, at + ": the reuse count is negative");
    for (const auto &r : node.related)
        if (!validId(r.target))
            throw Error(ErrorCode::InvalidArgument,
                        at + fmt::format(": {} relation to '{}' is not a valid id", relationKindName(r.kind),
                                         r.target));
    const size_t index = m_nodes.size();
    std::vector<std::string> names = {node.name};
    names.insert(names.end(), node.synonyms.begin(), node.synonyms.end());
    std::unordered_set<std::string> seen;
    for (const auto &n : names) {
        const std::string key = nameKey(n);
        if (key.empty() || !seen.insert(key).second)
            continue;
        m_byName[key].push_back(index);
        m_longestName = std::max(m_longestName, size_t(std::count(key.begin(), key.end(), ' ') + 1));
    }
    for (const auto &q : node.questions) {
        const auto ws = text::lowerWords(q);
        for (size_t i = 0; i < ws.size(); ++i) {
            std::string gram;
            for (size_t n = 1; n <= kQuestionGramWords && i + n <= ws.size(); ++n) {
                gram += (n > 1 ? " " : "") + ws[i + n - 1];
                auto &holders = m_questionGrams[gram];
                if (holders.empty() || holders.back() != index)
                    holders.push_back(index);
            }
        }
    }
    m_byId.emplace(node.id, index);
    m_nodes.push_back(std::move(node));
}

void KnowledgeGraph::checkRelations() const
{
    for (const auto &n : m_nodes)
        for (const auto &r : n.related)
            if (!m_byId.count(r.target))
                throw Error(ErrorCode::InvalidArgument,
                            fmt::format("concept '{}': {} relation to '{}', which is not in the graph", n.id,
                                        relationKindName(r.kind), r.target));
}

const ConceptNode *KnowledgeGraph::find(std::string_view id) const
{
    const auto it = m_byId.find(std::string(id));
    return it == m_byId.end() ? nullptr : &m_nodes[it->second];
}

ConceptNode *KnowledgeGraph::find(std::string_view id)
{
    const auto it = m_byId.find(std::string(id));
    return it == m_byId.end() ? nullptr : &m_nodes[it->second];
}

std::vector<const ConceptNode *> KnowledgeGraph::neighbours(std::string_view id,
                                                            std::optional<RelationKind> kind) const
{
    std::vector<const ConceptNode *> out;
    if (const ConceptNode *n = find(id))
        for (const auto &r : n->related)
            if (!kind || r.kind == *kind)
                if (const ConceptNode *t = find(r.target))
                    out.push_back(t);
    return out;
}

namespace {

// Words ending in s that are not plurals of a shorter name ("does" is not "doe"s).
bool mayBePlural(const std::string &w)
{
    static const std::unordered_set<std::string> notPlurals = {
        "always", "besides", "does",      "goes",   "hers", "his",  "its",    "news",
        "ours",   "perhaps", "sometimes", "theirs", "this", "thus", "unless", "whereas",
        "was",    "yes",     "yours",     "has",    "is",   "as",   "us"};
    return w.size() >= 4 && w.back() == 's' && !w.ends_with("ss") && !w.ends_with("us") &&
           !w.ends_with("is") && !notPlurals.count(w);
}

// The singulars a regular English plural may come from, most specific first.
std::vector<std::string> singulars(const std::string &w)
{
    std::vector<std::string> out;
    if (w.ends_with("ies") && w.size() >= 5)
        out.push_back(w.substr(0, w.size() - 3) + "y");
    if (w.ends_with("es")) {
        const std::string stem = w.substr(0, w.size() - 2);
        if (stem.ends_with("s") || stem.ends_with("x") || stem.ends_with("z") || stem.ends_with("ch") ||
            stem.ends_with("sh"))
            out.push_back(stem);
    }
    if (w.size() >= 4)
        out.push_back(w.substr(0, w.size() - 1));
    return out;
}

} // namespace

const std::vector<size_t> *KnowledgeGraph::lookupName(const std::string &key, std::string *nameOut) const
{
    if (const auto it = m_byName.find(key); it != m_byName.end()) {
        *nameOut = key;
        return &it->second;
    }
    const size_t space = key.rfind(' ');
    const std::string last = space == std::string::npos ? key : key.substr(space + 1);
    if (!mayBePlural(last))
        return nullptr;
    const std::string head = space == std::string::npos ? "" : key.substr(0, space + 1);
    for (const auto &singular : singulars(last))
        if (const auto it = m_byName.find(head + singular); it != m_byName.end()) {
            *nameOut = head + singular;
            return &it->second;
        }
    return nullptr;
}

bool KnowledgeGraph::isFrameKey(const std::string &key, const std::vector<size_t> &owners) const
{
    const auto it = m_questionGrams.find(key);
    if (it == m_questionGrams.end())
        return false;
    size_t others = 0;
    for (size_t node : it->second)
        others += std::find(owners.begin(), owners.end(), node) == owners.end() ? 1 : 0;
    return others >= std::max<size_t>(3, (m_nodes.size() + 19) / 20);
}

bool KnowledgeGraph::isFrameName(std::string_view name) const
{
    const std::string key = nameKey(name);
    const auto it = m_byName.find(key);
    return it != m_byName.end() && isFrameKey(key, it->second);
}

const ConceptNode *KnowledgeGraph::mentioned(std::string_view text, std::string *matchedName) const
{
    const auto ws = text::lowerWords(text);
    // First without frame names; when they were all the text named, with them.
    for (const bool withFrames : {false, true}) {
        size_t bestLen = 0;
        std::vector<size_t> best;
        std::string bestName;
        bool skippedFrame = false;
        for (size_t i = 0; i < ws.size(); ++i) {
            std::string key;
            for (size_t n = 1; n <= m_longestName && i + n <= ws.size(); ++n) {
                key += (n > 1 ? " " : "") + ws[i + n - 1];
                std::string name;
                const std::vector<size_t> *owners = n < bestLen ? nullptr : lookupName(key, &name);
                if (!owners)
                    continue;
                if (!withFrames &&
                    (isFrameKey(key, *owners) || isFrameKey(name, *owners))) { // as written, or its name
                    skippedFrame = true;
                    continue;
                }
                if (n > bestLen) {
                    bestLen = n;
                    best.clear();
                }
                for (size_t node : *owners)
                    if (std::find(best.begin(), best.end(), node) == best.end())
                        best.push_back(node);
                bestName = name;
            }
        }
        if (best.empty() && skippedFrame && !withFrames)
            continue;
        if (best.size() != 1) // none, or the longest names denote several concepts: not one concept
            return nullptr;
        if (matchedName)
            *matchedName = bestName;
        return &m_nodes[best.front()];
    }
    return nullptr;
}

Verification KnowledgeGraph::verify(std::string_view candidate, std::string_view text) const
{
    Verification v;
    const ConceptNode *c = find(candidate);
    if (!c) {
        v.reason = fmt::format("'{}' is not a node of the graph", candidate);
        return v;
    }
    const ConceptNode *m = mentioned(text, &v.matched);
    if (!m) {
        v.reason = "the request names no single concept of the graph";
        return v;
    }
    v.mentioned = m->id;
    v.accepted = m == c;
    if (v.accepted) {
        v.reason = fmt::format("the request names '{}', a name of {}", v.matched, c->id);
    } else {
        const auto rel = std::find_if(c->related.begin(), c->related.end(),
                                      [&](const ConceptRelation &r) { return r.target == m->id; });
        v.reason = fmt::format(
            "the request names '{}' ({}{}), not {}", v.matched, m->id,
            rel == c->related.end() ? "" : std::string(", its ") + relationKindName(rel->kind), c->id);
    }
    return v;
}

KnowledgeGraph graphFromWordNet(const WordNet &wn, size_t count, int64_t nowMs)
{
    const auto concepts = selectConcepts(wn, count);
    std::unordered_set<std::string> selected;
    for (const auto &c : concepts)
        selected.insert(c.synset->id);
    KnowledgeGraph g;
    for (const auto &c : concepts) {
        const Synset &s = *c.synset;
        ConceptNode n;
        n.id = s.id;
        n.name = c.lemmas.front();
        n.synonyms.assign(c.lemmas.begin() + 1, c.lemmas.end());
        n.knowledge = c.answer;
        for (const auto &e : s.examples)
            n.knowledge += " For example: \"" + e + "\".";
        for (const auto &t : questionTemplates())
            if (!t.validation)
                n.questions.push_back(renderQuestion(t, n.name));
        const auto relate = [&](RelationKind kind, const std::string &id) {
            if (id != s.id && selected.count(id) &&
                std::none_of(n.related.begin(), n.related.end(),
                             [&](const ConceptRelation &r) { return r.target == id; }))
                n.related.push_back({kind, id});
        };
        for (const auto &h : s.hypernyms)
            relate(RelationKind::Hypernym, h);
        for (const auto &h : s.hyponyms)
            relate(RelationKind::Hyponym, h);
        for (const Synset *sib : wn.siblings(s))
            relate(RelationKind::Sibling, sib->id);
        n.source = "wordnet-3.0 " + s.id;
        n.verifiedMs = nowMs;
        g.add(std::move(n));
    }
    return g;
}

KnowledgeGraph graphFromJsonl(const std::filesystem::path &path, int64_t nowMs)
{
    const std::string name = path.string();
    const std::string text = text::readWholeFile(path);
    KnowledgeGraph g;
    text::forEachLine(text, [&](size_t lineNo, std::string_view line) {
        if (line.find_first_not_of(" \t\r") == std::string_view::npos)
            return true;
        const std::string at = fmt::format("{}:{}", name, lineNo);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception &e) {
            throw Error(ErrorCode::Format, at + ": not JSON (" + e.what() + ")");
        }
        if (!j.is_object())
            throw Error(ErrorCode::Format, at + ": a concept is a JSON object");
        const auto str = [&](const char *field, bool required) {
            if (!j.contains(field)) {
                if (required)
                    throw Error(ErrorCode::Format, at + fmt::format(": field '{}' is missing", field));
                return std::string();
            }
            if (!j[field].is_string())
                throw Error(ErrorCode::Format, at + fmt::format(": field '{}' is not a string", field));
            return j[field].get<std::string>();
        };
        const auto strings = [&](const char *field) {
            std::vector<std::string> out;
            if (!j.contains(field))
                return out;
            if (!j[field].is_array())
                throw Error(ErrorCode::Format,
                            at + fmt::format(": field '{}' is not an array of strings", field));
            for (const auto &v : j[field]) {
                if (!v.is_string())
                    throw Error(ErrorCode::Format,
                                at + fmt::format(": field '{}' is not an array of strings", field));
                out.push_back(v.get<std::string>());
            }
            return out;
        };
        ConceptNode n;
        n.id = str("id", true);
        n.name = str("name", true);
        n.knowledge = str("knowledge", true);
        n.synonyms = strings("synonyms");
        n.questions = strings("questions");
        n.source = str("source", false);
        if (n.source.empty())
            n.source = at;
        if (j.contains("confidence")) {
            if (!j["confidence"].is_number())
                throw Error(ErrorCode::Format, at + ": field 'confidence' is not a number");
            n.confidence = j["confidence"].get<double>();
        }
        n.verifiedMs = nowMs;
        if (j.contains("verified_ms")) {
            if (!j["verified_ms"].is_number_integer())
                throw Error(ErrorCode::Format, at + ": field 'verified_ms' is not an integer");
            n.verifiedMs = j["verified_ms"].get<int64_t>();
            if (n.verifiedMs < 0)
                throw Error(ErrorCode::Format, at + ": field 'verified_ms' is " +
                                                   std::to_string(n.verifiedMs) + " (Unix ms, >= 0)");
        }
        if (j.contains("related")) {
            if (!j["related"].is_array())
                throw Error(ErrorCode::Format, at + ": field 'related' is not an array");
            for (const auto &r : j["related"]) {
                if (!r.is_object() || !r.contains("kind") || !r["kind"].is_string() || !r.contains("id") ||
                    !r["id"].is_string())
                    throw Error(ErrorCode::Format, at + ": each of 'related' is {\"kind\": "
                                                        "\"hypernym|hyponym|sibling\", \"id\": \"...\"}");
                const auto kind = parseRelationKind(r["kind"].get<std::string>());
                if (!kind)
                    throw Error(ErrorCode::Format,
                                at + fmt::format(": related kind '{}' is not hypernym, hyponym or "
                                                 "sibling",
                                                 r["kind"].get<std::string>()));
                n.related.push_back({*kind, r["id"].get<std::string>()});
            }
        }
        try {
            g.add(std::move(n));
        } catch (const Error &e) {
            throw Error(ErrorCode::Format, at + ": " + e.what());
        }
        return true;
    });
    try {
        g.checkRelations();
    } catch (const Error &e) {
        throw Error(ErrorCode::Format, name + ": " + e.what());
    }
    if (g.size() == 0)
        throw Error(ErrorCode::Format, name + ": no concepts");
    return g;
}

} // namespace kvwb::core
