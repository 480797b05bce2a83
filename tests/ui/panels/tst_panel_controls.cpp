// The Models panel's model choice (a folder or a GGUF file, with what loading it costs), and the run
// controls of the Alignment panel (fit settings, Fit/Cancel, the converter in use) and of the
// Replay panel (tier stack, gate, Start/Pause/Stop, live mode): request round trips, the exact
// requests emitted, refusals with a reason, busy toggling, live rows surviving a switch to a stored
// ledger and back, and screenshots.
#include "core/model/checkpoint.h"
#include "core/model/gguf_model.h"
#include "core/model/random_model.h"
#include "tests/support/screenshot.h"
#include "tests/support/synthetic_ledger.h"
#include "ui/charts/heatmap_widget.h"
#include "ui/charts/layer_metrics_chart.h"
#include "ui/charts/replay_charts.h"
#include "ui/charts/threshold_curve_chart.h"
#include "ui/models/ledger_filter_model.h"
#include "ui/models/ledger_model.h"
#include "ui/models/metric_table_model.h"
#include "ui/panels/alignment_panel.h"
#include "ui/panels/capture_panel.h"
#include "ui/panels/models_panel.h"
#include "ui/panels/replay_panel.h"

#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QMenu>
#include <QMessageBox>
#include <QPushButton>
#include <QRegularExpression>
#include <QScatterSeries>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QValueAxis>
#include <QtTest>

using namespace kvwb;

namespace {

core::ConverterRecord converter(const std::string &name, int layersA, int layersB, int heads)
{
    core::ConverterRecord c;
    c.name = name;
    c.selection = "proportional";
    c.k = 1;
    c.lambdaMode = "fixed";
    c.trainTokens = 4000;
    c.layerMetrics.columns = {"layer", "r2_k", "r2_v", "attn_cos"};
    c.headMetrics.columns = {"layer", "head", "r2_k", "attn_cos"};
    for (int l = 0; l < layersB; ++l) {
        c.layerMetrics.rows.push_back({double(l), 0.6 + 0.02 * l, 0.5 - 0.01 * l, 0.7});
        for (int h = 0; h < heads; ++h)
            c.headMetrics.rows.push_back({double(l), double(h), 0.5 + 0.05 * h, 0.6 + 0.03 * l});
    }
    for (core::Matrix *m : {&c.ckaKeys, &c.ckaValues}) {
        m->rows = layersB;
        m->cols = layersA;
        for (int i = 0; i < layersA * layersB; ++i)
            m->data.push_back(0.2 + 0.6 * double(i % layersA) / layersA);
    }
    return c;
}

std::shared_ptr<ui::ExperimentSnapshot> snapshot(int prompts, const std::vector<std::string> &converters,
                                                 bool withLedger = false)
{
    auto s = std::make_shared<ui::ExperimentSnapshot>();
    s->path = "/tmp/exp.h5";
    s->a.config.numLayers = 6;
    s->b.config.numLayers = 4;
    s->b.config.numKvHeads = 2;
    s->prompts = prompts;
    s->tokensA = s->tokensB = 100 * prompts;
    for (const auto &name : converters)
        s->converters.push_back(converter(name, 6, 4, 2));
    if (withLedger)
        s->ledgers.push_back({"stored", testing::patternedLedger(30)});
    return s;
}

void compareFit(const core::FitSettings &a, const core::FitSettings &b)
{
    // row by row, so that a difference names its flag
    for (const auto &f : core::fitFlags())
        QVERIFY2(f.get(a) == f.get(b), f.name);
    QVERIFY(a == b);
}

void compareReplay(const core::ReplaySettings &a, const core::ReplaySettings &b)
{
    // row by row, so that a difference names its flag
    for (const auto &f : core::replayFlags())
        QVERIFY2(f.get(a) == f.get(b), f.name);
    QVERIFY(a == b);
}

} // namespace

