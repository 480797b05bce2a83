// The composition root of the workbench window: one EngineController (engine thread) and one
// ui::MainWindow, wired together. GUI-thread only.
#pragma once

#include "app/engine/engine_controller.h"
#include "ui/window/main_window.h"

#include <QObject>
#include <QString>

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

// Opens the window (on projectPath when not empty) and runs the event loop; returns its exit code.
int runWorkbench(const QString &projectPath);

} // namespace kvwb::app
