// A job's settings table (core/settings/setting_table.h) on the command line: its rows registered as
// options (in the table's order, with the subcommand's own options placed after the rows `after`
// names), and the settings the flags give.
#pragma once

#include "app/cli/cli_util.h"
#include "core/settings/setting_table.h"
#include "core/util/error.h"

#include <QCommandLineParser>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <string>
#include <vector>

namespace kvwb::app::cli {

// Each row as an option; `after(name)` is called after each row's option is added (the subcommand
// adds its own there). A row's default is what p.value() gives when its flag is not set.
template <typename S>
void addSettingOptions(QCommandLineParser &p, const std::vector<core::SettingRow<S>> &rows,
                       const std::function<void(const std::string &name)> &after = {})
{
    const S defaults;
    for (const auto &f : rows) {
        QStringList names = {QString::fromUtf8(f.name)};
        if (f.alias)
            names << QString::fromUtf8(f.alias);
        QCommandLineOption option(names, QString::fromUtf8(f.help), QString::fromUtf8(f.valueName));
        if (f.kind == core::SettingKind::Value)
            option.setDefaultValue(QString::fromStdString(f.get(defaults).at(0)));
        else if (f.kind == core::SettingKind::List)
            option.setDefaultValue(
                QString::fromStdString(fmt::format("{}", fmt::join(f.get(defaults), ","))));
        p.addOption(option);
        if (after)
            after(f.name);
    }
}

// The settings the flags give: each flag set read by its row, in the table's order (a row that sets
// another's default, as a gate signal its threshold, comes first); UsageError "--FLAG <what is wrong>".
template <typename S>
S settingsFromFlags(const QCommandLineParser &p, const std::vector<core::SettingRow<S>> &rows)
{
    S s;
    for (const auto &f : rows) {
        const QString name = QString::fromUtf8(f.name);
        if (!p.isSet(name))
            continue;
        try {
            if (f.kind == core::SettingKind::Switch)
                f.set(s, "");
            else if (f.kind == core::SettingKind::Repeated)
                for (const QString &v : p.values(name))
                    f.set(s, str(v));
            else
                f.set(s, str(p.value(name)));
        } catch (const core::Error &e) {
            throw UsageError{"--" + std::string(f.name) + " " + e.what()};
        }
    }
    return s;
}

} // namespace kvwb::app::cli
