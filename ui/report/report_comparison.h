// Comparison samples in the report's documents: the prompt and the three continuations (A, B from
// scratch, B from A's converted cache) with the first divergence marked, as Markdown (between « and
// ») and as HTML (bold and underlined; transfer tokens shaded white at 0 nats to red at 2 nats of KL
// to scratch). Tokens are grouped into whole UTF-8 characters first, so no mark splits a character.
// Internal to ui/report/ (report_document.cpp lays these out; csv/comparisons.csv is written by
// report_data.cpp).
//
// Thread-safety: pure functions over the sample they are given; the result is the caller's.
#pragma once

#include "core/store/comparison_store.h"

#include <string>

namespace kvwb::ui::report {

std::string comparisonMarkdown(const core::ComparisonSample &s);
// One <div class="comparison"> with inline styles only (QTextDocument, for PDF, reads the same HTML).
std::string comparisonHtml(const core::ComparisonSample &s);

} // namespace kvwb::ui::report
