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
// as failed(job, message).
// Cancellation (one contract for every job): a cancelled job is never failed(). A job whose work
// so far is kept reports it in its own result with `cancelled = true` (capture: the prompts
// written; fit: nothing stored, but the summary says so; replay: the rows done, and the ledger when
// one was asked for); a job that keeps nothing (loading models, a comparison) emits cancelled(job)
// instead. Each job ends with exactly one of its result signal, cancelled(job) or failed(job).
#pragma once

#include "core/ledger/replay_ledger.h"
#include "ui/models/experiment_snapshot.h"
#include "ui/panels/job_types.h"
#include "ui/panels/models_panel.h"
#include "ui/report/report_builder.h"

#include <QObject>
#include <QString>
#include <QThread>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kvwb::core {
class ExperimentReader;
class Tokenizer;
} // namespace kvwb::core
namespace kvwb::gpu {
class Converter;
class Model;
} // namespace kvwb::gpu

namespace kvwb::app {

// The window's value types (ui/panels/models_panel.h) travel as they are.
using ModelRequest = ui::ModelChoice;
using LoadedModel = ui::LoadedModelInfo;

struct LoadedPair
{
    LoadedModel a, b;
    double ms = 0; // load time of both
};

using ExperimentSnapshot = ui::ExperimentSnapshot;

// How a replay ended (its rows came through replayRows batches).
struct ReplayOutcome
{
    core::LedgerSummary summary;
    int requests = 0; // replayed
    int total = 0;    // in the workload (after the limit)
    bool cancelled = false;
    QString storedLedger; // /ledgers/<name> written, else empty
    QStringList warnings;
};

using RowBatch = std::vector<core::LedgerRow>;

// What the jobs report: EngineWorker emits these on the engine thread and EngineController
// re-emits them on the GUI thread.
class EngineSignals : public QObject
{
    Q_OBJECT

public:
    using QObject::QObject;

Q_SIGNALS:
    void progress(quint64 job, double fraction, const QString &stage);
    void modelsLoaded(quint64 job, std::shared_ptr<const kvwb::app::LoadedPair> pair);
    void failed(quint64 job, const QString &message);
    void cancelled(quint64 job);
    void experimentRead(quint64 job, std::shared_ptr<const kvwb::app::ExperimentSnapshot> snapshot);
    void reportCollected(quint64 job, std::shared_ptr<const kvwb::ui::ReportData> data);
    void captured(quint64 job, std::shared_ptr<const kvwb::ui::CaptureSummary> summary);
    void fitted(quint64 job, std::shared_ptr<const kvwb::ui::FitSummary> summary);
    void convertersSwept(quint64 job, std::shared_ptr<const kvwb::ui::ConverterSweepSummary> summary);
    void compared(quint64 job, std::shared_ptr<const kvwb::ui::CompareResult> result);
    void comparedSet(quint64 job, std::shared_ptr<const kvwb::ui::CompareSetSummary> summary);
    void replayRows(quint64 job, std::shared_ptr<const kvwb::app::RowBatch> rows);
    void replayProgress(quint64 job, int done, int total);
    void replayFinished(quint64 job, std::shared_ptr<const kvwb::app::ReplayOutcome> outcome);
    void knowledgeOpened(quint64 job, std::shared_ptr<const kvwb::ui::KnowledgeView> view);
    void knowledgeTraced(quint64 job, std::shared_ptr<const kvwb::ui::KnowledgeTraceResult> trace);
    void semanticSwept(quint64 job, std::shared_ptr<const kvwb::ui::SemanticSweepResult> sweep);
    void embedderTrained(quint64 job, std::shared_ptr<const kvwb::ui::EmbedderTrainView> view);
    void knowledgeEvaluated(quint64 job, std::shared_ptr<const kvwb::ui::KnowledgeEconomics> economics);
};

class EngineWorker : public EngineSignals
{
    Q_OBJECT

public:
    explicit EngineWorker(QObject *parent = nullptr);
    ~EngineWorker() override;

