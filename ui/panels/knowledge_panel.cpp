#include "ui/panels/knowledge_panel.h"

#include <QFileDialog>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QTextBrowser>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace kvwb::ui {

namespace {

enum NodeColumn
{
    NameColumn,
    IdColumn,
    RelatedColumn,
    ReuseColumn,
    ModuleColumn,
    FreshnessColumn,
    NodeColumnCount
};

QString esc(const std::string &s)
{
    return QString::fromStdString(s).toHtmlEscaped();
}

QTableWidgetItem *numberItem(double v, int decimals)
{
    auto *item = new QTableWidgetItem;
    // whole numbers as numbers (they sort so); others as their fixed-point text
    if (decimals == 0)
        item->setData(Qt::DisplayRole, qlonglong(std::llround(v)));
    else
        item->setText(QString::number(v, 'f', decimals));
    item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    return item;
}

} // namespace

KnowledgePanel::KnowledgePanel(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QVBoxLayout(this);

    addGraphGroup(layout);
    addViews(layout);

    connect(m_graph, &QLineEdit::textChanged, this, &KnowledgePanel::refreshEnabled);
    connect(m_question, &QLineEdit::textChanged, this, &KnowledgePanel::refreshEnabled);
    connect(m_workload, &QLineEdit::textChanged, this, &KnowledgePanel::refreshEnabled);
    connect(m_open, &QPushButton::clicked, this, [this] { Q_EMIT openRequested(openRequest(false)); });
    connect(m_build, &QPushButton::clicked, this, [this] { Q_EMIT openRequested(openRequest(true)); });
    connect(m_trace, &QPushButton::clicked, this, [this] { Q_EMIT traceRequested(traceRequest()); });
    connect(m_question, &QLineEdit::returnPressed, this, [this] {
        if (m_trace->isEnabled())
            Q_EMIT traceRequested(traceRequest());
    });
    connect(m_evaluate, &QPushButton::clicked, this, [this] { Q_EMIT evaluateRequested(evalRequest()); });
    connect(m_use, &QPushButton::clicked, this, [this] {
        Q_EMIT useInReplays(m_view.path, m_profiles->text().trimmed());
        m_status->setText(m_status->text() + tr(" In use by the Replay step's knowledge tier."));
    });
    connect(m_filter, &QLineEdit::textChanged, this, &KnowledgePanel::refreshTable);
    connect(m_nodes, &QTableWidget::itemSelectionChanged, this, [this] {
        const auto rows = m_nodes->selectionModel()->selectedRows();
        if (!rows.isEmpty())
            showNode(m_nodes->item(rows.front().row(), NameColumn)->data(Qt::UserRole).toInt());
    });
    for (QTextBrowser *browser : {m_detail, m_path})
        connect(browser, &QTextBrowser::anchorClicked, this, [this](const QUrl &url) {
            if (url.scheme() == "node")
                selectNode(url.path());
        });
    refreshEnabled();
}

