#include "core/ledger/prices.h"

#include "core/util/error.h"
#include "core/util/text_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <set>

namespace kvwb::core {

namespace detail {
const char *builtinPricesJsonText(); // generated from resources/prices.json (core/CMakeLists.txt)
}

namespace fs = std::filesystem;
using nlohmann::json;
using OrderedJson = nlohmann::ordered_json; // listings keep the file's field order

namespace {

constexpr const char *kBuiltinName = "prices.json (built in)";

const std::set<std::string> &presetFields()
{
    static const std::set<std::string> fields = {"id",
                                                 "provider",
                                                 "model",
                                                 "currency",
                                                 "input",
                                                 "cached_input",
                                                 "cache_write",
                                                 "output",
                                                 "storage_per_million_tokens_hour",
                                                 "min_cacheable_tokens",
                                                 "source",
                                                 "as_of",
                                                 "notes",
                                                 "gpu",
                                                 "derived"};
    return fields;
}

const std::set<std::string> &gpuFields()
{
    static const std::set<std::string> fields = {"usd_per_hour", "prefill_tokens_per_second",
                                                 "decode_tokens_per_second", "basis"};
    return fields;
}

bool validId(const std::string &id)
{
    return !id.empty() && std::all_of(id.begin(), id.end(), [](char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
               ch == '_' || ch == '.' || ch == '-';
    });
}

// Reads one preset object; `where` names the file and the preset for every error.
class PresetReader
{
public:
    PresetReader(const json &j, std::string where) : m_j(j), m_where(std::move(where)) {}

    [[noreturn]] void fail(const std::string &field, const std::string &what) const
    {
        throw Error(ErrorCode::Config, m_where + ": field '" + field + "' " + what);
    }

    bool has(const std::string &field) const { return m_j.contains(field); }

    std::string text(const std::string &field, bool required) const
    {
        if (!m_j.contains(field)) {
            if (required)
                fail(field, "is missing");
            return "";
        }
        const json &v = m_j.at(field);
        if (!v.is_string())
            fail(field, "must be a string, got " + v.dump());
        return v.get<std::string>();
    }

