// A colour-scaled grid of a core::Matrix with row and column labels, a title and a colour legend:
// the Alignment panel's layer x layer CKA map and its per layer x head R^2 / attention-cosine maps.
// Cells show their value when they are large enough to read it (about 34 x 18 px); the tooltip
// names the cell and its value at any size.
//
// The colour scale runs over the matrix's finite min..max unless a fixed range is set: R^2 and
// cosine maps should use a fixed 0..1 so that two maps side by side compare by colour. The colours
// are ui/charts/color_map.h's viridis, the same as the report's heatmaps; NaN cells are grey.
// Row 0 is drawn at the top, like the matrix is written.
//
// GUI-thread only (a QWidget). Holds a copy of the matrix it shows.
#pragma once

#include "core/metrics/metric_table.h"

#include <QStringList>
#include <QWidget>

#include <optional>

namespace kvwb::ui {

class HeatmapWidget : public QWidget
{
    Q_OBJECT

public:
    explicit HeatmapWidget(QWidget *parent = nullptr);

    // rowLabels/colLabels: one per row/column (e.g. "B0".."B5", "A0".."A3"); missing ones are
    // numbered. title: what the values are, e.g. "Linear CKA of keys".
    void setMatrix(const core::Matrix &matrix, const QStringList &rowLabels, const QStringList &colLabels,
                   const QString &title);
    // What the rows and columns are, drawn beside the labels, e.g. "model B layer", "model A layer".
    void setAxisTitles(const QString &rowTitle, const QString &colTitle);
    // Fixes the colour scale (min < max); std::nullopt returns to the matrix's own range.
    void setValueRange(std::optional<std::pair<double, double>> range);
    std::pair<double, double> valueRange() const; // the range the colours use now

    const core::Matrix &matrix() const { return m_matrix; }
    QString title() const { return m_title; }

    // Colour of a value under the current range (viridisColor: dark blue low, yellow high).
    QColor colorFor(double value) const;
    // Where a cell is drawn, in widget coordinates; empty for an index outside the matrix.
    QRect cellRect(int row, int col) const;
    // The cell under a point, or std::nullopt outside the grid.
    std::optional<std::pair<int, int>> cellAt(const QPoint &pos) const;
    // The tooltip shown at a point ("B2 × A1: 0.8731"); empty outside the grid.
    QString toolTipAt(const QPoint &pos) const;

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    void paintEvent(QPaintEvent *event) override;
    bool event(QEvent *event) override;

private:
    struct Geometry
    {
        QRect grid;   // the cells
        QRect legend; // the colour bar
        double cellWidth = 0;
        double cellHeight = 0;
    };
    Geometry geometry() const;
    QString rowLabel(int row) const;
    QString colLabel(int col) const;
    QString formatValue(double value) const;

    core::Matrix m_matrix;
    QStringList m_rowLabels;
    QStringList m_colLabels;
    QString m_title;
    QString m_rowTitle;
    QString m_colTitle;
    std::optional<std::pair<double, double>> m_fixedRange;
    double m_dataMin = 0; // finite min/max of m_matrix (0, 1 when it has none)
    double m_dataMax = 1;
};

} // namespace kvwb::ui
