// Reader for the Princeton WordNet 3.0 database files (Debian package `wordnet-base`).
//
// Loads the synsets of the requested parts of speech from data.<pos>, maps cntlist.rev's sense
// tag counts onto synsets through index.<pos> (lemma + sense number -> synset offset), and exposes
// synsets ranked by popularity. The corpus and workload builders use it as their only source of
// concepts. Malformed lines are skipped and reported as warnings naming file:line; a missing
// directory or file is an Error(Io) that says to install `wordnet-base`.
//
// Thread-safety: a loaded WordNet is immutable; its const methods may be called from any thread.
// Synset pointers returned by lookups stay valid as long as the WordNet object lives.
#pragma once

#include "core/util/warning_list.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvwb::core {

// One synset (a concept), as read from one line of data.<pos>.
struct Synset
{
    std::string id;                     // pos letter + 8-digit offset, e.g. "n02958343"
    char pos = 'n';                     // 'n', 'v', 'a' (adjectives and satellites), 'r'
    uint32_t offset = 0;                // byte offset in data.<pos>, WordNet's synset key
    int lexFile = 0;                    // lexicographer file number (e.g. 6 = noun.artifact)
    std::vector<std::string> lemmas;    // underscores -> spaces, "(a)"/"(p)"/"(ip)" stripped; case kept
    std::vector<int> lexIds;            // parallel to lemmas: lex_id, used to match cntlist sense keys
    std::string definition;             // gloss up to the first quoted example, trimmed, no trailing ';'
    std::vector<std::string> examples;  // quoted example sentences of the gloss, without quotes
    std::vector<std::string> hypernyms; // synset ids via "@" (class) and "@i" (instance), file order
    std::vector<std::string> hyponyms;  // synset ids via "~" and "~i", file order
    bool instance = false;              // its hypernyms are instance hypernyms ("@i"): a named thing
    int64_t tagCount = 0;               // sum of cntlist.rev tag counts over this synset's senses
};

struct WordNetOptions
{
    bool verbs = false;       // also load data.verb / index.verb
    bool adjectives = false;  // also load data.adj / index.adj
    size_t maxWarnings = 100; // messages kept; all warnings are counted
};

class WordNet
{
public:
    // The directory Debian's wordnet-base installs.
    static constexpr const char *kDefaultDir = "/usr/share/wordnet";

    // Reads data.noun, index.noun, cntlist.rev (and the optional parts of speech) from dir.
    // Error(Io) naming the path when the directory or a file is missing or unreadable.
    static WordNet load(const std::filesystem::path &dir, const WordNetOptions &options = {});

    // All loaded synsets in file order (nouns first).
    const std::vector<Synset> &synsets() const { return m_synsets; }
    // nullptr when the id (e.g. "n02958343") is unknown.
    const Synset *find(std::string_view id) const;
    // Synsets of a lemma (any case, spaces or underscores) in WordNet sense order.
    std::vector<const Synset *> lookup(std::string_view lemma, char pos = 'n') const;
    // Synsets of one part of speech, most popular first: tag count descending, then lemma count
    // descending (a small, deterministic tie-breaker: more synonyms = more ways to be asked about),
    // then id ascending.
    std::vector<const Synset *> byPopularity(char pos = 'n') const;
    // Co-hyponyms: the other hyponyms of each of s's hypernyms, deduplicated, in file order.
    std::vector<const Synset *> siblings(const Synset &s) const;

    const WarningList &warnings() const { return m_warnings; }
    // cntlist.rev keys of loaded parts of speech whose lemma, lex file and lex id match no synset
    // (stale keys; 265 of WordNet 3.0's noun keys). Reported as one summary warning.
    size_t unmatchedSenseKeys() const { return m_unmatchedSenseKeys; }
    const std::filesystem::path &dir() const { return m_dir; }

private:
    std::filesystem::path m_dir;
    std::vector<Synset> m_synsets;
    std::unordered_map<std::string, size_t> m_byId;                    // id -> index in m_synsets
    std::unordered_map<std::string, std::vector<std::string>> m_index; // "n:lemma" -> ids in sense order
    WarningList m_warnings;
    size_t m_unmatchedSenseKeys = 0;
};

// Lemma as users write it: underscores to spaces, trailing adjective marker "(a)", "(p)" or "(ip)"
// removed.
std::string cleanLemma(std::string_view raw);

// Splits a WordNet gloss into its definition and its quoted example sentences.
void splitGloss(std::string_view gloss, std::string &definition, std::vector<std::string> &examples);

} // namespace kvwb::core
