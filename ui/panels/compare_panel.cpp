#include "ui/panels/compare_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDoubleSpinBox>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QPainter>
#include <QPixmap>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QShortcut>
#include <QSpinBox>
#include <QStackedWidget>
#include <QTextBrowser>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

namespace kvwb::ui {

namespace {

// A KL of 2 nats per token is far past anything a usable converter produces (a good one stays under
// 0.3; B given no prefix at all lands around 1.5), so the scale saturates there.
constexpr double KlSaturation = 2.0;

struct Stop
{
    double at;
    QColor colour;
};

QColor interpolate(std::initializer_list<Stop> stops, double v)
{
    const Stop *prev = stops.begin();
    if (!std::isfinite(v) || v <= prev->at)
        return prev->colour;
    for (const Stop *s = stops.begin() + 1; s != stops.end(); prev = s, ++s) {
        if (v <= s->at) {
            const double t = (v - prev->at) / (s->at - prev->at);
            auto mix = [t](int a, int b) { return int(std::lround(a + t * (b - a))); };
            return QColor(mix(prev->colour.red(), s->colour.red()),
                          mix(prev->colour.green(), s->colour.green()),
                          mix(prev->colour.blue(), s->colour.blue()));
        }
    }
    return prev->colour;
}

// Probability p of the generated token: red when the model was unsure, white when it was confident.
// Light enough everywhere for black text.
QColor probabilityColour(double p)
{
    return interpolate({{0.0, QColor(0xf0, 0x7a, 0x6e)},
                        {0.5, QColor(0xfd, 0xd4, 0x9e)},
                        {0.85, QColor(0xff, 0xf5, 0xdc)},
                        {1.0, QColor(0xff, 0xff, 0xff)}},
                       p);
}

// KL in nats: white at 0 to deep red at KlSaturation (ColorBrewer RdBu's red half).
QColor klColour(double kl)
{
    return interpolate({{0.0, QColor(0xff, 0xff, 0xff)},
                        {0.25, QColor(0xfd, 0xdb, 0xc7)},
                        {0.75, QColor(0xf4, 0xa5, 0x82)},
                        {1.25, QColor(0xd6, 0x60, 0x4d)},
                        {KlSaturation, QColor(0xb2, 0x18, 0x2b)}},
                       kl);
}

QColor textColourOn(const QColor &background)
{
    const double luma = 0.299 * background.red() + 0.587 * background.green() + 0.114 * background.blue();
    return luma < 140 ? Qt::white : Qt::black;
}

// A piece as HTML: escaped, a newline shown as ↵ and broken, an empty piece as ∅ so it stays visible.
QString pieceHtml(const std::string &piece)
{
    if (piece.empty())
        return QStringLiteral("\u2205");
    QString s = QString::fromStdString(piece).toHtmlEscaped();
    s.remove(QLatin1Char('\r'));
    s.replace(QLatin1Char('\n'), QStringLiteral("\u21b5<br>"));
    return s;
}

// At most n characters: a longer text keeps its first n - 1 and an ellipsis.
QString elided(const QString &text, int n)
{
    return text.size() <= n ? text : text.left(n - 1) + QStringLiteral("\u2026");
}

QString fmt(double v, int decimals)
{
    return QString::number(v, 'f', decimals);
}

// non-breaking spaces: the marker never splits over two lines
const QString DivergenceMarker = QStringLiteral("\u25b6\u00a0first\u00a0divergence");

QString emptyPaneHtml(int pane, const QString &fontFamily)
{
    static const char *what[] = {
        QT_TRANSLATE_NOOP("kvwb::ui::ComparePanel", "Model A's own continuation of the prompt appears here."),
        QT_TRANSLATE_NOOP("kvwb::ui::ComparePanel",
                          "Model B's continuation after computing the prompt itself appears here."),
        QT_TRANSLATE_NOOP("kvwb::ui::ComparePanel",
                          "Model B's continuation starting from A's cache, converted into B's space, "
                          "appears here."),
    };
    // in the panel's own font: the panes' fixed-width font is for tokens
    return QStringLiteral("<div style=\"color:#808080; font-family:'%1'\"><p>%2</p><p>%3</p></div>")
        .arg(fontFamily.toHtmlEscaped(),
             ComparePanel::tr("Load the models and open an experiment with a converter, type a prompt, "
                              "press Run."),
             ComparePanel::tr(what[pane]));
}

// A gradient bar with tick labels under it, drawn with the same colour function as the tokens.
QPixmap legendPixmap(bool kl, const QFont &font)
{
    const int barWidth = 240, barHeight = 12, margin = 14;
    const QFontMetrics fm(font);
    QPixmap pm(barWidth + 2 * margin + 30, barHeight + fm.height() + 4);
    pm.fill(Qt::transparent);
    QPainter p(&pm);
    p.setFont(font);
    for (int x = 0; x < barWidth; ++x) {
        const double t = double(x) / (barWidth - 1);
        p.setPen(kl ? klColour(t * KlSaturation) : probabilityColour(t));
        p.drawLine(margin + x, 0, margin + x, barHeight - 1);
    }
    p.setPen(QColor(0x90, 0x90, 0x90));
    p.drawRect(margin, 0, barWidth - 1, barHeight - 1);
    p.setPen(QColor(0x30, 0x30, 0x30));
    const QStringList ticks = kl ? QStringList{"0", "0.5", "1", "1.5", QString::fromUtf8("\u2265 2 nats")}
                                 : QStringList{"0", "0.25", "0.5", "0.75", "1"};
    for (int i = 0; i < ticks.size(); ++i) {
        const int x = margin + int(std::lround(double(i) / (ticks.size() - 1) * (barWidth - 1)));
        const int w = fm.horizontalAdvance(ticks[i]);
        // the first label starts at the bar's left edge, the rest are centred on their tick
        const int left = i == 0 ? x - 2 : x - w / 2;
        p.drawText(left, barHeight + 2 + fm.ascent(), ticks[i]);
    }
    return pm;
}

} // namespace

ComparePanel::ComparePanel(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QVBoxLayout(this);

    addHistoryAndPrompt(layout);
    QLabel *comparison = addControls(layout);
    addPromptSetRow(layout);
    addResultViews(layout);
    connectControls(comparison);

    refreshReadiness();
    refreshHeaders();
    refreshLegend();
    showEmpty();
}

// The earlier comparisons to show again, and the prompt.
void ComparePanel::addHistoryAndPrompt(QVBoxLayout *layout)
{
    auto *historyRow = new QHBoxLayout;
    historyRow->addWidget(new QLabel(tr("Earlier comparisons:"), this));
    m_historyCombo = new QComboBox(this);
    m_historyCombo->setObjectName("historyCombo");
    m_historyCombo->setPlaceholderText(tr("none yet"));
    m_historyCombo->setToolTip(tr("Comparisons run in this session or stored in the experiment; pick one to "
                                  "show it again."));
    m_historyCombo->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_historyCombo->setMinimumContentsLength(40);
    historyRow->addWidget(m_historyCombo, 1);
    m_hint = new QLabel(this);
    m_hint->setObjectName("compareHint");
    m_hint->setStyleSheet("color:#666666");
    historyRow->addWidget(m_hint, 1);
    layout->addLayout(historyRow);

    m_prompt = new QPlainTextEdit(this);
    m_prompt->setObjectName("promptEdit");
    m_prompt->setPlaceholderText(tr("Type a prompt for all three paths to continue, e.g. \"Explain in two "
                                    "sentences what a KV cache stores.\" (Ctrl+Enter runs)"));
    m_prompt->setToolTip(tr("The text that A, B from scratch and B from A's converted cache all continue."));
    m_prompt->setTabChangesFocus(true);
    m_prompt->setFixedHeight(m_prompt->fontMetrics().lineSpacing() * 4 + 12);
    layout->addWidget(m_prompt);
}

// Converter, length, the gate (its comparison sign returned: it follows the signal), run, cancel, progress.
QLabel *ComparePanel::addControls(QVBoxLayout *layout)
{
    auto *controls = new QHBoxLayout;
    auto label = [this, controls](const QString &text, QWidget *buddy) {
        auto *l = new QLabel(text, this);
        l->setBuddy(buddy);
        l->setToolTip(buddy->toolTip());
        controls->addWidget(l);
        controls->addWidget(buddy);
    };
    m_converter = new QComboBox(this);
    m_converter->setObjectName("converterCombo");
    m_converter->setToolTip(tr("The converter from the experiment that maps A's KV cache into B's space."));
    m_converter->setMinimumContentsLength(10);
    m_converter->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    label(tr("&Converter:"), m_converter);
    m_maxTokens = new QSpinBox(this);
    m_maxTokens->setObjectName("maxTokensSpin");
    m_maxTokens->setRange(1, 512);
    m_maxTokens->setValue(32);
    m_maxTokens->setToolTip(tr("How many tokens each of the three paths generates."));
    label(tr("&Max tokens:"), m_maxTokens);
    controls->addSpacing(8);
    m_gateSignal = new QComboBox(this);
    m_gateSignal->setObjectName("gateSignalCombo");
    m_gateSignal->addItems({"tail_kl", "kv_cos", "nll", "attn_cos"});
    m_gateSignal->setToolTip(tr("What the quality gate measures before trusting the converted cache: tail_kl "
                                "and nll pass when low, kv_cos and attn_cos (B's attention output on the "
                                "tail, converted vs own K/V) when high."));
    label(tr("&Gate:"), m_gateSignal);
    auto *comparison = new QLabel(QString::fromUtf8("\u2264"), this);
    comparison->setObjectName("gateComparison");
    controls->addWidget(comparison);
    m_gateThreshold = new QDoubleSpinBox(this);
    m_gateThreshold->setObjectName("gateThresholdSpin");
    m_gateThreshold->setDecimals(3);
    m_gateThreshold->setRange(-1000, 1000);
    m_gateThreshold->setSingleStep(0.01);
    m_gateThreshold->setValue(0.1);
    m_gateThreshold->setToolTip(tr("The gate passes when the signal is at or below this (at or above for "
                                   "kv_cos and attn_cos); a failed gate falls back to B's own prefill."));
    controls->addWidget(m_gateThreshold);
    m_gateTail = new QSpinBox(this);
    m_gateTail->setObjectName("gateTailSpin");
    m_gateTail->setRange(1, 64);
    m_gateTail->setValue(4);
    m_gateTail->setToolTip(tr("How many of the prompt's last positions B recomputes itself to check the "
                              "converted cache."));
    label(tr("&Tail:"), m_gateTail);
    controls->addSpacing(8);
    m_colourBy = new QComboBox(this);
    m_colourBy->setObjectName("colourByCombo");
    m_colourBy->addItems({tr("probability"), tr("KL to scratch")});
    m_colourBy->setToolTip(tr("Colour each token by the probability its model gave it, or by how far the "
                              "transfer path's next-token distribution is from scratch's (KL)."));
    label(tr("C&olour by:"), m_colourBy);
    controls->addStretch(1);
    m_run = new QPushButton(tr("&Run"), this);
    m_run->setObjectName("runButton");
    m_run->setToolTip(tr("Generate the three continuations of the prompt (Ctrl+Enter)."));
    controls->addWidget(m_run);
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setObjectName("cancelCompareButton");
    m_cancel->setEnabled(false);
    m_cancel->setToolTip(tr("Stop the running comparison; nothing is shown or stored."));
    controls->addWidget(m_cancel);
    m_progress = new QProgressBar(this);
    m_progress->setObjectName("compareProgress");
    m_progress->setRange(0, 1000);
    m_progress->setMinimumWidth(160);
    m_progress->setToolTip(tr("Progress of the running comparison."));
    QSizePolicy keep = m_progress->sizePolicy();
    keep.setRetainSizeWhenHidden(true); // the row does not jump when a run starts
    m_progress->setSizePolicy(keep);
    m_progress->hide();
    controls->addWidget(m_progress);
    layout->addLayout(controls);

    return comparison;
}

// A prompt set with the baselines and paired intervals, as `kvwb compare --held-out --baselines`.
void ComparePanel::addPromptSetRow(QVBoxLayout *layout)
{
    auto *setRow = new QHBoxLayout;
    m_setSource = new QComboBox(this);
    m_setSource->setObjectName("promptSetCombo");
    m_setSource->setEditable(true);
    m_setSource->addItem(tr("held-out prompts"));
    m_setSource->setInsertPolicy(QComboBox::NoInsert);
    m_setSource->setMinimumContentsLength(24);
    m_setSource->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_setSource->setToolTip(tr("The prompts of a set run: the converter's held-out (test) prompts, or type "
                               "the path of a prompt file (text lines or JSONL)."));
    auto *setLabel = new QLabel(tr("Prompt &set:"), this);
    setLabel->setBuddy(m_setSource);
    setLabel->setToolTip(m_setSource->toolTip());
    setRow->addWidget(setLabel);
    setRow->addWidget(m_setSource, 1);
    m_setLimit = new QSpinBox(this);
    m_setLimit->setObjectName("promptSetLimitSpin");
    m_setLimit->setRange(0, 100000);
    m_setLimit->setValue(12);
    m_setLimit->setSpecialValueText(tr("all"));
    m_setLimit->setToolTip(tr("At most this many prompts of the set (0: all); each runs A and B three ways "
                              "(and twice more with the baselines)."));
    auto *limitLabel = new QLabel(tr("&Prompts:"), this);
    limitLabel->setBuddy(m_setLimit);
    limitLabel->setToolTip(m_setLimit->toolTip());
    setRow->addWidget(limitLabel);
    setRow->addWidget(m_setLimit);
    // in this row for the room: it applies to a single prompt's run as well
    m_recompute = new QDoubleSpinBox(this);
    m_recompute->setObjectName("recomputeSpin");
    m_recompute->setDecimals(2);
    m_recompute->setRange(0, 1);
    m_recompute->setSingleStep(0.05);
    m_recompute->setToolTip(tr("Selective recompute, for a single prompt and a set: the share of B's prefix "
                               "positions B computes itself (half the first, half the last); the rest come "
                               "from the converted cache. 0: plain transfer, 1: B's own prefill."));
    auto *recomputeLabel = new QLabel(tr("Recompute:"), this); // its letters are all other mnemonics
    recomputeLabel->setBuddy(m_recompute);
    recomputeLabel->setToolTip(m_recompute->toolTip());
    setRow->addWidget(recomputeLabel);
    setRow->addWidget(m_recompute);
    m_setVersus = new QComboBox(this);
    m_setVersus->setObjectName("versusCombo");
    m_setVersus->addItem(tr("(none)"));
    m_setVersus->setToolTip(
        tr("Side by side: a second converter run on the same prompts of the set, with the "
           "paired differences and their intervals (kvwb compare --versus)."));
    auto *versusLabel = new QLabel(tr("Versus:"), this);
    versusLabel->setBuddy(m_setVersus);
    versusLabel->setToolTip(m_setVersus->toolTip());
    setRow->addWidget(versusLabel);
    setRow->addWidget(m_setVersus);
    m_setBaselines = new QCheckBox(tr("&Baselines"), this);
    m_setBaselines->setObjectName("baselinesCheck");
    m_setBaselines->setChecked(true);
    m_setBaselines->setToolTip(tr("Also run A's raw KV (when the KV widths match), a random map of the "
                                  "converter's shape and the converter's rows at shuffled positions on the "
                                  "same prompts, with paired differences."));
    setRow->addWidget(m_setBaselines);
    m_runSet = new QPushButton(tr("Run s&et"), this);
    m_runSet->setObjectName("runSetButton");
    m_runSet->setToolTip(tr("Compare every prompt of the set and summarise it with paired bootstrap 95% "
                            "intervals over the prompts (nothing is stored)."));
    setRow->addWidget(m_runSet);
    m_showSetSummary = new QPushButton(tr("Set s&ummary"), this);
    m_showSetSummary->setObjectName("setSummaryButton");
    m_showSetSummary->setCheckable(true);
    m_showSetSummary->setEnabled(false);
    m_showSetSummary->setToolTip(tr("Show the last prompt set's summary in place of the three panes (or the "
                                    "panes again)."));
    setRow->addWidget(m_showSetSummary);
    layout->addLayout(setRow);
}

// The message line, the three panes or the set's summary in one place, the legend, the token details.
void ComparePanel::addResultViews(QVBoxLayout *layout)
{

    m_message = new QLabel(this);
    m_message->setObjectName("compareMessage");
    m_message->setStyleSheet("color:#c62828; font-weight:bold");
    m_message->setWordWrap(true);
    m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_message->hide();
    layout->addWidget(m_message);

    auto *panes = new QHBoxLayout;
    QFont paneFont = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    paneFont.setPointSizeF(std::max(paneFont.pointSizeF(), 10.5));
    for (int i = 0; i < PaneCount; ++i) {
        auto *column = new QVBoxLayout;
        m_headers[size_t(i)] = new QLabel(this);
        m_headers[size_t(i)]->setObjectName(QString("paneHeader%1").arg(i));
        QFont bold = m_headers[size_t(i)]->font();
        bold.setBold(true);
        m_headers[size_t(i)]->setFont(bold);
        column->addWidget(m_headers[size_t(i)]);
        auto *pane = new QTextBrowser(this);
        pane->setObjectName(QString("pane%1").arg(i));
        pane->setOpenLinks(false); // tokens are links only so that pointing at one describes it
        pane->setFont(paneFont);
        pane->document()->setDefaultStyleSheet("a { color: #000000; text-decoration: none; }");
        pane->setMouseTracking(true);
        m_panes[size_t(i)] = pane;
        column->addWidget(pane, 1);
        m_stats[size_t(i)] = new QLabel(this);
        m_stats[size_t(i)]->setObjectName(QString("stats%1").arg(i));
        m_stats[size_t(i)]->setWordWrap(true);
        m_stats[size_t(i)]->setTextInteractionFlags(Qt::TextSelectableByMouse);
        // room for two lines under every pane (the transfer line wraps) keeps the panes level
        m_stats[size_t(i)]->setMinimumHeight(2 * m_stats[size_t(i)]->fontMetrics().lineSpacing());
        m_stats[size_t(i)]->setAlignment(Qt::AlignLeft | Qt::AlignTop);
        column->addWidget(m_stats[size_t(i)]);
        panes->addLayout(column, 1);
        connect(pane->verticalScrollBar(), &QScrollBar::valueChanged, this, [this, i] { syncScroll(i); });
        connect(pane, qOverload<const QUrl &>(&QTextBrowser::highlighted), this,
                [this, i](const QUrl &link) { showTokenInfo(i, link); });
        connect(pane, &QTextBrowser::anchorClicked, this,
                [this, i](const QUrl &link) { showTokenInfo(i, link); });
    }
    m_headers[1]->setToolTip(tr("Model B after computing the whole prompt itself: the reference."));
    m_headers[2]->setToolTip(tr("Model B after taking the prompt's cache from A through the converter: what "
                                "a cross-model cache hit would produce."));
    // the panes and the prompt set's summary share one place: the page does not grow when a
    // summary arrives (at 1366x768 it would need a scroll bar)
    m_views = new QStackedWidget(this);
    m_views->setObjectName("compareViews");
    auto *panesPage = new QWidget(m_views);
    panes->setContentsMargins(0, 0, 0, 0);
    panesPage->setLayout(panes);
    m_views->addWidget(panesPage);
    auto *summaryPage = new QScrollArea(m_views);
    summaryPage->setObjectName("compareSetSummaryPage");
    summaryPage->setWidgetResizable(true);
    summaryPage->setFrameShape(QFrame::NoFrame);
    m_setSummary = new QLabel(summaryPage);
    m_setSummary->setObjectName("compareSetSummary");
    m_setSummary->setWordWrap(true);
    m_setSummary->setTextFormat(Qt::RichText);
    m_setSummary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_setSummary->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    QFont setFont = m_setSummary->font();
    setFont.setPointSizeF(setFont.pointSizeF() + 1);
    m_setSummary->setFont(setFont);
    summaryPage->setWidget(m_setSummary);
    m_views->addWidget(summaryPage);
    layout->addWidget(m_views, 1);

    auto *legendRow = new QHBoxLayout;
    m_legendBar = new QLabel(this);
    m_legendBar->setObjectName("colourLegend");
    legendRow->addWidget(m_legendBar);
    m_legendCaption = new QLabel(this);
    m_legendCaption->setObjectName("colourLegendCaption");
    m_legendCaption->setWordWrap(true);
    legendRow->addWidget(m_legendCaption, 1);
    layout->addLayout(legendRow);

    m_tokenInfo = new QLabel(this);
    m_tokenInfo->setObjectName("tokenInfo");
    m_tokenInfo->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_tokenInfo);