class TestPanelControls : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    // Browse offers a folder and a file; a GGUF path shows its tensor types next to the estimate.
    void modelsPanelTakesGgufFiles()
    {
        QTemporaryDir tmp;
        const std::filesystem::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "hf", core::randomModelPreset("gqa"));
        core::writeGguf(core::Checkpoint::open(dir / "hf"), dir / "m.gguf", core::DType::Q8_0);
        ui::ModelsPanel panel;
        auto *browse = panel.findChild<QPushButton *>("browseA");
        QVERIFY(browse && browse->menu());
        QCOMPARE(browse->menu()->actions().size(), 2);
        QVERIFY(panel.findChild<QAction *>("browseFileA"));
        panel.findChild<QLineEdit *>("pathA")->setText(QString::fromStdString((dir / "m.gguf").string()));
        const QString text = panel.findChild<QLabel *>("estimateA")->text();
        QVERIFY2(text.contains("3 layers") && text.contains("GGUF file") && text.contains("Q8_0"),
                 qPrintable(text));
        // quantised weights are held in their blocks on the CPU unless "dequantise" is checked: the
        // estimate counts them at their stored size, and the choice carries the box
        const auto weights = [&] {
            const QRegularExpression re("weights ([0-9.]+) (KB|MB|GB)");
            const auto m = re.match(panel.findChild<QLabel *>("estimateA")->text());
            return m.hasMatch() ? m.captured(1).toDouble() * (m.captured(2) == "KB"   ? 1e3
                                                              : m.captured(2) == "MB" ? 1e6
                                                                                      : 1e9)
                                : -1.0;
        };
        QVERIFY2(text.contains("quantised weights kept in their blocks"), qPrintable(text));
        const double kept = weights();
        auto *box = panel.findChild<QCheckBox *>("dequantizeA");
        QVERIFY(box && !box->isChecked() && !panel.choice('a').dequantize);
        box->setChecked(true);
        const QString deq = panel.findChild<QLabel *>("estimateA")->text();
        QVERIFY2(deq.contains("dequantised to f32 as it loads"), qPrintable(deq));
        QVERIFY2(kept > 0 && weights() > 3 * kept,
                 qPrintable(QString("%1 kept, %2 dequantised").arg(kept).arg(weights())));
        QVERIFY(panel.choice('a').dequantize);
        panel.setChoice('b', panel.choice('a'));
        QVERIFY(panel.choice('b').dequantize && panel.findChild<QCheckBox *>("dequantizeB")->isChecked());
        // the KV cache's element type: the compute dtype by default; bf16 halves the KV estimate
        // and carries in the choice
        const core::ModelConfig config = core::Checkpoint::open(dir / "m.gguf").config();
        const auto kvText = [&](int bytes) {
            return QString("KV cache %1 MB at %2 tokens")
                .arg(double(config.kvBytesPerToken(bytes)) * config.contextLimit() / 1e6, 0, 'f', 1)
                .arg(config.contextLimit());
        };
        auto *kv = panel.findChild<QComboBox *>("kvDtypeA");
        QVERIFY(kv && panel.choice('a').kvDtype.isEmpty());
        QVERIFY2(panel.findChild<QLabel *>("estimateA")->text().contains(kvText(4)),
                 qPrintable(panel.findChild<QLabel *>("estimateA")->text()));
        kv->setCurrentIndex(kv->findData(QString("bf16")));
        QCOMPARE(panel.choice('a').kvDtype, QString("bf16"));
        QVERIFY2(panel.findChild<QLabel *>("estimateA")->text().contains(kvText(2) + " in bf16"),
                 qPrintable(panel.findChild<QLabel *>("estimateA")->text()));
        panel.setChoice('b', panel.choice('a'));
        QCOMPARE(panel.findChild<QComboBox *>("kvDtypeB")->currentData().toString(), QString("bf16"));
        panel.findChild<QLineEdit *>("pathA")->setText(QString::fromStdString((dir / "hf").string()));
        QVERIFY(!panel.findChild<QLabel *>("estimateA")->text().contains("GGUF"));
    }

    // The context a model serves: "model's own" (0) by default, bounded by the model's
    // max_position_embeddings once its config is read, in the estimate and in the choice.
    void modelsPanelContext()
    {
        QTemporaryDir tmp;
        const std::filesystem::path dir = tmp.path().toStdString();
        const auto spec = core::randomModelPreset("phi3-longrope"); // original 16 of 256 positions
        core::writeRandomHfModel(dir / "phi3", spec);
        ui::ModelsPanel panel;
        auto *context = panel.findChild<QSpinBox *>("contextA");
        QVERIFY(context);
        QCOMPARE(context->value(), 0);
        QCOMPARE(context->text(), QString("model's own"));
        panel.findChild<QLineEdit *>("pathA")->setText(QString::fromStdString((dir / "phi3").string()));
        QCOMPARE(context->maximum(), spec.config.maxPositionEmbeddings);
        const auto estimate = [&] { return panel.findChild<QLabel *>("estimateA")->text(); };
        QVERIFY2(estimate().contains(QString("at %1 tokens").arg(spec.config.contextLimit())),
                 qPrintable(estimate()));
        context->setValue(128);
        QVERIFY2(estimate().contains("at 128 tokens"), qPrintable(estimate()));
        QCOMPARE(panel.choice('a').context, 128);
        QCOMPARE(panel.choice('b').context, 0);
        context->setValue(100000); // past the model's positions: held at them
        QCOMPARE(panel.choice('a').context, spec.config.maxPositionEmbeddings);
        ui::ModelChoice c = panel.choice('a');
        c.context = 64;
        panel.setChoice('b', c);
        QCOMPARE(panel.choice('b').context, 64);
        QCOMPARE(panel.choice('b').path, c.path);
    }

    void fitRequestRoundTrip()
    {
        ui::AlignmentPanel p;
        compareFit(p.fitRequest(), core::FitSettings{});
        p.setSnapshot(snapshot(10, {}));
        core::FitSettings r;
        r.experiment = "/tmp/exp.h5";
        r.name = "topk-3";
        r.selection = core::LayerSelection::TopK;
        r.k = 3;
        r.autoLambda = false;
        r.lambda = 1e-3;
        r.perHead = true;
        r.family = core::ConverterFamily::LowRank;
        r.rank = 24;
        r.mlpHidden = 128;
        r.mlpEpochs = 7;
        r.maxTrainTokens = 20000;
        r.budgetSeconds = 600;
        r.autoPrompts = 12;
        r.tokenFeatures = {2, true, 8}; // a project's own list is added to the choices
        p.setFitRequest(r);
        compareFit(p.fitRequest(), r);
        auto *features = p.findChild<QComboBox *>("tokenFeaturesCombo");
        QVERIFY(features && features->currentText() == QString("b,window=2,offsets=8"));
        features->setCurrentIndex(features->findData("b,window=1,offsets=4"));
        QCOMPARE(p.fitRequest().tokenFeatures, (core::TokenFeatures{1, true, 4}));
        features->setCurrentIndex(0);
        QVERIFY(!p.fitRequest().tokenFeatures.any());
        r.tokenFeatures = {};
        p.setFitRequest(r);
        QCOMPARE(features->currentText(), QString("none"));
        // the objective: the KV fit by default, the KL through B on request, kept with its settings
        auto *objective = p.findChild<QComboBox *>("objectiveCombo");
        QVERIFY(objective && objective->currentData().toString() == QString("kv"));
        r.objective = core::FitObjective::Kl;
        r.klEpochs = 3;
        p.setFitRequest(r);
        QCOMPARE(objective->currentData().toString(), QString("kl"));
        compareFit(p.fitRequest(), r);
        objective->setCurrentIndex(objective->findData("kv"));
        QCOMPARE(p.fitRequest().objective, core::FitObjective::Kv);
        r.objective = core::FitObjective::Kv;
        p.setFitRequest(r);
        // the family's own settings are the only ones enabled
        auto *rank = p.findChild<QSpinBox *>("rankSpin");
        auto *hidden = p.findChild<QSpinBox *>("mlpHiddenSpin");
        QVERIFY(rank->isEnabled() && !hidden->isEnabled());
        auto *family = p.findChild<QComboBox *>("familyCombo");
        auto *budget = p.findChild<QDoubleSpinBox *>("fitBudgetSpin");
        auto *autoPrompts = p.findChild<QSpinBox *>("autoPromptsSpin");
        QVERIFY(budget && autoPrompts && !budget->isEnabled() && !autoPrompts->isEnabled());
        family->setCurrentIndex(family->findData("mlp"));
        QCOMPARE(p.fitRequest().family, core::ConverterFamily::Mlp);
        QVERIFY(!rank->isEnabled() && hidden->isEnabled());
        QVERIFY(budget->isEnabled() && !autoPrompts->isEnabled()); // the budget bounds the MLP's training
        family->setCurrentIndex(family->findData("auto"));         // auto trains the MLP too
        QCOMPARE(p.fitRequest().family, core::ConverterFamily::Auto);
        QVERIFY(!rank->isEnabled() && hidden->isEnabled());
        QVERIFY(budget->isEnabled() && autoPrompts->isEnabled());
        budget->setValue(90);
        autoPrompts->setValue(5);
        QCOMPARE(p.fitRequest().budgetSeconds, 90.0);
        QCOMPARE(p.fitRequest().autoPrompts, 5);
        QCOMPARE(budget->text(), QString("90 s"));
        budget->setValue(0);
        QCOMPARE(budget->text(), QString("no limit"));
        QCOMPARE(family->itemData(0).toString(), QString("auto")); // listed first: the default
        family->setCurrentIndex(family->findData("low_rank"));
        // lambda typed in scientific notation; auto lambda disables the field
        auto *lambda = p.findChild<QLineEdit *>("lambdaEdit");
        lambda->setText("2.5e-2");
        QCOMPARE(p.fitRequest().lambda, 0.025);
        p.findChild<QCheckBox *>("autoLambdaCheck")->setChecked(true);
        QVERIFY(!lambda->isEnabled());
        QVERIFY(p.fitRequest().autoLambda);
    }

    void fitNeedsPromptsAndEmits()
    {
        ui::AlignmentPanel p;
        auto *fit = p.findChild<QPushButton *>("fitButton");
        auto *cancel = p.findChild<QPushButton *>("cancelFitButton");
        QVERIFY(!fit->isEnabled());
        QVERIFY(p.fitStatusText().contains("Capture prompts first"));
        p.setSnapshot(snapshot(0, {}));
        QVERIFY(!fit->isEnabled());
        QVERIFY(p.fitStatusText().contains("Capture prompts first"));
        p.setSnapshot(snapshot(12, {}));
        QVERIFY(fit->isEnabled());
        QVERIFY(!p.fitStatusText().contains("Capture prompts first"));

        QSignalSpy spy(&p, &ui::AlignmentPanel::fitRequested);
        p.findChild<QLineEdit *>("fitNameEdit")->setText(".hidden");
        fit->click();
        QCOMPARE(spy.count(), 0);
        QVERIFY(p.fitStatusText().contains("cannot be stored"));
        p.findChild<QLineEdit *>("fitNameEdit")->setText("default");
        p.findChild<QLineEdit *>("lambdaEdit")->setText("");
        fit->click();
        QCOMPARE(spy.count(), 0);
        QVERIFY(p.fitStatusText().contains("positive number"));
        p.findChild<QLineEdit *>("lambdaEdit")->setText("1e-2");
        fit->click();
        QCOMPARE(spy.count(), 1);
        core::FitSettings want;
        want.experiment = "/tmp/exp.h5";
        compareFit(spy.first().first().value<core::FitSettings>(), want);
        QVERIFY(!fit->isEnabled());
        QVERIFY(cancel->isEnabled());

        QSignalSpy cancelSpy(&p, &ui::AlignmentPanel::cancelRequested);
        cancel->click();
        QCOMPARE(cancelSpy.count(), 1);
        p.setFitProgress(0.4, "layer 2 of 4");
        QVERIFY(p.fitStatusText().contains("layer 2 of 4"));
        ui::FitSummary s;
        s.name = "default";
        s.cancelled = true;
        p.showFitSummary(s);
        QVERIFY(p.fitStatusText().contains("cancelled"));
        QVERIFY(fit->isEnabled());
        QVERIFY(!cancel->isEnabled());

        p.setBusy(true);
        QVERIFY(!fit->isEnabled());
        s.cancelled = false;
        s.fitMs = 2100;
        s.meanR2K = 0.6234;
        s.meanR2V = 0.5;
        s.meanAttnCos = 0.679;
        s.family = "ridge";
        p.showFitSummary(s);
        QVERIFY2(p.fitStatusText().contains(
                     "fitted 'default' (ridge) in 2.1 s: mean R\u00b2 K 0.62, V 0.50, attention cosine 0.68"),
                 qPrintable(p.fitStatusText()));
        // family auto: what it chose, and every candidate's line
        s.family = "mlp";
        s.autoCandidates = {"auto: ridge (proportional, k 1, lambda fixed): validation KL 0.4000",
                            "auto: mlp (all, k 4, lambda auto): validation KL 0.0900"};
        p.showFitSummary(s);
        QVERIFY2(p.fitStatusText().contains("fitted 'default' (auto chose mlp) in 2.1 s"),
                 qPrintable(p.fitStatusText()));
        QVERIFY(p.fitStatusText().contains(
            "auto: ridge (proportional, k 1, lambda fixed): validation KL 0.4000"));
        QVERIFY(p.fitStatusText().contains("auto: mlp (all, k 4, lambda auto): validation KL 0.0900"));
        p.setBusy(true);
        p.setFitFailed("no train prompts");
        QVERIFY(p.fitStatusText().contains("no train prompts"));
        QVERIFY(fit->isEnabled());
    }

    void inUseMarking()
    {
        ui::AlignmentPanel p;
        auto *combo = p.findChild<QComboBox *>("converterCombo");
        // an entry's name part; the rest is the converter's family, mean R² and fit date
        const auto entry = [combo](int i) {
            return combo->itemText(i).section(QString::fromUtf8(" \u00b7 "), 0, 0);
        };
        auto *use = p.findChild<QPushButton *>("useConverterButton");
        auto *label = p.findChild<QLabel *>("inUseLabel");
        QVERIFY(!use->isEnabled());
        p.setSnapshot(snapshot(10, {"default", "topk"}));
        QCOMPARE(p.inUse(), QString()); // never auto-picked
        QVERIFY(label->text().contains("none"));
        QSignalSpy spy(&p, &ui::AlignmentPanel::inUseChanged);
        p.showConverter(1);
        use->click();
        QCOMPARE(spy.count(), 1);
        QCOMPARE(spy.first().first().toString(), QString("topk"));
        QCOMPARE(p.inUse(), QString("topk"));
        QCOMPARE(entry(1), QString("topk (in use)"));
        QCOMPARE(entry(0), QString("default"));
        QCOMPARE(p.converterName(1), QString("topk"));
        QVERIFY2(
            combo->itemText(1).startsWith(QString::fromUtf8("topk (in use) \u00b7 ridge \u00b7 R\u00b2 K ")),
            qPrintable(combo->itemText(1)));
        QVERIFY(label->text().contains("topk"));

        p.setInUse("default"); // from the app: no signal
        QCOMPARE(spy.count(), 1);
        QCOMPARE(entry(0), QString("default (in use)"));
        QCOMPARE(entry(1), QString("topk"));

        // a new snapshot keeps the name while it exists, else none
        p.setSnapshot(snapshot(10, {"other", "default"}));
        QCOMPARE(p.inUse(), QString("default"));
        QCOMPARE(entry(1), QString("default (in use)"));
        p.setSnapshot(snapshot(10, {"other"}));
        QCOMPARE(p.inUse(), QString());
        QCOMPARE(entry(0), QString("other"));
        QCOMPARE(spy.count(), 1);
    }

    // Fitting under a name the experiment holds asks first: store the fit under the next free name,
    // or replace that converter (the request then says so); cancelling fits nothing.
    void fitOverAnExistingNameAsks()
    {
        ui::AlignmentPanel p;
        p.show();
        p.setSnapshot(snapshot(10, {"default", "default-2"}));
        QSignalSpy fits(&p, &ui::AlignmentPanel::fitRequested);
        auto *name = p.findChild<QLineEdit *>("fitNameEdit");
        auto *fit = p.findChild<QPushButton *>("fitButton");
        const auto press = [&](const char *button) {
            name->setText("default");
            fit->click();
            auto *box = p.findChild<QMessageBox *>("replaceConverterBox");
            QVERIFY(box && box->isVisible());
            QVERIFY2(box->text().contains("already holds a converter 'default', ridge"),
                     qPrintable(box->text()));
            QCOMPARE(fits.count(), 0); // nothing starts before the answer
            if (button)
                box->findChild<QPushButton *>(button)->click();
            else
                box->button(QMessageBox::Cancel)->click();
            QCoreApplication::processEvents();
        };
        press("newConverterNameButton");
        QCOMPARE(fits.count(), 1);
        auto request = fits.takeFirst().first().value<core::FitSettings>();
        QCOMPARE(request.name, std::string("default-3")); // default-2 is taken too
        QVERIFY(!request.replace);
        QCOMPARE(name->text(), QString("default-3"));
        p.setBusy(false);
        press("replaceConverterButton");
        QCOMPARE(fits.count(), 1);
        request = fits.takeFirst().first().value<core::FitSettings>();
        QCOMPARE(request.name, std::string("default"));
        QVERIFY(request.replace);
        p.setBusy(false);
        press(nullptr);
        QCOMPARE(fits.count(), 0);
        // a new name is fitted at once
        name->setText("fresh");
        fit->click();
        QCOMPARE(fits.count(), 1);
        QVERIFY(!fits.takeFirst().first().value<core::FitSettings>().replace);
    }

    // An embedding model by path: listed by its folder name before "Other model...", its path
    // what a replay and a sweep ask for; a name selects the name again; the same path twice is one
    // entry.
    void embedderModelPath()
    {
        ui::ReplayPanel p;
        auto *combo = p.findChild<QComboBox *>("embedderCombo");
        QVERIFY(combo);
        const int before = combo->count();
        core::ReplaySettings r;
        r.workload = "/data/w.jsonl";
        r.embedder = "/data/models/embedder";
        p.setReplayRequest(r);
        QCOMPARE(combo->currentText(), QString("embedder"));
        QCOMPARE(p.replayRequest().embedder, std::string("/data/models/embedder"));
        QCOMPARE(p.sweepRequest().embedder, QString("/data/models/embedder"));
        QCOMPARE(combo->itemText(combo->count() - 2), QString("Other model..."));
        QCOMPARE(combo->itemText(combo->count() - 1), QString("Train on pairs..."));
        p.setReplayRequest(r);
        QCOMPARE(combo->count(), before + 1);
        r.embedder = "lexical-idf";
        p.setReplayRequest(r);
        QCOMPARE(p.replayRequest().embedder, std::string("lexical-idf"));
        // the cross tier's selective recompute share
        r.crossRecompute = 0.25;
        p.setReplayRequest(r);
        QCOMPARE(p.findChild<QDoubleSpinBox *>("crossRecomputeSpin")->value(), 0.25);
        p.findChild<QDoubleSpinBox *>("crossRecomputeSpin")->setValue(0.5);
        QCOMPARE(p.replayRequest().crossRecompute, 0.5);
    }

    // Train on pairs: a missing pairs file or output is said in the status line and asks nothing;
    // a request carries the settings; the trained embedder is chosen, the threshold set to the
    // validation's precision-0.9 one, and the status line gives its scores.
    void trainEmbedderOnPairs()
    {
        ui::ReplayPanel p;
        QSignalSpy asked(&p, &ui::ReplayPanel::trainEmbedderRequested);
        auto *status = p.findChild<QLabel *>("replayStatus");
        core::EmbedderTrainSettings s;
        p.requestEmbedderTraining(s);
        QCOMPARE(asked.count(), 0);
        QCOMPARE(status->text(), QString("Training an embedder needs a labelled pairs file."));
        s.pairs = "/nonexistent/pairs.tsv";
        p.requestEmbedderTraining(s);
        QCOMPARE(status->text(), QString("Training an embedder: /nonexistent/pairs.tsv is not a file."));
        QTemporaryDir tmp;
        const std::string file = tmp.path().toStdString() + "/pairs.tsv";
        QFile f(QString::fromStdString(file));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("a\tb\t1\n");
        f.close();
        s.pairs = file;
        p.requestEmbedderTraining(s);
        QCOMPARE(status->text(), QString("Training an embedder needs an output folder."));
        s.out = tmp.path().toStdString() + "/emb";
        s.steps = 77;
        p.requestEmbedderTraining(s);
        QCOMPARE(asked.count(), 1);
        const auto r = asked.first().first().value<ui::EmbedderTrainRequest>();
        QCOMPARE(r.settings.steps, 77);
        QCOMPARE(r.settings.out, s.out);
        ui::EmbedderTrainView v;
        v.out = QString::fromStdString(s.out.string());
        v.steps = 300;
        v.bestStep = 200;
        v.stoppedEarly = true;
        v.trainPairs = 900;
        v.validationPairs = 100;
        v.auc = 0.93;
        v.lexicalAuc = 0.81;
        v.averagePrecision = 0.9;
        v.thresholdAt90 = 0.715;
        v.recallAt90 = 0.62;
        p.showTrainedEmbedder(v);
        QCOMPARE(p.embedderSpec(), v.out);
        QCOMPARE(p.replayRequest().threshold, 0.72); // the spin box's two decimals
        QCOMPARE(status->text(),
                 QString("Embedder emb trained (300 steps, stopped early, best at 200; 900 pairs, 100 "
                         "held out): validation AUC 0.930 (lexical 0.810), average precision "
                         "0.900; precision 0.9 from threshold 0.715 (recall 0.620), threshold set. "
                         "Load models A and B first (Models panel); a replay runs them for every "
                         "miss."));
        p.setModelsLoaded(true); // the scores stay; what a replay needs is there now
        QVERIFY2(status->text().startsWith("Embedder emb trained") && !status->text().contains("Load models"),
                 qPrintable(status->text()));
        // a verifier: asked for as one, chosen in the verifier list, and part of the replay's request
        QCOMPARE(p.replayRequest().verifier, std::string());
        p.requestEmbedderTraining(s, true);
        QCOMPARE(asked.count(), 2);
        QVERIFY(asked.last().first().value<ui::EmbedderTrainRequest>().verifier);
        v.verifier = true;
        v.out = QString::fromStdString(tmp.path().toStdString() + "/ver");
        p.showTrainedEmbedder(v);
        QCOMPARE(p.verifierSpec(), v.out);
        QCOMPARE(p.replayRequest().verifier, v.out.toStdString());
        QCOMPARE(p.replayRequest().threshold, 0.72); // the semantic threshold stays
        QVERIFY2(status->text().startsWith("Verifier ver trained") &&
                     status->text().contains(
                         "precision 0.9 from score 0.715 (recall 0.620), the threshold it uses"),
                 qPrintable(status->text()));
        auto *combo = p.findChild<QComboBox *>("verifierCombo");
        QCOMPARE(combo->itemText(0), QString("no verifier"));
        QCOMPARE(combo->itemText(combo->count() - 1), QString("Train verifier..."));
        core::ReplaySettings none = p.replayRequest();
        none.verifier.clear();
        p.setReplayRequest(none);
        QCOMPARE(combo->currentIndex(), 0);
        QCOMPARE(p.verifierSpec(), QString());
    }

    // The threshold sweep: the button asks for the workload's sweep with the chosen embedder; the
    // result opens the sweep window with the suggested threshold selected, and using a row sets the
    // semantic threshold.
    void thresholdSweepWindow()
    {
        ui::ReplayPanel p;
        p.show();
        core::ReplaySettings r;
        r.workload = "/data/w.jsonl";
        r.embedder = "lexical-idf";
        r.limit = 300;
        p.setReplayRequest(r);
        QSignalSpy spy(&p, &ui::ReplayPanel::sweepRequested);
        auto *button = p.findChild<QPushButton *>("sweepButton");
        QVERIFY(button && button->isEnabled());
        button->click();
        QCOMPARE(spy.count(), 1);
        const auto req = spy.at(0).at(0).value<ui::SemanticSweepRequest>();
        QCOMPARE(req.workloadPath, QString("/data/w.jsonl"));
        QCOMPARE(req.embedder, QString("lexical-idf"));
        QCOMPARE(req.limit, 300);
        QCOMPARE(req.target, 0.1);

        ui::SemanticSweepResult sweep;
        sweep.workloadPath = "/data/w.jsonl";
        sweep.embedder = "lexical-idf-512";
        sweep.scored = 100;
        sweep.shouldHit = 60;
        sweep.target = 0.1;
        sweep.suggested = 0.72;
        for (double t : {0.70, 0.72, 0.75}) {
            core::SweepPoint pt;
            pt.threshold = t;
            pt.hits = int64_t(100 * (1 - t));
            pt.precision = t;
            pt.recall = 1 - t;
            pt.falseHitRate = 1 - t;
            sweep.points.push_back(pt);
        }
        p.showSweep(sweep);
        auto *table = p.findChild<QTableWidget *>("sweepTable");
        QVERIFY(table);
        QCOMPARE(table->rowCount(), 3);
        QCOMPARE(table->item(1, 0)->text(), QString("0.72"));
        QCOMPARE(table->currentRow(), 1); // the suggested threshold
        QVERIFY(p.findChild<QLabel *>("sweepSummary")->text().contains("0.72"));
        table->selectRow(2);
        p.findChild<QPushButton *>("useThresholdButton")->click();
        QCOMPARE(p.replayRequest().threshold, 0.75);
        // the curve: precision, recall and false-hit rate per threshold, the suggested one marked
        auto *chart = p.findChild<ui::ThresholdCurveChart *>("sweepChart");
        QVERIFY(chart);
        QCOMPARE(chart->precisionSeries()->count(), 3);
        QCOMPARE(chart->recallSeries()->at(1), QPointF(0.72, 0.28));
        QCOMPARE(chart->falseHitSeries()->at(2).y(), 1 - 0.75);
        QVERIFY(chart->markSeries()->count() == 2 &&
                chart->markSeries()->at(0).x() == 0.75); // selected row 2
        // no verifier: its tab is off
        auto *tabs = p.findChild<QTabWidget *>("sweepTabs");
        QVERIFY(tabs && !tabs->isTabEnabled(1));
        // a second sweep reuses the window
        p.showSweep(sweep);
        QCOMPARE(p.findChildren<QTableWidget *>("sweepTable").size(), qsizetype(1));
        QVERIFY(chart->markSeries()->count() == 2 && chart->markSeries()->at(0).x() == 0.72);

        // with a verifier chosen, the request names it and the similarity threshold its candidates pass
        r.verifier = "/models/verifier";
        r.threshold = 0.7;
        p.setReplayRequest(r);
        auto *verifierSpin = p.findChild<QDoubleSpinBox *>("verifierThresholdSpin");
        QVERIFY(verifierSpin && verifierSpin->isEnabled());
        QCOMPARE(verifierSpin->text(), QString("its own")); // 0: the recorded threshold
        button->click();
        const auto vreq = spy.at(1).at(0).value<ui::SemanticSweepRequest>();
        QCOMPARE(vreq.verifier, QString("/models/verifier"));
        QCOMPARE(vreq.similarityThreshold, 0.7);
        core::VerifierSweep vs;
        vs.similarityThreshold = 0.7;
        vs.candidates = 40;
        vs.correctCandidates = 25;
        vs.shouldHit = 60;
        vs.target = 0.1;
        for (double t : {0.3, 0.6, 0.9}) {
            core::SweepPoint pt;
            pt.threshold = t;
            pt.hits = int64_t(40 * (1 - t));
            pt.precision = 0.6 + t / 3;
            pt.recall = (1 - t) / 2;
            pt.falseHitRate = 1 - pt.precision;
            vs.points.push_back(pt);
        }
        vs.atTarget = vs.points[2];
        sweep.verifierName = "cross-verifier";
        sweep.verifier = vs;
        p.showSweep(sweep);
        QVERIFY(tabs->isTabEnabled(1));
        auto *vtable = p.findChild<QTableWidget *>("verifierSweepTable");
        QCOMPARE(vtable->rowCount(), 3);
        QCOMPARE(vtable->currentRow(), 2);
        QVERIFY(p.findChild<QLabel *>("verifierSweepSummary")
                    ->text()
                    .contains("40 candidates at similarity 0.70"));
        QCOMPARE(p.findChild<ui::ThresholdCurveChart *>("verifierSweepChart")->precisionSeries()->count(), 3);
        vtable->selectRow(1);
        p.findChild<QPushButton *>("useVerifierThresholdButton")->click();
        QCOMPARE(p.replayRequest().verifierThreshold, 0.6);
        QCOMPARE(p.replayRequest().threshold, 0.7); // the similarity threshold untouched
        // choosing no verifier drops its threshold (a settings check refuses one alone)
        auto *combo = p.findChild<QComboBox *>("verifierCombo");
        combo->setCurrentIndex(0);
        QCOMPARE(p.replayRequest().verifierThreshold, 0.0);
        QVERIFY(p.replayRequest().verifier.empty());
    }

    void replayRequestRoundTrip()
    {
        ui::ReplayPanel p;
        compareReplay(p.replayRequest(), core::ReplaySettings{});
        p.setSnapshot(snapshot(10, {"default"}));
        p.setCrossAvailable(true, "default");
        core::ReplaySettings r;
        r.workload = "/data/workload.jsonl";
        r.experiment = "/tmp/exp.h5";
        r.converter = "default";
        r.tiers = {core::TierKind::Exact, core::TierKind::Prefix, core::TierKind::Cross};
        r.threshold = 0.85;
        r.embedder = "model";
        r.gateSignal = core::GateSignal::KvCos;
        r.gateThreshold = 0.95;
        r.gate = false;
        r.maxTokens = 16;
        r.limit = 200;
        r.ledgerName = "run-1";
        r.store = "redis://127.0.0.1:6379";
        r.storeKvDtype = core::FloatType::BF16;
        r.prices = "anthropic-claude-sonnet-4";
        r.errorBound = 0.05;
        r.boundMinUses = 5;
        r.boundPrior = "embedder";
        r.verifier = "/models/verifier";
        r.verifierThreshold = 0.65;
        p.setReplayRequest(r);
        // the price presets are offered by id, the default first
        auto *prices = p.findChild<QComboBox *>("pricesCombo");
        QVERIFY(prices && prices->count() > 2);
        QCOMPARE(prices->itemText(0), QString());
        QVERIFY(prices->findText("self-hosted") > 0);
        compareReplay(p.replayRequest(), r);

        // a busy panel still reports its settings (the project saves them)
        p.setBusy(true);
        compareReplay(p.replayRequest(), r);
        p.setBusy(false);

        // no bound: the bound's own settings go with it (a settings check refuses them alone)
        p.findChild<QDoubleSpinBox *>("errorBoundSpin")->setValue(0);
        QCOMPARE(p.replayRequest().boundPrior, std::string());
        QCOMPARE(p.replayRequest().boundMinUses, core::ReplaySettings{}.boundMinUses);
        p.setReplayRequest(r);

        // without a converter in use the cross tier is left out of the settings (the choice is kept
        // for later), stays checked and can be unchecked, and Start refuses to run without it
        p.setCrossAvailable(false, {});
        auto *cross = p.findChild<QCheckBox *>("tierCross");
        QVERIFY(cross->isChecked() && cross->isEnabled());
        QVERIFY(cross->toolTip().contains("Use this converter"));
        QCOMPARE(p.replayRequest().tiers,
                 std::vector<core::TierKind>({core::TierKind::Exact, core::TierKind::Prefix}));
        QCOMPARE(p.replayRequest().converter, std::string("default")); // kept, unused
        {
            QSignalSpy started(&p, &ui::ReplayPanel::replayRequested);
            p.setWorkloads({"w.jsonl"});
            p.setModelsLoaded(true);
            p.findChild<QPushButton *>("startButton")->click();
            QCOMPARE(started.count(), 0);
            QVERIFY2(p.statusText().contains("cross tier is checked but no converter is in use"),
                     qPrintable(p.statusText()));
            r.workload = "w.jsonl"; // what the panel now shows, for the round trips below
        }
        p.setCrossAvailable(true, "other");
        QCOMPARE(p.replayRequest().tiers,
                 std::vector<core::TierKind>(
                     {core::TierKind::Exact, core::TierKind::Prefix, core::TierKind::Cross}));
        QCOMPARE(p.replayRequest().converter, std::string("other"));

        // the knowledge tier needs a graph in use, with its profiles; without one it is left out
        auto *knowledge = p.findChild<QCheckBox *>("tierKnowledge");
        QVERIFY(!knowledge->isEnabled()); // unchecked and nothing to use
        QVERIFY(knowledge->toolTip().contains("Knowledge step"));
        r.tiers = {core::TierKind::Exact, core::TierKind::Knowledge,
                   core::TierKind::Prefix}; // the panel's order
        r.converter = "other";
        r.knowledgeGraphs = {"/data/graph.h5"};
        r.profiles = "/data/profiles.json";
        p.setReplayRequest(r);
        QVERIFY(knowledge->isEnabled());
        compareReplay(p.replayRequest(), r);
        QVERIFY(knowledge->toolTip().contains("graph.h5"));
        p.setKnowledgeAvailable({}, {});
        QCOMPARE(p.replayRequest().tiers,
                 std::vector<core::TierKind>({core::TierKind::Exact, core::TierKind::Prefix}));
        QVERIFY(p.replayRequest().knowledgeGraphs.empty());
        QVERIFY(knowledge->isChecked() && knowledge->isEnabled());
        QSignalSpy started(&p, &ui::ReplayPanel::replayRequested);
        p.findChild<QPushButton *>("startButton")->click();
        QCOMPARE(started.count(), 0);
        QVERIFY2(p.statusText().contains("knowledge tier is checked but no graph is in use"),
                 qPrintable(p.statusText()));
        knowledge->setChecked(false); // unchecked, the replay runs without it
        p.findChild<QPushButton *>("startButton")->click();
        QCOMPARE(started.count(), 1);
    }

    // The semantic tier's guards: on by default, a project's own list kept, off when unchecked.
    void guardsCheckbox()
    {
        ui::ReplayPanel p;
        auto *guards = p.findChild<QCheckBox *>("guardsCheck");
        QVERIFY(guards->isChecked());
        QCOMPARE(p.replayRequest().guards, core::SemanticGuards::all());
        core::ReplaySettings r;
        r.guards = *core::parseSemanticGuards("negation,number");
        p.setReplayRequest(r);
        QVERIFY(guards->isChecked());
        QCOMPARE(core::semanticGuardsName(p.replayRequest().guards), std::string("negation,number"));
        guards->setChecked(false);
        QVERIFY(!p.replayRequest().guards.any());
        r.guards = {};
        p.setReplayRequest(r);
        QVERIFY(!guards->isChecked());
    }

    void gateSignalResetsThreshold()
    {
        ui::ReplayPanel p;
        auto *signal = p.findChild<QComboBox *>("gateSignalCombo");
        auto *threshold = p.findChild<QDoubleSpinBox *>("gateThresholdSpin");
        QCOMPARE(threshold->value(), 0.1);
        signal->setCurrentText("kv_cos");
        QCOMPARE(p.replayRequest().gateThreshold, 0.9);
        signal->setCurrentText("nll");
        QCOMPARE(p.replayRequest().gateThreshold, 3.0);
        threshold->setValue(2.5);
        QCOMPARE(p.replayRequest().gateThreshold, 2.5);
        signal->setCurrentText("tail_kl");
        QCOMPARE(p.replayRequest().gateThreshold, 0.1);
        p.findChild<QCheckBox *>("gateCheck")->setChecked(false);
        QVERIFY(!signal->isEnabled());
        QVERIFY(!threshold->isEnabled());
    }

    void startStopPause()
    {
        ui::ReplayPanel p;
        auto *start = p.findChild<QPushButton *>("startButton");
        auto *pause = p.findChild<QPushButton *>("pauseButton");
        auto *stop = p.findChild<QPushButton *>("stopButton");
        QVERIFY(!start->isEnabled());
        QVERIFY(p.statusText().contains("Load models A and B first"));
        p.setModelsLoaded(true);
        QVERIFY(start->isEnabled());
        QVERIFY(!pause->isEnabled());
        QVERIFY(!stop->isEnabled());

        QSignalSpy spy(&p, &ui::ReplayPanel::replayRequested);
        start->click(); // no workload
        QCOMPARE(spy.count(), 0);
        QVERIFY(p.statusText().contains("choose a workload"));

        p.setWorkloads({"projects/demo/workload.jsonl"});
        p.findChild<QLineEdit *>("ledgerNameEdit")->setText("run-1");
        start->click(); // a ledger name but no experiment file
        QCOMPARE(spy.count(), 0);
        QVERIFY(p.statusText().contains("no experiment file"));
        p.findChild<QLineEdit *>("ledgerNameEdit")->clear();

        // zero tiers is the baseline
        for (const char *t : {"tierExact", "tierSemantic", "tierPrefix"})
            p.findChild<QCheckBox *>(t)->setChecked(false);
        start->click();
        QCOMPARE(spy.count(), 1);
        auto r = spy.first().first().value<core::ReplaySettings>();
        QCOMPARE(r.workload, std::string("projects/demo/workload.jsonl"));
        QVERIFY(r.tiers.empty());
        QCOMPARE(r.experiment, std::string());
        QVERIFY(p.statusText().contains("no tiers: baseline"));
        QVERIFY(!start->isEnabled());
        QVERIFY(pause->isEnabled());
        QVERIFY(stop->isEnabled());

        QSignalSpy pauses(&p, &ui::ReplayPanel::pauseRequested);
        pause->click();
        QCOMPARE(pauses.count(), 1);
        QCOMPARE(pauses.last().first().toBool(), true);
        QCOMPARE(pause->text(), QString("Resume"));
        p.setReplayProgress(412, 1000);
        QVERIFY(p.statusText().contains("412 / 1000 requests"));
        pause->click();
        QCOMPARE(pauses.last().first().toBool(), false);
        QCOMPARE(pause->text(), QString("Pause"));

        QSignalSpy stops(&p, &ui::ReplayPanel::stopRequested);
        stop->click();
        QCOMPARE(stops.count(), 1);
        p.setReplayFailed("workload line 3: not JSON");
        QVERIFY(p.statusText().contains("not JSON"));
        QVERIFY(start->isEnabled());
        QVERIFY(!stop->isEnabled());
    }

    void liveMode()
    {
        ui::ReplayPanel p;
        p.setSnapshot(snapshot(10, {}, true));
        auto *combo = p.findChild<QComboBox *>("ledgerCombo");
        QCOMPARE(p.ledger()->rowCount(), 30);

        p.setBusy(true);
        p.beginLive("workload.jsonl");
        QCOMPARE(combo->count(), 2);
        QCOMPARE(combo->currentText(), QString("workload.jsonl (live)"));
        QVERIFY(p.liveShown());
        QCOMPARE(p.ledger()->rowCount(), 0);
        QCOMPARE(p.charts()->requestCount(), 0);

        p.appendRows(testing::patternedLedger(40));
        p.appendRows(testing::patternedLedger(25, 40));
        QCOMPARE(p.ledger()->rowCount(), 65);
        QCOMPARE(p.charts()->requestCount(), 65);
        QCOMPARE(p.charts()->hitRateSeries(core::TierKind::None)->points().back().x(), 65.0);
        QVERIFY(p.summaryText().contains("65 requests"));
        auto all = testing::patternedLedger(40);
        for (auto &row : testing::patternedLedger(25, 40))
            all.push_back(row);
        const int64_t approximate = core::summarize(all).approximateHits;
        QVERIFY(approximate > 0); // the pattern has semantic and cross-model hits
        QVERIFY2(
            p.summaryText().contains(QString("approximate hits %1 (never cached again)").arg(approximate)),
            qPrintable(p.summaryText()));

        // away to the stored ledger while rows keep coming, and back
        combo->setCurrentIndex(0);
        QVERIFY(!p.liveShown());
        QCOMPARE(p.ledger()->rowCount(), 30);
        p.appendRows(testing::patternedLedger(10, 65));
        QCOMPARE(p.ledger()->rowCount(), 30);
        QCOMPARE(p.liveRowCount(), 75);
        combo->setCurrentIndex(1);
        QCOMPARE(p.ledger()->rowCount(), 75);
        QCOMPARE(p.charts()->requestCount(), 75);
        QCOMPARE(p.ledger()->row(74).requestId, 74);

        p.setReplayProgress(75, 100);
        p.finishLive(true);
        QVERIFY(p.statusText().contains("stopped after 75"));
        QCOMPARE(p.ledger()->rowCount(), 75);
        QVERIFY(p.findChild<QPushButton *>("startButton")->isEnabled() == false); // models not loaded
        QVERIFY(!p.findChild<QPushButton *>("stopButton")->isEnabled());

        // re-reading the file (the ledger now stored) keeps the live entry shown
        p.setSnapshot(snapshot(10, {}, true));
        QCOMPARE(combo->count(), 2);
        QVERIFY(p.liveShown());
        QCOMPARE(p.ledger()->rowCount(), 75);

        // a new live run replaces the old live entry
        p.beginLive("second");
        QCOMPARE(combo->count(), 2);
        QCOMPARE(combo->itemText(1), QString("second (live)"));
        p.appendRows(testing::patternedLedger(5));
        p.finishLive(false);
        QVERIFY(p.statusText().contains("done: 5 requests"));
    }

    // Two converters side by side in the Alignment step: the second's per-layer lines dotted over the
    // chart, and the table one row per layer with both scores and their differences.
    void convertersSideBySide()
    {
        ui::AlignmentPanel p;
        auto snap = snapshot(42, {"default", "topk-2"});
        for (auto &row : snap->converters[1].layerMetrics.rows)
            row[1] -= 0.1; // topk-2's R² of keys: 0.1 lower on every layer
        p.setSnapshot(snap);
        auto *beside = p.findChild<QComboBox *>("besideConverterCombo");
        QCOMPARE(beside->count(), 2);
        QCOMPARE(beside->itemText(1), QString("topk-2"));
        QCOMPARE(p.layerChart()->series().size(), 3);
        beside->setCurrentIndex(1);
        const core::MetricTable &t = p.layerTable()->table();
        QCOMPARE(t.columns,
                 (std::vector<std::string>{"layer", "attn_cos", "attn_cos\u2032", "\u0394attn_cos", "r2_k",
                                           "r2_k\u2032", "\u0394r2_k", "r2_v", "r2_v\u2032", "\u0394r2_v"}));
        QCOMPARE(t.rows.size(), size_t(4));
        QCOMPARE(t.rows[2][4], 0.6 + 0.02 * 2);
        QCOMPARE(t.rows[2][5], 0.6 + 0.02 * 2 - 0.1);
        QVERIFY(std::abs(t.rows[2][6] - 0.1) < 1e-12);
        QCOMPARE(t.rows[2][3], 0.0); // the same attention cosine
        const auto series = p.layerChart()->series();
        QCOMPARE(series.size(), 6);
        QCOMPARE(series[3]->name(), QString("topk-2: R\u00b2 of keys"));
        QCOMPARE(series[3]->pen().style(), Qt::DotLine);
        QVERIFY(p.findChild<QLabel *>("converterSummary")->text().contains("Beside it, <b>topk-2</b>"));
        // per head: the difference, on a scale symmetric about 0
        QVERIFY(p.headR2()->title().contains("default minus topk-2"));
        QCOMPARE(p.headR2()->valueRange().first, -p.headR2()->valueRange().second);
        QCOMPARE(p.headR2()->matrix().data[0], 0.0); // the helper gave both the same head scores
        // showing topk-2 itself: it is no longer offered beside itself
        p.showConverter(1);
        QCOMPARE(beside->findText("topk-2"), -1);
        QCOMPARE(beside->currentIndex(), 0);
        QCOMPARE(p.layerChart()->series().size(), 3);
        QCOMPARE(p.layerTable()->table().columns.size(), size_t(4));
        QVERIFY(!p.headR2()->title().contains("minus"));
    }

    // Two replays side by side: the second ledger's lines over the charts (dotted, named after it),
    // the x axis spanning both, and one table of both summaries with their differences; the choice
    // survives a re-read of the file and "(none)" removes it.
    void ledgersSideBySide()
    {
        ui::ReplayPanel p;
        auto snap = snapshot(10, {}, true); // "stored": 30 patterned rows
        snap->ledgers.push_back({"other", testing::realisticLedger(50)});
        p.setSnapshot(snap);
        auto *beside = p.findChild<QComboBox *>("besideLedgerCombo");
        QCOMPARE(beside->count(), 3);
        QCOMPARE(beside->itemText(0), QString("(none)"));
        QVERIFY(p.charts()->referenceSeries().isEmpty());
        beside->setCurrentIndex(2);
        QCOMPARE(p.charts()->referenceName(), QString("other"));
        const auto ref = p.charts()->referenceSeries();
        QCOMPARE(ref.size(), 6);
        for (auto *s : ref) {
            QVERIFY2(s->name().startsWith("other: "), qPrintable(s->name()));
            QCOMPARE(s->pen().style(), Qt::DotLine);
            QCOMPARE(s->points().back().x(), 50.0); // the other ledger's own length
        }
        // its all-tiers line is what that ledger's own charts draw
        ui::ReplayCharts alone;
        alone.addRows(testing::realisticLedger(50));
        QCOMPARE(ref[0]->points(), alone.hitRateSeries(core::TierKind::None)->points());
        auto *x = qobject_cast<QValueAxis *>(
            p.charts()->chartView(ui::ReplayCharts::Chart::HitRate)->chart()->axes(Qt::Horizontal)[0]);
        QCOMPARE(x->max(), 50.0); // spans both: the shown ledger has 30 requests
        const auto a = core::summarize(testing::patternedLedger(30)),
                   b = core::summarize(testing::realisticLedger(50));
        const QString text = p.summaryText();
        QVERIFY2(text.contains("Side by side"), qPrintable(text));
        QVERIFY(text.contains(
            "<td>requests</td><td align=right>30</td><td align=right>50</td><td align=right>-20</td>"));
        QVERIFY(text.contains(QString("<td>hit rate</td><td align=right>%1</td><td align=right>%2</td>")
                                  .arg(a.hitRate, 0, 'f', 3)
                                  .arg(b.hitRate, 0, 'f', 3)));
        // a re-read keeps the choice; the shown ledger can change under it
        p.setSnapshot(snap);
        QCOMPARE(beside->currentText(), QString("other"));
        QCOMPARE(p.charts()->referenceSeries().size(), 6);
        p.findChild<QComboBox *>("ledgerCombo")->setCurrentIndex(1);
        QCOMPARE(p.charts()->referenceSeries().size(), 6);
        QVERIFY(p.summaryText().contains("<td>requests</td><td align=right>50</td><td align=right>50</td>"));
        beside->setCurrentIndex(0);
        QVERIFY(p.charts()->referenceSeries().isEmpty());
        QVERIFY(!p.summaryText().contains("Side by side"));
        p.findChild<QComboBox *>("ledgerCombo")->setCurrentIndex(0);
        beside->setCurrentIndex(2);
        p.resize(1300, 800);
        p.show();
        QVERIFY(QTest::qWaitForWindowExposed(&p));
        KVWB_VERIFY_SCREENSHOT(&p, "replay_side_by_side");
    }

    // An error shown stays only while its cause does: fixing the input that a refusal named clears
    // it (issue: stale errors stayed after the cause was fixed).
    void staleErrorsClear()
    {
        ui::ReplayPanel replay;
        replay.setModelsLoaded(true);
        auto *status = replay.findChild<QLabel *>("replayStatus");
        auto *start = replay.findChild<QPushButton *>("startButton");
        start->click();
        QVERIFY(status->text().contains("choose a workload file"));
        replay.findChild<QComboBox *>("workloadCombo")->setCurrentText("w.jsonl");
        QCOMPARE(status->text(), QString("Ready: press Start."));
        replay.findChild<QCheckBox *>("tierCross")->setChecked(true);
        start->click();
        QVERIFY(status->text().contains("no converter is in use"));
        replay.setCrossAvailable(true, "c1");
        QCOMPARE(status->text(), QString("Ready: press Start."));
        // one cause fixed, another named
        replay.findChild<QLineEdit *>("ledgerNameEdit")->setText("run1");
        start->click();
        QVERIFY(status->text().contains("no experiment file is open"));
        replay.findChild<QLineEdit *>("ledgerNameEdit")->setText("bad name");
        QVERIFY2(status->text().contains("no experiment file is open"), qPrintable(status->text()));
        replay.findChild<QLineEdit *>("ledgerNameEdit")->clear();
        QCOMPARE(status->text(), QString("Ready: press Start."));
        // a failed replay's message goes when an input changes, and Start then runs
        replay.setBusy(true);
        replay.setReplayFailed("cannot read w.jsonl: no such file");
        QVERIFY(status->text().contains("no such file"));
        replay.findChild<QComboBox *>("workloadCombo")->setCurrentText("w2.jsonl");
        QCOMPARE(status->text(), QString("Ready: press Start."));

        ui::CapturePanel capture;
        auto *captureStatus = capture.findChild<QLabel *>("captureStatus");
        capture.findChild<QLineEdit *>("outPathEdit")->clear();
        capture.findChild<QComboBox *>("promptSetCombo")->setCurrentText("");
        capture.findChild<QPushButton *>("captureButton")->setEnabled(true);
        capture.findChild<QPushButton *>("captureButton")->click();
        QVERIFY2(captureStatus->text().contains("choose a prompt set and choose an experiment file"),
                 qPrintable(captureStatus->text()));
        capture.findChild<QComboBox *>("promptSetCombo")->setCurrentText("prompts.txt");
        QVERIFY(captureStatus->text().contains("Cannot capture yet: choose an experiment file to write."));
        capture.findChild<QLineEdit *>("outPathEdit")->setText("exp.h5");
        QCOMPARE(captureStatus->text(), QString("Ready: press Capture."));

        ui::AlignmentPanel align;
        align.setSnapshot(snapshot(12, {}));
        auto *fitStatus = align.findChild<QLabel *>("fitStatus");
        align.findChild<QLineEdit *>("fitNameEdit")->setText("two words");
        align.findChild<QPushButton *>("fitButton")->click();
        QVERIFY(fitStatus->text().contains("cannot be stored"));
        align.findChild<QLineEdit *>("fitNameEdit")->setText("two-words");
        QVERIFY2(fitStatus->text().startsWith("Ready to fit from 12 prompts"), qPrintable(fitStatus->text()));
        // the sweep's refusal, the same way
        auto withSweep = snapshot(12, {});
        withSweep->sweeps.push_back({"s1", core::MetricTable{{"k", "r2_k"}, {{1, 0.5}}}});
        align.setSnapshot(withSweep);
        align.findChild<QLineEdit *>("sweepNameEdit")->setText("s1");
        align.findChild<QPushButton *>("runSweepButton")->click();
        QVERIFY2(fitStatus->text().contains("already holds a sweep 's1'"), qPrintable(fitStatus->text()));
        align.findChild<QLineEdit *>("sweepNameEdit")->setText("s2");
        QCOMPARE(fitStatus->text(), QString("Ready to sweep."));
    }

    // The Requests tab: question and answer columns shown (the rarer ones one right-click away),
    // the detail pane follows the selection, filters and sorting combine, and export writes exactly
    // the rows shown in the order shown.
    void requestsTab()
    {
        ui::ReplayPanel p;
        auto snap = snapshot(10, {});
        snap->ledgers.push_back({"stored", testing::realisticLedger(4000)});
        p.setSnapshot(snap);
        p.resize(1190, 560);
        p.show();
        QVERIFY(QTest::qWaitForWindowExposed(&p));
        p.tabs()->setCurrentIndex(1);
        QCOMPARE(p.tabs()->tabText(1), QString("Requests"));
        QTableView *view = p.ledgerView();
        QVERIFY(view->isVisible());
        for (int c : {int(ui::LedgerModel::QuestionColumn), int(ui::LedgerModel::AnswerColumn),
                      int(ui::LedgerModel::AnsweredByColumn), int(ui::LedgerModel::TtftColumn)})
            QVERIFY(!view->isColumnHidden(c));
        for (int c : {int(ui::LedgerModel::ExactColumn), int(ui::LedgerModel::ComputedColumn),
                      int(ui::LedgerModel::NodeColumn)})
            QVERIFY(view->isColumnHidden(c));
        // The table has the tab's height: at 560 pixels for the whole panel, more than 3 rows.
        const int visibleRows = view->viewport()->height() / view->rowHeight(0);
        QVERIFY2(visibleRows >= 8, qPrintable(QString::number(visibleRows)));

        QVERIFY(p.detailText().isEmpty());
        view->setCurrentIndex(view->model()->index(5, ui::LedgerModel::QuestionColumn));
        const core::LedgerRow &five = p.ledger()->row(5);
        QVERIFY2(p.detailText().contains(QString::fromStdString(five.question)), qPrintable(p.detailText()));
        QVERIFY(p.detailText().contains(QString::fromStdString(five.answer)));

        // False hits only, slowest first.
        p.findChild<QCheckBox *>("falseHitsOnly")->setChecked(true);
        view->sortByColumn(ui::LedgerModel::TtftColumn, Qt::DescendingOrder);
        std::vector<core::LedgerRow> want;
        for (const auto &r : p.ledger()->rows())
            if (r.falseHit)
                want.push_back(r);
        std::stable_sort(want.begin(), want.end(),
                         [](const auto &x, const auto &y) { return x.ttftMs > y.ttftMs; });
        QVERIFY(want.size() >= 2);
        QCOMPARE(p.filter()->rowCount(), int(want.size()));
        QVERIFY(p.findChild<QPushButton *>("exportLedgerButton")->isEnabled());
        QTemporaryDir dir;
        const QString out = dir.filePath("rows.csv");
        QCOMPARE(p.exportShownRows(out), QString());
        QFile f(out);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const auto got = core::ledgerFromCsv(f.readAll().toStdString(), "rows.csv");
        QCOMPARE(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
            QCOMPARE(got[i].requestId, want[i].requestId);
            QCOMPARE(got[i].question, want[i].question);
            QCOMPARE(got[i].answer, want[i].answer);
            QVERIFY(got[i].falseHit);
        }
        // A folder that does not exist: one line naming the file, nothing written.
        const QString bad = dir.filePath("no/such/dir/rows.csv");
        const QString e = p.exportShownRows(bad);
        QVERIFY2(e.contains("no/such/dir/rows.csv"), qPrintable(e));
        QVERIFY(!QFile::exists(bad));
        // Nothing shown: nothing to export.
        p.findChild<QLineEdit *>("ledgerSearch")->setText("no request says this");
        QCOMPARE(p.filter()->rowCount(), 0);
        QVERIFY(!p.findChild<QPushButton *>("exportLedgerButton")->isEnabled());
        // The search reads questions: every refund question, and nothing else.
        p.findChild<QCheckBox *>("falseHitsOnly")->setChecked(false);
        p.findChild<QLineEdit *>("ledgerSearch")->setText("MONEY back");
        const auto refunds =
            std::count_if(p.ledger()->rows().begin(), p.ledger()->rows().end(),
                          [](const auto &r) { return r.question == "How do I get my money back?"; });
        QVERIFY(refunds > 10);
        QCOMPARE(p.filter()->rowCount(), int(refunds));
        view->setCurrentIndex(view->model()->index(0, 0));
        QVERIFY(p.detailText().contains("How do I get my money back?"));
        KVWB_VERIFY_SCREENSHOT(&p, "replay_requests");
    }

    void screenshots()
    {
        ui::AlignmentPanel align;
        align.setSnapshot(snapshot(42, {"default", "topk-2"}));
        align.setInUse("default");
        ui::FitSummary s;
        s.name = "topk-2";
        s.fitMs = 2100;
        s.meanR2K = 0.62;
        s.meanR2V = 0.5;
        s.meanAttnCos = 0.68;
        align.showFitSummary(s);
        align.resize(1300, 800);
        align.show();
        QVERIFY(QTest::qWaitForWindowExposed(&align));
        QTest::qWait(50);
        KVWB_VERIFY_SCREENSHOT(&align, "alignment_controls");

        ui::ReplayPanel replay;
        replay.setModelsLoaded(true);
        replay.setSnapshot(snapshot(42, {"default"}, true));
        replay.setCrossAvailable(true, "default");
        replay.setWorkloads({"projects/demo/workload.jsonl"});
        core::ReplaySettings r;
        r.workload = "projects/demo/workload.jsonl";
        r.tiers = {core::TierKind::Exact, core::TierKind::Semantic, core::TierKind::Prefix,
                   core::TierKind::Cross};
        r.ledgerName = "demo-run";
        replay.setReplayRequest(r);
        replay.setBusy(true);
        replay.beginLive("workload.jsonl");
        replay.appendRows(testing::realisticLedger(412));
        replay.setReplayProgress(412, 1000);
        replay.resize(1300, 800);
        replay.show();
        QVERIFY(QTest::qWaitForWindowExposed(&replay));
        QTest::qWait(100);
        KVWB_VERIFY_SCREENSHOT(&replay, "replay_controls");
        // every chart's title and axis titles are whole at this size (Qt Charts elides what does not fit)
        using C = ui::ReplayCharts::Chart;
        for (C which : {C::HitRate, C::FalseHitRate, C::Latency, C::Tokens}) {
            QChart *chart = replay.charts()->chartView(which)->chart();
            QVERIFY2(QFontMetrics(chart->titleFont()).horizontalAdvance(chart->title()) <=
                         chart->size().width() - 20,
                     qPrintable(chart->title()));
            for (QAbstractAxis *axis : chart->axes()) {
                const int need = QFontMetrics(axis->titleFont()).horizontalAdvance(axis->titleText());
                const qreal room = axis->orientation() == Qt::Vertical ? chart->plotArea().height()
                                                                       : chart->plotArea().width();
                QVERIFY2(need <= room, qPrintable(QString("%1: axis title '%2' needs %3 px, has %4")
                                                      .arg(chart->title(), axis->titleText())
                                                      .arg(need)
                                                      .arg(room)));
            }
        }
    }
};

QTEST_MAIN(TestPanelControls)
#include "tst_panel_controls.moc"
