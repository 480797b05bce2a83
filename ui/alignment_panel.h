// The Alignment panel: the converters stored in an experiment file (`kvwb align`, and later the
// panel's own fits) - their settings, per-layer scores as a table and a chart, per layer x head
// heatmaps of R^2 and attention-output cosine, the layer x layer CKA maps - and the sweep tables
// (`kvwb sweep`) as curves.
//
// GUI-thread only; shows an immutable ExperimentSnapshot.
#pragma once

#include "ui/experiment_snapshot.h"

#include <QWidget>

#include <memory>

class QComboBox;
class QLabel;
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

    MetricTableModel *layerTable() const { return m_layerModel; }
    HeatmapWidget *ckaKeys() const { return m_ckaKeys; }
    HeatmapWidget *headR2() const { return m_headR2; }
    HeatmapWidget *headAttention() const { return m_headAttn; }
    LayerMetricsChart *layerChart() const { return m_layerChart; }
    SweepChart *sweepChart() const { return m_sweepChart; }

private:
    void showSweep(int index);

    std::shared_ptr<const ExperimentSnapshot> m_snapshot;
    QComboBox *m_converters = nullptr;
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
};

} // namespace kvwb::ui
