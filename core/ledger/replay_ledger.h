// The per-request ledger of a workload replay through cache tiers, its aggregates, and its CSV
// form. Plain values; the replay engine (gpu/replay/replay.h) fills the rows.
//
// Thread-safety: pure functions and values.
#pragma once

#include "core/cache/cache_tier.h"
#include "core/metrics/metric_table.h"
#include "core/model/kv_types.h"
#include "core/util/enum_names.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

struct LedgerRow
{
    int64_t requestId = 0;
    int64_t arrivalMs = 0; // workload time
    std::string tenant;
    ModelRole model = ModelRole::A; // "a" or "b" in files
    std::string intent;             // the request's intent label ("" unknown)
    TierKind answeredBy = TierKind::None;
    // Per tier consulted: hit (1) or miss (0); absent when that tier is not in the stack.
    std::map<TierKind, bool> tierHits;
    std::string cachedIntent; // response hits: the intent of the request that produced the entry
    int64_t cachedRequestId = -1;
    double similarity = -1; // semantic tier: best similarity seen (-1 when not consulted)
    // A response hit whose cached intent differs from the request's (both known). Unknown intents
    // never count as false hits.
    bool falseHit = false;
    int promptTokens = 0;
    int tokensReused = 0;   // prompt tokens not computed (prefix/cross hits; all of them for response hits)
    int tokensComputed = 0; // prompt tokens prefilled + generated tokens computed
    int generatedTokens = 0;
    double ttftMs = 0;   // measured: lookup + model work to the first token
    double totalMs = 0;  // measured: lookup + whole response
    double lookupMs = 0; // time spent in the tiers (embedding, index, tree), included above
    // Cross-model hits: the quality gate's decision.
    GateDecision gate = GateDecision::None;
    double gateValue = 0;
    // Shadow verification (a sample of hits re-run from scratch): -1 when not verified.
    double shadowKl = -1;
    int shadowExact = -1; // 1 when the hit's output equals the from-scratch output
    // Knowledge tier (empty / None / -1 when not consulted): the node recall proposed and
    // verification judged, its verdict, what happened to its KV module, and whether a user profile
    // was rendered.
    std::string knowledgeNode;
    KnowledgeVerdict knowledgeVerdict = KnowledgeVerdict::None;
    ModuleFate knowledgeModule = ModuleFate::None;
    int profileApplied = -1;
    // A shared store under the tiers (docs/fleet.md): the worst outcome of this request's store calls.
    StoreNote store = StoreNote::None;
    // A fleet replay: the worker that served the request (-1: a single process) and the routing
    // decision, e.g. "prefix-hash:3fa2" or "least-loaded:1210".
    int worker = -1;
    std::string route;
    // The semantic tier under an error bound (--error-bound).
    SemanticDecision semanticDecision = SemanticDecision::None;
    // The semantic tier's guards (core/cache/semantic_guards.h): the guard that kept a candidate above
    // the threshold from serving, and whether that candidate's intent was the request's (1: a hit
    // lost), another (0: a false hit prevented) or unknown (-1).
    SemanticGuard semanticGuard = SemanticGuard::None;
    int guardedSameIntent = -1;
    // The semantic tier's verifier (core/cache/semantic_verifier.h): its verdict on the candidate (a
    // pass beside a guard: the guard was overruled), its score (-1: none), its time, and whether the
    // candidate's intent was the request's (1), another (0) or unknown (-1).
    VerifierVerdict verifier = VerifierVerdict::None;
    double verifierScore = -1;
    double verifierMs = 0;
    int verifiedSameIntent = -1;
    // A request the replay did not serve holds only the request's identity; the summary counts it
    // in notServed and nowhere else.
    NotServed notServed = NotServed::No;
    // What was asked and what was answered, as the ledger keeps them (ledgerText): the request's
    // question (its prompt's end when the workload has no question field) and the answer it got -
    // for a response hit, the cached answer that was served. Empty in ledgers written before these
    // columns existed; the answer is empty for a request not served.
    std::string question;
    std::string answer;
};

// The most bytes of a question or an answer a ledger keeps.
inline constexpr size_t kLedgerTextBytes = 2048;
// text as a ledger keeps it: valid UTF-8 (each invalid byte becomes U+FFFD, so a decoded answer cut
// inside a character stays readable) and at most kLedgerTextBytes bytes, cut at a character
// boundary with "..." (U+2026) marking the cut - at the end, or at the start when keepEnd (a prompt,
// whose question is at its end).
std::string ledgerText(std::string_view text, bool keepEnd = false);

