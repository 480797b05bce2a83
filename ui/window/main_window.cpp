#include "ui/window/main_window.h"

#include "core/util/error.h"
#include "ui/models/model_card_model.h"
#include "ui/panels/alignment_panel.h"
#include "ui/panels/capture_panel.h"
#include "ui/panels/compare_panel.h"
#include "ui/panels/replay_panel.h"

#include <QAbstractButton>
#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDateTime>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QScrollArea>
#include <QSettings>
#include <QStatusBar>
#include <QTableView>
#include <QTimer>

#include <fstream>

#include <unistd.h>

namespace kvwb::ui {

namespace {
constexpr int kMaxRecent = 8;

QSettings settings()
{
    return QSettings("kvwb", "workbench");
}

// The process's resident memory (Linux /proc/self/statm); -1 where unknown.
int64_t residentBytes()
{
    std::ifstream statm("/proc/self/statm");
    int64_t pages = 0, resident = 0;
    if (!(statm >> pages >> resident))
        return -1;
    return resident * int64_t(sysconf(_SC_PAGESIZE));
}
} // namespace

MainWindow::MainWindow(QWidget *parent) : QMainWindow(parent)
{
    setObjectName("kvwbMainWindow");
    setWindowTitle(tr("KV Workbench"));
    resize(1200, 800);
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
    m_cardView->setMinimumWidth(420);
    m_log = new QPlainTextEdit(this);
    m_log->setObjectName("logView");
    m_log->setReadOnly(true);
    m_log->setMaximumBlockCount(5000);

    auto *modelsDock = addDock("modelsDock", tr("Models"), m_models, Qt::TopDockWidgetArea);
    auto *cardDock = m_cardDock =
        addDock("modelCardDock", tr("Model cards (A | B)"), m_cardView, Qt::RightDockWidgetArea);
    auto *projectDock = addDock("projectDock", tr("Project"), m_summary, Qt::RightDockWidgetArea);
    tabifyDockWidget(cardDock, projectDock);
    auto *logDock = addDock("logDock", tr("Log"), m_log, Qt::BottomDockWidgetArea);
    m_capture = new CapturePanel(this);
    m_alignment = new AlignmentPanel(this);
    m_compare = new ComparePanel(this);
    m_replay = new ReplayPanel(this);
    // the workflow's order: capture, fit, compare, replay
    auto *captureDock = addDock("captureDock", tr("Capture"), m_capture, Qt::LeftDockWidgetArea);
    auto *alignDock = addDock("alignmentDock", tr("Alignment"), m_alignment, Qt::LeftDockWidgetArea);
    auto *compareDock = addDock("compareDock", tr("Compare"), m_compare, Qt::LeftDockWidgetArea);
    auto *replayDock = addDock("replayDock", tr("Replay"), m_replay, Qt::LeftDockWidgetArea);
    tabifyDockWidget(captureDock, alignDock);
    tabifyDockWidget(alignDock, compareDock);
    tabifyDockWidget(compareDock, replayDock);
    captureDock->raise();
    projectDock->raise(); // a newcomer reads the project and the steps first
    // no central widget: the workflow docks on the left take the room
    resizeDocks({captureDock, cardDock}, {900, 380}, Qt::Horizontal);
    resizeDocks({modelsDock, captureDock, logDock}, {200, 600, 110}, Qt::Vertical);

    m_engineLabel = new QLabel(tr("engine: idle"), this);
    m_engineLabel->setObjectName("engineState");
    m_deviceLabel = new QLabel(tr("device: -"), this);
    m_deviceLabel->setObjectName("deviceLabel");
    m_memoryLabel = new QLabel(tr("memory: -"), this);
    m_memoryLabel->setObjectName("memoryLabel");
    statusBar()->addWidget(m_engineLabel, 1);
    statusBar()->addPermanentWidget(m_deviceLabel);
    statusBar()->addPermanentWidget(m_memoryLabel);
    auto *memoryTimer = new QTimer(this);
    memoryTimer->setInterval(2000);
    connect(memoryTimer, &QTimer::timeout, this, &MainWindow::refreshMemory);
    memoryTimer->start();
    refreshMemory();

    buildMenus();
    connect(m_models, &ModelsPanel::loadRequested, this, [this](const ModelChoice &a, const ModelChoice &b) {
        beginJob(Job::Load); // before the request: the engine reports busy as soon as it starts
        Q_EMIT loadRequested(a, b);
    });
    connect(m_models, &ModelsPanel::cancelRequested, this, &MainWindow::cancelRequested);
    connect(m_models, &ModelsPanel::choiceChanged, this, [this](char role) {
        m_card->setModel(role == 'a' ? ModelCardModel::ModelAColumn : ModelCardModel::ModelBColumn,
                         m_models->previewConfig(role));
    });
    for (char role : {'a', 'b'})
        m_card->setModel(role == 'a' ? ModelCardModel::ModelAColumn : ModelCardModel::ModelBColumn,
                         m_models->previewConfig(role));

    connect(m_capture, &CapturePanel::captureRequested, this, [this](const CaptureRequest &r) {
        beginJob(Job::Capture);
        log(tr("capturing %1 into %2").arg(r.promptsPath, r.outPath));
        Q_EMIT captureRequested(r);
    });
    connect(m_alignment, &AlignmentPanel::fitRequested, this, [this](const FitRequest &r) {
        beginJob(Job::Fit);
        log(tr("fitting converter '%1' (%2, k %3) on %4")
                .arg(r.name, QString::fromUtf8(core::layerSelectionName(r.selection)))
                .arg(r.k)
                .arg(r.experimentPath));
        Q_EMIT fitRequested(r);
    });
    connect(m_alignment, &AlignmentPanel::inUseChanged, this, &MainWindow::setInUse);
    connect(m_compare, &ComparePanel::compareRequested, this, [this](const CompareRequest &r) {
        beginJob(Job::Compare);
        Q_EMIT compareRequested(r);
    });
    connect(m_replay, &ReplayPanel::replayRequested, this, [this](const ReplayRequest &r) {
        beginJob(Job::Replay);
        m_replay->beginLive(QFileInfo(r.workloadPath).fileName() + " | " +
                            (r.tiers.empty() ? tr("no tiers") : tierNames(r.tiers).join(',')));
        log(tr("replaying %1 through %2")
                .arg(r.workloadPath, r.tiers.empty() ? tr("no tiers") : tierNames(r.tiers).join(',')));
        Q_EMIT replayRequested(r);
    });
    connect(m_replay, &ReplayPanel::pauseRequested, this, &MainWindow::pauseRequested);
    connect(m_capture, &CapturePanel::cancelRequested, this, &MainWindow::cancelRequested);
    connect(m_alignment, &AlignmentPanel::cancelRequested, this, &MainWindow::cancelRequested);
    connect(m_compare, &ComparePanel::cancelRequested, this, &MainWindow::cancelRequested);
    connect(m_replay, &ReplayPanel::stopRequested, this, &MainWindow::cancelRequested);

    m_defaultState = saveState();
    auto s = settings();
    restoreGeometry(s.value("window/geometry").toByteArray());
    restoreState(s.value("window/state").toByteArray());
    refreshSummary();
}

MainWindow::~MainWindow() = default;

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

QList<QDockWidget *> MainWindow::docks() const
{
    return findChildren<QDockWidget *>();
}

void MainWindow::buildMenus()
{
    QMenu *file = menuBar()->addMenu(tr("&File"));
    m_openAction = file->addAction(tr("&Open Project..."), this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Open project"), QFileInfo(m_projectPath).path(), tr("KV Workbench projects (*.kvwb)"));
        if (!path.isEmpty())
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
    m_openExperimentAction->setShortcut(Qt::CTRL | Qt::Key_E);
    m_exportAction = file->addAction(tr("E&xport Report..."), this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Export the report into"),
                                                              QFileInfo(m_experimentPath).path());
        if (!dir.isEmpty())
            exportReport(dir);
    });
    m_exportAction->setObjectName("exportReportAction");
    m_exportAction->setEnabled(false);
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

bool MainWindow::openProject(const QString &path)
{
    try {
        const auto project = core::Project::load(path.toStdString()).resolved(path.toStdString());
        m_project = project;
        m_projectPath = QFileInfo(path).absoluteFilePath();
        for (char role : {'a', 'b'}) {
            const auto &m = role == 'a' ? project.modelA : project.modelB;
            m_models->setChoice(role, {QString::fromStdString(m.path.string()),
                                       QString::fromStdString(m.device), QString::fromStdString(m.dtype), 0});
        }
        rememberRecent(m_projectPath);
        setWindowTitle(tr("KV Workbench - %1").arg(QString::fromStdString(project.name)));
        applyProjectSettings();
        if (project.experiment) {
            beginJob(Job::Read);
            Q_EMIT experimentRequested(QString::fromStdString(project.experiment->string()));
        }
        log(tr("opened project %1").arg(m_projectPath));
        refreshSummary();
        return true;
    } catch (const core::Error &e) {
        showError(tr("cannot open project: %1").arg(QString::fromUtf8(e.what())));
        return false;
    }
}

bool MainWindow::saveProject(const QString &path)
{
    core::Project p = m_project.value_or(core::Project{});
    if (p.name.empty())
        p.name = QFileInfo(path).completeBaseName().toStdString();
    for (char role : {'a', 'b'}) {
        auto &m = role == 'a' ? p.modelA : p.modelB;
        const auto c = m_models->choice(role);
        m.path = c.path.toStdString();
        m.device = c.device.toStdString();
        m.dtype = c.dtype.toStdString();
    }
    storeProjectSettings(p);
    if (!m_experimentPath.isEmpty())
        p.experiment = m_experimentPath.toStdString();
    try {
        p.save(path.toStdString());
        m_project = p.resolved(path.toStdString());
        m_projectPath = QFileInfo(path).absoluteFilePath();
        rememberRecent(m_projectPath);
        log(tr("saved project %1").arg(m_projectPath));
        refreshSummary();
        return true;
    } catch (const core::Error &e) {
        showError(tr("cannot save project: %1").arg(QString::fromUtf8(e.what())));
        return false;
    }
}

void MainWindow::rememberRecent(const QString &path)
{
    auto s = settings();
    QStringList recent = s.value("recentProjects").toStringList();
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > kMaxRecent)
        recent.removeLast();
    s.setValue("recentProjects", recent);
    refreshRecentMenu();
}

