#include "ui/panels/job_progress.h"

#include <QProgressBar>
#include <QSizePolicy>

namespace kvwb::ui {

namespace {

constexpr const char *kRunning = "kvwbJobRunning";

void refresh(QProgressBar *bar)
{
    bar->setVisible(bar->property(kRunning).toBool() || bar->value() > bar->minimum());
}

} // namespace

void initJobProgress(QProgressBar *bar)
{
    QSizePolicy keep = bar->sizePolicy();
    keep.setRetainSizeWhenHidden(true);
    bar->setSizePolicy(keep);
    bar->setProperty(kRunning, false);
    QObject::connect(bar, &QProgressBar::valueChanged, bar, [bar] { refresh(bar); });
    refresh(bar);
}

void setJobProgressRunning(QProgressBar *bar, bool running)
{
    bar->setProperty(kRunning, running);
    refresh(bar);
}

} // namespace kvwb::ui
