// MainWindow's project: opening, saving and the recent list, and the steps' settings it holds
// (applied to the panels when a project opens, read back from them when it is saved).
#include "ui/window/main_window.h"
#include "ui/window/main_window_p.h"

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

bool MainWindow::openProject(const QString &path)
{
    if (m_engineBusy) {
        showError(tr("cannot open a project while %1 runs: stop it first").arg(jobName().toLower()));
        return false;
    }
    try {
        auto project = core::Project::load(path.toStdString()).resolved(path.toStdString());
        bool beside = false;
        if (!project.experiment) {
            // Capture's default file beside the project, written before the project was saved
            const QFileInfo f(path);
            const QString file = f.dir().filePath(f.completeBaseName() + "-experiment.h5");
            if (QFileInfo::exists(file)) {
                project.experiment = file.toStdString();
                beside = true;
            }
        }
        showProject(project, QFileInfo(path).absoluteFilePath());
        m_experimentBeside = beside;
        rememberRecent(m_projectPath);
        m_openingRead = false;
        if (project.experiment) {
            m_openingRead = true;
            m_openingExperiment = QString::fromStdString(project.experiment->string());
            beginJob(Job::Read);
            Q_EMIT experimentRequested(m_openingExperiment);
        }
        log(tr("opened project %1").arg(m_projectPath));
        refreshSummary();
        m_savedState = projectState(m_projectPath, m_experimentBeside);
        refreshModified();
        return true;
    } catch (const core::Error &e) {
        showError(tr("cannot open project: %1").arg(QString::fromUtf8(e.what())));
        return false;
    }
}

void MainWindow::showProject(const core::Project &project, const QString &path)
{
    resetSteps();
    m_project = project;
    m_projectPath = path;
    m_exportArchiveAction->setEnabled(!m_engineBusy && !m_archiveThread && !m_projectPath.isEmpty());
    m_archiveMissing.clear(); // an archive opening this project sets its own after
    refreshArchiveNote();
    for (char role : {'a', 'b'}) {
        const auto &m = role == 'a' ? project.modelA : project.modelB;
        m_models->setChoice(role, {QString::fromStdString(m.path.string()), QString::fromStdString(m.device),
                                   QString::fromStdString(m.dtype), 0, m.context});
    }
    keepLoadedPairIfChosen();
    setWindowTitle(tr("KV Workbench - %1[*]").arg(QString::fromStdString(project.name)));
    applyProjectSettings();
}

bool MainWindow::newProject(const QString &path)
{
    if (m_engineBusy) {
        showError(tr("cannot create a project while %1 runs: stop it first").arg(jobName().toLower()));
        return false;
    }
    core::Project project;
    project.name = QFileInfo(path).completeBaseName().toStdString();
    try {
        project.save(path.toStdString()); // the file exists from the start; Save writes the work into it
    } catch (const core::Error &e) {
        showError(tr("cannot create project: %1").arg(QString::fromUtf8(e.what())));
        return false;
    }
    showProject(project.resolved(path.toStdString()), QFileInfo(path).absoluteFilePath());
    rememberRecent(m_projectPath);
    log(tr("created project %1").arg(m_projectPath));
    refreshSummary();
    m_savedState = projectState(m_projectPath);
    refreshModified();
    return true;
}

bool MainWindow::closeProject()
{
    if (m_engineBusy) {
        showError(tr("cannot close the project while %1 runs: stop it first").arg(jobName().toLower()));
        return false;
    }
    if (m_project)
        log(tr("closed project %1").arg(m_projectPath));
    resetSteps();
    m_project.reset();
    m_projectPath.clear();
    m_exportArchiveAction->setEnabled(!m_engineBusy && !m_archiveThread && !m_projectPath.isEmpty());
    m_archiveMissing.clear();
    refreshArchiveNote();
    for (char role : {'a', 'b'})
        m_models->setChoice(role, {});
    keepLoadedPairIfChosen();
    setWindowTitle(tr("KV Workbench[*]"));
    refreshSummary();
    m_savedState.clear();
    refreshModified();
    return true;
}

core::Project MainWindow::currentProject(const QString &path) const
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
        m.context = c.context;
    }
    storeProjectSettings(p);
    if (!m_experimentPath.isEmpty())
        p.experiment = m_experimentPath.toStdString();
    return p;
}

QString MainWindow::projectState(const QString &path, bool withoutExperiment) const
{
    core::Project p = currentProject(path);
    if (withoutExperiment)
        p.experiment.reset();
    return QString::fromStdString(p.toJson(path.toStdString()));
}