    // Engine thread only.
    const gpu::Model *modelA() const;
    const gpu::Model *modelB() const;

    // Engine thread: loads A then B; replaces the loaded pair only when both loaded. Cancelled:
    // cancelled(job), the old pair kept.
    void loadModels(quint64 job, const kvwb::app::ModelRequest &a, const kvwb::app::ModelRequest &b,
                    std::shared_ptr<std::atomic_bool> cancel);
    // Engine thread: reads everything the panels show from an experiment file.
    // upgradeFirst: core::upgradeExperiment (a kvwb/1 file) before reading.
    void readExperiment(quint64 job, const QString &path, bool upgradeFirst = false);
    // Engine thread: gathers a report's data (HDF5 reads); the GUI thread draws and writes it.
    void collectReport(quint64 job, const QString &path);
    // Engine thread: both loaded models over a prompt set into an experiment file. Cancelled:
    // captured(job, summary) with summary->cancelled and the prompts written so far.
    void capture(quint64 job, const kvwb::ui::CaptureRequest &request,
                 std::shared_ptr<std::atomic_bool> cancel);
    // Engine thread: fits a converter and stores it in the experiment file. Cancelled:
    // fitted(job, summary) with summary->cancelled; nothing stored.
    void fit(quint64 job, const kvwb::core::FitSettings &request, std::shared_ptr<std::atomic_bool> cancel);
    // Engine thread: a converter sweep stored as /sweeps/<name> (a name in use is refused).
    // Cancelled: convertersSwept(job, summary) with summary->cancelled; nothing stored.
    void sweepConverters(quint64 job, const kvwb::ui::ConverterSweepRequest &request,
                         std::shared_ptr<std::atomic_bool> cancel);
    // Engine thread: one prompt three ways with the loaded models and a stored converter.
    // Cancelled: cancelled(job); nothing stored.
    void compare(quint64 job, const kvwb::core::CompareSettings &request,
                 std::shared_ptr<std::atomic_bool> cancel);
    // Engine thread: a prompt set (held-out prompts or a file) through the converter and, when
    // asked, the baselines; the summary with paired intervals. Cancelled: comparedSet(job, summary)
    // with summary->cancelled over the prompts done, or cancelled(job) when none was; nothing stored.
    void compareSet(quint64 job, const kvwb::core::CompareSettings &request,
                    std::shared_ptr<std::atomic_bool> cancel);
    // Engine thread: replays a workload; rows go out in batches at most every batchMs, and the
    // replay waits between requests while *pause is set. Cancelled: replayFinished(job, outcome)
    // with outcome->cancelled and the rows done.
    void replay(quint64 job, const kvwb::core::ReplaySettings &request,
                std::shared_ptr<std::atomic_bool> cancel, std::shared_ptr<std::atomic_bool> pause,
                int batchMs);
    // Engine thread: reads a knowledge graph file (building it first with model B when asked; a
    // cancelled build writes nothing) and reports its nodes with module freshness for model B.
    void openKnowledge(quint64 job, const kvwb::ui::KnowledgeOpenRequest &request,
                       std::shared_ptr<std::atomic_bool> cancel);
    void traceKnowledge(quint64 job, const kvwb::ui::KnowledgeTraceRequest &request);
    void sweepSemantic(quint64 job, const kvwb::ui::SemanticSweepRequest &request);
    // Engine thread: kvwb train-embedder --pairs (needs no model loaded). Cancelled: cancelled(job),
    // nothing written to the output, the training state kept for a resume.
    void trainEmbedder(quint64 job, const kvwb::ui::EmbedderTrainRequest &request,
                       std::shared_ptr<std::atomic_bool> cancel);
    // Engine thread: kvwb knowledge evaluate's four arms over the workload's model-B requests.
    void evaluateKnowledge(quint64 job, const kvwb::ui::KnowledgeEvalRequest &request,
                           std::shared_ptr<std::atomic_bool> cancel);

private:
    // Runs body, reporting core::Error and std::exception as failed(job, ...).
    template <typename F> void guarded(quint64 job, F &&body);
    void requireModels(const char *what) const;
    // The loaded model B when it is the experiment's (weights fingerprint), else null.
    const gpu::Model *fileModelB(const core::ExperimentReader &file) const;
    // The loaded models must be the experiment's (weights fingerprints); Error(Config) saying
    // which one differs and what to load.
    void requireExperimentModels(const QString &experiment) const;
    // The converter record `name` of the experiment, built for the loaded pair (cached).
    const gpu::Converter &converter(const QString &experiment, const QString &name);
    // A comparison's converter: the models loaded, the experiment's models theirs (Error otherwise).
    const gpu::Converter &compareConverter(const core::CompareSettings &request);

