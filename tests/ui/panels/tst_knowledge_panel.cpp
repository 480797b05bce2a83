// The Knowledge step's panel: a graph shown as a filterable node table (reuse counts, module sizes,
// freshness), a node's detail with its typed neighbours (followed by clicking), a question's path,
// the economics table, the exact requests its buttons emit, what needs model B, busy toggling, and
// a screenshot.
#include "tests/support/screenshot.h"
#include "ui/panels/knowledge_panel.h"

#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QTextBrowser>
#include <QtTest>

using namespace kvwb;

namespace {

core::ConceptNode node(const std::string &id, std::vector<core::ConceptRelation> related, int64_t reuse)
{
    core::ConceptNode n;
    n.id = id;
    n.name = id;
    n.knowledge = "What a " + id + " is. It is a kind of vehicle.";
    n.questions = {"What is a " + id + "?"};
    n.related = std::move(related);
    n.reuseCount = reuse;
    n.source = "test";
    return n;
}

ui::KnowledgeView view()
{
    using R = core::RelationKind;
    ui::KnowledgeView v;
    v.path = "/data/graph.h5";
    v.description = "three vehicles";
    v.graph.add(node("vehicle", {{R::Hyponym, "car"}, {R::Hyponym, "bus"}}, 0));
    v.graph.add(node("car", {{R::Hypernym, "vehicle"}, {R::Sibling, "bus"}}, 12));
    v.graph.add(node("bus", {{R::Hypernym, "vehicle"}, {R::Sibling, "car"}}, 3));
    v.graph.find("car")->synonyms = {"automobile"};
    v.moduleTokens = {20, 31, 0};
    v.freshness = {"fresh", "stale", "missing"};
    return v;
}

} // namespace

