// The steps' job progress bars: an idle, empty bar reads as a text field, so a bar is hidden until
// its step's job runs and again when it holds nothing (a failure resets it), its place kept so that
// no button moves when it appears.
//
// GUI-thread only.
#pragma once

class QProgressBar;

namespace kvwb::ui {

// Hides bar until setJobProgressRunning(bar, true), keeping its place in the layout.
void initJobProgress(QProgressBar *bar);
// running: shown; idle: shown only while it holds a result (its value above its minimum: a finished
// or stopped job's share), so it hides when reset to its minimum.
void setJobProgressRunning(QProgressBar *bar, bool running);

} // namespace kvwb::ui
