#include "ui/charts/heatmap_widget.h"

#include "ui/charts/color_map.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>

namespace kvwb::ui {

namespace {

constexpr int kMargin = 8;
constexpr int kLegendBarWidth = 16;

} // namespace

HeatmapWidget::HeatmapWidget(QWidget *parent) : QWidget(parent)
{
    setMouseTracking(true);
    setAttribute(Qt::WA_OpaquePaintEvent, false);
}

void HeatmapWidget::setMatrix(const core::Matrix &matrix, const QStringList &rowLabels,
                              const QStringList &colLabels, const QString &title)
{
    m_matrix = matrix;
    m_rowLabels = rowLabels;
    m_colLabels = colLabels;
    m_title = title;
    bool any = false;
    double lo = 0, hi = 0;
    for (double v : m_matrix.data) {
        if (!std::isfinite(v))
            continue;
        lo = any ? std::min(lo, v) : v;
        hi = any ? std::max(hi, v) : v;
        any = true;
    }
    if (!any) {
        lo = 0;
        hi = 1;
    } else if (lo == hi) {
        // A constant matrix still needs a non-empty scale; centre the colour.
        lo -= 0.5;
        hi += 0.5;
    }
    m_dataMin = lo;
    m_dataMax = hi;
    update();
}

void HeatmapWidget::setAxisTitles(const QString &rowTitle, const QString &colTitle)
{
    m_rowTitle = rowTitle;
    m_colTitle = colTitle;
    update();
}

void HeatmapWidget::setValueRange(std::optional<std::pair<double, double>> range)
{
    if (range && !(range->first < range->second))
        range.reset();
    m_fixedRange = range;
    update();
}

std::pair<double, double> HeatmapWidget::valueRange() const
{
    return m_fixedRange ? *m_fixedRange : std::pair(m_dataMin, m_dataMax);
}

QColor HeatmapWidget::colorFor(double value) const
{
    if (!std::isfinite(value))
        return noValueColor();
    const auto [lo, hi] = valueRange();
    return viridisColor((value - lo) / (hi - lo));
}

QString HeatmapWidget::rowLabel(int row) const
{
    return row < m_rowLabels.size() ? m_rowLabels[row] : QString::number(row);
}

QString HeatmapWidget::colLabel(int col) const
{
    return col < m_colLabels.size() ? m_colLabels[col] : QString::number(col);
}

QString HeatmapWidget::formatValue(double value) const
{
    if (std::isnan(value))
        return QStringLiteral("\u2013");
    const auto [lo, hi] = valueRange();
    // Scores in [-1, 1] read best with two decimals; anything else with 3 significant digits.
    if (std::max(std::fabs(lo), std::fabs(hi)) <= 1.0)
        return QString::number(value, 'f', 2);
    return QString::number(value, 'g', 3);
}

HeatmapWidget::Geometry HeatmapWidget::geometry() const
{
    const QFontMetrics fm(font());
    QFont titleFont = font();
    titleFont.setBold(true);
    titleFont.setPointSizeF(font().pointSizeF() * 1.25);
    const QFontMetrics tfm(titleFont);

    int rowLabelWidth = 0;
    for (int r = 0; r < m_matrix.rows; ++r)
        rowLabelWidth = std::max(rowLabelWidth, fm.horizontalAdvance(rowLabel(r)));
    const auto [lo, hi] = valueRange();
    const int legendTextWidth =
        std::max(fm.horizontalAdvance(formatValue(lo)), fm.horizontalAdvance(formatValue(hi)));

    const int top = kMargin + (m_title.isEmpty() ? 0 : tfm.height() + kMargin);
    const int left = kMargin + (m_rowTitle.isEmpty() ? 0 : fm.height() + kMargin) + rowLabelWidth + 6;
    const int bottom = kMargin + fm.height() + 4 + (m_colTitle.isEmpty() ? 0 : fm.height() + 4);
    const int right = kMargin + 2 * kMargin + kLegendBarWidth + 8 + legendTextWidth;

    Geometry g;
    g.grid = QRect(left, top, std::max(0, width() - left - right), std::max(0, height() - top - bottom));
    if (m_matrix.rows > 0 && m_matrix.cols > 0) {
        g.cellWidth = double(g.grid.width()) / m_matrix.cols;
        g.cellHeight = double(g.grid.height()) / m_matrix.rows;
    }
    g.legend = QRect(g.grid.right() + 2 * kMargin, g.grid.top(), kLegendBarWidth, g.grid.height());
    return g;
}

QRect HeatmapWidget::cellRect(int row, int col) const
{
    if (row < 0 || col < 0 || row >= m_matrix.rows || col >= m_matrix.cols)
        return {};
    const Geometry g = geometry();
    // Edges rounded from the same formula for neighbours, so cells tile without gaps.
    const int x0 = g.grid.left() + int(std::lround(col * g.cellWidth));
    const int x1 = g.grid.left() + int(std::lround((col + 1) * g.cellWidth));
    const int y0 = g.grid.top() + int(std::lround(row * g.cellHeight));
    const int y1 = g.grid.top() + int(std::lround((row + 1) * g.cellHeight));
    return QRect(QPoint(x0, y0), QPoint(x1 - 1, y1 - 1));
}

std::optional<std::pair<int, int>> HeatmapWidget::cellAt(const QPoint &pos) const
{
    const Geometry g = geometry();
    if (m_matrix.rows == 0 || m_matrix.cols == 0 || !g.grid.contains(pos) || g.cellWidth <= 0 ||
        g.cellHeight <= 0)
        return std::nullopt;
    const int col = std::min(int((pos.x() - g.grid.left()) / g.cellWidth), m_matrix.cols - 1);
    const int row = std::min(int((pos.y() - g.grid.top()) / g.cellHeight), m_matrix.rows - 1);
    return std::pair(row, col);
}

QString HeatmapWidget::toolTipAt(const QPoint &pos) const
{
    const auto cell = cellAt(pos);
    if (!cell)
        return {};
    const auto [row, col] = *cell;
    const double v = m_matrix.data[size_t(row) * size_t(m_matrix.cols) + size_t(col)];
    return QStringLiteral("%1 \u00d7 %2: %3")
        .arg(rowLabel(row), colLabel(col), std::isnan(v) ? tr("not computed") : QString::number(v, 'g', 4));
}

QSize HeatmapWidget::sizeHint() const
{
    return {800, 500};
}

QSize HeatmapWidget::minimumSizeHint() const
{
    return {240, 160};
}

bool HeatmapWidget::event(QEvent *event)
{
    if (event->type() == QEvent::ToolTip) {
        auto *help = static_cast<QHelpEvent *>(event);
        const QString text = toolTipAt(help->pos());
        if (text.isEmpty()) {
            QToolTip::hideText();
            event->ignore();
        } else {
            QToolTip::showText(help->globalPos(), text, this);
        }
        return true;
    }
    return QWidget::event(event);
}

void HeatmapWidget::paintEvent(QPaintEvent *)
{
    QPainter p(this);
    p.fillRect(rect(), palette().window());
    const Geometry g = geometry();
    const QFontMetrics fm(font());
    QFont titleFont = font();
    titleFont.setBold(true);
    titleFont.setPointSizeF(font().pointSizeF() * 1.25);

    if (!m_title.isEmpty()) {
        p.setFont(titleFont);
        p.setPen(palette().windowText().color());
        p.drawText(QRect(0, kMargin, width(), QFontMetrics(titleFont).height()), Qt::AlignCenter, m_title);
        p.setFont(font());
    }
    if (m_matrix.rows <= 0 || m_matrix.cols <= 0 || g.grid.isEmpty()) {
        p.setPen(palette().placeholderText().color());
        p.drawText(rect(), Qt::AlignCenter, tr("No data"));
        return;
    }

    // Cells, with their value when the text fits.
    const QString widest = formatValue(-0.88);
    const bool showValues =
        g.cellWidth >= fm.horizontalAdvance(widest) + 6 && g.cellHeight >= fm.height() + 2;
    for (int r = 0; r < m_matrix.rows; ++r) {
        for (int c = 0; c < m_matrix.cols; ++c) {
            const double v = m_matrix.data[size_t(r) * size_t(m_matrix.cols) + size_t(c)];
            const QRect cell = cellRect(r, c);
            const QColor color = colorFor(v);
            p.fillRect(cell, color);
            if (showValues) {
                // Dark text on the light (yellow-green) end, white on the dark end; perceived
                // luminance, because HSL lightness calls saturated yellow "mid".
                const double luminance =
                    0.299 * color.redF() + 0.587 * color.greenF() + 0.114 * color.blueF();
                p.setPen(luminance > 0.5 ? Qt::black : Qt::white);
                p.drawText(cell, Qt::AlignCenter, formatValue(v));
            }
        }
    }

    // Labels; thinned to every n-th when they would overlap (e.g. 32 layers in 200 px).
    p.setPen(palette().windowText().color());
    const int rowStep = std::max(1, int(std::ceil(fm.height() / std::max(1.0, g.cellHeight))));
    for (int r = 0; r < m_matrix.rows; r += rowStep) {
        const QRect cell = cellRect(r, 0);
        p.drawText(QRect(0, cell.top(), g.grid.left() - 6, cell.height()), Qt::AlignRight | Qt::AlignVCenter,
                   rowLabel(r));
    }
    int colLabelWidth = 0;
    for (int c = 0; c < m_matrix.cols; ++c)
        colLabelWidth = std::max(colLabelWidth, fm.horizontalAdvance(colLabel(c)));
    const int colStep = std::max(1, int(std::ceil((colLabelWidth + 6) / std::max(1.0, g.cellWidth))));
    for (int c = 0; c < m_matrix.cols; c += colStep) {
        const QRect cell = cellRect(0, c);
        p.drawText(QRect(cell.center().x() - 100, g.grid.bottom() + 4, 200, fm.height()), Qt::AlignCenter,
                   colLabel(c));
    }
    if (!m_colTitle.isEmpty())
        p.drawText(QRect(g.grid.left(), g.grid.bottom() + 4 + fm.height() + 4, g.grid.width(), fm.height()),
                   Qt::AlignCenter, m_colTitle);
    if (!m_rowTitle.isEmpty()) {
        p.save();
        p.translate(kMargin, g.grid.center().y());
        p.rotate(-90);
        p.drawText(QRect(-g.grid.height() / 2, 0, g.grid.height(), fm.height()), Qt::AlignCenter, m_rowTitle);
        p.restore();
    }

    // Legend: the colour bar, high at the top, with min, middle and max marked.
    const auto [lo, hi] = valueRange();
    for (int y = 0; y < g.legend.height(); ++y) {
        const double t = 1.0 - double(y) / std::max(1, g.legend.height() - 1);
        p.setPen(viridisColor(t));
        p.drawLine(g.legend.left(), g.legend.top() + y, g.legend.right(), g.legend.top() + y);
    }
    p.setPen(palette().windowText().color());
    p.drawRect(g.legend.adjusted(0, 0, -1, -1));
    const int textX = g.legend.right() + 8;
    const auto tick = [&](double value, int y, Qt::Alignment vertical) {
        p.drawLine(g.legend.right(), y, g.legend.right() + 4, y);
        const QRect box = vertical == Qt::AlignTop ? QRect(textX, y, width() - textX, fm.height())
                          : vertical == Qt::AlignBottom
                              ? QRect(textX, y - fm.height(), width() - textX, fm.height())
                              : QRect(textX, y - fm.height() / 2, width() - textX, fm.height());
        p.drawText(box, Qt::AlignLeft | vertical, formatValue(value));
    };
    tick(hi, g.legend.top(), Qt::AlignTop);
    tick((lo + hi) / 2, g.legend.center().y(), Qt::AlignVCenter);
    tick(lo, g.legend.bottom(), Qt::AlignBottom);
}

} // namespace kvwb::ui