// The graph file (open, or build from WordNet), the profiles, "Use in replays" and the status line.
void KnowledgePanel::addGraphGroup(QVBoxLayout *layout)
{
    auto *files = new QGroupBox(tr("Concept graph"), this);
    auto *grid = new QGridLayout(files);
    grid->addWidget(new QLabel(tr("Graph file:"), files), 0, 0);
    m_graph = new QLineEdit(files);
    m_graph->setObjectName("knowledgeGraphEdit");
    m_graph->setPlaceholderText(tr("graph.h5 (kvwb knowledge build)"));
    m_graph->setToolTip(tr("A knowledge graph file: concept nodes and model B's KV module of each."));
    grid->addWidget(m_graph, 0, 1, 1, 3);
    auto *browse = new QPushButton(tr("Browse..."), files);
    grid->addWidget(browse, 0, 4);
    m_open = new QPushButton(tr("Open"), files);
    m_open->setObjectName("knowledgeOpenButton");
    m_open->setToolTip(tr("Read the graph and show its nodes, with module freshness for model B in use."));
    grid->addWidget(m_open, 0, 5);
    grid->addWidget(new QLabel(tr("Build from WordNet:"), files), 1, 0);
    m_concepts = new QSpinBox(files);
    m_concepts->setObjectName("knowledgeConceptsSpin");
    m_concepts->setRange(1, 100000);
    m_concepts->setValue(300);
    m_concepts->setSuffix(tr(" concepts"));
    m_concepts->setToolTip(tr("The most popular WordNet concepts, as the demo corpus selects them."));
    grid->addWidget(m_concepts, 1, 1);
    m_build = new QPushButton(tr("Build with model B"), files);
    m_build->setObjectName("knowledgeBuildButton");
    m_build->setToolTip(
        tr("Compute every node's knowledge text into a KV module with model B, once, and write "
           "the graph file (replaced whole)."));
    grid->addWidget(m_build, 1, 2);
    grid->addWidget(new QLabel(tr("Profiles:"), files), 2, 0);
    m_profiles = new QLineEdit(files);
    m_profiles->setObjectName("knowledgeProfilesEdit");
    m_profiles->setPlaceholderText(tr("profiles.json (kvwb knowledge profiles), optional"));
    m_profiles->setToolTip(
        tr("Per-user profiles: how each user wants answers. Never written into the graph."));
    grid->addWidget(m_profiles, 2, 1, 1, 3);
    auto *browseProfiles = new QPushButton(tr("Browse..."), files);
    grid->addWidget(browseProfiles, 2, 4);
    m_use = new QPushButton(tr("Use in replays"), files);
    m_use->setObjectName("knowledgeUseButton");
    m_use->setToolTip(tr("Offer this graph and these profiles to the Replay step's knowledge tier."));
    grid->addWidget(m_use, 2, 5);
    m_status = new QLabel(tr("No graph open."), files);
    m_status->setObjectName("knowledgeStatus");
    m_status->setWordWrap(true);
    grid->addWidget(m_status, 3, 0, 1, 6);
    grid->setColumnStretch(3, 1);
    layout->addWidget(files);

    connect(browse, &QPushButton::clicked, this, [this] {
        const QString f =
            QFileDialog::getSaveFileName(this, tr("Knowledge graph file"), m_graph->text(), tr("HDF5 (*.h5)"),
                                         nullptr, QFileDialog::DontConfirmOverwrite);
        if (!f.isEmpty())
            m_graph->setText(f);
    });
    connect(browseProfiles, &QPushButton::clicked, this, [this] {
        const QString f =
            QFileDialog::getOpenFileName(this, tr("User profiles"), m_profiles->text(), tr("JSON (*.json)"));
        if (!f.isEmpty())
            m_profiles->setText(f);
    });
}

