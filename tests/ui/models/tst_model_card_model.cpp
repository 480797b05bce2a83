// ModelCardModel: well-formed as an item model, shows both configs, flags KV-geometry differences.
#include "core/model/random_model.h"
#include "ui/models/model_card_model.h"

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

        // a loaded model's tokenizer and fingerprint; a new preview config clears them
        const int tok = find("Tokenizer"), sha = find("Weights sha256");
        QVERIFY(tok >= 0 && sha >= 0);
        QVERIFY(model.index(tok, 1).data().toString().contains("load to see"));
        const QString fp = QString(64, QChar('e'));
        model.setIdentity(ui::ModelCardModel::ModelAColumn, "sentencepiece, 1024 pieces (tokenizer.model)",
                          fp);
        QCOMPARE(model.index(tok, 1).data().toString(),
                 QString("sentencepiece, 1024 pieces (tokenizer.model)"));
        QCOMPARE(model.index(sha, 1).data().toString(), fp.left(16) + QChar(0x2026));
        QCOMPARE(model.index(sha, 1).data(Qt::ToolTipRole).toString(), fp);
        QVERIFY(model.index(sha, 2).data().toString().contains("load to see"));
        // tokenizers: marked only when both are known and differ (a token alignment is then in use)
        QCOMPARE(model.index(tok, 2).data(ui::ModelCardModel::TokenizerDiffersRole).toBool(), false);
        model.setIdentity(ui::ModelCardModel::ModelBColumn, "bpe, 300 ids (tokenizer.json)", fp);
        QCOMPARE(model.index(tok, 2).data(ui::ModelCardModel::TokenizerDiffersRole).toBool(), true);
        QVERIFY(model.index(tok, 1).data(Qt::BackgroundRole).isValid());
        QVERIFY(model.index(tok, 2).data(Qt::ToolTipRole).toString().contains("token alignment"));
        QCOMPARE(model.index(sha, 2).data(ui::ModelCardModel::TokenizerDiffersRole).toBool(), false);
        model.setIdentity(ui::ModelCardModel::ModelBColumn, "sentencepiece, 1024 pieces (tokenizer.model)",
                          fp);
        QCOMPARE(model.index(tok, 2).data(ui::ModelCardModel::TokenizerDiffersRole).toBool(), false);
        QVERIFY(!model.index(tok, 1).data(Qt::BackgroundRole).isValid());
        model.setModel(ui::ModelCardModel::ModelAColumn, core::randomModelPreset("tiny").config);
        QVERIFY(model.index(sha, 1).data().toString().contains("load to see"));
    }
};

QTEST_MAIN(TestModelCardModel)
#include "tst_model_card_model.moc"
