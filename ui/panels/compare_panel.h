// The Compare panel: one prompt answered three ways, side by side - by model A (the source), by
// model B from its own prefill ("scratch") and by B from A's converted cache ("transfer") - with
// each generated token's background coloured by its probability or by the per-token KL of the
// transfer path to scratch, the first divergence marked, per-path timings and a summary line with
// the teacher-forced KL, top-1 agreement, ROUGE-L and the quality gate's decision. Below the
// controls, a prompt set (the converter's held-out prompts or a prompt file) can be run as `kvwb
// compare --held-out --baselines` does: the summary shows the KL gap closed, top-1 and ROUGE-L
// against the no-prefix floor and A's own answer, and the differences from the raw-source-KV and
// random-map baselines, each with its paired bootstrap 95% interval over the prompts.
//
// The panel only builds a core::CompareSettings from its controls and emits it; app/ runs it on the
// engine thread and hands the result back through showResult(). Earlier results (this session's,
// or the samples stored in the experiment) are kept by value for the history combo.
//
// GUI-thread only. The panel owns its widgets and copies of the samples it shows.
#pragma once

#include "ui/panels/job_types.h"

#include <QString>
#include <QStringList>
#include <QWidget>

#include <array>
#include <optional>
#include <vector>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QVBoxLayout;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QStackedWidget;
class QTextBrowser;
class QUrl;

namespace kvwb::ui {

class ComparePanel : public QWidget
{
    Q_OBJECT

public:
    enum class Colouring
    {
        Probability,
        Kl
    };
    static constexpr int PaneCount = 3; // 0 = A, 1 = B scratch, 2 = B transfer

    explicit ComparePanel(QWidget *parent = nullptr);

    // Where the converters come from; empty = none (Run disabled, the hint says why).
    void setExperimentPath(const QString &path);
    // The converter combo; inUse is selected when listed, else the first name.
    void setConverters(const QStringList &names, const QString &inUse);
    // Run needs loaded models, an experiment and a converter.
    void setModelsLoaded(bool loaded);

    // The settings last set, with the controls' in place of theirs: experiment, converter, prompt,
    // max tokens, gate signal/threshold/tail; saveSamples "workbench" unless saving is off.
    core::CompareSettings request() const;
    // Sets the controls; a converter the combo does not list is added so the request round-trips.
    void setRequest(const core::CompareSettings &r);
    // The prompt-set run from the controls (converter, max tokens and gate as for one prompt).
    core::CompareSettings promptSetRequest() const;
    // Sets the prompt-set controls (and, from r, the converter, max tokens and gate).
    void setPromptSetRequest(const core::CompareSettings &r);
    // Shows a prompt set's summary in place of the panes (Set summary toggles back).
    void showSetSummary(const kvwb::ui::CompareSetSummary &s);
    // That summary as plain text (empty before the first one).
    QString setSummaryText() const;

    // Fills the three panes, their stats lines and the summary; appends r to the history combo.
    void showResult(const kvwb::ui::CompareResult &r);
    // Replaces the history (e.g. the samples stored in the experiment) and shows the newest one.
    void setHistory(const std::vector<kvwb::ui::CompareResult> &samples);

    void setColouring(Colouring c);
    Colouring colouring() const { return m_colouring; }

