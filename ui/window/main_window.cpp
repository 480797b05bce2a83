#include "ui/window/main_window.h"
#include "ui/window/main_window_p.h"
#include "ui/window/tool_tips.h"

#include "core/util/error.h"
#include "ui/models/model_card_model.h"
#include "ui/panels/alignment_panel.h"
#include "ui/panels/capture_panel.h"
#include "ui/panels/compare_panel.h"
#include "ui/panels/knowledge_panel.h"
#include "ui/panels/replay_panel.h"

#include <QAbstractButton>
#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDateTime>
#include <QDesktopServices>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QStackedWidget>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTableView>
#include <QTimer>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>
#include <fstream>

#include <unistd.h>

namespace kvwb::ui {

using detail::kMaxRecent;
using detail::settings;

namespace {

// The process's resident memory (Linux /proc/self/statm); -1 where unknown.
int64_t residentBytes()
{
    std::ifstream statm("/proc/self/statm");
    int64_t pages = 0, resident = 0;
    if (!(statm >> pages >> resident))
        return -1;
    return resident * int64_t(sysconf(_SC_PAGESIZE));
}

// Whether two choices load the same model the same way (paths compared as files).
bool sameModel(const ModelChoice &x, const ModelChoice &y)
{
    const auto file = [](const QString &p) {
        const QFileInfo f(p);
        return f.exists() ? f.canonicalFilePath() : f.absoluteFilePath();
    };
    return !x.path.isEmpty() && file(x.path) == file(y.path) && x.device == y.device && x.dtype == y.dtype &&
           x.context == y.context && x.dequantize == y.dequantize && x.kvDtype == y.kvDtype;
}
} // namespace

MainWindow::MainWindow(QWidget *parent) : QMainWindow(parent)
{
    setObjectName("kvwbMainWindow");
    setWindowTitle(tr("KV Workbench[*]"));
    installWrappedToolTips(this);
    connect(this, &MainWindow::experimentRequested, this,
            [this](const QString &p) { m_requestedExperiment = p; });
    m_summary = new QLabel(this);
    m_summary->setObjectName("projectSummary");
    m_summary->setWordWrap(true);
    m_summary->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_summary->setMargin(12);
    m_summary->setTextFormat(Qt::RichText);

    m_models = new ModelsPanel(this);
    m_card = new ModelCardModel(this);
    m_cardView = new QTableView(this);
    m_cardView->setObjectName("modelCardView");
    m_cardView->setModel(m_card);
    // the property column fits its labels, A and B share the rest (long values elide; the
    // tooltip has them whole), so both models stay side by side without scrolling
    m_cardView->horizontalHeader()->setSectionResizeMode(ModelCardModel::PropertyColumn,
                                                         QHeaderView::ResizeToContents);
    m_cardView->horizontalHeader()->setSectionResizeMode(ModelCardModel::ModelAColumn, QHeaderView::Stretch);
    m_cardView->horizontalHeader()->setSectionResizeMode(ModelCardModel::ModelBColumn, QHeaderView::Stretch);
    m_cardView->verticalHeader()->hide();
    // long values (the tokenizer line, paths) wrap onto more lines instead of being cut off
    m_cardView->setWordWrap(true);
    m_cardView->setTextElideMode(Qt::ElideNone);
    connect(m_card, &QAbstractItemModel::modelReset, m_cardView, &QTableView::resizeRowsToContents);
    connect(m_card, &QAbstractItemModel::dataChanged, m_cardView,
            [this] { m_cardView->resizeRowsToContents(); });
    connect(m_cardView->horizontalHeader(), &QHeaderView::sectionResized, m_cardView,
            [this] { m_cardView->resizeRowsToContents(); });
    m_cardView->setMinimumWidth(420);
    m_log = new QPlainTextEdit(this);
    m_log->setObjectName("logView");
    m_log->setReadOnly(true);
    m_log->setMaximumBlockCount(5000);

    createStepPanels();

    // The Models step: the two choices, then both cards side by side below them.
    auto *modelsPage = new QWidget(this);
    auto *modelsLayout = new QVBoxLayout(modelsPage);
    modelsLayout->addWidget(m_models);
    auto *cardTitle = new QLabel(
        tr("<b>Model cards</b>: A | B, rows where their KV-cache geometry differs marked"), modelsPage);
    modelsLayout->addWidget(cardTitle);
    m_cardView->setMinimumHeight(240);
    m_cardView->setMinimumWidth(0);
    modelsLayout->addWidget(m_cardView, 1);

    // One large content area with a step navigator beside it, in the workflow's order; the project
    // details and the log are side and bottom panels that collapse (View menu).
    m_steps = new QListWidget(this);
    m_steps->setObjectName("stepList");
    m_steps->setFrameShape(QFrame::NoFrame);
    m_steps->setFixedWidth(176);
    m_steps->setSpacing(2);
    m_steps->setStyleSheet("QListWidget#stepList { background: palette(window); font-size: 11pt; }"
                           "QListWidget#stepList::item { padding: 8px 10px; border-radius: 4px; }"
                           "QListWidget#stepList::item:selected { background: palette(highlight); "
                           "color: palette(highlighted-text); }");
    m_pages = new QStackedWidget(this);
    m_pages->setObjectName("stepPages");
    addStep("models", tr("Models"),
            tr("Choose model A (source) and B (target), check the memory estimate, "
               "load both."),
            modelsPage);
    addStep("capture", tr("Capture"),
            tr("Run both models over a prompt set; their K/V go into an experiment "
               "file."),
            m_capture);
    addStep("alignment", tr("Alignment"),
            tr("Fit a converter from A's KV into B's; its per-layer and per-head scores."), m_alignment);
    addStep("compare", tr("Compare"),
            tr("One prompt answered by A, by B from scratch and by B from A's converted cache."), m_compare);
    addStep("replay", tr("Replay"), tr("A workload through the cache tiers, live, with its ledger."),
            m_replay);
    addStep("knowledge", tr("Knowledge"),
            tr("Concepts held once as KV modules, answers personalised per user, and what it saves."),
            m_knowledge);
    addStep("report", tr("Report"), tr("Export the experiment as HTML, PDF, Markdown and CSV/JSON."),
            buildReportPage());
    auto *central = new QWidget(this);
    auto *row = new QHBoxLayout(central);
    row->setContentsMargins(0, 0, 0, 0);
    row->setSpacing(0);
    row->addWidget(m_steps);
    auto *rule = new QFrame(central);
    rule->setFrameShape(QFrame::VLine);
    rule->setFrameShadow(QFrame::Sunken);
    row->addWidget(rule);
    row->addWidget(m_pages, 1);
    setCentralWidget(central);
    connect(m_steps, &QListWidget::currentRowChanged, m_pages, &QStackedWidget::setCurrentIndex);
    m_steps->setCurrentRow(0);

    auto *projectDock = m_projectDock =
        addDock("projectDock", tr("Project"), m_summary, Qt::RightDockWidgetArea);
    auto *logDock = addDock("logDock", tr("Log"), m_log, Qt::BottomDockWidgetArea);
    resizeDocks({projectDock}, {300}, Qt::Horizontal);
    resizeDocks({logDock}, {110}, Qt::Vertical);
    // the log follows new lines unless the user scrolled up to read (a resize keeps it at the end)
    auto *logBar = m_log->verticalScrollBar();
    connect(logBar, &QScrollBar::valueChanged, this,
            [this, logBar](int v) { m_logAtEnd = v >= logBar->maximum(); });
    connect(logBar, &QScrollBar::rangeChanged, this, [this, logBar](int, int max) {
        if (m_logAtEnd)
            logBar->setValue(max);
    });

    // The first size follows the screen: the whole window fits a 1366x768 laptop, and a 1920x1080
    // screen gives the content the room; the project panel starts open where there is room for it.
    const QSize available = screen() ? screen()->availableGeometry().size() : QSize(1366, 768);
    resize(initialSize(available));
    projectDock->setVisible(available.width() >= 1600);

    m_engineLabel = new QLabel(tr("engine: idle"), this);
    m_engineLabel->setObjectName("engineState");
    m_deviceLabel = new QLabel(tr("device: -"), this);
    m_deviceLabel->setObjectName("deviceLabel");
    m_memoryLabel = new QLabel(tr("memory: -"), this);
    m_memoryLabel->setObjectName("memoryLabel");
    // the running job by name, with a Stop that cancels whichever job it is
    m_jobLabel = new QLabel(this);
    m_jobLabel->setObjectName("runningJobLabel");
    m_jobCancel = new QPushButton(tr("Stop"), this);
    m_jobCancel->setObjectName("statusCancelButton");
    m_jobCancel->setToolTip(tr("Stop the running job (what it wrote so far is kept)"));
    connect(m_jobCancel, &QPushButton::clicked, this, [this] {
        if (!m_engineBusy)
            return;
        log(tr("stopping %1").arg(jobName().toLower()));
        Q_EMIT cancelRequested();
    });
    statusBar()->addWidget(m_engineLabel, 1);
    statusBar()->addPermanentWidget(m_jobLabel);
    statusBar()->addPermanentWidget(m_jobCancel);
    statusBar()->addPermanentWidget(m_deviceLabel);
    statusBar()->addPermanentWidget(m_memoryLabel);
    auto *memoryTimer = new QTimer(this);
    memoryTimer->setInterval(2000);
    connect(memoryTimer, &QTimer::timeout, this, &MainWindow::refreshMemory);
    connect(memoryTimer, &QTimer::timeout, this, &MainWindow::refreshModified); // the title's [*]
    memoryTimer->start();
    refreshMemory();
    refreshJobLabel();

    buildMenus();
    connectModels();
    connectSteps();

    m_defaultState = saveState();
    auto s = settings();
    restoreGeometry(s.value("window/geometry").toByteArray());
    restoreState(s.value("window/state").toByteArray());
    refreshSummary();
}

void MainWindow::createStepPanels()
{
    m_capture = new CapturePanel(this);
    m_alignment = new AlignmentPanel(this);
    m_compare = new ComparePanel(this);
    m_replay = new ReplayPanel(this);
    m_knowledge = new KnowledgePanel(this);
}

void MainWindow::resetSteps()
{
    // fresh step panels: no result, choice or message of the previous project can stay behind
    createStepPanels();
    for (const auto &[id, panel] : {std::pair<const char *, QWidget *>{"capture", m_capture},
                                    {"alignment", m_alignment},
                                    {"compare", m_compare},
                                    {"replay", m_replay},
                                    {"knowledge", m_knowledge}}) {
        QScrollArea *page = stepPage(id);
        if (QWidget *old = page->takeWidget())
            old->deleteLater();
        page->setWidget(panel);
    }
    connectSteps();
    m_snapshot.reset();
    m_experimentPath.clear();
    m_requestedExperiment.clear();
    m_openingRead = false;
    m_openingExperiment.clear();
    m_experimentBeside = false;
    m_reportFolder->clear();
    m_reportFolderIsDefault = false;
    m_lastReport.clear();
    m_reportWritten.clear();
    m_reportStatus->setText(tr("Open or capture an experiment first."));
    m_exportAction->setEnabled(false);
    m_exportButton->setEnabled(false);
    m_openReportButton->setEnabled(false);
    for (const QString &id : m_stepIds)
        markStep(id, false);
}

void MainWindow::keepLoadedPairIfChosen()
{
    // the pair the engine holds serves this project only when it is the one the project names
    const bool was = m_modelsLoaded;
    m_modelsLoaded = m_pairHeld && sameModel(m_loaded[0], m_models->choice('a')) &&
                     sameModel(m_loaded[1], m_models->choice('b'));
    const QString whyNot = m_project ? tr("this project names other models") : tr("no project is open");
    m_models->setLoadedInUse(m_modelsLoaded, whyNot);
    if (was && !m_modelsLoaded)
        log(tr("the loaded models stay loaded, but %1: load the models to use (Models step) before running "
               "a job")
                .arg(whyNot));
    markStep("models", m_modelsLoaded);
    m_capture->setModelsLoaded(m_modelsLoaded);
    m_compare->setModelsLoaded(m_modelsLoaded);
    m_replay->setModelsLoaded(m_modelsLoaded);
    m_knowledge->setModelBLoaded(m_modelsLoaded);
}

// Each step's requests become the window's signals to the engine (the job marked as running and
// logged first); a step's cancel acts on its own job only.
void MainWindow::connectModels()
{
    connect(m_models, &ModelsPanel::loadRequested, this, [this](const ModelChoice &a, const ModelChoice &b) {
        beginJob(Job::Load); // before the request: the engine reports busy as soon as it starts
        m_loading[0] = a;
        m_loading[1] = b;
        Q_EMIT loadRequested(a, b);
    });
    connect(m_models, &ModelsPanel::cancelRequested, this, [this] { cancelJob(Job::Load); });
    connect(m_models, &ModelsPanel::choiceChanged, this, [this](char role) {
        if (!m_archiveMissing.empty())
            refreshArchiveNote(); // a row now naming a path that exists is no longer asked for
        m_card->setModel(role == 'a' ? ModelCardModel::ModelAColumn : ModelCardModel::ModelBColumn,
                         m_models->previewConfig(role));
    });
    for (char role : {'a', 'b'})
        m_card->setModel(role == 'a' ? ModelCardModel::ModelAColumn : ModelCardModel::ModelBColumn,
                         m_models->previewConfig(role));
}

void MainWindow::connectSteps()
{
    connect(m_capture, &CapturePanel::captureRequested, this, [this](const CaptureRequest &r) {
        beginJob(Job::Capture);
        log(tr("capturing %1 into %2").arg(r.promptsPath, r.outPath));
        Q_EMIT captureRequested(r);
    });
    connect(m_alignment, &AlignmentPanel::fitRequested, this, [this](const core::FitSettings &r) {
        beginJob(Job::Fit);
        log(tr("fitting converter '%1' (%2, k %3) on %4")
                .arg(QString::fromStdString(r.name), QString::fromUtf8(core::layerSelectionName(r.selection)))
                .arg(r.k)
                .arg(QString::fromStdString(r.experiment)));
        Q_EMIT fitRequested(r);
    });
    connect(m_alignment, &AlignmentPanel::sweepRequested, this, [this](const ConverterSweepRequest &r) {
        beginJob(Job::Sweep);
        log(tr("sweeping converters '%1' on %2").arg(r.name, r.experimentPath));
        Q_EMIT converterSweepRequested(r);
    });
    connect(m_alignment, &AlignmentPanel::inUseChanged, this, &MainWindow::setInUse);
    connect(m_compare, &ComparePanel::compareRequested, this, [this](const core::CompareSettings &r) {
        beginJob(Job::Compare);
        Q_EMIT compareRequested(r);
    });
    connect(m_compare, &ComparePanel::compareSetRequested, this, [this](const core::CompareSettings &r) {
        beginJob(Job::Compare);
        log(tr("comparing %1 with '%2'%3")
                .arg(r.promptsFile.empty() ? tr("the held-out prompts")
                                           : QString::fromStdString(r.promptsFile),
                     QString::fromStdString(r.converter),
                     r.baselines ? tr(" and the baselines") : QString()));
        Q_EMIT compareSetRequested(r);
    });
    connect(m_replay, &ReplayPanel::replayRequested, this, [this](const core::ReplaySettings &r) {
        beginJob(Job::Replay);
        const QString workload = QString::fromStdString(r.workload);
        m_replay->beginLive(QFileInfo(workload).fileName() + " | " +
                            (r.tiers.empty() ? tr("no tiers") : tierNames(r.tiers).join(',')));
        log(tr("replaying %1 through %2")
                .arg(workload, r.tiers.empty() ? tr("no tiers") : tierNames(r.tiers).join(',')));
        Q_EMIT replayRequested(r);
    });
    connect(m_replay, &ReplayPanel::pauseRequested, this, [this](bool paused) {
        if (m_engineBusy && m_job == Job::Replay)
            Q_EMIT pauseRequested(paused);
    });
    connect(m_knowledge, &KnowledgePanel::openRequested, this, [this](const KnowledgeOpenRequest &r) {
        beginJob(Job::Knowledge);
        log(r.build ? tr("building knowledge graph %1 from %2 concepts").arg(r.graphPath).arg(r.concepts)
                    : tr("opening knowledge graph %1").arg(r.graphPath));
        Q_EMIT knowledgeOpenRequested(r);
    });
    connect(m_replay, &ReplayPanel::sweepRequested, this, [this](const SemanticSweepRequest &r) {
        beginJob(Job::Replay);
        log(tr("sweeping the semantic threshold on %1 (%2 embedder)").arg(r.workloadPath, r.embedder));
        Q_EMIT semanticSweepRequested(r);
    });
    connect(m_replay, &ReplayPanel::trainEmbedderRequested, this, [this](const EmbedderTrainRequest &r) {
        beginJob(Job::Replay);
        log(tr("training an embedder on %1 into %2")
                .arg(QString::fromStdString(r.settings.pairs.string()),
                     QString::fromStdString(r.settings.out.string())));
        Q_EMIT embedderTrainRequested(r);
    });
    connect(m_knowledge, &KnowledgePanel::traceRequested, this, [this](const KnowledgeTraceRequest &r) {
        beginJob(Job::Knowledge);
        Q_EMIT knowledgeTraceRequested(r);
    });
    connect(m_knowledge, &KnowledgePanel::evaluateRequested, this, [this](const KnowledgeEvalRequest &r) {
        beginJob(Job::Knowledge);
        log(tr("evaluating the knowledge tier on %1 (first %2 requests)").arg(r.workloadPath).arg(r.limit));
        Q_EMIT knowledgeEvaluateRequested(r);
    });
    connect(m_knowledge, &KnowledgePanel::useInReplays, this,
            [this](const QString &graph, const QString &profiles) {
                m_replay->setKnowledgeAvailable(graph, profiles);
                log(tr("the Replay step's knowledge tier uses %1").arg(graph));
            });
    // a step's Cancel (or Stop, or Pause) reaches the engine only while its own job runs
    connect(m_capture, &CapturePanel::cancelRequested, this, [this] { cancelJob(Job::Capture); });
    connect(m_alignment, &AlignmentPanel::cancelRequested, this,
            [this] { cancelJob(m_job == Job::Sweep ? Job::Sweep : Job::Fit); });
    connect(m_compare, &ComparePanel::cancelRequested, this, [this] { cancelJob(Job::Compare); });
    connect(m_replay, &ReplayPanel::stopRequested, this, [this] { cancelJob(Job::Replay); });
}

MainWindow::~MainWindow()
{
    finishArchiveThread(); // its result is dropped with the window
}

QDockWidget *MainWindow::addDock(const QString &objectName, const QString &title, QWidget *widget,
                                 Qt::DockWidgetArea area)
{
    auto *dock = new QDockWidget(title, this);
    dock->setObjectName(objectName);
    if (widget->minimumSizeHint().width() > 600 || widget->minimumSizeHint().height() > 300) {
        // large panels scroll inside their dock instead of forcing the window past the screen
        auto *scroll = new QScrollArea(dock);
        scroll->setObjectName(objectName + "Scroll");
        scroll->setWidgetResizable(true);
        scroll->setFrameShape(QFrame::NoFrame);
        scroll->setWidget(widget);
        dock->setWidget(scroll);
    } else {
        dock->setWidget(widget);
    }
    addDockWidget(area, dock);
    return dock;
}

QSize MainWindow::initialSize(const QSize &available)
{
    // room for the frame and the desktop's panels; beyond 1680 x 1050 the content only gets wider
    return {std::clamp(available.width() - 24, 800, 1680), std::clamp(available.height() - 48, 560, 1050)};
}

void MainWindow::addStep(const QString &id, const QString &title, const QString &hint, QWidget *content)
{
    // a page scrolls vertically only: its controls wrap to the width they get, never sideways
    auto *scroll = new QScrollArea(m_pages);
    scroll->setObjectName(id + "Page");
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setWidget(content);
    m_pages->addWidget(scroll);
    auto *item = new QListWidgetItem(QString("%1   %2").arg(m_steps->count() + 1).arg(title), m_steps);
    item->setData(Qt::UserRole, id);
    item->setData(Qt::UserRole + 1, title);
    item->setToolTip(hint);
    m_stepIds << id;
}

void MainWindow::showStep(const QString &id)
{
    const int i = int(m_stepIds.indexOf(id));
    if (i >= 0)
        m_steps->setCurrentRow(i);
}

QString MainWindow::currentStep() const
{
    return m_stepIds.value(m_steps->currentRow());
}

QScrollArea *MainWindow::stepPage(const QString &id) const
{
    return findChild<QScrollArea *>(id + "Page");
}

void MainWindow::markStep(const QString &id, bool done)
{
    const int i = int(m_stepIds.indexOf(id));
    if (i < 0)
        return;
    QListWidgetItem *item = m_steps->item(i);
    item->setText(
        QString("%1   %2%3")
            .arg(i + 1)
            .arg(item->data(Qt::UserRole + 1).toString(), done ? QString::fromUtf8("  \u2713") : QString()));
}

QList<QDockWidget *> MainWindow::docks() const
{
    return findChildren<QDockWidget *>();
}

void MainWindow::buildMenus()
{
    QMenu *file = menuBar()->addMenu(tr("&File"));
    m_newAction = file->addAction(tr("&New Project..."), this, [this] {
        if (!confirmUnsaved(tr("creating a new project")))
            return;
        QString path = QFileDialog::getSaveFileName(this, tr("New project"), QFileInfo(m_projectPath).path(),
                                                    tr("KV Workbench projects (*.kvwb)"));
        if (path.isEmpty())
            return;
        if (QFileInfo(path).suffix().isEmpty())
            path += ".kvwb";
        newProject(path);
    });
    m_newAction->setObjectName("newProjectAction");
    m_newAction->setShortcut(QKeySequence::New);
    m_openAction = file->addAction(tr("&Open Project..."), this, [this] {
        if (!confirmUnsaved(tr("opening another project")))
            return;
        const QString path =
            QFileDialog::getOpenFileName(this, tr("Open project"), QFileInfo(m_projectPath).path(),
                                         tr("KV Workbench projects and run archives (*.kvwb *.zip);;KV "
                                            "Workbench projects (*.kvwb);;Run archives (*.zip)"));
        if (path.endsWith(".zip", Qt::CaseInsensitive))
            openRunArchive(path); // into a new folder beside it
        else if (!path.isEmpty())
            openProject(path);
    });
    m_openAction->setShortcut(QKeySequence::Open);
    m_openExperimentAction = file->addAction(tr("Open &Experiment..."), this, [this] {
        const QString path =
            QFileDialog::getOpenFileName(this, tr("Open experiment file"), QFileInfo(m_projectPath).path(),
                                         tr("Experiment files (*.h5 *.hdf5)"));
        if (!path.isEmpty()) {
            beginJob(Job::Read);
            Q_EMIT experimentRequested(path);
        }
    });
    // Ctrl+Shift+E: a text field keeps Ctrl+E (end of line) for itself
    m_openExperimentAction->setShortcut(Qt::CTRL | Qt::SHIFT | Qt::Key_E);
    m_exportAction = file->addAction(tr("E&xport Report..."), this, [this] {
        showStep("report");
        QString dir = m_reportFolder->text();
        if (dir.isEmpty())
            dir = QFileDialog::getExistingDirectory(this, tr("Export the report into"),
                                                    QFileInfo(m_experimentPath).path());
        if (!dir.isEmpty())
            exportReport(dir);
    });
    m_exportAction->setObjectName("exportReportAction");
    m_exportAction->setEnabled(false);
    m_exportArchiveAction = file->addAction(tr("Export Run &Archive..."), this, [this] {
        QString out = QFileDialog::getSaveFileName(
            this, tr("Export the run as one archive"),
            QFileInfo(m_projectPath).dir().filePath(QFileInfo(m_projectPath).completeBaseName() + "-run.zip"),
            tr("Run archives (*.zip)"));
        if (out.isEmpty())
            return;
        if (QFileInfo(out).suffix().isEmpty())
            out += ".zip";
        exportRunArchive(out);
    });
    m_exportArchiveAction->setObjectName("exportRunArchiveAction");
    m_exportArchiveAction->setToolTip(
        tr("The project, its experiment file (converters, comparisons, ledgers), its "
           "data files and the models' paths and fingerprints - not their weights - "
           "as one zip that File > Open Project opens on another machine."));
    m_exportArchiveAction->setEnabled(false);
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    refreshRecentMenu();
    QAction *save = file->addAction(tr("&Save Project"), this, [this] {
        if (m_projectPath.isEmpty()) {
            const QString path = QFileDialog::getSaveFileName(this, tr("Save project"), {}, tr("*.kvwb"));
            if (!path.isEmpty())
                saveProject(path);
        } else {
            saveProject(m_projectPath);
        }
    });
    save->setShortcut(QKeySequence::Save);
    QAction *saveAs = file->addAction(tr("Save Project &As..."), this, [this] {
        const QString path =
            QFileDialog::getSaveFileName(this, tr("Save project as"), m_projectPath, tr("*.kvwb"));
        if (!path.isEmpty())
            saveProject(path);
    });
    saveAs->setShortcut(QKeySequence::SaveAs);
    m_closeProjectAction = file->addAction(tr("&Close Project"), this, [this] {
        if (confirmUnsaved(tr("closing the project")))
            closeProject();
    });
    m_closeProjectAction->setObjectName("closeProjectAction");
    m_closeProjectAction->setShortcut(QKeySequence::Close);
    file->addSeparator();
    QAction *quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    m_viewMenu = menuBar()->addMenu(tr("&View"));
    for (QDockWidget *d : docks())
        m_viewMenu->addAction(d->toggleViewAction());
    m_viewMenu->addSeparator();
    QAction *reset = m_viewMenu->addAction(tr("&Reset Layout"), this, &MainWindow::resetLayout);
    reset->setObjectName("resetLayoutAction");
}

void MainWindow::resetLayout()
{
    for (QDockWidget *d : docks()) {
        d->setFloating(false);
        d->show();
    }
    restoreState(m_defaultState);
}

void MainWindow::refreshSummary()
{
    const QString steps =
        tr("<p><b>Steps</b> (the navigator on the left)</p><ol>"
           "<li><b>Models</b>: choose A (source) and B (target), check the memory estimate, <i>Load both "
           "models</i>. The model cards show where their KV-cache geometry differs.</li>"
           "<li><b>Capture</b>: run both over a prompt set; their K/V go into an experiment file.</li>"
           "<li><b>Alignment</b>: fit a converter from A's KV into B's; see its per-layer and per-head "
           "scores; <i>Use this converter</i>.</li>"
           "<li><b>Compare</b>: one prompt answered by A, by B from scratch and by B from A's converted "
           "cache, token by token.</li>"
           "<li><b>Replay</b>: a workload through exact, semantic, prefix and cross-model cache tiers, "
           "with live hit rates and latency.</li>"
           "<li><b>Knowledge</b>: concepts held once as KV modules, answers personalised per user, and "
           "what it saves.</li>"
           "<li><b>Report</b>: HTML, PDF, Markdown and CSV/JSON of the experiment.</li>"
           "</ol>");
    if (!m_project) {
        m_summary->setText(tr("<h2>KV Workbench</h2><p>Open a project (File &gt; Open Project) or choose "
                              "two models in the Models panel.</p>") +
                           steps);
        return;
    }
    const auto &p = *m_project;
    QString workloads;
    for (const auto &w : p.workloads)
        workloads += QString("<li>%1</li>").arg(QString::fromStdString(w.string()).toHtmlEscaped());
    m_summary->setText(
        tr("<h2>%1</h2><p>%2</p><p><b>Project file:</b> %3</p><p><b>Model A (source):</b> %4<br>"
           "<b>Model B (target):</b> %5<br><b>Experiment file:</b> %6</p><p><b>Workloads:</b></p><ul>%7</ul>")
            .arg(QString::fromStdString(p.name).toHtmlEscaped(),
                 QString::fromStdString(p.description).toHtmlEscaped(), m_projectPath.toHtmlEscaped(),
                 QString::fromStdString(p.modelA.path.string()).toHtmlEscaped(),
                 QString::fromStdString(p.modelB.path.string()).toHtmlEscaped(),
                 p.experiment ? QString::fromStdString(p.experiment->string()).toHtmlEscaped()
                              : tr("none yet (Capture writes one)"),
                 workloads.isEmpty() ? tr("<li>none</li>") : workloads) +
        steps);
}

void MainWindow::refreshMemory()
{
    const int64_t rss = residentBytes();
    QString text = m_weightBytes > 0 ? tr("memory: weights %1 MB").arg(double(m_weightBytes) / 1e6, 0, 'f', 1)
                                     : tr("memory: no models loaded");
    if (rss > 0)
        text += tr(" · process %1 MB").arg(double(rss) / 1e6, 0, 'f', 0);
    m_memoryLabel->setText(text);
}

void MainWindow::setEngineState(const QString &state)
{
    m_engineLabel->setText(tr("engine: %1").arg(state));
}

void MainWindow::showLoadProgress(double fraction, const QString &stage)
{
    m_models->setProgress(fraction, withTiming(fraction, stage));
}

void MainWindow::setCudaAvailable(bool available, const QString &why)
{
    m_models->setCudaAvailable(available, why);
}

void MainWindow::beginJob(Job job)
{
    if (!m_engineBusy) { // else the engine refuses the request; the running job keeps its panel
        m_job = job;
        m_jobClock.start();
        statusBar()->clearMessage(); // the last job's "Cancelled." or error is not this job's
    }
}

QString MainWindow::withTiming(double fraction, const QString &stage) const
{
    if (!m_jobClock.isValid())
        return stage;
    const auto seconds = [](double s) {
        return s < 90 ? tr("%1 s").arg(int(s + 0.5)) : tr("%1 min").arg(s / 60, 0, 'f', 1);
    };
    const double elapsed = double(m_jobClock.elapsed()) / 1000.0;
    QString t = tr("%1 elapsed").arg(seconds(elapsed));
    if (fraction >= 0.02 && fraction < 1 && elapsed >= 1)
        t += tr(", about %1 left").arg(seconds(elapsed * (1 - fraction) / fraction));
    return stage + QString::fromUtf8(" \u00b7 ") + t;
}

void MainWindow::chainJob(Job job)
{
    m_engineBusy = false; // called from a result handler: the engine is free (it delivers results so)
    m_job = job;
    m_jobClock.start();
    refreshJobLabel();
}

void MainWindow::cancelJob(Job job)
{
    if (m_engineBusy && m_job == job)
        Q_EMIT cancelRequested();
}

void MainWindow::refreshJobLabel()
{
    const bool running = m_busyShown && m_job != Job::None;
    m_jobLabel->setText(running ? tr("Running: %1").arg(jobName().toLower()) : QString());
    m_jobLabel->setVisible(running);
    m_jobCancel->setVisible(running);
}

void MainWindow::showProgress(double fraction, const QString &text)
{
    const QString stage = withTiming(fraction, text);
    switch (m_job) {
    case Job::Load:
        m_models->setProgress(fraction, stage);
        break;
    case Job::Capture:
        m_capture->setProgress(fraction, stage);
        break;
    case Job::Fit:
    case Job::Sweep:
        m_alignment->setFitProgress(fraction, stage);
        break;
    case Job::Compare:
        m_compare->setProgress(fraction, stage);
        break;
    case Job::Knowledge:
        m_knowledge->setProgress(stage);
        break;
    default: // replays report through showReplayProgress; reads and reports are short
        break;
    }
}

void MainWindow::setEngineBusy(bool busy)
{
    m_engineBusy = busy;
    // the engine reports its state with every progress step: the panels hear of changes only (a
    // panel going busy again would reset its bar)
    if (busy == m_busyShown)
        return;
    m_busyShown = busy;
    refreshJobLabel();
    // the window's own engine requests wait for the running job
    m_openAction->setEnabled(!busy);
    m_newAction->setEnabled(!busy);
    m_closeProjectAction->setEnabled(!busy);
    m_openExperimentAction->setEnabled(!busy);
    m_recentMenu->setEnabled(!busy && !m_recentMenu->actions().isEmpty());
    m_exportAction->setEnabled(!busy && !m_experimentPath.isEmpty());
    m_exportArchiveAction->setEnabled(!busy && !m_projectPath.isEmpty() && !m_archiveThread);
    m_exportButton->setEnabled(!busy && !m_experimentPath.isEmpty());
    if (m_job != Job::Load)
        m_models->setEngineBusy(busy);
    // a step's Cancel, Pause and Stop act on its own job only; the status bar stops any job
    m_capture->setBusy(busy, m_job == Job::Capture);
    m_alignment->setBusy(busy, m_job == Job::Fit || m_job == Job::Sweep);
    m_compare->setBusy(busy, m_job == Job::Compare);
    m_replay->setBusy(busy, m_job == Job::Replay);
    m_knowledge->setBusy(busy);
    if (!busy) {
        m_job = Job::None;
        refreshModified();
        if (m_closeAfterJob) {       // the user chose to stop the job and quit: it has stopped
            m_closeAfterJob = false; // asked once: if the close is cancelled now, it stays cancelled
            QTimer::singleShot(0, this, &QWidget::close);
        }
    }
}

void MainWindow::showModelsLoaded(const LoadedModelInfo &a, const LoadedModelInfo &b, double ms)
{
    m_models->setLoaded(a, b, ms);
    m_modelsLoaded = m_pairHeld = true;
    m_loaded = m_loading;
    markStep("models", true);
    m_capture->setModelsLoaded(true);
    m_compare->setModelsLoaded(true);
    m_replay->setModelsLoaded(true);
    m_knowledge->setModelBLoaded(true);
    m_card->setModel(ModelCardModel::ModelAColumn, a.config);
    m_card->setModel(ModelCardModel::ModelBColumn, b.config);
    for (const auto &[column, m] :
         {std::pair{int(ModelCardModel::ModelAColumn), &a}, {int(ModelCardModel::ModelBColumn), &b}})
        m_card->setIdentity(column,
                            m->tokenizer.isEmpty() ? tr("none: %1").arg(m->tokenizerError) : m->tokenizer,
                            m->fingerprint);
    m_deviceLabel->setText(tr("device: %1").arg(a.device));
    m_weightBytes = a.deviceBytes + b.deviceBytes;
    refreshMemory();
    log(tr("loaded A %1 (%2) and B %3 (%4) in %5 ms")
            .arg(a.path, a.fingerprint.left(12), b.path, b.fingerprint.left(12))
            .arg(ms, 0, 'f', 0));
}

void MainWindow::showFailure(const QString &message)
{
    switch (m_job) {
    case Job::Capture:
        m_capture->setFailed(message);
        break;
    case Job::Fit:
    case Job::Sweep:
        m_alignment->setFitFailed(message);
        break;
    case Job::Compare:
        m_compare->setFailed(message);
        break;
    case Job::Knowledge:
        m_knowledge->setFailed(message);
        break;
    case Job::Replay:
        m_replay->setReplayFailed(message);
        break;
    case Job::Load:
        m_models->setFailed(message);
        break;
    default: // reading an experiment, gathering a report: the window's own actions
        break;
    }
    showError(message);
    // the refusal of a kvwb/1 file names `kvwb upgrade <its path>`
    if (!m_requestedExperiment.isEmpty() &&
        message.contains(QLatin1String("kvwb upgrade ") + m_requestedExperiment))
        offerUpgrade(m_requestedExperiment, message);
}

void MainWindow::offerUpgrade(const QString &path, const QString &message)
{
    auto *box = new QMessageBox(QMessageBox::Question, tr("Upgrade experiment file"),
                                tr("%1\n\nUpgrade it now? The upgrade works on a copy beside the file and "
                                   "replaces the file only when the copy is complete.")
                                    .arg(message),
                                QMessageBox::Yes | QMessageBox::No, this);
    box->setObjectName("upgradeExperimentBox");
    box->setAttribute(Qt::WA_DeleteOnClose);
    connect(box, &QMessageBox::buttonClicked, this, [this, box, path](QAbstractButton *button) {
        if (box->standardButton(button) != QMessageBox::Yes)
            return;
        log(tr("upgrading %1 (kvwb upgrade)").arg(path));
        beginJob(Job::Read);
        m_requestedExperiment = path;
        Q_EMIT experimentUpgradeRequested(path);
    });
    box->open();
}

void MainWindow::showError(const QString &message)
{
    statusBar()->showMessage(message, 15000);
    log(tr("error: %1").arg(message));
}

void MainWindow::showCancelled()
{
    if (m_job == Job::Capture)
        m_capture->setCancelled();
    else if (m_job == Job::Load)
        m_models->setCancelled();
    else if (m_job == Job::Compare)
        m_compare->setBusy(false);
    statusBar()->showMessage(tr("Cancelled."), 5000);
    log(tr("cancelled"));
}

void MainWindow::showCaptured(const CaptureSummary &summary)
{
    m_capture->showSummary(summary);
    log(tr("captured %1 prompts (%2 + %3 tokens) into %4%5, file %6 MB")
            .arg(summary.promptsWritten)
            .arg(summary.tokensA)
            .arg(summary.tokensB)
            .arg(summary.outPath, summary.cancelled ? tr(" (cancelled)") : QString())
            .arg(double(summary.fileBytes) / 1e6, 0, 'f', 2));
    for (const QString &w : summary.warnings)
        log(tr("capture: %1").arg(w));
    if (m_project) {
        m_project->experiment = summary.outPath.toStdString();
        refreshSummary();
    }
    chainJob(Job::Read);
    Q_EMIT experimentRequested(summary.outPath);
}

void MainWindow::showFitted(const FitSummary &summary)
{
    m_alignment->showFitSummary(summary);
    for (const QString &w : summary.warnings)
        log(tr("fit: %1").arg(w));
    if (summary.cancelled) {
        log(tr("fit of '%1' cancelled: nothing stored").arg(summary.name));
        return;
    }
    log(tr("fitted converter '%1' in %2 s: mean R2 K %3, V %4, attention cosine %5")
            .arg(summary.name)
            .arg(summary.fitMs / 1000, 0, 'f', 1)
            .arg(summary.meanR2K, 0, 'f', 3)
            .arg(summary.meanR2V, 0, 'f', 3)
            .arg(summary.meanAttnCos, 0, 'f', 3));
    if (m_alignment->inUse().isEmpty())
        setInUse(summary.name); // the first fitted converter is the one in use until the user picks
    chainJob(Job::Read);
    Q_EMIT experimentRequested(summary.experimentPath);
}

void MainWindow::showConverterSweep(const ConverterSweepSummary &summary)
{
    m_alignment->showSweepResult(summary);
    for (const QString &w : summary.warnings)
        log(tr("sweep: %1").arg(w));
    if (summary.cancelled) {
        log(tr("sweep '%1' cancelled: nothing stored").arg(summary.name));
        return;
    }
    log(tr("sweep '%1': %2 converters scored").arg(summary.name).arg(summary.rows));
    chainJob(Job::Read);
    Q_EMIT experimentRequested(summary.experimentPath);
}

void MainWindow::showCompared(const CompareResult &result)
{
    m_compare->showResult(result);
    log(tr("compared with '%1': KL %2 nats/token (no-prefix floor %3), top-1 %4, first divergence %5, gate "
           "%6")
            .arg(QString::fromStdString(result.converter))
            .arg(result.meanKl, 0, 'f', 3)
            .arg(result.klNoPrefix, 0, 'f', 3)
            .arg(result.top1, 0, 'f', 3)
            .arg(result.firstDivergence)
            .arg(result.gatePassed ? tr("pass") : tr("fall back")));
}

void MainWindow::showComparedSet(const CompareSetSummary &summary)
{
    m_compare->showSetSummary(summary);
    log(tr("compared %1 of %2 prompts with '%3'%4: KL %5 nats/token, gap closed vs no prefix %6")
            .arg(summary.set.prompts)
            .arg(summary.requested)
            .arg(summary.converter, summary.cancelled ? tr(" (cancelled)") : QString())
            .arg(summary.set.kl, 0, 'f', 4)
            .arg(summary.set.klGapClosed
                     ? QString::fromStdString(core::formatInterval(*summary.set.klGapClosed))
                     : tr("n/a")));
    for (const QString &w : summary.warnings)
        log(tr("compare: %1").arg(w));
}

void MainWindow::showReplayRows(const std::vector<core::LedgerRow> &rows)
{
    m_replay->appendRows(rows);
}

void MainWindow::showReplayProgress(int done, int total)
{
    m_replay->setReplayProgress(done, total, withTiming(total > 0 ? double(done) / total : 0, {}).mid(3));
}

void MainWindow::showReplayFinished(bool cancelled, int requests, const QString &storedLedger)
{
    m_replay->finishLive(cancelled);
    log(tr("replay %1 after %2 requests%3")
            .arg(cancelled ? tr("stopped") : tr("done"))
            .arg(requests)
            .arg(storedLedger.isEmpty() ? QString() : tr("; ledger stored as '%1'").arg(storedLedger)));
    if (!storedLedger.isEmpty() && !m_experimentPath.isEmpty()) {
        chainJob(Job::Read);
        Q_EMIT experimentRequested(m_experimentPath);
    }
}

void MainWindow::setInUse(const QString &converter)
{
    const bool changed = converter != m_alignment->inUse();
    m_alignment->setInUse(converter);
    if (m_project)
        m_project->alignment.inUse = converter.toStdString();
    QStringList names;
    if (m_snapshot)
        for (const auto &c : m_snapshot->converters)
            names << QString::fromStdString(c.name);
    m_compare->setConverters(names, converter);
    m_replay->setCrossAvailable(!converter.isEmpty() && names.contains(converter), converter);
    if (changed && !converter.isEmpty())
        log(tr("converter in use: '%1'").arg(converter));
}

void MainWindow::showKnowledge(const KnowledgeView &view)
{
    m_knowledge->showGraph(view);
    markStep("knowledge", true);
    log(tr("knowledge graph %1: %2 nodes").arg(view.path).arg(view.graph.size()));
}

void MainWindow::showSemanticSweep(const SemanticSweepResult &sweep)
{
    m_replay->showSweep(sweep);
    log(sweep.suggested ? tr("semantic sweep (%1): threshold %2 keeps false hits under %3%")
                              .arg(sweep.embedder)
                              .arg(*sweep.suggested, 0, 'f', 2)
                              .arg(sweep.target * 100, 0, 'f', 1)
                        : tr("semantic sweep (%1): no threshold keeps false hits under %2%")
                              .arg(sweep.embedder)
                              .arg(sweep.target * 100, 0, 'f', 1));
}

void MainWindow::showTrainedEmbedder(const EmbedderTrainView &view)
{
    m_replay->showTrainedEmbedder(view);
    log(tr("embedder %1 trained on %2: validation AUC %3 (lexical %4), average precision %5")
            .arg(view.out, view.pairs)
            .arg(view.auc, 0, 'f', 3)
            .arg(view.lexicalAuc, 0, 'f', 3)
            .arg(view.averagePrecision, 0, 'f', 3));
}

void MainWindow::showKnowledgeTrace(const KnowledgeTraceResult &trace)
{
    m_knowledge->showTrace(trace);
}

void MainWindow::showKnowledgeEconomics(const KnowledgeEconomics &economics)
{
    m_knowledge->showEconomics(economics);
    log(tr("knowledge economics: %1 requests, %2 users, %3 concepts")
            .arg(economics.requests)
            .arg(economics.users)
            .arg(economics.concepts));
}

void MainWindow::showExperiment(std::shared_ptr<const ExperimentSnapshot> snapshot)
{
    m_snapshot = snapshot;
    const bool opening = m_openingRead && snapshot->path == m_openingExperiment;
    m_experimentPath = snapshot->path;
    m_exportAction->setEnabled(true);
    m_exportButton->setEnabled(!m_engineBusy);
    const QFileInfo exp(snapshot->path);
    if (m_reportFolder->text().isEmpty() || m_reportFolderIsDefault) {
        m_reportFolder->setText(exp.dir().filePath(exp.completeBaseName() + "-report"));
        m_reportFolderIsDefault = true;
    }
    m_reportStatus->setText(tr("Experiment %1: %2 prompts, %3 converter(s), %4 comparison list(s), %5 "
                               "ledger(s).")
                                .arg(snapshot->path)
                                .arg(snapshot->prompts)
                                .arg(snapshot->converters.size())
                                .arg(snapshot->comparisons.size())
                                .arg(snapshot->ledgers.size()));
    if (m_project && (!m_project->experiment ||
                      QString::fromStdString(m_project->experiment->string()) != snapshot->path)) {
        m_project->experiment = snapshot->path.toStdString(); // File > Open Experiment too
        refreshSummary();
    }
    markStep("capture", snapshot->prompts > 0);
    markStep("alignment", !snapshot->converters.empty());
    markStep("compare", !snapshot->comparisons.empty());
    markStep("replay", !snapshot->ledgers.empty());
    m_capture->setSnapshot(snapshot);
    m_alignment->setSnapshot(snapshot);
    m_replay->setSnapshot(snapshot);
    m_compare->setExperimentPath(snapshot->path);
    std::vector<CompareResult> history;
    for (const auto &[name, samples] : snapshot->comparisons)
        history.insert(history.end(), samples.begin(), samples.end());
    m_compare->setHistory(history);
    if (m_project && !m_project->compare.prompt.empty()) {
        // the project's own prompt, not the newest sample's
        auto request = m_compare->request();
        request.prompt = m_project->compare.prompt;
        m_compare->setRequest(request);
    }
    QString inUse = m_alignment->inUse();
    if (inUse.isEmpty() && m_project)
        inUse = QString::fromStdString(m_project->alignment.inUse);
    bool found = false;
    for (const auto &c : snapshot->converters)
        found = found || QString::fromStdString(c.name) == inUse;
    if (!found) // the first stored converter until the user picks another
        inUse = snapshot->converters.empty() ? QString()
                                             : QString::fromStdString(snapshot->converters.front().name);
    setInUse(inUse);
    if (opening) {
        // what opening the project shows is what the file says (the panels took the experiment's
        // converter and newest comparison); an experiment found beside the file is new to it
        m_openingRead = false;
        m_savedState = projectState(m_projectPath, m_experimentBeside);
        refreshModified();
    }
    log(tr("experiment %1: %2 prompts, %3 converter(s), %4 sweep(s), %5 ledger(s), %6 comparison list(s)")
            .arg(snapshot->path)
            .arg(snapshot->prompts)
            .arg(snapshot->converters.size())
            .arg(snapshot->sweeps.size())
            .arg(snapshot->ledgers.size())
            .arg(snapshot->comparisons.size()));
}

void MainWindow::log(const QString &line)
{
    const bool follow = m_logAtEnd;
    m_log->appendPlainText(QString("%1  %2").arg(QDateTime::currentDateTime().toString("HH:mm:ss"), line));
    if (follow)
        m_log->verticalScrollBar()->setValue(m_log->verticalScrollBar()->maximum());
}

QString MainWindow::jobName() const
{
    switch (m_job) {
    case Job::Load:
        return tr("Loading the models");
    case Job::Capture:
        return tr("The capture");
    case Job::Fit:
        return tr("The converter fit");
    case Job::Sweep:
        return tr("The converter sweep");
    case Job::Compare:
        return tr("The comparison");
    case Job::Replay:
        return tr("The replay");
    case Job::Knowledge:
        return tr("The knowledge job");
    case Job::Report:
        return tr("The report");
    case Job::Read:
        return tr("Reading the experiment");
    default:
        return tr("A job");
    }
}

bool MainWindow::confirmClose()
{
    if (m_engineBusy) {
        if (m_closeAfterJob)
            return false; // already stopping; closes when the engine reports it stopped
        QMessageBox box(QMessageBox::Question, tr("A job is running"),
                        tr("%1 is still running. Stop it and quit? What it has written so far is kept "
                           "(a capture keeps the prompts already in the file, a replay its ledger rows).")
                            .arg(jobName()),
                        QMessageBox::Yes | QMessageBox::No, this);
        box.setObjectName("closeDuringJobBox");
        box.button(QMessageBox::Yes)->setText(tr("Stop and quit"));
        box.button(QMessageBox::No)->setText(tr("Keep working"));
        if (box.exec() != QMessageBox::Yes)
            return false;
        m_closeAfterJob = true;
        log(tr("stopping %1 before quitting").arg(jobName().toLower()));
        statusBar()->showMessage(tr("Stopping the job; the window closes when it has stopped."));
        Q_EMIT cancelRequested();
        return false;
    }
    return confirmUnsaved(tr("closing"));
}

bool MainWindow::confirmUnsaved(const QString &action)
{
    if (!isProjectModified())
        return true;
    QMessageBox box(QMessageBox::Warning, tr("Unsaved project"),
                    m_projectPath.isEmpty()
                        ? tr("This session's models and experiment are not in a project yet. Save them as a "
                             "project before %1?")
                              .arg(action)
                        : tr("%1 has changes that are not saved (models, experiment, converter in use or "
                             "step settings). Save them before %2?")
                              .arg(QFileInfo(m_projectPath).fileName(), action),
                    QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, this);
    box.setObjectName("unsavedProjectBox");
    box.setDefaultButton(QMessageBox::Save);
    const int answer = box.exec();
    if (answer == QMessageBox::Cancel)
        return false;
    if (answer == QMessageBox::Discard)
        return true;
    QString path = m_projectPath;
    if (path.isEmpty())
        path =
            QFileDialog::getSaveFileName(this, tr("Save project"), {}, tr("KV Workbench projects (*.kvwb)"));
    return !path.isEmpty() && saveProject(path);
}

void MainWindow::closeEvent(QCloseEvent *event)
{
    if (!confirmClose()) {
        event->ignore();
        return;
    }
    auto s = settings();
    s.setValue("window/geometry", saveGeometry());
    s.setValue("window/state", saveState());
    QMainWindow::closeEvent(event);
}

} // namespace kvwb::ui
