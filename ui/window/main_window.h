// The workbench window: a step navigator (Models, Capture, Alignment, Compare, Replay, Knowledge, Report)
// beside one large content area showing the current step's page, the project details and the log
// as collapsible side and bottom panels, File and View menus, a status bar with the engine's state,
// device and memory in use. The window knows core and ui types only; the
// composition root (app/gui.cpp) connects its requests to the engine controller and the engine's
// results back to its slots.
//
// Pages scroll vertically only. The two panels have unique object names, so the layout is saved on
// close and restored on start (QSettings "kvwb"/"workbench"); View > Reset Layout restores the
// layout the window started with.
//
// GUI-thread only.
#pragma once

#include "core/settings/project.h"
#include "ui/models/experiment_snapshot.h"
#include "ui/panels/job_types.h"
#include "ui/panels/models_panel.h"
#include "ui/report/report_builder.h"

#include <QElapsedTimer>
#include <QMainWindow>

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <thread>

class QAction;
class QDockWidget;
class QLabel;
class QMenu;
class QComboBox;
class QLineEdit;
class QListWidget;
class QPlainTextEdit;
class QPushButton;
class QScrollArea;
class QStackedWidget;
class QTableView;

namespace kvwb::ui {

class AlignmentPanel;
class CapturePanel;
class ComparePanel;
class ModelCardModel;
class ReplayPanel;
class KnowledgePanel;

class MainWindow : public QMainWindow
{
    Q_OBJECT

public:
    explicit MainWindow(QWidget *parent = nullptr);
    ~MainWindow() override;

    ModelsPanel *modelsPanel() const { return m_models; }
    ModelCardModel *modelCard() const { return m_card; }
    AlignmentPanel *alignmentPanel() const { return m_alignment; }
    ReplayPanel *replayPanel() const { return m_replay; }
    KnowledgePanel *knowledgePanel() const { return m_knowledge; }
    CapturePanel *capturePanel() const { return m_capture; }
    ComparePanel *comparePanel() const { return m_compare; }
    QString experimentPath() const { return m_experimentPath; }
    QList<QDockWidget *> docks() const;
    // The steps by id ("models", "capture", "alignment", "compare", "replay", "knowledge", "report"): switch
    // to one, the one shown, and a step's page (a vertical-only scroll area around its panel).
    void showStep(const QString &id);
    QString currentStep() const;
    QStringList steps() const { return m_stepIds; }
    QScrollArea *stepPage(const QString &id) const;
    // The first window size on a screen whose free area is `available`.
    static QSize initialSize(const QSize &available);
    // The projects File > Open Recent lists, newest first (from the user's settings).
    static QStringList recentProjects();
    const std::optional<core::Project> &project() const { return m_project; }
    QString projectPath() const { return m_projectPath; }

