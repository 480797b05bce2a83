#include "ui/window/tool_tips.h"

#include <QApplication>
#include <QHelpEvent>
#include <QTextDocument>
#include <QToolTip>
#include <QWidget>

namespace kvwb::ui {

namespace {

class ToolTipWrapper : public QObject
{
public:
    using QObject::QObject;

protected:
    bool eventFilter(QObject *watched, QEvent *event) override
    {
        if (event->type() != QEvent::ToolTip || !watched->isWidgetType())
            return false;
        auto *w = static_cast<QWidget *>(watched);
        const QString tip = w->toolTip();
        const QString wrapped = wrappedToolTip(tip);
        if (tip.isEmpty() || wrapped == tip)
            return false; // empty (an item view's cells answer themselves), short or rich already
        QToolTip::showText(static_cast<QHelpEvent *>(event)->globalPos(), wrapped, w, {},
                           w->toolTipDuration());
        return true;
    }
};

} // namespace

QString wrappedToolTip(const QString &text)
{
    if (text.size() <= 70 || Qt::mightBeRichText(text))
        return text;
    return QStringLiteral("<p style='white-space:pre-wrap'>%1</p>").arg(text.toHtmlEscaped());
}

void installWrappedToolTips(QObject *owner)
{
    qApp->installEventFilter(new ToolTipWrapper(owner));
}

} // namespace kvwb::ui
