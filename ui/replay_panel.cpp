#include "ui/replay_panel.h"

#include "ui/ledger_filter_model.h"
#include "ui/ledger_model.h"
#include "ui/replay_charts.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

namespace kvwb::ui {

ReplayPanel::ReplayPanel(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QVBoxLayout(this);
    auto *top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Ledger:"), this));
    m_ledgers = new QComboBox(this);
    m_ledgers->setObjectName("ledgerCombo");
    top->addWidget(m_ledgers, 1);
    layout->addLayout(top);
    m_summary =
        new QLabel(tr("Open an experiment file with replay ledgers (`kvwb replay ... --experiment EXP.h5 "
                      "--save-ledger NAME`)."),
                   this);
    m_summary->setObjectName("replaySummary");
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    layout->addWidget(m_summary);

    auto *split = new QSplitter(Qt::Vertical, this);
    m_charts = new ReplayCharts(split);
    auto *tablePart = new QWidget(split);
    auto *tableLayout = new QVBoxLayout(tablePart);
    auto *filters = new QHBoxLayout;
    filters->addWidget(new QLabel(tr("Answered by:"), tablePart));
    m_tier = new QComboBox(tablePart);
    m_tier->setObjectName("tierFilter");
    m_tier->addItem(tr("any"), -1);
    for (auto t : {core::TierKind::None, core::TierKind::Exact, core::TierKind::Semantic,
                   core::TierKind::Prefix, core::TierKind::Cross})
        m_tier->addItem(t == core::TierKind::None ? tr("miss (model ran)") : core::tierKindName(t), int(t));
    filters->addWidget(m_tier);
    filters->addWidget(new QLabel(tr("Tenant:"), tablePart));
    m_tenant = new QLineEdit(tablePart);
    m_tenant->setPlaceholderText(tr("any"));
    filters->addWidget(m_tenant);
    filters->addWidget(new QLabel(tr("Model:"), tablePart));
    m_model = new QComboBox(tablePart);
    m_model->addItems({tr("any"), "a", "b"});
    filters->addWidget(m_model);
    m_falseOnly = new QCheckBox(tr("false hits only"), tablePart);
    m_falseOnly->setObjectName("falseHitsOnly");
    filters->addWidget(m_falseOnly);
    m_search = new QLineEdit(tablePart);
    m_search->setPlaceholderText(tr("search tenant or intent"));
    filters->addWidget(m_search, 1);
    tableLayout->addLayout(filters);
    m_ledger = new LedgerModel(this);
    m_filter = new LedgerFilterModel(this);
    m_filter->setLedgerModel(m_ledger);
    m_view = new QTableView(tablePart);
    m_view->setObjectName("ledgerView");
    m_view->setModel(m_filter);
    m_view->setSortingEnabled(true);
    m_view->verticalHeader()->hide();
    tableLayout->addWidget(m_view, 1);
    split->addWidget(m_charts);
    split->addWidget(tablePart);
    layout->addWidget(split, 1);

    connect(m_ledgers, &QComboBox::currentIndexChanged, this, &ReplayPanel::showLedger);
    connect(m_tier, &QComboBox::currentIndexChanged, this, [this] {
        const int t = m_tier->currentData().toInt();
        m_filter->setAnsweredBy(t < 0 ? std::nullopt : std::optional<core::TierKind>(core::TierKind(t)));
    });
    connect(m_tenant, &QLineEdit::textChanged, m_filter, &LedgerFilterModel::setTenant);
    connect(m_model, &QComboBox::currentIndexChanged, this,
            [this](int i) { m_filter->setModelName(i == 0 ? QString() : m_model->currentText()); });
    connect(m_falseOnly, &QCheckBox::toggled, m_filter, &LedgerFilterModel::setFalseHitsOnly);
    connect(m_search, &QLineEdit::textChanged, m_filter, &LedgerFilterModel::setSearchText);
}

void ReplayPanel::setSnapshot(std::shared_ptr<const ExperimentSnapshot> snapshot)
{
    m_snapshot = std::move(snapshot);
    const QSignalBlocker block(m_ledgers);
    m_ledgers->clear();
    if (m_snapshot)
        for (const auto &[name, rows] : m_snapshot->ledgers)
            m_ledgers->addItem(
                QString("%1 (%2 requests)").arg(QString::fromStdString(name)).arg(rows.size()));
    showLedger(m_ledgers->count() > 0 ? 0 : -1);
}

void ReplayPanel::showLedger(int index)
{
    m_charts->clear();
    m_ledger->clear();
    if (m_snapshot && index >= 0 && index < int(m_snapshot->ledgers.size())) {
        m_ledgers->setCurrentIndex(index);
        appendRows(m_snapshot->ledgers[size_t(index)].second);
    } else {
        refreshSummary();
    }
}

void ReplayPanel::appendRows(const std::vector<core::LedgerRow> &rows)
{
    m_charts->addRows(rows);
    m_ledger->appendRows(rows);
    refreshSummary();
}

void ReplayPanel::refreshSummary()
{
    if (m_ledger->rowCount() == 0) {
        if (m_snapshot)
            m_summary->setText(
                tr("%1 holds no replay ledger yet: `kvwb replay --experiment %1 --save-ledger NAME`.")
                    .arg(m_snapshot->path));
        return;
    }
    const auto s = core::summarize(m_ledger->rows());
    QString tiers;
    for (const auto &[kind, agg] : s.tiers)
        tiers +=
            QString("<tr><td>%1</td><td align=right>%2</td><td align=right>%3</td><td align=right>%4</td>"
                    "<td align=right>%5</td><td align=right>%6</td></tr>")
                .arg(kind == core::TierKind::None ? tr("miss") : core::tierKindName(kind))
                .arg(agg.requests)
                .arg(agg.hits)
                .arg(agg.falseHits)
                .arg(agg.tokensReused)
                .arg(agg.ttftMsP50, 0, 'f', 2);
    m_summary->setText(
        tr("<b>%1 requests</b>: hit rate %2 (by tokens %3), false-hit rate %4, TTFT p50 %5 ms / p95 "
           "%6 ms, cost $%7 vs $%8 without caching."
           "<table cellspacing=6><tr><th align=left>tier</th><th>requests</th><th>hits</th>"
           "<th>false hits</th><th>tokens reused</th><th>TTFT p50 ms</th></tr>%9</table>")
            .arg(s.requests)
            .arg(s.hitRate, 0, 'f', 3)
            .arg(s.tokenHitRate, 0, 'f', 3)
            .arg(s.falseHitRate, 0, 'f', 3)
            .arg(s.ttftMsP50, 0, 'f', 2)
            .arg(s.ttftMsP95, 0, 'f', 2)
            .arg(s.costUsd, 0, 'f', 4)
            .arg(s.costUsdNoCache, 0, 'f', 4)
            .arg(tiers));
}

QString ReplayPanel::summaryText() const
{
    return m_summary->text();
}

} // namespace kvwb::ui
