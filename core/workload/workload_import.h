// Importing public datasets as replay workloads (core/workload/workload.h's WorkloadRequest):
// - ShareGPT-style conversation JSON: a JSON array of {"id", "conversations": [{"from": "human"|
//   "gpt"|"system", "value": "..."}]} ("user"/"assistant" also accepted); every human turn becomes
//   a request whose prompt is the whole conversation so far (system, earlier turns and answers,
//   this question), so the turns of one chat share growing prefixes; the tenant is "sharegpt", one
//   user per conversation, arrivals spaced by a fixed gap.
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
