// Precompiled header of kvwb_ui (ui/CMakeLists.txt): Qt Widgets and Qt Charts, which every window
// file includes. Nothing of the project's own; each file still includes what it uses
// (-DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON builds without it).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include <QtCharts>
#include <QtWidgets>