struct TierAggregate
{
    int64_t requests = 0; // requests that reached (consulted) this tier
    int64_t hits = 0;
    int64_t falseHits = 0;
    int64_t tokensReused = 0;
    int64_t tokensComputed = 0;
    double ttftMsP50 = 0, ttftMsP95 = 0, ttftMsP99 = 0; // over requests this tier answered
    // Knowledge tier: requests whose candidate verification refused, and modules recomputed.
    int64_t rejected = 0;
    int64_t modulesRecomputed = 0;
};

// What tokens cost, in USD per million tokens (docs/replay.md, "Prices"). A Prices{in, out} bills as
// kvwb always did: computed prompt tokens at `in`, generated tokens at `out`, reused tokens free.
// Presets of hosted providers and a self-hosted GPU projection: core/ledger/prices.h.
struct Prices
{
    double inputPerMillion = 0.15;  // USD per 1M prompt tokens computed
    double outputPerMillion = 0.60; // USD per 1M generated tokens computed
    // USD per 1M prompt tokens reused from a KV tier (prefix, cross, knowledge module): a provider's
    // "cached input" / "cache hit" price.
    double cachedInputPerMillion = 0;
    // USD per 1M computed prompt tokens a KV tier kept (billed instead of inputPerMillion, not on top
    // of it); unset: the input price (no write premium).
    std::optional<double> cacheWritePerMillion = std::nullopt;
    // USD per 1M tokens kept in a cache per hour (a provider's context-cache storage); 0: not billed.
    double storagePerMillionTokensHour = 0;
    // A provider caches prefixes of at least this many tokens: shorter reuse bills at the input price,
    // shorter prompts write nothing. 0: no minimum.
    int64_t minCacheableTokens = 0;
    // The preset these prices came from ("" when given by hand, e.g. --price-in/--price-out).
    std::string preset = {};

    double cacheWrite() const { return cacheWritePerMillion.value_or(inputPerMillion); }
};

// Where a summary's costUsd came from: tokens per price class and what each class cost.
struct CostBreakdown
{
    int64_t inputTokens = 0;       // computed prompt tokens billed at the input price
    int64_t cachedInputTokens = 0; // reused prompt tokens billed at the cached-input price
    int64_t cacheWriteTokens = 0;  // computed prompt tokens a KV tier kept, at the cache-write price
    int64_t outputTokens = 0;      // generated tokens computed
    double storageTokenHours = 0;  // tokens written x hours from their request to the ledger's last arrival
    double inputUsd = 0, cachedInputUsd = 0, cacheWriteUsd = 0, outputUsd = 0, storageUsd = 0;
};
// As JSON, in this order: input_tokens, cached_input_tokens, cache_write_tokens, output_tokens,
// storage_token_hours, input_usd, cached_input_usd, cache_write_usd, output_usd, storage_usd.
nlohmann::ordered_json costBreakdownJson(const CostBreakdown &c);

struct LedgerSummary
{
    int64_t requests = 0;  // requests served (every measure below is over these)
    int64_t notServed = 0; // rows marked not served (LedgerRow::notServed), counted only here
    std::map<std::string, int64_t> notServedBy; // ... by reason ("context", "worker")
    int64_t hits = 0;                           // answered by any tier
    int64_t falseHits = 0;
    // Hits of approximate reuse (semantic, cross-model, knowledge): answers that are not the
    // model's own for this prompt. None is cached again, so these are all the answers descending
    // from approximate hits.
    int64_t approximateHits = 0;
    // Semantic candidates above the threshold the guards kept from serving, by guard name, and of
    // those with both intents known: a false hit prevented (another intent) or a hit lost (the same).
    int64_t guarded = 0, guardPrevented = 0, guardLost = 0;
    std::map<std::string, int64_t> guardedBy;
    int64_t guardOverruled = 0; // guarded candidates the verifier passed (served)
    // Under an error bound (--error-bound): the semantic hits it let serve and the false ones among
    // them, to set against the bound it states.
    int64_t boundServed = 0, boundFalse = 0;
    // The verifier: candidates it judged, passed, rejected and failed on (rejected too); of its
    // rejections with both intents known, false hits prevented and hits lost; its mean time.
    int64_t verified = 0, verifierPassed = 0, verifierRejected = 0, verifierErrors = 0;
    int64_t verifierPrevented = 0, verifierLost = 0;
    double verifierMeanMs = 0;
    double hitRate = 0;      // hits / requests
    double tokenHitRate = 0; // tokens reused / prompt tokens
    double falseHitRate = 0; // false hits / hits of a response or a knowledge node
    int64_t tokensReused = 0;
    int64_t tokensComputed = 0;
    double ttftMsP50 = 0, ttftMsP95 = 0, ttftMsP99 = 0;
    double totalMsP50 = 0, totalMsP95 = 0, totalMsP99 = 0;
    double costUsd = 0;                      // the ledger at the prices, caches included (cost below)
    double costUsdNoCache = 0;               // every prompt and generated token computed at input/output
    CostBreakdown cost;                      // costUsd by price class
    Prices prices;                           // what summarize billed at
    std::map<TierKind, TierAggregate> tiers; // per tier in the stack, plus TierKind::None (misses)
};

