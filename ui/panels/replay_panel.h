// The Replay panel: the replay ledgers stored in an experiment file (`kvwb replay --save-ledger`)
// with their per-tier summary, the live-style charts (hit rate per tier, false-hit rate, latency
// percentiles, tokens saved) on its Charts tab, and the per-request ledger on its Requests tab:
// question and answer, filters (tier, tenant, model, false hits, free text over questions and
// answers), sorting, a detail pane for the selected request and export of the rows shown.
//
// Its "Run a replay" group asks the engine for a replay of a workload through a chosen tier stack
// (replayRequested / pauseRequested / stopRequested); the app answers with beginLive, rows in
// batches through appendRows, setReplayProgress and finishLive. The live ledger is one more entry
// of the ledger combo ("<title> (live)"), kept by the panel, so switching to a stored ledger and
// back shows it again.
//
// GUI-thread only; shows an immutable ExperimentSnapshot. appendRows() takes rows in batches, so
// the same panel can follow a replay as it runs.
#pragma once

#include "ui/models/experiment_snapshot.h"
#include "ui/panels/job_types.h"

#include <QWidget>

#include <memory>

class QCheckBox;
class QComboBox;
class QDialog;
class QDoubleSpinBox;
class QGridLayout;
class QLabel;
class QLayout;
class QLineEdit;
class QPoint;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QTableView;
class QTableWidget;
class QTextBrowser;

namespace kvwb::ui {

class LedgerFilterModel;
class LedgerModel;
class ReplayCharts;
class ThresholdCurveChart;

class ReplayPanel : public QWidget
{
    Q_OBJECT

public:
    explicit ReplayPanel(QWidget *parent = nullptr);

    void setSnapshot(std::shared_ptr<const ExperimentSnapshot> snapshot);
    void showLedger(int index);
    // A second ledger beside the shown one (index into the "beside it" combo: 0 none, then the
    // stored ledgers, then the live replay): its lines drawn over the charts, and the summary one
    // table of both with their differences.
    void showBeside(int index);
    void appendRows(const std::vector<core::LedgerRow> &rows); // a batch, e.g. every 100 ms

    ReplayCharts *charts() const { return m_charts; }
    LedgerModel *ledger() const { return m_ledger; }
    LedgerFilterModel *filter() const { return m_filter; }
    QTableView *ledgerView() const { return m_view; }
    QTabWidget *tabs() const { return m_tabs; } // "Charts" and "Requests"
    QString detailText() const;                 // the detail pane's text (the selected request)
    // Writes the rows the filters show, in the order shown, as a ledger CSV (docs/replay.md, "Ledger")
    // to path, atomically; "" or the error, one line naming the file.
    QString exportShownRows(const QString &path) const;
    QString summaryText() const;

    void setWorkloads(const QStringList &paths); // offered in the editable workload combo
    // The settings last set, with what the panel shows in place of theirs: the workload, the tiers,
    // the semantic, gate, store and price settings, the ledger name; experiment = the snapshot's path
    // (may be empty); converter = setCrossAvailable's converter; the knowledge graph in use when the
    // knowledge tier is checked. Settings it does not show (limits, eviction, block...) are kept.
    core::ReplaySettings replayRequest() const;
    void setReplayRequest(const core::ReplaySettings &r); // every shown field but experiment and converter
    // The cross tier needs a converter in use; without one its checkbox is unchecked and disabled.
    void setCrossAvailable(bool available, const QString &converter);
    // The knowledge tier's graph in use ("" none: its checkbox is disabled) and its profiles.
    void setKnowledgeAvailable(const QString &graph, const QString &profiles);
    QString knowledgeGraph() const;    // the graph the knowledge tier uses ("" none)
    QString knowledgeProfiles() const; // its user profiles ("" none)
    void setModelsLoaded(bool loaded); // Start needs models
    // Clears the ledger and charts and shows "<title> (live)"; rows then come through appendRows().
    void beginLive(const QString &title);
    // Status "done: N requests" or "stopped after N"; the live rows stay shown.
    void finishLive(bool cancelled);
    // timing: the elapsed time and the estimate of the time left ("" none)
    void setReplayProgress(int done, int total, const QString &timing = {});
    bool liveShown() const; // the live entry is the one shown
    int liveRowCount() const { return int(m_liveRows.size()); }
    QString statusText() const;

public Q_SLOTS:
    // busy: the engine runs a job; ownJob: it is this step's (only then are its Cancel, Pause and Stop on)
    void setBusy(bool busy, bool ownJob = true);
    void setReplayFailed(const QString &message);

