#include "ui/models/metric_table_model.h"

#include <QHash>

#include <cmath>

namespace kvwb::ui {

namespace {

// What the well-known columns mean, for the header tooltip: the names themselves are terse
// because they are also the CSV/HDF5 column names.
QString columnDescription(const QString &name)
{
    static const QHash<QString, QString> descriptions = {
        {"layer", QObject::tr("Layer index of model B (the target)")},
        {"head", QObject::tr("KV head index of model B")},
        {"r2_k",
         QObject::tr("R\u00b2 of converted keys against B's own keys on held-out prompts (1 = perfect)")},
        {"r2_v",
         QObject::tr("R\u00b2 of converted values against B's own values on held-out prompts (1 = perfect)")},
        {"attn_cos", QObject::tr("Cosine similarity of attention outputs computed with converted vs. B's own "
                                 "KV (1 = identical)")},
        {"k", QObject::tr("Number of source (A) layers each converter reads")},
        {"lambda", QObject::tr("Ridge regularisation strength")},
        {"train_tokens", QObject::tr("Calibration tokens the converters were fitted on")},
    };
    return descriptions.value(name);
}

// The heading a column shows: its label in words where the store's name is snake_case
// ("r2_k" -> "R² K"); the stored name stays in the tooltip.
QString columnLabel(const QString &name)
{
    static const QHash<QString, QString> labels = {
        {"layer", QObject::tr("Layer")},
        {"head", QObject::tr("Head")},
        {"r2_k", QObject::tr("R\u00b2 K")},
        {"r2_v", QObject::tr("R\u00b2 V")},
        {"attn_cos", QObject::tr("Attention cos")},
        {"k", QObject::tr("k")},
        {"lambda", QObject::tr("\u03bb")},
        {"train_tokens", QObject::tr("Train tokens")},
    };
    if (const auto it = labels.find(name); it != labels.end())
        return *it;
    QString words = name;
    words.replace('_', ' ');
    if (!words.isEmpty())
        words[0] = words[0].toUpper();
    return words;
}

} // namespace

MetricTableModel::MetricTableModel(QObject *parent) : QAbstractTableModel(parent) {}

void MetricTableModel::setTable(const core::MetricTable &table)
{
    beginResetModel();
    m_table = table;
    endResetModel();
}

QString MetricTableModel::formatValue(double value)
{
    if (std::isnan(value))
        return QStringLiteral("\u2013");
    // Indices and token counts are integral: "12" reads better than "12.00", and 4 significant
    // digits would turn 123456 calibration tokens into "1.235e+05".
    if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e15)
        return QString::number(qint64(value));
    return QString::number(value, 'g', 4);
}

int MetricTableModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : int(m_table.rows.size());
}

int MetricTableModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : int(m_table.columns.size());
}

QVariant MetricTableModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const auto &row = m_table.rows[size_t(index.row())];
    if (size_t(index.column()) >= row.size())
        return {}; // a ragged row: show nothing rather than read past it
    const double value = row[size_t(index.column())];
    switch (role) {
    case Qt::DisplayRole:
        return formatValue(value);
    case RawValueRole:
        return value;
    case Qt::TextAlignmentRole:
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    case Qt::ToolTipRole:
        return QString::number(value, 'g', 17);
    }
    return {};
}

QVariant MetricTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation == Qt::Vertical)
        return role == Qt::DisplayRole ? QVariant(section + 1) : QVariant();
    if (section < 0 || size_t(section) >= m_table.columns.size())
        return {};
    const QString name = QString::fromStdString(m_table.columns[size_t(section)]);
    if (role == Qt::DisplayRole)
        return columnLabel(name);
    if (role == Qt::ToolTipRole) {
        const QString description = columnDescription(name);
        return description.isEmpty() ? QVariant(name) : QVariant(QString("%1 (%2)").arg(description, name));
    }
    return {};
}

} // namespace kvwb::ui
