// Test helper: run f and return the kvwb::core::Error it throws; anything else (including no
// exception) fails loudly with std::runtime_error, which Qt Test reports as a failure.
#pragma once

#include "core/util/error.h"

#include <stdexcept>

namespace kvwb::test {

template <typename F> core::Error expectError(F &&f)
{
    try {
        f();
    } catch (const core::Error &e) {
        return e;
    }
    throw std::runtime_error("expected kvwb::core::Error, nothing thrown");
}

} // namespace kvwb::test
