// The shared colour map: viridis' end and middle stops at 0, 1/2 and 1, clamping outside [0, 1],
// lightness rising with the value (so grey print keeps the order), grey for NaN and infinities.
#include "ui/charts/color_map.h"

#include <QtTest>

#include <cmath>
#include <limits>

using namespace kvwb::ui;

class TestColorMap : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void stops()
    {
        QCOMPARE(viridisColor(0.0).rgb(), QColor(0x44, 0x01, 0x54).rgb());
        QCOMPARE(viridisColor(0.5).rgb(), QColor(0x21, 0x91, 0x8c).rgb());
        QCOMPARE(viridisColor(1.0).rgb(), QColor(0xfd, 0xe7, 0x25).rgb());
        QCOMPARE(viridisColor(-3.0), viridisColor(0.0));
        QCOMPARE(viridisColor(7.0), viridisColor(1.0));
    }

    void ordered()
    {
        double previous = -1;
        for (int i = 0; i <= 64; ++i) {
            const QColor c = viridisColor(i / 64.0);
            const double luma = 0.299 * c.redF() + 0.587 * c.greenF() + 0.114 * c.blueF();
            QVERIFY2(luma > previous, qPrintable(QString("t = %1/64").arg(i)));
            previous = luma;
        }
    }

    void noValue()
    {
        QCOMPARE(noValueColor(), QColor(200, 200, 200));
        QCOMPARE(viridisColor(std::nan("")), noValueColor());
        QCOMPARE(viridisColor(std::numeric_limits<double>::infinity()), noValueColor());
        QCOMPARE(viridisColor(-std::numeric_limits<double>::infinity()), noValueColor());
    }
};

QTEST_MAIN(TestColorMap)
#include "tst_color_map.moc"
