#include "ui/charts/color_map.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace kvwb::ui {

namespace {

// Viridis (matplotlib's) sampled at t = 0, 1/8, ..., 1.
constexpr std::array<QRgb, 9> kViridis = {0xff440154, 0xff472d7b, 0xff3b528b, 0xff2c728e, 0xff21918c,
                                          0xff28ae80, 0xff5ec962, 0xffaddc30, 0xfffde725};

} // namespace

QColor viridisColor(double t)
{
    if (!std::isfinite(t))
        return noValueColor();
    t = std::clamp(t, 0.0, 1.0) * double(kViridis.size() - 1);
    const int i = std::min(int(t), int(kViridis.size()) - 2);
    const double f = t - i;
    const QColor a(kViridis[size_t(i)]), b(kViridis[size_t(i) + 1]);
    return QColor::fromRgbF(float(a.redF() + f * (b.redF() - a.redF())),
                            float(a.greenF() + f * (b.greenF() - a.greenF())),
                            float(a.blueF() + f * (b.blueF() - a.blueF())));
}

QColor noValueColor()
{
    return QColor(0xc8, 0xc8, 0xc8);
}

} // namespace kvwb::ui