    // The threshold sweep of the workload (kvwb sweep-semantic): shown in the "Threshold sweep"
    // window, whose selected row (or the suggested threshold) sets the semantic threshold.
    void showSweep(const SemanticSweepResult &sweep);
    SemanticSweepRequest sweepRequest() const;
    // The embedder chosen: lexical, lexical-idf, model, or an embedding model's path.
    QString embedderSpec() const;
    // Selects an embedder by spec; a model path not listed yet is added (shown by its name).
    void selectEmbedder(const QString &spec);
    // "Train on pairs..." (the embedder list's last item): a dialog for the pairs file, the output
    // folder, a new encoder or the chosen one fine-tuned, steps and the validation share, then
    // requestEmbedderTraining.
    void openTrainEmbedderDialog(bool verifier = false);
    // Checks the settings (a pairs file that exists, an output folder) and emits
    // trainEmbedderRequested, or says in the status line what is missing.
    void requestEmbedderTraining(const kvwb::core::EmbedderTrainSettings &settings, bool verifier = false);
    // The verifier chosen ("" none: a cross-encoder's directory otherwise) and its selection, as the
    // embedder's (a path not listed yet is added).
    QString verifierSpec() const;
    void selectVerifier(const QString &spec);
    // The trained embedder is chosen; the threshold is set to the lowest with validation precision
    // >= 0.9 when there is one; the status line gives its validation scores.
    void showTrainedEmbedder(const EmbedderTrainView &view);

Q_SIGNALS:
    void replayRequested(const kvwb::core::ReplaySettings &request);
    void sweepRequested(const kvwb::ui::SemanticSweepRequest &request);
    void trainEmbedderRequested(const kvwb::ui::EmbedderTrainRequest &request);
    void pauseRequested(bool paused);
    void stopRequested();

private:
    void refreshSummary();
    void buildRunGroup(QLayout *parent);
    void addWorkloadRow(QWidget *box, QGridLayout *grid);
    void addTierRow(QWidget *box, QGridLayout *grid);
    void addGateRow(QWidget *box, QGridLayout *grid);
    void addStoreRow(QWidget *box, QGridLayout *grid);
    void addRunButtons(QWidget *box, QGridLayout *grid);
    void connectRunGroup();
    void refreshRunEnabled();
    void showRows(const std::vector<core::LedgerRow> &rows);
    QWidget *buildRequestsTab();
    void showDetail();                    // the detail pane for the current row of the view
    void chooseColumns(const QPoint &at); // the header's menu: columns shown
    void setError(const QString &message);
    // Why Start would refuse now ("" none): the workload, the ledger name, a checked tier without
    // what it needs.
    QString startRefusal() const;
    // An input changed: an error shown stays only while its cause does (a refusal is re-checked).
    void inputChanged();
    int liveComboIndex() const;