    m_summary = new QLabel(this);
    m_summary->setObjectName("compareSummary");
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    QFont summaryFont = m_summary->font();
    summaryFont.setPointSizeF(summaryFont.pointSizeF() + 1);
    m_summary->setFont(summaryFont);
    layout->addWidget(m_summary);
}

// The controls' signals; `comparison` shows the gate's direction for the chosen signal.
void ComparePanel::connectControls(QLabel *comparison)
{
    connect(m_run, &QPushButton::clicked, this, &ComparePanel::run);
    connect(m_converter, &QComboBox::currentTextChanged, this, [this] { refreshVersus(); });
    // a message (a refusal, a failed run) stays only until the prompt it was about is edited
    connect(m_prompt, &QPlainTextEdit::textChanged, this, [this] {
        if (!m_message->text().isEmpty() && !m_prompt->toPlainText().trimmed().isEmpty())
            showMessage({});
    });
    connect(m_cancel, &QPushButton::clicked, this, &ComparePanel::cancelRequested);
    connect(m_showSetSummary, &QPushButton::toggled, this,
            [this](bool on) { m_views->setCurrentIndex(on ? 1 : 0); });
    connect(m_runSet, &QPushButton::clicked, this, [this] {
        showMessage({});
        Q_EMIT compareSetRequested(promptSetRequest());
    });
    auto *shortcut = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return), m_prompt);
    shortcut->setContext(Qt::WidgetShortcut);
    connect(shortcut, &QShortcut::activated, this, [this] {
        if (m_run->isEnabled())
            run();
    });
    connect(m_gateSignal, &QComboBox::currentTextChanged, this, [this, comparison](const QString &signal) {
        // each signal has its own scale: reset to the default threshold the CLI uses
        const auto s = core::parseGateSignal(signal.toStdString()).value_or(core::GateSignal::TailKl);
        m_gateThreshold->setValue(core::defaultGateThreshold(s));
        comparison->setText(QString::fromUtf8(core::gateHigherIsBetter(s) ? "\u2265" : "\u2264"));
    });
    connect(m_colourBy, &QComboBox::currentIndexChanged, this,
            [this](int i) { setColouring(i == 1 ? Colouring::Kl : Colouring::Probability); });
    connect(m_historyCombo, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (i >= 0 && i < int(m_history.size()))
            showSample(m_history[size_t(i)]);
    });
}

