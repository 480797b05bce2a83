#include "app/cli/cli_prices.h"

#include "app/cli/cli_util.h"
#include "core/ledger/prices.h"
#include "core/ledger/replay_ledger.h"

#include <QCommandLineParser>

#include <cstdio>

namespace kvwb::app {

using namespace kvwb::app::cli;

int cmdPrices(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"presets",
                 "Comma-separated presets: built-in ids and presets files (FILE or FILE#ID); default every "
                 "built-in preset.",
                 "LIST"});
    p.addOption(
        {"ledger", "Cost this replay ledger (kvwb replay --ledger) under each preset.", "LEDGER.csv"});
    p.addOption({"json", "Print JSON: the presets in their file schema, or the comparison rows."});
    parse(
        p, args,
        "List the price presets (USD per 1M tokens: input, cached input, cache write, output, cache storage "
        "per hour; docs/replay.md, \"Prices\"), or compare one replay ledger's cost under several of them.");
    const std::vector<core::PricePreset> presets = core::resolvePricePresets(str(p.value("presets")));
    const bool asJson = p.isSet("json");
    if (!p.isSet("ledger")) {
        if (asJson) {
            std::printf("%s\n", core::pricePresetsJson(presets).c_str());
            return 0;
        }
        std::printf("USD per 1M tokens; storage per 1M tokens per hour held; min prefix = the shortest "
                    "prefix the provider caches.\n\n%s\n",
                    core::pricePresetsMarkdown(presets).c_str());
        for (const core::PricePreset &pr : presets)
            std::printf("%s: %s (as of %s)\n", pr.id.c_str(),
                        pr.source.empty() ? "no source given" : pr.source.c_str(),
                        pr.asOf.empty() ? "no date given" : pr.asOf.c_str());
        return 0;
    }
    const QString ledgerPath = p.value("ledger");
    const std::vector<core::LedgerRow> rows = core::ledgerFromCsv(readTextFile(ledgerPath), str(ledgerPath));
    const std::vector<core::PriceComparisonRow> table = core::comparePrices(rows, presets);
    if (asJson) {
        std::printf("%s\n", core::priceComparisonJson(table).c_str());
        return 0;
    }
    const core::LedgerSummary s = core::summarize(rows);
    std::printf("%s: %lld requests, %lld hits, %lld prompt tokens reused, %lld tokens computed\n\n%s",
                qPrintable(ledgerPath), (long long)s.requests, (long long)s.hits, (long long)s.tokensReused,
                (long long)s.tokensComputed, core::priceComparisonMarkdown(table).c_str());
    std::printf(
        "\nResponse hits cost nothing; reused KV bills at the cached-input price, KV a tier kept at the "
        "cache-write price (docs/replay.md, \"Prices\").\n");
    return 0;
}

} // namespace kvwb::app
