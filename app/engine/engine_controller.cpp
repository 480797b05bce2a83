// The GUI thread's side (EngineController): starts the engine thread, hands it one job at a time,
// relays its results, pauses and cancels. The jobs themselves are engine_worker.cpp.
#include "app/engine/engine_controller.h"

#include <algorithm>

#ifdef __linux__
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace kvwb::app {

EngineController::EngineController(QObject *parent) : EngineSignals(parent)
{
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::ReportData>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::app::LoadedPair>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::app::ExperimentSnapshot>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::CaptureSummary>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::FitSummary>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::ConverterSweepSummary>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::CompareResult>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::CompareSetSummary>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::app::RowBatch>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::app::ReplayOutcome>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::KnowledgeView>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::KnowledgeTraceResult>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::SemanticSweepResult>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::EmbedderTrainView>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::KnowledgeEconomics>>();
    m_thread.setObjectName("kvwb-engine");
    m_worker = new EngineWorker;
    m_worker->moveToThread(&m_thread);
    connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
    // The engine's threads yield to the window's: the engine thread runs at nice +5, and the
    // threads it starts (the CPU kernels' team, torch's and the BLAS's pools) inherit that, so the
    // GUI thread keeps ~3x their share of a busy core and repaints while a job holds every core.
    // (QThread::LowPriority does nothing under Linux's default scheduler; nice is per thread.)
    connect(
        &m_thread, &QThread::started, m_worker,
        [] {
#ifdef __linux__
            setpriority(PRIO_PROCESS, pid_t(gettid()), std::min(19, getpriority(PRIO_PROCESS, 0) + 5));
#endif
        },
        Qt::DirectConnection);
    connect(m_worker, &EngineSignals::progress, this, [this](quint64 job, double f, const QString &stage) {
        m_state = QString("%1 %2% (%3)").arg(m_jobLabel).arg(int(100 * f)).arg(stage);
        Q_EMIT progress(job, f, stage);
        Q_EMIT stateChanged(m_state);
    });
    relay(&EngineSignals::modelsLoaded);
    relay(&EngineSignals::experimentRead);
    relay(&EngineSignals::reportCollected);
    relay(&EngineSignals::captured);
    relay(&EngineSignals::fitted);
    relay(&EngineSignals::convertersSwept);
    relay(&EngineSignals::compared);
    relay(&EngineSignals::comparedSet);
    relay(&EngineSignals::replayFinished);
    relay(&EngineSignals::knowledgeOpened);
    relay(&EngineSignals::knowledgeTraced);
    relay(&EngineSignals::semanticSwept);
    relay(&EngineSignals::embedderTrained);
    relay(&EngineSignals::knowledgeEvaluated);
    relay(&EngineSignals::failed);
    relay(&EngineSignals::cancelled);
    // rows are not the end of a job
    connect(m_worker, &EngineSignals::replayRows, this, &EngineSignals::replayRows);
    connect(m_worker, &EngineSignals::replayProgress, this, &EngineSignals::replayProgress);
    m_thread.start();
}

EngineController::~EngineController()
{
    if (m_cancel)
        m_cancel->store(true);
    m_pause->store(false);
    m_thread.quit();
    m_thread.wait();
}

template <typename Sig> void EngineController::relay(Sig resultSignal)
{
    // The result goes out while the job's panel is still marked as running (so a failure reaches
    // it) but with the engine free (so the handler may start the next job, e.g. re-read the file);
    // "idle" follows unless the handler did.
    connect(m_worker, resultSignal, this, [this, resultSignal](auto... args) {
        m_busy = false;
        m_jobLabel.clear();
        m_state = "idle";
        Q_EMIT(this->*resultSignal)(args...);
        if (!m_busy)
            Q_EMIT stateChanged(m_state);
    });
}

template <typename F> quint64 EngineController::start(const QString &state, F &&job)
{
    if (m_busy) {
        Q_EMIT failed(0, "the engine is busy: cancel the running job first");
        return 0;
    }
    const quint64 id = m_nextJob++;
    m_cancel = std::make_shared<std::atomic_bool>(false);
    m_pause->store(false);
    m_busy = true;
    m_jobLabel = state;
    m_state = state;
    Q_EMIT stateChanged(m_state);
    EngineWorker *worker = m_worker;
    QMetaObject::invokeMethod(
        worker, [worker, id, cancel = m_cancel, job = std::forward<F>(job)] { job(worker, id, cancel); },
        Qt::QueuedConnection);
    return id;
}

quint64 EngineController::loadModels(const ModelRequest &a, const ModelRequest &b)
{
    return start("loading models",
                 [a, b](EngineWorker *w, quint64 id, auto cancel) { w->loadModels(id, a, b, cancel); });
}

quint64 EngineController::readExperiment(const QString &path, bool upgradeFirst)
{
    return start((upgradeFirst ? "upgrading and reading " : "reading ") + path,
                 [path, upgradeFirst](EngineWorker *w, quint64 id, auto) {
                     w->readExperiment(id, path, upgradeFirst);
                 });
}

quint64 EngineController::collectReport(const QString &path)
{
    return start("collecting the report of " + path,
                 [path](EngineWorker *w, quint64 id, auto) { w->collectReport(id, path); });
}

quint64 EngineController::capture(const ui::CaptureRequest &r)
{
    return start("capturing", [r](EngineWorker *w, quint64 id, auto cancel) { w->capture(id, r, cancel); });
}

quint64 EngineController::fit(const core::FitSettings &r)
{
    return start(QString("fitting '%1'").arg(QString::fromStdString(r.name)),
                 [r](EngineWorker *w, quint64 id, auto cancel) { w->fit(id, r, cancel); });
}

quint64 EngineController::sweepConverters(const ui::ConverterSweepRequest &r)
{
    return start(QString("sweeping '%1'").arg(r.name),
                 [r](EngineWorker *w, quint64 id, auto cancel) { w->sweepConverters(id, r, cancel); });
}

quint64 EngineController::compare(const core::CompareSettings &r)
{
    return start("comparing", [r](EngineWorker *w, quint64 id, auto cancel) { w->compare(id, r, cancel); });
}

quint64 EngineController::compareSet(const core::CompareSettings &r)
{
    return start(QString("comparing %1")
                     .arg(r.promptsFile.empty() ? QString("the held-out prompts")
                                                : QString::fromStdString(r.promptsFile)),
                 [r](EngineWorker *w, quint64 id, auto cancel) { w->compareSet(id, r, cancel); });
}

quint64 EngineController::replay(const core::ReplaySettings &r)
{
    return start("replaying",
                 [r, pause = m_pause, ms = replayBatchMs](EngineWorker *w, quint64 id, auto cancel) {
                     w->replay(id, r, cancel, pause, ms);
                 });
}

quint64 EngineController::openKnowledge(const ui::KnowledgeOpenRequest &r)
{
    return start(r.build ? QString("building the knowledge graph") : QString("reading the knowledge graph"),
                 [r](EngineWorker *w, quint64 id, auto cancel) { w->openKnowledge(id, r, cancel); });
}

quint64 EngineController::traceKnowledge(const ui::KnowledgeTraceRequest &r)
{
    return start("tracing a request", [r](EngineWorker *w, quint64 id, auto) { w->traceKnowledge(id, r); });
}

quint64 EngineController::sweepSemantic(const ui::SemanticSweepRequest &r)
{
    return start("sweeping the semantic threshold",
                 [r](EngineWorker *w, quint64 id, auto) { w->sweepSemantic(id, r); });
}

quint64 EngineController::trainEmbedder(const ui::EmbedderTrainRequest &r)
{
    return start("training an embedder",
                 [r](EngineWorker *w, quint64 id, auto cancel) { w->trainEmbedder(id, r, cancel); });
}

quint64 EngineController::evaluateKnowledge(const ui::KnowledgeEvalRequest &r)
{
    return start("evaluating the knowledge tier",
                 [r](EngineWorker *w, quint64 id, auto cancel) { w->evaluateKnowledge(id, r, cancel); });
}

void EngineController::setPaused(bool paused)
{
    m_pause->store(paused);
    if (m_busy && paused) {
        m_state = m_jobLabel + " (paused)";
        Q_EMIT stateChanged(m_state);
    }
}

void EngineController::cancel()
{
    if (m_cancel)
        m_cancel->store(true);
    m_pause->store(false);
}

} // namespace kvwb::app
