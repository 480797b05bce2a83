// Tooltips that stay on the screen: a plain-text tooltip longer than one short line is shown as a
// wrapped paragraph (Qt wraps rich text at about 80 characters), so long explanations neither run
// off the screen nor stretch across it.
//
// GUI-thread only.
#pragma once

#include <QString>

class QObject;

namespace kvwb::ui {

// Filters the application's tooltip events for as long as owner lives.
void installWrappedToolTips(QObject *owner);
// text as the filter shows it: rich text (a <p> of the escaped text, line breaks kept) when it is
// plain and longer than 70 characters; otherwise text unchanged.
QString wrappedToolTip(const QString &text);

} // namespace kvwb::ui
