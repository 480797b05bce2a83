// Screenshots of widgets under test, for a person to look at and for the test to check: the file
// must be written, read back at the widget's size, and not blank (a widget that painted nothing is
// one flat colour). GUI-thread only.
#pragma once

#include <QCoreApplication>
#include <QDir>
#include <QImage>
#include <QSet>
#include <QString>
#include <QTest>
#include <QWidget>

#include <algorithm>

namespace kvwb::testing {

// Saves w under <test binary dir>/screenshots/<name>.png. Returns "" when the file was written and
// reads back as a non-blank image of w's size, else what went wrong.
inline QString saveScreenshot(QWidget *w, const QString &name)
{
    const QString dir = QCoreApplication::applicationDirPath() + "/screenshots";
    if (!QDir().mkpath(dir))
        return "cannot create " + dir;
    const QString path = dir + "/" + name + ".png";
    const QPixmap shot = w->grab();
    if (shot.isNull() || shot.width() < 1 || shot.height() < 1)
        return "grabbing " + name + " gave an empty image";
    if (!shot.save(path))
        return "cannot write " + path;
    const QImage back(path);
    if (back.isNull() || back.size() != shot.size())
        return path + " does not read back at the widget's size";
    QSet<QRgb> colours;
    const int stepX = std::max(1, back.width() / 64), stepY = std::max(1, back.height() / 64);
    for (int y = 0; y < back.height() && colours.size() < 3; y += stepY)
        for (int x = 0; x < back.width() && colours.size() < 3; x += stepX)
            colours.insert(back.pixel(x, y));
    if (colours.size() < 2)
        return path + " is blank (one colour)";
    return {};
}

} // namespace kvwb::testing

// Fails the test unless the screenshot of `widget` was written and is not blank.
#define KVWB_VERIFY_SCREENSHOT(widget, name)                                                                 \
    do {                                                                                                     \
        const QString why_ = kvwb::testing::saveScreenshot(widget, name);                                    \
        QVERIFY2(why_.isEmpty(), qPrintable(why_));                                                          \
    } while (false)
