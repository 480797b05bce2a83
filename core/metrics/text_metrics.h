// Scores for comparing generated texts and for relating two measurements: word F1 (SQuAD style),
// ROUGE-L, Pearson and Spearman correlation. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace kvwb::core {

// Lower-cased runs of ASCII letters/digits (bytes >= 0x80 count as letters, so UTF-8 words stay
// whole); everything else separates words.
std::vector<std::string> normalizedWords(const std::string &text);

// Bag-of-words F1 between a candidate and a reference (1 when both are empty).
double wordF1(const std::string &candidate, const std::string &reference);

// ROUGE-L F1 (beta = 1) on normalizedWords: the longest common subsequence's length over the
// candidate's (precision) and the reference's (recall) word counts. 1 when both are empty.
double rougeL(const std::string &candidate, const std::string &reference);
double rougeL(const std::vector<std::string> &candidate, const std::vector<std::string> &reference);

// Whether a generated text gives an expected answer: the answer's first min(words, its length)
// normalizedWords appear in the text's normalizedWords as one contiguous run ("Biscuit." found in
// " Biscuit, of course"; a definition by its first 4 words). An answer with no word is never found.
bool answerFound(const std::string &generated, const std::string &answer, size_t words = 4);

// Correlation of paired samples; NaN with fewer than 2 pairs or a constant side.
double pearson(const std::vector<double> &x, const std::vector<double> &y);
double spearman(const std::vector<double> &x, const std::vector<double> &y); // ties get mean ranks

} // namespace kvwb::core