    // Loads a .kvwb project (paths resolved against its directory) into the panels: every step is
    // reset first, so nothing of the previous project's results stays. Returns false and shows why
    // (log + status bar) when it cannot be read or a job runs.
    bool openProject(const QString &path);
    // File > New Project: an empty project written at `path` and shown (every step reset; the loaded
    // models stay loaded but unused until the project names them). False, saying why, when it cannot
    // be written or a job runs.
    bool newProject(const QString &path);
    // File > Close Project: no project, every step reset. False while a job runs.
    bool closeProject();
    // Saves the current choices into the project file (the other sections are kept).
    bool saveProject(const QString &path);
    // File > Export Run Archive without the dialog: the saved project's whole run (the project, its
    // experiment with converters, comparisons and ledgers, its data files, the models' paths and
    // fingerprints) as one zip at `out` (core/settings/run_archive.h), written on a worker thread;
    // runArchiveWritten says how it went. False, saying why, when no saved project is open or an
    // archive is being written or read.
    bool exportRunArchive(const QString &out);
    // File > Open Project with a run archive: extracted (checked entry by entry) into `into` - by
    // default a new folder beside the archive named after it - on a worker thread, then opened; a
    // model not at the path the project names is asked for in the Models step. runArchiveOpened
    // says how it went. False, saying why, when it cannot start.
    bool openRunArchive(const QString &archive, const QString &into = {});
    // Whether the window holds choices or results the project file does not (the title's [*]):
    // the models, the experiment, the converter in use, the steps' settings.
    bool isProjectModified() const;

public Q_SLOTS:
    void setEngineState(const QString &state);
    void showLoadProgress(double fraction, const QString &stage);
    // Whether the engine can run on CUDA here (the Models step disables it otherwise, saying why).
    void setCudaAvailable(bool available, const QString &why);
    void showModelsLoaded(const kvwb::ui::LoadedModelInfo &a, const kvwb::ui::LoadedModelInfo &b, double ms);
    // An engine job failed: the message goes to the panel whose job it was, the log and the status bar.
    void showFailure(const QString &message);
    // The window's own failure (a project file, a report folder): log and status bar only.
    void showError(const QString &message);
    void showCancelled();
    // The engine's progress, shown by the panel whose job is running.
    void showProgress(double fraction, const QString &stage);
    // The engine started or finished a job: every panel's start buttons follow.
    void setEngineBusy(bool busy);
    void showCaptured(const kvwb::ui::CaptureSummary &summary);
    void showFitted(const kvwb::ui::FitSummary &summary);
    void showConverterSweep(const kvwb::ui::ConverterSweepSummary &summary);
    void showCompared(const kvwb::ui::CompareResult &result);
    void showComparedSet(const kvwb::ui::CompareSetSummary &summary);
    void showReplayRows(const std::vector<kvwb::core::LedgerRow> &rows);
    void showReplayProgress(int done, int total);
    void showReplayFinished(bool cancelled, int requests, const QString &storedLedger);
    // The Knowledge step's results: a graph opened (or built), a question's path, the economics.
    void showKnowledge(const kvwb::ui::KnowledgeView &view);
    void showKnowledgeTrace(const kvwb::ui::KnowledgeTraceResult &trace);
    void showSemanticSweep(const kvwb::ui::SemanticSweepResult &sweep);
    void showTrainedEmbedder(const kvwb::ui::EmbedderTrainView &view);
    void showKnowledgeEconomics(const kvwb::ui::KnowledgeEconomics &economics);
    // The engine read an experiment file: the Alignment and Replay panels show it.
    void showExperiment(std::shared_ptr<const kvwb::ui::ExperimentSnapshot> snapshot);
    // File > Export Report without the dialog: asks the engine for the shown experiment's report
    // data; writeReport() then draws and writes it into outDir (all formats). False when no
    // experiment is shown.
    bool exportReport(const QString &outDir);
    // Report > Open report: the last exported report's HTML in the desktop's browser. False, with
    // the reason in the Report step's status line, when it is gone or nothing here opens it.
    bool openReport();
    // The engine gathered the report data: draw the charts and write every format (GUI thread:
    // charts are widgets). Returns the files written.
    QStringList writeReport(std::shared_ptr<const kvwb::ui::ReportData> data);
    void resetLayout();
    void log(const QString &line);

Q_SIGNALS:
    void loadRequested(const kvwb::ui::ModelChoice &a, const kvwb::ui::ModelChoice &b);
    void cancelRequested();
    // Read this experiment file on the engine thread (File > Open Experiment, or a project's).
    void experimentRequested(const QString &path);
    // The user agreed to upgrade this kvwb/1 experiment file (kvwb upgrade), then read it.
    void experimentUpgradeRequested(const QString &path);
    // Gather the report data of this experiment on the engine thread (File > Export Report).
    void reportRequested(const QString &experimentPath);
    void reportWritten(const QStringList &files);
    // A run archive written ("" error) or refused (error: one line naming the file at fault).
    void runArchiveWritten(const QString &path, const QString &error);
    // A run archive extracted and its project opened ("" error), or refused.
    void runArchiveOpened(const QString &project, const QString &error);
    void captureRequested(const kvwb::ui::CaptureRequest &request);
    void fitRequested(const kvwb::core::FitSettings &request);
    void converterSweepRequested(const kvwb::ui::ConverterSweepRequest &request);
    void compareRequested(const kvwb::core::CompareSettings &request);
    void compareSetRequested(const kvwb::core::CompareSettings &request);
    void replayRequested(const kvwb::core::ReplaySettings &request);
    void pauseRequested(bool paused);
    void knowledgeOpenRequested(const kvwb::ui::KnowledgeOpenRequest &request);
    void knowledgeTraceRequested(const kvwb::ui::KnowledgeTraceRequest &request);
    void semanticSweepRequested(const kvwb::ui::SemanticSweepRequest &request);
    void embedderTrainRequested(const kvwb::ui::EmbedderTrainRequest &request);
    void knowledgeEvaluateRequested(const kvwb::ui::KnowledgeEvalRequest &request);

protected:
    void closeEvent(QCloseEvent *event) override;

private:
    QDockWidget *addDock(const QString &objectName, const QString &title, QWidget *widget,
                         Qt::DockWidgetArea area);
    void addStep(const QString &id, const QString &title, const QString &hint, QWidget *content);
    void markStep(const QString &id, bool done); // a check mark beside a step that has results
    QWidget *buildReportPage();
    void buildMenus();
    void connectModels();
    void connectSteps();     // the step panels' requests (again for each new set of panels)
    void createStepPanels(); // Capture, Alignment, Compare, Replay and Knowledge, as new
    // A project opened, created or closed: new step panels, no experiment, no check marks, no report.
    void resetSteps();
    // The loaded pair stays in use only when it is the one now chosen; else every step waits for a load.
    void keepLoadedPairIfChosen();
    void rememberRecent(const QString &path);
    void refreshRecentMenu();
    void refreshSummary();
    core::Project currentProject(const QString &path) const;             // the project as it would be saved
    void showProject(const core::Project &project, const QString &path); // steps reset, then its settings
    // Before the shown project is replaced: asks to save unsaved work (`action`: "opening another
    // project"). False when the user cancels or the save fails.
    bool confirmUnsaved(const QString &action);
    // its JSON, to compare with the saved one (withoutExperiment: as a file that names none)
    QString projectState(const QString &path, bool withoutExperiment = false) const;
    void refreshModified();
    // Closing: asks to save unsaved work; during a job, asks to stop it and closes once it stopped.
    bool confirmClose();
    QString jobName() const;                           // the running job in the window's words
    void applyProjectSettings();                       // project sections -> panels
    void storeProjectSettings(core::Project &p) const; // panels -> project sections
    void setInUse(const QString &converter);
    // Remembers which panel the running job belongs to (progress and failures go there).
    enum class Job
    {
        None,
        Load,
        Read,
        Report,
        Capture,
        Fit,
        Sweep, // a converter sweep (the Alignment step's)
        Compare,
        Replay,
        Knowledge
    };
    void beginJob(Job job);
    // The stage line with the job's elapsed time and, from the fraction done, the time left.
    QString withTiming(double fraction, const QString &stage) const;
    void chainJob(Job job);  // the next job, started from the previous one's result
    void cancelJob(Job job); // a step's Cancel: stops the engine's job only when it is that step's
    void refreshJobLabel();  // the status bar's "Running: ..." and its Stop
    void refreshMemory();    // status bar: weights on the device and the process's resident memory

