// CapturePanel: request round trip, Capture refused (with the reason) without a prompt set or an
// output file, the exact request emitted, busy/models toggling the buttons, the "This run" summary
// with human sizes and warnings, "In the file" from a hand-built snapshot, and a screenshot.
#include "tests/support/screenshot.h"
#include "tests/support/synthetic_ledger.h"
#include "ui/panels/capture_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QtTest>

using namespace kvwb;

namespace {

ui::CaptureRequest sampleRequest()
{
    ui::CaptureRequest r;
    r.promptsPath = "/data/prompts.txt";
    r.outPath = "/tmp/exp.h5";
    r.storage = core::FloatType::BF16;
    r.compress = 4;
    r.maxTokens = 256;
    r.limit = 50;
    r.postRope = true;
    return r;
}

void compareRequests(const ui::CaptureRequest &a, const ui::CaptureRequest &b)
{
    QCOMPARE(a.promptsPath, b.promptsPath);
    QCOMPARE(a.outPath, b.outPath);
    QCOMPARE(a.storage, b.storage);
    QCOMPARE(a.compress, b.compress);
    QCOMPARE(a.maxTokens, b.maxTokens);
    QCOMPARE(a.limit, b.limit);
    QCOMPARE(a.postRope, b.postRope);
}

std::shared_ptr<ui::ExperimentSnapshot> smallSnapshot()
{
    auto s = std::make_shared<ui::ExperimentSnapshot>();
    s->path = "/tmp/exp.h5";
    s->a.config.numLayers = 12;
    s->b.config.numLayers = 8;
    s->b.capturedLayers = {0, 3, 7};
    s->prompts = 42;
    s->tokensA = 5120;
    s->tokensB = 5004;
    s->storage.storage = core::FloatType::BF16;
    s->storage.compress = 4;
    s->storage.chunkTokens = 128;
    s->storage.keyForm = core::KeyForm::PostRope;
    return s;
}

} // namespace

