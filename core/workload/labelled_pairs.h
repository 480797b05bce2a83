// Labelled question pairs from a user's own logs or a public paraphrase set, for training and
// judging semantic-cache embedders (`kvwb train-embedder --pairs FILE`):
// - TSV without a header: text<TAB>text<TAB>label, one pair a line, no quoting (a '"' is text);
// - TSV with a header naming the columns: question1/question2/is_duplicate (Quora's file, whose
//   fields may be quoted), sentence1/sentence2/label (GLUE), "#1 String"/"#2 String"/Quality (MRPC);
// - JSONL (a .jsonl file, or one whose first character is '{'): an object a line with the texts
//   under question1|sentence1|text1|a and question2|sentence2|text2|b and the label under
//   label|is_duplicate|duplicate (0/1, true/false).
// A label is 0 or 1. Malformed lines are skipped with a warning naming file:line; an empty text,
// a pair of one text twice (the exact tier's, not a paraphrase) likewise.
//
// The validation split keeps every text on one side: pairs that share a text (case and spacing
// folded) are grouped, and whole groups are drawn for validation, seeded, so no validation question
// was seen in training.
//
// Thread-safety: pure functions.
#pragma once

#include "core/util/warning_list.h"
#include "core/workload/paraphrase_pairs.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

struct LabelledPairsFile
{
    std::vector<LabelledPair> pairs; // kind "labelled"
    WarningList warnings;
    size_t lines = 0;      // records seen (a header excluded)
    std::string format;    // "tsv", "tsv-header", "quora-tsv", "jsonl"
    size_t duplicates = 0; // pairs labelled 1
};

// Error(Io) naming the path when unreadable; Error(Format) naming file:line when a header names no
// usable columns, or when no pair could be read.
LabelledPairsFile parseLabelledPairs(std::string_view text, const std::string &sourceName, bool jsonl);
LabelledPairsFile readLabelledPairs(const std::filesystem::path &path);

struct PairSplit
{
    std::vector<LabelledPair> train, validation;
};
// About share of the pairs (whole groups of pairs sharing a text) go to validation; share in [0, 1).
// Error(InvalidArgument) for a share outside it.
PairSplit splitPairsByText(const std::vector<LabelledPair> &pairs, double share, uint64_t seed);

// One point of a precision/recall curve: a similarity threshold and what serving every pair at or
// above it gives.
struct PrPoint
{
    double threshold = 0;
    double precision = 1;
    double recall = 0;
    size_t served = 0;
};
// The curve at every distinct similarity, highest first, thinned to at most maxPoints (the
// extremes kept). A NaN similarity never passes a threshold (it is ranked below every number).
// Error(InvalidArgument) when the sizes differ.
std::vector<PrPoint> precisionRecallCurve(const std::vector<LabelledPair> &pairs,
                                          const std::vector<double> &similarity, size_t maxPoints = 64);
// The area under the precision/recall curve by average precision (the precision at each duplicate,
// averaged over the duplicates); 0 without duplicates.
double averagePrecision(const std::vector<LabelledPair> &pairs, const std::vector<double> &similarity);
// The lowest threshold whose precision on the pairs is at least target, with its recall; precision
// 1 / recall 0 at threshold +inf when none.
PrPoint thresholdForPrecision(const std::vector<LabelledPair> &pairs, const std::vector<double> &similarity,
                              double target);

} // namespace kvwb::core