// The node browser and its detail above; a request's path and the economics below.
void KnowledgePanel::addViews(QVBoxLayout *layout)
{
    auto *split = new QSplitter(Qt::Vertical, this);
    auto *top = new QSplitter(Qt::Horizontal, split);
    auto *left = new QWidget(top);
    auto *leftLayout = new QVBoxLayout(left);
    leftLayout->setContentsMargins(0, 0, 0, 0);
    m_filter = new QLineEdit(left);
    m_filter->setObjectName("knowledgeFilter");
    m_filter->setPlaceholderText(tr("Filter nodes by name, synonym or id"));
    m_filter->setClearButtonEnabled(true);
    leftLayout->addWidget(m_filter);
    m_nodes = new QTableWidget(0, NodeColumnCount, left);
    m_nodes->setObjectName("knowledgeNodes");
    m_nodes->setHorizontalHeaderLabels(
        {tr("Concept"), tr("Id"), tr("Related"), tr("Reused"), tr("Module tok"), tr("Freshness")});
    m_nodes->horizontalHeaderItem(ReuseColumn)->setToolTip(tr("Requests answered through this node"));
    m_nodes->horizontalHeaderItem(FreshnessColumn)
        ->setToolTip(
            tr("fresh: reused as is; stale (other weights or past its TTL): recomputed on use; missing: "
               "no module"));
    m_nodes->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_nodes->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_nodes->setSelectionMode(QAbstractItemView::SingleSelection);
    m_nodes->setSortingEnabled(true);
    m_nodes->verticalHeader()->hide();
    m_nodes->horizontalHeader()->setStretchLastSection(true);
    leftLayout->addWidget(m_nodes);
    m_detail = new QTextBrowser(top);
    m_detail->setObjectName("knowledgeNodeDetail");
    m_detail->setOpenLinks(false);
    m_detail->setPlaceholderText(tr("Pick a node: its knowledge, names, module and neighbours."));
    top->addWidget(left);
    top->addWidget(m_detail);
    top->setStretchFactor(0, 3);
    top->setStretchFactor(1, 2);

    auto *bottom = new QWidget(split);
    auto *bottomLayout = new QHBoxLayout(bottom);
    bottomLayout->setContentsMargins(0, 0, 0, 0);
    auto *trace = new QGroupBox(tr("A request's path"), bottom);
    auto *traceLayout = new QGridLayout(trace);
    m_question = new QLineEdit(trace);
    m_question->setObjectName("knowledgeQuestion");
    m_question->setPlaceholderText(tr("A question, e.g. How does a car work?"));
    traceLayout->addWidget(m_question, 0, 0, 1, 2);
    m_user = new QLineEdit(trace);
    m_user->setObjectName("knowledgeUser");
    m_user->setPlaceholderText(tr("user id (profile)"));
    m_user->setMaximumWidth(140);
    traceLayout->addWidget(m_user, 0, 2);
    m_trace = new QPushButton(tr("Trace"), trace);
    m_trace->setObjectName("knowledgeTraceButton");
    m_trace->setToolTip(
        tr("Recall's candidates, each one's graph verification, the chosen node's module and the "
           "profile line, as the knowledge tier decides them."));
    traceLayout->addWidget(m_trace, 0, 3);
    m_path = new QTextBrowser(trace);
    m_path->setObjectName("knowledgePath");
    m_path->setOpenLinks(false);
    traceLayout->addWidget(m_path, 1, 0, 1, 4);
    bottomLayout->addWidget(trace, 2);

    auto *econ = new QGroupBox(tr("Economics"), bottom);
    auto *econLayout = new QGridLayout(econ);
    m_workload = new QLineEdit(econ);
    m_workload->setObjectName("knowledgeWorkload");
    m_workload->setPlaceholderText(tr("workload.jsonl"));
    econLayout->addWidget(m_workload, 0, 0);
    m_limit = new QSpinBox(econ);
    m_limit->setObjectName("knowledgeLimit");
    m_limit->setRange(1, 1000000);
    m_limit->setValue(200);
    m_limit->setPrefix(tr("first "));
    m_limit->setSuffix(tr(" requests"));
    econLayout->addWidget(m_limit, 0, 1);
    m_evaluate = new QPushButton(tr("Evaluate"), econ);
    m_evaluate->setObjectName("knowledgeEvaluateButton");
    m_evaluate->setToolTip(
        tr("Answer the workload's model-B requests with no cache, a semantic cache, the "
           "knowledge tier and its text computed from scratch; compare quality, profile fit, "
           "tokens, time and cost (kvwb knowledge evaluate)."));
    econLayout->addWidget(m_evaluate, 0, 2);
    m_economics = new QTableWidget(0, 0, econ);
    m_economics->setObjectName("knowledgeEconomics");
    m_economics->setEditTriggers(QAbstractItemView::NoEditTriggers);
    econLayout->addWidget(m_economics, 1, 0, 1, 3);
    m_economicsNote = new QLabel(econ);
    m_economicsNote->setObjectName("knowledgeEconomicsNote");
    m_economicsNote->setWordWrap(true);
    m_economicsNote->setTextInteractionFlags(Qt::TextSelectableByMouse);
    econLayout->addWidget(m_economicsNote, 2, 0, 1, 3);
    econLayout->setColumnStretch(0, 1);
    bottomLayout->addWidget(econ, 3);
    split->addWidget(top);
    split->addWidget(bottom);
    layout->addWidget(split, 1);
}