class TestKnowledgePanel : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void graphTableDetailAndNeighbours()
    {
        ui::KnowledgePanel p;
        auto *table = p.findChild<QTableWidget *>("knowledgeNodes");
        QCOMPARE(table->rowCount(), 0);
        QCOMPARE(p.graphPath(), QString());
        p.showGraph(view());
        QCOMPARE(p.graphPath(), QString("/data/graph.h5"));
        QCOMPARE(table->rowCount(), 3);
        QVERIFY(p.findChild<QLabel *>("knowledgeStatus")->text().contains("fresh 1, stale 1, missing 1"));
        // the filter matches names, synonyms and ids
        auto *filter = p.findChild<QLineEdit *>("knowledgeFilter");
        filter->setText("automob");
        QCOMPARE(table->rowCount(), 1);
        QCOMPARE(table->item(0, 0)->text(), QString("car"));
        QCOMPARE(table->item(0, 3)->data(Qt::DisplayRole).toLongLong(), 12LL); // reused
        QCOMPARE(table->item(0, 4)->data(Qt::DisplayRole).toLongLong(), 31LL); // module tokens
        QCOMPARE(table->item(0, 5)->text(), QString("stale"));
        table->selectRow(0);
        QCOMPARE(p.selectedNode(), QString("car"));
        auto *detail = p.findChild<QTextBrowser *>("knowledgeNodeDetail");
        QVERIFY(detail->toHtml().contains("automobile"));
        QVERIFY(detail->toHtml().contains("node:vehicle"));
        QVERIFY(detail->toPlainText().contains("Siblings"));
        // following a neighbour shows it even when the filter hides its row
        Q_EMIT detail->anchorClicked(QUrl("node:bus"));
        QCOMPARE(p.selectedNode(), QString("bus"));
        QVERIFY(detail->toPlainText().contains("Reused 3 times"));
        filter->clear();
        QCOMPARE(table->rowCount(), 3);
        p.selectNode("vehicle");
        QCOMPARE(p.selectedNode(), QString("vehicle"));
        QVERIFY(detail->toPlainText().contains("Kinds of it"));
    }

    void requestsAndEnabling()
    {
        ui::KnowledgePanel p;
        QSignalSpy open(&p, &ui::KnowledgePanel::openRequested),
            trace(&p, &ui::KnowledgePanel::traceRequested), eval(&p, &ui::KnowledgePanel::evaluateRequested),
            use(&p, &ui::KnowledgePanel::useInReplays);
        auto *openButton = p.findChild<QPushButton *>("knowledgeOpenButton");
        auto *build = p.findChild<QPushButton *>("knowledgeBuildButton");
        auto *traceButton = p.findChild<QPushButton *>("knowledgeTraceButton");
        auto *evalButton = p.findChild<QPushButton *>("knowledgeEvaluateButton");
        QVERIFY(!openButton->isEnabled()); // no path
        p.setGraphPath("/tmp/g.h5");
        QVERIFY(openButton->isEnabled());
        QVERIFY(!build->isEnabled()); // needs model B
        QVERIFY(build->toolTip().contains("model B"));
        p.setModelBLoaded(true);
        QVERIFY(build->isEnabled());
        p.findChild<QSpinBox *>("knowledgeConceptsSpin")->setValue(42);
        build->click();
        QCOMPARE(open.size(), 1);
        const auto r = open.at(0).at(0).value<ui::KnowledgeOpenRequest>();
        QCOMPARE(r.graphPath, QString("/tmp/g.h5"));
        QVERIFY(r.build);
        QCOMPARE(r.concepts, 42);
        openButton->click();
        QVERIFY(!open.at(1).at(0).value<ui::KnowledgeOpenRequest>().build);

        QVERIFY(!traceButton->isEnabled()); // no graph shown yet
        p.showGraph(view());
        p.findChild<QLineEdit *>("knowledgeQuestion")->setText("What is a car?");
        p.findChild<QLineEdit *>("knowledgeUser")->setText("u7");
        p.setProfilesPath("/data/p.json");
        QVERIFY(traceButton->isEnabled());
        traceButton->click();
        const auto t = trace.at(0).at(0).value<ui::KnowledgeTraceRequest>();
        QCOMPARE(t.graphPath, QString("/data/graph.h5"));
        QCOMPARE(t.question, QString("What is a car?"));
        QCOMPARE(t.user, QString("u7"));
        QCOMPARE(t.profilesPath, QString("/data/p.json"));

        QVERIFY(!evalButton->isEnabled()); // no workload
        p.setWorkloads({"/data/w.jsonl", "/data/other.jsonl"});
        QVERIFY(evalButton->isEnabled());
        p.findChild<QSpinBox *>("knowledgeLimit")->setValue(50);
        evalButton->click();
        const auto e = eval.at(0).at(0).value<ui::KnowledgeEvalRequest>();
        QCOMPARE(e.workloadPath, QString("/data/w.jsonl"));
        QCOMPARE(e.limit, 50);
        QCOMPARE(e.graphPath, QString("/data/graph.h5"));

        p.findChild<QPushButton *>("knowledgeUseButton")->click();
        QCOMPARE(use.at(0).at(0).toString(), QString("/data/graph.h5"));
        QCOMPARE(use.at(0).at(1).toString(), QString("/data/p.json"));

        p.setBusy(true);
        for (auto *b : {openButton, build, traceButton, evalButton})
            QVERIFY(!b->isEnabled());
        p.setBusy(false);
        QVERIFY(evalButton->isEnabled());
        p.setFailed("no such file");
        QVERIFY(p.findChild<QLabel *>("knowledgeStatus")->text().contains("no such file"));
    }

    void traceAndEconomicsShown()
    {
        ui::KnowledgePanel p;
        p.showGraph(view());
        ui::KnowledgeTraceResult t;
        t.question = "What is a carp?";
        t.candidates = {{"car", "car", "What is a car?", "'carp' names no concept", 0.71, false}};
        p.showTrace(t);
        auto *path = p.findChild<QTextBrowser *>("knowledgePath");
        QVERIFY(path->toPlainText().contains("rejected"));
        QVERIFY(path->toPlainText().contains("answered from scratch"));
        t.candidates.push_back({"bus", "bus", "bus", "the request names bus", 0.5, true});
        t.chosen = "bus";
        t.freshness = "stale";
        t.moduleTokens = 17;
        t.profileLine = "Answer in one short sentence.\n";
        p.showTrace(t);
        QVERIFY(path->toPlainText().contains("Answered through bus"));
        QVERIFY(path->toPlainText().contains("recomputed first"));
        QVERIFY(path->toPlainText().contains("Answer in one short sentence."));
        Q_EMIT path->anchorClicked(QUrl("node:bus"));
        QCOMPARE(p.selectedNode(), QString("bus"));

        ui::KnowledgeEconomics e;
        e.requests = 10;
        e.users = 4;
        e.concepts = 3;
        e.arms = {"no cache", "knowledge tier"};
        e.table.columns = {"requests", "hits",    "false_hits", "tokens_computed", "tokens_reused", "model_s",
                           "cost_usd", "word_f1", "rouge_l",    "rouge_l_vs_full", "profile_fit"};
        e.table.rows = {{10, 0, 0, 900, 0, 1.5, 0.0002, 0.41, 0.38, 0.5, 0.2},
                        {10, 8, 1, 300, 600, 0.7, 0.0001, 0.52, 0.47, 0.9, 0.8}};
        e.timeMs = {{"recall", 1.5}, {"render", 640}};
        p.showEconomics(e);
        auto *table = p.findChild<QTableWidget *>("knowledgeEconomics");
        QCOMPARE(table->rowCount(), 2);
        QCOMPARE(table->verticalHeaderItem(1)->text(), QString("knowledge tier"));
        QCOMPARE(table->item(1, 0)->data(Qt::DisplayRole).toLongLong(), 8LL); // cache answers
        QCOMPARE(table->item(1, 9)->text(), QString("0.800"));                // profile fit
        QVERIFY(p.findChild<QLabel *>("knowledgeEconomicsNote")->text().contains("recall 1.5 ms"));

        p.resize(1300, 860);
        p.show();
        QVERIFY(QTest::qWaitForWindowExposed(&p));
        p.selectNode("car");
        QTest::qWait(50);
        KVWB_VERIFY_SCREENSHOT(&p, "knowledge_panel");
    }
};

QTEST_MAIN(TestKnowledgePanel)
#include "tst_knowledge_panel.moc"
