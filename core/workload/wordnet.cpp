#include "core/workload/wordnet.h"

#include "core/util/error.h"
#include "core/util/text_util.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <unordered_set>

namespace kvwb::core {

namespace {

namespace fs = std::filesystem;

std::string lower(std::string_view s)
{
    std::string out(s);
    for (char &c : out)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// The form index files and sense keys use: lower case, spaces as underscores.
std::string indexForm(std::string_view lemma)
{
    std::string out = lower(lemma);
    std::replace(out.begin(), out.end(), ' ', '_');
    return out;
}

std::vector<std::string_view> splitSpaces(std::string_view s)
{
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && s[i] == ' ')
            ++i;
        const size_t start = i;
        while (i < s.size() && s[i] != ' ')
            ++i;
        if (i > start)
            out.push_back(s.substr(start, i - start));
    }
    return out;
}

std::string_view trim(std::string_view s)
{
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
        s.remove_suffix(1);
    return s;
}

template <class T> bool parseNumber(std::string_view s, T &out, int base = 10)
{
    if (s.empty())
        return false;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), out, base);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool isPos(std::string_view s)
{
    return s.size() == 1 && std::string_view("nvasr").find(s[0]) != std::string_view::npos;
}

// Adjective satellites ('s') live in data.adj with the adjectives: one id space.
char filePos(char pos)
{
    return pos == 's' ? 'a' : pos;
}

std::string makeId(char pos, uint32_t offset)
{
    char buf[16];
    std::snprintf(buf, sizeof buf, "%c%08u", filePos(pos), offset);
    return buf;
}

const char *posFileName(char pos)
{
    switch (pos) {
    case 'n':
        return "noun";
    case 'v':
        return "verb";
    case 'a':
        return "adj";
    default:
        return "adv";
    }
}

std::string readRequired(const fs::path &path)
{
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
        throw Error(ErrorCode::Io, path.string() +
                                       ": WordNet file not found; install the Debian package wordnet-base "
                                       "(apt-get install wordnet-base) or pass the directory that holds it");
    return text::readWholeFile(path);
}

// Calls f(lineNumber, line) for each line that is not part of the license header (two leading
// spaces) and not empty.
template <class F> void forEachDataLine(std::string_view text, F &&f)
{
    text::forEachLine(text, [&](size_t lineNo, std::string_view line) {
        if (!line.empty() && line.back() == '\r')
            line.remove_suffix(1);
        if (!line.starts_with("  ") && !trim(line).empty())
            f(lineNo, line);
        return true;
    });
}

