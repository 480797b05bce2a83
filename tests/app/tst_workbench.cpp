// The workbench window through the real engine: the demo project opens into the panels, the pair
// loads on the engine thread while the GUI keeps answering, results and failures reach the window,
// docks have unique names and the layout resets. Saves a screenshot of the window under the build
// directory (screenshots/).
#include "app/gui.h"
#include "core/ledger/replay_ledger.h"
#include "core/model/random_model.h"
#include "core/settings/project.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/ledger_store.h"
#include "gpu/model/device.h"
#include "tests/support/identity_map.h"
#include "tests/support/legacy_experiment.h"
#include "tests/support/test_paths.h"
#include "ui/charts/layer_metrics_chart.h"
#include "ui/charts/replay_charts.h"
#include "ui/charts/sweep_chart.h"
#include "ui/models/ledger_filter_model.h"
#include "ui/models/ledger_model.h"
#include "ui/models/metric_table_model.h"
#include "ui/models/model_card_model.h"
#include "ui/panels/alignment_panel.h"
#include "ui/panels/capture_panel.h"
#include "ui/panels/compare_panel.h"
#include "ui/panels/knowledge_panel.h"
#include "ui/panels/replay_panel.h"
#include "ui/window/tool_tips.h"

#include <QAbstractItemModelTester>
#include <QAbstractScrollArea>
#include <QAbstractSpinBox>
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QFile>
#include <QHelpEvent>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QListWidget>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QSet>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

using namespace kvwb;

namespace fs = std::filesystem;

namespace {
QString screenshotDir()
{
    const QString dir = QCoreApplication::applicationDirPath() + "/screenshots";
    QDir().mkpath(dir);
    return dir;
}

// Records the longest pause of the GUI's event loop while the engine is busy: a 5 ms timer that
// should never wait much longer.
class StallMeter
{
public:
    explicit StallMeter(const app::EngineController &engine)
    {
        m_tick.setInterval(5);
        QObject::connect(&m_tick, &QTimer::timeout, [this, &engine] {
            const qint64 now = m_clock.elapsed();
            if (engine.busy() && now - m_last > m_worst) {
                m_worst = now - m_last;
                m_where = engine.state();
            }
            m_last = now;
        });
        m_clock.start();
        m_tick.start();
    }
    qint64 worstMs() const { return m_worst; }
    QString where() const { return m_where; } // the engine's state when the longest pause ended

private:
    QElapsedTimer m_clock;
    QTimer m_tick;
    qint64 m_last = 0, m_worst = 0;
    QString m_where;
};

template <typename T> T *child(QWidget *parent, const char *name)
{
    auto *w = parent->findChild<T *>(name);
    if (!w)
        qFatal("no child '%s'", name);
    return w;
}

// A one-prompt experiment of two tiny models with a sweep table and a one-row replay ledger.
void writeSmallExperiment(const std::filesystem::path &path)
{
    core::ModelInfo a, b;
    a.role = core::ModelRole::A;
    b.role = core::ModelRole::B;
    a.config = b.config = core::randomModelPreset("tiny").config;
    a.weightsSha256 = "aa";
    b.weightsSha256 = "bb";
    {
        auto writer = core::ExperimentWriter::create(path, {}, {}, a, b);
        core::PromptRecord rec;
        rec.text = "hello";
        rec.a.ids = rec.b.ids = {1, 2, 3};
        const auto &c = a.config;
        const size_t n = size_t(3 * c.numKvHeads * c.headDim);
        for (int l = 0; l < c.numLayers; ++l) {
            rec.a.keys.push_back(std::vector<float>(n, 0.5f));
            rec.a.values.push_back(std::vector<float>(n, 0.25f));
        }
        rec.b.keys = rec.a.keys;
        rec.b.values = rec.a.values;
        writer.appendPrompt(rec);
        writer.close();
    }
    core::MetricTable sweep{{"k", "lambda", "r2_k"}, {{1, 0.01, 0.5}, {2, 0.01, 0.6}}};
    core::saveTable(path, "sweep", sweep, "{}");
    core::LedgerRow row;
    row.requestId = 7;
    row.tenant = "t0";
    row.model = core::ModelRole::A;
    row.tierHits[core::TierKind::Exact] = true;
    row.answeredBy = core::TierKind::Exact;
    core::saveLedger(path, "run", {row}, "{}");
}

// Why step's page does not fit the window as it stands, or empty: the page needs no horizontal
// scrollbar; every visible button lies fully inside the page's view (scrolled to the top); and every
// visible control and label lies inside the view's width at no less than the width it needs (its
// text not cut). Widgets inside an item view or a text view scroll in their own area: the view is
// checked, not what it holds.
QString layoutFault(ui::MainWindow &w, const QString &step, const QString &tag)
{
    QScrollArea *page = w.stepPage(step);
    QWidget *content = page->widget();
    QWidget *view = page->viewport();
    if (content->minimumSizeHint().width() > view->width() || content->width() > view->width())
        return QString("%1 at %2: the page needs %3 px, has %4")
            .arg(step, tag)
            .arg(std::max(content->minimumSizeHint().width(), content->width()))
            .arg(view->width());
    const auto describe = [](QWidget *x) {
        QString what = x->metaObject()->className();
        if (!x->objectName().isEmpty())
            what += " '" + x->objectName() + "'";
        if (auto *b = qobject_cast<QAbstractButton *>(x))
            what += " \"" + b->text() + "\"";
        else if (auto *l = qobject_cast<QLabel *>(x))
            what += " \"" + l->text().left(60) + "\"";
        return what;
    };
    for (QWidget *x : content->findChildren<QWidget *>()) {
        if (!x->isVisibleTo(content))
            continue;
        bool inOwnArea = false; // inside an item view, a text view or a chart: scrolls there
        for (QWidget *up = x->parentWidget(); up && up != content; up = up->parentWidget())
            inOwnArea = inOwnArea || qobject_cast<QAbstractScrollArea *>(up) != nullptr;
        if (inOwnArea)
            continue;
        const QRect r(x->mapTo(view, QPoint(0, 0)), x->size());
        const bool isButton = qobject_cast<QPushButton *>(x) != nullptr;
        if (isButton ? !view->rect().contains(r) : r.left() < 0 || r.right() >= view->width())
            return QString("%1 at %2: %3 at %4,%5 %6x%7 is outside the %8x%9 view")
                .arg(step, tag, describe(x))
                .arg(r.x())
                .arg(r.y())
                .arg(r.width())
                .arg(r.height())
                .arg(view->width())
                .arg(view->height());
        auto *label = qobject_cast<QLabel *>(x);
        const bool control = qobject_cast<QAbstractButton *>(x) || qobject_cast<QComboBox *>(x) ||
                             qobject_cast<QAbstractSpinBox *>(x) || (label && !label->wordWrap());
        if (control && x->width() + 1 < x->minimumSizeHint().width())
            return QString("%1 at %2: %3 is %4 px wide and needs %5: its text is cut")
                .arg(step, tag, describe(x))
                .arg(x->width())
                .arg(x->minimumSizeHint().width());
    }
    return {};
}

// Where each visible button of step's page is, in window coordinates.
QMap<QPushButton *, QRect> buttonPlaces(ui::MainWindow &w, const QString &step)
{
    QMap<QPushButton *, QRect> places;
    QWidget *content = w.stepPage(step)->widget();
    for (QPushButton *b : content->findChildren<QPushButton *>())
        if (b->isVisibleTo(content))
            places[b] = QRect(b->mapTo(&w, QPoint(0, 0)), b->size());
    return places;
}

// Which button moved since `before`, or empty.
QString movedButton(ui::MainWindow &w, const QMap<QPushButton *, QRect> &before, const QString &what)
{
    for (auto it = before.begin(); it != before.end(); ++it) {
        const QRect now(it.key()->mapTo(&w, QPoint(0, 0)), it.key()->size());
        if (now != it.value())
            return QString("%1: button '%2' moved from %3,%4 to %5,%6")
                .arg(what, it.key()->text())
                .arg(it.value().x())
                .arg(it.value().y())
                .arg(now.x())
                .arg(now.y());
    }
    return {};
}

} // namespace

