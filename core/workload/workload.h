// Synthetic LLM request workloads over WordNet concepts, and their JSONL reader.
//
// WorkloadGenerator draws concepts with Zipf popularity (rank = WordNet popularity rank of
// selectConcepts()), arrivals as a Poisson process, tenants with nested shared system prompts
// (prefix reuse), and the request kinds a cache study needs: exact repeats, paraphrases (same
// intent, another template), synonym swaps (same intent, another lemma) and near misses (a
// co-hyponym asked with the same template: the case where a semantic cache answers wrongly).
// Seeded and reproducible byte-for-byte. readWorkloadJsonl() parses the format back, skipping
// malformed lines with warnings naming file:line and field. Formats: docs/corpus-and-workload.md.
//
// Thread-safety: generate() is const and allocates its own RNG; the WordNet must outlive the
// generator. Parsed requests are plain values.
#pragma once

#include "core/model/kv_types.h"
#include "core/util/warning_list.h"
#include "core/workload/wordnet.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

enum class RequestKind
{
    New,
    ExactRepeat,
    Paraphrase,
    SynonymSwap,
    NearMiss
};
const char *
requestKindName(RequestKind k); // "new", "exact_repeat", "paraphrase", "synonym_swap", "near_miss"
bool parseRequestKind(std::string_view name, RequestKind &out);

struct WorkloadOptions
{
    size_t requests = 10000;
    size_t concepts = 3000;     // top-N concepts by WordNet popularity that Zipf ranks range over
    double zipfS = 1.0;         // P(rank k) ~ 1 / k^s
    double ratePerSecond = 5.0; // Poisson arrival rate, all tenants together
    int tenants = 3;
    int usersPerTenant = 20;
    // Per-request probabilities of each derived kind; the rest are "new". Sum must be <= 1.
    double pRepeat = 0.10;
    double pParaphrase = 0.15;
    double pSynonym = 0.10;
    double pNearMiss = 0.10;
    double fracB = 0.5; // share of requests sent to model "b"
    int maxTokens = 64;
    // One system prompt per entry and tenant, of at least this many words (whole sentences;
    // 0 = no system prompt). The shorter prompts of a tenant are prefixes of the longer ones.
    std::vector<int> systemPromptWords = {10, 60, 250};
    size_t historyWindow = 1000;  // derived kinds pick their base among a tenant's last N requests
    bool hypernymSentence = true; // must match the corpus the models were trained on (answers)
    uint64_t seed = 1;
};

struct SystemPrompt
{
    std::string id;     // "<tenant>-w<words>", e.g. "t0-w60"
    std::string tenant; // "t0"
    std::string text;   // "" for a 0-word prompt
    int words = 0;      // actual word count
};

// The latest arrival time a workload may give (30 days): `replay --clock` waits until each request
// is due, so a t_ms of 1e15 would sleep for 31,000 years. Later lines are skipped with a warning.
inline constexpr int64_t kMaxArrivalMs = int64_t(30) * 24 * 3600 * 1000;

struct WorkloadRequest
{
    int64_t id = 0;                 // line index in the generated file
    int64_t tMs = 0;                // arrival time, ms since the start, non-decreasing
    std::string tenant;             // "t0"
    std::string user;               // "u12" (unique across tenants)
    ModelRole model = ModelRole::A; // "a" or "b" in files
    std::string systemPromptId;
    RequestKind kind = RequestKind::New;
    std::string intent;     // synset id whose answer is correct, e.g. "n02958343"
    std::string templateId; // QuestionTemplate::id (may be empty in hand-written files)
    std::string lemma;      // the lemma the question uses (may be empty)
    int64_t ref = -1;       // id of the request this one was derived from, -1 for "new"
    int maxTokens = 64;
    std::string question; // "What is a car?" (may be empty in hand-written files)
    std::string prompt;   // system prompt + "\n\n" + "Q: {question}\nA:" (exactly what is sent)
    // Multi-turn conversations (core/workload/conversation.h, ShareGPT imports): the conversation
    // this request is a round of ("" = none) and its 0-based round index (-1 = none). In the JSONL
    // only when set, so single-turn files stay as they were.
    std::string conversation;
    int round = -1;
};

struct Workload
{
    std::vector<WorkloadRequest> requests;
    std::vector<SystemPrompt> systemPrompts;
    size_t concepts = 0; // concepts Zipf ranged over (may be fewer than asked)
};

// Whitespace-separated words (' ', '\n', '\t'): the token approximation the generators use.
int wordCount(std::string_view s);

// The full prompt sent to a model: "{system}\n\nQ: {question}\nA:", or "Q: {question}\nA:" when the
// system prompt is empty.
std::string requestPrompt(std::string_view systemPrompt, std::string_view question);

class WorkloadGenerator
{
public:
    // Error(InvalidArgument) for out-of-range options (probabilities, rate, counts).
    WorkloadGenerator(const WordNet &wordnet, WorkloadOptions options);
    Workload generate() const;

private:
    const WordNet &m_wordnet;
    WorkloadOptions m_options;
};

std::string workloadToJsonl(const std::vector<WorkloadRequest> &requests);
void writeWorkloadJsonl(const std::filesystem::path &path, const std::vector<WorkloadRequest> &requests);

struct WorkloadReadResult
{
    std::vector<WorkloadRequest> requests; // the well-formed lines, in file order
    WarningList warnings;                  // "workload.jsonl:17: field 't_ms' must be ..."
    size_t lines = 0;                      // non-empty lines seen
};

// sourceName (usually the file name) prefixes every warning.
WorkloadReadResult parseWorkloadJsonl(std::string_view text, const std::string &sourceName,
                                      size_t maxWarnings = 100);
// Error(Io) naming the path when the file cannot be read.
WorkloadReadResult readWorkloadJsonl(const std::filesystem::path &path, size_t maxWarnings = 100);

} // namespace kvwb::core
