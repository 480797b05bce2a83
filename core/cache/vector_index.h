// The vector index of the semantic tier and the knowledge tier's recall (inner product over unit
// vectors, so distance = 1 - cosine). Up to `exactLimit` live entries a search is exact: every live
// vector is scored with hnswlib's SIMD inner product. Beyond it an HNSW graph (hnswlib) is built
// from the stored vectors and answers from then on. Exact search is the default for the sizes
// these tiers hold because HNSW's greedy search loses exact matches on text embeddings that share
// a template: on the demo graph's 15,404 name and question entries (lexical embedder) HNSW with
// M 16 / ef 128 returned the query's own entry first for 82 % of them (93 % at M 48 / ef 512),
// while it recalls 0.99 on random vectors (tests/core/cache/tst_vector_index.cpp measures both).
//
// This wrapper's .cpp is the one translation unit that includes hnswlib: its 0.6.2 header defines
// functions that are not inline, so a second including file breaks the link. hnswlib's exceptions
// reach callers as Error(Internal) naming the index and the operation.
//
// Thread-safety: none (hnswlib forbids inserts during queries; search keeps a visited list).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace kvwb::core {

class VectorIndex
{
public:
    // Live entries up to which searches are exact (about 2 ms a query at 20,000 x 512 floats on one
    // core with AVX-512).
    static constexpr size_t kDefaultExactLimit = 20000;

    // name: how errors name the index ("semantic index"). m, efConstruction, efSearch: the HNSW
    // graph's, once more than exactLimit entries are live (0: HNSW from the first entry).
    VectorIndex(int dim, size_t initialCapacity, size_t m, size_t efConstruction, size_t efSearch,
                const char *name, size_t exactLimit = kDefaultExactLimit);
    ~VectorIndex();
    VectorIndex(const VectorIndex &) = delete;
    VectorIndex &operator=(const VectorIndex &) = delete;

    int dim() const;
    size_t capacity() const; // label slots allocated
    size_t size() const;     // live entries
    bool exact() const;      // searches are exact (no HNSW graph built yet)
    // Adds or (for a deleted label) replaces the vector of `label` [dim]; doubles the capacity when
    // label is beyond it (labels are dense slots 0, 1, ...).
    void add(const float *v, size_t label);
    void markDeleted(size_t label); // left out of later searches; a label never added is an error
    // Up to k (distance, label) pairs, nearest first (ties by label).
    std::vector<std::pair<float, size_t>> search(const float *q, size_t k) const;

private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

} // namespace kvwb::core