    std::unique_ptr<gpu::Model> m_a, m_b;
    std::unique_ptr<core::Tokenizer> m_tokA, m_tokB;
    std::string m_tokErrorA, m_tokErrorB; // why a loaded model has no tokenizer
    bool m_compareWarm = false;           // a comparison ran since the models were loaded
    std::unique_ptr<gpu::Converter> m_converter;
    std::string m_converterKey; // experiment path + name + models, of m_converter
};

class EngineController : public EngineSignals
{
    Q_OBJECT

public:
    explicit EngineController(QObject *parent = nullptr);
    ~EngineController() override; // cancels the running job and joins the engine thread

    // Starts loading the pair on the engine thread; returns the job id. One job at a time: a
    // second request while busy() is refused with failed(0, ...).
    quint64 loadModels(const ModelRequest &a, const ModelRequest &b);
    quint64 readExperiment(const QString &path, bool upgradeFirst = false);
    quint64 collectReport(const QString &path);
    quint64 capture(const ui::CaptureRequest &request);
    quint64 fit(const core::FitSettings &request);
    quint64 sweepConverters(const ui::ConverterSweepRequest &request);
    quint64 compare(const core::CompareSettings &request);
    quint64 compareSet(const core::CompareSettings &request);
    quint64 replay(const core::ReplaySettings &request);
    quint64 openKnowledge(const ui::KnowledgeOpenRequest &request);
    quint64 traceKnowledge(const ui::KnowledgeTraceRequest &request);
    quint64 sweepSemantic(const ui::SemanticSweepRequest &request);
    quint64 trainEmbedder(const ui::EmbedderTrainRequest &request);
    quint64 evaluateKnowledge(const ui::KnowledgeEvalRequest &request);
    void setPaused(bool paused); // the running replay waits between requests while paused
    void cancel();               // the running job stops at its next progress check
    int replayBatchMs = 100;     // how often a replay hands its rows to the GUI
    bool busy() const { return m_busy; }
    QString state() const { return m_state; } // "idle", "loading models 40% (layer 2/4)", ...

Q_SIGNALS:
    void stateChanged(const QString &state);

private:
    // Starts a job on the engine thread: job(worker, id, cancel flag). Refused (0) while busy.
    template <typename F> quint64 start(const QString &state, F &&job);
    // Connects the worker's result signal to finish the job and re-emit it.
    template <typename Sig> void relay(Sig resultSignal);

    QThread m_thread;
    EngineWorker *m_worker = nullptr; // owned by m_thread (deleteLater on finish)
    std::shared_ptr<std::atomic_bool> m_cancel;
    std::shared_ptr<std::atomic_bool> m_pause = std::make_shared<std::atomic_bool>(false);
    QString m_jobLabel; // "capturing", "fitting 'default'", ... (the state line's start)
    quint64 m_nextJob = 1;
    bool m_busy = false;
    QString m_state = "idle";
};

} // namespace kvwb::app