KnowledgeOpenRequest KnowledgePanel::openRequest(bool build) const
{
    KnowledgeOpenRequest r;
    r.graphPath = m_graph->text().trimmed();
    r.build = build;
    r.concepts = m_concepts->value();
    return r;
}

KnowledgeTraceRequest KnowledgePanel::traceRequest() const
{
    return {m_view.path, m_question->text().trimmed(), m_user->text().trimmed(),
            m_profiles->text().trimmed()};
}

KnowledgeEvalRequest KnowledgePanel::evalRequest() const
{
    KnowledgeEvalRequest r;
    r.graphPath = m_view.path;
    r.profilesPath = m_profiles->text().trimmed();
    r.workloadPath = m_workload->text().trimmed();
    r.limit = m_limit->value();
    return r;
}

void KnowledgePanel::setGraphPath(const QString &path)
{
    m_graph->setText(path);
}

QString KnowledgePanel::graphPathText() const
{
    return m_graph->text().trimmed();
}

QString KnowledgePanel::profilesPath() const
{
    return m_profiles->text().trimmed();
}

void KnowledgePanel::setProfilesPath(const QString &path)
{
    m_profiles->setText(path);
}

void KnowledgePanel::setWorkloads(const QStringList &paths)
{
    if (m_workload->text().isEmpty() && !paths.isEmpty())
        m_workload->setText(paths.front());
}

QString KnowledgePanel::graphPath() const
{
    return m_hasView ? m_view.path : QString();
}

QString KnowledgePanel::selectedNode() const
{
    return m_shown >= 0 ? QString::fromStdString(m_view.graph.nodes()[size_t(m_shown)].id) : QString();
}

void KnowledgePanel::selectNode(const QString &id)
{
    const auto *n = m_view.graph.find(id.toStdString());
    if (!n)
        return;
    const int index = int(n - m_view.graph.nodes().data());
    for (int row = 0; row < m_nodes->rowCount(); ++row)
        if (m_nodes->item(row, NameColumn)->data(Qt::UserRole).toInt() == index) {
            m_nodes->selectRow(row);
            m_nodes->scrollToItem(m_nodes->item(row, NameColumn));
            return;
        }
    showNode(index); // filtered out of the table: shown all the same
}

void KnowledgePanel::showGraph(const KnowledgeView &view)
{
    m_view = view;
    m_hasView = true;
    m_shown = -1;
    m_graph->setText(view.path);
    int fresh = 0, stale = 0, missing = 0;
    for (const auto &f : view.freshness)
        (f == "fresh" ? fresh : f == "stale" ? stale : missing) += 1;
    m_status->setText(tr("%1%2: %3 nodes; modules fresh %4, stale %5, missing %6.")
                          .arg(view.built ? tr("Built ") : QString(), view.description)
                          .arg(view.graph.size())
                          .arg(fresh)
                          .arg(stale)
                          .arg(missing));
    m_detail->clear();
    refreshTable();
    refreshEnabled();
}

void KnowledgePanel::refreshTable()
{
    const QString filter = m_filter->text().trimmed().toLower();
    m_nodes->setSortingEnabled(false);
    m_nodes->setRowCount(0);
    const auto &nodes = m_view.graph.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) {
        const auto &n = nodes[i];
        if (!filter.isEmpty()) {
            bool match = QString::fromStdString(n.name).toLower().contains(filter) ||
                         QString::fromStdString(n.id).toLower().contains(filter);
            for (const auto &s : n.synonyms)
                match = match || QString::fromStdString(s).toLower().contains(filter);
            if (!match)
                continue;
        }
        const int row = m_nodes->rowCount();
        m_nodes->insertRow(row);
        auto *name = new QTableWidgetItem(QString::fromStdString(n.name));
        name->setData(Qt::UserRole, int(i));
        m_nodes->setItem(row, NameColumn, name);
        m_nodes->setItem(row, IdColumn, new QTableWidgetItem(QString::fromStdString(n.id)));
        m_nodes->setItem(row, RelatedColumn, numberItem(double(n.related.size()), 0));
        m_nodes->setItem(row, ReuseColumn, numberItem(double(n.reuseCount), 0));
        m_nodes->setItem(row, ModuleColumn,
                         numberItem(i < m_view.moduleTokens.size() ? m_view.moduleTokens[i] : 0, 0));
        auto *fresh = new QTableWidgetItem(i < m_view.freshness.size() ? m_view.freshness[i] : QString());
        if (fresh->text() != "fresh")
            fresh->setForeground(QColor(0xc6, 0x28, 0x28));
        m_nodes->setItem(row, FreshnessColumn, fresh);
    }
    m_nodes->setSortingEnabled(true);
}

