// Price presets: what a request costs at hosted providers' list prices (input, cached input, cache
// write, output, cache storage per hour) or on a self-hosted GPU priced by the hour, and the same
// replay ledger costed under several of them. The built-in presets are resources/prices.json,
// compiled into kvwb_core at configure time; a user file in the same schema (docs/replay.md,
// "Prices") adds or overrides presets.
//
// Thread-safety: pure functions and values; nothing is cached between calls.
#pragma once

#include "core/ledger/replay_ledger.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kvwb::core {

// The largest price (USD per million tokens), GPU hourly rate or throughput a price file may give:
// the command line's limit for --price-in/--price-out too.
inline constexpr double kMaxPriceValue = 1e9;

struct PricePreset
{
    std::string id;       // e.g. "openai-gpt-4o-mini"; [A-Za-z0-9_.-]+
    std::string provider; // e.g. "OpenAI", "self-hosted"
    std::string model;
    std::string currency = "USD"; // the only currency kvwb bills in
    Prices prices;                // per million tokens; prices.preset == id
    std::string source;           // the page the prices were read from (or the projection's basis)
    std::string asOf;             // the date they were read, YYYY-MM-DD
    std::string notes;
    // Self-hosted presets ("gpu" in the file): the basis input and output prices were derived from:
    // input = usdPerHour / (prefill tok/s x 3600) x 1e6, output likewise from decode tok/s. All 0 for
    // a list-price preset.
    double gpuUsdPerHour = 0;
    double prefillTokensPerSecond = 0;
    double decodeTokensPerSecond = 0;
    std::string basis; // "projected" | "measured" for a GPU preset; "" for a list price
};

// The text of resources/prices.json as it was when kvwb was configured.
const std::string &builtinPricesJson();
// The built-in presets, in file order (parsed on every call; a few microseconds).
std::vector<PricePreset> builtinPricePresets();

// Parses the presets schema ({"presets": [...]}, or one preset object on its own). Error(Format)
// for text that is not JSON; Error(Config) naming sourceName, the preset (index and id) and the
// field for a missing or mistyped field, a negative price or throughput, a currency other than USD,
// a duplicate id.
std::vector<PricePreset> parsePricePresets(const std::string &json, const std::string &sourceName);
// Reads and parses a file; Error(Io) naming the path when it cannot be read.
std::vector<PricePreset> loadPricePresets(const std::filesystem::path &path);

// The preset with this id; Error(InvalidArgument) "unknown price preset 'x' (known: a, b, ...)".
const PricePreset &findPricePreset(const std::vector<PricePreset> &presets, const std::string &id);

// What `--prices SPEC` means: a built-in preset id, or a file (SPEC containing '/' or ending in
// ".json"): its only preset, or with "FILE#ID" the preset ID of it. Errors: an unknown id lists the
// known ones; a file of several presets without #ID lists its ids.
PricePreset resolvePricePreset(const std::string &spec);
// A comma-separated list of such specs ("a,b,./mine.json#gpu"); empty: every built-in preset.
std::vector<PricePreset> resolvePricePresets(const std::string &specs);

// One ledger costed under one preset.
struct PriceComparisonRow
{
    std::string preset, provider, model;
    double costUsd = 0;        // with the caches of the ledger (summarize's costUsd)
    double costUsdNoCache = 0; // every token computed
    double savingPercent = 0;  // 100 x (1 - cost / no cache); 0 when the no-cache cost is 0
    CostBreakdown cost;
};

// The same ledger rows under each preset, in the given order.
std::vector<PriceComparisonRow> comparePrices(const std::vector<LedgerRow> &rows,
                                              const std::vector<PricePreset> &presets);
// The comparison as a Markdown table: preset, provider, model, cost with cache, without, saving %.
std::string priceComparisonMarkdown(const std::vector<PriceComparisonRow> &rows);
// As JSON: an array of {preset, provider, model, cost_usd, cost_usd_no_cache, saving_percent,
// cost: {input_usd, cached_input_usd, cache_write_usd, output_usd, storage_usd}}.
std::string priceComparisonJson(const std::vector<PriceComparisonRow> &rows);

// The presets as a Markdown table (id, provider, model, input, cached input, cache write, output,
// storage/h, minimum prefix, as of) and as JSON in the file's schema (derived prices included).
std::string pricePresetsMarkdown(const std::vector<PricePreset> &presets);
std::string pricePresetsJson(const std::vector<PricePreset> &presets);

} // namespace kvwb::core
