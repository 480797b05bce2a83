// The Capture panel: run both loaded models over a prompt set and store their KV caches in an
// experiment file (what `kvwb capture` does), with storage, compression and truncation settings,
// progress and cancel, then a table of what this run wrote ("This run") and of what the experiment
// file holds ("In the file").
//
// The panel only asks (captureRequested / cancelRequested); the engine (app/) runs the capture and
// reports back through setBusy / setProgress / showSummary / setFailed / setCancelled.
//
// GUI-thread only. Reads and writes no file itself; holds the last snapshot it was shown.
#pragma once

#include "ui/models/experiment_snapshot.h"
#include "ui/panels/job_types.h"

#include <QStringList>
#include <QWidget>

#include <memory>

class QCheckBox;
class QComboBox;
class QLabel;
class QVBoxLayout;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace kvwb::ui {

class CapturePanel : public QWidget
{
    Q_OBJECT

public:
    explicit CapturePanel(QWidget *parent = nullptr);

    // The project's prompt files, offered in the (editable) prompt set combo; keeps the text typed.
    void setPromptSets(const QStringList &paths);
    void setRequest(const CaptureRequest &r); // fills the controls
    CaptureRequest request() const;           // read from the controls
    // Capture needs both models loaded; without them the button is disabled and a hint says why.
    void setModelsLoaded(bool loaded);
    // "In the file": prompts, tokens and captured layers of the experiment file shown.
    void setSnapshot(std::shared_ptr<const ExperimentSnapshot> s);
    // "This run": what the last capture wrote, with sizes in human units.
    void showSummary(const CaptureSummary &s);
    // Plain text of the last summary, one "quantity: value" line each (empty before the first).
    QString summaryText() const;
    QString statusText() const;

public Q_SLOTS:
    // busy: the engine runs a job; ownJob: it is this step's (only then are its Cancel, Pause and Stop on)
    void setBusy(bool busy, bool ownJob = true);
    void setProgress(double fraction, const QString &stage);
    void setFailed(const QString &message);
    void setCancelled();

Q_SIGNALS:
    void captureRequested(const kvwb::ui::CaptureRequest &request);
    void cancelRequested();

private:
    void addSettingsGroup(QVBoxLayout *layout);
    void refreshEnabled();
    void refreshFileTable();
    void setStatus(const QString &html);
    void setError(const QString &message);
    QString captureRefusal() const; // why Capture would refuse now ("" none)
    void inputChanged();            // an error shown stays only while its cause does

    std::shared_ptr<const ExperimentSnapshot> m_snapshot;
    bool m_modelsLoaded = false;
    bool m_busy = false;
    bool m_ownJob = false; // the running job is this step's
    QString m_summaryText;

    QComboBox *m_prompts = nullptr;
    QPushButton *m_browse = nullptr;
    QLineEdit *m_out = nullptr;
    bool m_errorShown = false; // the status shows an error (a refusal or a failed capture)
    QPushButton *m_saveAs = nullptr;
    QComboBox *m_storage = nullptr;
    QSpinBox *m_compress = nullptr;
    QSpinBox *m_maxTokens = nullptr;
    QSpinBox *m_limit = nullptr;
    QCheckBox *m_postRope = nullptr;
    QPushButton *m_capture = nullptr;
    QPushButton *m_cancel = nullptr;
    QProgressBar *m_progress = nullptr;
    QLabel *m_status = nullptr;
    QTableWidget *m_run = nullptr;
    QTableWidget *m_file = nullptr;
};

} // namespace kvwb::ui