void MainWindow::refreshRecentMenu()
{
    m_recentMenu->clear();
    const QStringList recent = settings().value("recentProjects").toStringList();
    for (const QString &p : recent)
        m_recentMenu->addAction(p, this, [this, p] { openProject(p); });
    m_recentMenu->setEnabled(!recent.isEmpty());
}

void MainWindow::refreshSummary()
{
    const QString steps =
        tr("<p><b>Steps</b></p><ol>"
           "<li><b>Models</b>: choose A (source) and B (target), check the memory estimate, <i>Load both "
           "models</i>. The model cards show where their KV-cache geometry differs.</li>"
           "<li><b>Capture</b>: run both over a prompt set; their K/V go into an experiment file.</li>"
           "<li><b>Alignment</b>: fit a converter from A's KV into B's; see its per-layer and per-head "
           "scores; <i>Use this converter</i>.</li>"
           "<li><b>Compare</b>: one prompt answered by A, by B from scratch and by B from A's converted "
           "cache, token by token.</li>"
           "<li><b>Replay</b>: a workload through exact, semantic, prefix and cross-model cache tiers, "
           "with live hit rates and latency.</li>"
           "<li><b>File &gt; Export Report</b>: HTML, PDF, Markdown and CSV/JSON of the experiment.</li>"
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
    m_models->setProgress(fraction, stage);
}

void MainWindow::beginJob(Job job)
{
    if (!m_engineBusy) // else the engine refuses the request; the running job keeps its panel
        m_job = job;
}

void MainWindow::chainJob(Job job)
{
    m_engineBusy = false; // called from a result handler: the engine is free (it delivers results so)
    m_job = job;
}

void MainWindow::showProgress(double fraction, const QString &stage)
{
    switch (m_job) {
    case Job::Load:
        m_models->setProgress(fraction, stage);
        break;
    case Job::Capture:
        m_capture->setProgress(fraction, stage);
        break;
    case Job::Fit:
        m_alignment->setFitProgress(fraction, stage);
        break;
    case Job::Compare:
        m_compare->setProgress(fraction, stage);
        break;
    default: // replays report through showReplayProgress; reads and reports are short
        break;
    }
}

void MainWindow::setEngineBusy(bool busy)
{
    m_engineBusy = busy;
    // the window's own engine requests wait for the running job
    m_openAction->setEnabled(!busy);
    m_openExperimentAction->setEnabled(!busy);
    m_recentMenu->setEnabled(!busy && !m_recentMenu->actions().isEmpty());
    m_exportAction->setEnabled(!busy && !m_experimentPath.isEmpty());
    if (m_job != Job::Load)
        m_models->setEngineBusy(busy);
    m_capture->setBusy(busy);
    m_alignment->setBusy(busy);
    m_compare->setBusy(busy);
    m_replay->setBusy(busy);
    if (!busy)
        m_job = Job::None;
}

void MainWindow::showModelsLoaded(const LoadedModelInfo &a, const LoadedModelInfo &b, double ms)
{
    m_models->setLoaded(a, b, ms);
    m_modelsLoaded = true;
    m_capture->setModelsLoaded(true);
    m_compare->setModelsLoaded(true);
    m_replay->setModelsLoaded(true);
    m_card->setModel(ModelCardModel::ModelAColumn, a.config);
    m_card->setModel(ModelCardModel::ModelBColumn, b.config);
    for (const auto &[column, m] :
         {std::pair{int(ModelCardModel::ModelAColumn), &a}, {int(ModelCardModel::ModelBColumn), &b}})
        m_card->setIdentity(column,
                            m->tokenizer.isEmpty() ? tr("none: %1").arg(m->tokenizerError) : m->tokenizer,
                            m->fingerprint);
    m_cardDock->raise(); // the pair's cards side by side, their KV-geometry differences marked
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
        m_alignment->setFitFailed(message);
        break;
    case Job::Compare:
        m_compare->setFailed(message);
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

void MainWindow::showReplayRows(const std::vector<core::LedgerRow> &rows)
{
    m_replay->appendRows(rows);
}

void MainWindow::showReplayProgress(int done, int total)
{
    m_replay->setReplayProgress(done, total);
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

void MainWindow::showExperiment(std::shared_ptr<const ExperimentSnapshot> snapshot)
{
    m_snapshot = snapshot;
    m_experimentPath = snapshot->path;
    m_exportAction->setEnabled(true);
    m_capture->setSnapshot(snapshot);
    m_alignment->setSnapshot(snapshot);
    m_replay->setSnapshot(snapshot);
    m_compare->setExperimentPath(snapshot->path);
    std::vector<CompareResult> history;
    for (const auto &[name, samples] : snapshot->comparisons)
        history.insert(history.end(), samples.begin(), samples.end());
    m_compare->setHistory(history);
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
    log(tr("experiment %1: %2 prompts, %3 converter(s), %4 sweep(s), %5 ledger(s), %6 comparison list(s)")
            .arg(snapshot->path)
            .arg(snapshot->prompts)
            .arg(snapshot->converters.size())
            .arg(snapshot->sweeps.size())
            .arg(snapshot->ledgers.size())
            .arg(snapshot->comparisons.size()));
}

void MainWindow::applyProjectSettings()
{
    if (!m_project)
        return;
    const auto &p = *m_project;
    const QFileInfo projectFile(m_projectPath);
    QStringList promptSets, workloads;
    for (const auto &f : p.promptSets)
        promptSets << QString::fromStdString(f.string());
    if (p.corpus)
        promptSets << QString::fromStdString(p.corpus->string());
    for (const auto &f : p.workloads) {
        workloads << QString::fromStdString(f.string());
        promptSets << QString::fromStdString(f.string()); // a workload's prompts can be captured too
    }
    m_capture->setPromptSets(promptSets);
    CaptureRequest c;
    c.promptsPath = promptSets.value(0);
    c.outPath = p.experiment ? QString::fromStdString(p.experiment->string())
                             : projectFile.dir().filePath(projectFile.completeBaseName() + "-experiment.h5");
    c.storage = core::parseKvStorage(p.capture.storage).value_or(core::KvStorage::F32);
    c.compress = p.capture.compress;
    c.maxTokens = p.capture.maxTokens;
    c.limit = p.capture.limit;
    c.postRope = p.capture.postRope;
    m_capture->setRequest(c);

    FitRequest f;
    f.name = QString::fromStdString(p.alignment.name);
    f.selection =
        core::parseLayerSelection(p.alignment.selection).value_or(core::LayerSelection::Proportional);
    f.k = p.alignment.k;
    f.autoLambda = p.alignment.autoLambda;
    f.lambda = p.alignment.lambda;
    f.perHead = p.alignment.perHead;
    f.maxTrainTokens = p.alignment.maxTrainTokens;
    m_alignment->setFitRequest(f);

    m_replay->setWorkloads(workloads);
    ReplayRequest r;
    r.workloadPath = workloads.value(0);
    r.tiers.clear();
    for (const auto &t : p.replay.tiers)
        if (const auto kind = core::parseTierKind(t); kind && *kind != core::TierKind::None)
            r.tiers.push_back(*kind);
    r.threshold = p.replay.threshold;
    r.embedder = QString::fromStdString(p.replay.embedder);
    r.gateSignal = core::parseGateSignal(p.replay.gateSignal).value_or(core::GateSignal::TailKl);
    r.gateThreshold = p.replay.gateThreshold;
    r.gate = p.replay.gate;
    r.maxTokens = p.replay.maxTokens;
    r.limit = p.replay.limit;
    m_replay->setReplayRequest(r);
}

void MainWindow::storeProjectSettings(core::Project &p) const
{
    const auto c = m_capture->request();
    p.capture.storage = core::kvStorageName(c.storage);
    p.capture.compress = c.compress;
    p.capture.maxTokens = c.maxTokens;
    p.capture.limit = c.limit;
    p.capture.postRope = c.postRope;
    const auto f = m_alignment->fitRequest();
    p.alignment.name = f.name.toStdString();
    p.alignment.selection = core::layerSelectionName(f.selection);
    p.alignment.k = f.k;
    p.alignment.autoLambda = f.autoLambda;
    p.alignment.lambda = f.lambda;
    p.alignment.perHead = f.perHead;
    p.alignment.maxTrainTokens = f.maxTrainTokens;
    p.alignment.inUse = m_alignment->inUse().toStdString();
    const auto r = m_replay->replayRequest();
    p.replay.tiers.clear();
    for (const auto t : r.tiers)
        p.replay.tiers.push_back(core::tierKindName(t));
    p.replay.threshold = r.threshold;
    p.replay.embedder = r.embedder.toStdString();
    p.replay.gateSignal = core::gateSignalName(r.gateSignal);
    p.replay.gateThreshold = r.gateThreshold;
    p.replay.gate = r.gate;
    p.replay.maxTokens = r.maxTokens;
    p.replay.limit = r.limit;
}

bool MainWindow::exportReport(const QString &outDir)
{
    if (m_experimentPath.isEmpty() || m_engineBusy)
        return false;
    m_reportDir = outDir;
    beginJob(Job::Report);
    log(tr("exporting the report of %1 into %2").arg(m_experimentPath, outDir));
    Q_EMIT reportRequested(m_experimentPath);
    return true;
}

QStringList MainWindow::writeReport(std::shared_ptr<const ReportData> data)
{
    QStringList files;
    if (m_reportDir.isEmpty() || !data)
        return files;
    ReportData copy = *data; // the writers add their warnings
    try {
        const std::filesystem::path dir = m_reportDir.toStdString();
        for (auto writer : {&writeHtml, &writePdf, &writeMarkdown, &writeCsvJson})
            for (const auto &f : writer(copy, dir))
                files << QString::fromStdString(f.string());
        for (const auto &w : copy.warnings)
            log(tr("report: %1").arg(QString::fromStdString(w)));
        log(tr("report written: %1 files in %2 (configuration sha256 %3)")
                .arg(files.size())
                .arg(m_reportDir, QString::fromStdString(copy.configSha256).left(16)));
        statusBar()->showMessage(tr("Report written to %1").arg(m_reportDir), 10000);
    } catch (const core::Error &e) {
        showError(tr("cannot write the report: %1").arg(QString::fromUtf8(e.what())));
    }
    m_reportDir.clear();
    Q_EMIT reportWritten(files);
    return files;
}

void MainWindow::log(const QString &line)
{
    m_log->appendPlainText(QString("%1  %2").arg(QDateTime::currentDateTime().toString("HH:mm:ss"), line));
}

void MainWindow::closeEvent(QCloseEvent *event)
{
    auto s = settings();
    s.setValue("window/geometry", saveGeometry());
    s.setValue("window/state", saveState());
    QMainWindow::closeEvent(event);
}

} // namespace kvwb::ui