// Parses one data.<pos> line into s; returns an empty string or the reason it is malformed.
std::string parseDataLine(std::string_view line, char expectedPos, Synset &s)
{
    const size_t bar = line.find('|');
    if (bar == std::string_view::npos)
        return "no '|' before the gloss";
    const auto t = splitSpaces(line.substr(0, bar));
    if (t.size() < 6)
        return "too few fields";
    if (t[0].size() != 8 || !parseNumber(t[0], s.offset))
        return "synset offset '" + std::string(t[0]) + "' is not 8 digits";
    if (!parseNumber(t[1], s.lexFile))
        return "lex_filenum '" + std::string(t[1]) + "' is not a number";
    if (!isPos(t[2]) || filePos(t[2][0]) != expectedPos)
        return "ss_type '" + std::string(t[2]) + "' does not belong in this file";
    s.pos = filePos(t[2][0]);
    s.id = makeId(s.pos, s.offset);
    unsigned wordCount = 0;
    if (!parseNumber(t[3], wordCount, 16) || wordCount == 0)
        return "w_cnt '" + std::string(t[3]) + "' is not a positive hex number";
    size_t i = 4;
    if (t.size() < i + 2 * wordCount + 1)
        return "fewer words than w_cnt says";
    for (unsigned w = 0; w < wordCount; ++w, i += 2) {
        int lexId = 0;
        if (!parseNumber(t[i + 1], lexId, 16))
            return "lex_id '" + std::string(t[i + 1]) + "' is not hex";
        std::string lemma = cleanLemma(t[i]);
        if (lemma.empty())
            continue;
        s.lemmas.push_back(std::move(lemma));
        s.lexIds.push_back(lexId);
    }
    unsigned ptrCount = 0;
    if (!parseNumber(t[i], ptrCount))
        return "p_cnt '" + std::string(t[i]) + "' is not a number";
    ++i;
    if (t.size() < i + 4 * ptrCount)
        return "fewer pointers than p_cnt says";
    for (unsigned p = 0; p < ptrCount; ++p, i += 4) {
        const std::string_view sym = t[i];
        uint32_t target = 0;
        if (t[i + 1].size() != 8 || !parseNumber(t[i + 1], target))
            return "pointer offset '" + std::string(t[i + 1]) + "' is not 8 digits";
        if (!isPos(t[i + 2]))
            return "pointer pos '" + std::string(t[i + 2]) + "' is not one of n v a s r";
        if (t[i + 3].size() != 4)
            return "pointer source/target '" + std::string(t[i + 3]) + "' is not 4 hex digits";
        const std::string targetId = makeId(t[i + 2][0], target);
        if (sym == "@" || sym == "@i") {
            s.hypernyms.push_back(targetId);
            if (sym == "@i")
                s.instance = true;
        } else if (sym == "~" || sym == "~i") {
            s.hyponyms.push_back(targetId);
        }
    }
    // Verb frames (f_cnt ...) may follow the pointers; nothing here needs them.
    splitGloss(trim(line.substr(bar + 1)), s.definition, s.examples);
    return {};
}

} // namespace

std::string cleanLemma(std::string_view raw)
{
    for (std::string_view marker : {"(a)", "(p)", "(ip)"}) {
        if (raw.ends_with(marker)) {
            raw.remove_suffix(marker.size());
            break;
        }
    }
    std::string out(raw);
    std::replace(out.begin(), out.end(), '_', ' ');
    return std::string(trim(out));
}

void splitGloss(std::string_view gloss, std::string &definition, std::vector<std::string> &examples)
{
    definition.clear();
    examples.clear();
    gloss = trim(gloss);
    const size_t quote = gloss.find('"');
    std::string_view def = trim(gloss.substr(0, quote));
    while (!def.empty() && (def.back() == ';' || def.back() == ' '))
        def.remove_suffix(1);
    definition = std::string(def);
    size_t pos = quote;
    while (pos != std::string_view::npos && pos < gloss.size()) {
        const size_t close = gloss.find('"', pos + 1);
        if (close == std::string_view::npos) {
            // An unterminated quote: keep the rest rather than dropping the sentence.
            const auto rest = trim(gloss.substr(pos + 1));
            if (!rest.empty())
                examples.emplace_back(rest);
            break;
        }
        const auto ex = trim(gloss.substr(pos + 1, close - pos - 1));
        if (!ex.empty())
            examples.emplace_back(ex);
        pos = gloss.find('"', close + 1);
    }
}

