#include "core/workload/labelled_pairs.h"

#include "core/util/error.h"
#include "core/util/seeded_random.h"
#include "core/util/text_util.h"
#include "core/util/tsv_reader.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace kvwb::core {

namespace {

bool blank(std::string_view s)
{
    return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

std::string stripCr(std::string_view s)
{
    if (!s.empty() && s.back() == '\r')
        s.remove_suffix(1);
    return std::string(s);
}

// "1"/"0" (also "1.0"/"0.0", "true"/"false"); anything else is not a label.
bool parseLabel(std::string_view s, bool &out)
{
    while (!s.empty() && (s.back() == ' ' || s.back() == '\r'))
        s.remove_suffix(1);
    while (!s.empty() && s.front() == ' ')
        s.remove_prefix(1);
    if (s == "1" || s == "1.0" || s == "true" || s == "True") {
        out = true;
        return true;
    }
    if (s == "0" || s == "0.0" || s == "false" || s == "False") {
        out = false;
        return true;
    }
    return false;
}

std::string shortQuote(std::string_view s)
{
    return "\"" + std::string(s.substr(0, 40)) + (s.size() > 40 ? "...\"" : "\"");
}

// Adds the pair or a warning naming where it came from.
void addPair(LabelledPairsFile &f, const std::string &where, std::string a, std::string b,
             std::string_view label)
{
    bool duplicate = false;
    if (blank(a) || blank(b))
        f.warnings.add(where + (blank(a) ? "the first text is empty" : "the second text is empty"));
    else if (!parseLabel(label, duplicate))
        f.warnings.add(where + "label " + shortQuote(label) + " is not 0 or 1");
    else if (a == b)
        f.warnings.add(where + "both texts are the same (an exact repeat, not a labelled pair)");
    else {
        f.duplicates += duplicate ? 1 : 0;
        f.pairs.push_back({std::move(a), std::move(b), duplicate, "labelled"});
    }
}

using Names = std::vector<std::string_view>;

int columnOf(const std::vector<std::string> &header, const Names &names)
{
    for (size_t i = 0; i < header.size(); ++i) {
        std::string h = stripCr(header[i]);
        for (auto &c : h)
            c = char(std::tolower(static_cast<unsigned char>(c)));
        for (auto n : names)
            if (h == n)
                return int(i);
    }
    return -1;
}

const Names kFirst = {"question1", "sentence1", "#1 string", "text1", "a"};
const Names kSecond = {"question2", "sentence2", "#2 string", "text2", "b"};
const Names kLabel = {"is_duplicate", "label", "quality", "duplicate"};

void parseJsonl(LabelledPairsFile &f, std::string_view text, const std::string &source)
{
    f.format = "jsonl";
    text::forEachLine(text, [&](size_t line, std::string_view l) {
        if (blank(l))
            return true;
        ++f.lines;
        const std::string where = source + ":" + std::to_string(line) + ": ";
        const auto j = nlohmann::json::parse(l, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            f.warnings.add(where + "not a JSON object");
            return true;
        }
        const auto field = [&](const Names &names) -> const nlohmann::json * {
            for (auto n : names)
                if (const auto it = j.find(std::string(n)); it != j.end())
                    return &*it;
            return nullptr;
        };
        const auto *a = field(kFirst), *b = field(kSecond), *label = field(kLabel);
        if (!a || !b || !label || !a->is_string() || !b->is_string()) {
            f.warnings.add(where + "expected two texts (question1/question2, sentence1/sentence2, a/b) and "
                                   "a label (label or is_duplicate)");
            return true;
        }
        std::string labelText = label->is_boolean()          ? (label->get<bool>() ? "1" : "0")
                                : label->is_number_integer() ? std::to_string(label->get<int64_t>())
                                : label->is_string()         ? label->get<std::string>()
                                                             : label->dump();
        addPair(f, where, a->get<std::string>(), b->get<std::string>(), labelText);
        return true;
    });
}

void parseTsv(LabelledPairsFile &f, std::string_view text, const std::string &source)
{
    // the first line: a header naming the columns, or already a pair
    const size_t eol = text.find('\n');
    const std::string first = stripCr(text.substr(0, eol));
    std::vector<std::string> header;
    for (size_t pos = 0;;) {
        const size_t tab = first.find('\t', pos);
        header.push_back(first.substr(pos, tab == std::string::npos ? std::string::npos : tab - pos));
        if (tab == std::string::npos)
            break;
        pos = tab + 1;
    }
    int ca = columnOf(header, kFirst), cb = columnOf(header, kSecond), cl = columnOf(header, kLabel);
    const bool hasHeader = ca >= 0 || cb >= 0 || cl >= 0;
    if (hasHeader && (ca < 0 || cb < 0 || cl < 0))
        throw Error(
            ErrorCode::Format,
            source + ":1: the header names " + (ca < 0 ? "no first text (question1, sentence1)" : "") +
                (cb < 0 ? std::string(ca < 0 ? "; " : "") + "no second text (question2, sentence2)" : "") +
                (cl < 0 ? std::string(ca < 0 || cb < 0 ? "; " : "") + "no label (is_duplicate, label)" : ""));
    const bool quora = hasHeader && columnOf(header, Names{"qid1"}) >= 0;
    if (!hasHeader) {
        ca = 0;
        cb = 1;
        cl = 2;
    }
    const size_t needed = size_t(std::max({ca, cb, cl})) + 1;
    f.format = quora ? "quora-tsv" : hasHeader ? "tsv-header" : "tsv";
    const auto take = [&](size_t line, const std::vector<std::string> &fields, const std::string &problem) {
        ++f.lines;
        const std::string where = source + ":" + std::to_string(line) + ": ";
        if (!problem.empty())
            return f.warnings.add(where + problem);
        if (fields.size() < needed)
            return f.warnings.add(where + std::to_string(fields.size()) + " fields, expected " +
                                  std::to_string(needed) + " (text, text, label)");
        addPair(f, where, stripCr(fields[size_t(ca)]), stripCr(fields[size_t(cb)]), fields[size_t(cl)]);
    };
    if (quora) { // Quora's file quotes fields that hold tabs or line breaks
        TsvReader reader(text);
        TsvRecord rec;
        reader.next(rec); // the header
        while (reader.next(rec))
            if (!(rec.problem.empty() && rec.fields.size() == 1 && blank(rec.fields[0])))
                take(rec.line, rec.fields, rec.problem);
        return;
    }
    text::forEachLine(text, [&](size_t line, std::string_view l) {
        if ((hasHeader && line == 1) || blank(l))
            return true;
        std::vector<std::string> fields;
        for (size_t pos = 0;;) {
            const size_t tab = l.find('\t', pos);
            fields.emplace_back(
                l.substr(pos, tab == std::string_view::npos ? std::string_view::npos : tab - pos));
            if (tab == std::string_view::npos)
                break;
            pos = tab + 1;
        }
        take(line, fields, {});
        return true;
    });
}

} // namespace

LabelledPairsFile parseLabelledPairs(std::string_view text, const std::string &sourceName, bool jsonl)
{
    LabelledPairsFile f;
    if (const auto bad = text::firstInvalidUtf8(text))
        throw Error(ErrorCode::Format, fmt::format("{}: byte {} is not UTF-8", sourceName, *bad));
    if (jsonl)
        parseJsonl(f, text, sourceName);
    else
        parseTsv(f, text, sourceName);
    if (f.pairs.empty())
        throw Error(ErrorCode::Format,
                    sourceName + ": no labelled pair could be read" +
                        (f.warnings.empty() ? std::string(" (the file is empty)")
                                            : "; first problem: " + f.warnings.messages().front()));
    return f;
}

LabelledPairsFile readLabelledPairs(const std::filesystem::path &path)
{
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw Error(ErrorCode::Io, path.string() + ": no such file");
    const std::string text = text::readWholeFile(path);
    const size_t firstChar = text.find_first_not_of(" \t\r\n");
    const bool jsonl =
        path.extension() == ".jsonl" || (firstChar != std::string::npos && text[firstChar] == '{');
    return parseLabelledPairs(text, path.string(), jsonl);
}

PairSplit splitPairsByText(const std::vector<LabelledPair> &pairs, double share, uint64_t seed)
{
    if (!(share >= 0 && share < 1))
        throw Error(ErrorCode::InvalidArgument, fmt::format("validation share {} is not in [0, 1)", share));
    // union-find over texts (lower-cased, spacing collapsed)
    std::unordered_map<std::string, size_t> id;
    std::vector<size_t> parent;
    const auto key = [](const std::string &s) {
        std::string k;
        for (const auto &w : text::lowerWords(s))
            k += w + " ";
        return k.empty() ? s : k;
    };
    const auto node = [&](const std::string &s) {
        const auto [it, added] = id.emplace(key(s), parent.size());
        if (added)
            parent.push_back(parent.size());
        return it->second;
    };
    const auto root = [&](size_t x) {
        while (parent[x] != x)
            x = parent[x] = parent[parent[x]];
        return x;
    };
    std::vector<size_t> first(pairs.size());
    for (size_t i = 0; i < pairs.size(); ++i) {
        const size_t a = node(pairs[i].a), b = node(pairs[i].b);
        parent[root(a)] = root(b);
        first[i] = a;
    }
    // groups in order of first appearance, shuffled with the seed, drawn until share of the pairs
    std::unordered_map<size_t, std::vector<size_t>> members;
    std::vector<size_t> groups;
    for (size_t i = 0; i < pairs.size(); ++i) {
        auto &m = members[root(first[i])];
        if (m.empty())
            groups.push_back(root(first[i]));
        m.push_back(i);
    }
    SeededRandom rng(seed);
    rng.shuffle(groups);
    std::vector<char> inValidation(pairs.size(), 0);
    const size_t want = size_t(std::llround(share * double(pairs.size())));
    size_t taken = 0;
    for (size_t g : groups) {
        if (taken >= want)
            break;
        for (size_t i : members[g])
            inValidation[i] = 1;
        taken += members[g].size();
    }
    PairSplit out;
    for (size_t i = 0; i < pairs.size(); ++i)
        (inValidation[i] ? out.validation : out.train).push_back(pairs[i]);
    return out;
}

namespace {

// indices by similarity, highest first; NaN last
std::vector<size_t> rankOrder(const std::vector<LabelledPair> &pairs, const std::vector<double> &similarity,
                              const char *what)
{
    if (pairs.size() != similarity.size())
        throw Error(ErrorCode::InvalidArgument, std::string(what) + ": one similarity per pair");
    std::vector<size_t> order(pairs.size());
    std::iota(order.begin(), order.end(), size_t(0));
    const auto value = [&](size_t i) {
        return std::isnan(similarity[i]) ? -std::numeric_limits<double>::infinity() : similarity[i];
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return value(a) > value(b); });
    return order;
}

} // namespace

