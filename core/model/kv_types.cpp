#include "core/model/kv_types.h"

namespace kvwb::core {

const char *roleName(ModelRole r) noexcept
{
    return r == ModelRole::A ? "a" : "b";
}

const char *roleLabel(ModelRole r) noexcept
{
    return r == ModelRole::A ? "A" : "B";
}

std::optional<ModelRole> parseRole(std::string_view s) noexcept
{
    if (s == "a")
        return ModelRole::A;
    if (s == "b")
        return ModelRole::B;
    return std::nullopt;
}

const char *keyFormName(KeyForm f) noexcept
{
    return f == KeyForm::PreRope ? "pre_rope" : "post_rope";
}

} // namespace kvwb::core