// Per tier: requests = rows whose tierHits holds it; hits, falseHits, tokens and TTFT over the rows
// it answered (for None: requests = the misses, hits = 0). falseHits count response hits only.
// Costs: response hits cost 0; other rows bill reused prompt tokens at the cached-input price (input
// when fewer than minCacheableTokens), computed prompt tokens at the cache-write price when a KV tier
// kept them (the row consulted the prefix or cross tier and was not a knowledge hit, and the prompt
// has minCacheableTokens), else at the input price, generated tokens at the output price, and
// written tokens' storage until the last arrival. Definitions: docs/replay.md, "Summary" and "Prices".
LedgerSummary summarize(const std::vector<LedgerRow> &rows, const Prices &prices = {});

// The summary as one JSON object (the form `kvwb replay --json` and reports print): requests, hits,
// false_hits, hit_rate, token_hit_rate, false_hit_rate, tokens_reused, tokens_computed,
// ttft_ms_p50/p95/p99, total_ms_p50/p95/p99, cost_usd, cost_usd_no_cache, "prices" (preset, the
// prices, and cost: tokens and USD per price class, docs/replay.md "Prices"), and "tiers": per tier
// name {requests, hits, false_hits, tokens_reused, tokens_computed, ttft_ms_p50/p95/p99}, the
// knowledge tier's also rejected and modules_recomputed.
std::string ledgerSummaryJson(const LedgerSummary &summary);

// CSV with a header row (RFC 4180 quoting); columns documented in docs/replay.md. tierHits become
// one column per tier (1, 0, empty); Error(InvalidArgument) for a row whose tierHits holds None.
std::string ledgerToCsv(const std::vector<LedgerRow> &rows);
// Written to path + ".tmp" then renamed; Error(Io) naming the path.
void writeLedgerCsv(const std::filesystem::path &path, const std::vector<LedgerRow> &rows);
// Parses ledgerToCsv's output back (round trip); Error(Format) naming the line and column.
std::vector<LedgerRow> ledgerFromCsv(const std::string &csv, const std::string &sourceName);

// The ledger's columns in file order (the CSV's and the experiment file's; docs/replay.md, "Ledger"),
// for the stores that write them: a text column is a string per row, the others a number per row.
struct LedgerColumn
{
    const char *name;
    bool text;
    bool optional; // added after ledgers were first written: a file without it reads as not consulted
};
const std::vector<LedgerColumn> &ledgerColumns();
// Column `column`'s cell as text (a text column) or as a number (the others), and back: "" when the
// value fits, else what it must be ("an integer", "pass, fail or empty", ...).
std::string ledgerCellText(const LedgerRow &row, size_t column);
std::string setLedgerCellText(LedgerRow &row, size_t column, const std::string &text);
double ledgerCellNumber(const LedgerRow &row, size_t column);
std::string setLedgerCellNumber(LedgerRow &row, size_t column, double value);
// What no stored form can hold: a tierHits holding None, an int64 field beyond +-2^53 (numbers are
// stored as float64). Error(InvalidArgument) naming `where` and the row.
void checkLedgerRows(const std::string &where, const std::vector<LedgerRow> &rows);

} // namespace kvwb::core
