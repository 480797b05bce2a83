// Error curves (replay --bound-prior): a sweep's JSON or a trained embedder's log is fitted or refused
// with one kvwb error, never a crash; a fitted curve is a step function of non-increasing rates in
// [0, 1] that the per-entry bound can use.
#include "core/cache/entry_thresholds.h"
#include "core/cache/error_curve.h"
#include "tests/fuzz/fuzz_input.h"

#include <cmath>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string_view text(reinterpret_cast<const char *>(data), size);
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        const auto c = kvwb::core::parseErrorCurve(text, "curve.json");
        if (c.from.empty() || c.from.size() != c.errorRate.size() || c.from.size() != c.weight.size())
            __builtin_trap();
        for (size_t i = 0; i < c.errorRate.size(); ++i)
            if (!(c.errorRate[i] >= 0 && c.errorRate[i] <= 1) ||
                (i > 0 && c.errorRate[i] > c.errorRate[i - 1]) || (i > 0 && !(c.from[i] > c.from[i - 1])))
                __builtin_trap();
        kvwb::core::EntryBoundOptions o;
        o.errorBound = 0.1;
        o.priorCurve = c;
        kvwb::core::EntryThresholds et(o);
        et.observe(1, 0.9, true);
        for (double s : {-1.0, 0.0, 0.5, 0.9, 1.0, std::nan("")})
            if (!(et.decide(1, s).priorRate >= 0 && et.decide(1, s).priorRate <= 1))
                __builtin_trap();
    });
}
