// LedgerModel and LedgerFilterModel: well-formed item models while batches stream in, exact cell
// text, exact filter counts on a patterned ledger (see synthetic_ledger.h for the pattern).
#include "tests/support/screenshot.h"
#include "tests/support/synthetic_ledger.h"
#include "ui/models/ledger_filter_model.h"
#include "ui/models/ledger_model.h"

#include <QAbstractItemModelTester>
#include <QHeaderView>
#include <QSignalSpy>
#include <QTableView>
#include <QTextDocument>
#include <QtTest>

using namespace kvwb;
using ui::LedgerModel;

class TestLedgerModel : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void showsCells()
    {
        LedgerModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(model.columnCount(), int(LedgerModel::ColumnCount));
        model.appendRows(testing::patternedLedger(40));
        QCOMPARE(model.rowCount(), 40);
        const auto cell = [&](int row, int column) { return model.index(row, column).data().toString(); };
        // Row 3: semantic false hit, tenant acme, model b.
        QCOMPARE(cell(3, LedgerModel::RequestColumn), QString("3"));
        QCOMPARE(cell(3, LedgerModel::TenantColumn), QString("acme"));
        QCOMPARE(cell(3, LedgerModel::ModelColumn), QString("b"));
        QCOMPARE(cell(3, LedgerModel::IntentColumn), QString("login"));
        QCOMPARE(cell(3, LedgerModel::AnsweredByColumn), QString("semantic"));
        QCOMPARE(cell(3, LedgerModel::ExactColumn), QString("miss"));
        QCOMPARE(cell(3, LedgerModel::SemanticColumn), QString("hit"));
        QCOMPARE(cell(3, LedgerModel::PrefixColumn), QString()); // not consulted
        QCOMPARE(cell(3, LedgerModel::FalseHitColumn), QString("FALSE HIT"));
        QVERIFY(
            model.index(3, LedgerModel::FalseHitColumn).data(Qt::ToolTipRole).toString().contains("refund"));
        QCOMPARE(cell(3, LedgerModel::PromptTokensColumn), QString("103"));
        QCOMPARE(cell(3, LedgerModel::ReusedColumn), QString("60"));
        QCOMPARE(cell(3, LedgerModel::ComputedColumn), QString("63"));
        QCOMPARE(cell(3, LedgerModel::TtftColumn), QString("8.0"));
        QCOMPARE(cell(3, LedgerModel::TotalColumn), QString("53.0"));
        QCOMPARE(model.index(3, LedgerModel::TtftColumn).data(LedgerModel::SortRole).toDouble(), 8.0);
        // Rows 7 and 17: cross hits that failed and passed the gate; row 8: a miss with every tier consulted.
        QCOMPARE(cell(7, LedgerModel::GateColumn), QString("fail (0.12)"));
        QCOMPARE(cell(17, LedgerModel::GateColumn), QString("pass (0.12)"));
        QCOMPARE(cell(8, LedgerModel::AnsweredByColumn), QString("miss"));
        QCOMPARE(cell(8, LedgerModel::CrossColumn), QString("miss"));
        QCOMPARE(cell(8, LedgerModel::GateColumn), QString());
        QCOMPARE(cell(8, LedgerModel::ShadowColumn), QString());
        QCOMPARE(model.headerData(LedgerModel::TtftColumn, Qt::Horizontal).toString(), QString("TTFT ms"));
        QCOMPARE(cell(3, LedgerModel::QuestionColumn), QString("Q3: what about login?"));
        QCOMPARE(cell(3, LedgerModel::AnswerColumn), QString("Answer 3: see the login page."));
        model.clear();
        QCOMPARE(model.rowCount(), 0);
    }

    // A long answer on several lines fits one table line (its whole text in the tooltip); the
    // detail pane holds everything: both texts whole, where a hit came from with that request's
    // question, the guard, the gate, tokens and times.
    void textCellsAndDetail()
    {
        std::vector<core::LedgerRow> rows = testing::patternedLedger(40);
        rows[2].answer = "Line one.\nLine two <b>not bold</b>.\n" + std::string(400, 'x');
        rows[3].similarity = 0.91;
        rows[3].semanticGuard = core::SemanticGuard::None;
        rows[9].semanticGuard = core::SemanticGuard::Negation;
        rows[9].guardedSameIntent = 0;
        rows[9].similarity = 0.93;
        rows[9].verifier = core::VerifierVerdict::Reject;
        rows[9].verifierScore = 0.125;
        rows[9].verifierMs = 1.5;
        rows[9].verifiedSameIntent = 0;
        rows[39].notServed = core::NotServed::Context;
        LedgerModel model;
        model.appendRows(rows);
        const QString line = model.index(2, LedgerModel::AnswerColumn).data().toString();
        QVERIFY(!line.contains('\n'));
        QCOMPARE(line.size(), 300);
        QVERIFY(line.startsWith("Line one. Line two <b>not bold</b>. xxx"));
        QVERIFY(
            model.index(2, LedgerModel::AnswerColumn).data(Qt::ToolTipRole).toString().contains("&lt;b&gt;"));
        QCOMPARE(model.rowOfRequest(17), 17);
        QCOMPARE(model.rowOfRequest(4000), -1);

        QTextDocument doc;
        doc.setHtml(model.detailHtml(3)); // a semantic false hit served from request 2
        const QString three = doc.toPlainText();
        QVERIFY2(three.contains("Request 3"), qPrintable(three));
        QVERIFY(three.contains("Q3: what about login?"));
        QVERIFY(three.contains("Answer 3: see the login page."));
        QVERIFY(three.contains("from semantic - a false hit"));
        QVERIFY(three.contains("Served from request 2 (intent refund), which asked:"));
        QVERIFY(three.contains("Q2: what about shipping?"));
        QVERIFY(three.contains("best similarity") && three.contains("0.910"));
        QVERIFY(three.contains("exact miss, semantic hit"));
        doc.setHtml(model.detailHtml(9));
        const QString nine = doc.toPlainText();
        QVERIFY2(nine.contains("negation held back a candidate above the threshold (a false hit prevented)"),
                 qPrintable(nine));
        QVERIFY(nine.contains("from the model (every tier missed)"));
        QVERIFY2(nine.contains("reject at score 0.125, 1.50 ms (a false hit prevented)"), qPrintable(nine));
        doc.setHtml(model.detailHtml(2));
        QVERIFY(doc.toPlainText().contains("Line two <b>not bold</b>.\n"));
        doc.setHtml(model.detailHtml(7));
        QVERIFY(doc.toPlainText().contains("quality gate") && doc.toPlainText().contains("fail (0.12)"));
        doc.setHtml(model.detailHtml(39));
        QVERIFY(doc.toPlainText().contains("Not served: the prompt does not fit the model's context."));
        QCOMPARE(model.detailHtml(40), QString());
        QCOMPARE(model.detailHtml(-1), QString());
    }

    void appendsInOneBatch()
    {
        LedgerModel model;
        QSignalSpy inserted(&model, &QAbstractItemModel::rowsInserted);
        model.appendRows(testing::patternedLedger(500));
        model.appendRows({});
        model.appendRows(testing::patternedLedger(250, 500));
        QCOMPARE(inserted.count(), 2);
        QCOMPARE(inserted.at(1).at(1).toInt(), 500);
        QCOMPARE(inserted.at(1).at(2).toInt(), 749);
        QCOMPARE(model.index(749, 0).data().toString(), QString("749"));
    }

    void filters_data()
    {
        QTest::addColumn<int>("tier"); // -1: any
        QTest::addColumn<QString>("tenant");
        QTest::addColumn<QString>("modelName");
        QTest::addColumn<bool>("falseOnly");
        QTest::addColumn<QString>("text");
        QTest::addColumn<int>("count");
        // 1000 rows of patternedLedger.
        QTest::newRow("none") << -1 << ""
                              << "" << false << "" << 1000;
        QTest::newRow("exact") << int(core::TierKind::Exact) << ""
                               << "" << false << "" << 300;
        QTest::newRow("semantic") << int(core::TierKind::Semantic) << ""
                                  << "" << false << "" << 200;
        QTest::newRow("cross") << int(core::TierKind::Cross) << ""
                               << "" << false << "" << 100;
        QTest::newRow("misses") << int(core::TierKind::None) << ""
                                << "" << false << "" << 200;
        QTest::newRow("acme") << -1 << "acme"
                              << "" << false << "" << 334;
        // i % 3 == 0 and i % 10 in {0,1,2}: residues 0, 12, 21 of 30 -> 33 * 3 + 1 (i = 990)
        QTest::newRow("acme exact") << int(core::TierKind::Exact) << "acme"
                                    << "" << false << "" << 100;
        QTest::newRow("model b") << -1 << ""
                                 << "b" << false << "" << 500;
        QTest::newRow("false hits") << -1 << ""
                                    << "" << true << "" << 50;
        // i % 20 == 3 is odd, so every false hit is on model b; none on a.
        QTest::newRow("false hits a") << -1 << ""
                                      << "a" << true << "" << 0;
        // intent "billing" (i % 7 == 0) and "billing-dispute" (i % 7 == 4): 143 + 143
        QTest::newRow("text billing") << -1 << ""
                                      << "" << false << "BILLing" << 286;
        QTest::newRow("text tenant") << -1 << ""
                                     << "" << false << "glob" << 333;
        // "in" matches tenant initech (333) and intent login, shipping, billing, billing-dispute
        // (i % 7 in {0,2,3,4}) among the 667 others
        QTest::newRow("text in") << -1 << ""
                                 << "" << false << "in" << 333 + 382;
        // The question and the answer are searched too: "Q13:" and "Answer 13:" name one row each.
        QTest::newRow("text question") << -1 << ""
                                       << "" << false << "q13:" << 1;
        QTest::newRow("text answer") << -1 << ""
                                     << "" << false << "ANSWER 13:" << 1;
        QTest::newRow("text answer tenant") << -1 << "acme"
                                            << "" << false << "answer 13:" << 0;
        QTest::newRow("nothing") << -1 << ""
                                 << "" << false << "zzz" << 0;
    }
    void filters()
    {
        QFETCH(int, tier);
        QFETCH(QString, tenant);
        QFETCH(QString, modelName);
        QFETCH(bool, falseOnly);
        QFETCH(QString, text);
        QFETCH(int, count);
        LedgerModel model;
        model.appendRows(testing::patternedLedger(1000));
        ui::LedgerFilterModel filter;
        filter.setLedgerModel(&model);
        filter.setAnsweredBy(tier < 0 ? std::nullopt : std::optional(core::TierKind(tier)));
        filter.setTenant(tenant);
        filter.setModelName(modelName);
        filter.setFalseHitsOnly(falseOnly);
        filter.setSearchText(text);
        // Attached after filtering: it walks the whole model on every change, ~2 s per change for
        // 1000 rows; filtersWhileStreaming checks filter changes under the tester.
        QAbstractItemModelTester tester(&filter, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(filter.rowCount(), count);
        // Cross-check against a direct count over the rows.
        int direct = 0;
        for (const auto &r : model.rows()) {
            const bool ok =
                (tier < 0 || int(r.answeredBy) == tier) &&
                (tenant.isEmpty() || r.tenant == tenant.toStdString()) &&
                (modelName.isEmpty() || core::roleName(r.model) == modelName.toStdString()) &&
                (!falseOnly || r.falseHit) &&
                (text.isEmpty() || QString::fromStdString(r.tenant).contains(text, Qt::CaseInsensitive) ||
                 QString::fromStdString(r.intent).contains(text, Qt::CaseInsensitive) ||
                 QString::fromStdString(r.question).contains(text, Qt::CaseInsensitive) ||
                 QString::fromStdString(r.answer).contains(text, Qt::CaseInsensitive));
            direct += ok;
        }
        QCOMPARE(direct, count);
    }

    // Filtering and sorting stay consistent while batches keep arriving (the tester checks every
    // signal the proxy emits).
    void filtersWhileStreaming()
    {
        LedgerModel model;
        ui::LedgerFilterModel filter;
        filter.setLedgerModel(&model);
        QAbstractItemModelTester sourceTester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QAbstractItemModelTester tester(&filter, QAbstractItemModelTester::FailureReportingMode::QtTest);
        filter.setAnsweredBy(core::TierKind::Semantic);
        filter.sort(LedgerModel::TtftColumn, Qt::DescendingOrder);
        for (int b = 0; b < 10; ++b)
            model.appendRows(testing::patternedLedger(100, b * 100));
        QCOMPARE(model.rowCount(), 1000);
        QCOMPARE(filter.rowCount(), 200);
        // Semantic rows have d = 3 or 4, so TTFT 9.0 sorts first.
        QCOMPARE(filter.index(0, LedgerModel::TtftColumn).data().toString(), QString("9.0"));
        QCOMPARE(filter.index(199, LedgerModel::TtftColumn).data().toString(), QString("8.0"));
        filter.setAnsweredBy(std::nullopt);
        filter.setFalseHitsOnly(true);
        QCOMPARE(filter.rowCount(), 50);
        model.appendRows(testing::patternedLedger(100, 1000));
        QCOMPARE(filter.rowCount(), 55);
        model.clear();
        QCOMPARE(filter.rowCount(), 0);
    }

    void screenshot()
    {
        LedgerModel model;
        model.appendRows(testing::realisticLedger(2000, 8000)); // caches warm: a mix of tiers
        ui::LedgerFilterModel filter;
        filter.setLedgerModel(&model);
        QTableView view;
        view.setModel(&filter);
        view.setSortingEnabled(true);
        view.sortByColumn(LedgerModel::RequestColumn, Qt::AscendingOrder);
        view.resize(1200, 500);
        view.resizeColumnsToContents();
        view.verticalHeader()->hide();
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        KVWB_VERIFY_SCREENSHOT(&view, "ledger_table");
    }
};

QTEST_MAIN(TestLedgerModel)
#include "tst_ledger_model.moc"
