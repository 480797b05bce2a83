// An HNSW vector index (hnswlib; inner product over unit vectors, so distance = 1 - cosine) for
// the semantic tier and the knowledge tier's recall. This wrapper's .cpp is the one translation
// unit that includes hnswlib: its 0.6.2 header defines functions that are not inline, so a second
// including file breaks the link. hnswlib's exceptions reach callers as Error(Internal) naming the
// index and the operation.
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
    // name: how errors name the index ("semantic index").
    VectorIndex(int dim, size_t initialCapacity, size_t m, size_t efConstruction, size_t efSearch,
                const char *name);
    ~VectorIndex();
    VectorIndex(const VectorIndex &) = delete;
    VectorIndex &operator=(const VectorIndex &) = delete;

    int dim() const;
    size_t capacity() const;
    // Adds or (for a deleted label) replaces the vector of `label` [dim]; doubles the capacity when
    // label is beyond it (labels are dense slots 0, 1, ...).
    void add(const float *v, size_t label);
    void markDeleted(size_t label); // left out of later searches
    // Up to k (distance, label) pairs, nearest first.
    std::vector<std::pair<float, size_t>> search(const float *q, size_t k) const;

private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

} // namespace kvwb::core
