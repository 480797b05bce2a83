// The concept graph of the knowledge tier: concepts whose knowledge is held once and shared by
// every user, with typed relations (hypernym, hyponym, sibling), a freshness state, and the
// verification that decides whether a request is about a node (docs/knowledge.md).
//
// A node holds only facts about its concept (names, knowledge text, source, confidence, when it was
// last verified, how often it was reused). Nothing about a user, a tenant or a profile is ever
// stored in a node: personalisation happens after the node's knowledge, per request.
//
// Built from WordNet (the demo's concepts: core/workload/corpus.h's selection, so node ids are the
// synset ids the demo workloads use as intents) or from a user's JSONL of concepts.
//
// Thread-safety: a graph is a value; const methods may be called from any thread.
#pragma once

#include "core/util/enum_names.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvwb::core {

class WordNet;

enum class RelationKind
{
    Hypernym, // the node is a kind of the target
    Hyponym,  // the target is a kind of the node
    Sibling   // both are kinds of one hypernym
};
inline constexpr EnumName<RelationKind> kRelationKindNames[] = {{RelationKind::Hypernym, "hypernym"},
                                                                {RelationKind::Hyponym, "hyponym"},
                                                                {RelationKind::Sibling, "sibling"}};
KVWB_ENUM_NAMES(RelationKind, kRelationKindNames, relationKindName, parseRelationKind)

struct ConceptRelation
{
    RelationKind kind = RelationKind::Hypernym;
    std::string target; // a node id of the same graph
    bool operator==(const ConceptRelation &) const = default;
};

struct ConceptNode
{
    std::string id;                     // [A-Za-z0-9_.:-]+, unique in the graph
    std::string name;                   // the concept's main name
    std::vector<std::string> synonyms;  // other names that denote exactly this concept
    std::vector<std::string> questions; // typical questions (vector recall indexes them)
    std::vector<ConceptRelation> related;
    std::string knowledge;   // the text held once (its KV module is computed from it)
    std::string source;      // where the knowledge came from ("wordnet-3.0 n02958343", "file.jsonl:12")
    double confidence = 1.0; // in [0, 1]
    int64_t verifiedMs = 0;  // Unix ms when the knowledge was last verified (built)
    int64_t reuseCount = 0;  // requests answered through this node
    bool operator==(const ConceptNode &) const = default;
};

// The text a node's KV module holds: its knowledge and a newline, so that what follows (a profile's
// instruction, "Q: ...") starts a line.
std::string moduleText(const ConceptNode &node);

// What verification decided for a candidate node and a request text.
struct Verification
{
    bool accepted = false;
    std::string mentioned; // node id of the longest concept name found in the text ("" none)
    std::string matched;   // that name as written in the graph
    std::string reason;    // one line: why accepted or rejected
};

class KnowledgeGraph
{
public:
    // Error(InvalidArgument) naming the node for a bad or duplicate id, an empty name or knowledge
    // text, a confidence outside [0, 1] or a negative reuse count.
    void add(ConceptNode node);
    // Error(InvalidArgument) naming the node and relation whose target is not in the graph.
    void checkRelations() const;

    const std::vector<ConceptNode> &nodes() const { return m_nodes; }
    size_t size() const { return m_nodes.size(); }
    const ConceptNode *find(std::string_view id) const;
    ConceptNode *find(std::string_view id);
    // Nodes related to `id` by `kind` (all kinds when nullopt), in the node's order.
    std::vector<const ConceptNode *> neighbours(std::string_view id,
                                                std::optional<RelationKind> kind = std::nullopt) const;

    // Graph verification: the request is about `candidate` only when the longest concept name (a
    // node's name or synonym, whole words, case-insensitive, a regular English plural of it too)
    // found in the text is one of the candidate's names. A sibling, a hypernym or a more specific
    // hyponym named in the text ("sports car" for "car") wins over a shorter name, and a text that
    // names no concept or two is rejected: the same derivation for a different concept is the false
    // reuse this guards against. Frame names (isFrameName) are looked past when the text names
    // another concept.
    Verification verify(std::string_view candidate, std::string_view text) const;
    // The node whose name or synonym is the longest whole-word match in the text (nullptr: none, or
    // the longest names denote several nodes), frame names only when the text names nothing else.
    const ConceptNode *mentioned(std::string_view text, std::string *matchedName = nullptr) const;
    // A name that frames questions rather than naming their subject: it occurs (whole words) in the
    // typical questions of at least max(3, 5 %) of the nodes that do not own it, as "word" does in
    // "What is meant by the word 'year'?" and "in" in "Define year in simple terms." when "word" and
    // "in" (inch) are concepts themselves. Learned from the graph's own questions.
    bool isFrameName(std::string_view name) const;

private:
    // The nodes named by `key` or, when no name is `key`, by a singular of its last word ("cars",
    // "boxes", "bodies"); nameOut gets the name found.
    const std::vector<size_t> *lookupName(const std::string &key, std::string *nameOut) const;
    bool isFrameKey(const std::string &key, const std::vector<size_t> &owners) const;

    static constexpr size_t kQuestionGramWords = 3; // frame names are up to this many words

    std::vector<ConceptNode> m_nodes;
    std::unordered_map<std::string, size_t> m_byId;
    std::unordered_map<std::string, std::vector<size_t>> m_byName; // lower-cased name -> nodes
    size_t m_longestName = 0;                                      // in words
    // Every 1..kQuestionGramWords-word phrase of the nodes' questions -> the nodes (ascending,
    // distinct) whose questions hold it.
    std::unordered_map<std::string, std::vector<size_t>> m_questionGrams;
};

// Freshness of a node's KV module: fresh (reuse it), stale (older than ttlMs, or computed by a
// model whose weights fingerprint is not the current one: recompute it and count the cost) or
// missing (no module: answer from scratch and optionally build it).
enum class Freshness
{
    Fresh,
    Stale,
    Missing
};
const char *freshnessName(Freshness f) noexcept; // "fresh" | "stale" | "missing"
// ttlMs <= 0: no expiry.
Freshness moduleFreshness(bool hasModule, int64_t builtMs, const std::string &moduleModel,
                          const std::string &currentModel, int64_t nowMs, int64_t ttlMs);

// The `count` concepts the demo corpus uses (core::selectConcepts): id = synset id, name and
// synonyms = the lemmas the concept owns, knowledge = the corpus answer plus the gloss's examples,
// relations to the hypernyms, hyponyms and siblings that are also selected, questions = the
// corpus's training question templates for the name. verifiedMs = nowMs.
KnowledgeGraph graphFromWordNet(const WordNet &wn, size_t count, int64_t nowMs);

// One JSON object per line: {"id", "name", "knowledge", optional "synonyms": [..], "questions":
// [..], "related": [{"kind": "hypernym"|"hyponym"|"sibling", "id": ..}], "source", "confidence",
// "verified_ms"}. Blank lines are skipped. Error(Format) naming file:line and the field for
// anything malformed; relations to ids not in the file are an error naming both.
KnowledgeGraph graphFromJsonl(const std::filesystem::path &path, int64_t nowMs);

} // namespace kvwb::core