    // A non-negative number (a price, a throughput); `positive` refuses 0 as well.
    double number(const json &obj, const std::string &field, const std::string &shown,
                  bool positive = false) const
    {
        if (!obj.contains(field))
            fail(shown, "is missing");
        const json &v = obj.at(field);
        if (!v.is_number())
            fail(shown, "must be a number, got " + v.dump());
        const double x = v.get<double>();
        if (!std::isfinite(x) || x < 0 || (positive && x == 0))
            fail(shown, fmt::format("is {}: {} cannot be {}", x, positive ? "it" : "a price",
                                    positive ? "zero or negative" : "negative"));
        // The command line's limit too (--price-in/--price-out): beyond it a ledger's costs overflow
        // to infinity and print as null.
        if (x > kMaxPriceValue)
            fail(shown, fmt::format("is {}: more than kvwb's limit of {:g}", x, kMaxPriceValue));
        return x;
    }
    double number(const std::string &field, bool positive = false) const
    {
        return number(m_j, field, field, positive);
    }

private:
    const json &m_j;
    std::string m_where;
};

PricePreset readPreset(const json &j, const std::string &sourceName, size_t index)
{
    std::string where = fmt::format("{}: preset {}", sourceName, index);
    if (!j.is_object())
        throw Error(ErrorCode::Config, where + " is not a JSON object");
    if (j.contains("id") && j.at("id").is_string())
        where += " (" + j.at("id").get<std::string>() + ")";
    const PresetReader r(j, where);
    for (const auto &[key, value] : j.items())
        if (!presetFields().count(key))
            r.fail(key, "is not a preset field (known: " +
                            text::join(std::vector<std::string>(presetFields().begin(), presetFields().end()),
                                       ", ") +
                            ")");
    PricePreset p;
    p.id = r.text("id", true);
    if (!validId(p.id))
        r.fail("id", "'" + p.id + "' must be letters, digits, '_', '.' or '-'");
    p.provider = r.text("provider", true);
    p.model = r.text("model", true);
    if (r.has("currency")) {
        p.currency = r.text("currency", true);
        if (p.currency != "USD")
            r.fail("currency", "is '" + p.currency + "': kvwb bills in USD only");
    }
    p.source = r.text("source", false);
    p.asOf = r.text("as_of", false);
    p.notes = r.text("notes", false);
    Prices &pr = p.prices;
    pr.preset = p.id;
    if (r.has("gpu")) {
        if (r.has("input") || r.has("output"))
            r.fail("gpu",
                   "and input/output both given: a GPU preset derives input and output from the GPU-hour");
        const json &g = j.at("gpu");
        if (!g.is_object())
            r.fail("gpu",
                   "must be an object {usd_per_hour, prefill_tokens_per_second, decode_tokens_per_second}");
        for (const auto &[key, value] : g.items())
            if (!gpuFields().count(key))
                r.fail("gpu." + key, "is not a gpu field (known: basis, decode_tokens_per_second, "
                                     "prefill_tokens_per_second, usd_per_hour)");
        p.gpuUsdPerHour = r.number(g, "usd_per_hour", "gpu.usd_per_hour");
        p.prefillTokensPerSecond =
            r.number(g, "prefill_tokens_per_second", "gpu.prefill_tokens_per_second", true);
        p.decodeTokensPerSecond =
            r.number(g, "decode_tokens_per_second", "gpu.decode_tokens_per_second", true);
        p.basis = "projected";
        if (g.contains("basis")) {
            if (!g.at("basis").is_string() || (g.at("basis").get<std::string>() != "projected" &&
                                               g.at("basis").get<std::string>() != "measured"))
                r.fail("gpu.basis", "must be \"projected\" or \"measured\", got " + g.at("basis").dump());
            p.basis = g.at("basis").get<std::string>();
        }
        // USD per hour over tokens per hour, per million tokens
        pr.inputPerMillion = p.gpuUsdPerHour / (p.prefillTokensPerSecond * 3600.0) * 1e6;
        pr.outputPerMillion = p.gpuUsdPerHour / (p.decodeTokensPerSecond * 3600.0) * 1e6;
    } else {
        pr.inputPerMillion = r.number("input");
        pr.outputPerMillion = r.number("output");
    }
    pr.cachedInputPerMillion = r.number("cached_input");
    if (r.has("cache_write"))
        pr.cacheWritePerMillion = r.number("cache_write");
    if (r.has("storage_per_million_tokens_hour"))
        pr.storagePerMillionTokensHour = r.number("storage_per_million_tokens_hour");
    if (r.has("min_cacheable_tokens")) {
        const json &v = j.at("min_cacheable_tokens");
        if (!v.is_number_integer() || v.get<int64_t>() < 0)
            r.fail("min_cacheable_tokens", "must be a whole number >= 0, got " + v.dump());
        pr.minCacheableTokens = v.get<int64_t>();
    }
    return p;
}

std::vector<std::string> ids(const std::vector<PricePreset> &presets)
{
    std::vector<std::string> out;
    for (const PricePreset &p : presets)
        out.push_back(p.id);
    return out;
}

bool isFileSpec(const std::string &spec)
{
    return spec.find('/') != std::string::npos || spec.find('#') != std::string::npos ||
           (spec.size() > 5 && spec.compare(spec.size() - 5, 5, ".json") == 0);
}

std::string money(double usd)
{
    return fmt::format("{:.6f}", usd);
}

} // namespace

const std::string &builtinPricesJson()
{
    static const std::string text = detail::builtinPricesJsonText(); // constant data, not state
    return text;
}

std::vector<PricePreset> builtinPricePresets()
{
    return parsePricePresets(builtinPricesJson(), kBuiltinName);
}

std::vector<PricePreset> parsePricePresets(const std::string &text, const std::string &sourceName)
{
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception &e) { // a parse error, or a number too large for a double (1e999)
        throw Error(ErrorCode::Format, sourceName + ": not JSON: " + e.what());
    }
    std::vector<PricePreset> out;
    if (j.is_object() && j.contains("schema") &&
        (!j.at("schema").is_string() || j.at("schema").get<std::string>() != "kvwb-prices/1"))
        throw Error(ErrorCode::Config, sourceName + ": field 'schema' is " + j.at("schema").dump() +
                                           "; this kvwb reads kvwb-prices/1");
    if (j.is_object() && j.contains("presets")) {
        const json &list = j.at("presets");
        if (!list.is_array())
            throw Error(ErrorCode::Config, sourceName + ": field 'presets' must be an array of presets");
        for (size_t i = 0; i < list.size(); ++i)
            out.push_back(readPreset(list[i], sourceName, i));
    } else if (j.is_object()) {
        out.push_back(readPreset(j, sourceName, 0)); // one preset on its own
    } else {
        throw Error(ErrorCode::Config,
                    sourceName + ": expected an object with 'presets' (an array) or one preset object");
    }
    std::set<std::string> seen;
    for (const PricePreset &p : out)
        if (!seen.insert(p.id).second)
            throw Error(ErrorCode::Config, sourceName + ": preset id '" + p.id + "' appears twice");
    return out;
}

