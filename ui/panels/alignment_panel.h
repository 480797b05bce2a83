// The Alignment panel: the converters stored in an experiment file (`kvwb align`, and later the
// panel's own fits) - their settings, per-layer scores as a table and a chart, per layer x head
// heatmaps of R^2 and attention-output cosine, the layer x layer CKA maps - and the sweep tables
// (`kvwb sweep`) as curves. Its "Fit a converter" group asks the engine for a new fit of the file
// shown (fitRequested / cancelRequested; the engine reports back through setBusy / setFitProgress /
// showFitSummary / setFitFailed), and "Use this converter" picks the converter the Compare and
// Replay panels use (inUseChanged; the app decides and confirms with setInUse).
//
// GUI-thread only; shows an immutable ExperimentSnapshot.
#pragma once

#include "ui/models/experiment_snapshot.h"
#include "ui/panels/job_types.h"

#include <QWidget>

#include <memory>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLayout;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableView;

namespace kvwb::ui {

class HeatmapWidget;
class LayerMetricsChart;
class MetricTableModel;
class SweepChart;

class AlignmentPanel : public QWidget
{
    Q_OBJECT

public:
    explicit AlignmentPanel(QWidget *parent = nullptr);

    void setSnapshot(std::shared_ptr<const ExperimentSnapshot> snapshot);
    // The converter shown (index into snapshot->converters), -1 when none.
    int currentConverter() const;
    void showConverter(int index);

    // The per-layer table shown: the shown converter's, or both side by side (a converter beside it).
    MetricTableModel *layerTable() const { return m_layerModel; }
    HeatmapWidget *ckaKeys() const { return m_ckaKeys; }
    HeatmapWidget *headR2() const { return m_headR2; }
    HeatmapWidget *headAttention() const { return m_headAttn; }
    LayerMetricsChart *layerChart() const { return m_layerChart; }
    SweepChart *sweepChart() const { return m_sweepChart; }

    core::FitSettings fitRequest() const; // experimentPath = the snapshot's path
    void setFitRequest(const core::FitSettings &r);
    // Marks `name` as the converter in use (" (in use)" in the combo, "In use: name"); "" for none.
    void setInUse(const QString &name);
    QString inUse() const;
    // The stored name of the converter at a combo index (the item text may carry " (in use)").
    QString converterName(int index) const;
    // Status line: "fitted 'name' in 2.1 s: mean R² K 0.62, V 0.50, attention cosine 0.68".
    void showFitSummary(const FitSummary &s);
    // A converter sweep finished (or was cancelled): the status line says what was stored.
    void showSweepResult(const ConverterSweepSummary &s);
    QString fitStatusText() const;

public Q_SLOTS:
    // busy: the engine runs a job; ownJob: it is this step's (only then are its Cancel, Pause and Stop on)
    void setBusy(bool busy, bool ownJob = true);
    void setFitProgress(double fraction, const QString &stage);
    void setFitFailed(const QString &message);

Q_SIGNALS:
    void fitRequested(const kvwb::core::FitSettings &request);
    void sweepRequested(const kvwb::ui::ConverterSweepRequest &request); // Run sweep
    void cancelRequested();
    void inUseChanged(const QString &name); // "Use this converter" pressed

private:
    void buildFitGroup(QLayout *parent);
    void connectFitGroup();
    QString fitRefusal() const; // why Fit would refuse now ("" none): the name, lambda
    void fitInputChanged();     // a refusal shown stays only while its cause does
    void showSweep(int index);
    void refreshFitEnabled();
    void refreshInUseMarks();
    void runSweep(); // Run sweep: the lists read and checked, then sweepRequested
    // The sweep the Sweeps tab's fields ask for, and why it cannot run (empty: it can).
    ConverterSweepRequest sweepRequest(QStringList *problems) const;
    bool m_sweepRefusalShown = false; // the fit status shows why Run sweep refused
    void sweepInputChanged();         // that refusal stays only while its cause does
    const core::ConverterRecord *existingConverter(const std::string &name) const; // in the snapshot
    void startFit(const core::FitSettings &r);
    // A fit under a name the experiment holds: asks (without blocking) whether to replace that
    // converter or store the fit under the next free "<name>-N".
    void askToReplace(core::FitSettings r);

    std::shared_ptr<const ExperimentSnapshot> m_snapshot;
    QComboBox *m_converters = nullptr;
    // A second converter beside the shown one: its per-layer lines over the chart, and the table
    // one row per layer with both converters' scores and their differences.
    QComboBox *m_beside = nullptr;
    void refreshBeside(); // the other converters, keeping the choice while it is one of them
    QLabel *m_summary = nullptr;
    MetricTableModel *m_layerModel = nullptr;
    QTableView *m_layerView = nullptr;
    LayerMetricsChart *m_layerChart = nullptr;
    HeatmapWidget *m_headR2 = nullptr;
    HeatmapWidget *m_headAttn = nullptr;
    HeatmapWidget *m_ckaKeys = nullptr;
    HeatmapWidget *m_ckaValues = nullptr;
    QComboBox *m_sweeps = nullptr;
    QComboBox *m_sweepMetric = nullptr;
    SweepChart *m_sweepChart = nullptr;
    QLineEdit *m_sweepKs = nullptr, *m_sweepLambdas = nullptr, *m_sweepTokens = nullptr,
              *m_sweepName = nullptr;
    QPushButton *m_sweepRun = nullptr;
    QString m_lastSweep; // the sweep this panel ran last (shown when the file is read again)

    QString m_inUse;
    bool m_busy = false;
    bool m_ownJob = false; // the running job is this step's
    QPushButton *m_useButton = nullptr;
    QLabel *m_inUseLabel = nullptr;
    QLineEdit *m_fitName = nullptr;
    bool m_fitRefusalShown = false; // the fit status shows why Fit refused
    QComboBox *m_selection = nullptr;
    QSpinBox *m_k = nullptr;
    QLineEdit *m_lambda = nullptr;
    QCheckBox *m_autoLambda = nullptr;
    QCheckBox *m_perHead = nullptr;
    QComboBox *m_family = nullptr;
    QSpinBox *m_rank = nullptr;
    QSpinBox *m_mlpHidden = nullptr;
    QSpinBox *m_mlpEpochs = nullptr;
    QDoubleSpinBox *m_budget = nullptr;   // seconds of MLP training (0: no limit)
    QSpinBox *m_autoPrompts = nullptr;    // auto: validation prompts whose KL chooses the family
    QComboBox *m_tokenFeatures = nullptr; // core::TokenFeatures as kvwb align --token-features spells them
    QComboBox *m_objective = nullptr;     // core::FitObjective: kv or kl
    QSpinBox *m_maxTokens = nullptr;
    QPushButton *m_fit = nullptr;
    QPushButton *m_cancel = nullptr;
    QProgressBar *m_progress = nullptr;
    QLabel *m_fitStatus = nullptr;
    core::FitSettings m_settings; // what setFitRequest gave, for the settings the panel does not show
};

} // namespace kvwb::ui
