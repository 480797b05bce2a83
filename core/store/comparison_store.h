// Comparison samples: one prompt answered three ways - by A, by B from its own prefill ("scratch")
// and by B from A's converted cache ("transfer") - with each generated token's text and
// probability, the per-token KL of the transfer path to scratch, the first divergence, the
// timings and the quality gate's decision. `kvwb compare --save-samples NAME` and the workbench's
// Compare panel store them in an experiment file's /comparisons/<name> group; reports show them
// (layout in docs/experiment-format.md).
//
// Same saving rules as core/store/converter_store.h: validated, built unlinked and linked in place (a
// reader sees the old list or the complete new one), names [A-Za-z0-9_.-]+ not starting with '.',
// the capture's writer lock taken. Thread-safety: none (HDF5 belongs to the engine thread).
// Errors: core::Error naming the file and the sample or field at fault (Io, Format,
// InvalidArgument for a bad or unknown name or a sample whose per-token vectors disagree in length).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::core {

// One model's continuation of the prompt.
struct ComparisonPath
{
    std::vector<int> ids;            // generated token ids
    std::vector<std::string> pieces; // each id's text as it appears in the output (same length as ids)
    std::vector<float> logprobs;     // log p of each id under the model that produced it (same length)
    // Transfer path only (else empty): KL(scratch || transfer) in nats at each position, teacher-forced
    // on the scratch continuation (position j compares both next-token distributions after scratch's
    // tokens 0..j-1). Its length is the scratch continuation's.
    std::vector<double> kl;
    std::string text;         // decoded continuation
    int promptTokens = 0;     // prompt length in this model's tokens
    int reusedTokens = 0;     // prompt positions taken from a (converted) cache instead of computed
    double ttftMs = 0;        // request start to first token, this path's whole cost
    double decodeTokPerS = 0; // tokens after the first, per second
};

struct ComparisonSample
{
    std::string prompt;
    std::string converter; // the converter record used for the transfer path
    ComparisonPath a, scratch, transfer;
    int firstDivergence = -1; // first index where scratch and transfer tokens differ; -1 identical
    double meanKl = 0;        // mean of transfer.kl
    double top1 = 0;          // share of positions whose argmaxes agree (teacher-forced)
    double klNoPrefix = 0;    // the floor: B given no prefix at all, same comparison
    double rougeL = 0;        // transfer text vs scratch text
    double sourcePrefillMs = 0;
    double convertMs = 0;
    std::string gateSignal; // "tail_kl" | "kv_cos" | "nll"
    double gateValue = 0;
    double gateThreshold = 0;
    bool gatePassed = false;
    std::string createdUtc; // ISO 8601
    // The prompt file's expected answer (`kvwb corpus context`), "" when it gave none; whether each
    // path gives it is core::answerFound of the path's text.
    std::string expectedAnswer;
};

// Whether each path's text gives the sample's expected answer (core::answerFound); nullopt when it
// has none. Derived on demand, never stored.
struct AnswerHits
{
    bool scratch = false, transfer = false, a = false;
};
std::optional<AnswerHits> answerHits(const ComparisonSample &sample);

// One sample as a JSON object with the fields the store keeps (snake_case, as docs/experiment-format.md
// lists them); bytes that are not valid UTF-8 (part of a character in a piece) become U+FFFD, so
// any JSON reader takes it. Reports export samples through it.
std::string comparisonSampleJson(const ComparisonSample &sample);

// Error(InvalidArgument) naming the file and the name when saveComparisons would refuse the name
// (so a long comparison run can check it before it starts).
void checkComparisonName(const std::filesystem::path &experiment, const std::string &name);
// Writes (or replaces) /comparisons/<name> with these samples, in order.
void saveComparisons(const std::filesystem::path &experiment, const std::string &name,
                     const std::vector<ComparisonSample> &samples);
// Names under /comparisons, sorted; empty when there are none.
std::vector<std::string> listComparisons(const std::filesystem::path &experiment);
// Error(InvalidArgument) naming the file and the name when absent.
std::vector<ComparisonSample> loadComparisons(const std::filesystem::path &experiment,
                                              const std::string &name);

} // namespace kvwb::core