    // The HTML given to pane 0 (A), 1 (B scratch) or 2 (B transfer); empty for another index.
    QString paneHtml(int pane) const;
    // The stats line under that pane ("TTFT 12.3 ms · 410 tok/s · ...").
    QString statsText(int pane) const;
    // The line comparing transfer with scratch, as plain text.
    QString summaryText() const;
    // The line under the panes that describes the token last pointed at.
    QString tokenInfoText() const;

public Q_SLOTS:
    // Run disabled; when the job is this step's (ownJob), Cancel enabled and progress shown
    void setBusy(bool busy, bool ownJob = true);
    void setProgress(double fraction, const QString &stage);
    void setFailed(const QString &message); // a red message line; busy off

Q_SIGNALS:
    void compareRequested(const kvwb::core::CompareSettings &request);
    void compareSetRequested(const kvwb::core::CompareSettings &request);
    void cancelRequested();

private:
    void addHistoryAndPrompt(QVBoxLayout *layout);
    QLabel *addControls(QVBoxLayout *layout);
    void addPromptSetRow(QVBoxLayout *layout);
    void addResultViews(QVBoxLayout *layout);
    void connectControls(QLabel *comparison);
    void run();
    void showSample(const CompareResult &r);
    void showEmpty();
    void render();
    void refreshReadiness();
    void refreshHeaders();
    void refreshLegend();
    void showMessage(const QString &message);
    void showTokenInfo(int pane, const QUrl &link);
    void syncScroll(int fromPane);
    QString historyLabel(const CompareResult &r) const;
    // The gate's verdict judged by what B answered: its first N tokens against scratch's, the
    // first-token KL and the gate's measured precision (from the last prompt set with this gate).
    struct GateLine
    {
        QString verdict, colour, check;
    };
    GateLine gateLine(const CompareResult &r) const;
    static QString gateOp(const std::string &signal); // "≤" or "≥": the side that passes

    QString m_experimentPath;
    bool m_modelsLoaded = false;
    bool m_busy = false;
    bool m_ownJob = false; // the running job is this step's
    bool m_save = true;
    core::CompareSettings m_settings; // what setRequest gave, for the settings the panel does not show
    bool m_syncing = false;           // guards the scroll-bar echo between panes
    Colouring m_colouring = Colouring::Probability;
    std::optional<CompareResult> m_shown;
    std::optional<CompareSetSummary> m_lastSet; // the last prompt set's summary (the gate's precision)
    std::vector<CompareResult> m_history;
    std::array<QString, PaneCount> m_html;
    QString m_summaryPlain;
    QString m_setSummaryPlain;

    QPlainTextEdit *m_prompt = nullptr;
    QComboBox *m_converter = nullptr;
    QSpinBox *m_maxTokens = nullptr;
    QComboBox *m_gateSignal = nullptr;
    QDoubleSpinBox *m_gateThreshold = nullptr;
    QSpinBox *m_gateTail = nullptr;
    QDoubleSpinBox *m_recompute = nullptr; // the share of B's prefix B recomputes itself
    QComboBox *m_colourBy = nullptr;
    QPushButton *m_run = nullptr;
    QPushButton *m_cancel = nullptr;
    QProgressBar *m_progress = nullptr;
    QLabel *m_hint = nullptr;
    QLabel *m_message = nullptr;
    QComboBox *m_historyCombo = nullptr;
    std::array<QLabel *, PaneCount> m_headers{};
    std::array<QTextBrowser *, PaneCount> m_panes{};
    std::array<QLabel *, PaneCount> m_stats{};
    QLabel *m_legendCaption = nullptr;
    QLabel *m_legendBar = nullptr;
    QLabel *m_tokenInfo = nullptr;
    QLabel *m_summary = nullptr;
    QComboBox *m_setSource = nullptr; // "held-out prompts" or a prompt file's path (editable)
    // A second converter run on the same prompts of a set (kvwb compare --versus): "(none)" or one
    // of the experiment's other converters.
    QComboBox *m_setVersus = nullptr;
    void refreshVersus(); // the other converters, keeping the choice while it is one of them
    QSpinBox *m_setLimit = nullptr;
    QCheckBox *m_setBaselines = nullptr;
    QPushButton *m_runSet = nullptr;
    QPushButton *m_showSetSummary = nullptr; // checked: m_views shows the set summary
    QStackedWidget *m_views = nullptr;       // page 0: the three panes; page 1: the set summary
    QLabel *m_setSummary = nullptr;
};

} // namespace kvwb::ui
