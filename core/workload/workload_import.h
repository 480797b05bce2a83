// Importing public datasets as replay workloads (core/workload/workload.h's WorkloadRequest):
// - ShareGPT-style conversation JSON: a JSON array of {"id", "conversations": [{"from": "human"|
//   "gpt"|"system", "value": "..."}]} ("user"/"assistant" also accepted); every human turn becomes
//   a request whose prompt is the whole conversation so far (system, earlier turns and answers,
//   this question), so the turns of one chat share growing prefixes; the tenant is "sharegpt", one
//   user per conversation, arrivals spaced by a fixed gap. Each request records its conversation
//   ("c<index>") and round; options choose the history policy (full, window:N, summary:N), a cap on
//   rounds and the interleaving of conversations.
// - Quora question pairs TSV (id, qid1, qid2, question1, question2, is_duplicate): each pair
//   becomes two requests, question1 then question2; duplicates share an intent ("q<qid1>"), non-
//   duplicates get their own ("q<qid1>", "q<qid2>"), so a semantic hit across a non-duplicate pair
//   is a false hit.
// Malformed records are skipped with warnings naming file:line (TSV) or file:conversation index
// (JSON); the rest is imported. Errors: Error(Io) naming the path when it cannot be read;
// Error(Format) when the input is not JSON / has no Quora header, or nothing could be imported;
// Error(InvalidArgument) for gapMs < 0 or maxTokens < 1. Prompt rendering and fields:
// docs/corpus-and-workload.md, "Imported workloads".
//
// Thread-safety: pure functions.
#pragma once

#include "core/util/warning_list.h"
#include "core/workload/conversation.h"
#include "core/workload/workload.h"

#include <filesystem>
#include <string>
#include <string_view>

namespace kvwb::core {

struct ImportOptions
{
    std::string tenant;   // default "sharegpt" / "quora"
    int64_t gapMs = 1000; // arrival spacing
    int maxTokens = 64;
    size_t limit = 0;         // at most this many requests (0 = all)
    std::string systemPrompt; // prepended as requestPrompt() does (Quora only; "" = none)
    // ShareGPT only (multi-turn, as SGLang's bench_multiturn replays it):
    HistoryPolicy historyPolicy; // how round k's prompt carries rounds 0..k-1 (default: all of them)
    size_t maxRounds = 0;        // at most this many rounds (human turns) per conversation (0 = all)
    // 0: conversation after conversation (all rounds of one, then the next); C > 0: conversations in
    // groups of C whose rounds interleave (round 0 of each, then round 1 of each, ...), as C
    // concurrent clients each waiting for its answer before the next round.
    size_t interleave = 0;
    // Error(Format) naming file, conversation index and turn at the first malformed conversation,
    // instead of skipping it with a warning.
    bool strict = false;
};

struct ImportResult
{
    std::vector<WorkloadRequest> requests;
    WarningList warnings;
    size_t records = 0; // conversations / pairs seen
};

ImportResult parseShareGpt(std::string_view json, const std::string &sourceName,
                           const ImportOptions &options = {});
ImportResult importShareGpt(const std::filesystem::path &path, const ImportOptions &options = {});
ImportResult parseQuoraPairs(std::string_view tsv, const std::string &sourceName,
                             const ImportOptions &options = {});
ImportResult importQuoraPairs(const std::filesystem::path &path, const ImportOptions &options = {});

} // namespace kvwb::core
