// The engine thread of the workbench window. EngineWorker lives on its own QThread and owns the
// models (and, as the panels grow, the caches, experiment files and vector indexes: everything that
// must stay on one thread). EngineController lives on the GUI thread: it starts jobs with queued
// calls carrying value types, gives each job its own cancel flag that the GUI sets directly, and
// re-emits the worker's results as immutable shared_ptr<const T>.
//
// Threading: EngineController is GUI-thread only; EngineWorker's slots run on the engine thread
// and it is never touched from elsewhere. No BlockingQueuedConnection, no QThread::terminate:
// shutdown sets the cancel flag, quits the thread's event loop and waits for the job to notice.
// Errors: every job catches core::Error and std::exception at this one boundary and reports them
// as failed(job, message); cancellation is reported as cancelled(job), never as an error.
#pragma once

#include "ui/experiment_snapshot.h"
#include "ui/models_panel.h"
#include "ui/report_builder.h"

#include <QObject>
#include <QString>
#include <QThread>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kvwb::gpu {
class Model;
}

namespace kvwb::app {

// The window's value types (ui/models_panel.h) travel as they are.
using ModelRequest = ui::ModelChoice;
using LoadedModel = ui::LoadedModelInfo;

struct LoadedPair
{
    LoadedModel a, b;
    double ms = 0; // load time of both
};

using ExperimentSnapshot = ui::ExperimentSnapshot;

class EngineWorker : public QObject
{
    Q_OBJECT

public:
    explicit EngineWorker(QObject *parent = nullptr);
    ~EngineWorker() override;

    // Engine thread only.
    const gpu::Model *modelA() const;
    const gpu::Model *modelB() const;

    // Engine thread: loads A then B; replaces the loaded pair only when both loaded.
    void loadModels(quint64 job, const kvwb::app::ModelRequest &a, const kvwb::app::ModelRequest &b,
                    std::shared_ptr<std::atomic_bool> cancel);
    // Engine thread: reads everything the panels show from an experiment file.
    void readExperiment(quint64 job, const QString &path);
    // Engine thread: gathers a report's data (HDF5 reads); the GUI thread draws and writes it.
    void collectReport(quint64 job, const QString &path);

Q_SIGNALS:
    void experimentRead(quint64 job, std::shared_ptr<const kvwb::app::ExperimentSnapshot> snapshot);
    void reportCollected(quint64 job, std::shared_ptr<const kvwb::ui::ReportData> data);
    void progress(quint64 job, double fraction, const QString &stage);
    void modelsLoaded(quint64 job, std::shared_ptr<const kvwb::app::LoadedPair> pair);
    void failed(quint64 job, const QString &message);
    void cancelled(quint64 job);

private:
    std::unique_ptr<gpu::Model> m_a, m_b;
};

class EngineController : public QObject
{
    Q_OBJECT

public:
    explicit EngineController(QObject *parent = nullptr);
    ~EngineController() override; // cancels the running job and joins the engine thread

    // Starts loading the pair on the engine thread; returns the job id. One job at a time: a
    // second request while busy() is refused with failed(0, ...).
    quint64 loadModels(const ModelRequest &a, const ModelRequest &b);
    quint64 readExperiment(const QString &path);
    quint64 collectReport(const QString &path);
    void cancel(); // the running job stops at its next progress check
    bool busy() const { return m_busy; }
    QString state() const { return m_state; } // "idle", "loading models 40% (layer 2/4)", ...

Q_SIGNALS:
    void progress(quint64 job, double fraction, const QString &stage);
    void modelsLoaded(quint64 job, std::shared_ptr<const kvwb::app::LoadedPair> pair);
    void failed(quint64 job, const QString &message);
    void cancelled(quint64 job);
    void experimentRead(quint64 job, std::shared_ptr<const kvwb::app::ExperimentSnapshot> snapshot);
    void reportCollected(quint64 job, std::shared_ptr<const kvwb::ui::ReportData> data);
    void stateChanged(const QString &state);

private:
    // Starts a job that needs no cancel flag on the engine thread.
    template <typename F> quint64 start(const QString &state, F &&job);
    void finish(const QString &state);

    QThread m_thread;
    EngineWorker *m_worker = nullptr; // owned by m_thread (deleteLater on finish)
    std::shared_ptr<std::atomic_bool> m_cancel;
    quint64 m_nextJob = 1;
    bool m_busy = false;
    QString m_state = "idle";
};

} // namespace kvwb::app
