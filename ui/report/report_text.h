// How the report spells things: numbers (exact for CSV, four significant digits for people), shares,
// tier names, file-name-safe stems, HTML escapes and valid UTF-8. Shared by the report's data, chart
// and document units (ui/report/ only; not part of the report's API).
//
// Thread-safety: pure functions (ensureDir touches the file system). The caller owns every string.
#pragma once

#include "core/ledger/replay_ledger.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kvwb::ui::report {

// Exact, shortest round-trip form for CSV ("nan", "inf", "-0" as such).
std::string exact(double v);
// Four significant digits for tables people read; integers in full, "n/a" for NaN, "inf"/"-inf".
std::string shown(double v);
// 0.125 -> "12.5%".
std::string percent(double fraction);
// {1, 2, 3} -> "1,2,3".
std::string joinInts(const std::vector<int> &v);
// A name made safe for a file name (the stores allow [A-Za-z0-9_.-], so this is a no-op for them).
std::string safeName(const std::string &name);
// A tier as the report names it: "miss (model ran)" for TierKind::None, else core::tierKindName.
std::string tierLabel(core::TierKind k);
// &, <, > and " as entities (enough for text and attribute values).
std::string htmlEscape(const std::string &s);
// Invalid UTF-8 (a piece holding part of a character) as U+FFFD: HTML, PDF and JSON need valid text.
std::string validUtf8(const std::string &s);
// Creates dir and its parents. Error(Io) naming dir when that fails or dir is not a directory.
void ensureDir(const std::filesystem::path &dir);

} // namespace kvwb::ui::report
