// Paraphrase data for the demo's own sentence embedder, from the same WordNet concepts and question
// templates the demo models and workloads use.
//
// Training triples: an anchor question, a positive (the same concept asked with another training
// template and/or another of its lemmas: paraphrases and synonym swaps) and a hard negative (a
// co-hyponym asked with the anchor's template: the near miss a semantic cache gets wrong, or another
// concept when there is no sibling). Held out from training: the validation-only templates, and
// every holdOutEvery-th concept by popularity rank (rank % holdOutEvery == holdOutEvery - 1),
// which no training triple mentions, as anchor, positive or negative.
//
// Labelled pairs for evaluation, all held out: duplicates (the same concept; at least one side in a
// validation template, or a held-out concept in any template) and non-duplicates (near misses: a
// sibling with the same template; and other concepts).
//
// Thread-safety: free functions over values.
#pragma once

#include "core/util/seeded_random.h"
#include "core/workload/wordnet.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvwb::core {

struct ParaphraseConcept
{
    std::string synset;
    int rank = 0;
    std::vector<std::string> lemmas;
    std::vector<size_t> siblings; // indices of co-hyponyms among the selected concepts
    bool heldOut = false;
};

// The `count` concepts of selectConcepts(), with siblings among them. holdOutEvery 0: none held out.
std::vector<ParaphraseConcept> paraphraseConcepts(const WordNet &wordnet, size_t count, int holdOutEvery);

struct TrainingTriple
{
    std::string anchor, positive, negative;
};

// One triple from the concepts that are not held out, training templates only. Error(InvalidArgument)
// when no concept can make a triple (fewer than two concepts not held out).
TrainingTriple sampleTriple(const std::vector<ParaphraseConcept> &concepts, SeededRandom &rng);

struct LabelledPair
{
    std::string a, b;
    bool duplicate = false;
    std::string kind; // "paraphrase" | "synonym" | "held_out_concept" | "near_miss" | "other_concept"
};

// count pairs (about half duplicates) from held-out wordings and concepts, seeded.
std::vector<LabelledPair> heldOutPairs(const std::vector<ParaphraseConcept> &concepts, size_t count,
                                       uint64_t seed);

// How well similarity separates duplicates from non-duplicates.
struct PairSeparation
{
    double auc = 0;                    // P(sim(duplicate) > sim(non-duplicate)), ties count half
    double recallAtPrecision90 = 0;    // the most duplicates any threshold passes at precision >= 0.9
    double thresholdAtPrecision90 = 1; // that threshold
    double nearMissAuc = 0;            // the AUC against near misses only
};
// similarity[i] of pairs[i]; a NaN ranks below every number (it never passes a threshold).
// Error(InvalidArgument) when the sizes differ.
PairSeparation separation(const std::vector<LabelledPair> &pairs, const std::vector<double> &similarity);

} // namespace kvwb::core
