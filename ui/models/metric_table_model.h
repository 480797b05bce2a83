// Table model over a core::MetricTable (per-layer metrics, per-head metrics, sweep results): one
// view column per table column, numbers shown with 4 significant digits so a table of R^2 values
// stays narrow, the raw double under Qt::UserRole so a QSortFilterProxyModel sorts numerically
// rather than by text ("10" after "9").
//
// GUI-thread only (a QAbstractTableModel). Holds a copy of the table it shows.
#pragma once

#include "core/metrics/metric_table.h"

#include <QAbstractTableModel>

namespace kvwb::ui {

class MetricTableModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    // Qt::UserRole on any cell: the raw double (NaN included), for sorting and export.
    static constexpr int RawValueRole = Qt::UserRole;

    explicit MetricTableModel(QObject *parent = nullptr);

    // Replaces the whole table (a model reset: the columns may change).
    void setTable(const core::MetricTable &table);
    const core::MetricTable &table() const { return m_table; }

    // The text a cell shows: integers as integers, other numbers with 4 significant digits,
    // NaN as an en dash (a metric that could not be computed, e.g. R^2 of a constant target).
    static QString formatValue(double value);

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    core::MetricTable m_table;
};

} // namespace kvwb::ui
