#include "ui/models/model_card_model.h"

#include <QBrush>
#include <QColor>

#include <QLocale>

#include <array>
#include <functional>

namespace kvwb::ui {

namespace {

struct Row
{
    const char *label;
    bool geometry; // part of the KV cache's shape or RoPE
    std::function<QString(const core::ModelConfig &)> value;
};

const std::vector<Row> &rows()
{
    static const std::vector<Row> all = {
        {"Architecture", false, [](const auto &c) { return QString::fromStdString(c.architecture); }},
        {"Layers", true, [](const auto &c) { return QString::number(c.numLayers); }},
        {"Hidden size", false, [](const auto &c) { return QString::number(c.hiddenSize); }},
        {"Heads", false, [](const auto &c) { return QString::number(c.numHeads); }},
        {"KV heads", true, [](const auto &c) { return QString::number(c.numKvHeads); }},
        {"Head dim", true, [](const auto &c) { return QString::number(c.headDim); }},
        {"MLP size", false, [](const auto &c) { return QString::number(c.intermediateSize); }},
        {"Vocabulary", false, [](const auto &c) { return QString::number(c.vocabSize); }},
        {"Context", false, [](const auto &c) { return QString::number(c.contextLimit()); }},
        {"Parameters", false,
         [](const auto &c) { return QLocale::c().toString(qlonglong(c.parameterCount())); }},
        {"RoPE theta", true, [](const auto &c) { return QString::number(c.ropeTheta, 'g', 10); }},
        {"RoPE layout", true, [](const auto &c) { return QString(core::ropeLayoutName(c.ropeLayout)); }},
        {"RoPE scaling", true, [](const auto &c) { return QString::fromStdString(c.ropeScaling.type); }},
        {"QKV bias", false, [](const auto &c) { return QString(c.qkvBias ? "yes" : "no"); }},
        {"Tied embeddings", false, [](const auto &c) { return QString(c.tieWordEmbeddings ? "yes" : "no"); }},
        {"KV bytes/token (f32)", true, [](const auto &c) { return QString::number(c.kvBytesPerToken(4)); }},
    };
    return all;
}

} // namespace

ModelCardModel::ModelCardModel(QObject *parent) : QAbstractTableModel(parent) {}

// The two rows after the config rows: what a loaded model adds.
constexpr int kIdentityRows = 2;

void ModelCardModel::setModel(int column, const std::optional<core::ModelConfig> &config)
{
    if (column == ModelAColumn) {
        m_a = config;
        m_idA = {};
    } else if (column == ModelBColumn) {
        m_b = config;
        m_idB = {};
    } else {
        return;
    }
    Q_EMIT dataChanged(index(0, ModelAColumn), index(rowCount() - 1, ModelBColumn));
}

void ModelCardModel::setIdentity(int column, const QString &tokenizer, const QString &fingerprint)
{
    if (column != ModelAColumn && column != ModelBColumn)
        return;
    (column == ModelAColumn ? m_idA : m_idB) = {tokenizer, fingerprint};
    const int first = int(rows().size());
    // both columns: the other model's tokenizer row is marked when the two differ
    Q_EMIT dataChanged(index(first, ModelAColumn), index(first + kIdentityRows - 1, ModelBColumn));
}

int ModelCardModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : int(rows().size()) + kIdentityRows;
}

int ModelCardModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant ModelCardModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    if (index.row() >= int(rows().size())) { // tokenizer, weights fingerprint
        const bool tokenizerRow = index.row() == int(rows().size());
        if (index.column() == PropertyColumn)
            return role == Qt::DisplayRole ? QVariant(tokenizerRow ? tr("Tokenizer") : tr("Weights sha256"))
                                           : QVariant();
        const Identity &id = index.column() == ModelAColumn ? m_idA : m_idB;
        const QString value = tokenizerRow ? id.tokenizer : id.fingerprint;
        const bool tokenizersDiffer = tokenizerRow && !m_idA.tokenizer.isEmpty() &&
                                      !m_idB.tokenizer.isEmpty() && m_idA.tokenizer != m_idB.tokenizer;
        if (role == Qt::DisplayRole)
            return value.isEmpty() ? tr("- (load to see)")
                   : tokenizerRow  ? value
                                   : value.left(16) + QStringLiteral("\u2026");
        if (role == Qt::ToolTipRole && tokenizersDiffer)
            return value + "\n" +
                   tr("A and B tokenise differently: capture stores a token alignment for each prompt they "
                      "split differently, and fitting and transfers pair B's tokens with A's through it");
        if (role == Qt::ToolTipRole && !value.isEmpty())
            return value;
        if (role == Qt::BackgroundRole && tokenizersDiffer)
            return QBrush(QColor(255, 236, 179));
        if (role == TokenizerDiffersRole)
            return tokenizersDiffer;
        if (role == GeometryDiffersRole)
            return false;
        return {};
    }
    const Row &row = rows()[size_t(index.row())];
    if (index.column() == PropertyColumn)
        return role == Qt::DisplayRole ? QVariant(QString(row.label)) : QVariant();
    const auto &cfg = index.column() == ModelAColumn ? m_a : m_b;
    if (role == Qt::DisplayRole)
        return cfg ? QVariant(row.value(*cfg)) : QVariant(QStringLiteral("-"));
    const bool differs = row.geometry && m_a && m_b && row.value(*m_a) != row.value(*m_b);
    if (role == GeometryDiffersRole)
        return differs;
    // what the flag means, where a user sees it: the KV caches differ in this property
    if (role == Qt::BackgroundRole && differs)
        return QBrush(QColor(255, 236, 179));
    if (role == Qt::ToolTipRole && differs)
        return tr(
            "A and B differ here: their KV caches have another geometry, so a converter maps between them");
    return {};
}

QVariant ModelCardModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case PropertyColumn:
        return tr("Property");
    case ModelAColumn:
        return tr("Model A (source)");
    case ModelBColumn:
        return tr("Model B (target)");
    }
    return {};
}

} // namespace kvwb::ui
