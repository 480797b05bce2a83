// Precompiled header of the test executables (tests/CMakeLists.txt): Qt Test and what most tests
// include. One is built per layer (core, gpu, integration, ui, app: each layer's tests share their
// compile flags) and reused by that layer's other tests. Nothing of the project's own; each test
// still includes what it uses (-DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON builds without it).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <fmt/format.h>
