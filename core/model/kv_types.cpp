#include "core/model/kv_types.h"

namespace kvwb::core {

namespace {

constexpr EnumName<ModelRole> kRoleLabels[] = {{ModelRole::A, "A"}, {ModelRole::B, "B"}};
constexpr EnumName<KeyForm> kKeyFormNames[] = {{KeyForm::PreRope, "pre_rope"},
                                               {KeyForm::PostRope, "post_rope"}};

} // namespace

const char *roleLabel(ModelRole r) noexcept
{
    return enumName(kRoleLabels, r);
}

const char *keyFormName(KeyForm f) noexcept
{
    return enumName(kKeyFormNames, f);
}

} // namespace kvwb::core
