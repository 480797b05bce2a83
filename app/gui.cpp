#include "app/gui.h"

#include "app/cli/cli_util.h"
#include "gpu/model/device.h"

#include <QApplication>
#include <QFileInfo>

namespace kvwb::app {

Workbench::Workbench(QObject *parent) : QObject(parent), m_window(std::make_unique<ui::MainWindow>())
{
    ui::MainWindow *w = m_window.get();
    w->setCudaAvailable(
        gpu::cudaAvailable(),
        QObject::tr("No CUDA here: this build's LibTorch (%1) has no CUDA support or sees no GPU. "
                    "The README's GPU set-up builds one that does.")
            .arg(QString::fromStdString(gpu::torchVersion())));
    connect(w, &ui::MainWindow::loadRequested, this,
            [this](const ui::ModelChoice &a, const ui::ModelChoice &b) { m_engine.loadModels(a, b); });
    connect(w, &ui::MainWindow::cancelRequested, &m_engine, &EngineController::cancel);
    connect(w, &ui::MainWindow::experimentRequested, this,
            [this](const QString &path) { m_engine.readExperiment(path); });
    connect(w, &ui::MainWindow::experimentUpgradeRequested, this,
            [this](const QString &path) { m_engine.readExperiment(path, /*upgradeFirst=*/true); });
    connect(w, &ui::MainWindow::reportRequested, this,
            [this](const QString &path) { m_engine.collectReport(path); });
    connect(&m_engine, &EngineController::reportCollected, w,
            [w](quint64, std::shared_ptr<const ui::ReportData> d) { w->writeReport(d); });
    connect(&m_engine, &EngineController::experimentRead, w,
            [w](quint64, std::shared_ptr<const ExperimentSnapshot> s) { w->showExperiment(s); });
    connect(w, &ui::MainWindow::captureRequested, this,
            [this](const ui::CaptureRequest &r) { m_engine.capture(r); });
    connect(w, &ui::MainWindow::fitRequested, this, [this](const core::FitSettings &r) { m_engine.fit(r); });
    connect(w, &ui::MainWindow::converterSweepRequested, this,
            [this](const ui::ConverterSweepRequest &r) { m_engine.sweepConverters(r); });
    connect(&m_engine, &EngineController::convertersSwept, w,
            [w](quint64, std::shared_ptr<const ui::ConverterSweepSummary> s) { w->showConverterSweep(*s); });
    connect(w, &ui::MainWindow::compareRequested, this,
            [this](const core::CompareSettings &r) { m_engine.compare(r); });
    connect(w, &ui::MainWindow::compareSetRequested, this,
            [this](const core::CompareSettings &r) { m_engine.compareSet(r); });
    connect(w, &ui::MainWindow::replayRequested, this,
            [this](const core::ReplaySettings &r) { m_engine.replay(r); });
    connect(w, &ui::MainWindow::pauseRequested, &m_engine, &EngineController::setPaused);
    connect(w, &ui::MainWindow::knowledgeOpenRequested, this,
            [this](const ui::KnowledgeOpenRequest &r) { m_engine.openKnowledge(r); });
    connect(w, &ui::MainWindow::semanticSweepRequested, this,
            [this](const ui::SemanticSweepRequest &r) { m_engine.sweepSemantic(r); });
    connect(&m_engine, &EngineController::semanticSwept, w,
            [w](quint64, std::shared_ptr<const ui::SemanticSweepResult> s) { w->showSemanticSweep(*s); });
    connect(w, &ui::MainWindow::embedderTrainRequested, this,
            [this](const ui::EmbedderTrainRequest &r) { m_engine.trainEmbedder(r); });
    connect(&m_engine, &EngineController::embedderTrained, w,
            [w](quint64, std::shared_ptr<const ui::EmbedderTrainView> v) { w->showTrainedEmbedder(*v); });
    connect(w, &ui::MainWindow::knowledgeTraceRequested, this,
            [this](const ui::KnowledgeTraceRequest &r) { m_engine.traceKnowledge(r); });
    connect(w, &ui::MainWindow::knowledgeEvaluateRequested, this,
            [this](const ui::KnowledgeEvalRequest &r) { m_engine.evaluateKnowledge(r); });
    connect(&m_engine, &EngineController::knowledgeOpened, w,
            [w](quint64, std::shared_ptr<const ui::KnowledgeView> v) { w->showKnowledge(*v); });
    connect(&m_engine, &EngineController::knowledgeTraced, w,
            [w](quint64, std::shared_ptr<const ui::KnowledgeTraceResult> t) { w->showKnowledgeTrace(*t); });
    connect(&m_engine, &EngineController::knowledgeEvaluated, w,
            [w](quint64, std::shared_ptr<const ui::KnowledgeEconomics> e) { w->showKnowledgeEconomics(*e); });
    connect(&m_engine, &EngineController::stateChanged, w, [this, w](const QString &state) {
        w->setEngineState(state);
        w->setEngineBusy(m_engine.busy());
    });
    connect(&m_engine, &EngineController::progress, w,
            [w](quint64, double f, const QString &stage) { w->showProgress(f, stage); });
    connect(&m_engine, &EngineController::modelsLoaded, w,
            [w](quint64, std::shared_ptr<const LoadedPair> p) { w->showModelsLoaded(p->a, p->b, p->ms); });
    connect(&m_engine, &EngineController::captured, w,
            [w](quint64, std::shared_ptr<const ui::CaptureSummary> s) { w->showCaptured(*s); });
    connect(&m_engine, &EngineController::fitted, w,
            [w](quint64, std::shared_ptr<const ui::FitSummary> s) { w->showFitted(*s); });
    connect(&m_engine, &EngineController::compared, w,
            [w](quint64, std::shared_ptr<const ui::CompareResult> r) { w->showCompared(*r); });
    connect(&m_engine, &EngineController::comparedSet, w,
            [w](quint64, std::shared_ptr<const ui::CompareSetSummary> s) { w->showComparedSet(*s); });
    connect(&m_engine, &EngineController::replayRows, w,
            [w](quint64, std::shared_ptr<const RowBatch> rows) { w->showReplayRows(*rows); });
    connect(&m_engine, &EngineController::replayProgress, w,
            [w](quint64, int done, int total) { w->showReplayProgress(done, total); });
    connect(&m_engine, &EngineController::replayFinished, w,
            [w](quint64, std::shared_ptr<const ReplayOutcome> o) {
                for (const QString &warning : o->warnings)
                    w->log(QObject::tr("replay: %1").arg(warning));
                w->showReplayFinished(o->cancelled, o->requests, o->storedLedger);
            });
    connect(&m_engine, &EngineController::failed, w, [w](quint64 job, const QString &m) {
        if (job == 0) // a request refused while another job runs: the running job's panel stays as it is
            w->log(QObject::tr("refused: %1").arg(m));
        else
            w->showFailure(m);
    });
    connect(&m_engine, &EngineController::cancelled, w, [w](quint64) { w->showCancelled(); });
}

Workbench::~Workbench() = default;

QString startupProject(const QStringList &recent, const QString &demo)
{
    for (const QString &p : recent)
        if (QFileInfo(p).isFile())
            return p;
    return QFileInfo(demo).isFile() ? demo : QString();
}

int runWorkbench(const QString &projectPath)
{
    Workbench bench;
    QString path = projectPath;
    if (path.isEmpty()) {
        path = startupProject(ui::MainWindow::recentProjects(),
                              QString::fromStdString((cli::demoProjectDir() / "demo.kvwb").string()));
        if (!path.isEmpty())
            bench.window().log(QObject::tr("No project named on the command line: opened %1").arg(path));
    }
    if (!path.isEmpty())
        bench.window().openProject(path);
    bench.window().show();
    return QApplication::exec();
}

} // namespace kvwb::app