void ComparePanel::setExperimentPath(const QString &path)
{
    m_experimentPath = path;
    refreshReadiness();
}

void ComparePanel::setConverters(const QStringList &names, const QString &inUse)
{
    const QSignalBlocker block(m_converter);
    m_converter->clear();
    m_converter->addItems(names);
    const int i = m_converter->findText(inUse);
    m_converter->setCurrentIndex(i >= 0 ? i : (names.isEmpty() ? -1 : 0));
    refreshVersus();
    refreshReadiness();
}

void ComparePanel::refreshVersus()
{
    const QString chosen = m_setVersus->currentText();
    const QSignalBlocker block(m_setVersus);
    m_setVersus->clear();
    m_setVersus->addItem(tr("(none)"));
    for (int i = 0; i < m_converter->count(); ++i)
        if (m_converter->itemText(i) != m_converter->currentText())
            m_setVersus->addItem(m_converter->itemText(i));
    m_setVersus->setCurrentIndex(std::max(0, m_setVersus->findText(chosen)));
}

void ComparePanel::setModelsLoaded(bool loaded)
{
    m_modelsLoaded = loaded;
    refreshReadiness();
}

core::CompareSettings ComparePanel::request() const
{
    core::CompareSettings r = m_settings;
    r.experiment = m_experimentPath.toStdString();
    r.converter = m_converter->currentText().toStdString();
    r.prompt = m_prompt->toPlainText().toStdString();
    r.promptsFile.clear();
    r.heldOut = false;
    r.maxTokens = m_maxTokens->value();
    r.gateSignal =
        core::parseGateSignal(m_gateSignal->currentText().toStdString()).value_or(core::GateSignal::TailKl);
    r.gateThreshold = m_gateThreshold->value();
    r.gateTail = m_gateTail->value();
    r.recompute.share = m_recompute->value();
    r.saveSamples = m_save ? "workbench" : "";
    return r;
}