std::vector<PricePreset> loadPricePresets(const fs::path &path)
{
    return parsePricePresets(text::readWholeFile(path), path.string());
}

const PricePreset &findPricePreset(const std::vector<PricePreset> &presets, const std::string &id)
{
    for (const PricePreset &p : presets)
        if (p.id == id)
            return p;
    throw Error(ErrorCode::InvalidArgument,
                "unknown price preset '" + id + "' (known: " + text::join(ids(presets), ", ") + ")");
}

PricePreset resolvePricePreset(const std::string &spec)
{
    if (!isFileSpec(spec)) {
        const std::vector<PricePreset> builtin = builtinPricePresets();
        for (const PricePreset &p : builtin)
            if (p.id == spec)
                return p;
        throw Error(ErrorCode::InvalidArgument,
                    "unknown price preset '" + spec + "' (known: " + text::join(ids(builtin), ", ") +
                        "; a file of presets needs a '/' in its path or the .json suffix)");
    }
    const size_t hash = spec.rfind('#');
    const std::string file = hash == std::string::npos ? spec : spec.substr(0, hash);
    const std::vector<PricePreset> presets = loadPricePresets(file);
    if (hash != std::string::npos) {
        const std::string id = spec.substr(hash + 1);
        for (const PricePreset &p : presets)
            if (p.id == id)
                return p;
        throw Error(ErrorCode::InvalidArgument, file + ": no price preset '" + id +
                                                    "' (it holds: " + text::join(ids(presets), ", ") + ")");
    }
    if (presets.size() != 1)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{} holds {} price presets ({}): pick one with {}#ID", file, presets.size(),
                                text::join(ids(presets), ", "), file));
    return presets.front();
}

std::vector<PricePreset> resolvePricePresets(const std::string &specs)
{
    std::vector<PricePreset> out;
    size_t start = 0;
    while (start <= specs.size()) {
        size_t end = specs.find(',', start);
        if (end == std::string::npos)
            end = specs.size();
        std::string spec = specs.substr(start, end - start);
        spec.erase(0, spec.find_first_not_of(" \t"));
        spec.erase(spec.find_last_not_of(" \t") + 1);
        if (!spec.empty())
            out.push_back(resolvePricePreset(spec));
        start = end + 1;
    }
    if (out.empty())
        return builtinPricePresets();
    return out;
}

std::vector<PriceComparisonRow> comparePrices(const std::vector<LedgerRow> &rows,
                                              const std::vector<PricePreset> &presets)
{
    std::vector<PriceComparisonRow> out;
    out.reserve(presets.size());
    for (const PricePreset &p : presets) {
        const LedgerSummary s = summarize(rows, p.prices);
        PriceComparisonRow c;
        c.preset = p.id;
        c.provider = p.provider;
        c.model = p.model;
        c.costUsd = s.costUsd;
        c.costUsdNoCache = s.costUsdNoCache;
        c.savingPercent = s.costUsdNoCache > 0 ? 100.0 * (1.0 - s.costUsd / s.costUsdNoCache) : 0.0;
        c.cost = s.cost;
        out.push_back(std::move(c));
    }
    return out;
}