bool MainWindow::isProjectModified() const
{
    if (m_projectPath.isEmpty()) // no project yet: work worth keeping is an experiment or a choice
        return !m_experimentPath.isEmpty();
    return projectState(m_projectPath) != m_savedState;
}

void MainWindow::refreshModified()
{
    setWindowModified(isProjectModified());
}

bool MainWindow::saveProject(const QString &path)
{
    const core::Project p = currentProject(path);
    try {
        p.save(path.toStdString());
        m_project = p.resolved(path.toStdString());
        m_projectPath = QFileInfo(path).absoluteFilePath();
        m_exportArchiveAction->setEnabled(!m_engineBusy && !m_archiveThread && !m_projectPath.isEmpty());
        rememberRecent(m_projectPath);
        m_experimentBeside = false;
        log(tr("saved project %1").arg(m_projectPath));
        setWindowTitle(tr("KV Workbench - %1[*]").arg(QString::fromStdString(m_project->name)));
        refreshSummary();
        m_savedState = projectState(m_projectPath);
        refreshModified();
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

QStringList MainWindow::recentProjects()
{
    return settings().value("recentProjects").toStringList();
}

void MainWindow::refreshRecentMenu()
{
    m_recentMenu->clear();
    const QStringList recent = recentProjects();
    for (const QString &p : recent)
        m_recentMenu->addAction(p, this, [this, p] {
            if (confirmUnsaved(tr("opening another project")))
                openProject(p);
        });
    m_recentMenu->setEnabled(!recent.isEmpty());
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
    // Capture's default file sits beside the project, or where this user can write when the
    // project's folder is read-only (the installed demo under /usr/share)
    QString captureDir = projectFile.dir().path();
    if (!QFileInfo(captureDir).isWritable()) {
        captureDir = QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation);
        QDir().mkpath(captureDir);
    }
    c.outPath = p.experiment ? QString::fromStdString(p.experiment->string())
                             : QDir(captureDir).filePath(projectFile.completeBaseName() + "-experiment.h5");
    static_cast<core::CaptureSettings &>(c) = p.capture;
    m_capture->setRequest(c);
    m_alignment->setFitRequest(p.alignment.fit);

    m_replay->setWorkloads(workloads);
    m_knowledge->setWorkloads(workloads);
    const QString graph = QString::fromStdString(p.knowledge.graph.string()),
                  profiles = QString::fromStdString(p.knowledge.profiles.string());
    m_knowledge->setGraphPath(graph);
    m_knowledge->setProfilesPath(profiles);
    if (p.knowledge.useInReplays && !graph.isEmpty())
        m_replay->setKnowledgeAvailable(graph, profiles);
    core::ReplaySettings r = p.replay;
    r.workload = workloads.value(0).toStdString();
    m_replay->setReplayRequest(r);

    // the Compare step's settings and prompt set as the project keeps them; its experiment and
    // converter are the shown experiment's
    const core::CompareSettings shown = m_compare->request();
    core::CompareSettings cmp = p.compare;
    cmp.experiment = shown.experiment;
    cmp.converter = shown.converter;
    cmp.saveSamples = shown.saveSamples; // the step stores what it compares
    m_compare->setPromptSetRequest(cmp);
    cmp.prompt = p.compare.prompt.empty() ? shown.prompt : p.compare.prompt;
    cmp.promptsFile.clear();
    m_compare->setRequest(cmp);
}

void MainWindow::storeProjectSettings(core::Project &p) const
{
    p.capture = m_capture->request(); // the settings without the request's paths
    p.alignment.fit = m_alignment->fitRequest();
    p.alignment.inUse = m_alignment->inUse().toStdString();
    p.replay = m_replay->replayRequest(); // its Setting rows are what the project keeps
    // the graph the replay's knowledge tier uses, else the one the Knowledge step names
    const bool used = !m_replay->knowledgeGraph().isEmpty();
    p.knowledge.graph = (used ? m_replay->knowledgeGraph() : m_knowledge->graphPathText()).toStdString();
    p.knowledge.profiles = (used ? m_replay->knowledgeProfiles() : m_knowledge->profilesPath()).toStdString();
    p.knowledge.useInReplays = used;
    // the one prompt and the row above it, and the prompt set's file, limit and baselines
    p.compare = m_compare->promptSetRequest();
    p.compare.prompt = m_compare->request().prompt;
}

} // namespace kvwb::ui
