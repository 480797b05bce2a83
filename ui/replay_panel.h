// The Replay panel: the replay ledgers stored in an experiment file (`kvwb replay --save-ledger`)
// with their per-tier summary, the live-style charts (hit rate per tier, false-hit rate, latency
// percentiles, tokens saved) and the per-request ledger, filterable by tier, tenant, model, false
// hits and free text.
//
// GUI-thread only; shows an immutable ExperimentSnapshot. appendRows() takes rows in batches, so
// the same panel can follow a replay as it runs.
#pragma once

#include "ui/experiment_snapshot.h"

#include <QWidget>

#include <memory>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QTableView;

namespace kvwb::ui {

class LedgerFilterModel;
class LedgerModel;
class ReplayCharts;

class ReplayPanel : public QWidget
{
    Q_OBJECT

public:
    explicit ReplayPanel(QWidget *parent = nullptr);

    void setSnapshot(std::shared_ptr<const ExperimentSnapshot> snapshot);
    void showLedger(int index);
    void appendRows(const std::vector<core::LedgerRow> &rows); // a batch, e.g. every 100 ms

    ReplayCharts *charts() const { return m_charts; }
    LedgerModel *ledger() const { return m_ledger; }
    LedgerFilterModel *filter() const { return m_filter; }
    QString summaryText() const;

private:
    void refreshSummary();

    std::shared_ptr<const ExperimentSnapshot> m_snapshot;
    QComboBox *m_ledgers = nullptr;
    QLabel *m_summary = nullptr;
    ReplayCharts *m_charts = nullptr;
    LedgerModel *m_ledger = nullptr;
    LedgerFilterModel *m_filter = nullptr;
    QTableView *m_view = nullptr;
    QComboBox *m_tier = nullptr;
    QLineEdit *m_tenant = nullptr;
    QComboBox *m_model = nullptr;
    QCheckBox *m_falseOnly = nullptr;
    QLineEdit *m_search = nullptr;
};

} // namespace kvwb::ui
