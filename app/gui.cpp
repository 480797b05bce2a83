#include "app/gui.h"

#include <QApplication>

namespace kvwb::app {

Workbench::Workbench(QObject *parent) : QObject(parent), m_window(std::make_unique<ui::MainWindow>())
{
    ui::MainWindow *w = m_window.get();
    connect(w, &ui::MainWindow::loadRequested, this,
            [this](const ui::ModelChoice &a, const ui::ModelChoice &b) { m_engine.loadModels(a, b); });
    connect(w, &ui::MainWindow::cancelRequested, &m_engine, &EngineController::cancel);
    connect(w, &ui::MainWindow::experimentRequested, this,
            [this](const QString &path) { m_engine.readExperiment(path); });
    connect(w, &ui::MainWindow::reportRequested, this,
            [this](const QString &path) { m_engine.collectReport(path); });
    connect(&m_engine, &EngineController::reportCollected, w,
            [w](quint64, std::shared_ptr<const ui::ReportData> d) { w->writeReport(d); });
    connect(&m_engine, &EngineController::experimentRead, w,
            [w](quint64, std::shared_ptr<const ExperimentSnapshot> s) { w->showExperiment(s); });
    connect(&m_engine, &EngineController::stateChanged, w, &ui::MainWindow::setEngineState);
    connect(&m_engine, &EngineController::progress, w,
            [w](quint64, double f, const QString &stage) { w->showLoadProgress(f, stage); });
    connect(&m_engine, &EngineController::modelsLoaded, w,
            [w](quint64, std::shared_ptr<const LoadedPair> p) { w->showModelsLoaded(p->a, p->b, p->ms); });
    connect(&m_engine, &EngineController::failed, w, [w](quint64, const QString &m) { w->showFailure(m); });
    connect(&m_engine, &EngineController::cancelled, w, [w](quint64) { w->showCancelled(); });
}

Workbench::~Workbench() = default;

int runWorkbench(const QString &projectPath)
{
    Workbench bench;
    if (!projectPath.isEmpty())
        bench.window().openProject(projectPath);
    bench.window().show();
    return QApplication::exec();
}

} // namespace kvwb::app
