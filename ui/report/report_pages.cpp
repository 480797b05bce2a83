#include "ui/report/report_pages.h"

#include <QAbstractTextDocumentLayout>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextFrame>
#include <QTextTable>

#include <cmath>
#include <vector>

namespace kvwb::ui::report {

namespace {

// One element of the root frame: a block, or a frame (a table) whose first block is `block`.
struct Element
{
    QTextBlock block;
    QTextFrame *frame = nullptr;
    qreal top = 0;
    bool keep = false;
};

bool holdsImage(const QTextBlock &b)
{
    for (auto it = b.begin(); !it.atEnd(); ++it)
        if (it.fragment().charFormat().isImageFormat())
            return true;
    return false;
}

bool preformatted(const QTextBlock &b)
{
    return b.blockFormat().nonBreakableLines() || b.charFormat().fontFixedPitch();
}

std::vector<Element> elementsOf(const QTextDocument &doc)
{
    auto *layout = doc.documentLayout();
    std::vector<Element> out;
    for (auto it = doc.rootFrame()->begin(); !it.atEnd(); ++it) {
        Element e;
        if (QTextFrame *f = it.currentFrame()) {
            e.frame = f;
            e.block = f->firstCursorPosition().block();
            e.top = layout->frameBoundingRect(f).top();
        } else {
            e.block = it.currentBlock();
            if (!e.block.isValid())
                continue;
            e.top = layout->blockBoundingRect(e.block).top();
        }
        out.push_back(e);
    }
    // what is kept with its successor
    for (size_t i = 0; i + 1 < out.size(); ++i) {
        Element &e = out[i];
        if (e.frame)
            continue;
        const Element &next = out[i + 1];
        // a chart's caption follows its image: it ends the group, it does not lead the next one
        const bool caption = i > 0 && !out[i - 1].frame && holdsImage(out[i - 1].block);
        const bool label = !caption && e.block.layout() && e.block.layout()->lineCount() == 1 &&
                           !e.block.text().trimmed().isEmpty() &&
                           (next.frame || holdsImage(next.block) || preformatted(next.block));
        e.keep = e.block.blockFormat().headingLevel() > 0 || holdsImage(e.block) || label;
    }
    return out;
}

int pageOf(qreal y, qreal pageHeight)
{
    return int(std::floor(y / pageHeight));
}

} // namespace

int keepWithNext(QTextDocument &doc)
{
    const qreal h = doc.pageSize().height();
    if (!(h > 0))
        return 0;
    int breaks = 0;
    size_t from = 0; // elements before it are settled
    for (int pass = 0; pass < 10000; ++pass) {
        doc.documentLayout()->documentSize(); // lays the whole document out again
        const auto els = elementsOf(doc);
        bool moved = false;
        for (size_t i = from; i + 1 < els.size() && !moved; ++i) {
            if (!els[i].keep || pageOf(els[i + 1].top, h) <= pageOf(els[i].top, h))
                continue;
            size_t start = i; // the chain of kept blocks that ends at i moves as one
            while (start > 0 && els[start - 1].keep && pageOf(els[start - 1].top, h) == pageOf(els[i].top, h))
                --start;
            const qreal intoPage = els[start].top - pageOf(els[start].top, h) * h;
            if (intoPage < 0.05 * h)
                continue; // already at the top: a break would only leave an empty page
            QTextCursor c(els[start].block);
            QTextBlockFormat f = els[start].block.blockFormat();
            f.setPageBreakPolicy(f.pageBreakPolicy() | QTextFormat::PageBreak_AlwaysBefore);
            c.setBlockFormat(f);
            ++breaks;
            from = start + 1;
            moved = true;
        }
        if (!moved)
            break;
    }
    return breaks;
}

QStringList strandedBlocks(const QTextDocument &doc)
{
    QStringList out;
    const qreal h = doc.pageSize().height();
    if (!(h > 0))
        return out;
    doc.documentLayout()->documentSize();
    const auto els = elementsOf(doc);
    for (size_t i = 0; i + 1 < els.size(); ++i)
        if (els[i].keep && pageOf(els[i + 1].top, h) > pageOf(els[i].top, h))
            out << (holdsImage(els[i].block) ? QStringLiteral("(image)") : els[i].block.text().left(60));
    return out;
}

} // namespace kvwb::ui::report
