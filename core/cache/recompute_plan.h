// Selective recompute: which positions of a prefix that B received converted from A's cache B
// recomputes itself (kvwb compare --recompute, the cross tier's share). A share F of the n prefix
// positions, round(F * n) of them, chosen by position:
//  - first:  the first ones (the attention sinks every later token reads);
//  - recent: the last ones (what the next token reads most);
//  - ends:   half of them first, the rest last (the default).
// Plain values and pure functions; thread-safe.
#pragma once

#include "core/util/enum_names.h"

#include <cstdint>
#include <vector>

namespace kvwb::core {

enum class RecomputePositions
{
    Ends,
    First,
    Recent
};
inline constexpr EnumName<RecomputePositions> kRecomputePositionsNames[] = {
    {RecomputePositions::Ends, "ends"},
    {RecomputePositions::First, "first"},
    {RecomputePositions::Recent, "recent"}};
KVWB_ENUM_NAMES(RecomputePositions, kRecomputePositionsNames, recomputePositionsName, parseRecomputePositions)

struct RecomputePlan
{
    double share = 0; // in [0, 1]: 0 takes every position converted, 1 recomputes them all
    RecomputePositions positions = RecomputePositions::Ends;
    // A baseline, not a setting: when not 0, the converted rows are first laid at seeded shuffled
    // positions (B's RoPE applied where they land): a destroyed cache with the right content in the
    // wrong places, which a converter has to beat for its order to matter.
    uint64_t shuffleSeed = 0;
};

// The positions of an n-position prefix the plan recomputes, ascending: round(share * n) of them
// (share clamped to [0, 1]; NaN counts as 0).
std::vector<int> recomputedPositions(int n, const RecomputePlan &plan);

} // namespace kvwb::core