    QLabel *m_rowCount = nullptr; // "N of M rows" under the filters
    std::shared_ptr<const ExperimentSnapshot> m_snapshot;
    QComboBox *m_ledgers = nullptr;
    QComboBox *m_beside = nullptr;                          // a second ledger, drawn beside the shown one
    const std::vector<core::LedgerRow> *besideRows() const; // null: none chosen
    QString besideName() const;
    QString besideTable(const core::LedgerSummary &shown, const core::LedgerSummary &other) const;
    QLabel *m_summary = nullptr;
    ReplayCharts *m_charts = nullptr;
    LedgerModel *m_ledger = nullptr;
    LedgerFilterModel *m_filter = nullptr;
    QTableView *m_view = nullptr;
    QTabWidget *m_tabs = nullptr;
    QTextBrowser *m_detail = nullptr;
    QPushButton *m_export = nullptr;
    QComboBox *m_tier = nullptr;
    QLineEdit *m_tenant = nullptr;
    QComboBox *m_model = nullptr;
    QCheckBox *m_falseOnly = nullptr;
    QLineEdit *m_search = nullptr;

    // Live replay: its rows (a copy, so the combo can switch away and back) and its combo entry.
    std::vector<core::LedgerRow> m_liveRows;
    QString m_liveTitle;
    bool m_hasLive = false;
    bool m_busy = false;
    bool m_errorShown = false; // the run status shows an error (a refusal or a failed replay)
    bool m_ownJob = false;     // the running job is this step's
    bool m_modelsLoaded = false;
    bool m_crossAvailable = false;
    QString m_crossConverter;
    QString m_knowledgeGraph, m_knowledgeProfiles;
    core::ReplaySettings m_settings; // what setReplayRequest gave, for the fields the panel does not show

    QComboBox *m_workload = nullptr;
    QPushButton *m_browse = nullptr;
    QCheckBox *m_exact = nullptr;
    QCheckBox *m_semantic = nullptr;
    QCheckBox *m_prefix = nullptr;
    QCheckBox *m_cross = nullptr;
    QCheckBox *m_knowledge = nullptr;
    QDoubleSpinBox *m_threshold = nullptr;
    QComboBox *m_embedder = nullptr;
    QString m_lastEmbedder = "lexical"; // restored when "Other model..." is cancelled
    QCheckBox *m_gate = nullptr;
    QComboBox *m_gateSignal = nullptr;
    QDoubleSpinBox *m_gateThreshold = nullptr;
    QDoubleSpinBox *m_crossRecompute = nullptr; // the cross tier's selective recompute share
    QSpinBox *m_maxTokens = nullptr;
    QSpinBox *m_limit = nullptr;
    QLineEdit *m_ledgerName = nullptr;
    QLineEdit *m_store = nullptr;           // shared store URL ("" this process)
    QComboBox *m_storeKvDtype = nullptr;    // f32 | bf16 | f16: the prefix KV blocks in the store
    QDoubleSpinBox *m_errorBound = nullptr; // 0 = one global threshold
    QCheckBox *m_guards = nullptr;          // the semantic tier's guards on (core/cache/semantic_guards.h)
    QPushButton *m_sweep = nullptr;
    QDialog *m_sweepDialog = nullptr; // created on the first sweep
    QTableWidget *m_sweepTable = nullptr;
    QLabel *m_sweepSummary = nullptr;
    QTabWidget *m_sweepTabs = nullptr;
    QWidget *makeSweepTab(const QString &name, QLabel *&summary, ThresholdCurveChart *&chart,
                          QTableWidget *&table, QDoubleSpinBox *target);
    ThresholdCurveChart *m_sweepChart = nullptr;
    QTableWidget *m_verifierSweepTable = nullptr;
    QLabel *m_verifierSweepSummary = nullptr;
    ThresholdCurveChart *m_verifierSweepChart = nullptr;
    QDoubleSpinBox *m_verifierThreshold = nullptr; // 0: the verifier's recorded threshold
    QComboBox *m_prices = nullptr;                 // price preset or file ("" default)
    QPushButton *m_start = nullptr;
    QPushButton *m_pause = nullptr;
    QPushButton *m_stop = nullptr;
    QProgressBar *m_progress = nullptr;
    QLabel *m_runStatus = nullptr;
    QString m_embedderNote;
    QComboBox *m_verifier = nullptr;
    QString m_lastVerifier; // the trained embedder's validation scores, kept on the status line
};

} // namespace kvwb::ui
