// `kvwb prices`: the price presets (core/ledger/prices.h) as a table, and a replay ledger costed under
// several of them. Conventions as in app/cli/cli.h.
#pragma once

#include <QStringList>

namespace kvwb::app {

int cmdPrices(const QStringList &args);

} // namespace kvwb::app