void KnowledgePanel::showNode(int index)
{
    const auto &nodes = m_view.graph.nodes();
    if (index < 0 || size_t(index) >= nodes.size())
        return;
    m_shown = index;
    const auto &n = nodes[size_t(index)];
    QString html = QStringLiteral("<h3>%1 <small>(%2)</small></h3>").arg(esc(n.name), esc(n.id));
    if (!n.synonyms.empty()) {
        QStringList s;
        for (const auto &x : n.synonyms)
            s << esc(x);
        html += tr("<p><b>Also:</b> %1</p>").arg(s.join(", "));
    }
    html += tr("<p><b>Knowledge</b> (held once, shared by every user):<br>%1</p>").arg(esc(n.knowledge));
    const QString fresh =
        size_t(index) < m_view.freshness.size() ? m_view.freshness[size_t(index)] : QString();
    html +=
        tr("<p><b>Module:</b> %1 tokens, %2. <b>Reused</b> %3 times. <b>Source:</b> %4, confidence %5.</p>")
            .arg(size_t(index) < m_view.moduleTokens.size() ? m_view.moduleTokens[size_t(index)] : 0)
            .arg(fresh)
            .arg(n.reuseCount)
            .arg(esc(n.source))
            .arg(n.confidence, 0, 'g', 3);
    for (auto kind :
         {core::RelationKind::Hypernym, core::RelationKind::Hyponym, core::RelationKind::Sibling}) {
        QStringList links;
        for (const auto *t : m_view.graph.neighbours(n.id, kind))
            links << QStringLiteral("<a href=\"node:%1\">%2</a>").arg(esc(t->id), esc(t->name));
        if (!links.isEmpty())
            html +=
                QStringLiteral("<p><b>%1:</b> %2</p>")
                    .arg(kind == core::RelationKind::Hypernym  ? tr("A kind of")
                         : kind == core::RelationKind::Hyponym ? tr("Kinds of it")
                                                               : tr("Siblings (rejected by verification)"),
                         links.join(", "));
    }
    if (!n.questions.empty()) {
        QStringList q;
        for (const auto &x : n.questions)
            q << esc(x);
        html += tr("<p><b>Typical questions</b> (indexed for recall): %1</p>").arg(q.join(" · "));
    }
    m_detail->setHtml(html);
}

void KnowledgePanel::showTrace(const KnowledgeTraceResult &t)
{
    QString html = tr("<p><b>%1</b></p><ol>").arg(t.question.toHtmlEscaped());
    for (const auto &c : t.candidates)
        html += tr("<li><a href=\"node:%1\">%2</a> (%1): similarity %3 via \"%4\" - <b "
                   "style=\"color:%5\">%6</b>: "
                   "%7</li>")
                    .arg(c.node.toHtmlEscaped(), c.name.toHtmlEscaped())
                    .arg(c.similarity, 0, 'f', 3)
                    .arg(c.matched.toHtmlEscaped(), c.accepted ? "#1b7a1b" : "#c62828",
                         c.accepted ? tr("accepted") : tr("rejected"), c.reason.toHtmlEscaped());
    html += "</ol>";
    if (t.candidates.empty())
        html += tr("<p>Recall found no node near enough: answered from scratch.</p>");
    else if (t.chosen.isEmpty())
        html += tr("<p>Verification accepted no candidate: answered from scratch (no false reuse).</p>");
    else
        html += tr("<p>Answered through <b>%1</b>: its module (%2 tokens) is %3%4.</p>")
                    .arg(t.chosen.toHtmlEscaped())
                    .arg(t.moduleTokens)
                    .arg(t.freshness, t.freshness == "fresh" ? tr(", placed as is")
                                                             : tr(", recomputed first and counted"));
    html += t.profileLine.isEmpty()
                ? tr("<p>No profile line (the plain answer).</p>")
                : tr("<p>Profile line: <i>%1</i></p>").arg(t.profileLine.trimmed().toHtmlEscaped());
    html += tr("<p><small>recall %1 ms, verification %2 ms</small></p>")
                .arg(t.recallMs, 0, 'f', 2)
                .arg(t.verifyMs, 0, 'f', 3);
    m_path->setHtml(html);
}

