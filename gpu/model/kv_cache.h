// The KV cache of one model for one sequence: per layer K and V, readable and writable from outside.
//
// Created by Model::newCache(); lives on the model's device and dtype. Keys are stored after RoPE
// (what attention consumes); keys(layer, KeyForm::PreRope) removes the rotation on the way out and
// assign(..., KeyForm::PreRope) applies it on the way in, with the owning model's RoPE layout and
// frequencies. Token ids are kept beside the tensors so a generator can tell how much of a prompt a
// cache already covers.
//
// Thread-safety: none; a cache belongs to one job on the engine thread at a time. fork() makes an
// independent deep copy. The cache keeps the model's RoPE tables alive, not the model.
#pragma once

#include "core/model/kv_types.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace kvwb::gpu {

// One KeyForm and one pair of host KV layouts for every layer (core/model/kv_types.h).
using core::HeadMajorKv;
using core::KeyForm;
using core::TokenMajorKv;

class KvCache
{
public:
    KvCache(); // an empty, unusable cache; get a real one from Model::newCache()
    ~KvCache();
    KvCache(KvCache &&) noexcept;
    KvCache &operator=(KvCache &&) noexcept;
    KvCache(const KvCache &) = delete;
    KvCache &operator=(const KvCache &) = delete;

    bool isValid() const;
    int numLayers() const;
    int numKvHeads() const;
    int headDim() const;
    int tokens() const;                       // positions 0..tokens()-1 are filled
    const std::vector<int> &tokenIds() const; // the ids those positions hold
    int64_t bytes() const;                    // device bytes held by filled positions

    // Copy one layer to the host, [kvHeads, tokens, headDim]. Error(InvalidArgument) for a bad layer.
    HeadMajorKv layer(int layer, KeyForm form) const;
    // The same, token-major: [tokens, kvHeads, headDim] (the experiment file's layout).
    TokenMajorKv layerTokenMajor(int layer, KeyForm form) const;
    // Replace the whole cache with externally computed K/V for tokenIds (positions 0..n-1).
    // layers.size() == numLayers(), each tensor [kvHeads, n, headDim]; Error(Shape) names the layer
    // and tensor whose size is wrong.
    void assign(const std::vector<int> &tokenIds, const std::vector<HeadMajorKv> &layers, KeyForm form);
    // Keep the first n positions (n <= tokens()).
    void truncate(int n);
    void clear() { truncate(0); }
    KvCache fork() const;

    struct Impl;
    Impl *impl() const { return m_impl.get(); }
    explicit KvCache(std::unique_ptr<Impl> impl);

private:
    // keys and values in the layout asked for (token-major when tokenMajor), as two float buffers
    std::pair<std::vector<float>, std::vector<float>> read(int layer, KeyForm form, bool tokenMajor) const;
    std::unique_ptr<Impl> m_impl;
};

} // namespace kvwb::gpu
