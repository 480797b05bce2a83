// Pagination of the PDF report: QTextDocument breaks pages wherever the next line does not fit and
// has no "keep with next", so a heading, a chart or the one-line label of a table landed alone at
// the bottom of a page with what it introduces on the next. keepWithNext moves each such block (and
// the heading chain above it) to the top of the next page.
//
// GUI-thread or any thread that owns the document; needs no QApplication.
#pragma once

#include <QStringList>

class QTextDocument;

namespace kvwb::ui::report {

// The document must have its page size set (QTextDocument::setPageSize). Blocks kept with what
// follows: headings, blocks holding an image, and one-line paragraphs followed by a table, an
// image or a preformatted block (not a chart's caption, which ends its chart's group). Inserts page breaks
// before them where needed; a block already at the top of its page is left where it is (a break would only
// add an empty page). Returns the number of breaks inserted.
int keepWithNext(QTextDocument &doc);

// The kept-with-next blocks (their text, at most 60 characters each) whose next element starts on
// a later page: empty after keepWithNext, unless an element is taller than a page.
QStringList strandedBlocks(const QTextDocument &doc);

} // namespace kvwb::ui::report