void KnowledgePanel::showEconomics(const KnowledgeEconomics &e)
{
    static const std::vector<std::pair<const char *, QString>> columns = {
        {"hits", tr("Cache answers")},
        {"false_hits", tr("False hits")},
        {"tokens_computed", tr("Tokens computed")},
        {"tokens_reused", tr("Tokens reused")},
        {"model_s", tr("Model s")},
        {"cost_usd", tr("Cost USD")},
        {"word_f1", tr("Word F1")},
        {"rouge_l", tr("ROUGE-L")},
        {"rouge_l_vs_full", tr("ROUGE-L vs full")},
        {"profile_fit", tr("Profile fit")}};
    m_economics->clear();
    m_economics->setColumnCount(int(columns.size()));
    m_economics->setRowCount(int(e.arms.size()));
    QStringList headers;
    for (const auto &c : columns)
        headers << c.second;
    m_economics->setHorizontalHeaderLabels(headers);
    QStringList arms;
    for (const auto &a : e.arms)
        arms << a;
    m_economics->setVerticalHeaderLabels(arms);
    for (size_t r = 0; r < e.arms.size() && r < e.table.rows.size(); ++r)
        for (size_t c = 0; c < columns.size(); ++c) {
            const int col = e.table.column(columns[c].first);
            const double v = col >= 0 ? e.table.rows[r][size_t(col)] : 0.0;
            const std::string name = columns[c].first;
            const bool share =
                name == "word_f1" || name == "rouge_l" || name == "rouge_l_vs_full" || name == "profile_fit";
            const int decimals = name == "cost_usd" ? 6 : name == "model_s" ? 2 : share ? 3 : 0;
            m_economics->setItem(int(r), int(c), numberItem(v, decimals));
        }
    m_economics->resizeColumnsToContents();
    QStringList steps;
    for (const auto &[name, ms] : e.timeMs)
        steps << tr("%1 %2 ms").arg(name).arg(ms, 0, 'f', 1);
    m_economicsNote->setText(tr("%1 model-B requests, %2 users, %3 concepts. Knowledge tier time: %4.")
                                 .arg(e.requests)
                                 .arg(e.users)
                                 .arg(e.concepts)
                                 .arg(steps.join("; ")));
    m_economicsNote->setToolTip(e.markdown);
}

void KnowledgePanel::setBusy(bool busy)
{
    m_busy = busy;
    refreshEnabled();
}

void KnowledgePanel::setModelBLoaded(bool loaded)
{
    m_modelB = loaded;
    refreshEnabled();
}

void KnowledgePanel::setFailed(const QString &message)
{
    m_status->setText(tr("Failed: %1").arg(message));
    setBusy(false);
}

void KnowledgePanel::setProgress(const QString &stage)
{
    m_status->setText(stage);
}

void KnowledgePanel::refreshEnabled()
{
    const bool path = !m_graph->text().trimmed().isEmpty();
    m_open->setEnabled(!m_busy && path);
    m_build->setEnabled(!m_busy && path && m_modelB);
    m_build->setToolTip(
        m_modelB ? tr("Compute every node's knowledge text into a KV module with model B, once, and "
                      "write the graph file (replaced whole).")
                 : tr("Load model B in the Models step first."));
    m_use->setEnabled(m_hasView);
    m_trace->setEnabled(!m_busy && m_hasView && !m_question->text().trimmed().isEmpty());
    m_evaluate->setEnabled(!m_busy && m_hasView && m_modelB && !m_workload->text().trimmed().isEmpty());
}

} // namespace kvwb::ui