    ModelsPanel *m_models = nullptr;
    ModelCardModel *m_card = nullptr;
    AlignmentPanel *m_alignment = nullptr;
    ReplayPanel *m_replay = nullptr;
    KnowledgePanel *m_knowledge = nullptr;
    CapturePanel *m_capture = nullptr;
    ComparePanel *m_compare = nullptr;
    Job m_job = Job::None;
    QString m_requestedExperiment; // the last experimentRequested path, for the upgrade offer
    // A kvwb/1 file was refused: asks (without blocking) whether to upgrade it and read it again.
    void offerUpgrade(const QString &path, const QString &message);
    bool m_modelsLoaded = false;
    std::array<ModelChoice, 2> m_loading; // the pair the engine is loading (A, B)
    std::array<ModelChoice, 2> m_loaded;  // the pair it holds (m_pairHeld)
    bool m_pairHeld = false;              // m_modelsLoaded: and the project names it
    bool m_engineBusy = false;
    bool m_busyShown = false; // what the panels were last told
    QElapsedTimer m_jobClock; // since the running job started
    int64_t m_weightBytes = 0;
    std::shared_ptr<const ExperimentSnapshot> m_snapshot;
    QTableView *m_cardView = nullptr;
    QListWidget *m_steps = nullptr;
    QStackedWidget *m_pages = nullptr;
    QStringList m_stepIds;
    QDockWidget *m_projectDock = nullptr;
    bool m_logAtEnd = true;
    QLineEdit *m_reportFolder = nullptr;
    QComboBox *m_reportPaper = nullptr; // the PDF's paper: A4 or Letter
    QPushButton *m_exportButton = nullptr;
    QPushButton *m_openReportButton = nullptr;
    QLabel *m_reportStatus = nullptr;
    QString m_lastReport;                 // index.html of the last export
    QString m_reportWritten;              // the status line of the last export (rich text)
    bool m_reportFolderIsDefault = false; // the folder field holds the experiment's default
    QString m_savedState;                 // projectState() when the project was opened or saved
    bool m_closeAfterJob = false;         // the user chose to stop the running job and quit
    bool m_experimentBeside = false;      // the open project's experiment was found beside it
    bool m_openingRead = false;           // the experiment read that opening the project started
    QString m_openingExperiment;
    QPlainTextEdit *m_log = nullptr;
    QLabel *m_summary = nullptr;
    QLabel *m_engineLabel = nullptr;
    QLabel *m_deviceLabel = nullptr;
    QLabel *m_memoryLabel = nullptr;
    QLabel *m_jobLabel = nullptr;
    QPushButton *m_jobCancel = nullptr;
    QMenu *m_viewMenu = nullptr;
    QMenu *m_recentMenu = nullptr;
    QByteArray m_defaultState;
    std::optional<core::Project> m_project;
    QString m_projectPath;
    QString m_experimentPath; // the experiment the panels show
    QString m_reportDir;      // where the pending export goes
    QAction *m_exportAction = nullptr;
    QAction *m_exportArchiveAction = nullptr;
    // The thread writing or reading a run archive (null when none); the window waits for it on close.
    std::unique_ptr<std::thread> m_archiveThread;
    void finishArchiveThread();
    // The models the last opened run archive names that are not on this machine (role -> path),
    // shown in the Models step until each row names a path that exists.
    std::map<std::string, std::string> m_archiveMissing;
    void refreshArchiveNote();
    QAction *m_openAction = nullptr;
    QAction *m_newAction = nullptr;
    QAction *m_closeProjectAction = nullptr;
    QAction *m_openExperimentAction = nullptr;
};

} // namespace kvwb::ui
