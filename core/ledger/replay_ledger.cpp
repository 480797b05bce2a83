#include "core/ledger/replay_ledger.h"

#include "core/util/atomic_file.h"
#include "core/util/csv.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <variant>

namespace kvwb::core {

namespace fs = std::filesystem;

// ---- summary ----

namespace {

bool isResponseHit(TierKind t)
{
    return t == TierKind::Exact || t == TierKind::Semantic;
}

// Hits that stand for an intent, so can be of the wrong one: a stored response, or a knowledge
// node's module (the answer rendered on another concept's knowledge).
bool carriesIntent(TierKind t)
{
    return isResponseHit(t) || t == TierKind::Knowledge;
}

// A model-served row whose prompt KV a KV tier kept: the replay inserts the KV of a miss or a
// prefix hit into the prefix trees when the stack has a prefix or cross tier
// (gpu/src/replay/replay.cpp), never what a cross-model or knowledge hit produced. A miss consulted
// every tier, a KV hit its own, so the row's tierHits tells whether the stack had one.
bool keepsKv(const LedgerRow &r)
{
    if (r.answeredBy != TierKind::None && r.answeredBy != TierKind::Prefix)
        return false;
    return r.tierHits.count(TierKind::Prefix) || r.tierHits.count(TierKind::Cross);
}

} // namespace

LedgerSummary summarize(const std::vector<LedgerRow> &allRows, const Prices &prices)
{
    LedgerSummary s;
    std::vector<LedgerRow> rows;
    rows.reserve(allRows.size());
    for (const LedgerRow &r : allRows) {
        if (r.notServed == NotServed::No) {
            rows.push_back(r);
        } else {
            ++s.notServed;
            ++s.notServedBy[enumName(kNotServedNames, r.notServed)];
        }
    }
    s.requests = int64_t(rows.size());
    int64_t promptTokens = 0, responseHits = 0;
    double allPrompt = 0, allGenerated = 0;
    std::vector<double> ttft, total;
    std::map<TierKind, std::vector<double>> tierTtft;
    s.tiers[TierKind::None] = {}; // always present, even with no misses
    s.prices = prices;
    CostBreakdown &c = s.cost;
    int64_t lastArrivalMs = 0;
    for (const LedgerRow &r : rows)
        lastArrivalMs = std::max(lastArrivalMs, r.arrivalMs);
    for (const LedgerRow &r : rows) {
        const bool responseHit = isResponseHit(r.answeredBy);
        // only a response or a knowledge node can be of the wrong intent
        const bool falseHit = r.falseHit && carriesIntent(r.answeredBy);
        if (r.answeredBy != TierKind::None)
            ++s.hits;
        s.approximateHits += isApproximate(r.answeredBy);
        if (r.semanticGuard != SemanticGuard::None) {
            ++s.guarded;
            ++s.guardedBy[semanticGuardName(r.semanticGuard)];
            if (r.verifier == VerifierVerdict::Pass) { // overruled: served
                ++s.guardOverruled;
            } else {
                s.guardPrevented += r.guardedSameIntent == 0;
                s.guardLost += r.guardedSameIntent == 1;
            }
        }
        if (r.semanticDecision == SemanticDecision::Serve && r.answeredBy == TierKind::Semantic) {
            ++s.boundServed;
            s.boundFalse += falseHit;
        }
        if (r.verifier != VerifierVerdict::None) {
            ++s.verified;
            s.verifierMeanMs += r.verifierMs;
            s.verifierPassed += r.verifier == VerifierVerdict::Pass;
            s.verifierRejected += r.verifier == VerifierVerdict::Reject;
            s.verifierErrors += r.verifier == VerifierVerdict::Error;
            if (r.verifier != VerifierVerdict::Pass) {
                s.verifierPrevented += r.verifiedSameIntent == 0;
                s.verifierLost += r.verifiedSameIntent == 1;
            }
        }
        responseHits += carriesIntent(r.answeredBy);
        s.falseHits += falseHit;
        s.tokensReused += r.tokensReused;
        s.tokensComputed += r.tokensComputed;
        promptTokens += r.promptTokens;
        ttft.push_back(r.ttftMs);
        total.push_back(r.totalMs);
        if (!responseHit) {
            const int computed = r.promptTokens - r.tokensReused;
            // A provider serves a reused prefix from its cache only from its minimum length up.
            if (r.tokensReused >= prices.minCacheableTokens)
                c.cachedInputTokens += r.tokensReused;
            else
                c.inputTokens += r.tokensReused;
            if (keepsKv(r) && r.promptTokens >= prices.minCacheableTokens) {
                c.cacheWriteTokens += computed;
                c.storageTokenHours += double(computed) * double(lastArrivalMs - r.arrivalMs) / 3.6e6;
            } else {
                c.inputTokens += computed;
            }
            c.outputTokens += r.generatedTokens;
        }
        allPrompt += double(r.promptTokens);
        allGenerated += double(r.generatedTokens);

        for (const auto &[tier, hit] : r.tierHits)
            if (tier != TierKind::None) // not a tier; the file forms refuse such a row
                ++s.tiers[tier].requests;
        if (r.tierHits.count(TierKind::Knowledge)) {
            TierAggregate &k = s.tiers[TierKind::Knowledge];
            k.rejected += r.knowledgeVerdict == KnowledgeVerdict::Rejected;
            k.modulesRecomputed += r.knowledgeModule == ModuleFate::Recomputed;
        }
        TierAggregate &a = s.tiers[r.answeredBy];
        if (r.answeredBy == TierKind::None)
            ++a.requests; // the misses are the requests of "none"; it has no hits
        else
            ++a.hits;
        a.falseHits += falseHit;
        a.tokensReused += r.tokensReused;
        a.tokensComputed += r.tokensComputed;
        tierTtft[r.answeredBy].push_back(r.ttftMs);
    }
    for (auto &[tier, a] : s.tiers) {
        const std::vector<double> &v = tierTtft[tier];
        a.ttftMsP50 = percentile(v, 50);
        a.ttftMsP95 = percentile(v, 95);
        a.ttftMsP99 = percentile(v, 99);
    }
    if (s.requests > 0)
        s.hitRate = double(s.hits) / double(s.requests);
    if (promptTokens > 0)
        s.tokenHitRate = double(s.tokensReused) / double(promptTokens);
    if (s.verified > 0)
        s.verifierMeanMs /= double(s.verified);
    if (responseHits > 0)
        s.falseHitRate = double(s.falseHits) / double(responseHits);
    s.ttftMsP50 = percentile(ttft, 50);
    s.ttftMsP95 = percentile(ttft, 95);
    s.ttftMsP99 = percentile(ttft, 99);
    s.totalMsP50 = percentile(total, 50);
    s.totalMsP95 = percentile(total, 95);
    s.totalMsP99 = percentile(total, 99);
    // A write at the input price bills with the input tokens, so Prices{in, out} gives the same figure
    // to the last bit as before cache prices existed.
    const bool writeAtInput = prices.cacheWrite() == prices.inputPerMillion;
    const double inputTokens = double(c.inputTokens) + (writeAtInput ? double(c.cacheWriteTokens) : 0.0);
    c.inputUsd = double(c.inputTokens) * prices.inputPerMillion / 1e6;
    c.cachedInputUsd = double(c.cachedInputTokens) * prices.cachedInputPerMillion / 1e6;
    c.cacheWriteUsd = double(c.cacheWriteTokens) * prices.cacheWrite() / 1e6;
    c.outputUsd = double(c.outputTokens) * prices.outputPerMillion / 1e6;
    c.storageUsd = c.storageTokenHours * prices.storagePerMillionTokensHour / 1e6;
    s.costUsd = (inputTokens * prices.inputPerMillion + double(c.outputTokens) * prices.outputPerMillion +
                 double(c.cachedInputTokens) * prices.cachedInputPerMillion +
                 (writeAtInput ? 0.0 : double(c.cacheWriteTokens) * prices.cacheWrite()) +
                 c.storageTokenHours * prices.storagePerMillionTokensHour) /
                1e6;
    s.costUsdNoCache = (allPrompt * prices.inputPerMillion + allGenerated * prices.outputPerMillion) / 1e6;
    return s;
}

// ---- columns, shared by the CSV and the HDF5 form ----

namespace {

// Whole numbers stored as float64 in the HDF5 form are exact up to 2^53.
constexpr int64_t kMaxExactInt = int64_t(1) << 53;

struct AnsweredBy
{
};
struct TierHit
{
    TierKind tier;
};
// A typed note written as its enum's name (core/util/enum_names.h).
struct Named
{
    std::string (*name)(const LedgerRow &);
    bool (*set)(LedgerRow &, const std::string &); // false: not a name of the enum
    const char *expected;
};
template <auto Member, const auto &Table> Named named(const char *expected)
{
    return {[](const LedgerRow &r) { return std::string(enumName(Table, r.*Member)); },
            [](LedgerRow &r, const std::string &s) {
                const auto v = parseEnum(Table, s);
                if (v)
                    r.*Member = *v;
                return v.has_value();
            },
            expected};
}
using Field = std::variant<int64_t LedgerRow::*, int LedgerRow::*, double LedgerRow::*, bool LedgerRow::*,
                           std::string LedgerRow::*, AnsweredBy, TierHit, Named>;

struct Column
{
    const char *name;
    Field field;
    bool text; // a string column: its own dataset in HDF5, not a column of "numbers"
    // Added after ledgers were first written (the knowledge tier's): a file without it reads as
    // "not consulted" rather than failing.
    bool optional = false;
};

// CSV column order (docs/replay.md, "Ledger").
const std::vector<Column> &columns()
{
    static const std::vector<Column> all = {
        {"request_id", &LedgerRow::requestId, false},
        {"arrival_ms", &LedgerRow::arrivalMs, false},
        {"tenant", &LedgerRow::tenant, true},
        {"model", named<&LedgerRow::model, kRoleNames>("a or b"), true},
        {"intent", &LedgerRow::intent, true},
        {"answered_by", AnsweredBy{}, true},
        {"hit_exact", TierHit{TierKind::Exact}, false},
        {"hit_semantic", TierHit{TierKind::Semantic}, false},
        {"hit_prefix", TierHit{TierKind::Prefix}, false},
        {"hit_cross", TierHit{TierKind::Cross}, false},
        {"hit_knowledge", TierHit{TierKind::Knowledge}, false, true},
        {"cached_intent", &LedgerRow::cachedIntent, true},
        {"cached_request_id", &LedgerRow::cachedRequestId, false},
        {"similarity", &LedgerRow::similarity, false},
        {"false_hit", &LedgerRow::falseHit, false},
        {"prompt_tokens", &LedgerRow::promptTokens, false},
        {"tokens_reused", &LedgerRow::tokensReused, false},
        {"tokens_computed", &LedgerRow::tokensComputed, false},
        {"generated_tokens", &LedgerRow::generatedTokens, false},
        {"ttft_ms", &LedgerRow::ttftMs, false},
        {"total_ms", &LedgerRow::totalMs, false},
        {"lookup_ms", &LedgerRow::lookupMs, false},
        {"gate", named<&LedgerRow::gate, kGateDecisionNames>("pass, fail or empty"), true},
        {"gate_value", &LedgerRow::gateValue, false},
        {"shadow_kl", &LedgerRow::shadowKl, false},
        {"shadow_exact", &LedgerRow::shadowExact, false},
        {"knowledge_node", &LedgerRow::knowledgeNode, true, true},
        {"knowledge_verdict",
         named<&LedgerRow::knowledgeVerdict, kKnowledgeVerdictNames>("verified, rejected or empty"), true,
         true},
        {"knowledge_module",
         named<&LedgerRow::knowledgeModule, kModuleFateNames>("reused, recomputed, too-long or empty"), true,
         true},
        {"profile_applied", &LedgerRow::profileApplied, false, true},
        {"store", named<&LedgerRow::store, kStoreNoteNames>("hit, miss, refused, unavailable or empty"), true,
         true},
        {"worker", &LedgerRow::worker, false, true},
        {"route", &LedgerRow::route, true, true},
        {"semantic_decision",
         named<&LedgerRow::semanticDecision, kSemanticDecisionNames>("serve, explore or empty"), true, true},
        {"semantic_guard",
         named<&LedgerRow::semanticGuard, kSemanticGuardNames>(
             "negation, number, entity, question-word or empty"),
         true, true},
        {"guarded_same_intent", &LedgerRow::guardedSameIntent, false, true},
        {"verifier", named<&LedgerRow::verifier, kVerifierVerdictNames>("pass, reject, error or empty"), true,
         true},
        {"verifier_score", &LedgerRow::verifierScore, false, true},
        {"verifier_ms", &LedgerRow::verifierMs, false, true},
        {"verified_same_intent", &LedgerRow::verifiedSameIntent, false, true},
        {"not_served", named<&LedgerRow::notServed, kNotServedNames>("context, worker or empty"), true, true},
        {"question", &LedgerRow::question, true, true},
        {"answer", &LedgerRow::answer, true, true},
    };
    return all;
}

template <class... Ts> struct Overloaded : Ts...
{
    using Ts::operator()...;
};
template <class... Ts> Overloaded(Ts...) -> Overloaded<Ts...>;

// A row that no file form can hold: a hit recorded for TierKind::None.
void checkTierHits(const LedgerRow &r, const std::string &where)
{
    if (r.tierHits.count(TierKind::None))
        throw Error(
            ErrorCode::InvalidArgument,
            where +
                " tierHits holds 'none', which is not a tier (exact, semantic, prefix, cross, knowledge)");
}

// ---- CSV ----

std::string cellText(const LedgerRow &r, const Field &field)
{
    return std::visit(Overloaded{
                          [&](int64_t LedgerRow::*m) { return std::to_string(r.*m); },
                          [&](int LedgerRow::*m) { return std::to_string(r.*m); },
                          // shortest text that parses back to the same double; nan, inf, -inf
                          [&](double LedgerRow::*m) { return fmt::format("{}", r.*m); },
                          [&](bool LedgerRow::*m) { return std::string(r.*m ? "1" : "0"); },
                          [&](std::string LedgerRow::*m) { return r.*m; },
                          [&](AnsweredBy) { return std::string(tierKindName(r.answeredBy)); },
                          [&](const Named &n) { return n.name(r); },
                          [&](TierHit h) {
                              const auto it = r.tierHits.find(h.tier);
                              return std::string(it == r.tierHits.end() ? "" : it->second ? "1" : "0");
                          },
                      },
                      field);
}

template <typename T> bool parseInteger(const std::string &s, T &out)
{
    const char *end = s.data() + s.size();
    const auto [p, ec] = std::from_chars(s.data(), end, out);
    return ec == std::errc() && p == end;
}

bool parseReal(const std::string &s, double &out)
{
    const char *end = s.data() + s.size();
    const auto [p, ec] = std::from_chars(s.data(), end, out);
    return ec == std::errc() && p == end;
}

// Sets field from its CSV text; returns what it must be when the text does not fit, else "".
std::string setFromText(LedgerRow &r, const Field &field, const std::string &s)
{
    return std::visit(
        Overloaded{
            [&](int64_t LedgerRow::*m) -> std::string { return parseInteger(s, r.*m) ? "" : "an integer"; },
            [&](int LedgerRow::*m) -> std::string { return parseInteger(s, r.*m) ? "" : "a 32-bit integer"; },
            [&](double LedgerRow::*m) -> std::string { return parseReal(s, r.*m) ? "" : "a number"; },
            [&](bool LedgerRow::*m) -> std::string {
                if (s != "0" && s != "1")
                    return "0 or 1";
                r.*m = s == "1";
                return "";
            },
            [&](std::string LedgerRow::*m) -> std::string {
                r.*m = s;
                return "";
            },
            [&](const Named &n) -> std::string { return n.set(r, s) ? "" : n.expected; },
            [&](AnsweredBy) -> std::string {
                const auto t = parseTierKind(s);
                if (!t)
                    return "one of none, exact, semantic, prefix, cross, knowledge";
                r.answeredBy = *t;
                return "";
            },
            [&](TierHit h) -> std::string {
                if (s.empty())
                    r.tierHits.erase(h.tier);
                else if (s == "0" || s == "1")
                    r.tierHits[h.tier] = s == "1";
                else
                    return "1, 0 or empty";
                return "";
            },
        },
        field);
}

struct CsvRecord
{
    size_t line = 0; // where the record starts (a quoted field may span lines)
    std::vector<std::string> fields;
};

// RFC 4180: fields separated by ',', records by "\n" or "\r\n"; a field in double quotes may hold
// ',', '"' (doubled) and line breaks. Error(Format) naming sourceName and the line.
std::vector<CsvRecord> parseCsv(std::string_view text, const std::string &sourceName)
{
    std::vector<CsvRecord> records;
    size_t pos = 0, line = 1;
    const auto fail = [&](size_t at, const std::string &what) {
        throw Error(ErrorCode::Format, sourceName + ":" + std::to_string(at) + ": " + what);
    };
    while (pos < text.size()) {
        CsvRecord rec;
        rec.line = line;
        bool endOfRecord = false;
        while (!endOfRecord) {
            std::string field;
            if (pos < text.size() && text[pos] == '"') {
                const size_t opened = line;
                ++pos;
                for (;;) {
                    if (pos >= text.size())
                        fail(opened, "quoted field of column " + std::to_string(rec.fields.size() + 1) +
                                         " is not closed");
                    const char c = text[pos];
                    if (c == '"') {
                        if (pos + 1 < text.size() && text[pos + 1] == '"') {
                            field += '"';
                            pos += 2;
                            continue;
                        }
                        ++pos;
                        break;
                    }
                    if (c == '\n')
                        ++line;
                    field += c;
                    ++pos;
                }
            } else {
                while (pos < text.size() && text[pos] != ',' && text[pos] != '\n' &&
                       !(text[pos] == '\r' && pos + 1 < text.size() && text[pos + 1] == '\n')) {
                    if (text[pos] == '"')
                        fail(line, "'\"' inside the unquoted field of column " +
                                       std::to_string(rec.fields.size() + 1));
                    field += text[pos++];
                }
            }
            rec.fields.push_back(std::move(field));
            if (pos >= text.size()) {
                endOfRecord = true;
            } else if (text[pos] == ',') {
                ++pos;
            } else if (text[pos] == '\n' ||
                       (text[pos] == '\r' && pos + 1 < text.size() && text[pos + 1] == '\n')) {
                pos += text[pos] == '\r' ? 2 : 1;
                ++line;
                endOfRecord = true;
            } else {
                fail(line, "unexpected character after the closing quote of column " +
                               std::to_string(rec.fields.size()));
            }
        }
        // A blank line (an editor's extra newline at the end) is no record.
        if (!(rec.fields.size() == 1 && rec.fields[0].empty()))
            records.push_back(std::move(rec));
    }
    return records;
}

// ---- HDF5 ----

// The numeric value of a non-text column (tier hit absent: NaN).
double cellNumber(const LedgerRow &r, const Field &field)
{
    return std::visit(Overloaded{
                          [&](int64_t LedgerRow::*m) { return double(r.*m); },
                          [&](int LedgerRow::*m) { return double(r.*m); },
                          [&](double LedgerRow::*m) { return r.*m; },
                          [&](bool LedgerRow::*m) { return r.*m ? 1.0 : 0.0; },
                          [&](std::string LedgerRow::*) { return 0.0; },
                          [&](AnsweredBy) { return 0.0; },
                          [&](const Named &) { return 0.0; },
                          [&](TierHit h) {
                              const auto it = r.tierHits.find(h.tier);
                              return it == r.tierHits.end() ? std::numeric_limits<double>::quiet_NaN()
                                     : it->second           ? 1.0
                                                            : 0.0;
                          },
                      },
                      field);
}

bool isWhole(double v, double min, double max)
{
    return v >= min && v <= max && std::floor(v) == v;
}

// Sets a non-text field from its stored number; returns what it must be when it does not fit.
std::string setFromNumber(LedgerRow &r, const Field &field, double v)
{
    return std::visit(
        Overloaded{
            [&](int64_t LedgerRow::*m) -> std::string {
                if (!isWhole(v, -double(kMaxExactInt), double(kMaxExactInt)))
                    return "a whole number within +-2^53";
                r.*m = int64_t(v);
                return "";
            },
            [&](int LedgerRow::*m) -> std::string {
                if (!isWhole(v, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()))
                    return "a 32-bit whole number";
                r.*m = int(v);
                return "";
            },
            [&](double LedgerRow::*m) -> std::string {
                r.*m = v;
                return "";
            },
            [&](bool LedgerRow::*m) -> std::string {
                if (v != 0 && v != 1)
                    return "0 or 1";
                r.*m = v == 1;
                return "";
            },
            [&](std::string LedgerRow::*) -> std::string { return "a string"; },
            [&](AnsweredBy) -> std::string { return "a string"; },
            [&](const Named &) -> std::string { return "a string"; },
            [&](TierHit h) -> std::string {
                if (std::isnan(v))
                    r.tierHits.erase(h.tier);
                else if (v == 0 || v == 1)
                    r.tierHits[h.tier] = v == 1;
                else
                    return "1, 0 or NaN";
                return "";
            },
        },
        field);
}

// Everything saveLedger promises to refuse, before the file is opened for writing.
void checkRows(const std::string &where, const std::vector<LedgerRow> &rows)
{
    for (size_t i = 0; i < rows.size(); ++i) {
        const LedgerRow &r = rows[i];
        const std::string at = where + " row " + std::to_string(i);
        checkTierHits(r, at);
        for (const auto &[name, value] :
             {std::pair{"request_id", r.requestId}, std::pair{"arrival_ms", r.arrivalMs},
              std::pair{"cached_request_id", r.cachedRequestId}})
            if (value > kMaxExactInt || value < -kMaxExactInt)
                throw Error(ErrorCode::InvalidArgument, at + " " + name + " " + std::to_string(value) +
                                                            " is beyond +-2^53, which float64 holds exactly");
    }
}

} // namespace

// ---- CSV ----

const std::vector<LedgerColumn> &ledgerColumns()
{
    static const std::vector<LedgerColumn> all = [] {
        std::vector<LedgerColumn> out;
        for (const Column &c : columns())
            out.push_back({c.name, c.text, c.optional});
        return out;
    }();
    return all;
}

std::string ledgerCellText(const LedgerRow &row, size_t column)
{
    return cellText(row, columns().at(column).field);
}

std::string setLedgerCellText(LedgerRow &row, size_t column, const std::string &text)
{
    return setFromText(row, columns().at(column).field, text);
}

double ledgerCellNumber(const LedgerRow &row, size_t column)
{
    return cellNumber(row, columns().at(column).field);
}

std::string setLedgerCellNumber(LedgerRow &row, size_t column, double value)
{
    return setFromNumber(row, columns().at(column).field, value);
}

void checkLedgerRows(const std::string &where, const std::vector<LedgerRow> &rows)
{
    checkRows(where, rows);
}

std::string ledgerToCsv(const std::vector<LedgerRow> &rows)
{
    const std::vector<Column> &cols = columns();
    std::string out;
    for (size_t c = 0; c < cols.size(); ++c)
        out += std::string(c ? "," : "") + cols[c].name;
    out += '\n';
    for (size_t i = 0; i < rows.size(); ++i) {
        checkTierHits(rows[i], "ledger row " + std::to_string(i));
        for (size_t c = 0; c < cols.size(); ++c) {
            if (c)
                out += ',';
            appendCsvField(out, cellText(rows[i], cols[c].field));
        }
        out += '\n';
    }
    return out;
}

void writeLedgerCsv(const fs::path &path, const std::vector<LedgerRow> &rows)
{
    writeFileAtomic(path, ledgerToCsv(rows));
}

std::vector<LedgerRow> ledgerFromCsv(const std::string &csv, const std::string &sourceName)
{
    const std::vector<CsvRecord> records = parseCsv(csv, sourceName);
    if (records.empty())
        throw Error(ErrorCode::Format, sourceName + ": no header row (an empty ledger CSV still has one)");
    const CsvRecord &header = records.front();
    const std::vector<Column> &cols = columns();
    // Where each column is in this file; columns a later kvwb may add are ignored.
    std::vector<size_t> index(cols.size(), SIZE_MAX);
    for (size_t f = 0; f < header.fields.size(); ++f)
        for (size_t c = 0; c < cols.size(); ++c)
            if (header.fields[f] == cols[c].name) {
                if (index[c] != SIZE_MAX)
                    throw Error(ErrorCode::Format, sourceName + ":" + std::to_string(header.line) +
                                                       ": column " + cols[c].name + " appears twice");
                index[c] = f;
            }
    for (size_t c = 0; c < cols.size(); ++c)
        if (index[c] == SIZE_MAX && !cols[c].optional)
            throw Error(ErrorCode::Format, sourceName + ":" + std::to_string(header.line) + ": column " +
                                               cols[c].name + " is missing from the header");
    std::vector<LedgerRow> rows;
    rows.reserve(records.size() - 1);
    for (size_t i = 1; i < records.size(); ++i) {
        const CsvRecord &rec = records[i];
        const std::string where = sourceName + ":" + std::to_string(rec.line) + ": ";
        if (rec.fields.size() != header.fields.size())
            throw Error(ErrorCode::Format, where + std::to_string(rec.fields.size()) +
                                               " fields, the header has " +
                                               std::to_string(header.fields.size()));
        LedgerRow r;
        for (size_t c = 0; c < cols.size(); ++c) {
            if (index[c] == SIZE_MAX)
                continue; // an optional column this file predates
            const std::string &value = rec.fields[index[c]];
            const std::string must = setFromText(r, cols[c].field, value);
            if (!must.empty())
                throw Error(ErrorCode::Format,
                            where + "column " + cols[c].name + ": '" + value + "' is not " + must);
        }
        rows.push_back(std::move(r));
    }
    return rows;
}

namespace {

nlohmann::json pricesJson(const LedgerSummary &s)
{
    const Prices &p = s.prices;
    return {{"preset", p.preset.empty() ? "custom" : p.preset},
            {"input", p.inputPerMillion},
            {"cached_input", p.cachedInputPerMillion},
            {"cache_write", p.cacheWrite()},
            {"output", p.outputPerMillion},
            {"storage_per_million_tokens_hour", p.storagePerMillionTokensHour},
            {"min_cacheable_tokens", p.minCacheableTokens},
            {"cost", nlohmann::json(costBreakdownJson(s.cost))}};
}

} // namespace

nlohmann::ordered_json costBreakdownJson(const CostBreakdown &c)
{
    return {{"input_tokens", c.inputTokens},
            {"cached_input_tokens", c.cachedInputTokens},
            {"cache_write_tokens", c.cacheWriteTokens},
            {"output_tokens", c.outputTokens},
            {"storage_token_hours", c.storageTokenHours},
            {"input_usd", c.inputUsd},
            {"cached_input_usd", c.cachedInputUsd},
            {"cache_write_usd", c.cacheWriteUsd},
            {"output_usd", c.outputUsd},
            {"storage_usd", c.storageUsd}};
}

std::string ledgerSummaryJson(const LedgerSummary &s)
{
    nlohmann::json tiers = nlohmann::json::object();
    for (const auto &[kind, t] : s.tiers)
        tiers[tierKindName(kind)] = {{"requests", t.requests},
                                     {"hits", t.hits},
                                     {"false_hits", t.falseHits},
                                     {"tokens_reused", t.tokensReused},
                                     {"tokens_computed", t.tokensComputed},
                                     {"ttft_ms_p50", t.ttftMsP50},
                                     {"ttft_ms_p95", t.ttftMsP95},
                                     {"ttft_ms_p99", t.ttftMsP99}};
    if (const auto k = s.tiers.find(TierKind::Knowledge); k != s.tiers.end()) {
        tiers["knowledge"]["rejected"] = k->second.rejected;
        tiers["knowledge"]["modules_recomputed"] = k->second.modulesRecomputed;
    }
    const nlohmann::json j = {
        {"requests", s.requests},
        {"not_served", s.notServed},
        {"not_served_by", s.notServedBy},
        {"hits", s.hits},
        {"false_hits", s.falseHits},
        {"approximate_hits", s.approximateHits},
        {"guarded",
         {{"candidates", s.guarded},
          {"by_guard", s.guardedBy},
          {"false_hits_prevented", s.guardPrevented},
          {"hits_lost", s.guardLost},
          {"overruled_by_verifier", s.guardOverruled}}},
        {"error_bound_served",
         {{"hits", s.boundServed},
          {"false_hits", s.boundFalse},
          {"error_rate", s.boundServed ? double(s.boundFalse) / double(s.boundServed) : 0.0}}},
        {"verifier",
         {{"candidates", s.verified},
          {"passed", s.verifierPassed},
          {"rejected", s.verifierRejected},
          {"errors", s.verifierErrors},
          {"false_hits_prevented", s.verifierPrevented},
          {"hits_lost", s.verifierLost},
          {"mean_ms", s.verifierMeanMs}}},
        {"hit_rate", s.hitRate},
        {"token_hit_rate", s.tokenHitRate},
        {"false_hit_rate", s.falseHitRate},
        {"tokens_reused", s.tokensReused},
        {"tokens_computed", s.tokensComputed},
        {"ttft_ms_p50", s.ttftMsP50},
        {"ttft_ms_p95", s.ttftMsP95},
        {"ttft_ms_p99", s.ttftMsP99},
        {"total_ms_p50", s.totalMsP50},
        {"total_ms_p95", s.totalMsP95},
        {"total_ms_p99", s.totalMsP99},
        {"cost_usd", s.costUsd},
        {"cost_usd_no_cache", s.costUsdNoCache},
        {"prices", pricesJson(s)},
        {"tiers", tiers}};
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ledgerText(std::string_view in, bool keepEnd)
{
    std::string valid;
    valid.reserve(std::min(in.size(), 2 * kLedgerTextBytes));
    while (!in.empty()) {
        const std::optional<size_t> bad = text::firstInvalidUtf8(in);
        valid.append(in.substr(0, bad.value_or(in.size())));
        if (!bad)
            break;
        valid += "\xef\xbf\xbd"; // U+FFFD for the byte that starts no valid sequence
        in.remove_prefix(*bad + 1);
    }
    if (valid.size() <= kLedgerTextBytes)
        return valid;
    static constexpr std::string_view kCut = "\xe2\x80\xa6"; // U+2026
    const size_t keep = kLedgerTextBytes - kCut.size();
    const auto continuation = [&](size_t i) { return (static_cast<unsigned char>(valid[i]) & 0xC0) == 0x80; };
    if (keepEnd) {
        size_t start = valid.size() - keep;
        while (start < valid.size() && continuation(start))
            ++start;
        return std::string(kCut) + valid.substr(start);
    }
    size_t end = keep;
    while (end > 0 && continuation(end))
        --end;
    return valid.substr(0, end) + std::string(kCut);
}

} // namespace kvwb::core
