// ComparePanel: the three panes show every generated piece escaped, the first divergence is marked
// in the two B panes only, KL colouring changes the B panes and leaves A's, the stats and summary
// lines carry the numbers and the gate's decision, Run emits the request built from the controls
// (never for an empty prompt), and a screenshot for a person to look at.
#include "tests/support/screenshot.h"
#include "tests/support/synthetic_ledger.h"
#include "ui/panels/compare_panel.h"

#include <QComboBox>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollBar>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTextBrowser>
#include <QtTest>

#include <cmath>

using namespace kvwb;

namespace {

core::ComparisonPath path(std::vector<std::string> pieces, std::vector<float> logprobs)
{
    core::ComparisonPath p;
    for (size_t i = 0; i < pieces.size(); ++i) {
        p.ids.push_back(int(100 + i));
        p.text += pieces[i];
    }
    p.pieces = std::move(pieces);
    p.logprobs = std::move(logprobs);
    return p;
}

// Six tokens; scratch and transfer agree on tokens 0-2 and diverge at 3.
ui::CompareResult sixTokens()
{
    ui::CompareResult r;
    r.prompt = "What does a KV cache hold?";
    r.converter = "default";
    r.a = path({"A", " KV", " cache", " holds", " keys", "."}, {-0.2f, -0.3f, -0.1f, -0.9f, -0.4f, -0.05f});
    r.scratch = path({"The", " cache", " <stores>", "\n", " keys", "."},
                     {-0.01f, -0.1f, -0.5f, -1.2f, -2.5f, -0.05f});
    r.transfer = path({"The", " cache", " <stores>", " values", " too", "."},
                      {-0.02f, -0.1f, -0.6f, -2.0f, -1.0f, -0.3f});
    r.transfer.kl = {0.01, 0.02, 0.05, 1.8, 0.4, 0.1};
    r.a.ttftMs = 8.04;
    r.a.decodeTokPerS = 512.4;
    r.a.promptTokens = 29;
    r.scratch.ttftMs = 12.3;
    r.scratch.decodeTokPerS = 410.2;
    r.scratch.promptTokens = 31;
    r.transfer.ttftMs = 5.26;
    r.transfer.decodeTokPerS = 405.7;
    r.transfer.promptTokens = 31;
    r.transfer.reusedTokens = 30;
    r.firstDivergence = 3;
    r.meanKl = 0.284;
    r.top1 = 0.899;
    r.klNoPrefix = 1.445;
    r.rougeL = 0.33;
    r.sourcePrefillMs = 2.5;
    r.convertMs = 1.3;
    r.gateSignal = "tail_kl";
    r.gateValue = 0.041;
    r.gateThreshold = 0.1;
    r.gatePassed = true;
    r.createdUtc = "2025-03-14T09:26:53Z";
    return r;
}

// A longer, realistic-looking sample for the screenshot.
ui::CompareResult realistic()
{
    const std::vector<std::string> scratch = {
        " A",     " KV",          " cache", " stores", " the",     " keys",    " and",  " values", " of",
        " every", " token",       " the",   " model",  " has",     " already", " seen", ",",       " so",
        " each",  " new",         " token", " only",   " attends", " to",      " them", "\n",      "instead",
        " of",    " recomputing", " the",   " whole",  " prompt",  "."};
    std::vector<std::string> transfer(scratch.begin(), scratch.begin() + 9);
    for (const char *p : {" all", " previous", " tokens", ",", " so", " generation", " does", " not", " need",
                          " to", " recompute", " attention", " over", " the", " prompt", "\n", "again", "."})
        transfer.emplace_back(p);
    const std::vector<std::string> a = {" It", " keeps",    " past", " keys",  " and",   " values", ",",
                                        " so", " decoding", " a",    " token", " costs", " one",    " step",
                                        " <",  " O",        "(",     "n",      ")",      " work",   "."};
    auto logprobs = [](size_t n, unsigned seed) {
        std::vector<float> lp;
        for (size_t i = 0; i < n; ++i) {
            const double u = std::fmod(std::sin(double(i * 7 + seed)) * 43758.5453, 1.0);
            lp.push_back(float(std::log(0.05 + 0.95 * std::abs(u))));
        }
        return lp;
    };
    ui::CompareResult r = sixTokens();
    r.prompt = "Explain in two sentences what a KV cache stores and why it speeds up decoding.";
    r.a = path(a, logprobs(a.size(), 3));
    r.scratch = path(scratch, logprobs(scratch.size(), 11));
    r.transfer = path(transfer, logprobs(transfer.size(), 11));
    for (size_t i = 0; i < scratch.size(); ++i)
        r.transfer.kl.push_back(i < 9 ? 0.02 + 0.03 * (i % 3) : 0.2 + 0.12 * double(i - 9));
    r.a.ttftMs = 9.8;
    r.a.decodeTokPerS = 520;
    r.a.promptTokens = 17;
    r.scratch.ttftMs = 14.6;
    r.scratch.decodeTokPerS = 410;
    r.scratch.promptTokens = 18;
    r.transfer.ttftMs = 6.1;
    r.transfer.decodeTokPerS = 404;
    r.transfer.promptTokens = 18;
    r.transfer.reusedTokens = 17;
    r.firstDivergence = 9;
    return r;
}

template <typename T> T *child(QWidget &w, const char *name)
{
    auto *c = w.findChild<T *>(name);
    if (!c)
        qFatal("no child %s", name);
    return c;
}

void makeReady(ui::ComparePanel &panel)
{
    panel.setModelsLoaded(true);
    panel.setExperimentPath("/tmp/exp.h5");
    panel.setConverters({"all", "default"}, "default");
}

} // namespace

