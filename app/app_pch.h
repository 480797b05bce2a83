// Precompiled header of app/'s libraries (app/CMakeLists.txt): Qt Core and the standard and
// third-party headers the subcommands and jobs include. Nothing of the project's own; each file
// still includes what it uses (-DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON builds without it).
#pragma once
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QString>
#include <QStringList>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