WordNet WordNet::load(const fs::path &dir, const WordNetOptions &options)
{
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw Error(ErrorCode::Io,
                    dir.string() + ": WordNet directory not found; install the Debian package wordnet-base "
                                   "(apt-get install wordnet-base) or pass --wordnet-dir");
    WordNet wn;
    wn.m_dir = dir;
    wn.m_warnings = WarningList(options.maxWarnings);
    std::vector<char> posList = {'n'};
    if (options.verbs)
        posList.push_back('v');
    if (options.adjectives)
        posList.push_back('a');

    for (char pos : posList) {
        const std::string name = std::string("data.") + posFileName(pos);
        const std::string data = readRequired(dir / name);
        forEachDataLine(data, [&](size_t lineNo, std::string_view line) {
            Synset s;
            const std::string why = parseDataLine(line, pos, s);
            if (!why.empty()) {
                wn.m_warnings.add(name + ":" + std::to_string(lineNo) + ": bad synset line (" + why + ")");
                return;
            }
            if (wn.m_byId.count(s.id)) {
                wn.m_warnings.add(name + ":" + std::to_string(lineNo) + ": duplicate synset " + s.id +
                                  " ignored");
                return;
            }
            wn.m_byId.emplace(s.id, wn.m_synsets.size());
            wn.m_synsets.push_back(std::move(s));
        });

        const std::string indexName = std::string("index.") + posFileName(pos);
        const std::string index = readRequired(dir / indexName);
        forEachDataLine(index, [&](size_t lineNo, std::string_view line) {
            const auto t = splitSpaces(line);
            unsigned synsetCount = 0, ptrCount = 0;
            const auto bad = [&](const std::string &why) {
                wn.m_warnings.add(indexName + ":" + std::to_string(lineNo) + ": bad index line (" + why +
                                  ")");
            };
            if (t.size() < 4 || !parseNumber(t[2], synsetCount) || !parseNumber(t[3], ptrCount))
                return bad("expected lemma pos synset_cnt p_cnt ...");
            if (t.size() != 4 + ptrCount + 2 + synsetCount)
                return bad("field count does not match synset_cnt " + std::to_string(synsetCount) +
                           " and p_cnt " + std::to_string(ptrCount));
            std::vector<std::string> ids;
            for (size_t k = t.size() - synsetCount; k < t.size(); ++k) {
                uint32_t off = 0;
                if (t[k].size() != 8 || !parseNumber(t[k], off))
                    return bad("synset offset '" + std::string(t[k]) + "' is not 8 digits");
                ids.push_back(makeId(pos, off));
            }
            wn.m_index[std::string(1, pos) + ":" + lower(t[0])] = std::move(ids);
        });
    }

    // cntlist.rev: "sense_key sense_number tag_cnt", sense_key =
    // lemma%ss_type:lex_filenum:lex_id:head:head_id.
    const std::string cntName = "cntlist.rev";
    const std::string counts = readRequired(dir / cntName);
    std::vector<size_t> unmatchedLines;
    forEachDataLine(counts, [&](size_t lineNo, std::string_view line) {
        const auto bad = [&](const std::string &why) {
            wn.m_warnings.add(cntName + ":" + std::to_string(lineNo) + ": bad count line (" + why + ")");
        };
        const auto t = splitSpaces(line);
        if (t.size() != 3)
            return bad("expected sense_key sense_number tag_cnt");
        int senseNumber = 0;
        int64_t tagCount = 0;
        if (!parseNumber(t[1], senseNumber) || senseNumber < 1 || !parseNumber(t[2], tagCount) ||
            tagCount < 0)
            return bad("sense_number and tag_cnt must be non-negative integers");
        const std::string_view key = t[0];
        const size_t pct = key.find('%');
        if (pct == std::string_view::npos || pct == 0 || key.size() < pct + 2)
            return bad("sense key '" + std::string(key) + "' has no '%'");
        const std::string lemma = lower(key.substr(0, pct));
        const auto parts = key.substr(pct + 1);
        const char ssType = parts[0];
        const char pos = ssType == '1'                      ? 'n'
                         : ssType == '2'                    ? 'v'
                         : (ssType == '3' || ssType == '5') ? 'a'
                                                            : 'r';
        if (std::find(posList.begin(), posList.end(), pos) == posList.end())
            return; // a part of speech we did not load
        int keyLexFile = -1, keyLexId = -1;
        const size_t c1 = parts.find(':'), c2 = parts.find(':', c1 + 1), c3 = parts.find(':', c2 + 1);
        if (c1 == std::string_view::npos || c2 == std::string_view::npos || c3 == std::string_view::npos ||
            !parseNumber(parts.substr(c1 + 1, c2 - c1 - 1), keyLexFile) ||
            !parseNumber(parts.substr(c2 + 1, c3 - c2 - 1), keyLexId))
            return bad("sense key '" + std::string(key) + "' is not lemma%ss_type:lex_filenum:lex_id:...");
        // Stale keys (senses renumbered or removed since the counts were taken: about 1.5% of
        // WordNet 3.0's noun keys) are not malformed lines; they are summarised in one warning.
        const auto unmatched = [&]() {
            if (unmatchedLines.size() < 5)
                unmatchedLines.push_back(lineNo);
            ++wn.m_unmatchedSenseKeys;
        };
        const auto it = wn.m_index.find(std::string(1, pos) + ":" + lemma);
        if (it == wn.m_index.end())
            return unmatched();
        // Sense number n is the n-th offset in the index line; confirm with the key's lex file and
        // lex id, and search the lemma's other senses when they disagree.
        const auto matches = [&](const std::string &id) {
            const auto s = wn.m_byId.find(id);
            if (s == wn.m_byId.end())
                return false;
            const Synset &syn = wn.m_synsets[s->second];
            if (syn.lexFile != keyLexFile)
                return false;
            for (size_t i = 0; i < syn.lemmas.size(); ++i)
                if (syn.lexIds[i] == keyLexId && indexForm(syn.lemmas[i]) == lemma)
                    return true;
            return false;
        };
        const auto &ids = it->second;
        const std::string *target = nullptr;
        if (size_t(senseNumber) <= ids.size() && matches(ids[size_t(senseNumber) - 1]))
            target = &ids[size_t(senseNumber) - 1];
        for (size_t k = 0; !target && k < ids.size(); ++k)
            if (matches(ids[k]))
                target = &ids[k];
        if (!target)
            return unmatched();
        wn.m_synsets[wn.m_byId.at(*target)].tagCount += tagCount;
    });
    if (wn.m_unmatchedSenseKeys > 0) {
        std::string lines;
        for (size_t l : unmatchedLines)
            lines += (lines.empty() ? "" : ", ") + std::to_string(l);
        wn.m_warnings.add(cntName + ": " + std::to_string(wn.m_unmatchedSenseKeys) +
                          " sense keys match no synset in the index and data files; their counts are ignored "
                          "(first at lines " +
                          lines + ")");
    }
    return wn;
}

