// Private to ui/window/: what main_window.cpp and main_window_project.cpp share.
#pragma once

#include <QSettings>

namespace kvwb::ui::detail {

constexpr int kMaxRecent = 8; // File > Recent Projects

inline QSettings settings()
{
    return QSettings("kvwb", "workbench");
}

} // namespace kvwb::ui::detail