void ComparePanel::setRequest(const core::CompareSettings &r)
{
    m_settings = r;
    m_save = !r.saveSamples.empty();
    setExperimentPath(QString::fromStdString(r.experiment));
    const QString converter = QString::fromStdString(r.converter);
    if (!converter.isEmpty()) {
        int i = m_converter->findText(converter);
        if (i < 0) {
            m_converter->addItem(converter);
            i = m_converter->count() - 1;
        }
        m_converter->setCurrentIndex(i);
    }
    m_prompt->setPlainText(QString::fromStdString(r.prompt));
    m_maxTokens->setValue(r.maxTokens);
    const int signal = m_gateSignal->findText(QString::fromUtf8(core::gateSignalName(r.gateSignal)));
    if (signal >= 0)
        m_gateSignal->setCurrentIndex(signal); // resets the threshold: set it afterwards
    m_gateThreshold->setValue(r.gateThreshold);
    m_gateTail->setValue(r.gateTail);
    m_recompute->setValue(r.recompute.share);
    refreshReadiness();
}

core::CompareSettings ComparePanel::promptSetRequest() const
{
    core::CompareSettings r = request();
    r.prompt.clear();
    r.saveSamples.clear();
    const QString source = m_setSource->currentText().trimmed();
    r.promptsFile =
        source == m_setSource->itemText(0) || source.isEmpty() ? std::string() : source.toStdString();
    r.heldOut = r.promptsFile.empty();
    r.limit = m_setLimit->value();
    r.baselines = m_setBaselines->isChecked();
    r.versus = m_setVersus->currentIndex() > 0 ? m_setVersus->currentText().toStdString() : std::string();
    return r;
}

