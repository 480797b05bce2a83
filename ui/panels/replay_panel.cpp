#include "ui/panels/replay_panel.h"
#include "ui/panels/job_progress.h"

#include "core/cache/store_payload.h"

#include "core/ledger/prices.h"
#include "core/model/encoder_config.h"

#include "ui/charts/replay_charts.h"
#include "ui/charts/threshold_curve_chart.h"
#include "ui/models/ledger_filter_model.h"
#include "ui/models/ledger_model.h"

#include <cmath>

#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace kvwb::ui {

namespace {

constexpr int LiveEntry = -1; // ledger combo item data of the live replay; stored ledgers: their index

// The gate passes when tail_kl or nll <= threshold, or kv_cos or attn_cos >= threshold
// (docs/transfer.md).
double defaultGateThreshold(const QString &signal)
{
    return core::defaultGateThreshold(
        core::parseGateSignal(signal.toStdString()).value_or(core::GateSignal::TailKl));
}

} // namespace

ReplayPanel::ReplayPanel(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QVBoxLayout(this);
    buildRunGroup(layout);
    auto *top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Ledger:"), this));
    m_ledgers = new QComboBox(this);
    m_ledgers->setObjectName("ledgerCombo");
    m_ledgers->setToolTip(
        tr("The replay shown: a ledger stored in the experiment file, or the replay run here (live)."));
    top->addWidget(m_ledgers, 3);
    top->addWidget(new QLabel(tr("beside it:"), this));
    m_beside = new QComboBox(this);
    m_beside->setObjectName("besideLedgerCombo");
    m_beside->setToolTip(
        tr("A second replay drawn over the charts (dotted) and summarised beside the shown "
           "one, with the differences: two tier stacks, thresholds or workloads side by side."));
    top->addWidget(m_beside, 2);
    layout->addLayout(top);
    m_summary = new QLabel(tr("Run a replay above, or open an experiment file with replay ledgers (`kvwb "
                              "replay ... --experiment EXP.h5 --save-ledger NAME`)."),
                           this);
    m_summary->setObjectName("replaySummary");
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_summary->setToolTip(tr("The replay shown, overall and per tier (a miss means the model ran)."));

    // Two tabs under the ledger combo: the charts with the per-tier summary, and the requests, which
    // get the page's whole height for the table and its detail pane.
    m_tabs = new QTabWidget(this);
    m_tabs->setObjectName("replayTabs");
    m_tabs->setDocumentMode(true);
    auto *split = new QSplitter(Qt::Vertical, m_tabs);
    m_charts = new ReplayCharts(split);
    auto *summaryScroll = new QScrollArea(split);
    summaryScroll->setWidget(m_summary);
    summaryScroll->setWidgetResizable(true);
    summaryScroll->setFrameShape(QFrame::NoFrame);
    split->addWidget(m_charts);
    split->addWidget(summaryScroll);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 1);
    m_tabs->addTab(split, tr("Charts"));
    m_tabs->addTab(buildRequestsTab(), tr("Requests"));
    layout->addWidget(m_tabs, 1);

    connect(m_ledgers, &QComboBox::currentIndexChanged, this, &ReplayPanel::showLedger);
    connect(m_beside, &QComboBox::currentIndexChanged, this, &ReplayPanel::showBeside);
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

QWidget *ReplayPanel::buildRequestsTab()
{
    auto *tablePart = new QWidget(this);
    auto *tableLayout = new QVBoxLayout(tablePart);
    tableLayout->setContentsMargins(0, 4, 0, 0);
    auto *filters = new QHBoxLayout;
    filters->addWidget(new QLabel(tr("Answered by:"), tablePart));
    m_tier = new QComboBox(tablePart);
    m_tier->setObjectName("tierFilter");
    m_tier->addItem(tr("any"), -1);
    for (auto t : {core::TierKind::None, core::TierKind::Exact, core::TierKind::Semantic,
                   core::TierKind::Prefix, core::TierKind::Cross, core::TierKind::Knowledge})
        m_tier->addItem(t == core::TierKind::None ? tr("miss (model ran)") : core::tierKindName(t), int(t));
    m_tier->setToolTip(tr("Show only the requests this tier answered (or the misses, where the model ran)."));
    filters->addWidget(m_tier);
    filters->addWidget(new QLabel(tr("Tenant:"), tablePart));
    m_tenant = new QLineEdit(tablePart);
    m_tenant->setPlaceholderText(tr("any"));
    m_tenant->setToolTip(tr("Show only the requests of this tenant."));
    m_tenant->setMaximumWidth(120);
    filters->addWidget(m_tenant);
    filters->addWidget(new QLabel(tr("Model:"), tablePart));
    m_model = new QComboBox(tablePart);
    m_model->addItems({tr("any"), "a", "b"});
    m_model->setToolTip(tr("Show only the requests sent to model A or model B."));
    filters->addWidget(m_model);
    m_falseOnly = new QCheckBox(tr("false hits only"), tablePart);
    m_falseOnly->setObjectName("falseHitsOnly");
    m_falseOnly->setToolTip(tr("Show only cached answers given to a request of another intent."));
    filters->addWidget(m_falseOnly);
    m_search = new QLineEdit(tablePart);
    m_search->setObjectName("ledgerSearch");
    m_search->setPlaceholderText(tr("search questions, answers, tenants, intents"));
    m_search->setToolTip(
        tr("Show only the requests whose question, answer, tenant or intent contains this text."));
    m_search->setClearButtonEnabled(true);
    filters->addWidget(m_search, 1);
    m_rowCount = new QLabel(tablePart);
    m_rowCount->setObjectName("ledgerRowCount");
    m_rowCount->setMinimumWidth(
        m_rowCount->fontMetrics().horizontalAdvance(tr("%1 of %2 rows").arg(99999).arg(99999)));
    filters->addWidget(m_rowCount);
    m_export = new QPushButton(tr("Export rows..."), tablePart);
    m_export->setObjectName("exportLedgerButton");
    m_export->setToolTip(tr("Write the rows shown (filtered and sorted as here) to a CSV file: every ledger "
                            "column, the question and the answer included."));
    filters->addWidget(m_export);
    tableLayout->addLayout(filters);

    m_ledger = new LedgerModel(this);
    m_filter = new LedgerFilterModel(this);
    m_filter->setLedgerModel(m_ledger);
    const auto countRows = [this] {
        const int shown = m_filter->rowCount(), all = m_ledger->rowCount();
        m_rowCount->setText(shown == all ? tr("%1 rows").arg(all) : tr("%1 of %2 rows").arg(shown).arg(all));
        m_export->setEnabled(shown > 0);
    };
    for (auto *m :
         {static_cast<QAbstractItemModel *>(m_filter), static_cast<QAbstractItemModel *>(m_ledger)}) {
        connect(m, &QAbstractItemModel::rowsInserted, this, countRows);
        connect(m, &QAbstractItemModel::rowsRemoved, this, countRows);
        connect(m, &QAbstractItemModel::modelReset, this, countRows);
        connect(m, &QAbstractItemModel::layoutChanged, this, countRows);
    }
    countRows();

    auto *split = new QSplitter(Qt::Horizontal, tablePart);
    m_view = new QTableView(split);
    m_view->setObjectName("ledgerView");
    m_view->setModel(m_filter);
    m_view->setSortingEnabled(true);
    m_view->sortByColumn(LedgerModel::RequestColumn, Qt::AscendingOrder);
    m_view->verticalHeader()->hide();
    m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 6);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->setWordWrap(false);
    m_view->setTextElideMode(Qt::ElideRight);
    auto *header = m_view->horizontalHeader();
    for (int c = 0; c < LedgerModel::ColumnCount; ++c)
        m_view->setColumnHidden(c, !LedgerModel::shownByDefault(c));
    header->setSectionResizeMode(QHeaderView::Interactive);
    // Columns as wide as their titles (room for the sort arrow), the text columns wider.
    for (int c = 0; c < LedgerModel::ColumnCount; ++c)
        header->resizeSection(
            c,
            header->fontMetrics().horizontalAdvance(m_ledger->headerData(c, Qt::Horizontal).toString()) + 40);
    header->resizeSection(LedgerModel::TenantColumn, 90);
    header->resizeSection(LedgerModel::IntentColumn, 110);
    header->resizeSection(LedgerModel::QuestionColumn, 260);
    header->resizeSection(LedgerModel::AnswerColumn, 300);
    header->setContextMenuPolicy(Qt::CustomContextMenu);
    header->setToolTip(tr("Click to sort; right-click to choose the columns shown."));
    connect(header, &QWidget::customContextMenuRequested, this, &ReplayPanel::chooseColumns);
    m_detail = new QTextBrowser(split);
    m_detail->setObjectName("ledgerDetail");
    m_detail->setOpenLinks(false);
    m_detail->setPlaceholderText(tr("Select a request to see its question, its answer, where a hit came from "
                                    "and every tier's verdict."));
    split->addWidget(m_view);
    split->addWidget(m_detail);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    tableLayout->addWidget(split, 1);

    connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            &ReplayPanel::showDetail);
    connect(m_filter, &QAbstractItemModel::modelReset, this, &ReplayPanel::showDetail);
    connect(m_export, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Export the rows shown"),
                                                          m_ledgerName->text() + QStringLiteral("-rows.csv"),
                                                          tr("CSV files (*.csv)"));
        if (path.isEmpty())
            return;
        const QString error = exportShownRows(path);
        m_rowCount->setText(
            error.isEmpty()
                ? tr("%1 rows written to %2").arg(m_filter->rowCount()).arg(QFileInfo(path).fileName())
                : error);
    });
    return tablePart;
}