std::vector<PrPoint> precisionRecallCurve(const std::vector<LabelledPair> &pairs,
                                          const std::vector<double> &similarity, size_t maxPoints)
{
    const auto order = rankOrder(pairs, similarity, "precision/recall curve");
    size_t positives = 0;
    for (const auto &p : pairs)
        positives += p.duplicate ? 1 : 0;
    std::vector<PrPoint> all;
    size_t tp = 0, served = 0;
    for (size_t k = 0; k < order.size(); ++k) {
        const double s = similarity[order[k]];
        if (std::isnan(s))
            break; // never served
        tp += pairs[order[k]].duplicate ? 1 : 0;
        ++served;
        if (k + 1 < order.size() && similarity[order[k + 1]] == s)
            continue;
        all.push_back(
            {s, double(tp) / double(served), positives ? double(tp) / double(positives) : 0.0, served});
    }
    if (maxPoints < 2 || all.size() <= maxPoints)
        return all;
    std::vector<PrPoint> thin;
    for (size_t i = 0; i < maxPoints; ++i)
        thin.push_back(all[i * (all.size() - 1) / (maxPoints - 1)]);
    return thin;
}

double averagePrecision(const std::vector<LabelledPair> &pairs, const std::vector<double> &similarity)
{
    const auto order = rankOrder(pairs, similarity, "average precision");
    size_t positives = 0, tp = 0;
    double sum = 0;
    for (const auto &p : pairs)
        positives += p.duplicate ? 1 : 0;
    for (size_t k = 0; k < order.size(); ++k) {
        if (std::isnan(similarity[order[k]]))
            break;
        if (pairs[order[k]].duplicate) {
            ++tp;
            sum += double(tp) / double(k + 1);
        }
    }
    return positives ? sum / double(positives) : 0.0;
}

PrPoint thresholdForPrecision(const std::vector<LabelledPair> &pairs, const std::vector<double> &similarity,
                              double target)
{
    PrPoint best{std::numeric_limits<double>::infinity(), 1.0, 0.0, 0};
    for (const auto &p : precisionRecallCurve(pairs, similarity, 0))
        if (p.precision >= target && p.recall >= best.recall)
            best = p;
    return best;
}

} // namespace kvwb::core
