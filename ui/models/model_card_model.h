// Table model of a model card: one row per architecture property, one value column per loaded
// model (A, B), so the window can show the source and target side by side and highlight where their
// KV geometry differs.
//
// GUI-thread only (a QAbstractTableModel). Holds copies of the configs it shows.
#pragma once

#include "core/model/model_config.h"

#include <QAbstractTableModel>

#include <optional>

namespace kvwb::ui {

class ModelCardModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    enum Column
    {
        PropertyColumn = 0,
        ModelAColumn = 1,
        ModelBColumn = 2,
        ColumnCount = 3
    };
    // Qt::UserRole + 1 on a value cell: true when A and B differ in a property that changes the KV
    // cache's geometry (layers, kv heads, head dim, RoPE).
    static constexpr int GeometryDiffersRole = Qt::UserRole + 1;
    // Qt::UserRole + 2 on the tokenizer row: true when both tokenizers are known and differ, so
    // prompts are paired token by token through an alignment (docs/transfer.md, "Different
    // tokenizers"); the row is then marked like a geometry difference, with a tooltip saying so.
    static constexpr int TokenizerDiffersRole = Qt::UserRole + 2;

    explicit ModelCardModel(QObject *parent = nullptr);

    // A config read from a path (preview) or a loaded model's; clears that column's identity.
    void setModel(int column, const std::optional<core::ModelConfig> &config);
    // What only a loaded model tells: its tokenizer ("sentencepiece, 1024 pieces (tokenizer.model)")
    // and its weights fingerprint (sha256 hex), shown in the last two rows.
    void setIdentity(int column, const QString &tokenizer, const QString &fingerprint);

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    struct Identity
    {
        QString tokenizer, fingerprint;
    };
    std::optional<core::ModelConfig> m_a;
    std::optional<core::ModelConfig> m_b;
    Identity m_idA, m_idB;
};

} // namespace kvwb::ui