void ReplayPanel::chooseColumns(const QPoint &at)
{
    QMenu menu(this);
    for (int c = 0; c < LedgerModel::ColumnCount; ++c) {
        QAction *a = menu.addAction(m_ledger->headerData(c, Qt::Horizontal).toString());
        a->setCheckable(true);
        a->setChecked(!m_view->isColumnHidden(c));
        connect(a, &QAction::toggled, this, [this, c](bool on) { m_view->setColumnHidden(c, !on); });
    }
    menu.addSeparator();
    connect(menu.addAction(tr("Default columns")), &QAction::triggered, this, [this] {
        for (int c = 0; c < LedgerModel::ColumnCount; ++c)
            m_view->setColumnHidden(c, !LedgerModel::shownByDefault(c));
    });
    menu.exec(m_view->horizontalHeader()->mapToGlobal(at));
}

void ReplayPanel::showDetail()
{
    const QModelIndex current = m_view->currentIndex();
    if (!current.isValid()) {
        m_detail->clear();
        return;
    }
    m_detail->setHtml(m_ledger->detailHtml(m_filter->mapToSource(current).row()));
}

QString ReplayPanel::detailText() const
{
    return m_detail->toPlainText();
}

QString ReplayPanel::exportShownRows(const QString &path) const
{
    std::vector<core::LedgerRow> rows;
    rows.reserve(size_t(m_filter->rowCount()));
    for (int i = 0; i < m_filter->rowCount(); ++i)
        rows.push_back(m_ledger->row(m_filter->mapToSource(m_filter->index(i, 0)).row()));
    try {
        core::writeLedgerCsv(path.toStdString(), rows);
    } catch (const std::exception &e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

void ReplayPanel::setSnapshot(std::shared_ptr<const ExperimentSnapshot> snapshot)
{
    const bool wasLive = liveShown();
    m_snapshot = std::move(snapshot);
    {
        const QSignalBlocker block(m_ledgers);
        m_ledgers->clear();
        if (m_snapshot)
            for (size_t i = 0; i < m_snapshot->ledgers.size(); ++i)
                m_ledgers->addItem(QString("%1 (%2 requests)")
                                       .arg(QString::fromStdString(m_snapshot->ledgers[i].first))
                                       .arg(m_snapshot->ledgers[i].second.size()),
                                   int(i));
        // The live replay stays after the stored ledgers (stored ledger i stays at combo index i).
        if (m_hasLive)
            m_ledgers->addItem(tr("%1 (live)").arg(m_liveTitle), LiveEntry);
    }
    {
        const QString chosen = m_beside->currentText();
        const QSignalBlocker block(m_beside);
        m_beside->clear();
        m_beside->addItem(tr("(none)"), -2);
        if (m_snapshot) // the stored ledgers (a live replay is still changing)
            for (size_t i = 0; i < m_snapshot->ledgers.size(); ++i)
                m_beside->addItem(QString::fromStdString(m_snapshot->ledgers[i].first), int(i));
        m_beside->setCurrentIndex(std::max(0, m_beside->findText(chosen)));
    }
    showBeside(m_beside->currentIndex());
    if (wasLive) // a file re-read while following a replay keeps following it
        showLedger(liveComboIndex());
    else
        showLedger(m_ledgers->count() > 0 ? 0 : -1);
    refreshRunEnabled();
}

int ReplayPanel::liveComboIndex() const
{
    return m_ledgers->findData(LiveEntry);
}

bool ReplayPanel::liveShown() const
{
    return m_hasLive && m_ledgers->currentIndex() >= 0 && m_ledgers->currentIndex() == liveComboIndex();
}

void ReplayPanel::showLedger(int index)
{
    m_charts->clear();
    m_ledger->clear();
    if (index >= 0 && index < m_ledgers->count()) {
        const QSignalBlocker block(m_ledgers); // this is the slot of currentIndexChanged
        m_ledgers->setCurrentIndex(index);
    }
    const int stored = index >= 0 && index < m_ledgers->count() ? m_ledgers->itemData(index).toInt() : -2;
    if (stored == LiveEntry) {
        showRows(m_liveRows);
    } else if (m_snapshot && stored >= 0 && stored < int(m_snapshot->ledgers.size())) {
        showRows(m_snapshot->ledgers[size_t(stored)].second);
    } else {
        refreshSummary();
    }
}

void ReplayPanel::showBeside(int index)
{
    if (index >= 0 && index < m_beside->count() && m_beside->currentIndex() != index) {
        const QSignalBlocker block(m_beside);
        m_beside->setCurrentIndex(index);
    }
    const auto *rows = besideRows();
    m_charts->setReference(rows ? *rows : std::vector<core::LedgerRow>{}, besideName());
    refreshSummary();
}

const std::vector<core::LedgerRow> *ReplayPanel::besideRows() const
{
    const int stored = m_beside->currentIndex() > 0 ? m_beside->currentData().toInt() : -1;
    if (!m_snapshot || stored < 0 || stored >= int(m_snapshot->ledgers.size()))
        return nullptr;
    return &m_snapshot->ledgers[size_t(stored)].second;
}

QString ReplayPanel::besideName() const
{
    return besideRows() ? m_beside->currentText() : QString();
}

void ReplayPanel::appendRows(const std::vector<core::LedgerRow> &rows)
{
    if (m_hasLive) {
        // Rows of the live replay: kept even while a stored ledger is shown.
        m_liveRows.insert(m_liveRows.end(), rows.begin(), rows.end());
        if (!liveShown())
            return;
    }
    showRows(rows);
}

void ReplayPanel::showRows(const std::vector<core::LedgerRow> &rows)
{
    m_charts->addRows(rows);
    m_ledger->appendRows(rows);
    refreshSummary();
}

void ReplayPanel::refreshSummary()
{
    if (m_ledger->rowCount() == 0) {
        if (liveShown())
            m_summary->setText(
                tr("<b>%1</b>: waiting for the first requests...").arg(m_liveTitle.toHtmlEscaped()));
        else if (m_snapshot)
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
        tr("<b>%1 requests</b>%10: hit rate %2 (by tokens %3), false-hit rate %4, approximate hits %11 "
           "(never cached again), TTFT p50 %5 ms / p95 %6 ms, cost $%7 vs $%8 without caching."
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
            .arg(tiers)
            .arg(s.notServed > 0 ? tr(" (%1 more not served: too long for the model's context, or their "
                                      "worker died)")
                                       .arg(s.notServed)
                                 : QString())
            .arg(s.approximateHits));
    if (const auto *rows = besideRows())
        m_summary->setText(m_summary->text() + besideTable(s, core::summarize(*rows)));
}

QString ReplayPanel::besideTable(const core::LedgerSummary &shown, const core::LedgerSummary &other) const
{
    QString rows;
    const auto row = [&](const QString &what, double a, double b, int decimals) {
        const double d = a - b;
        rows += QStringLiteral("<tr><td>%1</td><td align=right>%2</td><td align=right>%3</td>"
                               "<td align=right>%4%5</td></tr>")
                    .arg(what)
                    .arg(a, 0, 'f', decimals)
                    .arg(b, 0, 'f', decimals)
                    .arg(d > 0 ? QStringLiteral("+") : QString())
                    .arg(d, 0, 'f', decimals);
    };
    row(tr("requests"), double(shown.requests), double(other.requests), 0);
    row(tr("hit rate"), shown.hitRate, other.hitRate, 3);
    row(tr("hit rate by tokens"), shown.tokenHitRate, other.tokenHitRate, 3);
    row(tr("false-hit rate"), shown.falseHitRate, other.falseHitRate, 3);
    row(tr("false hits"), double(shown.falseHits), double(other.falseHits), 0);
    row(tr("approximate hits"), double(shown.approximateHits), double(other.approximateHits), 0);
    row(tr("TTFT p50 ms"), shown.ttftMsP50, other.ttftMsP50, 2);
    row(tr("TTFT p95 ms"), shown.ttftMsP95, other.ttftMsP95, 2);
    row(tr("cost $"), shown.costUsd, other.costUsd, 4);
    row(tr("cost without caching $"), shown.costUsdNoCache, other.costUsdNoCache, 4);
    return tr("<p><b>Side by side</b> (the shown ledger minus '%1'; the same prices):</p>"
              "<table cellspacing=6><tr><th "
              "align=left></th><th>shown</th><th>%1</th><th>difference</th></tr>%2"
              "</table>")
        .arg(besideName().toHtmlEscaped(), rows);
}

QString ReplayPanel::summaryText() const
{
    return m_summary->text();
}

void ReplayPanel::buildRunGroup(QLayout *parent)
{
    auto *box = new QGroupBox(tr("Run a replay"), this);
    box->setObjectName("runGroup");
    auto *grid = new QGridLayout(box);
    addWorkloadRow(box, grid);
    addTierRow(box, grid);
    addGateRow(box, grid);
    addStoreRow(box, grid);
    addRunButtons(box, grid);
    grid->setColumnStretch(1, 2);
    grid->setColumnStretch(3, 1);
    grid->setColumnStretch(5, 1);
    parent->addWidget(box);
    connectRunGroup();
}

// Row 0: the workload and its file chooser.
void ReplayPanel::addWorkloadRow(QWidget *box, QGridLayout *grid)
{

    grid->addWidget(new QLabel(tr("Workload:"), box), 0, 0);
    m_workload = new QComboBox(box);
    m_workload->setObjectName("workloadCombo");
    m_workload->setEditable(true);
    m_workload->setInsertPolicy(QComboBox::NoInsert);
    m_workload->setMinimumContentsLength(30);
    m_workload->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_workload->lineEdit()->setPlaceholderText(tr("workload.jsonl (one request per line)"));
    m_workload->setToolTip(tr(
        "The requests to replay: a JSONL workload with one request (tenant, model, prompt, ...) per line."));
    m_browse = new QPushButton(tr("Browse..."), box);
    m_browse->setObjectName("browseWorkloadButton");
    m_browse->setToolTip(tr("Choose a workload file on disk."));
    grid->addWidget(m_workload, 0, 1, 1, 5);
    grid->addWidget(m_browse, 0, 6);
}

// Row 1: the tiers in lookup order, the semantic threshold, the embedder and its sweep.
void ReplayPanel::addTierRow(QWidget *box, QGridLayout *grid)
{

    auto *tiersLabel = new QLabel(tr("Tiers:"), box);
    tiersLabel->setToolTip(
        tr("In lookup order: a request goes through the checked tiers until one answers."));
    grid->addWidget(tiersLabel, 1, 0);
    auto *tiers = new QHBoxLayout;
    tiers->setSpacing(4); // six boxes in the room of the row below at 1366 px
    m_exact = new QCheckBox(tr("exact"), box);
    m_exact->setObjectName("tierExact");
    m_exact->setToolTip(tr("Exact: answer a request seen before, word for word, from the response cache."));
    m_semantic = new QCheckBox(tr("semantic"), box);
    m_semantic->setObjectName("tierSemantic");
    m_semantic->setToolTip(
        tr("Semantic: answer with the cached response of a similar enough request (may give false hits)."));
    m_prefix = new QCheckBox(tr("prefix"), box);
    m_prefix->setObjectName("tierPrefix");
    m_prefix->setToolTip(tr("Prefix: reuse the same model's KV cache for the longest shared prompt prefix."));
    m_cross = new QCheckBox(tr("cross"), box);
    m_cross->setObjectName("tierCross");
    m_knowledge = new QCheckBox(tr("knowledge"), box);
    m_knowledge->setObjectName("tierKnowledge");
    m_guards = new QCheckBox(tr("guards"), box);
    m_guards->setObjectName("guardsCheck");
    m_guards->setChecked(true);
    m_guards->setToolTip(tr("Hold back a semantic candidate whose question differs from the cached one in a "
                            "negation or opposite, a number, a named entity or the question word "
                            "(docs/cache-tiers.md); the ledger says which guard held it."));
    // the guards belong to the semantic tier: beside it
    for (QCheckBox *c : {m_exact, m_semantic, m_guards, m_prefix, m_cross, m_knowledge})
        tiers->addWidget(c);
    tiers->addStretch(1);
    grid->addLayout(tiers, 1, 1);
    grid->addWidget(new QLabel(tr("Similarity threshold:"), box), 1, 2);
    m_threshold = new QDoubleSpinBox(box);
    m_threshold->setObjectName("semanticThresholdSpin");
    m_threshold->setRange(0, 1);
    m_threshold->setDecimals(2);
    m_threshold->setSingleStep(0.05);
    m_threshold->setToolTip(
        tr("The semantic tier answers when the cosine similarity to a cached request is at least this."));
    m_errorBound = new QDoubleSpinBox(box);
    m_errorBound->setObjectName("errorBoundSpin");
    m_errorBound->setRange(0, 0.5);
    m_errorBound->setDecimals(3);
    m_errorBound->setSingleStep(0.01);
    m_errorBound->setSpecialValueText(tr("no bound"));
    m_errorBound->setPrefix(tr("bound "));
    m_errorBound->setToolTip(
        tr("Per-entry thresholds: each cached answer serves only while its estimated error "
           "rate stays under this bound; the threshold becomes a floor. 'no bound': one "
           "global threshold."));
    m_sweep = new QPushButton(tr("Sweep..."), box);
    m_sweep->setObjectName("sweepButton");
    m_sweep->setToolTip(
        tr("Precision, recall and false-hit rate of the semantic tier against its threshold on "
           "this workload's intent labels, with the embedder chosen here; pick a threshold from "
           "it."));
    auto *thresholdRow = new QHBoxLayout;
    thresholdRow->setSpacing(2);
    thresholdRow->addWidget(m_threshold);
    thresholdRow->addWidget(m_errorBound);
    grid->addLayout(thresholdRow, 1, 3);
    grid->addWidget(new QLabel(tr("Embedder:"), box), 1, 4);
    m_embedder = new QComboBox(box);
    m_embedder->setObjectName("embedderCombo");
    m_embedder->addItems({"lexical", "lexical-idf", "model"});
    m_embedder->setItemData(0, tr("Hashed word and character features: fast, no model needed."),
                            Qt::ToolTipRole);
    m_embedder->setItemData(
        1, tr("The same features weighted by how rare they are in the workload's questions."),
        Qt::ToolTipRole);
    m_embedder->setItemData(2, tr("Model A's hidden states: slower, closer to meaning."), Qt::ToolTipRole);
    m_embedder->addItem(tr("Other model..."));
    m_embedder->setItemData(3,
                            tr("A sentence-embedding model of your own: a sentence-transformers directory "
                               "(pick its config.json; all-MiniLM, bge, gte, e5), a bert GGUF file, or a "
                               "decoder embedder such as Qwen3-Embedding."),
                            Qt::ToolTipRole);
    m_embedder->addItem(tr("Train on pairs..."));
    m_embedder->setItemData(4,
                            tr("Train an embedder on labelled question pairs (your own logs, or a public "
                               "paraphrase set): a new encoder or the chosen one fine-tuned, judged on a "
                               "held-out share (kvwb train-embedder --pairs)."),
                            Qt::ToolTipRole);
    m_embedder->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_embedder->setMinimumContentsLength(10);
    m_embedder->setToolTip(tr("How the semantic tier turns a request into a vector: lexical features, "
                              "model A's hidden states, or a sentence-embedding model."));
    connect(m_embedder, &QComboBox::activated, this, [this](int index) {
        if (index == m_embedder->count() - 1) { // Train on pairs...
            selectEmbedder(m_lastEmbedder);
            openTrainEmbedderDialog();
            return;
        }
        m_embedderNote.clear(); // another embedder: the trained one's scores are not its
        if (index != m_embedder->count() - 2) {
            m_lastEmbedder = embedderSpec();
            return;
        }
        const QString file =
            QFileDialog::getOpenFileName(this, tr("Sentence-embedding model"), QString(),
                                         tr("Embedding models (config.json *.gguf);;All files (*)"));
        if (file.isEmpty()) {
            selectEmbedder(m_lastEmbedder);
            return;
        }
        const QFileInfo info(file);
        selectEmbedder(info.fileName() == "config.json" ? info.absolutePath() : info.absoluteFilePath());
    });
    grid->addWidget(m_embedder, 1, 5);
    grid->addWidget(m_sweep, 1, 6);
}

// Row 2: the cross tier's gate, max tokens and the request limit.
void ReplayPanel::addGateRow(QWidget *box, QGridLayout *grid)
{

    m_gate = new QCheckBox(tr("Quality gate"), box);
    m_gate->setObjectName("gateCheck");
    m_gate->setToolTip(
        tr("Before using a converted (cross) cache, let model B recompute the prompt's tail and reject the "
           "cache when the signal crosses the threshold."));
    grid->addWidget(m_gate, 2, 0);
    auto *gateRow = new QHBoxLayout;
    gateRow->addWidget(new QLabel(tr("signal:"), box));
    m_gateSignal = new QComboBox(box);
    m_gateSignal->setObjectName("gateSignalCombo");
    m_gateSignal->addItems({"tail_kl", "kv_cos", "nll", "attn_cos"});
    m_gateSignal->setItemData(
        0, tr("KL of B's next-token distribution, tail recomputed vs converted; passes <= T."),
        Qt::ToolTipRole);
    m_gateSignal->setItemData(1, tr("Cosine of B's own tail K/V to the converted K/V; passes >= T."),
                              Qt::ToolTipRole);
    m_gateSignal->setItemData(2, tr("B's mean negative log-likelihood of the tail tokens; passes <= T."),
                              Qt::ToolTipRole);
    m_gateSignal->setItemData(3,
                              tr("Cosine of B's attention output on the tail over its own K/V to that over "
                                 "the converted K/V; passes >= T."),
                              Qt::ToolTipRole);
    m_gateSignal->setToolTip(
        tr("What the gate measures: tail_kl and nll pass below the threshold, kv_cos and attn_cos above it "
           "(choosing one resets the threshold to its default)."));
    gateRow->addWidget(m_gateSignal);
    gateRow->addWidget(new QLabel(tr("threshold:"), box));
    m_gateThreshold = new QDoubleSpinBox(box);
    m_gateThreshold->setObjectName("gateThresholdSpin");
    m_gateThreshold->setRange(0, 1000);
    m_gateThreshold->setDecimals(3);
    m_gateThreshold->setSingleStep(0.05);
    m_gateThreshold->setToolTip(tr(
        "The gate's limit for the chosen signal (defaults: tail_kl 0.1, kv_cos and attn_cos 0.9, nll 3)."));
    gateRow->addWidget(m_gateThreshold);
    m_crossRecompute = new QDoubleSpinBox(box);
    m_crossRecompute->setPrefix(tr("recompute "));
    m_crossRecompute->setObjectName("crossRecomputeSpin");
    m_crossRecompute->setRange(0, 1);
    m_crossRecompute->setDecimals(2);
    m_crossRecompute->setSingleStep(0.05);
    m_crossRecompute->setToolTip(tr("Cross tier: the share of the converted prefix B recomputes itself (half "
                                    "the first positions, half the last); 0 takes it all converted."));
    gateRow->addWidget(m_crossRecompute);
    gateRow->setSpacing(4);
    gateRow->addStretch(1);
    grid->addLayout(gateRow, 2, 1);
    grid->addWidget(new QLabel(tr("Max tokens:"), box), 2, 2);
    m_maxTokens = new QSpinBox(box);
    m_maxTokens->setObjectName("replayMaxTokensSpin");
    m_maxTokens->setRange(0, 1 << 20);
    m_maxTokens->setSpecialValueText(tr("per request"));
    m_maxTokens->setToolTip(tr("Tokens to generate per request; 0 keeps each request's own max_tokens."));
    grid->addWidget(m_maxTokens, 2, 3);
    grid->addWidget(new QLabel(tr("Limit:"), box), 2, 4);
    m_limit = new QSpinBox(box);
    m_limit->setObjectName("replayLimitSpin");
    m_limit->setRange(0, 1 << 24);
    m_limit->setSpecialValueText(tr("all requests"));
    m_limit->setSuffix(tr(" requests"));
    m_limit->setToolTip(tr("Replay only the first N requests; 0 replays them all."));
    grid->addWidget(m_limit, 2, 5, 1, 2);
}

// Row 3: the ledger's name, the shared store and the price preset.
void ReplayPanel::addStoreRow(QWidget *box, QGridLayout *grid)
{
    grid->addWidget(new QLabel(tr("Store ledger as:"), box), 3, 0);
    m_ledgerName = new QLineEdit(box);
    m_ledgerName->setObjectName("ledgerNameEdit");
    m_ledgerName->setPlaceholderText(tr("(don't store)"));
    m_ledgerName->setToolTip(
        tr("Store the per-request ledger under this name in the experiment file; leave empty to keep it "
           "only on screen."));
    m_verifier = new QComboBox(box);
    m_verifier->setObjectName("verifierCombo");
    m_verifier->addItem(tr("no verifier"));
    m_verifier->addItem(tr("Other verifier..."));
    m_verifier->addItem(tr("Train verifier..."));
    m_verifier->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_verifier->setMinimumContentsLength(10);
    m_verifier->setToolTip(
        tr("A cross-encoder that reads the cached question and the request's together and "
           "lets a semantic candidate serve only when it agrees (at the threshold its "
           "training measured for precision 0.9); a failure computes the request instead."));
    connect(m_verifier, &QComboBox::activated, this, [this](int index) {
        const int n = m_verifier->count();
        if (index == n - 1) { // Train verifier...
            selectVerifier(m_lastVerifier);
            openTrainEmbedderDialog(true);
        } else if (index == n - 2) { // Other verifier...
            const QString file =
                QFileDialog::getOpenFileName(this, tr("Cross-encoder verifier"), QString(),
                                             tr("Model config (config.json);;All files (*)"));
            selectVerifier(file.isEmpty() ? m_lastVerifier : QFileInfo(file).absolutePath());
        } else {
            m_lastVerifier = verifierSpec();
        }
        refreshRunEnabled(); // the verifier's threshold is for a chosen verifier
        inputChanged();
    });
    m_verifierThreshold = new QDoubleSpinBox(box);
    m_verifierThreshold->setObjectName("verifierThresholdSpin");
    m_verifierThreshold->setRange(0, 1);
    m_verifierThreshold->setDecimals(2);
    m_verifierThreshold->setSingleStep(0.05);
    m_verifierThreshold->setSpecialValueText(tr("its own"));
    m_verifierThreshold->setToolTip(
        tr("The verifier's score a candidate needs to serve. 'its own': the threshold its training "
           "measured for precision 0.9 (else 0.5). Sweep... measures it on this workload."));
    auto *ledgerRow = new QHBoxLayout;
    ledgerRow->setSpacing(4);
    ledgerRow->addWidget(m_ledgerName, 1);
    ledgerRow->addWidget(new QLabel(tr("Verifier:"), box));
    ledgerRow->addWidget(m_verifier, 1);
    ledgerRow->addWidget(m_verifierThreshold);
    grid->addLayout(ledgerRow, 3, 1);
    grid->addWidget(new QLabel(tr("Shared store:"), box), 3, 2);
    m_store = new QLineEdit(box);
    m_store->setObjectName("storeEdit");
    m_store->setPlaceholderText(tr("(this process)"));
    m_store->setToolTip(tr("Keep the exact and semantic entries and the prefix KV blocks in a shared store: "
                           "redis://HOST:PORT[/DB] (a server other replays and a fleet share) or memory. "
                           "Empty: the tiers keep their entries in the engine's process."));
    m_storeKvDtype = new QComboBox(box);
    m_storeKvDtype->setObjectName("storeKvDtypeCombo");
    m_storeKvDtype->addItems({"f32", "bf16", "f16"});
    m_storeKvDtype->setToolTip(
        tr("What the prefix KV blocks travel and are kept as in the shared store: f32, or "
           "bf16 / f16 (half the bytes, values rounded; docs/fleet.md)."));
    auto *storeRow = new QHBoxLayout;
    storeRow->setContentsMargins(0, 0, 0, 0);
    storeRow->addWidget(m_store, 1);
    storeRow->addWidget(m_storeKvDtype);
    grid->addLayout(storeRow, 3, 3);
    grid->addWidget(new QLabel(tr("Prices:"), box), 3, 4);
    m_prices = new QComboBox(box);
    m_prices->setObjectName("pricesCombo");
    m_prices->setEditable(true);
    m_prices->addItem(QString());
    m_prices->setItemData(0, tr("USD 0.15 per 1M prompt tokens computed, 0.60 per 1M generated"),
                          Qt::ToolTipRole);
    for (const auto &preset : core::builtinPricePresets()) {
        m_prices->addItem(QString::fromStdString(preset.id));
        m_prices->setItemData(m_prices->count() - 1,
                              QString::fromStdString(preset.provider + " " + preset.model), Qt::ToolTipRole);
    }
    m_prices->lineEdit()->setPlaceholderText(tr("default"));
    m_prices->setToolTip(tr("What the ledger's tokens cost: a price preset (list prices of a provider, with "
                            "cached input, cache writes and storage; or a projected self-hosted GPU), a "
                            "presets file (FILE or FILE#ID), or empty for the default prices."));
    grid->addWidget(m_prices, 3, 5, 1, 2);
}

// Row 4: start, pause, stop, progress and the run's status.
void ReplayPanel::addRunButtons(QWidget *box, QGridLayout *grid)
{

    auto *buttons = new QHBoxLayout;
    m_start = new QPushButton(tr("Start"), box);
    m_start->setObjectName("startButton");
    m_start->setToolTip(tr("Replay the workload through the checked tiers with the loaded models."));
    m_pause = new QPushButton(tr("Pause"), box);
    m_pause->setObjectName("pauseButton");
    m_pause->setCheckable(true);
    m_pause->setToolTip(tr("Pause the replay after the current request; press again to resume."));
    m_stop = new QPushButton(tr("Stop"), box);
    m_stop->setObjectName("stopButton");
    m_stop->setToolTip(tr("Stop the replay; the requests replayed so far stay in the ledger."));
    m_progress = new QProgressBar(box);
    m_progress->setObjectName("replayProgress");
    m_progress->setRange(0, 1);
    m_progress->setValue(0);
    m_progress->setTextVisible(false);
    m_progress->setToolTip(tr("Requests replayed out of the workload's."));
    initJobProgress(m_progress);
    m_runStatus = new QLabel(box);
    m_runStatus->setObjectName("replayStatus");
    m_runStatus->setTextFormat(Qt::RichText);
    m_runStatus->setWordWrap(true);
    buttons->addWidget(m_start);
    buttons->addWidget(m_pause);
    buttons->addWidget(m_stop);
    buttons->addWidget(m_progress, 2);
    buttons->addWidget(m_runStatus, 3);
    grid->addLayout(buttons, 4, 0, 1, 7);
}

// The run controls' signals: start (with its checks), pause, stop, browse, the gate signal's own threshold.
void ReplayPanel::connectRunGroup()
{

    connect(m_sweep, &QPushButton::clicked, this, [this] { Q_EMIT sweepRequested(sweepRequest()); });
    setReplayRequest(core::ReplaySettings{});
    setCrossAvailable(false, {});
    setKnowledgeAvailable({}, {});

    connect(m_browse, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Workload"), m_workload->currentText(),
                                                          tr("Workloads (*.jsonl *.json);;All files (*)"));
        if (!path.isEmpty())
            m_workload->setCurrentText(path);
    });
    connect(m_gateSignal, &QComboBox::currentTextChanged, this,
            [this](const QString &signal) { m_gateThreshold->setValue(defaultGateThreshold(signal)); });
    connect(m_gate, &QCheckBox::toggled, this, [this] { refreshRunEnabled(); });
    connect(m_semantic, &QCheckBox::toggled, this, [this] { refreshRunEnabled(); });
    connect(m_store, &QLineEdit::textChanged, this, [this] { refreshRunEnabled(); });
    // an error shown stays only while its cause does
    connect(m_workload, &QComboBox::currentTextChanged, this, &ReplayPanel::inputChanged);
    connect(m_ledgerName, &QLineEdit::textChanged, this, &ReplayPanel::inputChanged);
    connect(m_store, &QLineEdit::textChanged, this, &ReplayPanel::inputChanged);
    for (QCheckBox *tier : {m_exact, m_semantic, m_prefix, m_cross, m_knowledge})
        connect(tier, &QCheckBox::toggled, this, &ReplayPanel::inputChanged);
    connect(m_start, &QPushButton::clicked, this, [this] {
        const core::ReplaySettings r = replayRequest();
        if (const QString refusal = startRefusal(); !refusal.isEmpty()) {
            setError(refusal);
            return;
        }
        m_errorShown = false;
        setBusy(true);
        m_embedderNote.clear();
        m_runStatus->setText(tr("Starting %1 through %2...")
                                 .arg(QString::fromStdString(r.workload).toHtmlEscaped(),
                                      r.tiers.empty()
                                          ? tr("no tiers: baseline (every request runs the model)")
                                          : tierNames(r.tiers).join(" \u2192 ")));
        Q_EMIT replayRequested(r);
    });
    connect(m_pause, &QPushButton::toggled, this, [this](bool paused) {
        m_pause->setText(paused ? tr("Resume") : tr("Pause"));
        Q_EMIT pauseRequested(paused);
    });
    connect(m_stop, &QPushButton::clicked, this, [this] {
        m_runStatus->setText(tr("Stopping after the current request..."));
        Q_EMIT stopRequested();
    });
    refreshRunEnabled();
}

void ReplayPanel::setWorkloads(const QStringList &paths)
{
    const QString typed = m_workload->currentText();
    const QSignalBlocker block(m_workload);
    m_workload->clear();
    m_workload->addItems(paths);
    m_workload->setCurrentText(typed.isEmpty() && !paths.isEmpty() ? paths.front() : typed);
}

core::ReplaySettings ReplayPanel::replayRequest() const
{
    core::ReplaySettings r = m_settings;
    r.workload = m_workload->currentText().trimmed().toStdString();
    r.experiment = m_snapshot ? m_snapshot->path.toStdString() : std::string();
    if (m_crossAvailable)
        r.converter = m_crossConverter.toStdString();
    r.tiers.clear();
    // The knowledge tier goes before the prefix tier: a request it can serve must not be answered
    // by the system prompt's prefix KV alone.
    for (auto [box, kind] : {std::pair<QCheckBox *, core::TierKind>{m_exact, core::TierKind::Exact},
                             {m_semantic, core::TierKind::Semantic},
                             {m_knowledge, core::TierKind::Knowledge},
                             {m_prefix, core::TierKind::Prefix},
                             {m_cross, core::TierKind::Cross}})
        if (box->isChecked() && (box != m_cross || m_crossAvailable) &&
            (box != m_knowledge || !m_knowledgeGraph.isEmpty())) // busy panels keep their tiers
            r.tiers.push_back(kind);
    r.knowledgeGraphs.clear();
    r.profiles.clear();
    if (r.uses(core::TierKind::Knowledge)) {
        r.knowledgeGraphs = {m_knowledgeGraph.toStdString()};
        r.profiles = m_knowledgeProfiles.toStdString();
    }
    r.threshold = m_threshold->value();
    r.embedder = embedderSpec().toStdString();
    r.verifier = verifierSpec().toStdString();
    // without a verifier its settings go too (a settings check refuses them alone)
    r.verifierThreshold = r.verifier.empty() ? 0 : m_verifierThreshold->value();
    r.verifierOverrulesGuards = !r.verifier.empty() && m_settings.verifierOverrulesGuards;
    r.gateSignal =
        core::parseGateSignal(m_gateSignal->currentText().toStdString()).value_or(core::GateSignal::TailKl);
    r.gateThreshold = m_gateThreshold->value();
    r.crossRecompute = m_crossRecompute->value();
    r.gate = m_gate->isChecked();
    r.maxTokens = m_maxTokens->value();
    r.limit = m_limit->value();
    r.ledgerName = m_ledgerName->text().trimmed().toStdString();
    r.store = m_store->text().trimmed().toStdString();
    // the KV blocks' type is the store's: without one they stay in this process in f32
    r.storeKvDtype = r.store.empty() ? core::FloatType::F32
                                     : core::parseFloatType(m_storeKvDtype->currentText().toStdString())
                                           .value_or(core::FloatType::F32);
    r.errorBound = m_errorBound->value();
    if (r.errorBound == 0) { // the bound's own settings go with it (a settings check refuses them alone)
        r.boundConfidence = core::ReplaySettings{}.boundConfidence;
        r.boundMinUses = core::ReplaySettings{}.boundMinUses;
        r.boundPrior.clear();
    }
    // the guards the settings name (every one unless a project chose some), or none
    r.guards = !m_guards->isChecked()    ? core::SemanticGuards{}
               : m_settings.guards.any() ? m_settings.guards
                                         : core::SemanticGuards::all();
    r.prices = m_prices->currentText().trimmed().toStdString();
    return r;
}

void ReplayPanel::setReplayRequest(const core::ReplaySettings &r)
{
    m_settings = r;
    m_workload->setCurrentText(QString::fromStdString(r.workload));
    m_exact->setChecked(r.uses(core::TierKind::Exact));
    m_semantic->setChecked(r.uses(core::TierKind::Semantic));
    m_prefix->setChecked(r.uses(core::TierKind::Prefix));
    m_cross->setChecked(r.uses(core::TierKind::Cross)); // kept while no converter is in use, then used
    m_knowledge->setChecked(r.uses(core::TierKind::Knowledge)); // kept while no graph is in use
    if (!r.knowledgeGraphs.empty())
        setKnowledgeAvailable(QString::fromStdString(r.knowledgeGraphs.front()),
                              QString::fromStdString(r.profiles));
    m_threshold->setValue(r.threshold);
    selectEmbedder(QString::fromStdString(r.embedder));
    selectVerifier(QString::fromStdString(r.verifier));
    m_verifierThreshold->setValue(r.verifierThreshold);
    {
        // the signal's own threshold, not its default
        const QSignalBlocker block(m_gateSignal);
        m_gateSignal->setCurrentText(QString::fromUtf8(core::gateSignalName(r.gateSignal)));
    }
    m_gateThreshold->setValue(r.gateThreshold);
    m_crossRecompute->setValue(r.crossRecompute);
    m_gate->setChecked(r.gate);
    m_maxTokens->setValue(r.maxTokens);
    m_limit->setValue(r.limit);
    m_ledgerName->setText(QString::fromStdString(r.ledgerName));
    m_store->setText(QString::fromStdString(r.store));
    m_storeKvDtype->setCurrentText(QString::fromUtf8(core::floatTypeName(r.storeKvDtype)));
    m_errorBound->setValue(r.errorBound);
    m_guards->setChecked(r.guards.any());
    m_prices->setCurrentText(QString::fromStdString(r.prices));
    refreshRunEnabled();
}

void ReplayPanel::setCrossAvailable(bool available, const QString &converter)
{
    m_crossAvailable = available && !converter.isEmpty();
    m_crossConverter = m_crossAvailable ? converter : QString();
    m_cross->setToolTip(
        m_crossAvailable
            ? tr("Cross: reuse model A's KV cache for model B, mapped by converter '%1'.").arg(converter)
            : tr("Cross needs a converter in use: fit or pick one in the Alignment panel and "
                 "press 'Use this converter'."));
    refreshRunEnabled();
    inputChanged();
}

QString ReplayPanel::knowledgeGraph() const
{
    return m_knowledgeGraph;
}

QString ReplayPanel::knowledgeProfiles() const
{
    return m_knowledgeProfiles;
}

void ReplayPanel::setKnowledgeAvailable(const QString &graph, const QString &profiles)
{
    m_knowledgeGraph = graph;
    m_knowledgeProfiles = graph.isEmpty() ? QString() : profiles;
    m_knowledge->setToolTip(
        graph.isEmpty()
            ? tr("Knowledge needs a graph in use: open or build one in the Knowledge step and press 'Use in "
                 "replays'.")
            : tr("Knowledge: answer through the concept nodes of %1 (their KV modules placed, the user's "
                 "profile rendered)%2.")
                  .arg(QFileInfo(graph).fileName(),
                       profiles.isEmpty() ? QString()
                                          : tr(", profiles %1").arg(QFileInfo(profiles).fileName())));
    refreshRunEnabled();
    inputChanged();
}

void ReplayPanel::setModelsLoaded(bool loaded)
{
    m_modelsLoaded = loaded;
    refreshRunEnabled();
    inputChanged();
}

void ReplayPanel::refreshRunEnabled()
{
    m_start->setEnabled(!m_busy && m_modelsLoaded);
    m_pause->setEnabled(m_ownJob);
    m_stop->setEnabled(m_ownJob);
    for (QWidget *w : std::initializer_list<QWidget *>{m_workload, m_browse, m_exact, m_semantic, m_prefix,
                                                       m_embedder, m_verifier, m_gate, m_maxTokens, m_limit,
                                                       m_ledgerName, m_store, m_prices, m_errorBound})
        w->setEnabled(!m_busy);
    m_storeKvDtype->setEnabled(!m_busy && !m_store->text().trimmed().isEmpty());
    // a checked tier that cannot run stays enabled, so that it can be unchecked (Start says why not)
    m_cross->setEnabled(!m_busy && (m_crossAvailable || m_cross->isChecked()));
    m_knowledge->setEnabled(!m_busy && (!m_knowledgeGraph.isEmpty() || m_knowledge->isChecked()));
    m_threshold->setEnabled(!m_busy && m_semantic->isChecked());
    m_errorBound->setEnabled(!m_busy && m_semantic->isChecked());
    m_guards->setEnabled(!m_busy && m_semantic->isChecked());
    m_verifierThreshold->setEnabled(!m_busy && !verifierSpec().isEmpty());
    m_sweep->setEnabled(!m_busy && !m_workload->currentText().trimmed().isEmpty());
    m_gateSignal->setEnabled(!m_busy && m_gate->isChecked());
    m_gateThreshold->setEnabled(!m_busy && m_gate->isChecked());
    m_crossRecompute->setEnabled(!m_busy && m_crossAvailable);
    if (!m_busy && !m_modelsLoaded)
        m_runStatus->setText(
            (m_embedderNote.isEmpty() ? QString() : m_embedderNote + " ") +
            tr("Load models A and B first (Models panel); a replay runs them for every miss."));
    else if (!m_busy && m_runStatus->text().contains(tr("Load models A and B first")))
        m_runStatus->setText(m_embedderNote.isEmpty()
                                 ? tr("Ready: choose a workload and the tiers, then Start.")
                                 : m_embedderNote);
}

void ReplayPanel::setBusy(bool busy, bool ownJob)
{
    m_busy = busy;
    m_ownJob = busy && ownJob;
    setJobProgressRunning(m_progress, m_ownJob);
    if (!busy) {
        const QSignalBlocker block(m_pause);
        m_pause->setChecked(false);
        m_pause->setText(tr("Pause"));
    }
    refreshRunEnabled();
}

void ReplayPanel::beginLive(const QString &title)
{
    m_liveRows.clear();
    m_liveTitle = title;
    m_hasLive = true;
    {
        const QSignalBlocker block(m_ledgers);
        const int old = liveComboIndex();
        if (old >= 0)
            m_ledgers->removeItem(old);
        m_ledgers->addItem(tr("%1 (live)").arg(title), LiveEntry);
    }
    m_progress->setRange(0, 1);
    m_progress->setValue(0);
    showLedger(liveComboIndex());
}

void ReplayPanel::finishLive(bool cancelled)
{
    setBusy(false);
    const int n = int(m_liveRows.size());
    if (cancelled) {
        m_runStatus->setText(tr("stopped after %1 requests").arg(n));
    } else {
        m_runStatus->setText(tr("done: %1 requests").arg(n));
        m_progress->setValue(m_progress->maximum());
    }
}

void ReplayPanel::setReplayProgress(int done, int total, const QString &timing)
{
    m_progress->setRange(0, std::max(1, total));
    m_progress->setValue(std::min(done, std::max(1, total)));
    m_runStatus->setText(tr("%1 / %2 requests%3%4")
                             .arg(done)
                             .arg(total)
                             .arg(m_pause->isChecked() ? tr(" (paused)") : QString(),
                                  timing.isEmpty() ? QString() : QString::fromUtf8(" \u00b7 ") + timing));
}

QString ReplayPanel::startRefusal() const
{
    const core::ReplaySettings r = replayRequest();
    const QString ledgerName = QString::fromStdString(r.ledgerName);
    if (r.workload.empty())
        return tr("Cannot start: choose a workload file.");
    if (!ledgerName.isEmpty() && r.experiment.empty())
        return tr("Cannot store ledger '%1': no experiment file is open. Open or capture one, or leave the "
                  "ledger name empty.")
            .arg(ledgerName);
    // a replay never runs with fewer tiers than the step shows checked
    if (m_knowledge->isChecked() && m_knowledgeGraph.isEmpty())
        return tr("The knowledge tier is checked but no graph is in use: open or build one in the Knowledge "
                  "step and press 'Use in replays', or uncheck the tier.");
    if (m_cross->isChecked() && !m_crossAvailable)
        return tr("The cross tier is checked but no converter is in use: fit or pick one in the Alignment "
                  "step and press 'Use this converter', or uncheck the tier.");
    static const QRegularExpression validName("^[A-Za-z0-9_-][A-Za-z0-9_.-]*$");
    if (!ledgerName.isEmpty() && !validName.match(ledgerName).hasMatch())
        return tr("Ledger name '%1' cannot be stored: use letters, digits, '_', '-' and '.'.")
            .arg(ledgerName);
    if (!ledgerName.isEmpty() && m_snapshot)
        for (const auto &l : m_snapshot->ledgers)
            if (QString::fromStdString(l.first) == ledgerName) // a stored ledger is never replaced silently
                return tr("The experiment already holds a ledger '%1': choose another name (or leave it "
                          "empty "
                          "not to store this run).")
                    .arg(ledgerName);
    return {};
}

void ReplayPanel::inputChanged()
{
    if (!m_errorShown || m_busy)
        return;
    const QString refusal = startRefusal();
    if (refusal.isEmpty()) {
        m_errorShown = false;
        m_runStatus->setText(m_modelsLoaded
                                 ? tr("Ready: press Start.")
                                 : tr("Load models A and B first (Models panel); a replay runs them "
                                      "for every miss."));
    } else {
        setError(refusal);
    }
}

void ReplayPanel::setReplayFailed(const QString &message)
{
    setBusy(false);
    setError(message);
}

void ReplayPanel::setError(const QString &message)
{
    m_errorShown = true;
    m_runStatus->setText(QString("<span style='color:#b00020'>%1</span>").arg(message.toHtmlEscaped()));
}

QString ReplayPanel::statusText() const
{
    return m_runStatus->text();
}

QString ReplayPanel::embedderSpec() const
{
    const QVariant path = m_embedder->currentData(Qt::UserRole);
    return path.isValid() && !path.toString().isEmpty() ? path.toString() : m_embedder->currentText();
}

void ReplayPanel::selectEmbedder(const QString &spec)
{
    if (spec.isEmpty())
        return;
    int at = -1;
    for (int i = 0; i < m_embedder->count() - 2 && at < 0; ++i)
        if (m_embedder->itemData(i, Qt::UserRole).toString() == spec ||
            (!m_embedder->itemData(i, Qt::UserRole).isValid() && m_embedder->itemText(i) == spec))
            at = i;
    if (at < 0) { // a model path: shown by its folder or file name, before "Other model..."
        at = m_embedder->count() - 2;
        m_embedder->insertItem(at, QFileInfo(spec).fileName(), spec);
        m_embedder->setItemData(at, spec, Qt::ToolTipRole);
    }
    m_embedder->setCurrentIndex(at);
    m_lastEmbedder = spec;
}

SemanticSweepRequest ReplayPanel::sweepRequest() const
{
    SemanticSweepRequest r;
    r.workloadPath = m_workload->currentText().trimmed();
    r.embedder = embedderSpec();
    r.embedderLayer = m_settings.embedderLayer;
    r.embedderPrefix = QString::fromStdString(m_settings.embedderPrefix);
    r.limit = m_limit->value();
    r.target = m_errorBound->value() > 0 ? m_errorBound->value() : 0.1;
    r.verifier = verifierSpec();
    r.similarityThreshold = m_threshold->value();
    return r;
}

namespace {

// One sweep's table: a row per threshold (the threshold kept as the first cell's data), the
// suggested one selected.
void fillSweepTable(QTableWidget *table, const std::vector<core::SweepPoint> &points,
                    std::optional<double> suggested)
{
    table->setRowCount(int(points.size()));
    int suggestedRow = -1;
    for (int i = 0; i < int(points.size()); ++i) {
        const auto &p = points[size_t(i)];
        const QStringList cells = {QString::number(p.threshold, 'f', 2), QString::number(p.hits),
                                   QString::number(p.precision, 'f', 3), QString::number(p.recall, 'f', 3),
                                   QString::number(p.falseHitRate, 'f', 3)};
        for (int c = 0; c < 5; ++c) {
            auto *item = new QTableWidgetItem(cells[c]);
            item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            table->setItem(i, c, item);
        }
        table->item(i, 0)->setData(Qt::UserRole, p.threshold);
        if (suggested && std::abs(p.threshold - *suggested) < 1e-9)
            suggestedRow = i;
    }
    if (suggestedRow >= 0)
        table->selectRow(suggestedRow);
    else
        table->clearSelection();
}

} // namespace

// A sweep tab: what was measured, the curve, the table and the button that takes the selected
// threshold into `target`.
QWidget *ReplayPanel::makeSweepTab(const QString &name, QLabel *&summary, ThresholdCurveChart *&chart,
                                   QTableWidget *&table, QDoubleSpinBox *target)
{
    auto *tab = new QWidget(m_sweepTabs);
    auto *layout = new QVBoxLayout(tab);
    summary = new QLabel(tab);
    summary->setObjectName(name + "Summary");
    summary->setWordWrap(true);
    chart = new ThresholdCurveChart(tab);
    chart->setObjectName(name + "Chart");
    table = new QTableWidget(tab);
    table->setObjectName(name + "Table");
    table->setColumnCount(5);
    table->setHorizontalHeaderLabels(
        {tr("threshold"), tr("hits"), tr("precision"), tr("recall"), tr("false-hit rate")});
    table->setSelectionBehavior(QAbstractItemView::SelectRows);
    table->setSelectionMode(QAbstractItemView::SingleSelection);
    table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table->verticalHeader()->hide();
    table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    auto *use = new QPushButton(target == m_threshold ? tr("Use the selected threshold")
                                                      : tr("Use the selected verifier threshold"),
                                tab);
    use->setObjectName(name == "sweep" ? QStringLiteral("useThresholdButton")
                                       : QStringLiteral("useVerifierThresholdButton"));
    QTableWidget *t = table;
    ThresholdCurveChart *c = chart;
    const auto take = [t, target](int row) {
        if (row >= 0 && t->item(row, 0))
            target->setValue(t->item(row, 0)->data(Qt::UserRole).toDouble());
    };
    connect(use, &QPushButton::clicked, this, [t, take] { take(t->currentRow()); });
    connect(table, &QTableWidget::cellDoubleClicked, this, [take](int row, int) { take(row); });
    connect(table, &QTableWidget::currentCellChanged, this, [t, c](int row) {
        if (row >= 0 && t->item(row, 0))
            c->mark(t->item(row, 0)->data(Qt::UserRole).toDouble());
    });
    layout->addWidget(summary);
    layout->addWidget(chart, 1);
    layout->addWidget(table, 1);
    layout->addWidget(use);
    return tab;
}

void ReplayPanel::showSweep(const SemanticSweepResult &sweep)
{
    if (!m_sweepDialog) {
        m_sweepDialog = new QDialog(this);
        m_sweepDialog->setObjectName("sweepDialog");
        m_sweepDialog->setWindowTitle(tr("Threshold sweep"));
        auto *layout = new QVBoxLayout(m_sweepDialog);
        m_sweepTabs = new QTabWidget(m_sweepDialog);
        m_sweepTabs->setObjectName("sweepTabs");
        m_sweepTabs->addTab(makeSweepTab("sweep", m_sweepSummary, m_sweepChart, m_sweepTable, m_threshold),
                            tr("Similarity"));
        m_sweepTabs->addTab(makeSweepTab("verifierSweep", m_verifierSweepSummary, m_verifierSweepChart,
                                         m_verifierSweepTable, m_verifierThreshold),
                            tr("Verifier"));
        layout->addWidget(m_sweepTabs);
        m_sweepDialog->resize(620, 640);
    }
    const QString target = QString::number(sweep.target * 100, 'f', 1);
    m_sweepSummary->setText(
        tr("%1, embedder %2: %3 labelled requests scored, %4 with an earlier duplicate. %5")
            .arg(sweep.workloadPath, sweep.embedder)
            .arg(sweep.scored)
            .arg(sweep.shouldHit)
            .arg(sweep.suggested ? tr("Threshold %1 keeps false hits under %2% (selected).")
                                       .arg(*sweep.suggested, 0, 'f', 2)
                                       .arg(target)
                                 : tr("No threshold keeps false hits under %1%.").arg(target)));
    m_sweepChart->setPoints(sweep.points, sweep.suggested, tr("similarity threshold"),
                            tr("Semantic tier, embedder %1").arg(sweep.embedder));
    fillSweepTable(m_sweepTable, sweep.points, sweep.suggested);
    m_sweepTabs->setTabEnabled(1, sweep.verifier.has_value());
    if (sweep.verifier) {
        const core::VerifierSweep &v = *sweep.verifier;
        const std::optional<double> at =
            v.atTarget ? std::optional<double>(v.atTarget->threshold) : std::nullopt;
        m_verifierSweepSummary->setText(
            tr("Verifier %1 on the %2 candidates at similarity %3 or more (%4 of them right, %5 without a "
               "score; %6 ms a pair); recall over the %7 requests with an earlier duplicate. %8")
                .arg(sweep.verifierName)
                .arg(v.candidates)
                .arg(v.similarityThreshold, 0, 'f', 2)
                .arg(v.correctCandidates)
                .arg(v.errors)
                .arg(v.meanMs, 0, 'f', 2)
                .arg(v.shouldHit)
                .arg(at ? tr("Verifier threshold %1 keeps false hits under %2% (selected).")
                              .arg(*at, 0, 'f', 2)
                              .arg(target)
                        : tr("No verifier threshold keeps false hits under %1% at this similarity.")
                              .arg(target)));
        m_verifierSweepChart->setPoints(
            v.points, at, tr("verifier threshold"),
            tr("Verifier %1 at similarity %2").arg(sweep.verifierName).arg(v.similarityThreshold, 0, 'f', 2));
        fillSweepTable(m_verifierSweepTable, v.points, at);
    } else {
        m_verifierSweepSummary->setText(
            tr("No verifier chosen: choose one in the Replay step and sweep again."));
        m_verifierSweepChart->setPoints({}, std::nullopt, tr("verifier threshold"), tr("No verifier"));
        m_verifierSweepTable->setRowCount(0);
    }
    m_sweepTabs->setCurrentIndex(0);
    m_sweepDialog->show();
    m_sweepDialog->raise();
}

QString ReplayPanel::verifierSpec() const
{
    return m_verifier->currentData(Qt::UserRole).toString();
}

void ReplayPanel::selectVerifier(const QString &spec)
{
    int at = 0; // no verifier
    if (!spec.isEmpty()) {
        at = -1;
        for (int i = 1; i < m_verifier->count() - 2 && at < 0; ++i)
            if (m_verifier->itemData(i, Qt::UserRole).toString() == spec)
                at = i;
        if (at < 0) { // listed by its folder name, before "Other verifier..."
            at = m_verifier->count() - 2;
            m_verifier->insertItem(at, QFileInfo(spec).fileName(), spec);
            m_verifier->setItemData(at, spec, Qt::ToolTipRole);
        }
    }
    m_verifier->setCurrentIndex(at);
    m_lastVerifier = spec;
}

void ReplayPanel::openTrainEmbedderDialog(bool verifier)
{
    QDialog dialog(this);
    dialog.setObjectName("trainEmbedderDialog");
    dialog.setWindowTitle(verifier ? tr("Train a verifier on labelled pairs")
                                   : tr("Train an embedder on labelled pairs"));
    auto *form = new QFormLayout(&dialog);
    auto *pairs = new QLineEdit(&dialog);
    pairs->setObjectName("trainPairsEdit");
    pairs->setPlaceholderText(tr("question<TAB>question<TAB>0/1, Quora's or GLUE's TSV, or JSONL"));
    auto *browsePairs = new QPushButton(tr("Browse..."), &dialog);
    auto *pairsRow = new QHBoxLayout;
    pairsRow->addWidget(pairs, 1);
    pairsRow->addWidget(browsePairs);
    form->addRow(tr("Pairs file:"), pairsRow);
    auto *out = new QLineEdit(&dialog);
    out->setObjectName("trainOutEdit");
    auto *browseOut = new QPushButton(tr("Browse..."), &dialog);
    auto *outRow = new QHBoxLayout;
    outRow->addWidget(out, 1);
    outRow->addWidget(browseOut);
    form->addRow(tr("Output folder:"), outRow);
    auto *start = new QComboBox(&dialog);
    start->addItem(tr("a new encoder"));
    const QString chosen = embedderSpec();
    if (!core::isBuiltinEmbedder(chosen.toStdString()) && core::isEncoderModel(chosen.toStdString()))
        start->addItem(tr("%1, fine-tuned").arg(QFileInfo(chosen).fileName()), chosen);
    form->addRow(tr("Start from:"), start);
    auto *steps = new QSpinBox(&dialog);
    steps->setRange(1, 1000000);
    steps->setValue(1500);
    form->addRow(tr("Steps (at most):"), steps);
    auto *share = new QDoubleSpinBox(&dialog);
    share->setRange(0.05, 0.5);
    share->setSingleStep(0.05);
    share->setValue(0.1);
    share->setToolTip(
        tr("Held out to judge the embedder and stop early; pairs sharing a question stay together."));
    form->addRow(tr("Validation share:"), share);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    buttons->button(QDialogButtonBox::Ok)->setText(tr("Train"));
    form->addRow(buttons);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    connect(browsePairs, &QPushButton::clicked, &dialog, [&] {
        const QString f = QFileDialog::getOpenFileName(&dialog, tr("Labelled pairs"), pairs->text(),
                                                       tr("Pairs (*.tsv *.jsonl *.txt);;All files (*)"));
        if (f.isEmpty())
            return;
        pairs->setText(f);
        if (out->text().isEmpty())
            out->setText(QFileInfo(f).absolutePath() + (verifier ? "/verifier-" : "/embedder-") +
                         QFileInfo(f).completeBaseName());
    });
    connect(browseOut, &QPushButton::clicked, &dialog, [&] {
        const QString d = QFileDialog::getSaveFileName(&dialog, tr("Embedder folder"), out->text());
        if (!d.isEmpty())
            out->setText(d);
    });
    if (dialog.exec() != QDialog::Accepted)
        return;
    core::EmbedderTrainSettings s;
    s.pairs = pairs->text().trimmed().toStdString();
    s.out = out->text().trimmed().toStdString();
    s.init = start->currentData().toString().toStdString();
    s.steps = steps->value();
    s.validationShare = share->value();
    requestEmbedderTraining(s, verifier);
}

void ReplayPanel::requestEmbedderTraining(const core::EmbedderTrainSettings &settings, bool verifier)
{
    const QString what = verifier ? tr("a verifier") : tr("an embedder");
    std::error_code ec;
    QString problem;
    if (settings.pairs.empty())
        problem = tr("Training %1 needs a labelled pairs file.").arg(what);
    else if (!std::filesystem::is_regular_file(settings.pairs, ec))
        problem =
            tr("Training %1: %2 is not a file.").arg(what, QString::fromStdString(settings.pairs.string()));
    else if (settings.out.empty())
        problem = tr("Training %1 needs an output folder.").arg(what);
    if (!problem.isEmpty()) {
        m_runStatus->setText(problem.toHtmlEscaped());
        return;
    }
    m_runStatus->setText(
        tr("Training %1 on %2...")
            .arg(what, QString::fromStdString(settings.pairs.filename().string()).toHtmlEscaped()));
    Q_EMIT trainEmbedderRequested(EmbedderTrainRequest{settings, verifier});
}

void ReplayPanel::showTrainedEmbedder(const EmbedderTrainView &view)
{
    QString at90;
    if (view.verifier) { // the replay uses its recorded threshold
        selectVerifier(view.out);
        at90 = view.thresholdAt90 ? tr("precision 0.9 from score %1 (recall %2), the threshold it uses")
                                        .arg(*view.thresholdAt90, 0, 'f', 3)
                                        .arg(view.recallAt90, 0, 'f', 3)
                                  : tr("no score reaches precision 0.9; it uses 0.5");
    } else {
        selectEmbedder(view.out);
        if (view.thresholdAt90) { // rounded up to the box's step: never below the measured threshold
            const double scale = std::pow(10.0, m_threshold->decimals());
            m_threshold->setValue(std::clamp(std::ceil(*view.thresholdAt90 * scale - 1e-9) / scale,
                                             m_threshold->minimum(), m_threshold->maximum()));
        }
        at90 = view.thresholdAt90 ? tr("precision 0.9 from threshold %1 (recall %2), threshold set")
                                        .arg(*view.thresholdAt90, 0, 'f', 3)
                                        .arg(view.recallAt90, 0, 'f', 3)
                                  : tr("no threshold reaches precision 0.9");
    }
    m_embedderNote = tr("%1 %2 trained (%3 steps%4, best at %5; %6 pairs, %7 held out): validation "
                        "AUC %8 (lexical %9), average precision %10; %11.")
                         .arg(view.verifier ? tr("Verifier") : tr("Embedder"))
                         .arg(QFileInfo(view.out).fileName().toHtmlEscaped())
                         .arg(view.steps)
                         .arg(view.stoppedEarly ? tr(", stopped early") : QString())
                         .arg(view.bestStep)
                         .arg(view.trainPairs)
                         .arg(view.validationPairs)
                         .arg(view.auc, 0, 'f', 3)
                         .arg(view.lexicalAuc, 0, 'f', 3)
                         .arg(view.averagePrecision, 0, 'f', 3)
                         .arg(at90);
    m_runStatus->setText(m_embedderNote);
    refreshRunEnabled(); // adds what a replay still needs
}

} // namespace kvwb::ui