class TestCapturePanel : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void requestRoundTrip()
    {
        ui::CapturePanel p;
        compareRequests(p.request(), ui::CaptureRequest{}); // defaults: f32, pre-RoPE, all
        QVERIFY(!p.findChild<QCheckBox *>("postRopeCheck")->isChecked());
        p.setRequest(sampleRequest());
        compareRequests(p.request(), sampleRequest());
    }

    void promptSetsKeepTheTypedPath()
    {
        ui::CapturePanel p;
        p.setPromptSets({"a.txt", "b.jsonl"});
        QCOMPARE(p.request().promptsPath, QString("a.txt"));
        auto *combo = p.findChild<QComboBox *>("promptSetCombo");
        QCOMPARE(combo->count(), 2);
        combo->setCurrentText("/elsewhere/mine.txt");
        p.setPromptSets({"c.txt"});
        QCOMPARE(p.request().promptsPath, QString("/elsewhere/mine.txt"));
    }

    void captureNeedsModelsAndInputs()
    {
        ui::CapturePanel p;
        QSignalSpy spy(&p, &ui::CapturePanel::captureRequested);
        auto *capture = p.findChild<QPushButton *>("captureButton");
        auto *cancel = p.findChild<QPushButton *>("cancelCaptureButton");
        QVERIFY(!capture->isEnabled());
        QVERIFY(p.statusText().contains("Load models A and B first"));
        p.setModelsLoaded(true);
        QVERIFY(capture->isEnabled());
        QVERIFY(!cancel->isEnabled());

        capture->click(); // nothing chosen
        QCOMPARE(spy.count(), 0);
        QVERIFY(p.statusText().contains("choose a prompt set"));
        QVERIFY(p.statusText().contains("choose an experiment file"));
        QVERIFY(p.statusText().contains("#b00020"));

        auto r = sampleRequest();
        r.outPath.clear();
        p.setRequest(r);
        capture->click();
        QCOMPARE(spy.count(), 0);
        QVERIFY(!p.statusText().contains("prompt set"));
        QVERIFY(p.statusText().contains("choose an experiment file"));

        p.setRequest(sampleRequest());
        capture->click();
        QCOMPARE(spy.count(), 1);
        compareRequests(spy.first().first().value<ui::CaptureRequest>(), sampleRequest());
        // busy: Capture off, Cancel on, settings locked
        QVERIFY(!capture->isEnabled());
        QVERIFY(cancel->isEnabled());
        QVERIFY(!p.findChild<QLineEdit *>("outPathEdit")->isEnabled());

        QSignalSpy cancelSpy(&p, &ui::CapturePanel::cancelRequested);
        cancel->click();
        QCOMPARE(cancelSpy.count(), 1);
        p.setCancelled();
        QVERIFY(capture->isEnabled());
        QVERIFY(!cancel->isEnabled());
        QVERIFY(p.statusText().contains("cancelled"));

        p.setBusy(true);
        p.setProgress(0.5, "prompt 21 of 42");
        QVERIFY(p.statusText().contains("prompt 21 of 42"));
        p.setFailed("disk full: /tmp/exp.h5");
        QVERIFY(capture->isEnabled());
        QVERIFY(p.statusText().contains("disk full"));

        p.setModelsLoaded(false);
        QVERIFY(!capture->isEnabled());
    }

    void summaryShowsNumbersAndSizes()
    {
        ui::CapturePanel p;
        QVERIFY(p.summaryText().isEmpty());
        ui::CaptureSummary s;
        s.outPath = "/tmp/exp.h5";
        s.appended = true;
        s.promptsWritten = 40;
        s.promptsInFile = 82;
        s.tokensA = 5120;
        s.tokensB = 5004;
        s.layersA = 12;
        s.layersB = 8;
        s.kvBytes = 12'400'000;
        s.fileBytes = 3'210'000'000;
        s.storage = "f16";
        s.keyForm = "pre_rope";
        s.prefillMsA = 812;
        s.prefillMsB = 640;
        s.writeMs = 95;
        s.wallMs = 21500;
        s.warnings = {"skipped 2 empty prompts: 3, 17", "prompt 9 truncated to 256 tokens"};
        p.showSummary(s);
        const QString t = p.summaryText();
        for (const char *want :
             {"Prompts written: 40 (82 in the file now)", "Tokens A / B: 5120 / 5004", "Layers A / B: 12 / 8",
              "KV bytes (float32): 12.4 MB", "File size: 3.21 GB", "Storage: f16", "Key form: pre_rope",
              "Prefill A / B: 812 ms / 640 ms", "Write: 95 ms", "Wall time: 21.5 s", "Warnings: 2",
              "skipped 2 empty prompts: 3, 17", "prompt 9 truncated", "(appended)"})
            QVERIFY2(t.contains(want), qPrintable(QString("'%1' not in:\n%2").arg(want, t)));
        QVERIFY(p.statusText().contains("Captured 40 prompts"));
        QVERIFY(p.statusText().contains("2 warnings"));

        s.cancelled = true;
        s.warnings.clear();
        s.kvBytes = 900;
        p.showSummary(s);
        QVERIFY(p.summaryText().contains("KV bytes (float32): 900 B"));
        QVERIFY(p.summaryText().contains("Warnings: 0"));
        QVERIFY(p.statusText().contains("Cancelled after 40 prompts"));
    }

    void fileTableFromSnapshot()
    {
        ui::CapturePanel p;
        auto *file = p.findChild<QTableWidget *>("fileTable");
        const auto text = [file] {
            QString t;
            for (int i = 0; i < file->rowCount(); ++i)
                t += file->item(i, 0)->text() + ": " + file->item(i, 1)->text() + "\n";
            return t;
        };
        QVERIFY(text().contains("No experiment file open"));
        p.setSnapshot(smallSnapshot());
        QCOMPARE(p.request().outPath, QString("/tmp/exp.h5")); // an empty output path follows the file
        QString t = text();
        QVERIFY2(t.contains("Prompts: 42"), qPrintable(t));
        QVERIFY(t.contains("Tokens A / B: 5120 / 5004"));
        QVERIFY(t.contains("Layers captured, A: all 12"));
        QVERIFY(t.contains("Layers captured, B: 3 of 8: 0, 3, 7"));
        // the file's own storage settings, read with the snapshot
        QVERIFY2(t.contains("Storage: bf16, deflate 4, chunks of 128 tokens"), qPrintable(t));
        QVERIFY(t.contains("Key form: post_rope"));
    }

    void screenshot()
    {
        ui::CapturePanel p;
        p.setModelsLoaded(true);
        p.setPromptSets({"projects/demo/prompts.txt", "projects/demo/workload.jsonl"});
        auto r = sampleRequest();
        r.promptsPath = "projects/demo/prompts.txt";
        r.outPath = "/home/me/experiments/demo-pair.h5";
        r.postRope = false;
        p.setRequest(r);
        p.setSnapshot(smallSnapshot());
        ui::CaptureSummary s;
        s.outPath = r.outPath;
        s.promptsWritten = 40;
        s.promptsInFile = 82;
        s.tokensA = 5120;
        s.tokensB = 5004;
        s.layersA = 12;
        s.layersB = 8;
        s.kvBytes = 12'400'000;
        s.fileBytes = 6'900'000;
        s.storage = "bf16";
        s.keyForm = "pre_rope";
        s.prefillMsA = 812;
        s.prefillMsB = 640;
        s.writeMs = 95;
        s.wallMs = 1650;
        s.warnings = {"skipped 2 empty prompts: lines 3, 17"};
        p.showSummary(s);
        p.resize(1300, 800);
        p.show();
        QVERIFY(QTest::qWaitForWindowExposed(&p));
        KVWB_VERIFY_SCREENSHOT(&p, "capture_panel");
    }
};

QTEST_MAIN(TestCapturePanel)
#include "tst_capture_panel.moc"