class TestComparePanel : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void emptyState()
    {
        ui::ComparePanel panel;
        for (int i = 0; i < 3; ++i)
            QVERIFY(panel.paneHtml(i).contains("Load the models and open an experiment"));
        QVERIFY(panel.summaryText().isEmpty());
        QVERIFY(!child<QPushButton>(panel, "runButton")->isEnabled());
        QVERIFY(child<QLabel>(panel, "compareHint")->text().contains("Load models"));
        panel.setModelsLoaded(true);
        QVERIFY(!child<QPushButton>(panel, "runButton")->isEnabled());
        QVERIFY(child<QLabel>(panel, "compareHint")
                    ->text()
                    .contains("No converter yet: Capture, then Fit (Alignment)"));
        panel.setExperimentPath("/tmp/exp.h5");
        QVERIFY(child<QLabel>(panel, "compareHint")->text().contains("no converter"));
        QVERIFY(!child<QPushButton>(panel, "runButton")->isEnabled());
        panel.setConverters({"a", "b"}, "missing");
        QCOMPARE(panel.request().converter, std::string("a"));
        QVERIFY(child<QPushButton>(panel, "runButton")->isEnabled());
        panel.setExperimentPath({});
        QVERIFY(!child<QPushButton>(panel, "runButton")->isEnabled());
    }

    // A refusal or a failure stays only until the prompt it was about is edited (issue: stale errors).
    void messagesClearWhenThePromptChanges()
    {
        ui::ComparePanel panel;
        panel.setModelsLoaded(true);
        panel.setExperimentPath("/tmp/exp.h5");
        panel.setConverters({"a"}, "a");
        auto *prompt = child<QPlainTextEdit>(panel, "promptEdit");
        auto *message = child<QLabel>(panel, "compareMessage");
        prompt->setPlainText("   ");
        child<QPushButton>(panel, "runButton")->click();
        QVERIFY(message->text().contains("Type a prompt first"));
        prompt->setPlainText("The capital of France is");
        QCOMPARE(message->text(), QString());
        panel.setBusy(true);
        panel.setFailed("B's context is 64 tokens; the prompt has 80");
        QVERIFY(message->text().contains("64 tokens"));
        prompt->setPlainText("A shorter prompt");
        QCOMPARE(message->text(), QString());
    }

    void panesShowTokens()
    {
        ui::ComparePanel panel;
        const auto r = sixTokens();
        panel.showResult(r);
        for (const auto &p : r.a.pieces)
            QVERIFY2(panel.paneHtml(0).contains(QString::fromStdString(p)), p.c_str());
        QVERIFY(panel.paneHtml(1).contains("&lt;stores&gt;"));
        QVERIFY(panel.paneHtml(2).contains("&lt;stores&gt;"));
        QVERIFY(!panel.paneHtml(1).contains("<stores>"));
        QVERIFY(panel.paneHtml(1).contains(QString::fromUtf8("\u21b5<br>"))); // the newline piece
        for (const char *p : {" values", " too", " keys"})
            QVERIFY(panel.paneHtml(p == std::string(" keys") ? 1 : 2).contains(p));
        // the shown document holds the same text
        QVERIFY(child<QTextBrowser>(panel, "pane1")->toPlainText().contains("<stores>"));

        const QString marker = QString::fromUtf8("\u25b6\u00a0first\u00a0divergence");
        QVERIFY(!panel.paneHtml(0).contains(marker));
        QVERIFY(panel.paneHtml(1).contains(marker));
        QVERIFY(panel.paneHtml(2).contains(marker));
        // the marker sits right before token 3 (" values" in transfer)
        const QString transfer = panel.paneHtml(2);
        QVERIFY(transfer.indexOf(marker) < transfer.indexOf(" values"));
        QVERIFY(transfer.indexOf(marker) > transfer.indexOf("&lt;stores&gt;"));
        QVERIFY(transfer.contains("text-decoration:underline"));

        // identical continuations: no marker, the summary says so
        auto same = r;
        same.firstDivergence = -1;
        panel.showResult(same);
        QVERIFY(!panel.paneHtml(2).contains(marker));
        QVERIFY(panel.summaryText().contains("identical continuations"));
    }

    // A sample from a prompt file with expected answers says which path gave it.
    void expectedAnswer()
    {
        ui::ComparePanel panel;
        auto r = sixTokens();
        panel.showResult(r);
        QVERIFY(!panel.summaryText().contains("expected answer"));
        r.expectedAnswer = "keys";
        panel.showResult(r);
        QVERIFY2(panel.summaryText().contains(QString::fromUtf8(
                     "expected answer \u201ckeys\u201d given: scratch yes, transfer no, A yes")),
                 qPrintable(panel.summaryText()));
        r.expectedAnswer = std::string(80, 'x');
        panel.showResult(r);
        QVERIFY(panel.summaryText().contains(QString(59, 'x') + QString::fromUtf8("\u2026\u201d")));
    }

    void klColouring()
    {
        ui::ComparePanel panel;
        panel.showResult(sixTokens());
        QCOMPARE(panel.colouring(), ui::ComparePanel::Colouring::Probability);
        const QString a = panel.paneHtml(0), scratch = panel.paneHtml(1), transfer = panel.paneHtml(2);
        panel.setColouring(ui::ComparePanel::Colouring::Kl);
        QCOMPARE(panel.colouring(), ui::ComparePanel::Colouring::Kl);
        QCOMPARE(child<QComboBox>(panel, "colourByCombo")->currentIndex(), 1);
        QVERIFY(panel.paneHtml(2) != transfer);
        QVERIFY(panel.paneHtml(1) != scratch);
        QCOMPARE(panel.paneHtml(0), a); // A falls back to probability
        QVERIFY(child<QLabel>(panel, "paneHeader0")->text().contains("probability"));
        // KL 1.8 at position 3 (the divergence) is a dark red with white text, in both B panes; as a
        // probability (0.135 and 0.301) it is a light red with black text
        const QString darkDivergence = "color:#ffffff; font-weight:bold; text-decoration:underline";
        QVERIFY(panel.paneHtml(2).contains(darkDivergence));
        QVERIFY(panel.paneHtml(1).contains(darkDivergence));
        QVERIFY(!transfer.contains(darkDivergence));
        QVERIFY(!scratch.contains(darkDivergence));
        // KL was measured on scratch's tokens: the transfer's own tokens after the divergence are grey
        QCOMPARE(panel.paneHtml(2).count("background-color:#e0e0e0"), 2);
        QCOMPARE(panel.paneHtml(1).count("background-color:#e0e0e0"), 0);
        child<QComboBox>(panel, "colourByCombo")->setCurrentIndex(0);
        QCOMPARE(panel.colouring(), ui::ComparePanel::Colouring::Probability);
        QCOMPARE(panel.paneHtml(2), transfer);
        QCOMPARE(child<QLabel>(panel, "paneHeader0")->text(), QString("A (source)"));
    }

    void statsAndSummary()
    {
        ui::ComparePanel panel;
        auto r = sixTokens();
        panel.showResult(r);
        QCOMPARE(panel.statsText(0),
                 QString::fromUtf8("TTFT 8.0 ms \u00b7 512 tok/s \u00b7 6 tokens \u00b7 prompt 29 tokens"));
        QCOMPARE(panel.statsText(1),
                 QString::fromUtf8("TTFT 12.3 ms \u00b7 410 tok/s \u00b7 6 tokens \u00b7 prompt 31 tokens"));
        QCOMPARE(panel.statsText(2),
                 QString::fromUtf8("TTFT 5.3 ms \u00b7 406 tok/s \u00b7 6 tokens \u00b7 prompt 31 tokens (30 "
                                   "reused) \u00b7 A prefill 2.5 ms + convert 1.3 ms"));
        // the gate passed, but B answered differently within its first 4 tokens: the verdict says so
        QCOMPARE(
            panel.summaryText(),
            QString::fromUtf8(
                "KL to scratch 0.284 nats/token (no-prefix floor 1.445) \u00b7 top-1 agreement "
                "89.9% \u00b7 ROUGE-L 0.33 \u00b7 first divergence at token 3\ngate tail_kl 0.041 \u2264 "
                "0.1: pass, but B's first 4 tokens differ from scratch's \u00b7 first 4 tokens differ (at "
                "token 3) \u00b7 KL at the first token 0.010 \u00b7 its precision: run the prompt set (Run "
                "set) with this converter and gate to measure it"));
        QVERIFY(child<QLabel>(panel, "compareSummary")->text().contains("color:#b26a00"));
        // diverging after the first 4 tokens: a plain pass
        auto later = r;
        later.firstDivergence = 4;
        panel.showResult(later);
        QVERIFY(panel.summaryText().contains(
            QString::fromUtf8("pass (converted cache used) \u00b7 first 4 tokens match scratch's")));
        QVERIFY(child<QLabel>(panel, "compareSummary")->text().contains("color:#2e7d32"));
        // a prompt set with this converter and gate measured its precision: shown beside the verdict
        ui::CompareSetSummary set;
        set.converter = "default";
        set.source = "held-out prompts";
        set.set.prompts = 5;
        set.set.gateSignal = "tail_kl";
        set.set.gateThreshold = 0.1;
        set.set.passed = 3;
        set.set.passedMatching = 2;
        set.set.matching = 3;
        panel.showSetSummary(set);
        QVERIFY2(panel.summaryText().endsWith(
                     "its precision 0.67 over held-out prompts (2 of 3 passes keep the first 4 tokens)"),
                 qPrintable(panel.summaryText()));
        QVERIFY2(panel.setSummaryText().contains(QString::fromUtf8(
                     "gate tail_kl \u2264 0.1: precision 0.667 (2 of 3 passes keep scratch's first 4 tokens) "
                     "\u00b7 first 4 tokens match 3 of 5 prompts")),
                 qPrintable(panel.setSummaryText()));
        set.set.gateThreshold = 0.2; // another gate: its precision is not this one's
        panel.showSetSummary(set);
        QVERIFY(panel.summaryText().endsWith("with this converter and gate to measure it"));
        panel.showResult(r);

        r.gateValue = 0.3;
        r.gatePassed = false;
        panel.showResult(r);
        QVERIFY2(
            panel.summaryText().contains(QString::fromUtf8("gate tail_kl 0.300 > 0.1: fail (B falls back to "
                                                           "its own prefill) \u00b7 first 4 tokens differ")),
            qPrintable(panel.summaryText()));
        r.gateSignal = "kv_cos";
        r.gateValue = 0.95;
        r.gateThreshold = 0.9;
        r.gatePassed = true;
        panel.showResult(r);
        QVERIFY(panel.summaryText().contains(QString::fromUtf8("gate kv_cos 0.950 \u2265 0.9: pass")));
        r.gateValue = 0.8;
        r.gatePassed = false;
        panel.showResult(r);
        QVERIFY(panel.summaryText().contains(QString::fromUtf8("gate kv_cos 0.800 < 0.9: fail")));

        // pointing at a token describes it
        Q_EMIT child<QTextBrowser>(panel, "pane2")->highlighted(QUrl("tok:3"));
        QVERIFY2(panel.tokenInfoText().contains("token 3 \" values\""), qPrintable(panel.tokenInfoText()));
        QVERIFY(panel.tokenInfoText().contains("p = 0.135"));
        QVERIFY(panel.tokenInfoText().contains("1.800 nats"));
        Q_EMIT child<QTextBrowser>(panel, "pane0")->highlighted(QUrl("tok:1"));
        QVERIFY(panel.tokenInfoText().startsWith("A, token 1"));
        QVERIFY(!panel.tokenInfoText().contains("KL"));
    }

    void requestRoundTrip()
    {
        ui::ComparePanel panel;
        makeReady(panel);
        core::CompareSettings r;
        r.experiment = "/data/exp.h5";
        r.converter = "all";
        r.prompt = "Line one\nline two";
        r.maxTokens = 77;
        r.gateSignal = core::GateSignal::KvCos;
        r.gateThreshold = 0.85;
        r.gateTail = 6;
        r.recompute.share = 0.25;
        r.saveSamples.clear(); // not stored
        panel.setRequest(r);
        const auto back = panel.request();
        QCOMPARE(back.experiment, r.experiment);
        QCOMPARE(back.converter, r.converter);
        QCOMPARE(back.prompt, r.prompt);
        QCOMPARE(back.maxTokens, r.maxTokens);
        QCOMPARE(back.gateSignal, r.gateSignal);
        QCOMPARE(back.gateThreshold, r.gateThreshold);
        QCOMPARE(back.gateTail, r.gateTail);
        QCOMPARE(back.recompute.share, 0.25);
        QCOMPARE(child<QDoubleSpinBox>(panel, "recomputeSpin")->value(), 0.25);
        QCOMPARE(back.saveSamples, r.saveSamples);
        QVERIFY(back == r); // every setting, shown or not

        // a converter the experiment does not list (yet) is kept
        r.converter = "later";
        panel.setRequest(r);
        QCOMPARE(panel.request().converter, std::string("later"));

        // changing the gate signal resets the threshold to that signal's default
        auto *signal = child<QComboBox>(panel, "gateSignalCombo");
        signal->setCurrentText("nll");
        QCOMPARE(panel.request().gateThreshold, 3.0);
        signal->setCurrentText("tail_kl");
        QCOMPARE(panel.request().gateThreshold, 0.1);
        QCOMPARE(child<QLabel>(panel, "gateComparison")->text(), QString::fromUtf8("\u2264"));
        signal->setCurrentText("kv_cos");
        QCOMPARE(panel.request().gateThreshold, 0.9);
        QCOMPARE(child<QLabel>(panel, "gateComparison")->text(), QString::fromUtf8("\u2265"));

        ui::ComparePanel fresh;
        QCOMPARE(fresh.request().maxTokens, 32);
        QCOMPARE(fresh.request().gateSignal, core::GateSignal::TailKl);
        QCOMPARE(fresh.request().saveSamples, std::string("workbench")); // stored by default
    }

    void runEmitsRequest()
    {
        ui::ComparePanel panel;
        makeReady(panel);
        QSignalSpy spy(&panel, &ui::ComparePanel::compareRequested);
        auto *run = child<QPushButton>(panel, "runButton");
        auto *message = child<QLabel>(panel, "compareMessage");
        QVERIFY(run->isEnabled());
        child<QPlainTextEdit>(panel, "promptEdit")->setPlainText("  \n ");
        run->click();
        QCOMPARE(spy.count(), 0);
        QVERIFY(!message->isHidden());
        QVERIFY(message->text().contains("prompt"));

        child<QPlainTextEdit>(panel, "promptEdit")->setPlainText("Why is the sky blue?");
        child<QComboBox>(panel, "converterCombo")->setCurrentText("all");
        child<QSpinBox>(panel, "maxTokensSpin")->setValue(48);
        child<QComboBox>(panel, "gateSignalCombo")->setCurrentText("nll");
        child<QSpinBox>(panel, "gateTailSpin")->setValue(8);
        child<QDoubleSpinBox>(panel, "recomputeSpin")->setValue(0.1);
        run->click();
        QCOMPARE(spy.count(), 1);
        QVERIFY(message->isHidden());
        const auto r = spy.at(0).at(0).value<core::CompareSettings>();
        QCOMPARE(r.prompt, std::string("Why is the sky blue?"));
        QCOMPARE(r.converter, std::string("all"));
        QCOMPARE(r.experiment, std::string("/tmp/exp.h5"));
        QCOMPARE(r.maxTokens, 48);
        QCOMPARE(r.gateSignal, core::GateSignal::Nll);
        QCOMPARE(r.gateThreshold, 3.0);
        QCOMPARE(r.gateTail, 8);
        QCOMPARE(r.recompute.share, 0.1);
        QCOMPARE(r.saveSamples, std::string("workbench"));
    }

    void busyAndFailure()
    {
        ui::ComparePanel panel;
        makeReady(panel);
        auto *run = child<QPushButton>(panel, "runButton");
        auto *cancel = child<QPushButton>(panel, "cancelCompareButton");
        auto *progress = child<QProgressBar>(panel, "compareProgress");
        QVERIFY(run->isEnabled() && !cancel->isEnabled() && progress->isHidden());
        panel.setBusy(true);
        QVERIFY(!run->isEnabled() && cancel->isEnabled() && !progress->isHidden());
        panel.setProgress(0.5, "decoding B");
        QCOMPARE(progress->value(), 500);
        QVERIFY(progress->text().startsWith("decoding B"));
        QSignalSpy cancelled(&panel, &ui::ComparePanel::cancelRequested);
        cancel->click();
        QCOMPARE(cancelled.count(), 1);
        panel.setModelsLoaded(true); // readiness changes keep Run off while busy
        QVERIFY(!run->isEnabled());
        panel.setFailed("model B ran out of memory");
        QVERIFY(run->isEnabled() && !cancel->isEnabled() && progress->isHidden());
        auto *message = child<QLabel>(panel, "compareMessage");
        QVERIFY(!message->isHidden());
        QCOMPARE(message->text(), QString("model B ran out of memory"));
        panel.setBusy(true); // a new run clears the old failure
        QVERIFY(message->isHidden());
    }

    void history()
    {
        ui::ComparePanel panel;
        std::vector<ui::CompareResult> samples;
        for (int i = 0; i < 3; ++i) {
            auto s = sixTokens();
            s.prompt = "prompt number " + std::to_string(i);
            s.scratch.pieces[0] = "Sample" + std::to_string(i);
            s.createdUtc = "2025-03-14T09:2" + std::to_string(i) + ":00Z";
            samples.push_back(s);
        }
        panel.setHistory(samples);
        auto *combo = child<QComboBox>(panel, "historyCombo");
        QCOMPARE(combo->count(), 3);
        QVERIFY(combo->itemText(1).contains("prompt number 1"));
        QCOMPARE(combo->currentIndex(), 2);
        QVERIFY(panel.paneHtml(1).contains("Sample2"));
        combo->setCurrentIndex(1);
        QVERIFY(panel.paneHtml(1).contains("Sample1"));
        QVERIFY(!panel.paneHtml(1).contains("Sample2"));

        // a new result is appended and selected
        auto fresh = sixTokens();
        fresh.scratch.pieces[0] = "Fresh";
        panel.showResult(fresh);
        QCOMPARE(combo->count(), 4);
        QCOMPARE(combo->currentIndex(), 3);
        QVERIFY(panel.paneHtml(1).contains("Fresh"));

        panel.setHistory({});
        QCOMPARE(combo->count(), 0);
        QVERIFY(panel.paneHtml(1).contains("Load the models"));
        QVERIFY(panel.summaryText().isEmpty());
    }

    void scrollTogether()
    {
        ui::ComparePanel panel;
        auto r = realistic();
        for (int i = 0; i < 6; ++i) { // long enough to scroll in every pane
            r.a.pieces.insert(r.a.pieces.end(), r.a.pieces.begin(), r.a.pieces.begin() + 21);
            r.scratch.pieces.insert(r.scratch.pieces.end(), r.scratch.pieces.begin(),
                                    r.scratch.pieces.begin() + 33);
            r.transfer.pieces.insert(r.transfer.pieces.end(), r.transfer.pieces.begin(),
                                     r.transfer.pieces.begin() + 27);
        }
        panel.showResult(r);
        panel.resize(900, 500);
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        QScrollBar *bars[3];
        for (int i = 0; i < 3; ++i) {
            bars[i] = child<QTextBrowser>(panel, qPrintable(QString("pane%1").arg(i)))->verticalScrollBar();
            QVERIFY2(bars[i]->maximum() > 0, qPrintable(QString::number(i)));
        }
        bars[1]->setValue(bars[1]->maximum());
        QCOMPARE(bars[0]->value(), bars[0]->maximum());
        QCOMPARE(bars[2]->value(), bars[2]->maximum());
        bars[2]->setValue(bars[2]->maximum() / 2);
        QVERIFY(std::abs(double(bars[0]->value()) / bars[0]->maximum() - 0.5) < 0.05);
        QVERIFY(std::abs(double(bars[1]->value()) / bars[1]->maximum() - 0.5) < 0.05);
    }

    // A prompt set: its request from the controls, and its summary with the intervals in place of
    // the panes until one prompt is shown again.
    void promptSetSummary()
    {
        ui::ComparePanel panel;
        panel.setExperimentPath("/tmp/x.h5");
        panel.setConverters({"all", "top2"}, "top2");
        panel.setModelsLoaded(true);
        panel.resize(1200, 700);
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        auto r = panel.promptSetRequest();
        QCOMPARE(r.converter, std::string("top2"));
        QVERIFY(r.promptsFile.empty() && r.heldOut); // the held-out prompts
        QCOMPARE(r.source(), std::string("held-out"));
        QVERIFY(r.baselines);
        r.promptsFile = "/data/questions.jsonl";
        r.heldOut = false;
        r.limit = 5;
        r.baselines = false;
        r.gateSignal = core::GateSignal::AttnCos;
        r.gateThreshold = 0.8;
        panel.setPromptSetRequest(r);
        const auto back = panel.promptSetRequest();
        QCOMPARE(back.promptsFile, r.promptsFile);
        QCOMPARE(back.source(), std::string("prompts"));
        QCOMPARE(back.limit, 5);
        QVERIFY(!back.baselines);
        QCOMPARE(back.gateSignal, core::GateSignal::AttnCos);
        QCOMPARE(back.gateThreshold, 0.8);
        QSignalSpy asked(&panel, &ui::ComparePanel::compareSetRequested);
        auto *run = panel.findChild<QPushButton *>("runSetButton");
        QVERIFY(run->isEnabled());
        run->click();
        QCOMPARE(asked.count(), 1);
        QCOMPARE(asked.first().at(0).value<core::CompareSettings>().promptsFile, r.promptsFile);

        QVERIFY(panel.setSummaryText().isEmpty());
        auto *toggle = panel.findChild<QPushButton *>("setSummaryButton");
        QVERIFY(!toggle->isEnabled());
        ui::CompareSetSummary s;
        s.converter = "top2";
        s.source = "held-out prompts";
        s.set.prompts = s.requested = 12;
        s.set.kl = 0.0123;
        s.set.klNoPrefix = 1.5;
        s.set.klGapClosed = core::Interval{0.9918, 0.985, 0.996};
        s.set.klFirst = 0.25;
        s.set.klNoPrefixFirst = 2.5;
        s.set.klGapClosedFirst = core::Interval{0.9, 0.8, 0.95};
        s.set.top1Gain = core::Interval{0.5, 0.4, 0.6};
        core::CompareOtherSummary random;
        random.key = "random_map";
        random.converter = "random";
        random.kl = 2.5;
        random.klDifference = core::Interval{-2.49, -2.7, -2.3};
        s.set.others.push_back(random);
        core::CompareOtherSummary shuffled;
        shuffled.key = "shuffled_positions";
        shuffled.converter = "top2";
        shuffled.kl = 0.5;
        shuffled.klGapClosed = core::Interval{0.975, 0.96, 0.99};
        s.set.others.push_back(shuffled);
        s.warnings << "no raw-source-KV baseline: A's KV rows are 64 wide, B's 128";
        panel.showSetSummary(s);
        QVERIFY(!panel.setSummaryText().contains("expected answer")); // no answers in the set
        s.set.answered = 10;
        s.set.answerScratch = 0.8;
        s.set.answerTransfer = 0.6;
        s.set.answerA = 0.1;
        s.set.answerDifference = core::Interval{-0.2, -0.4, -0.05};
        panel.showSetSummary(s);
        const QString text = panel.setSummaryText();
        QVERIFY2(text.contains("expected answer given (10 prompts): scratch 0.800") &&
                     text.contains("transfer 0.600") &&
                     text.contains("transfer - scratch -0.200 [-0.400, -0.050]"),
                 qPrintable(text));
        QVERIFY2(text.contains("12 of 12 held-out prompts with 'top2'") &&
                     text.contains("KL gap closed vs no prefix 0.992 [0.985, 0.996]") &&
                     text.contains("first 8 tokens: KL 0.2500") &&
                     text.contains("gap closed 0.900 [0.800, 0.950]") &&
                     text.contains("KL minus random map -2.4900 [-2.7000, -2.3000]") &&
                     text.contains("retention above it 0.975 [0.960, 0.990]") &&
                     text.contains("gain over answering with A n/a (fewer than 2 prompts)") &&
                     text.contains("warning: no raw-source-KV baseline"),
                 qPrintable(text));
        auto *label = panel.findChild<QLabel *>("compareSetSummary");
        QVERIFY(label->isVisible());
        QVERIFY(!panel.findChild<QTextBrowser *>("pane2")->isVisible());
        QVERIFY(toggle->isEnabled() && toggle->isChecked());
        // one prompt's result: the panes again; the toggle brings the summary back
        panel.showResult(sixTokens());
        QVERIFY(panel.findChild<QTextBrowser *>("pane2")->isVisible());
        QVERIFY(!label->isVisible());
        toggle->click();
        QVERIFY(label->isVisible());
    }

    // Converters side by side: Versus lists the experiment's other converters; a set run carries the
    // choice as --versus does, and its summary gives the second converter's means with the paired
    // differences and their intervals.
    void versusSideBySide()
    {
        ui::ComparePanel panel;
        panel.setExperimentPath("/tmp/x.h5");
        panel.setConverters({"all", "top2", "mlp"}, "top2");
        panel.setModelsLoaded(true);
        auto *versus = panel.findChild<QComboBox *>("versusCombo");
        QCOMPARE(versus->count(), 3);
        QCOMPARE(versus->itemText(0), QString("(none)"));
        QCOMPARE(versus->itemText(1), QString("all"));
        QCOMPARE(versus->itemText(2), QString("mlp"));
        QCOMPARE(panel.promptSetRequest().versus, std::string());
        versus->setCurrentIndex(2);
        QCOMPARE(panel.promptSetRequest().versus, std::string("mlp"));
        // choosing mlp as the converter takes it out of Versus
        panel.findChild<QComboBox *>("converterCombo")->setCurrentText("mlp");
        QCOMPARE(versus->findText("mlp"), -1);
        QCOMPARE(panel.promptSetRequest().versus, std::string());
        auto r = panel.promptSetRequest();
        r.versus = "all";
        panel.setPromptSetRequest(r);
        QCOMPARE(versus->currentText(), QString("all"));
        QSignalSpy asked(&panel, &ui::ComparePanel::compareSetRequested);
        panel.findChild<QPushButton *>("runSetButton")->click();
        QCOMPARE(asked.first().at(0).value<core::CompareSettings>().versus, std::string("all"));

        ui::CompareSetSummary s;
        s.converter = "mlp";
        s.source = "held-out prompts";
        s.set.prompts = s.requested = 30;
        core::CompareOtherSummary other;
        other.key = "versus";
        other.converter = "all";
        other.kl = 0.31;
        other.top1 = 0.7;
        other.rougeL = 0.5;
        other.klDifference = core::Interval{-0.12, -0.2, -0.05};
        other.top1Difference = core::Interval{0.1, 0.02, 0.2};
        s.set.others.push_back(other);
        panel.showSetSummary(s);
        const QString text = panel.setSummaryText();
        QVERIFY2(text.contains("versus 'all': KL / top-1 / ROUGE-L 0.3100 / 0.700 / 0.500") &&
                     text.contains("KL minus 'all' -0.1200 [-0.2000, -0.0500]") &&
                     text.contains("top-1 minus it 0.100 [0.020, 0.200]") && !text.contains("random map"),
                 qPrintable(text));
    }

    void screenshots()
    {
        ui::ComparePanel panel;
        makeReady(panel);
        panel.setRequest([] {
            core::CompareSettings r;
            r.experiment = "/data/experiments/tinyllama-qwen.h5";
            r.converter = "default";
            r.prompt = "Explain in two sentences what a KV cache stores and why it speeds up decoding.";
            return r;
        }());
        panel.showResult(realistic());
        panel.resize(1400, 700);
        KVWB_VERIFY_SCREENSHOT(&panel, "compare_panel");
        panel.setColouring(ui::ComparePanel::Colouring::Kl);
        KVWB_VERIFY_SCREENSHOT(&panel, "compare_panel_kl");

        ui::ComparePanel empty;
        empty.resize(1400, 700);
        KVWB_VERIFY_SCREENSHOT(&empty, "compare_panel_empty");
    }
};

QTEST_MAIN(TestComparePanel)
#include "tst_compare_panel.moc"
