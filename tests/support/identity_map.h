// Test helper: the identity map of a given width (weight I, bias 0), the converter that must
// reproduce a model's own KV when a model is aligned with itself.
#pragma once

#include "core/store/converter_store.h"

#include <vector>

namespace kvwb::test {

inline core::LinearMap identityMap(int dim)
{
    core::LinearMap s;
    s.inputDim = s.outputDim = dim;
    s.weight.assign(size_t(dim) * size_t(dim), 0.0f);
    for (int i = 0; i < dim; ++i)
        s.weight[size_t(i) * size_t(dim) + size_t(i)] = 1.0f;
    s.bias.assign(size_t(dim), 0.0f);
    return s;
}

} // namespace kvwb::test
