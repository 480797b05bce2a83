// HeatmapWidget: low and high cells paint in different colours, the tooltip names the cell and its
// value, and screenshots of a CKA map and a per-head R^2 map for a person to look at.
#include "tests/support/screenshot.h"
#include "tests/support/synthetic_ledger.h"
#include "ui/charts/heatmap_widget.h"

#include <QtTest>

#include <cmath>
#include <limits>

using namespace kvwb;

namespace {

QStringList labels(const QString &prefix, int n)
{
    QStringList out;
    for (int i = 0; i < n; ++i)
        out << prefix + QString::number(i);
    return out;
}

// CKA between B layer r (of rows) and A layer c (of cols): high along the depth-matched diagonal.
core::Matrix ckaLike(int rows, int cols)
{
    core::Matrix m{rows, cols, {}};
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
            const double d = double(r) / std::max(1, rows - 1) - double(c) / std::max(1, cols - 1);
            m.data.push_back(0.25 + 0.7 * std::exp(-8 * d * d));
        }
    return m;
}

} // namespace

class TestHeatmapWidget : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void paintsAndExplains()
    {
        core::Matrix m{6, 4, {}};
        for (int i = 0; i < 24; ++i)
            m.data.push_back(i / 23.0); // (0,0) = 0 lowest, (5,3) = 1 highest
        m.data[size_t(2 * 4 + 1)] = 0.873123;
        ui::HeatmapWidget w;
        w.setMatrix(m, labels("B", 6), labels("A", 4), "Linear CKA of keys");
        w.setAxisTitles("model B layer", "model A layer");
        w.resize(800, 500);
        QCOMPARE(w.valueRange(), std::pair(0.0, 1.0));

        const QImage image = w.grab().toImage();
        QCOMPARE(image.size(), QSize(800, 500));
        const QRect low = w.cellRect(0, 0), high = w.cellRect(5, 3);
        QVERIFY(!low.isEmpty() && !high.isEmpty());
        QVERIFY(low.width() > 100 && low.height() > 40);
        // Sample near a corner, away from the value text in the middle.
        const QColor lowPixel = image.pixelColor(low.topLeft() + QPoint(3, 3));
        const QColor highPixel = image.pixelColor(high.topLeft() + QPoint(3, 3));
        QCOMPARE(lowPixel, w.colorFor(0.0));
        QCOMPARE(highPixel, w.colorFor(1.0));
        QVERIFY(lowPixel != highPixel);
        QVERIFY(highPixel.lightnessF() > lowPixel.lightnessF() + 0.3);
        // Somewhere in the middle of the scale, between the two.
        const QColor mid = image.pixelColor(w.cellRect(3, 0).topLeft() + QPoint(3, 3));
        QVERIFY(mid.lightnessF() > lowPixel.lightnessF() && mid.lightnessF() < highPixel.lightnessF());

        QCOMPARE(w.toolTipAt(w.cellRect(2, 1).center()), QString("B2 \u00d7 A1: 0.8731"));
        QCOMPARE(w.toolTipAt(QPoint(1, 1)), QString());
        const auto cell = w.cellAt(w.cellRect(4, 2).center());
        QVERIFY(cell);
        QCOMPARE(*cell, std::pair(4, 2));
        QVERIFY(!w.cellAt(QPoint(-5, 100)));

        // Fixed range: every value sits lower on a 0..2 scale.
        w.setValueRange(std::pair(0.0, 2.0));
        QCOMPARE(w.colorFor(1.0), w.colorFor(1.0));
        QVERIFY(w.colorFor(1.0) != highPixel);
        w.setValueRange(std::nullopt);
        QCOMPARE(w.colorFor(1.0), highPixel);
    }

    void nanAndEmpty()
    {
        ui::HeatmapWidget w;
        w.resize(400, 300);
        QVERIFY(!w.grab().isNull()); // no matrix: "No data", no crash
        QVERIFY(!w.cellAt(QPoint(200, 150)));
        core::Matrix m{2, 2, {0.5, std::numeric_limits<double>::quiet_NaN(), 0.5, 0.5}};
        w.setMatrix(m, {}, {}, "constant");
        QVERIFY(w.valueRange().first < w.valueRange().second);
        const QImage image = w.grab().toImage();
        QCOMPARE(image.pixelColor(w.cellRect(0, 1).topLeft() + QPoint(2, 2)), QColor(0xc8, 0xc8, 0xc8));
        QCOMPARE(w.toolTipAt(w.cellRect(0, 1).center()), QString("0 \u00d7 1: not computed"));
    }

    void screenshots()
    {
        ui::HeatmapWidget cka;
        cka.setMatrix(ckaLike(6, 4), labels("B", 6), labels("A", 4),
                      "Linear CKA of keys: model B layer vs model A layer");
        cka.setAxisTitles("model B (target) layer", "model A (source) layer");
        cka.setValueRange(std::pair(0.0, 1.0));
        cka.resize(800, 500);
        KVWB_VERIFY_SCREENSHOT(&cka, "heatmap_cka");

        // 16 layers x 8 heads: too small for values, labels thinned.
        core::Matrix r2{16, 8, {}};
        for (int l = 0; l < 16; ++l)
            for (int h = 0; h < 8; ++h)
                r2.data.push_back(0.95 - 0.04 * l + 0.03 * std::sin(h * 1.7 + l));
        ui::HeatmapWidget heads;
        heads.setMatrix(r2, labels("L", 16), labels("H", 8),
                        "R\u00b2 of converted keys per layer and KV head");
        heads.setAxisTitles("model B layer", "model B KV head");
        heads.setValueRange(std::pair(0.0, 1.0));
        heads.resize(800, 500);
        KVWB_VERIFY_SCREENSHOT(&heads, "heatmap_heads");
    }
};

QTEST_MAIN(TestHeatmapWidget)
#include "tst_heatmap_widget.moc"
