// The KV vocabulary every layer shares: which model of a pair (Role), in which form keys are held
// (KeyForm), and the two layouts of one layer's K/V on the host (head-major, the engine's; and
// token-major, the experiment file's), as distinct types so one cannot be passed for the other.
//
// Plain values; thread-safe.
#pragma once

#include "core/util/enum_names.h"

#include <optional>
#include <string_view>
#include <vector>

namespace kvwb::core {

// The two models of an experiment: A (the source, whose KV is converted) and B (the target).
enum class ModelRole
{
    A,
    B
};
// "a" | "b" (files, JSON, ledgers)
inline constexpr EnumName<ModelRole> kRoleNames[] = {{ModelRole::A, "a"}, {ModelRole::B, "b"}};
KVWB_ENUM_NAMES(ModelRole, kRoleNames, roleName, parseRole)
const char *roleLabel(ModelRole r) noexcept; // "A" | "B" (messages, the window)
inline constexpr ModelRole kRoles[] = {ModelRole::A, ModelRole::B};

// Keys as attention consumes them (after RoPE) or with the rotation removed (before RoPE: the form
// converters map, since A's and B's rotations differ).
enum class KeyForm
{
    PreRope,
    PostRope
};
const char *keyFormName(KeyForm f) noexcept; // "pre_rope" | "post_rope"

// One layer's K and V on the host, head-major: each [kvHeads, tokens, headDim] float32 row-major
// (the engine's cache layout).
struct HeadMajorKv
{
    std::vector<float> keys;   // [kvHeads, tokens, headDim]
    std::vector<float> values; // [kvHeads, tokens, headDim]
};

// One layer's K and V on the host, token-major: each [tokens, kvHeads, headDim] float32 row-major
// (the experiment file's layout; a token's row is contiguous).
struct TokenMajorKv
{
    std::vector<float> keys;   // [tokens, kvHeads, headDim]
    std::vector<float> values; // [tokens, kvHeads, headDim]
};

} // namespace kvwb::core
