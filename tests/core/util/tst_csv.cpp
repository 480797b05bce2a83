// CSV field quoting: plain fields pass through; a comma, a double quote, CR or LF puts the field in
// quotes with each quote doubled (RFC 4180), the one rule of the ledger and report CSV files.
#include "core/util/csv.h"

#include <QTest>

#include <string>

using namespace kvwb::core;

class TestCsv : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void field_data()
    {
        QTest::addColumn<QByteArray>("value");
        QTest::addColumn<QByteArray>("expected");
        QTest::newRow("empty") << QByteArray("") << QByteArray("");
        QTest::newRow("plain") << QByteArray("r2_k") << QByteArray("r2_k");
        QTest::newRow("spaces and utf-8") << QByteArray(" caf\xc3\xa9 ") << QByteArray(" caf\xc3\xa9 ");
        QTest::newRow("comma") << QByteArray("a,b") << QByteArray("\"a,b\"");
        QTest::newRow("quote") << QByteArray("say \"hi\"") << QByteArray("\"say \"\"hi\"\"\"");
        QTest::newRow("lf") << QByteArray("line\nbreak") << QByteArray("\"line\nbreak\"");
        QTest::newRow("cr") << QByteArray("a\rb") << QByteArray("\"a\rb\"");
        QTest::newRow("only a quote") << QByteArray("\"") << QByteArray("\"\"\"\"");
        QTest::newRow("semicolon, tab") << QByteArray("a;b\tc") << QByteArray("a;b\tc");
    }

    void field()
    {
        QFETCH(QByteArray, value);
        QFETCH(QByteArray, expected);
        const std::string v = value.toStdString();
        QCOMPARE(QByteArray::fromStdString(csvField(v)), expected);
        std::string out = "x,";
        appendCsvField(out, v);
        QCOMPARE(QByteArray::fromStdString(out), "x," + expected);
    }

    void embeddedNul()
    {
        const std::string v("a\0b", 3);
        QCOMPARE(csvField(v), v);
    }
};

QTEST_GUILESS_MAIN(TestCsv)
#include "tst_csv.moc"
