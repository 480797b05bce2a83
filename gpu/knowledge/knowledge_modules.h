// Knowledge modules: a concept's knowledge text computed once by model B into a KV module (keys
// before RoPE), and placed into any later context at any position (the position-independent reuse
// of Prompt Cache / EPIC), optionally with the module's last tokens recomputed in place (the
// boundary recomputation of CacheBlend), as docs/knowledge.md measures.
//
// Placement is exact in what RoPE decides: keys are re-rotated to the positions they take, so layer
// 0 (whose K/V depend on the token and its position only) is what computing the text there gives.
// Deeper layers differ by what the module's tokens attended to when computed (the prefix it was
// computed after) from what they would attend to in place; recomputing the last `boundary` tokens
// gives those positions their in-context K/V, and recomputing all of them is computing the text.
//
// Threading: the calling thread (the engine thread), like the model and caches.
#pragma once

#include "core/store/knowledge_store.h"
#include "gpu/model/kv_cache.h"
#include "gpu/model/model.h"

#include <string>
#include <vector>

namespace kvwb::gpu {

// B's forward over prefixIds + textIds; the module holds the text's positions, keys pre-RoPE, with
// the time the forward took (computeMs) and builtMs = nowMs. Error(InvalidArgument) for empty text
// or a prefix + text longer than the model's context.
core::KnowledgeModule computeModule(const Model &b, const std::vector<int> &prefixIds,
                                    const std::vector<int> &textIds, const std::string &nodeId,
                                    int64_t nowMs);

// Appends the module after the cache's filled positions (keys rotated to those positions), then
// recomputes its last `boundary` tokens in place (0..module size). Error(InvalidArgument) when the
// module's geometry is not the model's or the context would overflow. Returns the milliseconds
// the boundary recomputation took (0 when none).
double placeModule(const Model &b, KvCache &cache, const core::KnowledgeModule &module, int boundary = 0);

} // namespace kvwb::gpu