const Synset *WordNet::find(std::string_view id) const
{
    const auto it = m_byId.find(std::string(id));
    return it == m_byId.end() ? nullptr : &m_synsets[it->second];
}

std::vector<const Synset *> WordNet::lookup(std::string_view lemma, char pos) const
{
    std::vector<const Synset *> out;
    const auto it = m_index.find(std::string(1, filePos(pos)) + ":" + indexForm(lemma));
    if (it == m_index.end())
        return out;
    for (const auto &id : it->second)
        if (const Synset *s = find(id))
            out.push_back(s);
    return out;
}

std::vector<const Synset *> WordNet::byPopularity(char pos) const
{
    std::vector<const Synset *> out;
    for (const auto &s : m_synsets)
        if (s.pos == filePos(pos))
            out.push_back(&s);
    std::sort(out.begin(), out.end(), [](const Synset *a, const Synset *b) {
        if (a->tagCount != b->tagCount)
            return a->tagCount > b->tagCount;
        if (a->lemmas.size() != b->lemmas.size())
            return a->lemmas.size() > b->lemmas.size();
        return a->id < b->id;
    });
    return out;
}

std::vector<const Synset *> WordNet::siblings(const Synset &s) const
{
    std::vector<const Synset *> out;
    std::unordered_set<std::string> seen{s.id};
    for (const auto &h : s.hypernyms) {
        const Synset *parent = find(h);
        if (!parent)
            continue;
        for (const auto &c : parent->hyponyms) {
            if (!seen.insert(c).second)
                continue;
            if (const Synset *sib = find(c))
                out.push_back(sib);
        }
    }
    return out;
}

} // namespace kvwb::core
