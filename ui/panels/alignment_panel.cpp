#include "ui/panels/alignment_panel.h"
#include "ui/panels/job_progress.h"

#include "ui/charts/heatmap_widget.h"
#include "ui/charts/layer_metrics_chart.h"
#include "ui/charts/sweep_chart.h"
#include "ui/models/metric_table_model.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDoubleValidator>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>
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

// "ridge", "low-rank (rank 16)", "MLP (width 256)".
QString familyText(const core::ConverterRecord &c)
{
    const core::KvMap *m = c.layers.empty() || c.layers[0].keys.empty() ? nullptr : &c.layers[0].keys[0];
    switch (c.family) {
    case core::ConverterFamily::LowRank:
        return QObject::tr("low-rank (rank %1)").arg(m ? m->rank : 0);
    case core::ConverterFamily::Mlp:
        return QObject::tr("MLP (width %1)").arg(m ? m->hidden : 0);
    case core::ConverterFamily::Ridge:
    case core::ConverterFamily::Auto:      // a setting: a stored converter is never auto
    case core::ConverterFamily::AttnRidge: // stored as ridge
        break;
    }
    return QObject::tr("ridge");
}

// For a converter family auto chose: " Chosen by auto: validation KL 0.093 (ridge, proportional 0.412;
// mlp, all 0.093; no prefix 1.445)."; "" for others.
QString autoText(const core::ConverterRecord &c)
{
    const auto settings = QJsonDocument::fromJson(QByteArray::fromStdString(c.settingsJson)).object();
    const QJsonObject a = settings.value("auto").toObject();
    const QJsonArray list = a.value("candidates").toArray();
    const int chosen = a.value("chosen").toInt(-1);
    if (list.isEmpty() || chosen < 0 || chosen >= list.size())
        return {};
    QStringList scores;
    for (const auto &v : list) {
        const QJsonObject o = v.toObject();
        const QString features = o.value("token_features").toString();
        scores << QObject::tr("%1, %2%3 %4")
                      .arg(o.value("family").toString(), o.value("selection").toString(),
                           features.isEmpty() || features == "none" ? QString()
                                                                    : QObject::tr(" + token features"))
                      .arg(o.value("valid_kl").toDouble(), 0, 'f', 3);
    }
    return QObject::tr(" Chosen by auto: validation KL %1 (%2; no prefix %3).")
        .arg(list[chosen].toObject().value("valid_kl").toDouble(), 0, 'f', 3)
        .arg(scores.join("; "))
        .arg(list[chosen].toObject().value("valid_kl_no_prefix").toDouble(), 0, 'f', 3);
}

// "1.23 M parameters (4.9 MB), fitted in 12.3 s, conversion 0.41 ms per 1k tokens."
QString costText(const core::ConverterRecord &c)
{
    QString t = QObject::tr("%1 M parameters (%2 MB)")
                    .arg(double(c.parameterCount()) / 1e6, 0, 'f', 3)
                    .arg(double(c.bytes()) / 1e6, 0, 'f', 2);
    if (c.fitSeconds > 0)
        t += QObject::tr(", fitted in %1 s").arg(c.fitSeconds, 0, 'f', 1);
    if (c.convertMsPer1k > 0)
        t += QObject::tr(", conversion %1 ms per 1k tokens").arg(c.convertMsPer1k, 0, 'f', 2);
    return t + ".";
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

// Mean of a per-layer metric column; NaN when the table has none.
double meanColumn(const core::MetricTable &t, const std::string &column)
{
    const int c = t.column(column);
    double sum = 0;
    int n = 0;
    for (const auto &row : t.rows)
        if (c >= 0 && std::isfinite(row[size_t(c)])) {
            sum += row[size_t(c)];
            ++n;
        }
    return n > 0 ? sum / n : std::numeric_limits<double>::quiet_NaN();
}

// A converter list entry's details: " · MLP (width 256) · R² K 0.71, V 0.64 · 2026-12-05 18:02".
QString converterDetails(const core::ConverterRecord &c)
{
    QString t = QStringLiteral(" \u00b7 ") + familyText(c);
    if (!c.layers.empty() && c.layers.front().features.any())
        t += QObject::tr(" + token features (%1)")
                 .arg(QString::fromStdString(core::describeTokenFeatures(c.layers.front().features)));
    const double k = meanColumn(c.layerMetrics, "r2_k"), v = meanColumn(c.layerMetrics, "r2_v");
    if (std::isfinite(k) && std::isfinite(v))
        t += QObject::tr(" \u00b7 R\u00b2 K %1, V %2").arg(k, 0, 'f', 2).arg(v, 0, 'f', 2);
    if (c.createdUtc.size() >= 16)
        t +=
            QStringLiteral(" \u00b7 ") + QString::fromStdString(c.createdUtc.substr(0, 16)).replace('T', ' ');
    return t;
}

// The per-layer table with its headline scores right after the layer (no sideways scroll to reach
// them at 1366 px); the fit's details after.
core::MetricTable scoresFirst(const core::MetricTable &t)
{
    std::vector<int> order;
    for (const char *c : {"layer", "attn_cos", "r2_k", "r2_v", "cos_k", "cos_v"})
        if (const int i = t.column(c); i >= 0)
            order.push_back(i);
    for (int i = 0; i < int(t.columns.size()); ++i)
        if (std::find(order.begin(), order.end(), i) == order.end())
            order.push_back(i);
    core::MetricTable out;
    for (int i : order)
        out.columns.push_back(t.columns[size_t(i)]);
    for (const auto &row : t.rows) {
        std::vector<double> r;
        for (int i : order)
            r.push_back(i < int(row.size()) ? row[size_t(i)] : std::numeric_limits<double>::quiet_NaN());
        out.rows.push_back(std::move(r));
    }
    return out;
}

// Two converters' per-layer scores side by side, scores first: layer, then for each of attn_cos,
// r2_k, r2_v, cos_k, cos_v the shown one's, the other's (name + "′") and the difference
// ("Δ" + name: shown minus other), matched by layer; a layer the other lacks gets NaN.
core::MetricTable sideBySide(const core::MetricTable &shown, const core::MetricTable &other)
{
    core::MetricTable out;
    out.columns.push_back("layer");
    std::vector<std::pair<int, int>> metrics; // column in shown, in other
    for (const char *m : {"attn_cos", "r2_k", "r2_v", "cos_k", "cos_v"})
        if (const int a = shown.column(m), b = other.column(m); a >= 0 && b >= 0) {
            metrics.push_back({a, b});
            out.columns.push_back(m);
            out.columns.push_back(std::string(m) + "\u2032");
            out.columns.push_back("\u0394" + std::string(m));
        }
    const int la = shown.column("layer"), lb = other.column("layer");
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (size_t r = 0; r < shown.rows.size(); ++r) {
        const auto &row = shown.rows[r];
        const double layer = la >= 0 ? row[size_t(la)] : double(r);
        const std::vector<double> *match = nullptr;
        for (size_t q = 0; q < other.rows.size(); ++q)
            if ((lb >= 0 ? other.rows[q][size_t(lb)] : double(q)) == layer)
                match = &other.rows[q];
        std::vector<double> line{layer};
        for (const auto &[a, b] : metrics) {
            const double x = row[size_t(a)], y = match ? (*match)[size_t(b)] : nan;
            line.insert(line.end(), {x, y, x - y});
        }
        out.rows.push_back(std::move(line));
    }
    return out;
}

const QString kInUseSuffix = QStringLiteral(" (in use)");
constexpr int NameRole = Qt::UserRole;        // the stored converter name of a combo item
constexpr int DetailsRole = Qt::UserRole + 1; // its family, mean R² and fit date

QString errorHtml(const QString &message)
{
    return QString("<span style='color:#b00020'>%1</span>").arg(message.toHtmlEscaped());
}

} // namespace