void ComparePanel::setPromptSetRequest(const core::CompareSettings &r)
{
    core::CompareSettings one = r;
    one.prompt = request().prompt; // the single prompt stays
    one.saveSamples = m_save ? "workbench" : "";
    setRequest(one);
    m_setSource->setCurrentText(r.promptsFile.empty() ? m_setSource->itemText(0)
                                                      : QString::fromStdString(r.promptsFile));
    m_setLimit->setValue(r.limit);
    m_setBaselines->setChecked(r.baselines);
    refreshVersus();
    m_setVersus->setCurrentIndex(std::max(0, m_setVersus->findText(QString::fromStdString(r.versus))));
}

void ComparePanel::showSetSummary(const CompareSetSummary &s)
{
    setBusy(false);
    m_lastSet = s;
    render(); // the shown sample's gate line gains the measured precision
    const auto ci = [](const std::optional<core::Interval> &i, int digits) {
        return i ? QString::fromStdString(core::formatInterval(*i, digits))
                 : tr("n/a (fewer than 2 prompts)");
    };
    // one wrapped line per measure (a rich-text table would not wrap and widens the page), values in
    // bold; the same lines as plain text for logs and tests
    std::vector<std::vector<std::pair<QString, QString>>> lines = {
        {{tr("KL(scratch \u2016 transfer)"), fmt(s.set.kl, 4) + tr(" nats/token")},
         {tr("no prefix"), fmt(s.set.klNoPrefix, 4)},
         {tr("KL gap closed vs no prefix"), ci(s.set.klGapClosed, 3)}},
        {{tr("first 8 tokens: KL"), fmt(s.set.klFirst, 4)},
         {tr("no prefix"), fmt(s.set.klNoPrefixFirst, 4)},
         {tr("gap closed"), ci(s.set.klGapClosedFirst, 3)}},
        {{tr("top-1 agreement"), fmt(s.set.top1, 3)},
         {tr("no prefix"), fmt(s.set.top1NoPrefix, 3)},
         {tr("gain over no prefix"), ci(s.set.top1Gain, 3)}},
        {{tr("ROUGE-L vs scratch"), fmt(s.set.rougeL, 3)},
         {tr("A's own answer"), fmt(s.set.rougeLA, 3)},
         {tr("gain over answering with A"), ci(s.set.rougeLGainVsA, 3)}},
    };
    if (s.set.answered > 0) // a prompt file with expected answers (kvwb corpus context)
        lines.push_back({{tr("expected answer given (%1 prompts): scratch").arg(s.set.answered),
                          fmt(s.set.answerScratch, 3)},
                         {tr("transfer"), fmt(s.set.answerTransfer, 3)},
                         {tr("A"), fmt(s.set.answerA, 3)},
                         {tr("transfer - scratch"), ci(s.set.answerDifference, 3)}});
    lines.push_back({{tr("gate %1 %2 %3: precision")
                          .arg(QString::fromStdString(s.set.gateSignal), gateOp(s.set.gateSignal))
                          .arg(s.set.gateThreshold),
                      s.set.gatePrecision() ? tr("%1 (%2 of %3 passes keep scratch's first %4 tokens)")
                                                  .arg(fmt(*s.set.gatePrecision(), 3))
                                                  .arg(s.set.passedMatching)
                                                  .arg(s.set.passed)
                                                  .arg(s.set.matchTokens)
                                            : tr("n/a (nothing passed)")},
                     {tr("first %1 tokens match").arg(s.set.matchTokens),
                      tr("%1 of %2 prompts").arg(s.set.matching).arg(s.set.prompts)},
                     {tr("KL at the first token"), fmt(s.set.klFirstToken, 4)}});
    for (const auto &b : s.set.others) {
        if (b.key == "versus") { // a second converter on the same prompts: side by side
            const QString name = QString::fromStdString(b.converter);
            lines.push_back({{tr("versus '%1': KL / top-1 / ROUGE-L").arg(name),
                              fmt(b.kl, 4) + " / " + fmt(b.top1, 3) + " / " + fmt(b.rougeL, 3)},
                             {tr("KL minus '%1'").arg(name), ci(b.klDifference, 4)},
                             {tr("top-1 minus it"), ci(b.top1Difference, 3)},
                             {tr("ROUGE-L minus it"), ci(b.rougeLDifference, 3)}});
            continue;
        }
        const QString name = b.key == "raw_source_kv"        ? tr("raw source KV")
                             : b.key == "shuffled_positions" ? tr("shuffled positions")
                                                             : tr("random map");
        lines.push_back({{tr("baseline %1: KL / top-1 / ROUGE-L").arg(name),
                          fmt(b.kl, 4) + " / " + fmt(b.top1, 3) + " / " + fmt(b.rougeL, 3)},
                         {tr("KL minus %1").arg(name), ci(b.klDifference, 4)},
                         {tr("top-1 minus it"), ci(b.top1Difference, 3)},
                         {tr("ROUGE-L minus it"), ci(b.rougeLDifference, 3)}});
        if (b.key == "shuffled_positions") // the destroyed cache as the floor
            lines.back().push_back({tr("retention above it"), ci(b.klGapClosed, 3)});
    }
    const QString title = tr("%1 of %2 %3 with '%4'%5 (paired bootstrap 95% intervals over the prompts; "
                             "KL minus a baseline below 0: closer to scratch)")
                              .arg(s.set.prompts)
                              .arg(s.requested)
                              .arg(s.source, s.converter, s.cancelled ? tr(" (cancelled)") : QString());
    QString html = "<b>" + title.toHtmlEscaped() + "</b>";
    m_setSummaryPlain = title + "\n";
    for (const auto &line : lines) {
        QStringList rich, plain;
        for (const auto &[what, value] : line) {
            rich << what.toHtmlEscaped() + " <b>" + value.toHtmlEscaped() + "</b>";
            plain << what + " " + value;
        }
        html += "<br>" + rich.join(QStringLiteral(" \u00b7 "));
        m_setSummaryPlain += plain.join(QStringLiteral(" \u00b7 ")) + "\n";
    }
    for (const QString &w : s.warnings) {
        html += "<br><span style=\"color:#8a6d00\">" + tr("warning: %1").arg(w).toHtmlEscaped() + "</span>";
        m_setSummaryPlain += tr("warning: %1").arg(w) + "\n";
    }
    m_setSummary->setText(html);
    m_showSetSummary->setEnabled(true);
    m_showSetSummary->setChecked(true); // shows it
}

