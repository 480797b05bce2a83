#include "ui/main_window.h"

#include "core/error.h"
#include "ui/alignment_panel.h"
#include "ui/model_card_model.h"
#include "ui/replay_panel.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDateTime>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QPlainTextEdit>
#include <QSettings>
#include <QStatusBar>
#include <QTableView>

namespace kvwb::ui {

namespace {
constexpr int kMaxRecent = 8;

QSettings settings()
{
    return QSettings("kvwb", "workbench");
}
} // namespace

MainWindow::MainWindow(QWidget *parent) : QMainWindow(parent)
{
    setObjectName("kvwbMainWindow");
    setWindowTitle(tr("KV Workbench"));
    resize(1200, 800);
    m_summary = new QLabel(this);
    m_summary->setObjectName("projectSummary");
    m_summary->setWordWrap(true);
    m_summary->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_summary->setMargin(12);
    setCentralWidget(m_summary);

    m_models = new ModelsPanel(this);
    m_card = new ModelCardModel(this);
    m_cardView = new QTableView(this);
    m_cardView->setObjectName("modelCardView");
    m_cardView->setModel(m_card);
    m_cardView->horizontalHeader()->setStretchLastSection(true);
    m_cardView->verticalHeader()->hide();
    m_cardView->setMinimumWidth(420); // property + two value columns readable without scrolling
    m_cardView->resizeColumnsToContents();
    m_log = new QPlainTextEdit(this);
    m_log->setObjectName("logView");
    m_log->setReadOnly(true);
    m_log->setMaximumBlockCount(5000);

    addDock("modelsDock", tr("Models"), m_models, Qt::TopDockWidgetArea);
    addDock("modelCardDock", tr("Model cards (A | B)"), m_cardView, Qt::RightDockWidgetArea);
    addDock("logDock", tr("Log"), m_log, Qt::BottomDockWidgetArea);
    m_alignment = new AlignmentPanel(this);
    m_replay = new ReplayPanel(this);
    auto *alignDock = addDock("alignmentDock", tr("Alignment"), m_alignment, Qt::LeftDockWidgetArea);
    auto *replayDock = addDock("replayDock", tr("Replay"), m_replay, Qt::LeftDockWidgetArea);
    tabifyDockWidget(alignDock, replayDock);
    alignDock->raise();

    m_engineLabel = new QLabel(tr("engine: idle"), this);
    m_engineLabel->setObjectName("engineState");
    m_deviceLabel = new QLabel(tr("device: -"), this);
    m_deviceLabel->setObjectName("deviceLabel");
    m_memoryLabel = new QLabel(tr("memory: -"), this);
    m_memoryLabel->setObjectName("memoryLabel");
    statusBar()->addWidget(m_engineLabel, 1);
    statusBar()->addPermanentWidget(m_deviceLabel);
    statusBar()->addPermanentWidget(m_memoryLabel);

    buildMenus();
    connect(m_models, &ModelsPanel::loadRequested, this, &MainWindow::loadRequested);
    connect(m_models, &ModelsPanel::cancelRequested, this, &MainWindow::cancelRequested);
    connect(m_models, &ModelsPanel::choiceChanged, this, [this](char role) {
        m_card->setModel(role == 'a' ? ModelCardModel::ModelAColumn : ModelCardModel::ModelBColumn,
                         m_models->previewConfig(role));
    });
    for (char role : {'a', 'b'})
        m_card->setModel(role == 'a' ? ModelCardModel::ModelAColumn : ModelCardModel::ModelBColumn,
                         m_models->previewConfig(role));

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
    dock->setWidget(widget);
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
    QAction *open = file->addAction(tr("&Open Project..."), this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Open project"), QFileInfo(m_projectPath).path(), tr("KV Workbench projects (*.kvwb)"));
        if (!path.isEmpty())
            openProject(path);
    });
    open->setShortcut(QKeySequence::Open);
    QAction *openExperiment = file->addAction(tr("Open &Experiment..."), this, [this] {
        const QString path =
            QFileDialog::getOpenFileName(this, tr("Open experiment file"), QFileInfo(m_projectPath).path(),
                                         tr("Experiment files (*.h5 *.hdf5)"));
        if (!path.isEmpty())
            Q_EMIT experimentRequested(path);
    });
    openExperiment->setShortcut(Qt::CTRL | Qt::Key_E);
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
        if (project.experiment)
            Q_EMIT experimentRequested(QString::fromStdString(project.experiment->string()));
        log(tr("opened project %1").arg(m_projectPath));
        refreshSummary();
        return true;
    } catch (const core::Error &e) {
        showFailure(tr("cannot open project: %1").arg(QString::fromUtf8(e.what())));
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
    try {
        p.save(path.toStdString());
        m_project = p.resolved(path.toStdString());
        m_projectPath = QFileInfo(path).absoluteFilePath();
        rememberRecent(m_projectPath);
        log(tr("saved project %1").arg(m_projectPath));
        refreshSummary();
        return true;
    } catch (const core::Error &e) {
        showFailure(tr("cannot save project: %1").arg(QString::fromUtf8(e.what())));
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
    if (!m_project) {
        m_summary->setText(
            tr("<h2>KV Workbench</h2><p>Open a project (File &gt; Open Project) or choose two models "
               "in the Models panel and load them.</p>"));
        return;
    }
    const auto &p = *m_project;
    QString workloads;
    for (const auto &w : p.workloads)
        workloads += QString("<li>%1</li>").arg(QString::fromStdString(w.string()).toHtmlEscaped());
    m_summary->setText(
        tr("<h2>%1</h2><p>%2</p><p><b>Project file:</b> %3</p><p><b>Model A (source):</b> %4<br>"
           "<b>Model B (target):</b> %5</p><p><b>Workloads:</b></p><ul>%6</ul>"
           "<p>Load the pair in the Models panel; their cards show side by side, with the KV-cache "
           "geometry differences marked.</p>")
            .arg(QString::fromStdString(p.name).toHtmlEscaped(),
                 QString::fromStdString(p.description).toHtmlEscaped(), m_projectPath.toHtmlEscaped(),
                 QString::fromStdString(p.modelA.path.string()).toHtmlEscaped(),
                 QString::fromStdString(p.modelB.path.string()).toHtmlEscaped(),
                 workloads.isEmpty() ? tr("<li>none</li>") : workloads));
}

void MainWindow::setEngineState(const QString &state)
{
    m_engineLabel->setText(tr("engine: %1").arg(state));
}

void MainWindow::showLoadProgress(double fraction, const QString &stage)
{
    m_models->setProgress(fraction, stage);
}

void MainWindow::showModelsLoaded(const LoadedModelInfo &a, const LoadedModelInfo &b, double ms)
{
    m_models->setLoaded(a, b, ms);
    m_card->setModel(ModelCardModel::ModelAColumn, a.config);
    m_card->setModel(ModelCardModel::ModelBColumn, b.config);
    m_cardView->resizeColumnsToContents();
    m_deviceLabel->setText(tr("device: %1").arg(a.device));
    m_memoryLabel->setText(
        tr("memory: %1 MB of weights").arg(double(a.deviceBytes + b.deviceBytes) / 1e6, 0, 'f', 1));
    log(tr("loaded A %1 (%2) and B %3 (%4) in %5 ms")
            .arg(a.path, a.fingerprint.left(12), b.path, b.fingerprint.left(12))
            .arg(ms, 0, 'f', 0));
}

void MainWindow::showFailure(const QString &message)
{
    m_models->setFailed(message);
    statusBar()->showMessage(message, 10000);
    log(tr("error: %1").arg(message));
}

void MainWindow::showCancelled()
{
    m_models->setCancelled();
    log(tr("cancelled"));
}

void MainWindow::showExperiment(std::shared_ptr<const ExperimentSnapshot> snapshot)
{
    m_experimentPath = snapshot->path;
    m_exportAction->setEnabled(true);
    m_alignment->setSnapshot(snapshot);
    m_replay->setSnapshot(snapshot);
    log(tr("experiment %1: %2 prompts, %3 converter(s), %4 sweep(s), %5 ledger(s)")
            .arg(snapshot->path)
            .arg(snapshot->prompts)
            .arg(snapshot->converters.size())
            .arg(snapshot->sweeps.size())
            .arg(snapshot->ledgers.size()));
}

bool MainWindow::exportReport(const QString &outDir)
{
    if (m_experimentPath.isEmpty())
        return false;
    m_reportDir = outDir;
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
        showFailure(tr("cannot write the report: %1").arg(QString::fromUtf8(e.what())));
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
