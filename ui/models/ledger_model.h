// Table model over a replay ledger (core::LedgerRow, one row per request), filled in batches while
// a replay streams: appendRows inserts a whole batch with one beginInsertRows/endInsertRows pair, so
// views and proxies do one layout pass per batch, not per row (a replay yields ~1000 rows/s).
//
// GUI-thread only (a QAbstractTableModel). Holds copies of the rows it shows.
#pragma once

#include "core/ledger/replay_ledger.h"

#include <QAbstractTableModel>

#include <unordered_map>
#include <vector>

namespace kvwb::ui {

class LedgerModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    enum Column
    {
        RequestColumn = 0,
        TenantColumn,
        ModelColumn,
        IntentColumn,
        QuestionColumn, // the request's question (one line; the whole text in its tooltip)
        AnsweredByColumn,
        AnswerColumn, // the answer it got: for a response hit, the cached answer served
        ExactColumn,  // hit/miss per tier; empty when the tier is not in the stack
        SemanticColumn,
        PrefixColumn,
        CrossColumn,
        KnowledgeColumn,
        FalseHitColumn,
        PromptTokensColumn,
        ReusedColumn,
        ComputedColumn,
        TtftColumn,
        TotalColumn,
        GateColumn,
        NodeColumn, // the knowledge tier's path: node, verdict, module, profile
        ShadowColumn,
        ColumnCount
    };
    // Qt::UserRole on any cell: a value that sorts the column meaningfully (numbers as numbers,
    // tier hits as 1/0/-1), for QSortFilterProxyModel::setSortRole.
    static constexpr int SortRole = Qt::UserRole;

    explicit LedgerModel(QObject *parent = nullptr);

    void appendRows(const std::vector<core::LedgerRow> &rows);
    void setRows(std::vector<core::LedgerRow> rows); // a model reset
    void clear();

    const core::LedgerRow &row(int index) const { return m_rows[size_t(index)]; }
    const std::vector<core::LedgerRow> &rows() const { return m_rows; }

    // The row of request `requestId`, or -1 (the first such row: a workload's ids are unique).
    int rowOfRequest(int64_t requestId) const;
    // Everything the ledger holds about row `index`, as HTML for the Replay step's detail pane: the
    // question and the answer whole, where a hit came from (the cached request's question, when that
    // request is in this ledger), each tier's verdict, the guard, the gate, the knowledge path, the
    // tokens and the times.
    QString detailHtml(int index) const;
    // The columns a new view shows (the others are one right-click away): request, tenant, model,
    // intent, question, answered by, answer, false hit, prompt tokens, reused, TTFT.
    static bool shownByDefault(int column);

    // The tier a hit/miss column shows, or std::nullopt for other columns.
    static std::optional<core::TierKind> tierOfColumn(int column);

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<core::LedgerRow> m_rows;
    mutable std::unordered_map<int64_t, int> m_rowOfRequest; // built on first use; cleared on change
};

} // namespace kvwb::ui