QString ComparePanel::setSummaryText() const
{
    return m_setSummaryPlain;
}

void ComparePanel::showResult(const CompareResult &r)
{
    m_history.push_back(r);
    {
        const QSignalBlocker block(m_historyCombo);
        m_historyCombo->addItem(historyLabel(r));
        m_historyCombo->setCurrentIndex(m_historyCombo->count() - 1);
    }
    showMessage({});
    showSample(r);
}

void ComparePanel::setHistory(const std::vector<CompareResult> &samples)
{
    m_history = samples;
    {
        const QSignalBlocker block(m_historyCombo);
        m_historyCombo->clear();
        for (const auto &s : m_history)
            m_historyCombo->addItem(historyLabel(s));
        m_historyCombo->setCurrentIndex(m_history.empty() ? -1 : int(m_history.size()) - 1);
    }
    if (m_history.empty()) {
        m_shown.reset();
        showEmpty();
    } else {
        showSample(m_history.back());
    }
}

void ComparePanel::setColouring(Colouring c)
{
    m_colouring = c;
    {
        const QSignalBlocker block(m_colourBy);
        m_colourBy->setCurrentIndex(c == Colouring::Kl ? 1 : 0);
    }
    refreshHeaders();
    refreshLegend();
    render();
}

QString ComparePanel::gateOp(const std::string &signal)
{
    const auto s = core::parseGateSignal(signal);
    return QString::fromUtf8(s && core::gateHigherIsBetter(*s) ? "\u2265" : "\u2264");
}

QString ComparePanel::paneHtml(int pane) const
{
    return pane >= 0 && pane < PaneCount ? m_html[size_t(pane)] : QString();
}

QString ComparePanel::statsText(int pane) const
{
    return pane >= 0 && pane < PaneCount ? m_stats[size_t(pane)]->text() : QString();
}

QString ComparePanel::summaryText() const
{
    return m_summaryPlain;
}

QString ComparePanel::tokenInfoText() const
{
    return m_tokenInfo->text();
}

void ComparePanel::setBusy(bool busy, bool ownJob)
{
    m_busy = busy;
    m_ownJob = busy && ownJob;
    m_cancel->setEnabled(m_ownJob);
    m_progress->setVisible(m_ownJob);
    if (m_ownJob) {
        m_progress->setValue(0);
        m_progress->setFormat(tr("starting %p%"));
        showMessage({});
    }
    refreshReadiness();
}

void ComparePanel::setProgress(double fraction, const QString &stage)
{
    m_progress->setValue(int(std::lround(std::clamp(fraction, 0.0, 1.0) * m_progress->maximum())));
    m_progress->setFormat(stage.isEmpty() ? QStringLiteral("%p%") : stage + QStringLiteral(" %p%"));
}

void ComparePanel::setFailed(const QString &message)
{
    setBusy(false);
    showMessage(message.isEmpty() ? tr("The comparison failed.") : message);
}

void ComparePanel::run()
{
    if (m_prompt->toPlainText().trimmed().isEmpty()) {
        showMessage(tr("Type a prompt first: it is what A and both B paths continue."));
        m_prompt->setFocus();
        return;
    }
    showMessage({});
    Q_EMIT compareRequested(request());
}

void ComparePanel::showSample(const CompareResult &r)
{
    m_showSetSummary->setChecked(false); // the panes again
    m_shown = r;
    render();
}

void ComparePanel::showEmpty()
{
    for (int i = 0; i < PaneCount; ++i) {
        m_html[size_t(i)] = emptyPaneHtml(i, font().family());
        m_panes[size_t(i)]->setHtml(m_html[size_t(i)]);
        m_stats[size_t(i)]->clear();
    }
    m_summaryPlain.clear();
    m_summary->clear();
    m_tokenInfo->clear();
}

