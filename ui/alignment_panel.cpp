#include "ui/alignment_panel.h"

#include "ui/heatmap_widget.h"
#include "ui/layer_metrics_chart.h"
#include "ui/metric_table_model.h"
#include "ui/sweep_chart.h"

#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

#include <cmath>
#include <limits>
#include <set>

namespace kvwb::ui {

namespace {

QStringList labels(const QString &prefix, int n)
{
    QStringList out;
    for (int i = 0; i < n; ++i)
        out << QString("%1%2").arg(prefix).arg(i);
    return out;
}

// [B layers, heads] from the per-head table's (layer, head, metric) rows.
core::Matrix headMatrix(const core::MetricTable &t, const std::string &metric, int layers, int heads)
{
    core::Matrix m;
    m.rows = layers;
    m.cols = heads;
    m.data.assign(size_t(layers) * size_t(heads), std::numeric_limits<double>::quiet_NaN());
    const int lc = t.column("layer"), hc = t.column("head"), vc = t.column(metric);
    if (lc < 0 || hc < 0 || vc < 0)
        return m;
    for (const auto &row : t.rows) {
        const int l = int(row[size_t(lc)]), h = int(row[size_t(hc)]);
        if (l >= 0 && l < layers && h >= 0 && h < heads)
            m.data[size_t(l) * size_t(heads) + size_t(h)] = row[size_t(vc)];
    }
    return m;
}

} // namespace

AlignmentPanel::AlignmentPanel(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QVBoxLayout(this);
    auto *top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Converter:"), this));
    m_converters = new QComboBox(this);
    m_converters->setObjectName("converterCombo");
    top->addWidget(m_converters, 1);
    layout->addLayout(top);
    m_summary =
        new QLabel(tr("Open an experiment file (File > Open Experiment) to see its converters. Fit them "
                      "with `kvwb align --experiment EXP.h5`."),
                   this);
    m_summary->setObjectName("converterSummary");
    m_summary->setWordWrap(true);
    layout->addWidget(m_summary);

    auto *tabs = new QTabWidget(this);
    tabs->setObjectName("alignmentTabs");
    auto *perLayer = new QWidget(this);
    auto *perLayerLayout = new QHBoxLayout(perLayer);
    m_layerModel = new MetricTableModel(this);
    m_layerView = new QTableView(perLayer);
    m_layerView->setObjectName("layerMetricsView");
    m_layerView->setModel(m_layerModel);
    m_layerView->verticalHeader()->hide();
    m_layerChart = new LayerMetricsChart(perLayer);
    perLayerLayout->addWidget(m_layerView, 1);
    perLayerLayout->addWidget(m_layerChart, 1);
    tabs->addTab(perLayer, tr("Per layer"));

    auto *perHead = new QWidget(this);
    auto *perHeadLayout = new QHBoxLayout(perHead);
    m_headR2 = new HeatmapWidget(perHead);
    m_headAttn = new HeatmapWidget(perHead);
    perHeadLayout->addWidget(m_headR2);
    perHeadLayout->addWidget(m_headAttn);
    tabs->addTab(perHead, tr("Per head"));

    auto *cka = new QWidget(this);
    auto *ckaLayout = new QHBoxLayout(cka);
    m_ckaKeys = new HeatmapWidget(cka);
    m_ckaValues = new HeatmapWidget(cka);
    ckaLayout->addWidget(m_ckaKeys);
    ckaLayout->addWidget(m_ckaValues);
    tabs->addTab(cka, tr("Layer similarity (CKA)"));

    auto *sweeps = new QWidget(this);
    auto *sweepLayout = new QVBoxLayout(sweeps);
    auto *sweepTop = new QHBoxLayout;
    sweepTop->addWidget(new QLabel(tr("Sweep:"), sweeps));
    m_sweeps = new QComboBox(sweeps);
    m_sweeps->setObjectName("sweepCombo");
    sweepTop->addWidget(m_sweeps, 1);
    sweepTop->addWidget(new QLabel(tr("Score:"), sweeps));
    m_sweepMetric = new QComboBox(sweeps);
    m_sweepMetric->addItems({"attn_cos", "r2_k", "r2_v", "cos_k", "cos_v"});
    sweepTop->addWidget(m_sweepMetric);
    sweepLayout->addLayout(sweepTop);
    m_sweepChart = new SweepChart(sweeps);
    sweepLayout->addWidget(m_sweepChart, 1);
    tabs->addTab(sweeps, tr("Sweeps"));
    layout->addWidget(tabs, 1);

    connect(m_converters, &QComboBox::currentIndexChanged, this, &AlignmentPanel::showConverter);
    connect(m_sweeps, &QComboBox::currentIndexChanged, this, &AlignmentPanel::showSweep);
    connect(m_sweepMetric, &QComboBox::currentIndexChanged, this,
            [this] { showSweep(m_sweeps->currentIndex()); });
}

void AlignmentPanel::setSnapshot(std::shared_ptr<const ExperimentSnapshot> snapshot)
{
    m_snapshot = std::move(snapshot);
    const QSignalBlocker block(m_converters), blockSweeps(m_sweeps);
    m_converters->clear();
    m_sweeps->clear();
    if (m_snapshot) {
        for (const auto &c : m_snapshot->converters)
            m_converters->addItem(QString::fromStdString(c.name));
        for (const auto &[name, table] : m_snapshot->sweeps)
            m_sweeps->addItem(QString::fromStdString(name));
    }
    showConverter(m_converters->count() > 0 ? 0 : -1);
    showSweep(m_sweeps->count() > 0 ? 0 : -1);
}

int AlignmentPanel::currentConverter() const
{
    return m_converters->currentIndex();
}

void AlignmentPanel::showConverter(int index)
{
    if (!m_snapshot || index < 0 || index >= int(m_snapshot->converters.size())) {
        m_layerModel->setTable({});
        m_layerChart->setTable({});
        if (m_snapshot)
            m_summary->setText(tr("%1: no converters yet. Fit them with `kvwb align --experiment %1`.")
                                   .arg(m_snapshot->path));
        return;
    }
    m_converters->setCurrentIndex(index);
    const auto &c = m_snapshot->converters[size_t(index)];
    const int layersA = m_snapshot->a.config.numLayers, layersB = m_snapshot->b.config.numLayers;
    const int heads = m_snapshot->b.config.numKvHeads;
    m_summary->setText(
        tr("<b>%1</b>: source layers %2 (k = %3), lambda %4, %5 maps, keys %6; fitted on %7 "
           "prompts (%8 tokens), scored on %9 held-out prompts. Created %10.")
            .arg(QString::fromStdString(c.name), QString::fromStdString(c.selection))
            .arg(c.k)
            .arg(QString::fromStdString(c.lambdaMode),
                 c.layers.empty() || !c.layers[0].headMatched ? tr("full cross-head") : tr("head-matched"),
                 QString::fromUtf8(core::keyFormName(c.keyForm)))
            .arg(c.trainPrompts.size())
            .arg(c.trainTokens)
            .arg(c.testPrompts.size())
            .arg(QString::fromStdString(c.createdUtc)));
    m_layerModel->setTable(c.layerMetrics);
    m_layerView->resizeColumnsToContents();
    m_layerChart->setTable(c.layerMetrics);
    m_layerChart->setTitle(
        tr("Converter %1: fit per layer of model B (held-out prompts)").arg(QString::fromStdString(c.name)));
    m_headR2->setMatrix(headMatrix(c.headMetrics, "r2_k", layersB, heads), labels("B", layersB),
                        labels("head ", heads), tr("R\u00b2 of keys per B layer and kv head"));
    m_headAttn->setMatrix(headMatrix(c.headMetrics, "attn_cos", layersB, heads), labels("B", layersB),
                          labels("head ", heads), tr("Attention-output cosine per B layer and kv head"));
    m_ckaKeys->setMatrix(c.ckaKeys, labels("B", layersB), labels("A", layersA),
                         tr("Linear CKA of keys: B layer vs A layer"));
    m_ckaValues->setMatrix(c.ckaValues, labels("B", layersB), labels("A", layersA),
                           tr("Linear CKA of values: B layer vs A layer"));
    for (HeatmapWidget *h : {m_ckaKeys, m_ckaValues})
        h->setAxisTitles(tr("model B (target) layer"), tr("model A (source) layer"));
    for (HeatmapWidget *h : {m_headR2, m_headAttn})
        h->setAxisTitles(tr("model B (target) layer"), tr("kv head"));
}

void AlignmentPanel::showSweep(int index)
{
    if (!m_snapshot || index < 0 || index >= int(m_snapshot->sweeps.size())) {
        m_sweepChart->setTable({}, m_sweepMetric->currentText(), SweepChart::XAxis::K);
        return;
    }
    const auto &t = m_snapshot->sweeps[size_t(index)].second;
    // plot against what varies: k when several ks were swept, else the calibration tokens
    std::set<double> ks;
    const int kc = t.column("k");
    for (const auto &row : t.rows)
        if (kc >= 0)
            ks.insert(row[size_t(kc)]);
    m_sweepChart->setTable(t, m_sweepMetric->currentText(),
                           ks.size() > 1 ? SweepChart::XAxis::K : SweepChart::XAxis::TrainTokens);
}

} // namespace kvwb::ui