AlignmentPanel::AlignmentPanel(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QVBoxLayout(this);
    buildFitGroup(layout);

    auto *top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Converter:"), this));
    m_converters = new QComboBox(this);
    m_converters->setObjectName("converterCombo");
    m_converters->setToolTip(
        tr("The converters stored in the experiment file; pick one to see how well it fits."));
    top->addWidget(m_converters, 3);
    top->addWidget(new QLabel(tr("beside it:"), this));
    m_beside = new QComboBox(this);
    m_beside->setObjectName("besideConverterCombo");
    m_beside->setToolTip(
        tr("A second converter side by side: its per-layer scores drawn dotted over the chart "
           "and put beside the shown one's in the table, with the differences. For the "
           "same prompts run through both, use Versus in the Compare step."));
    m_beside->addItem(tr("(none)"));
    top->addWidget(m_beside, 1);
    m_useButton = new QPushButton(tr("Use this converter"), this);
    m_useButton->setObjectName("useConverterButton");
    m_useButton->setToolTip(
        tr("Make the converter shown the one the Compare panel and the Replay panel's cross tier use."));
    top->addWidget(m_useButton);
    m_inUseLabel = new QLabel(this);
    m_inUseLabel->setObjectName("inUseLabel");
    m_inUseLabel->setToolTip(tr("The converter the Compare panel and the cross-model replay tier use."));
    top->addWidget(m_inUseLabel);
    layout->addLayout(top);
    m_summary =
        new QLabel(tr("Open an experiment file (File > Open Experiment) to see its converters, or capture "
                      "one in the Capture panel and fit a converter above."),
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
    // a new sweep: the fit group's layer selection and per-head choice, over these lists
    auto *sweepRun = new QHBoxLayout;
    const auto listEdit = [&](const char *label, const char *name, const QString &text, const QString &tip) {
        sweepRun->addWidget(new QLabel(tr(label), sweeps));
        auto *edit = new QLineEdit(text, sweeps);
        edit->setObjectName(name);
        edit->setToolTip(tip);
        sweepRun->addWidget(edit, 1);
        return edit;
    };
    m_sweepKs = listEdit("k:", "sweepKsEdit", "1,2,4", tr("Source layers per B layer, comma-separated."));
    m_sweepLambdas =
        listEdit("\u03bb:", "sweepLambdasEdit", "0.001,0.01,0.1", tr("Ridge lambdas, comma-separated."));
    m_sweepTokens =
        listEdit("Tokens:", "sweepTokensEdit", "all",
                 tr("Calibration token counts, comma-separated; 'all' for every training prompt."));
    m_sweepName =
        listEdit("Name:", "sweepNameEdit", "sweep", tr("Stored as /sweeps/<name> of the experiment."));
    m_sweepRun = new QPushButton(tr("Run sweep"), sweeps);
    m_sweepRun->setObjectName("runSweepButton");
    m_sweepRun->setToolTip(
        tr("Fit a converter for every k x \u03bb x token count on one split (the fit group's "
           "layer selection and per-head choice) and store their held-out scores, as "
           "`kvwb sweep` does; Cancel above stops it."));
    sweepRun->addWidget(m_sweepRun);
    sweepLayout->addLayout(sweepRun);
    m_sweepChart = new SweepChart(sweeps);
    sweepLayout->addWidget(m_sweepChart, 1);
    tabs->addTab(sweeps, tr("Sweeps"));
    layout->addWidget(tabs, 1);

    connect(m_sweepRun, &QPushButton::clicked, this, &AlignmentPanel::runSweep);
    for (QLineEdit *e : {m_sweepKs, m_sweepLambdas, m_sweepTokens, m_sweepName})
        connect(e, &QLineEdit::textChanged, this, &AlignmentPanel::sweepInputChanged);
    connect(m_converters, &QComboBox::currentIndexChanged, this, &AlignmentPanel::showConverter);
    connect(m_beside, &QComboBox::currentIndexChanged, this,
            [this] { showConverter(m_converters->currentIndex()); });
    connect(m_useButton, &QPushButton::clicked, this, [this] {
        const QString name = converterName(m_converters->currentIndex());
        if (name.isEmpty())
            return;
        setInUse(name);
        Q_EMIT inUseChanged(name);
    });
    setInUse({});
    m_useButton->setEnabled(false);
    refreshFitEnabled();
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
    bool inUseKept = false;
    if (m_snapshot) {
        for (const auto &c : m_snapshot->converters) {
            const QString name = QString::fromStdString(c.name);
            m_converters->addItem(name + converterDetails(c), name);
            m_converters->setItemData(m_converters->count() - 1, converterDetails(c).mid(3), DetailsRole);
            inUseKept = inUseKept || name == m_inUse;
        }
        for (const auto &[name, table] : m_snapshot->sweeps)
            m_sweeps->addItem(QString::fromStdString(name));
    }
    // Keep the converter in use while the new file still has it; never pick one here (the app does).
    setInUse(inUseKept ? m_inUse : QString());
    refreshFitEnabled();
    showConverter(m_converters->count() > 0 ? 0 : -1); // refreshes the "beside it" list too
    // the sweep just run, else the first
    const int last = m_lastSweep.isEmpty() ? -1 : m_sweeps->findText(m_lastSweep);
    if (last >= 0)
        m_sweeps->setCurrentIndex(last); // signals blocked above
    showSweep(last >= 0 ? last : m_sweeps->count() > 0 ? 0 : -1);
}

int AlignmentPanel::currentConverter() const
{
    return m_converters->currentIndex();
}

void AlignmentPanel::showConverter(int index)
{
    if (!m_snapshot || index < 0 || index >= int(m_snapshot->converters.size())) {
        refreshBeside();
        m_layerModel->setTable({});
        m_layerChart->setReference({}, {});
        m_layerChart->setTable({});
        if (m_snapshot)
            m_summary->setText(
                tr("%1: no converters yet. Fit one above (or run `kvwb align --experiment %1`).")
                    .arg(m_snapshot->path));
        m_useButton->setEnabled(false);
        return;
    }
    m_useButton->setEnabled(true);
    {
        const QSignalBlocker block(m_converters); // this is the slot of currentIndexChanged
        m_converters->setCurrentIndex(index);
    }
    const auto &c = m_snapshot->converters[size_t(index)];
    const int layersA = m_snapshot->a.config.numLayers, layersB = m_snapshot->b.config.numLayers;
    const int heads = m_snapshot->b.config.numKvHeads;
    m_summary->setText(
        tr("<b>%1</b>: %11 maps, source layers %2 (k = %3), lambda %4, %5 maps, keys %6; fitted on %7 "
           "prompts (%8 tokens), scored on %9 held-out prompts. Created %10. %12")
            .arg(QString::fromStdString(c.name), QString::fromStdString(c.selection))
            .arg(c.k)
            .arg(QString::fromStdString(c.lambdaMode),
                 c.layers.empty() || !c.layers[0].headMatched ? tr("full cross-head") : tr("head-matched"),
                 QString::fromUtf8(core::keyFormName(c.keyForm)))
            .arg(c.trainPrompts.size())
            .arg(c.trainTokens)
            .arg(c.testPrompts.size())
            .arg(QString::fromStdString(c.createdUtc))
            .arg(familyText(c), costText(c) + autoText(c)));
    refreshBeside(); // the shown converter is never beside itself
    const core::ConverterRecord *other = nullptr;
    for (const auto &o : m_snapshot->converters)
        if (m_beside->currentIndex() > 0 && QString::fromStdString(o.name) == m_beside->currentText())
            other = &o;
    m_layerModel->setTable(other ? sideBySide(c.layerMetrics, other->layerMetrics)
                                 : scoresFirst(c.layerMetrics));
    m_layerView->resizeColumnsToContents();
    m_layerChart->setReference(other ? other->layerMetrics : core::MetricTable{},
                               other ? QString::fromStdString(other->name) : QString());
    m_layerChart->setTable(c.layerMetrics);
    if (other)
        m_summary->setText(m_summary->text() +
                           tr("<br>Beside it, <b>%1</b>: %2 (dotted in the chart; the table's columns of it "
                              "end in \u2032, its differences start with \u0394).")
                               .arg(QString::fromStdString(other->name), familyText(*other)));
    m_layerChart->setTitle(
        tr("Converter %1: fit per layer of model B (held-out prompts)").arg(QString::fromStdString(c.name)));
    // Per head: the shown converter's scores, or with a converter beside it the difference (shown
    // minus the other) on a colour scale symmetric about 0.
    const auto perHead = [&](HeatmapWidget *h, const std::string &metric, const QString &what) {
        core::Matrix m = headMatrix(c.headMetrics, metric, layersB, heads);
        if (!other) {
            h->setValueRange(std::nullopt);
            h->setMatrix(m, labels("B", layersB), labels("head ", heads),
                         tr("%1 per B layer and kv head").arg(what));
            return;
        }
        const core::Matrix o = headMatrix(other->headMetrics, metric, layersB, heads);
        double most = 1e-6;
        for (size_t i = 0; i < m.data.size(); ++i) {
            m.data[i] -= i < o.data.size() ? o.data[i] : std::numeric_limits<double>::quiet_NaN();
            if (std::isfinite(m.data[i]))
                most = std::max(most, std::abs(m.data[i]));
        }
        h->setValueRange(std::make_pair(-most, most));
        h->setMatrix(m, labels("B", layersB), labels("head ", heads),
                     tr("%1: %2 minus %3 per B layer and kv head")
                         .arg(what, QString::fromStdString(c.name), QString::fromStdString(other->name)));
    };
    perHead(m_headR2, "r2_k", tr("R\u00b2 of keys"));
    perHead(m_headAttn, "attn_cos", tr("Attention-output cosine"));
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

void AlignmentPanel::buildFitGroup(QLayout *parent)
{
    auto *box = new QGroupBox(tr("Fit a converter"), this);
    box->setObjectName("fitGroup");
    auto *grid = new QGridLayout(box);
    grid->addWidget(new QLabel(tr("Name:"), box), 0, 0);
    m_fitName = new QLineEdit(QStringLiteral("default"), box);
    m_fitName->setObjectName("fitNameEdit");
    m_fitName->setMinimumWidth(160);
    m_fitName->setToolTip(tr("The name the converter is stored under in the experiment file; a name in use "
                             "asks first (replace it, or store under a new name)."));
    grid->addWidget(m_fitName, 0, 1);
    grid->addWidget(new QLabel(tr("Source layers:"), box), 0, 2);
    m_selection = new QComboBox(box);
    m_selection->setObjectName("selectionCombo");
    m_selection->addItem(tr("proportional"), "proportional");
    m_selection->setItemData(0, tr("For each B layer, the k A layers nearest the same relative depth."),
                             Qt::ToolTipRole);
    m_selection->addItem(tr("top k"), "topk");
    m_selection->setItemData(1, tr("For each B layer, the k A layers with the best validation R\u00b2."),
                             Qt::ToolTipRole);
    m_selection->addItem(tr("all"), "all");
    m_selection->setItemData(2, tr("Every A layer feeds every B layer (the largest maps)."), Qt::ToolTipRole);
    m_selection->setToolTip(
        tr("Which of model A's layers each of model B's layers is mapped from: depth-proportional k "
           "nearest, top k by validation R\u00b2, or every A layer."));
    grid->addWidget(m_selection, 0, 3);
    grid->addWidget(new QLabel(tr("k:"), box), 0, 4);
    m_k = new QSpinBox(box);
    m_k->setObjectName("kSpin");
    m_k->setRange(1, 64);
    m_k->setToolTip(tr("How many A layers feed each B layer (unused with 'all')."));
    grid->addWidget(m_k, 0, 5);
    grid->addWidget(new QLabel(tr("\u03bb:"), box), 0, 6);
    m_lambda = new QLineEdit(QStringLiteral("0.01"), box);
    m_lambda->setObjectName("lambdaEdit");
    auto *validator = new QDoubleValidator(0.0, 1e12, 12, m_lambda);
    validator->setNotation(QDoubleValidator::ScientificNotation);
    validator->setLocale(QLocale::c());
    m_lambda->setValidator(validator);
    m_lambda->setMaximumWidth(90);
    m_lambda->setToolTip(tr(
        "Ridge regularisation strength of the least-squares maps, e.g. 0.01 or 1e-3; larger is smoother."));
    grid->addWidget(m_lambda, 0, 7);
    m_autoLambda = new QCheckBox(tr("auto \u03bb"), box);
    m_autoLambda->setObjectName("autoLambdaCheck");
    m_autoLambda->setToolTip(tr("Choose \u03bb per layer by validation error instead of the fixed value."));
    grid->addWidget(m_autoLambda, 0, 8);
    m_perHead = new QCheckBox(tr("per head"), box);
    m_perHead->setObjectName("perHeadCheck");
    m_perHead->setToolTip(tr(
        "Fit one small map per kv head (when the head counts match) instead of one map across all heads."));
    grid->addWidget(m_perHead, 0, 9);
    grid->addWidget(new QLabel(tr("Max calibration tokens:"), box), 0, 10);
    m_maxTokens = new QSpinBox(box);
    m_maxTokens->setObjectName("maxTrainTokensSpin");
    m_maxTokens->setRange(0, std::numeric_limits<int>::max());
    m_maxTokens->setSpecialValueText(tr("all"));
    m_maxTokens->setToolTip(tr("Fit on at most this many tokens of the training prompts; 0 uses them all."));
    grid->addWidget(m_maxTokens, 0, 11);
    grid->setColumnStretch(12, 1);

    // The family and its own settings in a row of their own, so their labels do not widen the
    // columns of the row above.
    auto *familyRow = new QHBoxLayout;
    familyRow->addWidget(new QLabel(tr("Family:"), box));
    m_family = new QComboBox(box);
    m_family->setObjectName("familyCombo");
    m_family->addItem(tr("auto"), "auto");
    m_family->setItemData(0,
                          tr("Fit ridge, then the MLP from it, and keep the one whose converted cache brings "
                             "B's next-token distributions closest to B's own on the validation prompts "
                             "(needs model B loaded)."),
                          Qt::ToolTipRole);
    m_family->addItem(tr("ridge"), "ridge");
    m_family->setItemData(1, tr("One least-squares linear map per B layer and kind: y = xW + b."),
                          Qt::ToolTipRole);
    m_family->addItem(tr("attention ridge"), "attn_ridge");
    m_family->setItemData(2,
                          tr("Ridge maps fitted under what B does with them: keys weighted by B's own "
                             "queries, values by its output projection (needs model B loaded); stored as "
                             "ridge."),
                          Qt::ToolTipRole);
    m_family->addItem(tr("low-rank"), "low_rank");
    m_family->setItemData(3,
                          tr("Reduced-rank ridge: W factored as D U of the chosen rank, for small mappers."),
                          Qt::ToolTipRole);
    m_family->addItem(tr("MLP"), "mlp");
    m_family->setItemData(
        4, tr("The ridge map plus a trained GELU branch, early-stopped on the validation prompts."),
        Qt::ToolTipRole);
    m_family->setToolTip(
        tr("The form of every map: auto, ridge, attention ridge, low-rank or MLP (docs/transfer.md)."));
    familyRow->addWidget(m_family);
    familyRow->addWidget(new QLabel(tr("Rank:"), box));
    m_rank = new QSpinBox(box);
    m_rank->setObjectName("rankSpin");
    m_rank->setRange(1, 1 << 20);
    m_rank->setValue(16);
    m_rank->setToolTip(
        tr("Low-rank: the rank of each map (at most the smaller of its input and output widths)."));
    familyRow->addWidget(m_rank);
    familyRow->addWidget(new QLabel(tr("MLP width:"), box));
    m_mlpHidden = new QSpinBox(box);
    m_mlpHidden->setObjectName("mlpHiddenSpin");
    m_mlpHidden->setRange(1, 1 << 16);
    m_mlpHidden->setValue(256);
    m_mlpHidden->setToolTip(tr("MLP: the width of the trained branch."));
    familyRow->addWidget(m_mlpHidden);
    familyRow->addWidget(new QLabel(tr("Max epochs:"), box));
    m_mlpEpochs = new QSpinBox(box);
    m_mlpEpochs->setObjectName("mlpEpochsSpin");
    m_mlpEpochs->setRange(0, 10000);
    m_mlpEpochs->setValue(30);
    m_mlpEpochs->setToolTip(tr("MLP: at most this many passes over the calibration rows; training stops "
                               "earlier when the validation loss stops improving."));
    familyRow->addWidget(m_mlpEpochs);
    familyRow->addWidget(new QLabel(tr("Budget:"), box));
    m_budget = new QDoubleSpinBox(box);
    m_budget->setObjectName("fitBudgetSpin");
    m_budget->setRange(0, 1e7);
    m_budget->setDecimals(0);
    m_budget->setSingleStep(60);
    m_budget->setSuffix(tr(" s"));
    m_budget->setSpecialValueText(tr("no limit"));
    m_budget->setToolTip(tr("MLP, auto and the KL objective: no training epoch (KL: step) starts after this "
                            "many seconds from the fit's start; the best epoch run is kept and layers not "
                            "reached stay ridge (kvwb align --budget)."));
    familyRow->addWidget(m_budget);
    familyRow->addWidget(new QLabel(tr("Choose on:"), box));
    m_autoPrompts = new QSpinBox(box);
    m_autoPrompts->setObjectName("autoPromptsSpin");
    m_autoPrompts->setRange(1, 100000);
    m_autoPrompts->setValue(core::FitSettings{}.autoPrompts);
    m_autoPrompts->setSuffix(tr(" prompts"));
    m_autoPrompts->setToolTip(tr("Auto and the KL objective: at most this many validation prompts on which "
                                 "B's next-token KL chooses the family and the epoch (kvwb align "
                                 "--auto-prompts)."));
    familyRow->addWidget(m_autoPrompts);
    familyRow->addStretch(1);
    grid->addLayout(familyRow, 1, 0, 1, 13);

    // B's token features on the buttons' row: the family's row is full at 1366 px
    auto *featuresLabel = new QLabel(tr("Token features:"), box);
    m_tokenFeatures = new QComboBox(box);
    m_tokenFeatures->setObjectName("tokenFeaturesCombo");
    for (const char *spec : {"none", "b,window=1,offsets=4", "b,offsets=4", "b"})
        m_tokenFeatures->addItem(QString::fromLatin1(spec), QString::fromLatin1(spec));
    m_tokenFeatures->setItemData(
        1,
        tr("B's own layer-0 K and V at each position, the previous A token's rows and the B token's offset "
           "inside A's token"),
        Qt::ToolTipRole);
    m_tokenFeatures->setToolTip(
        tr("Inputs beside A's rows at the paired token, for a target tokenizer finer than the source's: "
           "b = B's own layer-0 K and V (computed from each token alone), window = the A tokens before, "
           "offsets = where the B token sits inside A's (kvwb align --token-features)."));
    auto *objectiveLabel = new QLabel(tr("Objective:"), box);
    m_objective = new QComboBox(box);
    m_objective->setObjectName("objectiveCombo");
    m_objective->addItem(tr("KV"), "kv");
    m_objective->setItemData(0, tr("Each family's own fit: the regression of B's K/V rows."),
                             Qt::ToolTipRole);
    m_objective->addItem(tr("KL through B"), "kl");
    m_objective->setItemData(1,
                             tr("After the KV fit, train the maps through frozen model B on the KL between "
                                "its next-token distributions from the converted cache and from its own "
                                "prefill; the epoch with the lowest validation KL is kept (needs model B "
                                "loaded, dequantised if it is a quantised GGUF file)."),
                             Qt::ToolTipRole);
    m_objective->setToolTip(tr("What the fit minimises: B's K/V rows, or then B's next-token KL (kvwb align "
                               "--objective kv|kl)."));
    auto *buttons = new QHBoxLayout;
    buttons->addWidget(featuresLabel);
    buttons->addWidget(m_tokenFeatures);
    buttons->addWidget(objectiveLabel);
    buttons->addWidget(m_objective);
    m_fit = new QPushButton(tr("Fit"), box);
    m_fit->setObjectName("fitButton");
    m_fit->setToolTip(
        tr("Fit the converter from the prompts of the experiment file shown and store it there."));
    m_cancel = new QPushButton(tr("Cancel"), box);
    m_cancel->setObjectName("cancelFitButton");
    m_cancel->setToolTip(tr("Stop the fit; nothing is stored."));
    m_progress = new QProgressBar(box);
    m_progress->setObjectName("fitProgress");
    m_progress->setRange(0, 1000);
    m_progress->setTextVisible(false);
    m_progress->setToolTip(tr("Progress of the fit."));
    initJobProgress(m_progress);
    buttons->addWidget(m_fit);
    buttons->addWidget(m_cancel);
    buttons->addWidget(m_progress, 1);
    grid->addLayout(buttons, 2, 0, 1, 13);
    m_fitStatus = new QLabel(box);
    m_fitStatus->setObjectName("fitStatus");
    m_fitStatus->setWordWrap(true);
    m_fitStatus->setTextFormat(Qt::RichText);
    grid->addWidget(m_fitStatus, 3, 0, 1, 13);
    parent->addWidget(box);

    connectFitGroup();
}

// The fit controls' signals: what is enabled follows the choices; Fit (with its checks) and Cancel.
void AlignmentPanel::connectFitGroup()
{
    connect(m_autoLambda, &QCheckBox::toggled, this, [this] { refreshFitEnabled(); });
    connect(m_selection, &QComboBox::currentIndexChanged, this, [this] { refreshFitEnabled(); });
    connect(m_family, &QComboBox::currentIndexChanged, this, [this] { refreshFitEnabled(); });
    connect(m_objective, &QComboBox::currentIndexChanged, this, [this] { refreshFitEnabled(); });
    connect(m_fitName, &QLineEdit::textChanged, this, &AlignmentPanel::fitInputChanged);
    connect(m_lambda, &QLineEdit::textChanged, this, &AlignmentPanel::fitInputChanged);
    connect(m_autoLambda, &QCheckBox::toggled, this, &AlignmentPanel::fitInputChanged);
    connect(m_fit, &QPushButton::clicked, this, [this] {
        const core::FitSettings r = fitRequest();
        if (const QString refusal = fitRefusal(); !refusal.isEmpty()) {
            m_fitStatus->setText(errorHtml(refusal));
            m_fitRefusalShown = true;
            return;
        }
        m_fitRefusalShown = false;
        if (existingConverter(r.name))
            askToReplace(r); // replace it, or fit under a new name
        else
            startFit(r);
    });
    connect(m_cancel, &QPushButton::clicked, this, [this] {
        m_fitStatus->setText(tr("Cancelling the fit..."));
        Q_EMIT cancelRequested();
    });
}

ConverterSweepRequest AlignmentPanel::sweepRequest(QStringList *problems) const
{
    ConverterSweepRequest r;
    r.experimentPath = m_snapshot ? m_snapshot->path : QString();
    const core::FitSettings fit = fitRequest();
    r.selection = fit.selection;
    r.perHead = fit.perHead;
    r.name = m_sweepName->text().trimmed();
    QStringList bad;
    r.ks.clear();
    r.lambdas.clear();
    r.tokens.clear();
    for (const QString &part : m_sweepKs->text().split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const int k = part.trimmed().toInt(&ok);
        if (!ok || k < 1)
            bad << tr("k '%1' is not a whole number >= 1").arg(part.trimmed());
        else
            r.ks.push_back(k);
    }
    for (const QString &part : m_sweepLambdas->text().split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const double l = QLocale::c().toDouble(part.trimmed(), &ok);
        if (!ok || !(l > 0))
            bad << tr("\u03bb '%1' is not a positive number").arg(part.trimmed());
        else
            r.lambdas.push_back(l);
    }
    for (const QString &part : m_sweepTokens->text().split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const qlonglong t = part.trimmed() == "all" ? 0 : part.trimmed().toLongLong(&ok);
        if (part.trimmed() != "all" && (!ok || t < 2))
            bad << tr("token count '%1' is not 'all' or a number >= 2").arg(part.trimmed());
        else
            r.tokens.push_back(t);
    }
    static const QRegularExpression validName("^[A-Za-z0-9_-][A-Za-z0-9_.-]*$");
    if (r.ks.empty() || r.lambdas.empty() || r.tokens.empty())
        bad << tr("k, \u03bb and tokens each need at least one value");
    if (!validName.match(r.name).hasMatch())
        bad << tr("name '%1' cannot be stored: use letters, digits, '_', '-' and '.'").arg(r.name);
    if (m_snapshot)
        for (const auto &[name, table] : m_snapshot->sweeps)
            if (QString::fromStdString(name) == r.name) // a stored sweep is never replaced silently
                bad << tr("the experiment already holds a sweep '%1': choose another name").arg(r.name);
    if (problems)
        *problems = bad;
    return r;
}

void AlignmentPanel::sweepInputChanged()
{
    if (!m_sweepRefusalShown || m_busy)
        return;
    QStringList bad;
    sweepRequest(&bad);
    if (!bad.isEmpty()) {
        m_fitStatus->setText(errorHtml(tr("Cannot sweep: %1.").arg(bad.join("; "))));
        return;
    }
    m_sweepRefusalShown = false;
    m_fitStatus->setText(tr("Ready to sweep."));
}

void AlignmentPanel::runSweep()
{
    QStringList bad;
    const ConverterSweepRequest r = sweepRequest(&bad);
    m_sweepRefusalShown = !bad.isEmpty();
    if (!bad.isEmpty()) {
        m_fitStatus->setText(errorHtml(tr("Cannot sweep: %1.").arg(bad.join("; "))));
        return;
    }
    setBusy(true);
    m_fitStatus->setText(tr("Sweeping '%1': %2 converters...")
                             .arg(r.name.toHtmlEscaped())
                             .arg(r.ks.size() * r.lambdas.size() * r.tokens.size()));
    Q_EMIT sweepRequested(r);
}

void AlignmentPanel::showSweepResult(const ConverterSweepSummary &s)
{
    setBusy(false);
    if (!s.cancelled)
        m_lastSweep = s.name; // shown once the file is read again
    m_progress->setValue(s.cancelled ? m_progress->value() : 1000);
    QString text = s.cancelled
                       ? tr("Sweep '%1' cancelled: nothing stored.").arg(s.name.toHtmlEscaped())
                       : tr("Sweep '%1' stored: %2 converters scored on the test prompts (Sweeps tab).")
                             .arg(s.name.toHtmlEscaped())
                             .arg(s.rows);
    for (const QString &w : s.warnings)
        text += "<br>" + tr("warning: %1").arg(w.toHtmlEscaped());
    m_fitStatus->setText(text);
}

const core::ConverterRecord *AlignmentPanel::existingConverter(const std::string &name) const
{
    if (m_snapshot)
        for (const auto &c : m_snapshot->converters)
            if (c.name == name)
                return &c;
    return nullptr;
}

void AlignmentPanel::startFit(const core::FitSettings &r)
{
    setBusy(true);
    m_fitStatus->setText(tr("Fitting '%1' from %2...")
                             .arg(QString::fromStdString(r.name).toHtmlEscaped(),
                                  QString::fromStdString(r.experiment).toHtmlEscaped()));
    Q_EMIT fitRequested(r);
}

void AlignmentPanel::askToReplace(core::FitSettings r)
{
    const core::ConverterRecord &old = *existingConverter(r.name);
    QString fresh; // the first free "<name>-2", "<name>-3", ...
    for (int i = 2; fresh.isEmpty() || existingConverter(fresh.toStdString()); ++i)
        fresh = QString::fromStdString(r.name) + QString("-%1").arg(i);
    auto *box = new QMessageBox(
        QMessageBox::Question, tr("Converter exists"),
        tr("The experiment already holds a converter '%1'%2. Replace it with this fit, or store the fit as "
           "'%3'?")
            .arg(QString::fromStdString(r.name),
                 converterDetails(old).replace(QStringLiteral(" \u00b7 "), ", "), fresh),
        QMessageBox::Cancel, this);
    box->setObjectName("replaceConverterBox");
    box->setAttribute(Qt::WA_DeleteOnClose);
    QPushButton *replace =
        box->addButton(tr("Replace '%1'").arg(QString::fromStdString(r.name)), QMessageBox::DestructiveRole);
    replace->setObjectName("replaceConverterButton");
    QPushButton *rename = box->addButton(tr("Store as '%1'").arg(fresh), QMessageBox::AcceptRole);
    rename->setObjectName("newConverterNameButton");
    box->setDefaultButton(rename);
    connect(box, &QMessageBox::buttonClicked, this,
            [this, r, replace, rename, fresh](QAbstractButton *b) mutable {
                if (b == replace) {
                    r.replace = true;
                } else if (b == rename) {
                    r.name = fresh.toStdString();
                    m_fitName->setText(fresh);
                } else {
                    return;
                }
                startFit(r);
            });
    box->open();
}

core::FitSettings AlignmentPanel::fitRequest() const
{
    core::FitSettings r = m_settings;
    r.experiment = m_snapshot ? m_snapshot->path.toStdString() : std::string();
    r.name = m_fitName->text().trimmed().toStdString();
    r.selection = core::parseLayerSelection(m_selection->currentData().toString().toStdString())
                      .value_or(core::LayerSelection::Proportional);
    r.k = m_k->value();
    r.autoLambda = m_autoLambda->isChecked();
    bool ok = false;
    const double lambda = QLocale::c().toDouble(m_lambda->text().trimmed(), &ok);
    r.lambda = ok ? lambda : core::FitSettings{}.lambda;
    r.perHead = m_perHead->isChecked();
    r.family = core::parseConverterFamily(m_family->currentData().toString().toStdString())
                   .value_or(core::FitSettings{}.family);
    r.rank = m_rank->value();
    r.mlpHidden = m_mlpHidden->value();
    r.mlpEpochs = m_mlpEpochs->value();
    r.maxTrainTokens = m_maxTokens->value();
    r.budgetSeconds = m_budget->value(); // kept with the project; a family that trains no MLP ignores them
    r.autoPrompts = m_autoPrompts->value();
    r.tokenFeatures = core::parseTokenFeatures(m_tokenFeatures->currentData().toString().toStdString())
                          .value_or(core::TokenFeatures{});
    r.objective = core::parseFitObjective(m_objective->currentData().toString().toStdString())
                      .value_or(core::FitObjective::Kv);
    return r;
}

void AlignmentPanel::setFitRequest(const core::FitSettings &r)
{
    m_settings = r;
    m_fitName->setText(QString::fromStdString(r.name));
    const int sel = m_selection->findData(QString::fromUtf8(core::layerSelectionName(r.selection)));
    m_selection->setCurrentIndex(sel >= 0 ? sel : 0);
    m_k->setValue(r.k);
    m_autoLambda->setChecked(r.autoLambda);
    m_lambda->setText(QLocale::c().toString(r.lambda, 'g', 12));
    m_perHead->setChecked(r.perHead);
    const int family = m_family->findData(QString::fromUtf8(core::converterFamilyName(r.family)));
    m_family->setCurrentIndex(family >= 0 ? family : 0);
    m_rank->setValue(r.rank);
    m_mlpHidden->setValue(r.mlpHidden);
    m_mlpEpochs->setValue(r.mlpEpochs);
    m_budget->setValue(r.budgetSeconds);
    m_autoPrompts->setValue(r.autoPrompts);
    const QString features = QString::fromStdString(core::tokenFeaturesText(r.tokenFeatures));
    if (m_tokenFeatures->findData(features) < 0) // a project's own list
        m_tokenFeatures->addItem(features, features);
    m_tokenFeatures->setCurrentIndex(m_tokenFeatures->findData(features));
    m_objective->setCurrentIndex(
        std::max(0, m_objective->findData(QString::fromUtf8(core::fitObjectiveName(r.objective)))));
    m_maxTokens->setValue(int(std::min<int64_t>(r.maxTrainTokens, std::numeric_limits<int>::max())));
}

void AlignmentPanel::setInUse(const QString &name)
{
    m_inUse = name;
    refreshInUseMarks();
    m_inUseLabel->setText(name.isEmpty() ? tr("In use: <i>none</i>")
                                         : tr("In use: <b>%1</b>").arg(name.toHtmlEscaped()));
}

QString AlignmentPanel::inUse() const
{
    return m_inUse;
}

QString AlignmentPanel::converterName(int index) const
{
    return index >= 0 && index < m_converters->count() ? m_converters->itemData(index, NameRole).toString()
                                                       : QString();
}

void AlignmentPanel::refreshInUseMarks()
{
    for (int i = 0; i < m_converters->count(); ++i) {
        const QString name = converterName(i);
        const QString details = m_converters->itemData(i, DetailsRole).toString();
        m_converters->setItemText(i,
                                  (!m_inUse.isEmpty() && name == m_inUse ? name + kInUseSuffix : name) +
                                      (details.isEmpty() ? QString() : QStringLiteral(" \u00b7 ") + details));
    }
}

void AlignmentPanel::refreshFitEnabled()
{
    const bool havePrompts = m_snapshot && m_snapshot->prompts > 0;
    m_fit->setEnabled(!m_busy && havePrompts);
    m_sweepRun->setEnabled(!m_busy && havePrompts);
    m_cancel->setEnabled(m_ownJob);
    for (QWidget *w : std::initializer_list<QWidget *>{m_fitName, m_selection, m_autoLambda, m_perHead,
                                                       m_maxTokens, m_family, m_tokenFeatures, m_objective})
        w->setEnabled(!m_busy);
    const QString family = m_family->currentData().toString();
    m_rank->setEnabled(!m_busy && family == "low_rank");
    m_mlpHidden->setEnabled(!m_busy && (family == "mlp" || family == "auto"));
    m_mlpEpochs->setEnabled(!m_busy && (family == "mlp" || family == "auto"));
    const bool kl = m_objective->currentData().toString() == "kl";
    m_budget->setEnabled(!m_busy && (family == "mlp" || family == "auto" || kl));
    m_autoPrompts->setEnabled(!m_busy && (family == "auto" || kl));
    m_k->setEnabled(!m_busy && m_selection->currentData().toString() != "all");
    m_lambda->setEnabled(!m_busy && !m_autoLambda->isChecked());
    if (!m_busy && !havePrompts)
        m_fitStatus->setText(m_snapshot ? tr("Capture prompts first: %1 holds none (Capture panel).")
                                              .arg(m_snapshot->path.toHtmlEscaped())
                                        : tr("Capture prompts first (Capture panel), or open an experiment "
                                             "file that has them."));
    else if (!m_busy && m_fitStatus->text().startsWith(tr("Capture prompts first")))
        m_fitStatus->setText(tr("Ready to fit from %1 prompts of %2.")
                                 .arg(m_snapshot->prompts)
                                 .arg(m_snapshot->path.toHtmlEscaped()));
}

QString AlignmentPanel::fitRefusal() const
{
    const core::FitSettings r = fitRequest();
    const QString name = QString::fromStdString(r.name);
    static const QRegularExpression validName("^[A-Za-z0-9_-][A-Za-z0-9_.-]*$");
    if (!validName.match(name).hasMatch())
        return tr("Name '%1' cannot be stored: use letters, digits, '_', '-' and '.', not starting with '.'.")
            .arg(name);
    bool ok = false;
    const double lambda = QLocale::c().toDouble(m_lambda->text().trimmed(), &ok);
    if (!r.autoLambda && (!ok || !(lambda > 0)))
        return tr("\u03bb must be a positive number such as 0.01 or 1e-3.");
    return {};
}

void AlignmentPanel::fitInputChanged()
{
    if (!m_fitRefusalShown || m_busy)
        return;
    if (const QString refusal = fitRefusal(); !refusal.isEmpty()) {
        m_fitStatus->setText(errorHtml(refusal));
        return;
    }
    m_fitRefusalShown = false;
    m_fitStatus->setText(m_snapshot ? tr("Ready to fit from %1 prompts of %2.")
                                          .arg(m_snapshot->prompts)
                                          .arg(m_snapshot->path.toHtmlEscaped())
                                    : tr("Ready to fit."));
}

void AlignmentPanel::setBusy(bool busy, bool ownJob)
{
    m_busy = busy;
    m_ownJob = busy && ownJob;
    if (m_ownJob)
        m_progress->setValue(0);
    setJobProgressRunning(m_progress, m_ownJob);
    refreshFitEnabled();
}

void AlignmentPanel::setFitProgress(double fraction, const QString &stage)
{
    m_progress->setValue(int(1000 * fraction));
    m_fitStatus->setText(tr("Fitting: %1").arg(stage.toHtmlEscaped()));
}

void AlignmentPanel::setFitFailed(const QString &message)
{
    setBusy(false);
    m_progress->setValue(0);
    m_fitStatus->setText(errorHtml(message));
}

void AlignmentPanel::showFitSummary(const FitSummary &s)
{
    setBusy(false);
    if (s.cancelled) {
        m_fitStatus->setText(tr("Fit of '%1' cancelled; nothing stored.").arg(s.name.toHtmlEscaped()));
        return;
    }
    m_progress->setValue(1000);
    QString text =
        tr("fitted '%1'%6 in %2 s: mean R\u00b2 K %3, V %4, attention cosine %5")
            .arg(s.name.toHtmlEscaped())
            .arg(s.fitMs / 1000.0, 0, 'f', 1)
            .arg(s.meanR2K, 0, 'f', 2)
            .arg(s.meanR2V, 0, 'f', 2)
            .arg(s.meanAttnCos, 0, 'f', 2)
            .arg(s.family.isEmpty()           ? QString()
                 : s.autoCandidates.isEmpty() ? QString(" (%1)").arg(s.family.toHtmlEscaped())
                                              : tr(" (auto chose %1)").arg(s.family.toHtmlEscaped()));
    for (const QString &c : s.autoCandidates)
        text += "<br>" + c.toHtmlEscaped();
    if (!s.klObjective.isEmpty())
        text += "<br>" + s.klObjective.toHtmlEscaped();
    for (const QString &w : s.warnings)
        text += "<br>" + tr("warning: %1").arg(w.toHtmlEscaped());
    m_fitStatus->setText(text);
}

QString AlignmentPanel::fitStatusText() const
{
    return m_fitStatus->text();
}

void AlignmentPanel::refreshBeside()
{
    const QString chosen = m_beside->currentText();
    const QSignalBlocker block(m_beside);
    m_beside->clear();
    m_beside->addItem(tr("(none)"));
    if (m_snapshot)
        for (const auto &c : m_snapshot->converters)
            if (QString::fromStdString(c.name) != converterName(m_converters->currentIndex()))
                m_beside->addItem(QString::fromStdString(c.name));
    m_beside->setCurrentIndex(std::max(0, m_beside->findText(chosen)));
}

} // namespace kvwb::ui
