// ModelCardModel: well-formed as an item model, shows both configs, flags KV-geometry differences.
#include "core/random_model.h"
#include "ui/model_card_model.h"

#include <QAbstractItemModelTester>
#include <QtTest>

using namespace kvwb;

class TestModelCardModel : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void showsAndFlagsDifferences()
    {
        ui::ModelCardModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(model.columnCount(), 3);
        QVERIFY(model.rowCount() >= 10);
        const auto find = [&](const QString &label) {
            for (int r = 0; r < model.rowCount(); ++r)
                if (model.index(r, 0).data().toString() == label)
                    return r;
            return -1;
        };
        const int kvRow = find("KV heads"), heads = find("Heads");
        QVERIFY(kvRow >= 0 && heads >= 0);
        QCOMPARE(model.index(kvRow, 1).data().toString(), QString("-"));
        model.setModel(ui::ModelCardModel::ModelAColumn, core::randomModelPreset("tiny").config);
        model.setModel(ui::ModelCardModel::ModelBColumn, core::randomModelPreset("gqa").config);
        QCOMPARE(model.index(kvRow, 1).data().toString(), QString("4"));
        QCOMPARE(model.index(kvRow, 2).data().toString(), QString("2"));
        QCOMPARE(model.index(kvRow, 2).data(ui::ModelCardModel::GeometryDiffersRole).toBool(), true);
        // same head count: no flag, and Heads is not a geometry row anyway
        QCOMPARE(model.index(heads, 2).data(ui::ModelCardModel::GeometryDiffersRole).toBool(), false);
        QCOMPARE(model.headerData(1, Qt::Horizontal).toString(), QString("Model A (source)"));
    }
};

QTEST_MAIN(TestModelCardModel)
#include "tst_model_card_model.moc"
