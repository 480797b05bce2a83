// CSV field quoting (RFC 4180) shared by every CSV file kvwb writes: replay ledgers
// (core/ledger/replay_ledger.h) and the report's tables (ui/report/). One rule, so a field written by
// either reads back the same with any RFC 4180 reader, including the ledger's own parser.
//
// Thread-safety: pure functions. The caller owns the strings.
#pragma once

#include <string>
#include <string_view>

namespace kvwb::core {

// value as one CSV field: unchanged unless it holds ',', '"', CR or LF; then in double quotes with
// every '"' doubled (so "a,b" becomes "\"a,b\"" and say "hi" becomes "\"say \"\"hi\"\"\"").
std::string csvField(std::string_view value);
// Appends csvField(value) to out (no separator).
void appendCsvField(std::string &out, std::string_view value);

} // namespace kvwb::core
