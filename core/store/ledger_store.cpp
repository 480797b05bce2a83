#include "core/store/ledger_store.h"

#include "core/store/hdf5_handle.h"
#include "core/util/build_info.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <fmt/format.h>

namespace kvwb::core {

namespace fs = std::filesystem;

namespace {

constexpr const char *kLedgers = "/ledgers";
constexpr const char *kNumbers = "numbers";

} // namespace

void saveLedger(const fs::path &experiment, const std::string &name, const std::vector<LedgerRow> &rows,
                const std::string &settingsJson)
{
    h5::prepareLibrary();
    const std::string file = experiment.string();
    h5::checkName(file, "ledger", name);
    const std::string where = file + ": ledger " + name;
    h5::checkSettingsJson(where, settingsJson);
    checkLedgerRows(where, rows);
    h5::openExperiment(experiment); // a kvwb experiment, checked read-only before it is opened for writing

    const std::vector<LedgerColumn> &cols = ledgerColumns();
    MetricTable numbers;
    for (const LedgerColumn &c : cols)
        if (!c.text)
            numbers.columns.push_back(c.name);
    numbers.rows.reserve(rows.size());
    for (const LedgerRow &r : rows) {
        std::vector<double> &row = numbers.rows.emplace_back();
        for (size_t c = 0; c < cols.size(); ++c)
            if (!cols[c].text)
                row.push_back(ledgerCellNumber(r, c));
    }

    h5::Save save(experiment);
    const std::string target = std::string(kLedgers) + "/" + name;
    {
        const h5::PropList gcpl = h5::compactGroupCreation();
        const h5::Group root(h5::check(H5Gcreate_anon(save.file(), gcpl.get(), H5P_DEFAULT), ErrorCode::Io,
                                       file + ": cannot create group " + target));
        const h5::Place place{root.get(), file, target};
        const h5::Site site(file, target);
        h5::writeAttr(root.get(), site, "settings", settingsJson);
        h5::writeAttr(root.get(), site, "rows", int64_t(rows.size()));
        h5::writeAttr(root.get(), site, "created_utc", text::utcNowIso8601());
        h5::writeAttr(root.get(), site, "app_version", std::string(appVersion()));
        h5::writeAttr(root.get(), site, "git_commit", std::string(gitCommit()));
        h5::writeTable(place, kNumbers, numbers);
        for (size_t c = 0; c < cols.size(); ++c) {
            if (!cols[c].text)
                continue;
            std::vector<std::string> values;
            values.reserve(rows.size());
            for (const LedgerRow &r : rows)
                values.push_back(ledgerCellText(r, c));
            h5::writeStrings(place, cols[c].name, values);
        }
        save.link(root.get(), kLedgers,
                  "Replay ledgers: one group of per-request rows per replay (docs/replay.md)", name);
    }
    save.close();
}

std::vector<std::string> listLedgers(const fs::path &experiment)
{
    return h5::recordNames(experiment, kLedgers);
}

std::vector<LedgerRow> loadLedger(const fs::path &experiment, const std::string &name,
                                  std::string *settingsJson)
{
    const h5::RecordFile record = h5::openRecord(experiment, kLedgers, "ledger", name);
    const std::string &file = record.file, &base = record.path;
    const hid_t fid = record.handle.get();
    int64_t count = 0;
    {
        const h5::Group g = h5::openGroup(fid, file, base);
        const h5::Site site(file, base);
        count = h5::readIntAttr(g.get(), site, "rows");
        if (settingsJson)
            *settingsJson = h5::readStringAttr(g.get(), site, "settings");
    }
    const std::string numbersPath = base + "/" + kNumbers;
    const MetricTable numbers = h5::readTable(fid, file, numbersPath);
    if (int64_t(numbers.rows.size()) != count)
        throw Error(ErrorCode::Format, file + ": dataset " + numbersPath + " has " +
                                           std::to_string(numbers.rows.size()) + " rows, attribute rows of " +
                                           base + " says " + std::to_string(count));
    std::vector<LedgerRow> rows(numbers.rows.size());
    const std::vector<LedgerColumn> &cols = ledgerColumns();
    for (size_t ci = 0; ci < cols.size(); ++ci) {
        const LedgerColumn &c = cols[ci];
        if (c.text) {
            const std::string path = base + "/" + c.name;
            if (c.optional && !h5::linkExists(fid, path))
                continue;
            const std::vector<std::string> values = h5::readStrings(fid, file, path);
            if (values.size() != rows.size())
                throw Error(ErrorCode::Format, file + ": dataset " + path + " has " +
                                                   std::to_string(values.size()) + " rows, expected " +
                                                   std::to_string(rows.size()) + " as " + numbersPath);
            for (size_t i = 0; i < rows.size(); ++i) {
                const std::string must = setLedgerCellText(rows[i], ci, values[i]);
                if (!must.empty())
                    throw Error(ErrorCode::Format, file + ": dataset " + path + " row " + std::to_string(i) +
                                                       ": '" + values[i] + "' is not " + must);
            }
            continue;
        }
        const int col = numbers.column(c.name);
        if (col < 0 && c.optional)
            continue;
        if (col < 0)
            throw Error(ErrorCode::Format, file + ": dataset " + numbersPath + " has no column " + c.name +
                                               " (attribute columns)");
        for (size_t i = 0; i < rows.size(); ++i) {
            const double v = numbers.rows[i][size_t(col)];
            const std::string must = setLedgerCellNumber(rows[i], ci, v);
            if (!must.empty())
                throw Error(ErrorCode::Format, fmt::format("{}: dataset {} row {} column {}: {} is not {}",
                                                           file, numbersPath, i, c.name, v, must));
        }
    }
    return rows;
}

} // namespace kvwb::core