class TestWorkbench : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

    // `kvwb` with no project opens the newest recent project that still exists, else the demo.
    void choosesTheStartupProject()
    {
        QTemporaryDir tmp;
        const QString gone = tmp.path() + "/gone.kvwb", kept = tmp.path() + "/kept.kvwb",
                      older = tmp.path() + "/older.kvwb";
        for (const QString &p : {kept, older}) {
            QFile f(p);
            QVERIFY(f.open(QIODevice::WriteOnly));
        }
        const QString demo = QString::fromStdString((test::sourceDir() / "projects/demo/demo.kvwb").string());
        QCOMPARE(app::startupProject({gone, kept, older}, demo), kept);
        QCOMPARE(app::startupProject({gone}, demo), demo);
        QCOMPARE(app::startupProject({}, demo), demo);
        QCOMPARE(app::startupProject({gone, tmp.path()}, tmp.path() + "/no-demo.kvwb"), QString());
    }

    void opensTheDemoProjectAndLoadsThePair()
    {
        app::Workbench bench;
        auto &w = bench.window();
        const QString project =
            QString::fromStdString((test::sourceDir() / "projects/demo/demo.kvwb").string());
        QVERIFY(w.openProject(project));
        w.resize(1280, 820);
        w.show();
        QVERIFY(w.windowTitle().contains("demo"));
        auto *panel = w.modelsPanel();
        QVERIFY(panel->choice('a').path.endsWith("models/a"));
        QVERIFY2(panel->estimateText('b').contains("6 layers"), qPrintable(panel->estimateText('b')));

        // the GUI keeps answering while the engine thread loads: a 5 ms timer never waits long
        QSignalSpy loaded(&bench.engine(), &app::EngineController::modelsLoaded);
        QSignalSpy progress(&bench.engine(), &app::EngineController::progress);
        QElapsedTimer clock;
        qint64 last = 0, worstGap = 0;
        QTimer tick;
        tick.setInterval(5);
        connect(&tick, &QTimer::timeout, [&] {
            const qint64 now = clock.elapsed();
            if (bench.engine().busy()) // only while the engine works, not the window's own painting
                worstGap = std::max(worstGap, now - last);
            last = now;
        });
        // the Models panel shows the load's own progress (the window routes it there)
        QStringList statuses;
        auto *status = w.findChild<QLabel *>("statusLabel");
        connect(&bench.engine(), &app::EngineController::progress, &w, [&] { statuses << status->text(); });
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QTest::qWait(100); // first paint and layout done before measuring
        clock.start();
        tick.start();
        panel->findChild<QPushButton *>("loadButton")->click();
        QVERIFY(bench.engine().busy());
        QVERIFY(loaded.wait(60000));
        tick.stop();
        QVERIFY(progress.count() >= 4); // embeddings, layers, output of each model
        QVERIFY2(!statuses.isEmpty() && statuses.last().startsWith("Loading: model B"),
                 qPrintable(statuses.join(" | ")));
        QVERIFY2(worstGap < 50, qPrintable(QString("the event loop stalled for %1 ms").arg(worstGap)));
        QVERIFY(!bench.engine().busy());
        const auto pair = loaded.first().at(1).value<std::shared_ptr<const app::LoadedPair>>();
        QCOMPARE(pair->a.config.numLayers, 4);
        QCOMPARE(pair->b.config.numLayers, 6);
        QCOMPARE(pair->a.fingerprint.size(), 64);
        QVERIFY(w.findChild<QLabel *>("deviceLabel")->text().contains("cpu"));
        QVERIFY(w.findChild<QLabel *>("statusLabel")->text().startsWith("Loaded in"));
        // both cards, geometry differences flagged
        auto *card = w.modelCard();
        bool differs = false;
        for (int r = 0; r < card->rowCount(); ++r)
            differs = differs || card->index(r, 1).data(ui::ModelCardModel::GeometryDiffersRole).toBool();
        QVERIFY(differs);
        for (int r = 0; r < card->rowCount(); ++r) // what only a loaded model tells
            if (card->index(r, 0).data().toString() == "Tokenizer")
                QVERIFY2(card->index(r, 2).data().toString().startsWith("sentencepiece, 1024 pieces"),
                         qPrintable(card->index(r, 2).data().toString()));
            else if (card->index(r, 0).data().toString() == "Weights sha256")
                QCOMPARE(card->index(r, 1).data(Qt::ToolTipRole).toString(), pair->a.fingerprint);
        QTest::qWait(50); // let the status bar lay out its new texts before the screenshot
        QVERIFY(w.grab().save(screenshotDir() + "/main_window.png"));

        // a cancelled load says so and frees the panel
        QSignalSpy cancelledLoad(&bench.engine(), &app::EngineController::cancelled);
        panel->findChild<QPushButton *>("loadButton")->click();
        panel->findChild<QPushButton *>("cancelButton")->click();
        QVERIFY(cancelledLoad.wait(30000));
        QVERIFY(status->text().contains("cancelled"));
        QVERIFY(panel->findChild<QPushButton *>("loadButton")->isEnabled());
        QVERIFY(!panel->findChild<QPushButton *>("cancelButton")->isEnabled());

        // a failure reaches the window as a message that names the path
        panel->findChild<QLineEdit *>("pathA")->setText("/nonexistent/model");
        QSignalSpy failed(&bench.engine(), &app::EngineController::failed);
        panel->findChild<QPushButton *>("loadButton")->click();
        QVERIFY(failed.wait(30000));
        QVERIFY2(failed.first().at(1).toString().contains("/nonexistent/model"),
                 qPrintable(failed.first().at(1).toString()));
        QVERIFY(w.findChild<QLabel *>("statusLabel")->text().contains("/nonexistent/model"));
        QVERIFY(w.findChild<QPushButton *>("loadButton")->isEnabled());
    }

    // The engine thread reads an experiment file's tables for the panels; a bad path is a message.
    void readsAnExperimentSnapshot()
    {
        QTemporaryDir tmp;
        const std::filesystem::path path = tmp.path().toStdString() + "/e.h5";
        writeSmallExperiment(path);
        app::EngineController engine;
        QSignalSpy read(&engine, &app::EngineController::experimentRead);
        engine.readExperiment(QString::fromStdString(path.string()));
        QVERIFY(read.wait(30000));
        const auto snap = read.first().at(1).value<std::shared_ptr<const app::ExperimentSnapshot>>();
        QCOMPARE(snap->prompts, 1);
        QCOMPARE(snap->tokensA, int64_t(3));
        QCOMPARE(snap->sweeps.size(), size_t(1));
        QCOMPARE(snap->sweeps[0].second.rows.size(), size_t(2));
        QCOMPARE(snap->ledgers.size(), size_t(1));
        QCOMPARE(snap->ledgers[0].second.at(0).requestId, int64_t(7));
        QVERIFY(snap->converters.empty());
        QSignalSpy failed(&engine, &app::EngineController::failed);
        engine.readExperiment(tmp.path() + "/missing.h5");
        QVERIFY(failed.wait(30000));
        QVERIFY(failed.first().at(1).toString().contains("missing.h5"));
        QVERIFY(!engine.busy());
    }

    // The Alignment and Replay panels show an experiment snapshot: every converter's per-layer
    // table, heatmaps and sweep curves, every ledger's charts, summary and filterable rows.
    void panelsShowAnExperiment()
    {
        auto snap = std::make_shared<ui::ExperimentSnapshot>();
        snap->path = "demo.h5";
        snap->a.config = core::randomModelPreset("demo-a").config;
        snap->b.config = core::randomModelPreset("demo-b").config;
        const int la = snap->a.config.numLayers, lb = snap->b.config.numLayers,
                  heads = snap->b.config.numKvHeads;
        core::ConverterRecord c;
        c.name = "all";
        c.selection = "all";
        c.k = la;
        c.lambdaMode = "auto";
        c.trainTokens = 77805;
        c.layerMetrics.columns = {"layer", "r2_k", "r2_v", "attn_cos"};
        c.headMetrics.columns = {"layer", "head", "r2_k", "attn_cos"};
        for (int l = 0; l < lb; ++l) {
            c.layerMetrics.rows.push_back({double(l), 0.6 + 0.02 * l, 0.5 - 0.01 * l, 0.7});
            for (int h = 0; h < heads; ++h)
                c.headMetrics.rows.push_back({double(l), double(h), 0.5 + 0.05 * h, 0.6 + 0.03 * l});
        }
        for (core::Matrix *m : {&c.ckaKeys, &c.ckaValues}) {
            m->rows = lb;
            m->cols = la;
            for (int i = 0; i < lb * la; ++i)
                m->data.push_back(0.2 + 0.7 * ((i % la) == (i / la) * (la - 1) / (lb - 1) ? 1.0 : 0.1));
        }
        snap->converters.push_back(c);
        core::MetricTable sweep{{"k", "lambda", "train_tokens", "r2_k", "attn_cos"}, {}};
        for (int k = 1; k <= 4; ++k)
            for (double lambda : {1e-3, 1e-1})
                sweep.rows.push_back(
                    {double(k), lambda, 77805, 0.45 + 0.04 * k - lambda, 0.5 + 0.05 * k - lambda});
        snap->sweeps.push_back({"k-lambda", sweep});
        std::vector<core::LedgerRow> rows;
        for (int i = 0; i < 400; ++i) {
            core::LedgerRow r;
            r.requestId = i;
            r.tenant = "t" + std::to_string(i % 3);
            r.model = i % 2 ? core::ModelRole::B : core::ModelRole::A;
            r.intent = "n" + std::to_string(i % 17);
            r.tierHits[core::TierKind::Exact] = i % 7 == 0;
            if (i % 7 != 0)
                r.tierHits[core::TierKind::Prefix] = i > 20;
            r.answeredBy = i % 7 == 0 ? core::TierKind::Exact
                           : i > 20   ? core::TierKind::Prefix
                                      : core::TierKind::None;
            r.promptTokens = 120;
            r.tokensReused = r.answeredBy == core::TierKind::None ? 0 : 96;
            r.ttftMs = r.answeredBy == core::TierKind::Exact    ? 0.01
                       : r.answeredBy == core::TierKind::Prefix ? 3
                                                                : 8;
            rows.push_back(r);
        }
        snap->ledgers.push_back({"run", rows});

        app::Workbench bench;
        auto &w = bench.window();
        w.resize(1400, 900);
        w.show();
        w.showExperiment(snap);
        auto *align = w.alignmentPanel();
        QCOMPARE(align->currentConverter(), 0);
        QCOMPARE(align->layerTable()->rowCount(), lb);
        // the headline scores come right after the layer, whatever order the record keeps
        QCOMPARE(align->layerTable()->headerData(1, Qt::Horizontal).toString(), QString("Attention cos"));
        QCOMPARE(align->layerTable()->headerData(2, Qt::Horizontal).toString(),
                 QString::fromUtf8("R\u00b2 K"));
        // the project panel's step guide lists every step of the navigator
        for (const QString &step :
             {"Models", "Capture", "Alignment", "Compare", "Replay", "Knowledge", "Report"})
            QVERIFY2(w.findChild<QLabel *>("projectSummary")->text().contains("<b>" + step + "</b>"),
                     qPrintable(step));
        QCOMPARE(align->layerChart()->series().size(), 3);
        QVERIFY(!align->sweepChart()->series().isEmpty());
        auto *replay = w.replayPanel();
        QCOMPARE(replay->ledger()->rowCount(), 400);
        QVERIFY(replay->summaryText().contains("400 requests"));
        replay->filter()->setAnsweredBy(core::TierKind::Exact);
        QCOMPARE(replay->filter()->rowCount(), 58); // i % 7 == 0 for i < 400
        QCOMPARE(replay->findChild<QLabel *>("ledgerRowCount")->text(), QString("58 of 400 rows"));
        replay->filter()->setAnsweredBy(std::nullopt);
        QCOMPARE(replay->findChild<QLabel *>("ledgerRowCount")->text(), QString("400 rows"));
        // a stored ledger is never replaced silently: its name is refused before the replay starts
        QSignalSpy started(replay, &ui::ReplayPanel::replayRequested);
        replay->setWorkloads({"w.jsonl"});
        replay->setModelsLoaded(true);
        replay->findChild<QLineEdit *>("ledgerNameEdit")->setText("run");
        replay->findChild<QPushButton *>("startButton")->click();
        QCOMPARE(started.count(), 0);
        QVERIFY2(replay->statusText().contains("already holds a ledger 'run'"),
                 qPrintable(replay->statusText()));
        QCoreApplication::processEvents();
        for (auto [widget, name] :
             {std::pair<QWidget *, const char *>{align, "alignment_panel"}, {replay, "replay_panel"}}) {
            widget->resize(1200, 800);
            QTest::qWait(100); // charts drop the axes they replaced on the next turns of the event loop
            QVERIFY(widget->grab().save(screenshotDir() + "/" + name + ".png"));
        }
    }

    // The whole workflow through the real engine on the demo pair: load, capture a few prompts,
    // fit a converter, compare one prompt three ways, replay part of the demo workload through
    // all four tiers (with pause and resume), export the report; the GUI answers within 50 ms
    // throughout, every panel shows what came back, and screenshots of each panel are saved.
    // The whole workflow at a laptop's 1366x768 and at 1920x1080: each step's page fits with its
    // results in it (no horizontal scrollbar, every button in view) and its buttons stay where
    // they were when its job starts.
    void capturesFitsComparesAndReplaysThroughTheEngine_data()
    {
        QTest::addColumn<QSize>("size");
        QTest::newRow("1366x768") << QSize(1366, 768);
        QTest::newRow("1920x1080") << QSize(1920, 1080);
    }
    void capturesFitsComparesAndReplaysThroughTheEngine()
    {
        QFETCH(QSize, size);
        const QString tag = QString("%1x%2").arg(size.width()).arg(size.height());
        QTemporaryDir tmp;
        const QString exp = tmp.path() + "/workbench.h5";
        const QString workload =
            QString::fromStdString((test::sourceDir() / "projects/demo/workloads/demo.jsonl").string());
        app::Workbench bench;
        auto &engine = bench.engine();
        auto &w = bench.window();
        QVERIFY(
            w.openProject(QString::fromStdString((test::sourceDir() / "projects/demo/demo.kvwb").string())));
        w.resize(size.width(), size.height() - 30); // the title bar's share of the screen
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QTest::qWait(100);
        StallMeter stalls(engine);
        // shows step, checks that it fits, and returns where its buttons are
        // the user opens the step once the last job is done: its first paint is not a job's stall
        const auto enter = [&](const QString &step) {
            QTest::qWaitFor([&] { return !engine.busy(); }, 60000);
            w.showStep(step);
            QTest::qWait(50);
            return std::make_pair(layoutFault(w, step, tag), buttonPlaces(w, step));
        };
        // the step with its results in it: still fits; a screenshot of it
        const auto left = [&](const QString &step, const QString &shot = {}) {
            QTest::qWait(30);
            const QString file =
                screenshotDir() + QString("/workflow_%1_%2.png").arg(tag, shot.isEmpty() ? step : shot);
            return w.grab().save(file) ? layoutFault(w, step, tag) : "cannot write " + file;
        };

        QSignalSpy loaded(&engine, &app::EngineController::modelsLoaded);
        auto [fault, places] = enter("models");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        w.modelsPanel()->findChild<QPushButton *>("loadButton")->click();
        QVERIFY(engine.busy());
        QString moved = movedButton(w, places, "models at " + tag + ", loading");
        QVERIFY2(moved.isEmpty(), qPrintable(moved));
        QVERIFY(loaded.wait(60000));
        fault = left("models");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));

        // capture: 48 prompts of the demo workload into a new file
        QSignalSpy failed(&engine, &app::EngineController::failed);
        QSignalSpy read(&engine, &app::EngineController::experimentRead);
        QSignalSpy captured(&engine, &app::EngineController::captured);
        auto *capture = w.capturePanel();
        ui::CaptureRequest cr = capture->request();
        QCOMPARE(cr.promptsPath, workload); // the project's workload is offered as a prompt set
        cr.outPath = exp;
        cr.limit = 48;
        cr.maxTokens = 160;
        capture->setRequest(cr);
        std::tie(fault, places) = enter("capture");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        child<QPushButton>(capture, "captureButton")->click();
        QVERIFY(engine.busy());
        QTest::qWait(30);
        moved = movedButton(w, places, "capture at " + tag + ", capturing");
        QVERIFY2(moved.isEmpty(), qPrintable(moved));
        QVERIFY(captured.wait(120000));
        const auto cs = captured.first().at(1).value<std::shared_ptr<const ui::CaptureSummary>>();
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().at(1).toString()));
        QCOMPARE(cs->promptsWritten, 48);
        QCOMPARE(cs->promptsInFile, 48);
        QVERIFY(!cs->appended && !cs->cancelled);
        QCOMPARE(cs->layersA, 4);
        QCOMPARE(cs->layersB, 6);
        QVERIFY(cs->tokensA > 48 * 20 && cs->tokensA == cs->tokensB); // one shared tokenizer
        QCOMPARE(cs->fileBytes, qint64(QFileInfo(exp).size()));
        QVERIFY(capture->summaryText().contains("48"));
        QVERIFY(read.wait(30000)); // the window re-reads the file it captured into
        QCOMPARE(w.experimentPath(), exp);
        QString inFile; // the Capture panel's "In the file" table, from the file itself
        auto *fileTable = child<QTableWidget>(capture, "fileTable");
        for (int i = 0; i < fileTable->rowCount(); ++i)
            inFile += fileTable->item(i, 0)->text() + ": " + fileTable->item(i, 1)->text() + "\n";
        QVERIFY2(inFile.contains("Storage: f16") && inFile.contains("Prompts: 48"), qPrintable(inFile));
        QCOMPARE(QString::fromStdString(w.project()->experiment->string()), exp);
        fault = left("capture");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));

        // fit: all A layers, fixed lambda; the first converter becomes the one in use
        QSignalSpy fitted(&engine, &app::EngineController::fitted);
        auto *align = w.alignmentPanel();
        core::FitSettings fr = align->fitRequest();
        QCOMPARE(QString::fromStdString(fr.experiment), exp);
        fr.name = "gui";
        fr.selection = core::LayerSelection::All;
        fr.k = 4;
        align->setFitRequest(fr);
        read.clear();
        std::tie(fault, places) = enter("alignment");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        child<QPushButton>(align, "fitButton")->click();
        QTest::qWait(30);
        moved = movedButton(w, places, "alignment at " + tag + ", fitting");
        QVERIFY2(moved.isEmpty(), qPrintable(moved));
        QVERIFY(fitted.wait(120000));
        const auto fs = fitted.first().at(1).value<std::shared_ptr<const ui::FitSummary>>();
        QVERIFY(!fs->cancelled);
        QVERIFY2(fs->meanR2K > 0.2 && fs->meanR2K < 1, qPrintable(QString::number(fs->meanR2K)));
        QVERIFY(fs->meanAttnCos > 0.2); // B is loaded: attention-output cosine is computed
        QVERIFY(read.wait(30000));
        QCOMPARE(align->inUse(), QString("gui"));
        QCOMPARE(align->layerTable()->rowCount(), 6);
        QCOMPARE(core::listConverters(exp.toStdString()), std::vector<std::string>{"gui"});
        fault = left("alignment");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));

        // a converter sweep from the step (kvwb sweep): stored, read back and drawn; a name in use
        // is refused before anything runs
        QSignalSpy swept(&engine, &app::EngineController::convertersSwept);
        read.clear();
        child<QLineEdit>(align, "sweepKsEdit")->setText("1,2");
        child<QLineEdit>(align, "sweepLambdasEdit")
            ->setText("0.01,0.1"); // the fit group says all layers: k is moot
        child<QLineEdit>(align, "sweepNameEdit")->setText("gui-sweep");
        child<QPushButton>(align, "runSweepButton")->click();
        QVERIFY(swept.wait(120000));
        const auto ss = swept.first().at(1).value<std::shared_ptr<const ui::ConverterSweepSummary>>();
        QVERIFY(!ss->cancelled);
        QCOMPARE(ss->rows, 2);
        QVERIFY(read.wait(30000));
        QCoreApplication::processEvents();
        QCOMPARE(core::listTables(exp.toStdString()), std::vector<std::string>{"gui-sweep"});
        QCOMPARE(child<QComboBox>(align, "sweepCombo")->currentText(), QString("gui-sweep"));
        QVERIFY(!align->sweepChart()->series().isEmpty());
        child<QPushButton>(align, "runSweepButton")->click();
        QVERIFY2(align->fitStatusText().contains("already holds a sweep 'gui-sweep'"),
                 qPrintable(align->fitStatusText()));
        QVERIFY(!engine.busy());
        fault = left("alignment");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));

        // compare one prompt three ways; the sample is stored in the experiment
        QSignalSpy compared(&engine, &app::EngineController::compared);
        auto *cmp = w.comparePanel();
        core::CompareSettings q = cmp->request();
        QCOMPARE(q.converter, std::string("gui"));
        q.prompt = "What is the meaning of the word \"harbor\"?";
        q.maxTokens = 16;
        cmp->setRequest(q);
        std::tie(fault, places) = enter("compare");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        child<QPushButton>(cmp, "runButton")->click();
        QTest::qWait(30);
        moved = movedButton(w, places, "compare at " + tag + ", comparing");
        QVERIFY2(moved.isEmpty(), qPrintable(moved));
        QVERIFY(compared.wait(60000));
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().at(1).toString()));
        const auto sample = compared.first().at(1).value<std::shared_ptr<const ui::CompareResult>>();
        QVERIFY(!sample->scratch.ids.empty());
        QCOMPARE(sample->transfer.kl.size(), sample->scratch.ids.size());
        QVERIFY(sample->meanKl < sample->klNoPrefix); // the converted cache beats no prefix at all
        QVERIFY(cmp->statsText(2).contains("TTFT"));
        QVERIFY(cmp->paneHtml(1).contains(
            QString::fromStdString(sample->scratch.pieces.front()).trimmed().toHtmlEscaped()));
        QTRY_VERIFY(!engine.busy());
        const auto stored = core::loadComparisons(exp.toStdString(), "workbench");
        QCOMPARE(int(stored.size()), 1);
        QCOMPARE(stored.front().transfer.ids, sample->transfer.ids);
        fault = left("compare");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        // the converter's held-out prompts with the baselines: the summary with paired intervals
        QSignalSpy comparedSet(&engine, &app::EngineController::comparedSet);
        core::CompareSettings sr = cmp->promptSetRequest();
        QVERIFY(sr.promptsFile.empty() && sr.heldOut); // the held-out prompts unless a file is typed
        QCOMPARE(sr.converter, std::string("gui"));
        QVERIFY(sr.baselines);
        sr.limit = 3;
        sr.maxTokens = 4;
        cmp->setPromptSetRequest(sr);
        QVERIFY(cmp->setSummaryText().isEmpty());
        std::tie(fault, places) = enter("compare");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        child<QPushButton>(cmp, "runSetButton")->click();
        QVERIFY(engine.busy());
        QTest::qWait(30);
        moved = movedButton(w, places, "compare at " + tag + ", comparing the held-out prompts");
        QVERIFY2(moved.isEmpty(), qPrintable(moved));
        QVERIFY(comparedSet.wait(120000));
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().at(1).toString()));
        const auto set = comparedSet.first().at(1).value<std::shared_ptr<const ui::CompareSetSummary>>();
        QCOMPARE(set->set.prompts, 3);
        QVERIFY(!set->cancelled);
        const auto &gap = set->set.klGapClosed;
        QVERIFY(gap && gap->lo <= gap->estimate && gap->estimate <= gap->hi);
        // the random map and the shuffled positions always; the raw source KV only when the KV rows
        // are equally wide (else a warning says why)
        const auto &others = set->set.others;
        QVERIFY(others.size() >= 2 && others[others.size() - 2].key == "random_map" &&
                others.back().key == "shuffled_positions");
        QVERIFY(others[others.size() - 2].klDifference && others.back().klDifference);
        QVERIFY(others.size() == 3 || set->warnings.join(' ').contains("no raw-source-KV baseline"));
        const QString setText = cmp->setSummaryText();
        QVERIFY2(setText.contains("3 of 3 held-out prompts with 'gui'") &&
                     setText.contains("KL gap closed") &&
                     setText.contains(QString::fromStdString(core::formatInterval(*gap))) &&
                     setText.contains("KL minus random map"),
                 qPrintable(setText));
        QVERIFY(child<QLabel>(cmp, "compareSetSummary")->isVisible());
        QTRY_VERIFY(!engine.busy());
        QVERIFY(child<QPushButton>(cmp, "runSetButton")->isEnabled());
        QCOMPARE(core::loadComparisons(exp.toStdString(), "workbench").size(), size_t(1)); // nothing stored
        fault = left("compare");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        // a comparison cancelled before it ends stores nothing and frees the panel
        QSignalSpy cancelled(&engine, &app::EngineController::cancelled);
        child<QPushButton>(cmp, "runButton")->click();
        child<QPushButton>(cmp, "cancelCompareButton")->click();
        QVERIFY(cancelled.wait(60000));
        QCOMPARE(compared.count(), 1);
        QTRY_VERIFY(!engine.busy());
        QVERIFY(child<QPushButton>(cmp, "runButton")->isEnabled());
        QCOMPARE(core::loadComparisons(exp.toStdString(), "workbench").size(), size_t(1));

        // replay 60 requests through all four tiers, paused once, ledger stored
        QSignalSpy rows(&engine, &app::EngineController::replayRows);
        QSignalSpy finished(&engine, &app::EngineController::replayFinished);
        auto *replay = w.replayPanel();
        core::ReplaySettings rr = replay->replayRequest();
        QCOMPARE(QString::fromStdString(rr.workload), workload);
        rr.tiers = {core::TierKind::Exact, core::TierKind::Semantic, core::TierKind::Prefix,
                    core::TierKind::Cross};
        rr.limit = 60;
        rr.maxTokens = 4;
        rr.ledgerName = "gui-run";
        replay->setReplayRequest(rr);
        QVERIFY(child<QCheckBox>(replay, "tierCross")->isEnabled()); // a converter is in use
        QCOMPARE(replay->replayRequest().converter, std::string("gui"));
        engine.replayBatchMs = 20; // several batches even on a fast machine
        auto *pause = child<QPushButton>(replay, "pauseButton");
        QSignalSpy progress(&engine, &app::EngineController::progress);
        std::tie(fault, places) = enter("replay");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        child<QPushButton>(replay, "startButton")->click();
        // paused before the engine picks the job up: it stops after the first request, every time
        QVERIFY(pause->isEnabled());
        pause->click();
        QTRY_VERIFY_WITH_TIMEOUT(std::any_of(progress.begin(), progress.end(),
                                             [](const QList<QVariant> &args) {
                                                 return args.at(2).toString() == "paused at 1 / 60 requests";
                                             }),
                                 60000);
        QVERIFY(engine.state().contains("paused"));
        const int before = replay->ledger()->rowCount();
        QTest::qWait(400);
        QCOMPARE(replay->ledger()->rowCount(), before); // nothing moves while paused
        QCOMPARE(before, 1);
        moved = movedButton(w, places, "replay at " + tag + ", replaying");
        QVERIFY2(moved.isEmpty(), qPrintable(moved));
        pause->click(); // resume
        QVERIFY(finished.wait(120000));
        const auto outcome = finished.first().at(1).value<std::shared_ptr<const app::ReplayOutcome>>();
        QVERIFY(!outcome->cancelled);
        QCOMPARE(outcome->requests, 60);
        QCOMPARE(outcome->storedLedger, QString("gui-run"));
        QVERIFY(rows.count() >= 2);
        QCOMPARE(replay->ledger()->rowCount(), 60);
        QCOMPARE(replay->charts()->requestCount(), 60);
        for (auto *series : replay->charts()->allSeries())
            QVERIFY2(series->count() > 0, qPrintable(series->name()));
        int crossLookups = 0;
        for (int r = 0; r < replay->ledger()->rowCount(); ++r)
            crossLookups += replay->ledger()->row(r).tierHits.count(core::TierKind::Cross) ? 1 : 0;
        QVERIFY(crossLookups > 0);
        QTRY_VERIFY(!engine.busy()); // the window re-reads the stored ledger
        QCOMPARE(core::loadLedger(exp.toStdString(), "gui-run").size(), size_t(60));
        fault = left("replay");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        // the Requests tab: the ledger gets the page (more than the 3 rows it had below the charts),
        // with each request's question and the answer the engine gave it
        replay->tabs()->setCurrentIndex(1);
        QTest::qWait(30);
        QTableView *ledgerView = replay->ledgerView();
        const int ledgerRows = ledgerView->viewport()->height() / ledgerView->rowHeight(0);
        QVERIFY2(ledgerRows >= 8, qPrintable(QString("%1 rows at %2").arg(ledgerRows).arg(tag)));
        for (int r = 0; r < replay->ledger()->rowCount(); ++r) {
            QVERIFY(!replay->ledger()->row(r).question.empty());
            QVERIFY(!replay->ledger()->row(r).answer.empty());
        }
        ledgerView->setCurrentIndex(ledgerView->model()->index(3, 0));
        QVERIFY2(replay->detailText().contains(QString::fromStdString(replay->ledger()->row(3).question)),
                 qPrintable(replay->detailText()));
        fault = left("replay", "replay_requests");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        replay->tabs()->setCurrentIndex(0);

        // the item models the panels show pass Qt's model checks
        QAbstractItemModelTester t1(replay->ledger(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        QAbstractItemModelTester t2(replay->filter(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        QAbstractItemModelTester t3(align->layerTable(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
        QAbstractItemModelTester t4(w.modelCard(), QAbstractItemModelTester::FailureReportingMode::QtTest);

        // the report holds the comparison and the ledger
        QSignalSpy written(&w, &ui::MainWindow::reportWritten);
        std::tie(fault, places) = enter("report");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        QVERIFY(w.exportReport(tmp.path() + "/report"));
        QVERIFY(written.wait(60000));
        fault = left("report");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        QFile html(tmp.path() + "/report/report.html");
        QVERIFY(html.open(QIODevice::ReadOnly));
        const QString page = QString::fromUtf8(html.readAll());
        QVERIFY(page.contains("Comparison samples"));
        QVERIFY(page.contains("gui-run"));
        QVERIFY(QFile::exists(tmp.path() + "/report/csv/comparisons.csv"));
        QJsonParseError err;
        QFile json(tmp.path() + "/report/report.json");
        QVERIFY(json.open(QIODevice::ReadOnly));
        QVERIFY(!QJsonDocument::fromJson(json.readAll(), &err).isNull());
        // Open report says why it cannot open a report that is gone (never silently nothing)
        QVERIFY(QFile::remove(tmp.path() + "/report/report.html"));
        QVERIFY(!w.openReport());
        QVERIFY2(child<QLabel>(&w, "reportStatus")->text().contains("report.html is gone"),
                 qPrintable(child<QLabel>(&w, "reportStatus")->text()));

        qInfo("longest event-loop pause while the engine worked: %lld ms (%s)", stalls.worstMs(),
              qPrintable(stalls.where()));
        // 250 ms: the engine must never hold the GUI thread (a blocking read or lock shows as
        // seconds). Repaints are the GUI's own cost: at 1920x1080 under the suite's parallel tests
        // one repaint of the compare or replay page took 80-137 ms on a 2-core machine (software
        // raster, offscreen), whatever the engine did.
        QVERIFY2(
            stalls.worstMs() < 250,
            qPrintable(
                QString("the event loop stalled for %1 ms while the engine worked").arg(stalls.worstMs())));
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.first().at(1).toString()));
    }

    // Cancelling a capture keeps the prompts already written; a second job while one runs is refused.
    void cancelsACaptureAndRefusesASecondJob()
    {
        QTemporaryDir tmp;
        app::Workbench bench;
        auto &engine = bench.engine();
        auto &w = bench.window();
        QVERIFY(
            w.openProject(QString::fromStdString((test::sourceDir() / "projects/demo/demo.kvwb").string())));
        QSignalSpy loaded(&engine, &app::EngineController::modelsLoaded);
        w.modelsPanel()->findChild<QPushButton *>("loadButton")->click();
        QVERIFY(loaded.wait(60000));
        auto *capture = w.capturePanel();
        ui::CaptureRequest cr = capture->request();
        cr.outPath = tmp.path() + "/cancelled.h5";
        capture->setRequest(cr);
        QSignalSpy progress(&engine, &app::EngineController::progress);
        QSignalSpy captured(&engine, &app::EngineController::captured);
        QSignalSpy failed(&engine, &app::EngineController::failed);
        child<QPushButton>(capture, "captureButton")->click();
        auto *load = w.modelsPanel()->findChild<QPushButton *>("loadButton");
        QVERIFY(!load->isEnabled());                             // no loading while another job runs
        QCOMPARE(engine.readExperiment(cr.outPath), quint64(0)); // busy: refused
        QCOMPARE(failed.count(), 1);
        QVERIFY(failed.first().at(1).toString().contains("busy"));
        QVERIFY(progress.wait(30000));
        child<QPushButton>(capture, "cancelCaptureButton")->click();
        QVERIFY(captured.wait(60000));
        const auto cs = captured.first().at(1).value<std::shared_ptr<const ui::CaptureSummary>>();
        QVERIFY(cs->cancelled);
        QTRY_VERIFY(load->isEnabled());
        QVERIFY(cs->promptsWritten >= 1 && cs->promptsWritten < 1000);
        QCOMPARE(cs->promptsInFile, cs->promptsWritten);
        QVERIFY(
            capture->summaryText().contains("cancel", Qt::CaseInsensitive) ||
            capture->findChild<QLabel *>("captureStatus")->text().contains("cancel", Qt::CaseInsensitive));
    }

    // File > Export Report: the engine gathers the data, the window draws and writes every format.
    void exportsAReportFromTheWindow()
    {
        QTemporaryDir tmp;
        const std::filesystem::path path = tmp.path().toStdString() + "/e.h5";
        writeSmallExperiment(path);
        app::Workbench bench;
        auto &w = bench.window();
        QVERIFY(!w.exportReport(tmp.path() + "/none")); // no experiment shown yet
        QSignalSpy read(&bench.engine(), &app::EngineController::experimentRead);
        Q_EMIT w.experimentRequested(QString::fromStdString(path.string()));
        QVERIFY(read.wait(30000));
        QSignalSpy written(&w, &ui::MainWindow::reportWritten);
        QVERIFY(w.exportReport(tmp.path() + "/report"));
        QVERIFY(written.wait(60000));
        const QStringList files = written.first().at(0).toStringList();
        for (const char *name : {"report.html", "report.pdf", "report.md", "report.json"})
            QVERIFY2(files.contains(tmp.path() + "/report/" + name), name);
        QFile json(tmp.path() + "/report/report.json");
        QVERIFY(json.open(QIODevice::ReadOnly));
        QVERIFY(!QJsonDocument::fromJson(json.readAll()).isNull());
    }

    // A kvwb/1 file is refused with an offer to upgrade it; accepting upgrades and reads it.
    void offersToUpgradeAnOldExperiment()
    {
        QTemporaryDir tmp;
        const std::filesystem::path path = tmp.path().toStdString() + "/old.h5";
        writeSmallExperiment(path);
        test::downgradeToKvwb1(path);
        app::Workbench bench;
        auto &w = bench.window();
        QSignalSpy failed(&bench.engine(), &app::EngineController::failed);
        Q_EMIT w.experimentRequested(QString::fromStdString(path.string()));
        QVERIFY(failed.wait(30000));
        QVERIFY2(failed.first().at(1).toString().contains("kvwb upgrade"),
                 qPrintable(failed.first().at(1).toString()));
        QMessageBox *box = nullptr;
        QTRY_VERIFY((box = w.findChild<QMessageBox *>("upgradeExperimentBox")) != nullptr);
        QSignalSpy read(&bench.engine(), &app::EngineController::experimentRead);
        box->button(QMessageBox::Yes)->click();
        QVERIFY(read.wait(30000));
        const auto snap = read.first().at(1).value<std::shared_ptr<const app::ExperimentSnapshot>>();
        QCOMPARE(snap->prompts, 1);
        QCOMPARE(snap->ledgers.size(), size_t(1));
        QCOMPARE(core::ExperimentReader::open(path).schema(), std::string(core::kExperimentSchema));
    }

    void panelsHaveUniqueNamesAndTheLayoutResets()
    {
        app::Workbench bench;
        auto &w = bench.window();
        w.show();
        QSet<QString> names;
        for (auto *d : w.docks()) {
            QVERIFY(!d->objectName().isEmpty());
            names.insert(d->objectName());
        }
        QCOMPARE(names.size(), w.docks().size());
        QCOMPARE(names, (QSet<QString>{"projectDock", "logDock"}));
        QCOMPARE(w.steps(),
                 (QStringList{"models", "capture", "alignment", "compare", "replay", "knowledge", "report"}));
        for (const QString &step : w.steps()) {
            QVERIFY2(w.stepPage(step), qPrintable(step));
            w.showStep(step);
            QCOMPARE(w.currentStep(), step);
        }
        QVERIFY(w.findChild<QLabel *>("memoryLabel")->text().startsWith("memory: "));
        auto *dock = w.findChild<QDockWidget *>("logDock");
        dock->hide();
        QVERIFY(dock->isHidden());
        w.resetLayout();
        QVERIFY(!dock->isHidden());
        // the first size follows the screen: a laptop's free area holds the whole window, a large
        // screen gives the content the room
        for (const QSize available :
             {QSize(1366, 740), QSize(1280, 720), QSize(1920, 1050), QSize(2560, 1400)}) {
            const QSize s = ui::MainWindow::initialSize(available);
            QVERIFY(s.width() <= available.width() && s.height() <= available.height());
            QVERIFY(s.width() >= std::min(1600, available.width() - 24));
        }
    }

    // The window at a laptop's 1366x768 and at 1920x1080 on every step, the demo project open: no
    // page needs a horizontal scrollbar, every button of the step is fully in view, and no control
    // moves when its job starts (busy, progress and a long stage text shown). Screenshots of each
    // step at each size go to screenshots/.
    void fitsTheScreenOnEveryStep_data()
    {
        QTest::addColumn<QSize>("size");
        QTest::newRow("1366x768") << QSize(1366, 768);
        QTest::newRow("1920x1080") << QSize(1920, 1080);
    }
    void fitsTheScreenOnEveryStep()
    {
        QFETCH(QSize, size);
        app::Workbench bench;
        auto &w = bench.window();
        QVERIFY(
            w.openProject(QString::fromStdString((test::sourceDir() / "projects/demo/demo.kvwb").string())));
        w.resize(size.width(), size.height() - 30); // the title bar's share of the screen
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        const QString tag = QString("%1x%2").arg(size.width()).arg(size.height());
        const QString longStage =
            "prompt 137/200: 'a rather long prompt text that the stage line must not widen the panel with'";
        for (const QString &step : w.steps()) {
            w.showStep(step);
            QTest::qWait(30);
            const QString fault = layoutFault(w, step, tag);
            QVERIFY2(fault.isEmpty(), qPrintable(fault));
            // an idle, empty progress bar reads as a text field: none is shown
            QWidget *page = w.stepPage(step)->widget();
            for (auto *bar : page->findChildren<QProgressBar *>())
                QVERIFY2(!bar->isVisibleTo(page) || bar->value() > bar->minimum(),
                         qPrintable(QString("%1 at %2: the empty progress bar '%3' is shown while idle")
                                        .arg(step, tag, bar->objectName())));
            const auto before = buttonPlaces(w, step);
            QVERIFY(w.grab().save(screenshotDir() + QString("/layout_%1_%2.png").arg(tag, step)));
            // a job starts: every panel goes busy, the step's own shows progress and its stage
            w.setEngineBusy(true);
            w.modelsPanel()->setProgress(0.4, longStage);
            w.capturePanel()->setProgress(0.4, longStage);
            w.alignmentPanel()->setFitProgress(0.4, longStage);
            w.comparePanel()->setProgress(0.4, longStage);
            w.replayPanel()->setReplayProgress(40, 100);
            QTest::qWait(30);
            const QString moved = movedButton(w, before, step + " at " + tag);
            QVERIFY2(moved.isEmpty(), qPrintable(moved));
            if (step == "capture" || step == "replay")
                QVERIFY(w.grab().save(screenshotDir() + QString("/layout_%1_%2_busy.png").arg(tag, step)));
            w.setEngineBusy(false);
        }
        // the Compare step with a sample and a prompt set that carry expected answers (kvwb corpus
        // context): their lines wrap inside the page
        {
            w.showStep("compare");
            const auto path = [](const std::vector<std::string> &pieces) {
                core::ComparisonPath p;
                for (const auto &piece : pieces) {
                    p.ids.push_back(int(p.ids.size()));
                    p.pieces.push_back(piece);
                    p.logprobs.push_back(-0.5f);
                    p.text += piece;
                }
                return p;
            };
            ui::CompareResult r;
            r.prompt = "Ivan has a horse called Felix. Tom has a goat called Max. Tom's goat is called";
            r.converter = "defaults";
            r.a = path({" Felix", "."});
            r.scratch = path({" Max", ".", " He", " likes", " apples", "."});
            r.transfer = path({" Max", ".", " He", " likes", " grass", "."});
            r.transfer.kl = {0.01, 0.02, 0.05, 0.1, 1.2, 0.1};
            r.firstDivergence = 4;
            r.gateSignal = "tail_kl";
            r.gateThreshold = 0.1;
            r.expectedAnswer = "Max";
            w.comparePanel()->showResult(r);
            QTest::qWait(30);
            QString fault = layoutFault(w, "compare", tag + " with an expected answer");
            QVERIFY2(fault.isEmpty(), qPrintable(fault));
            QVERIFY(w.grab().save(screenshotDir() + QString("/layout_%1_compare_answer.png").arg(tag)));
            ui::CompareSetSummary set;
            set.converter = "defaults";
            set.source = "context-names.jsonl";
            set.set.prompts = set.requested = 100;
            set.set.klGapClosed = core::Interval{0.928, 0.917, 0.937};
            set.set.answered = 100;
            set.set.answerScratch = 0.427;
            set.set.answerTransfer = 0.333;
            set.set.answerA = 0.293;
            set.set.answerDifference = core::Interval{-0.093, -0.167, -0.013};
            w.comparePanel()->showSetSummary(set);
            QTest::qWait(30);
            fault = layoutFault(w, "compare", tag + " with a set's answers");
            QVERIFY2(fault.isEmpty(), qPrintable(fault));
            QVERIFY(w.grab().save(screenshotDir() + QString("/layout_%1_compare_set_answers.png").arg(tag)));
        }
        // the check sees a label past the right edge and one squeezed below its text's width
        w.showStep("compare");
        QWidget *content = w.stepPage("compare")->widget();
        {
            QLabel past("a label past the edge", content);
            past.setGeometry(w.stepPage("compare")->viewport()->width() - 20, 5, 120, 20);
            past.show();
            QVERIFY(layoutFault(w, "compare", tag).contains("is outside the"));
        }
        {
            QLabel cut("a label whose text does not fit in forty pixels", content);
            cut.setGeometry(10, 5, 40, 20);
            cut.show();
            QVERIFY(layoutFault(w, "compare", tag).contains("its text is cut"));
        }
        QVERIFY(layoutFault(w, "compare", tag).isEmpty());
    }

    // Long tooltips are wrapped paragraphs that stay on the screen, not one line across it.
    void longToolTipsStayOnTheScreen()
    {
        app::Workbench bench;
        auto &w = bench.window();
        w.resize(1366, 738);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        w.showStep("replay");
        QWidget *target = nullptr;
        for (auto *x : w.replayPanel()->findChildren<QWidget *>())
            if (x->isVisible() && x->toolTip().size() > 150 && !Qt::mightBeRichText(x->toolTip()))
                target = x;
        QVERIFY(target);
        // at the right edge of the screen, where a one-line tip would run off it
        const QRect screen = w.screen()->geometry();
        const QPoint at(screen.right() - 20, screen.top() + 200);
        QHelpEvent help(QEvent::ToolTip, target->mapFromGlobal(at), at);
        QApplication::sendEvent(target, &help);
        QWidget *tip = nullptr;
        QTRY_VERIFY((tip = [] {
                        for (QWidget *top : QApplication::topLevelWidgets())
                            if (top->inherits("QTipLabel") && top->isVisible())
                                return top;
                        return static_cast<QWidget *>(nullptr);
                    }()) != nullptr);
        QVERIFY2(screen.contains(tip->geometry()), qPrintable(QString("tip at %1,%2 %3x%4")
                                                                  .arg(tip->x())
                                                                  .arg(tip->y())
                                                                  .arg(tip->width())
                                                                  .arg(tip->height())));
        QVERIFY2(tip->width() <= 720, qPrintable(QString::number(tip->width())));
        QVERIFY(tip->height() > tip->fontMetrics().height() * 2); // wrapped onto several lines
        QCOMPARE(ui::wrappedToolTip("short"), QString("short"));
        QVERIFY(ui::wrappedToolTip(QString(80, 'x') + " if a < b && c")
                    .startsWith("<p style='white-space:pre-wrap'>"));
        QVERIFY(ui::wrappedToolTip(QString(80, 'x') + " if a < b && c").contains("a &lt; b &amp;&amp; c"));
    }

    // A project remembers its work: an experiment Capture wrote beside it (its default name) before
    // the project was saved is found on opening; the title's unsaved marker follows changes; saving
    // stores the experiment, the converter in use and the Compare prompt, and reopening restores
    // them with the experiment's converters, comparisons and ledgers.
    void reopensASavedProjectsWork()
    {
        QTemporaryDir tmp;
        const QString demo = QString::fromStdString((test::sourceDir() / "projects/demo/demo.kvwb").string());
        const QString mine = tmp.path() + "/mine.kvwb";
        {
            app::Workbench first;
            QVERIFY(first.window().openProject(demo));
            QVERIFY(!first.window().isProjectModified());
            QVERIFY(first.window().saveProject(mine));
        }
        const std::filesystem::path exp = tmp.path().toStdString() + "/mine-experiment.h5";
        writeSmallExperiment(exp);
        const auto c = core::randomModelPreset("tiny").config;
        core::ConverterRecord conv = test::identityConverter(c);
        conv.name = "mine";
        conv.selection = "all";
        conv.lambdaMode = "fixed";
        core::saveConverters(exp, conv);
        core::ComparisonSample sample;
        sample.prompt = "What does a KV cache hold?";
        sample.converter = "mine";
        core::saveComparisons(exp, "workbench", {sample});

        const auto open = [&](app::Workbench &bench) {
            QSignalSpy read(&bench.engine(), &app::EngineController::experimentRead);
            if (!bench.window().openProject(mine) || !read.wait(30000))
                return false;
            QCoreApplication::processEvents(); // the window shows what the engine read
            return true;
        };
        {
            app::Workbench second;
            auto &w = second.window();
            QVERIFY(open(second));
            QCOMPARE(w.experimentPath(), QString::fromStdString(exp.string()));
            QVERIFY(w.findChild<QLabel *>("projectSummary")->text().contains("mine-experiment.h5"));
            QCOMPARE(w.alignmentPanel()->inUse(), QString("mine"));
            QVERIFY(w.isProjectModified()); // the experiment found beside it is not in the file yet
            auto request = w.comparePanel()->request();
            request.prompt = "Explain prefix caching in one sentence.";
            w.comparePanel()->setRequest(request);
            QVERIFY(w.isProjectModified());
            // the prompt set row and the gate (every input the Compare step uses)
            auto set = w.comparePanel()->promptSetRequest();
            set.promptsFile = (tmp.path() + "/questions.txt").toStdString();
            set.limit = 7;
            set.baselines = true;
            set.gateSignal = core::GateSignal::KvCos;
            set.gateThreshold = 0.85;
            set.recompute.share = 0.25;
            w.comparePanel()->setPromptSetRequest(set);
            // the Knowledge step's graph in use by the replay's knowledge tier (Use in replays)
            w.replayPanel()->setKnowledgeAvailable(tmp.path() + "/kg.h5", tmp.path() + "/users.json");
            QVERIFY(w.saveProject(mine));
            QVERIFY(!w.isProjectModified());
        }
        app::Workbench third;
        auto &w = third.window();
        QVERIFY(open(third));
        QVERIFY(!w.isProjectModified());
        QCOMPARE(w.experimentPath(), QString::fromStdString(exp.string()));
        QCOMPARE(w.alignmentPanel()->inUse(), QString("mine"));
        QCOMPARE(w.comparePanel()->request().prompt, std::string("Explain prefix caching in one sentence."));
        QCOMPARE(w.replayPanel()->ledger()->rowCount(), 1); // the experiment's ledger
        QCOMPARE(w.comparePanel()->findChild<QComboBox *>("historyCombo")->count(), 1); // its comparison
        const auto set = w.comparePanel()->promptSetRequest();
        QCOMPARE(set.promptsFile, (tmp.path() + "/questions.txt").toStdString());
        QCOMPARE(set.limit, 7);
        QVERIFY(set.baselines);
        QCOMPARE(set.gateSignal, core::GateSignal::KvCos);
        QCOMPARE(set.gateThreshold, 0.85);
        QCOMPARE(set.recompute.share, 0.25);
        QCOMPARE(w.comparePanel()->request().saveSamples, std::string("workbench")); // still stored
        QCOMPARE(core::Project::load(mine.toStdString()).compare.promptsFile, std::string("questions.txt"));
        // the knowledge tier's graph came back: the tier can run, the Knowledge step names it
        QCOMPARE(w.replayPanel()->knowledgeGraph(), tmp.path() + "/kg.h5");
        QCOMPARE(w.replayPanel()->knowledgeProfiles(), tmp.path() + "/users.json");
        QVERIFY(w.replayPanel()->findChild<QCheckBox *>("tierKnowledge")->isEnabled());
        QCOMPARE(w.knowledgePanel()->graphPathText(), tmp.path() + "/kg.h5");
        const auto project = core::Project::load(mine.toStdString());
        QCOMPARE(project.alignment.inUse, std::string("mine"));
        QCOMPARE(project.knowledge.graph, std::filesystem::path("kg.h5")); // relative to the project
        QVERIFY(project.knowledge.useInReplays);
        QVERIFY(project.experiment.has_value());
    }

    // Opening another project, creating one (File > New Project) or closing it shows that project's
    // state on every step: the previous project's experiment, converter in use, comparisons, ledgers,
    // live replay, capture summary, knowledge graph, report folder and check marks are gone, and the
    // loaded pair is no longer used when the project names other models (the jobs wait for a load);
    // opening the first project again shows its own work and uses the pair again.
    void switchingProjectsResetsEveryStep()
    {
        QTemporaryDir tmp;
        const QString demo = QString::fromStdString((test::sourceDir() / "projects/demo/demo.kvwb").string());
        const QString first = tmp.path() + "/first.kvwb", second = tmp.path() + "/second.kvwb";
        {
            app::Workbench setup;
            QVERIFY(setup.window().openProject(demo));
            QVERIFY(setup.window().saveProject(first));
            setup.window().modelsPanel()->setChoice(
                'b', {setup.window().modelsPanel()->choice('b').path, "cpu", "bf16", 0});
            QVERIFY(setup.window().saveProject(second)); // another project: B in bf16
        }
        const std::filesystem::path exp = tmp.path().toStdString() + "/first-experiment.h5";
        writeSmallExperiment(exp); // a prompt, a sweep and a ledger
        core::ConverterRecord conv = test::identityConverter(core::randomModelPreset("tiny").config);
        conv.name = "firsts";
        conv.selection = "all";
        conv.lambdaMode = "fixed";
        core::saveConverters(exp, conv);
        core::ComparisonSample sample;
        sample.prompt = "What does a KV cache hold?";
        sample.converter = "firsts";
        core::saveComparisons(exp, "workbench", {sample});

        app::Workbench bench;
        auto &w = bench.window();
        w.resize(1366, 738);
        w.show();
        const auto open = [&](const QString &project) {
            QSignalSpy read(&bench.engine(), &app::EngineController::experimentRead);
            if (!w.openProject(project))
                return false;
            if (w.project()->experiment && !read.wait(30000))
                return false;
            // the window shows what the engine read, and hears that the engine is free again
            return QTest::qWaitFor([&] { return !bench.engine().busy(); }, 30000) &&
                   (QCoreApplication::processEvents(), true);
        };
        const auto marks = [&w] {
            QStringList marked;
            auto *steps = w.findChild<QListWidget *>("stepList");
            for (int i = 0; i < steps->count(); ++i)
                if (steps->item(i)->text().contains(QString::fromUtf8("\u2713")))
                    marked << w.steps().at(i);
            return marked;
        };
        QVERIFY(open(first));
        QSignalSpy loaded(&bench.engine(), &app::EngineController::modelsLoaded);
        w.modelsPanel()->findChild<QPushButton *>("loadButton")->click();
        QVERIFY(loaded.wait(60000));
        QCoreApplication::processEvents();
        // the first project's work on every step
        ui::CaptureSummary captured;
        captured.outPath = QString::fromStdString(exp.string());
        captured.promptsWritten = 1;
        w.capturePanel()->showSummary(captured);
        w.replayPanel()->beginLive("demo.jsonl | exact");
        core::LedgerRow row;
        row.requestId = 1;
        w.replayPanel()->appendRows({row});
        w.replayPanel()->finishLive(false);
        ui::KnowledgeView graph;
        graph.path = tmp.path() + "/first.kg";
        w.knowledgePanel()->showGraph(graph);
        w.replayPanel()->setKnowledgeAvailable(graph.path, {});
        QCOMPARE(w.experimentPath(), QString::fromStdString(exp.string()));
        QCOMPARE(w.alignmentPanel()->inUse(), QString("firsts"));
        QCOMPARE(w.comparePanel()->findChild<QComboBox *>("historyCombo")->count(), 1);
        QVERIFY(!w.capturePanel()->summaryText().isEmpty());
        QCOMPARE(marks(), (QStringList{"models", "capture", "alignment", "compare", "replay"}));
        QVERIFY(w.findChild<QLineEdit *>("reportFolder")->text().endsWith("first-experiment-report"));
        QVERIFY(w.capturePanel()->findChild<QPushButton *>("captureButton")->isEnabled());

        // every step as a project with nothing run shows it
        const auto expectEmptySteps = [&](const QString &when) {
            const QString where = when + ": ";
            QVERIFY2(w.experimentPath().isEmpty(), qPrintable(where + w.experimentPath()));
            QVERIFY2(marks().isEmpty() || marks() == QStringList{"models"},
                     qPrintable(where + marks().join(',')));
            auto *capture = w.capturePanel();
            QVERIFY2(capture->summaryText().isEmpty(), qPrintable(where + capture->summaryText()));
            QVERIFY(!capture->findChild<QLineEdit *>("outPathEdit")->text().contains("first-experiment"));
            auto *align = w.alignmentPanel();
            QCOMPARE(align->inUse(), QString());
            QCOMPARE(align->findChild<QComboBox *>("converterCombo")->count(), 0);
            QCOMPARE(align->layerTable()->rowCount(), 0);
            QVERIFY(!align->findChild<QPushButton *>("fitButton")->isEnabled());
            auto *compare = w.comparePanel();
            QCOMPARE(compare->findChild<QComboBox *>("historyCombo")->count(), 0);
            QCOMPARE(compare->findChild<QComboBox *>("converterCombo")->count(), 0);
            QVERIFY(compare->statsText(1).isEmpty());
            QVERIFY(compare->summaryText().isEmpty());
            QVERIFY(compare->setSummaryText().isEmpty());
            QVERIFY(!compare->findChild<QPushButton *>("runButton")->isEnabled());
            auto *replay = w.replayPanel();
            QCOMPARE(replay->ledger()->rowCount(), 0);
            QCOMPARE(replay->findChild<QComboBox *>("ledgerCombo")->count(), 0);
            QVERIFY(!replay->liveShown());
            QVERIFY(!replay->findChild<QCheckBox *>("tierKnowledge")->isEnabled());
            QVERIFY(!replay->findChild<QCheckBox *>("tierCross")->isEnabled());
            QVERIFY(w.knowledgePanel()->graphPath().isEmpty());
            QCOMPARE(w.findChild<QLabel *>("reportStatus")->text(),
                     QString("Open or capture an experiment first."));
            QVERIFY(w.findChild<QLineEdit *>("reportFolder")->text().isEmpty());
            QVERIFY(!w.findChild<QPushButton *>("exportReportButton")->isEnabled());
        };
        QVERIFY(open(second));
        expectEmptySteps("another project");
        // its B is bf16: the loaded f32 pair is not used for it
        QVERIFY(!w.capturePanel()->findChild<QPushButton *>("captureButton")->isEnabled());
        QVERIFY(!w.replayPanel()->findChild<QPushButton *>("startButton")->isEnabled());
        QVERIFY2(w.modelsPanel()
                     ->findChild<QLabel *>("statusLabel")
                     ->text()
                     .contains("this project names other models"),
                 qPrintable(w.modelsPanel()->findChild<QLabel *>("statusLabel")->text()));
        QCOMPARE(marks(), QStringList());
        QCOMPARE(w.modelsPanel()->choice('b').dtype, QString("bf16"));

        // the first project again: its own work, and the loaded pair is its pair
        QVERIFY(open(first));
        QCOMPARE(w.alignmentPanel()->inUse(), QString("firsts"));
        QCOMPARE(w.comparePanel()->findChild<QComboBox *>("historyCombo")->count(), 1);
        QCOMPARE(w.replayPanel()->ledger()->rowCount(), 1);
        QVERIFY(w.capturePanel()->summaryText().isEmpty()); // the summary was of a run, not of the file
        QVERIFY(w.knowledgePanel()->graphPath().isEmpty());
        QCOMPARE(marks(), (QStringList{"models", "capture", "alignment", "compare", "replay"}));
        QVERIFY(w.capturePanel()->findChild<QPushButton *>("captureButton")->isEnabled());

        // File > New Project: an empty project written where asked
        const QString fresh = tmp.path() + "/fresh.kvwb";
        QVERIFY(w.newProject(fresh));
        QVERIFY(QFileInfo::exists(fresh));
        QCOMPARE(w.project()->name, std::string("fresh"));
        QVERIFY(w.modelsPanel()->choice('a').path.isEmpty());
        QVERIFY(!w.isProjectModified());
        expectEmptySteps("a new project");
        QCOMPARE(core::Project::load(fresh.toStdString()).modelA.path, std::filesystem::path());

        // File > Close Project: no project at all
        QVERIFY(open(first));
        QVERIFY(w.closeProject());
        QVERIFY(!w.project().has_value());
        QVERIFY(w.projectPath().isEmpty());
        QCOMPARE(w.windowTitle(), QString("KV Workbench[*]"));
        expectEmptySteps("no project");
        QVERIFY(!w.isProjectModified());
        QTest::qWait(50);
        QVERIFY(w.grab().save(screenshotDir() + "/closed_project.png"));
    }

    // The Replay step's Sweep works out of the box on the demo project's own embedder (an embedding
    // model's path), before any model is loaded, and draws the threshold curve.
    void sweepsTheDemoProjectsEmbedder()
    {
        app::Workbench bench;
        auto &w = bench.window();
        QVERIFY(
            w.openProject(QString::fromStdString((test::sourceDir() / "projects/demo/demo.kvwb").string())));
        w.show();
        auto *replay = w.replayPanel();
        QVERIFY2(replay->embedderSpec().endsWith("models/embedder"), qPrintable(replay->embedderSpec()));
        replay->findChild<QSpinBox *>("replayLimitSpin")->setValue(60);
        QSignalSpy swept(&bench.engine(), &app::EngineController::semanticSwept);
        QSignalSpy failed(&bench.engine(), &app::EngineController::failed);
        replay->findChild<QPushButton *>("sweepButton")->click();
        QVERIFY(swept.wait(120000));
        QCOMPARE(failed.count(), 0);
        QCoreApplication::processEvents();
        const auto sweep = swept.first().at(1).value<std::shared_ptr<const ui::SemanticSweepResult>>();
        QVERIFY2(sweep->embedder.contains("embedder"), qPrintable(sweep->embedder));
        QVERIFY(sweep->scored > 0);
        QVERIFY(!sweep->points.empty());
        auto *table = w.findChild<QTableWidget *>("sweepTable");
        QVERIFY(table && table->rowCount() > 0);
    }

    // Train on pairs from the Replay step, on the engine thread: the trained embedder is chosen, the
    // status line gives its validation scores, and the threshold sweep runs with it.
    void trainsAnEmbedderFromTheReplayStep()
    {
        QTemporaryDir tmp;
        const std::string dir = tmp.path().toStdString();
        std::string text;
        const char *topics[] = {"rice", "pasta", "bread", "soup", "salad", "tea", "coffee", "cake"};
        for (int i = 0; i < 8; ++i)
            for (int j = 0; j < 6; ++j) {
                const std::string n = std::to_string(j);
                text += std::string("how do i make ") + topics[i] + " " + n + "\twhat is the way to make " +
                        topics[i] + " " + n + "\t1\n";
                text += std::string("can i make ") + topics[i] + " " + n + "\tcan i make " +
                        topics[(i + 1) % 8] + " " + n + "\t0\n";
            }
        QFile f(QString::fromStdString(dir + "/pairs.tsv"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(text.data(), qint64(text.size()));
        f.close();
        app::Workbench bench;
        auto &w = bench.window();
        QVERIFY(
            w.openProject(QString::fromStdString((test::sourceDir() / "projects/demo/demo.kvwb").string())));
        w.show();
        auto *replay = w.replayPanel();
        core::EmbedderTrainSettings s;
        s.pairs = dir + "/pairs.tsv";
        s.out = dir + "/pair-embedder";
        s.vocabSize = 100;
        s.hidden = 16;
        s.layers = 1;
        s.heads = 2;
        s.intermediate = 32;
        s.maxPositions = 24;
        s.steps = 8;
        s.batch = 8;
        s.evalEvery = 4;
        s.validationShare = 0.25;
        s.threads = 1;
        QSignalSpy trained(&bench.engine(), &app::EngineController::embedderTrained);
        QSignalSpy failed(&bench.engine(), &app::EngineController::failed);
        replay->requestEmbedderTraining(s);
        QVERIFY(trained.wait(120000));
        QCOMPARE(failed.count(), 0);
        QCoreApplication::processEvents();
        QCOMPARE(replay->embedderSpec(), QString::fromStdString(s.out.string()));
        QVERIFY2(replay->statusText().contains("Embedder pair-embedder trained (8 steps"),
                 qPrintable(replay->statusText()));
        QVERIFY(std::filesystem::exists(s.out / "model.safetensors"));
        replay->findChild<QSpinBox *>("replayLimitSpin")->setValue(40);
        QSignalSpy swept(&bench.engine(), &app::EngineController::semanticSwept);
        replay->findChild<QPushButton *>("sweepButton")->click();
        QVERIFY(swept.wait(120000));
        QCOMPARE(failed.count(), 0);
        const auto sweep = swept.first().at(1).value<std::shared_ptr<const ui::SemanticSweepResult>>();
        QVERIFY2(sweep->embedder.contains("pair-embedder"), qPrintable(sweep->embedder));
        QVERIFY(!sweep->verifier);

        // a verifier trained the same way is chosen, and the sweep then measures its threshold over
        // the candidates at the step's similarity threshold, drawn in the window's Verifier tab
        s.out = dir + "/pair-verifier";
        replay->requestEmbedderTraining(s, true);
        QVERIFY(trained.wait(120000));
        QCOMPARE(failed.count(), 0);
        QCoreApplication::processEvents();
        QCOMPARE(replay->replayRequest().verifier, s.out.string());
        replay->findChild<QDoubleSpinBox *>("semanticThresholdSpin")->setValue(0.5);
        replay->findChild<QPushButton *>("sweepButton")->click();
        QVERIFY(swept.wait(120000));
        QCOMPARE(failed.count(), 0);
        QCoreApplication::processEvents();
        const auto verified = swept.last().at(1).value<std::shared_ptr<const ui::SemanticSweepResult>>();
        QVERIFY(verified->verifier);
        QCOMPARE(verified->verifierName, QString("cross-pair-verifier"));
        QCOMPARE(verified->verifier->similarityThreshold, 0.5);
        int64_t at50 = -1;
        for (const auto &p : verified->points)
            if (std::abs(p.threshold - 0.5) < 1e-9)
                at50 = p.hits;
        QCOMPARE(verified->verifier->candidates, at50);
        QCOMPARE(verified->verifier->errors, int64_t(0));
        auto *tabs = w.findChild<QTabWidget *>("sweepTabs");
        QVERIFY(tabs && tabs->isTabEnabled(1));
        QCOMPARE(w.findChild<QTableWidget *>("verifierSweepTable")->rowCount(), 100);
        tabs->setCurrentIndex(1);
        QTest::qWait(50);
        QVERIFY(w.findChild<QDialog *>("sweepDialog")->grab().save(screenshotDir() + "/verifier_sweep.png"));
    }

    // A step's Cancel, Pause and Stop act on its own job only: while a replay runs, the other steps'
    // cancels are off and do nothing, the status bar names the replay and its Stop cancels it.
    void controlsActOnTheirOwnJob()
    {
        ui::MainWindow w;
        w.resize(1366, 738);
        w.show();
        auto *replay = w.replayPanel();
        replay->setWorkloads({"w.jsonl"});
        replay->setModelsLoaded(true);
        QSignalSpy cancel(&w, &ui::MainWindow::cancelRequested);
        QSignalSpy pause(&w, &ui::MainWindow::pauseRequested);
        QSignalSpy started(&w, &ui::MainWindow::replayRequested);
        replay->findChild<QPushButton *>("startButton")->click();
        QCOMPARE(started.count(), 1);
        w.setEngineBusy(true); // the engine took the replay
        auto *jobLabel = w.findChild<QLabel *>("runningJobLabel");
        auto *stop = w.findChild<QPushButton *>("statusCancelButton");
        QVERIFY(jobLabel->isVisible());
        QCOMPARE(jobLabel->text(), QString("Running: the replay"));
        w.showReplayProgress(10, 40); // the replay's line carries its elapsed time
        QVERIFY2(replay->statusText().startsWith(QString::fromUtf8("10 / 40 requests \u00b7 0 s elapsed")),
                 qPrintable(replay->statusText()));
        QVERIFY(stop->isVisible() && stop->isEnabled());
        QVERIFY(!w.comparePanel()->findChild<QPushButton *>("cancelCompareButton")->isEnabled());
        QVERIFY(!w.capturePanel()->findChild<QPushButton *>("cancelCaptureButton")->isEnabled());
        QVERIFY(!w.alignmentPanel()->findChild<QPushButton *>("cancelFitButton")->isEnabled());
        QVERIFY(
            !w.comparePanel()->findChild<QProgressBar *>("compareProgress")->isVisibleTo(w.comparePanel()));
        QVERIFY(replay->findChild<QPushButton *>("pauseButton")->isEnabled());
        QVERIFY(replay->findChild<QPushButton *>("stopButton")->isEnabled());
        // another step's cancel, even if it were pressed, does not stop the replay
        Q_EMIT w.comparePanel()->cancelRequested();
        Q_EMIT w.capturePanel()->cancelRequested();
        Q_EMIT w.alignmentPanel()->cancelRequested();
        QCOMPARE(cancel.count(), 0);
        replay->findChild<QPushButton *>("pauseButton")->click();
        QCOMPARE(pause.count(), 1);
        replay->findChild<QPushButton *>("stopButton")->click();
        QCOMPARE(cancel.count(), 1);
        stop->click();
        QCOMPARE(cancel.count(), 2);
        w.setEngineBusy(false);
        QVERIFY(!jobLabel->isVisible());
        QVERIFY(!stop->isVisible());
        // with no job running, nothing is cancelled
        Q_EMIT replay->stopRequested();
        QCOMPARE(cancel.count(), 2);
    }

    // Closing asks before unsaved work is lost (Cancel keeps the window, Discard closes), and
    // closing during a job asks to stop it, stops it and closes once the engine has stopped.
    void asksBeforeClosing()
    {
        app::Workbench bench;
        auto &w = bench.window();
        QVERIFY(
            w.openProject(QString::fromStdString((test::sourceDir() / "projects/demo/demo.kvwb").string())));
        w.show();
        w.modelsPanel()->setChoice('b', {w.modelsPanel()->choice('b').path, "cpu", "bf16", 0});
        QVERIFY(w.isProjectModified());
        // answers the box named `box` once it is shown (it runs its own event loop)
        const auto answer = [&w](const char *box, QMessageBox::StandardButton button) {
            auto *timer = new QTimer(&w);
            timer->setInterval(10);
            QObject::connect(timer, &QTimer::timeout, &w, [&w, timer, box, button] {
                if (auto *b = w.findChild<QMessageBox *>(box); b && b->isVisible()) {
                    timer->stop();
                    timer->deleteLater();
                    b->button(button)->click();
                }
            });
            timer->start();
        };
        answer("unsavedProjectBox", QMessageBox::Cancel);
        QVERIFY(!w.close());
        QVERIFY(w.isVisible());
        QSignalSpy cancel(&w, &ui::MainWindow::cancelRequested);
        w.setEngineBusy(true); // a job runs
        answer("closeDuringJobBox", QMessageBox::No);
        QVERIFY(!w.close());
        QCOMPARE(cancel.count(), 0);
        answer("closeDuringJobBox", QMessageBox::Yes);
        QVERIFY(!w.close());
        QCOMPARE(cancel.count(), 1); // the job is asked to stop; the window waits for it
        QVERIFY(w.isVisible());
        answer("unsavedProjectBox", QMessageBox::Discard);
        w.setEngineBusy(false); // the engine stopped: the window closes (asking about the project)
        QTRY_VERIFY(!w.isVisible());
    }

    // CUDA is offered only where this LibTorch runs it; a job's bar keeps its value while the engine
    // reports its state between steps and its stage line carries the elapsed time; a failed load
    // says what is still loaded.
    void progressDevicesAndFailedLoads()
    {
        app::Workbench bench;
        auto &w = bench.window();
        auto *device = w.modelsPanel()->findChild<QComboBox *>("deviceA");
        const int cuda = device->findText("cuda");
        QVERIFY(cuda >= 0);
        QCOMPARE(qobject_cast<QStandardItemModel *>(device->model())->item(cuda)->isEnabled(),
                 gpu::cudaAvailable());
        w.setEngineBusy(true);
        w.capturePanel()->setProgress(0.5, "3 / 6 prompts");
        w.setEngineBusy(true); // the state line that follows every progress step
        QCOMPARE(w.capturePanel()->findChild<QProgressBar *>("captureProgress")->value(), 500);
        w.setEngineBusy(false);
        ui::LoadedModelInfo a, b;
        a.path = "/m/a";
        b.path = "/m/b";
        a.device = b.device = "cpu";
        a.dtype = b.dtype = "f32";
        w.modelsPanel()->setLoaded(a, b, 12);
        QCOMPARE(w.modelsPanel()->findChild<QProgressBar *>()->value(), 0); // not full forever
        w.modelsPanel()->setFailed("/m/notes.txt: not a model");
        const QString status = w.modelsPanel()->findChild<QLabel *>("statusLabel")->text();
        QVERIFY2(status.contains("Still loaded and in use: A a and B b"), qPrintable(status));
    }

    // File > Export Run Archive, then File > Open Project of the archive "on another machine": the
    // project opens from the extracted folder with its experiment's ledger shown, and model B, no
    // longer where the run was made, is asked for in the Models step until a path that exists is
    // chosen.
    void opensARunArchiveOnAnotherMachine()
    {
        QTemporaryDir tmp;
        const fs::path one = fs::path(tmp.path().toStdString()) / "one";
        fs::create_directories(one);
        const fs::path demo = test::sourceDir() / "projects/demo";
        fs::copy(demo / "models" / "b", one / "b", fs::copy_options::recursive);
        writeSmallExperiment(one / "exp.h5");
        core::Project p = core::Project::load(demo / "demo.kvwb").resolved(demo / "demo.kvwb");
        p.name = "archived";
        p.modelB.path = one / "b";
        p.experiment = one / "exp.h5";
        p.save(one / "p.kvwb");

        app::Workbench bench;
        auto &w = bench.window();
        QVERIFY(w.openProject(QString::fromStdString((one / "p.kvwb").string())));
        QTRY_VERIFY(!w.experimentPath().isEmpty());
        const QString zip = tmp.path() + "/run.zip";
        QSignalSpy written(&w, &ui::MainWindow::runArchiveWritten);
        QVERIFY(w.exportRunArchive(zip));
        QVERIFY(written.wait(30000));
        QCOMPARE(written.at(0).at(1).toString(), QString());
        QVERIFY(QFileInfo::exists(zip));

        fs::remove_all(one); // the other machine has neither the run nor model B
        QSignalSpy opened(&w, &ui::MainWindow::runArchiveOpened);
        QVERIFY(w.openRunArchive(zip));
        QVERIFY(opened.wait(30000));
        QCOMPARE(opened.at(0).at(1).toString(), QString());
        const QString project = opened.at(0).at(0).toString();
        QCOMPARE(project, tmp.path() + "/run/run/p.kvwb"); // a folder beside the archive, named after it
        QCOMPARE(w.projectPath(), project);
        QTRY_COMPARE(w.experimentPath(), tmp.path() + "/run/run/exp.h5");
        QTRY_COMPARE(child<QComboBox>(w.replayPanel(), "ledgerCombo")->count(), 1);
        QVERIFY(child<QComboBox>(w.replayPanel(), "ledgerCombo")->itemText(0).startsWith("run (1 requests)"));
        QCOMPARE(w.currentStep(), QString("models"));
        const QString note = w.modelsPanel()->archiveNote();
        QVERIFY2(note.contains("Model B") && note.contains(QString::fromStdString((one / "b").string())) &&
                     note.contains("weights sha256 bb..."), // the experiment file's fingerprint of B
                 qPrintable(note));
        QVERIFY(!note.contains("Model A")); // the demo's model A is where the run said
        QVERIFY(child<QLabel>(w.modelsPanel(), "archiveNote")->isVisibleTo(w.modelsPanel()));
        w.resize(1366, 738);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY(w.grab().save(screenshotDir() + "/archive_opened_models.png"));
        const QString fault = layoutFault(w, "models", "1366x768");
        QVERIFY2(fault.isEmpty(), qPrintable(fault));
        // choosing where model B is here answers the question
        w.modelsPanel()->setChoice(
            'b', {QString::fromStdString((demo / "models" / "b").string()), "cpu", "f32", 0});
        QCOMPARE(w.modelsPanel()->archiveNote(), QString());
        QVERIFY(!child<QLabel>(w.modelsPanel(), "archiveNote")->isVisibleTo(w.modelsPanel()));

        // a second open of the same archive goes into run-2; a damaged archive says so and opens nothing
        QVERIFY(w.openRunArchive(zip));
        QVERIFY(opened.wait(30000));
        QCOMPARE(opened.at(1).at(0).toString(), tmp.path() + "/run-2/run/p.kvwb");
        QTRY_COMPARE(w.experimentPath(), tmp.path() + "/run-2/run/exp.h5"); // its read done
        QFile damaged(tmp.path() + "/damaged.zip");
        QVERIFY(damaged.open(QIODevice::WriteOnly));
        damaged.write(QByteArray(1000, 'x'));
        damaged.close();
        QVERIFY(w.openRunArchive(damaged.fileName()));
        QVERIFY(opened.wait(30000));
        QVERIFY(opened.at(2).at(1).toString().contains("damaged.zip: not a run archive"));
        QCOMPARE(w.projectPath(), tmp.path() + "/run-2/run/p.kvwb");
        QVERIFY(!QFileInfo::exists(tmp.path() + "/damaged"));
    }

    void savesAndReopensAProject()
    {
        QTemporaryDir tmp;
        app::Workbench bench;
        auto &w = bench.window();
        const QString project =
            QString::fromStdString((test::sourceDir() / "projects/demo/demo.kvwb").string());
        QVERIFY(w.openProject(project));
        w.modelsPanel()->setChoice('b', {w.modelsPanel()->choice('b').path, "cpu", "bf16", 0});
        const QString copy = tmp.path() + "/copy.kvwb";
        QVERIFY(w.saveProject(copy));
        app::Workbench other;
        QVERIFY(other.window().openProject(copy));
        QCOMPARE(other.window().modelsPanel()->choice('b').dtype, QString("bf16"));
        QCOMPARE(other.window().modelsPanel()->choice('a').path, w.modelsPanel()->choice('a').path);
        QVERIFY(!other.window().openProject(tmp.path() + "/missing.kvwb"));
    }
};

QTEST_MAIN(TestWorkbench)
#include "tst_workbench.moc"
