// Run archives in the window: File > Export Run Archive and File > Open Project with a .zip
// (core/settings/run_archive.h). The archive is written or read on a worker thread (an experiment
// file can be gigabytes); the result comes back to the GUI thread through a queued call.
#include "ui/window/main_window.h"

#include "core/settings/run_archive.h"
#include "core/util/error.h"

#include <QAction>
#include <QFileInfo>
#include <QMetaObject>
#include <QStatusBar>

namespace kvwb::ui {

namespace {

// A folder beside the archive named after it: run.zip -> run/, or run-2/, ... when taken.
QString freeFolderBeside(const QString &archive)
{
    const QFileInfo f(archive);
    const QString base = f.dir().filePath(f.completeBaseName());
    QString candidate = base;
    for (int n = 2; QFileInfo::exists(candidate); ++n)
        candidate = QStringLiteral("%1-%2").arg(base).arg(n);
    return candidate;
}

QString roleName(const std::string &role)
{
    return role == "a"   ? MainWindow::tr("Model A")
           : role == "b" ? MainWindow::tr("Model B")
                         : MainWindow::tr("The Replay step's embedding model");
}

} // namespace

void MainWindow::finishArchiveThread()
{
    if (m_archiveThread && m_archiveThread->joinable())
        m_archiveThread->join();
    m_archiveThread.reset();
}

bool MainWindow::exportRunArchive(const QString &out)
{
    if (m_projectPath.isEmpty() || !QFileInfo::exists(m_projectPath)) {
        showError(tr("cannot export a run archive: save the project first (File > Save Project)"));
        return false;
    }
    if (m_archiveThread) {
        showError(tr("a run archive is being written or read: wait for it"));
        return false;
    }
    if (isProjectModified())
        log(tr("the run archive holds the project as last saved; unsaved choices are not in it"));
    const std::string project = m_projectPath.toStdString(), target = out.toStdString();
    m_exportArchiveAction->setEnabled(false);
    statusBar()->showMessage(tr("writing the run archive %1...").arg(out));
    m_archiveThread = std::make_unique<std::thread>([this, project, target, out] {
        QString error, summary;
        try {
            // The dialog already asked before replacing a file; the command line asks with --force.
            const core::ArchiveManifest m = core::exportRunArchive(project, target, true);
            uint64_t bytes = 0;
            for (const auto &f : m.files)
                bytes += f.bytes;
            summary =
                tr("wrote the run archive %1: %2 files, %3 MB, the models named by path and fingerprint")
                    .arg(out)
                    .arg(m.files.size())
                    .arg(double(bytes) / 1e6, 0, 'f', 1);
            for (const auto &l : m.leftOut)
                summary += tr("; left out: %1").arg(QString::fromStdString(l));
        } catch (const std::exception &e) {
            error = QString::fromUtf8(e.what());
        }
        QMetaObject::invokeMethod(this, [this, out, error, summary] {
            finishArchiveThread();
            m_exportArchiveAction->setEnabled(!m_engineBusy && !m_projectPath.isEmpty());
            if (error.isEmpty()) {
                log(summary);
                statusBar()->showMessage(summary, 10000);
            } else {
                showError(tr("cannot write the run archive: %1").arg(error));
            }
            Q_EMIT runArchiveWritten(out, error);
        });
    });
    return true;
}

bool MainWindow::openRunArchive(const QString &archive, const QString &into)
{
    if (m_engineBusy) {
        showError(tr("cannot open a run archive while %1 runs: stop it first").arg(jobName().toLower()));
        return false;
    }
    if (m_archiveThread) {
        showError(tr("a run archive is being written or read: wait for it"));
        return false;
    }
    const QString folder = into.isEmpty() ? freeFolderBeside(archive) : into;
    statusBar()->showMessage(tr("extracting %1 into %2...").arg(archive, folder));
    const std::string from = archive.toStdString(), to = folder.toStdString();
    m_archiveThread = std::make_unique<std::thread>([this, from, to, archive, folder] {
        QString error;
        core::ImportedRun run;
        try {
            run = core::importRunArchive(from, to);
        } catch (const std::exception &e) {
            error = QString::fromUtf8(e.what());
        }
        QMetaObject::invokeMethod(this, [this, run, error, archive, folder] {
            finishArchiveThread();
            if (!error.isEmpty()) {
                showError(tr("cannot open the run archive: %1").arg(error));
                Q_EMIT runArchiveOpened({}, error);
                return;
            }
            log(tr("extracted the run archive %1 into %2 (every file checked against its manifest)")
                    .arg(archive, folder));
            for (const auto &l : run.manifest.leftOut)
                log(tr("left out when it was archived: %1").arg(QString::fromStdString(l)));
            const QString project = QString::fromStdString(run.project.string());
            if (!openProject(project)) {
                Q_EMIT runArchiveOpened({}, tr("cannot open the extracted project %1").arg(project));
                return;
            }
            m_archiveMissing = run.missingModels;
            for (const auto &[role, path] : m_archiveMissing)
                log(tr("%1 of the opened run is not at %2 on this machine: choose where it is")
                        .arg(roleName(role), QString::fromStdString(path)));
            for (const auto &model : run.manifest.models)
                if (const auto it = m_archiveMissing.find(model.role);
                    it != m_archiveMissing.end() && !model.weightsSha256.empty())
                    it->second += " (weights sha256 " + model.weightsSha256.substr(0, 12) + "...)";
            refreshArchiveNote();
            if (!m_archiveMissing.empty())
                showStep("models");
            Q_EMIT runArchiveOpened(project, {});
        });
    });
    return true;
}

void MainWindow::refreshArchiveNote()
{
    // A model row that now names a path that exists no longer needs asking for.
    for (char role : {'a', 'b'}) {
        const auto it = m_archiveMissing.find(std::string(1, role));
        if (it != m_archiveMissing.end() && QFileInfo::exists(m_models->choice(role).path))
            m_archiveMissing.erase(it);
    }
    QString lines;
    for (const auto &[role, path] : m_archiveMissing) {
        lines += tr("<li>%1 was at <code>%2</code>, which is not on this machine.</li>")
                     .arg(roleName(role), QString::fromStdString(path).toHtmlEscaped());
    }
    m_models->setArchiveNote(
        lines.isEmpty()
            ? QString()
            : tr("<b>This run was made with models that are not where it says on this machine.</b><ul>%1</ul>"
                 "Choose where each is (the same weights: loading compares them with the experiment "
                 "file's fingerprint), then load.")
                  .arg(lines));
}

} // namespace kvwb::ui