std::string priceComparisonMarkdown(const std::vector<PriceComparisonRow> &rows)
{
    std::string out =
        "| preset | provider | model | cost $ | cost without cache $ | saving % | input $ | cached "
        "input $ | cache write $ | output $ | storage $ |\n"
        "|:--|:--|:--|--:|--:|--:|--:|--:|--:|--:|--:|\n";
    for (const PriceComparisonRow &r : rows)
        out += fmt::format("| {} | {} | {} | {} | {} | {:.1f} | {} | {} | {} | {} | {} |\n", r.preset,
                           r.provider, r.model, money(r.costUsd), money(r.costUsdNoCache), r.savingPercent,
                           money(r.cost.inputUsd), money(r.cost.cachedInputUsd), money(r.cost.cacheWriteUsd),
                           money(r.cost.outputUsd), money(r.cost.storageUsd));
    return out;
}

std::string priceComparisonJson(const std::vector<PriceComparisonRow> &rows)
{
    OrderedJson out = OrderedJson::array();
    for (const PriceComparisonRow &r : rows)
        out.push_back({{"preset", r.preset},
                       {"provider", r.provider},
                       {"model", r.model},
                       {"cost_usd", r.costUsd},
                       {"cost_usd_no_cache", r.costUsdNoCache},
                       {"saving_percent", r.savingPercent},
                       {"cost", costBreakdownJson(r.cost)}});
    return out.dump(2, ' ', false, json::error_handler_t::replace);
}

std::string pricePresetsMarkdown(const std::vector<PricePreset> &presets)
{
    std::string out =
        "| preset | provider | model | input | cached input | cache write | output | storage /h | "
        "min prefix | as of |\n"
        "|:--|:--|:--|--:|--:|--:|--:|--:|--:|:--|\n";
    for (const PricePreset &p : presets) {
        const Prices &pr = p.prices;
        std::string model = p.model;
        if (!p.basis.empty())
            model += fmt::format(" ({}: ${:g}/GPU-hour, {:g} prefill / {:g} decode tok/s)", p.basis,
                                 p.gpuUsdPerHour, p.prefillTokensPerSecond, p.decodeTokensPerSecond);
        out +=
            fmt::format("| {} | {} | {} | {:.4g} | {:.4g} | {:.4g} | {:.4g} | {:g} | {} | {} |\n", p.id,
                        p.provider, model, pr.inputPerMillion, pr.cachedInputPerMillion, pr.cacheWrite(),
                        pr.outputPerMillion, pr.storagePerMillionTokensHour, pr.minCacheableTokens, p.asOf);
    }
    return out;
}

std::string pricePresetsJson(const std::vector<PricePreset> &presets)
{
    OrderedJson list = OrderedJson::array();
    for (const PricePreset &p : presets) {
        const Prices &pr = p.prices;
        OrderedJson j = {
            {"id", p.id}, {"provider", p.provider}, {"model", p.model}, {"currency", p.currency}};
        if (p.basis.empty()) {
            j["input"] = pr.inputPerMillion;
        } else {
            // input and output follow from the GPU-hour: shown under "derived", recomputed on read
            j["gpu"] = {{"usd_per_hour", p.gpuUsdPerHour},
                        {"prefill_tokens_per_second", p.prefillTokensPerSecond},
                        {"decode_tokens_per_second", p.decodeTokensPerSecond},
                        {"basis", p.basis}};
            j["derived"] = {{"input", pr.inputPerMillion}, {"output", pr.outputPerMillion}};
        }
        j["cached_input"] = pr.cachedInputPerMillion;
        j["cache_write"] = pr.cacheWrite();
        if (p.basis.empty())
            j["output"] = pr.outputPerMillion;
        j["storage_per_million_tokens_hour"] = pr.storagePerMillionTokensHour;
        j["min_cacheable_tokens"] = pr.minCacheableTokens;
        j["source"] = p.source;
        j["as_of"] = p.asOf;
        j["notes"] = p.notes;
        list.push_back(std::move(j));
    }
    return OrderedJson{{"schema", "kvwb-prices/1"}, {"presets", list}}.dump(2, ' ', false,
                                                                            json::error_handler_t::replace);
}

} // namespace kvwb::core
