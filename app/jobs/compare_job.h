// Compare job set-up shared by `kvwb compare` and the window's Compare panel (engine thread): one
// prompt answered by A, by B from scratch and by B from A's converted cache (gpu/transfer/compare.h),
// the sample labelled with its prompt, converter and time, and samples stored in the experiment
// file's /comparisons/<name>; a prompt set compared with the other converters (--versus, the
// baselines) on every prompt and summarised with paired bootstrap intervals, once for both.
//
// Threading: the engine thread (or a subcommand's main thread), which owns the models.
#pragma once

#include "core/store/comparison_store.h"
#include "core/tokenize/tokenizer.h"
#include "gpu/model/model.h"
#include "gpu/transfer/compare.h"
#include "gpu/transfer/cross_tokenizer.h"
#include "gpu/transfer/transfer.h"

#include "core/metrics/bootstrap.h"
#include "core/metrics/compare_summary.h"
#include "core/settings/compare_settings.h"
#include "core/store/converter_store.h"

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::app::jobs {

// The loaded pair and the converter between them; all must outlive the calls.
struct ComparePair
{
    const gpu::Model &a;
    const core::Tokenizer &tokenizerA;
    const gpu::Model &b;
    const core::Tokenizer &tokenizerB;
    const gpu::Converter &converter;
    std::string converterName; // /converters/<name> the converter came from
};

// gpu::compareTransfer on the prompt as both models tokenise it (gpu::comparablePair: paired token
// by token when their tokenizers differ), the sample labelled with prompt, converter name and the
// current UTC time. A cancelled outcome is returned as it is.
gpu::CompareOutcome compareOne(const ComparePair &pair, const std::string &prompt,
                               const gpu::TokenPairing &tokens, const gpu::CompareOptions &options);

// Stores samples as /comparisons/<name>: after the ones already there when `append`, else in
// their place.
void storeComparisons(const std::filesystem::path &experiment, const std::string &name,
                      const std::vector<core::ComparisonSample> &samples, bool append);

// One compared prompt of a set.
struct ComparedPrompt
{
    size_t index = 0; // in the set's texts
    gpu::TokenPairing tokens;
    gpu::CompareOutcome outcome; // its sample labelled (compareOne)
    double rougeLA = 0;          // ROUGE-L of A's answer against B's from scratch
};

// Another converter run on the same prompts: "versus" (a second fitted converter), "raw_source_kv"
// or "random_map" (the baselines), with its measurement per compared prompt.
struct CompareOther
{
    std::string key;
    core::ConverterRecord record;
    std::vector<double> kl, top1, rougeL; // [compared prompt]
};

struct CompareSetOptions
{
    gpu::CompareOptions compare; // max tokens, gate; its cancel stops inside a prompt
    core::AlignPolicy alignPolicy = core::kDefaultAlignPolicy;
    bool baselines = false;                      // the raw source KV (when widths match) and a random map
    std::optional<core::ConverterRecord> versus; // a second converter on the same prompts
    int matchTokens = 4; // the gate's measured precision: first tokens that must match scratch's
    // The texts' expected answers (a prompt file's "answer"; "" where none), by index; empty: none.
    // Each compared sample keeps its own (ComparisonSample::expectedAnswer, core::answerHits).
    std::vector<std::string> answers;
};

// The options `settings` give (max tokens, the gate, the token pairing policy, baselines); the
// --versus converter is the caller's to load.
CompareSetOptions compareSetOptions(const core::CompareSettings &settings);
// When the first n of record's held-out prompts are compared against `versus`: the warning that
// some of them were versus' fitting or validation prompts (the comparison favours it), or "".
std::string versusOverlapWarning(const core::ConverterRecord &record, const core::ConverterRecord &versus,
                                 size_t n);

struct CompareSetRun
{
    std::vector<ComparedPrompt> prompts; // compared: with every converter's measurement
    std::vector<CompareOther> others;    // versus first, then the baselines
    std::vector<std::string> warnings;   // prompts skipped, a baseline that cannot be built
    bool cancelled = false;
    core::GateSignal gateSignal = core::GateSignal::TailKl; // the options it ran with
    double gateThreshold = 0;
    int matchTokens = 4;
};

// Before each prompt (index, total) and after each compared one (its result, else null): false
// stops the set after the prompt in hand.
using CompareSetProgress = std::function<bool(size_t index, size_t total, const ComparedPrompt *compared)>;

// Every text through `pair` (record: its converter's record, for the baselines' shapes) and the
// others; a prompt that cannot be compared (too short, too long) is skipped with a warning. `warm`:
// whether a comparison already ran in this process (the first one warms up first, so allocations do
// not land on its timings); set on return.
CompareSetRun compareSet(const ComparePair &pair, const core::ConverterRecord &record,
                         const std::vector<std::string> &texts, const CompareSetOptions &options, bool &warm,
                         const CompareSetProgress &progress = {});

// Means over the compared prompts and paired bootstrap 95% intervals (core/metrics/compare_summary.h).
using core::CompareSetSummary;
CompareSetSummary summarizeCompareSet(const CompareSetRun &run);

} // namespace kvwb::app::jobs