void ComparePanel::render()
{
    if (!m_shown) {
        showEmpty();
        return;
    }
    const CompareResult &r = *m_shown;
    const core::ComparisonPath *paths[PaneCount] = {&r.a, &r.scratch, &r.transfer};
    const std::vector<double> &kl = r.transfer.kl; // along scratch's continuation
    for (int pane = 0; pane < PaneCount; ++pane) {
        const core::ComparisonPath &path = *paths[pane];
        const bool byKl = m_colouring == Colouring::Kl && pane > 0;
        QString html = QStringLiteral("<div style=\"white-space:pre-wrap; line-height:140%\">");
        for (size_t j = 0; j < path.pieces.size(); ++j) {
            QColor bg(Qt::white);
            if (byKl) {
                // KL was measured along scratch's tokens: the transfer's own tokens after the first
                // divergence were not measured, and stay grey
                const bool measured = pane == 1 || r.firstDivergence < 0 || j <= size_t(r.firstDivergence);
                if (j < kl.size())
                    bg = measured ? klColour(kl[j]) : QColor(0xe0, 0xe0, 0xe0);
            } else if (j < path.logprobs.size()) {
                bg = probabilityColour(std::exp(double(path.logprobs[j])));
            }
            const bool diverges = pane > 0 && r.firstDivergence >= 0 && size_t(r.firstDivergence) == j;
            if (diverges)
                html += QStringLiteral("<span style=\"background-color:#37474f; color:#ffffff; "
                                       "font-weight:bold\"> %1 </span> ")
                            .arg(DivergenceMarker);
            QString style =
                QStringLiteral("background-color:%1; color:%2").arg(bg.name(), textColourOn(bg).name());
            if (diverges)
                style += QStringLiteral("; font-weight:bold; text-decoration:underline");
            html += QStringLiteral("<a href=\"tok:%1\"><span style=\"%2\">%3</span></a>")
                        .arg(j)
                        .arg(style, pieceHtml(path.pieces[j]));
        }
        if (path.pieces.empty())
            html +=
                QStringLiteral("<span style=\"color:#888888\">%1</span>").arg(tr("(no tokens generated)"));
        html += QStringLiteral("</div>");
        m_html[size_t(pane)] = html;
        m_panes[size_t(pane)]->setHtml(html);

        QString stats = tr("TTFT %1 ms \u00b7 %2 tok/s \u00b7 %3 tokens \u00b7 prompt %4 tokens")
                            .arg(fmt(path.ttftMs, 1), path.decodeTokPerS > 0 ? fmt(path.decodeTokPerS, 0)
                                                                             : QStringLiteral("\u2013"))
                            .arg(path.ids.size())
                            .arg(path.promptTokens);
        if (path.reusedTokens > 0)
            stats += tr(" (%1 reused)").arg(path.reusedTokens);
        if (pane == 2)
            stats += tr(" \u00b7 A prefill %1 ms + convert %2 ms")
                         .arg(fmt(r.sourcePrefillMs, 1), fmt(r.convertMs, 1));
        m_stats[size_t(pane)]->setText(stats);
    }

    QStringList parts;
    parts
        << tr("KL to scratch %1 nats/token (no-prefix floor %2)").arg(fmt(r.meanKl, 3), fmt(r.klNoPrefix, 3))
        << tr("top-1 agreement %1%").arg(fmt(r.top1 * 100, 1)) << tr("ROUGE-L %1").arg(fmt(r.rougeL, 2))
        << (r.firstDivergence < 0 ? tr("identical continuations")
                                  : tr("first divergence at token %1").arg(r.firstDivergence));
    if (const auto hits = core::answerHits(r)) { // a prompt file's expected answer (kvwb corpus context)
        const auto given = [this](bool yes) { return yes ? tr("yes") : tr("no"); };
        parts << tr("expected answer \u201c%1\u201d given: scratch %2, transfer %3, A %4")
                     .arg(elided(QString::fromStdString(r.expectedAnswer), 60), given(hits->scratch),
                          given(hits->transfer), given(hits->a));
    }
    m_summaryPlain = parts.join(QStringLiteral(" \u00b7 "));
    QString rich = m_summaryPlain.toHtmlEscaped();
    const GateLine gate = gateLine(r);
    if (!gate.verdict.isEmpty()) {
        m_summaryPlain += QStringLiteral("\n") + gate.verdict + QStringLiteral(" \u00b7 ") + gate.check;
        rich += QStringLiteral("<br><b style=\"color:%1\">%2</b> \u00b7 %3")
                    .arg(gate.colour, gate.verdict.toHtmlEscaped(), gate.check.toHtmlEscaped());
    }
    m_summary->setText(rich);
    m_tokenInfo->setText(tr("Point at a token to see its probability and KL."));
}

ComparePanel::GateLine ComparePanel::gateLine(const CompareResult &r) const
{
    GateLine g;
    if (r.gateSignal.empty())
        return g;
    const auto signal = core::parseGateSignal(r.gateSignal);
    const bool higherIsBetter = signal && core::gateHigherIsBetter(*signal);
    const char *op = higherIsBetter ? (r.gatePassed ? "\u2265" : "<") : (r.gatePassed ? "\u2264" : ">");
    // what B answered: its first N greedy tokens from the converted cache against scratch's
    const int n = m_settings.matchTokens;
    const bool match = core::firstTokensMatch(r.firstDivergence, n);
    g.verdict = tr("gate %1 %2 %3 %4: %5")
                    .arg(QString::fromStdString(r.gateSignal), fmt(r.gateValue, 3), QString::fromUtf8(op),
                         QString::number(r.gateThreshold),
                         !r.gatePassed ? tr("fail (B falls back to its own prefill)")
                         : match       ? tr("pass (converted cache used)")
                                       : tr("pass, but B's first %1 tokens differ from scratch's").arg(n));
    g.colour = !r.gatePassed ? "#c62828" : match ? "#2e7d32" : "#b26a00";
    g.check = (match ? tr("first %1 tokens match scratch's").arg(n)
                     : tr("first %1 tokens differ (at token %2)").arg(n).arg(r.firstDivergence)) +
              QStringLiteral(" \u00b7 ") +
              tr("KL at the first token %1")
                  .arg(r.transfer.kl.empty() ? QStringLiteral("\u2013") : fmt(r.transfer.kl.front(), 3)) +
              QStringLiteral(" \u00b7 ");
    // the gate's measured precision: from the last prompt set run with this converter and gate
    const bool sameGate = m_lastSet && m_lastSet->converter == QString::fromStdString(r.converter) &&
                          m_lastSet->set.gateSignal == r.gateSignal &&
                          m_lastSet->set.gateThreshold == r.gateThreshold && m_lastSet->set.matchTokens == n;
    if (sameGate && m_lastSet->set.gatePrecision())
        g.check += tr("its precision %1 over %2 (%3 of %4 passes keep the first %5 tokens)")
                       .arg(fmt(*m_lastSet->set.gatePrecision(), 2), m_lastSet->source)
                       .arg(m_lastSet->set.passedMatching)
                       .arg(m_lastSet->set.passed)
                       .arg(n);
    else if (sameGate)
        g.check += tr("its precision: nothing passed over %1").arg(m_lastSet->source);
    else
        g.check +=
            tr("its precision: run the prompt set (Run set) with this converter and gate to measure it");
    return g;
}

