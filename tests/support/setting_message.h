// Test helper: what one row of a settings table (core/settings/setting_table.h) says of a value set
// on default settings: its message, or "(accepted)".
#pragma once

#include "core/settings/setting_table.h"
#include "core/util/error.h"

#include <string>

namespace kvwb::test {

template <typename S> std::string rowMessage(const core::SettingRow<S> &row, const std::string &value)
{
    S s;
    try {
        row.set(s, value);
    } catch (const core::Error &e) {
        return e.what();
    }
    return "(accepted)";
}

} // namespace kvwb::test
