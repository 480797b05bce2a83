// The composition root of the workbench window: one EngineController (engine thread) and one
// ui::MainWindow, wired together. GUI-thread only.
#pragma once

#include "app/engine/engine_controller.h"
#include "ui/window/main_window.h"

#include <QObject>
#include <QString>
#include <QStringList>

namespace kvwb::app {

class Workbench : public QObject
{
    Q_OBJECT

public:
    explicit Workbench(QObject *parent = nullptr);
    ~Workbench() override;
    ui::MainWindow &window() { return *m_window; }
    EngineController &engine() { return m_engine; }

private:
    EngineController m_engine;
    std::unique_ptr<ui::MainWindow> m_window;
};

// The project the window opens when none is named: the most recent of `recent` that still exists,
// else `demo` (kvwb's demo project) when it exists, else none (empty).
QString startupProject(const QStringList &recent, const QString &demo);

// Opens the window on projectPath, or when it is empty on startupProject(the window's recent
// projects, the demo project: installed or in the source tree), and runs the event loop; returns
// its exit code.
int runWorkbench(const QString &projectPath);

} // namespace kvwb::app