void ComparePanel::refreshReadiness()
{
    QStringList missing;
    if (!m_modelsLoaded)
        missing << tr("Load models A and B.");
    if (m_experimentPath.isEmpty())
        missing << tr("No converter yet: Capture, then Fit (Alignment), or File > Open Experiment.");
    else if (m_converter->count() == 0)
        missing << tr("This experiment has no converter yet: fit one in the Alignment dock.");
    m_run->setEnabled(!m_busy && missing.isEmpty());
    m_runSet->setEnabled(!m_busy && missing.isEmpty());
    m_hint->setText(missing.isEmpty() ? tr("Experiment: %1").arg(m_experimentPath) : missing.join(' '));
    m_hint->setToolTip(m_experimentPath);
}

void ComparePanel::refreshHeaders()
{
    const bool kl = m_colouring == Colouring::Kl;
    m_headers[0]->setText(kl ? tr("A (source) \u2014 coloured by probability (KL is measured for B only)")
                             : tr("A (source)"));
    m_headers[1]->setText(tr("B from scratch"));
    m_headers[2]->setText(tr("B from A's converted cache"));
}

void ComparePanel::refreshLegend()
{
    const bool kl = m_colouring == Colouring::Kl;
    QFont small = font();
    small.setPointSizeF(std::max(7.5, small.pointSizeF() - 1));
    m_legendBar->setPixmap(legendPixmap(kl, small));
    m_legendCaption->setText(
        kl ? tr("Background of the B panes: KL(scratch \u2016 transfer) in nats at each position, both fed "
                "scratch's tokens so far: white = same next-token distribution, deep red = 2 nats or more. "
                "A's pane stays coloured by probability.")
           : tr("Background: the probability the model gave each token it generated (exp of its log-prob): "
                "red = unsure, white = confident."));
}

void ComparePanel::showMessage(const QString &message)
{
    m_message->setText(message);
    m_message->setVisible(!message.isEmpty());
}

void ComparePanel::showTokenInfo(int pane, const QUrl &link)
{
    if (!m_shown || link.scheme() != QLatin1String("tok"))
        return;
    bool ok = false;
    const int j = link.path().toInt(&ok);
    const core::ComparisonPath *paths[PaneCount] = {&m_shown->a, &m_shown->scratch, &m_shown->transfer};
    const core::ComparisonPath &path = *paths[pane];
    if (!ok || j < 0 || size_t(j) >= path.pieces.size())
        return;
    static const char *names[] = {"A", QT_TRANSLATE_NOOP("kvwb::ui::ComparePanel", "B scratch"),
                                  QT_TRANSLATE_NOOP("kvwb::ui::ComparePanel", "B transfer")};
    QString piece = QString::fromStdString(path.pieces[size_t(j)]);
    piece.replace('\n', QStringLiteral("\\n"));
    QString info = tr("%1, token %2 \"%3\"").arg(tr(names[pane])).arg(j).arg(piece);
    if (size_t(j) < path.ids.size())
        info += tr(" (id %1)").arg(path.ids[size_t(j)]);
    if (size_t(j) < path.logprobs.size()) {
        const double lp = path.logprobs[size_t(j)];
        info += tr(" \u00b7 p = %1 (log p %2)").arg(fmt(std::exp(lp), 3), fmt(lp, 3));
    }
    const auto &kl = m_shown->transfer.kl;
    if (pane > 0 && size_t(j) < kl.size())
        info += tr(" \u00b7 KL to scratch at this position %1 nats").arg(fmt(kl[size_t(j)], 3));
    m_tokenInfo->setText(info);
}

void ComparePanel::syncScroll(int fromPane)
{
    if (m_syncing)
        return;
    m_syncing = true;
    const QScrollBar *from = m_panes[size_t(fromPane)]->verticalScrollBar();
    const double fraction = from->maximum() > from->minimum() ? double(from->value() - from->minimum()) /
                                                                    (from->maximum() - from->minimum())
                                                              : 0.0;
    for (int i = 0; i < PaneCount; ++i) {
        if (i == fromPane)
            continue;
        QScrollBar *to = m_panes[size_t(i)]->verticalScrollBar();
        to->setValue(to->minimum() + int(std::lround(fraction * (to->maximum() - to->minimum()))));
    }
    m_syncing = false;
}

QString ComparePanel::historyLabel(const CompareResult &r) const
{
    const QString created = QString::fromStdString(r.createdUtc);
    const QDateTime when = QDateTime::fromString(created, Qt::ISODate);
    QString time = when.isValid() ? when.toLocalTime().toString("yyyy-MM-dd HH:mm") : created;
    if (time.isEmpty())
        time = tr("this session");
    QString prompt = QString::fromStdString(r.prompt).simplified();
    if (prompt.size() > 48)
        prompt = prompt.left(47) + QStringLiteral("\u2026");
    return QStringLiteral("%1 \u00b7 \u201c%2\u201d").arg(time, prompt);
}

} // namespace kvwb::ui
