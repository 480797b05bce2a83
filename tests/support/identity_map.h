// Test helper: the identity map of a given width (weight I, bias 0), and the converter of them
// that must reproduce a model's own KV when a model is aligned with itself.
#pragma once

#include "core/model/model_config.h"
#include "core/store/converter_store.h"

#include <vector>

namespace kvwb::test {

inline core::KvMap identityMap(int dim)
{
    return core::identityMap(dim);
}

// A converter of identity maps, B layer l from A layer l, for a model aligned with itself (or
// with one of the same KV geometry).
inline core::ConverterRecord identityConverter(const core::ModelConfig &c,
                                               core::KeyForm keyForm = core::KeyForm::PreRope)
{
    core::ConverterRecord conv;
    conv.keyForm = keyForm;
    for (int l = 0; l < c.numLayers; ++l)
        conv.layers.push_back({l,
                               {l},
                               false,
                               {identityMap(c.numKvHeads * c.headDim)},
                               {identityMap(c.numKvHeads * c.headDim)}});
    return conv;
}

} // namespace kvwb::test
