// MetricTableModel: well-formed as an item model, exact display text, raw values for sorting.
#include "ui/models/metric_table_model.h"

#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QtTest>

#include <cmath>
#include <limits>

using namespace kvwb;

namespace {

core::MetricTable layerTable()
{
    const double nan = std::numeric_limits<double>::quiet_NaN();
    core::MetricTable t;
    t.columns = {"layer", "r2_k", "r2_v", "attn_cos"};
    t.rows = {{0, 0.912345, 0.5, 0.99991},
              {1, -0.04567, nan, 0.87},
              {2, 0.123456789, 12345.678, 1},
              {10, 1e-5, 0.333333, 0.25}};
    return t;
}

} // namespace

class TestMetricTableModel : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void formatsValues_data()
    {
        QTest::addColumn<double>("value");
        QTest::addColumn<QString>("text");
        QTest::newRow("fraction") << 0.912345 << "0.9123";
        QTest::newRow("negative") << -0.04567 << "-0.04567";
        QTest::newRow("integer") << 10.0 << "10";
        QTest::newRow("large integer") << 123456.0 << "123456";
        QTest::newRow("large fraction") << 12345.678 << "1.235e+04";
        QTest::newRow("tiny") << 1e-5 << "1e-05";
        QTest::newRow("nan") << std::numeric_limits<double>::quiet_NaN() << QString("\u2013");
    }
    void formatsValues()
    {
        QFETCH(double, value);
        QFETCH(QString, text);
        QCOMPARE(ui::MetricTableModel::formatValue(value), text);
    }

    void showsTable()
    {
        ui::MetricTableModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(model.rowCount(), 0);
        QCOMPARE(model.columnCount(), 0);

        QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
        model.setTable(layerTable());
        QCOMPARE(reset.count(), 1);
        QCOMPARE(model.rowCount(), 4);
        QCOMPARE(model.columnCount(), 4);
        QCOMPARE(model.headerData(1, Qt::Horizontal).toString(),
                 QString::fromUtf8("R\u00b2 K")); // not snake_case
        QVERIFY(model.headerData(1, Qt::Horizontal, Qt::ToolTipRole).toString().contains("(r2_k)"));
        QVERIFY(model.headerData(1, Qt::Horizontal, Qt::ToolTipRole).toString().contains("keys"));
        QCOMPARE(model.index(0, 1).data().toString(), QString("0.9123"));
        QCOMPARE(model.index(0, 3).data().toString(), QString("0.9999"));
        QCOMPARE(model.index(1, 1).data().toString(), QString("-0.04567"));
        QCOMPARE(model.index(1, 2).data().toString(), QString("\u2013"));
        QVERIFY(std::isnan(model.index(1, 2).data(ui::MetricTableModel::RawValueRole).toDouble()));
        QCOMPARE(model.index(2, 1).data(Qt::UserRole).toDouble(), 0.123456789);
        QCOMPARE(model.index(2, 3).data().toString(), QString("1"));
        QCOMPARE(model.index(3, 0).data().toString(), QString("10"));

        // A new table with other columns replaces everything.
        core::MetricTable sweep;
        sweep.columns = {"k", "lambda", "train_tokens", "r2_k", "r2_v"};
        sweep.rows = {{1, 0.1, 4096, 0.7, 0.6}};
        model.setTable(sweep);
        QCOMPARE(reset.count(), 2);
        QCOMPARE(model.columnCount(), 5);
        QCOMPARE(model.rowCount(), 1);
        QCOMPARE(model.index(0, 2).data().toString(), QString("4096"));
        model.setTable({});
        QCOMPARE(model.rowCount(), 0);
    }

    // Sorting on the raw role orders numerically: "10" after "2", negatives first.
    void sortsNumerically()
    {
        ui::MetricTableModel model;
        model.setTable(layerTable());
        QSortFilterProxyModel proxy;
        proxy.setSourceModel(&model);
        proxy.setSortRole(ui::MetricTableModel::RawValueRole);
        proxy.sort(0, Qt::DescendingOrder);
        QCOMPARE(proxy.index(0, 0).data().toString(), QString("10"));
        proxy.sort(1, Qt::AscendingOrder);
        QCOMPARE(proxy.index(0, 1).data().toString(), QString("-0.04567"));
        QCOMPARE(proxy.index(3, 1).data().toString(), QString("0.9123"));
    }
};

QTEST_MAIN(TestMetricTableModel)
#include "tst_metric_table_model.moc"
