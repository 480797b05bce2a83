#include "ui/panels/capture_panel.h"
#include "ui/panels/job_progress.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

namespace kvwb::ui {

namespace {

// Decimal units (1 MB = 10^6 bytes), as file managers show file sizes. ui/ has no shared helper yet
// (models_panel.cpp keeps its own in an anonymous namespace).
QString humanBytes(int64_t bytes)
{
    if (bytes < 1000)
        return QString("%1 B").arg(bytes);
    static const char *units[] = {"kB", "MB", "GB", "TB"};
    double v = double(bytes) / 1000.0;
    int u = 0;
    while (v >= 1000.0 && u < 3) {
        v /= 1000.0;
        ++u;
    }
    return QString("%1 %2").arg(v, 0, 'f', v < 10 ? 2 : 1).arg(units[u]);
}

QString milliseconds(double ms)
{
    return ms >= 10000 ? QString("%1 s").arg(ms / 1000.0, 0, 'f', 1) : QString("%1 ms").arg(ms, 0, 'f', 0);
}

// "all 12" or "3 of 12: 0, 5, 11".
QString layersText(const core::ModelInfo &m)
{
    const int total = m.config.numLayers;
    if (m.capturedLayers.empty() || int(m.capturedLayers.size()) == total)
        return QObject::tr("all %1").arg(total);
    QStringList ids;
    for (int l : m.capturedLayers)
        ids << QString::number(l);
    return QObject::tr("%1 of %2: %3").arg(m.capturedLayers.size()).arg(total).arg(ids.join(", "));
}

QTableWidget *makeTable(QWidget *parent, const QString &name)
{
    auto *t = new QTableWidget(0, 2, parent);
    t->setObjectName(name);
    t->setHorizontalHeaderLabels({QObject::tr("Quantity"), QObject::tr("Value")});
    t->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    t->horizontalHeader()->setStretchLastSection(true);
    t->verticalHeader()->hide();
    t->setEditTriggers(QAbstractItemView::NoEditTriggers);
    t->setSelectionMode(QAbstractItemView::NoSelection);
    t->setWordWrap(false);
    return t;
}

void fillTable(QTableWidget *t, const QList<QPair<QString, QString>> &rows)
{
    t->setRowCount(int(rows.size()));
    for (int i = 0; i < int(rows.size()); ++i) {
        t->setItem(i, 0, new QTableWidgetItem(rows[i].first));
        auto *value = new QTableWidgetItem(rows[i].second);
        value->setToolTip(rows[i].second);
        t->setItem(i, 1, value);
    }
    t->resizeRowsToContents();
}

} // namespace

CapturePanel::CapturePanel(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QVBoxLayout(this);
    auto *intro = new QLabel(tr("Run models A and B over a prompt set and store both models' KV caches "
                                "in an experiment file; the Alignment panel fits converters from it."),
                             this);
    intro->setWordWrap(true);
    layout->addWidget(intro);

    addSettingsGroup(layout);

    auto *buttons = new QHBoxLayout;
    m_capture = new QPushButton(tr("Capture"), this);
    m_capture->setObjectName("captureButton");
    m_capture->setToolTip(tr("Run both models over the prompts and write their KV caches to the file."));
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setObjectName("cancelCaptureButton");
    m_cancel->setToolTip(tr("Stop after the current prompt; the prompts written so far stay in the file."));
    m_progress = new QProgressBar(this);
    m_progress->setObjectName("captureProgress");
    m_progress->setRange(0, 1000);
    m_progress->setValue(0);
    m_progress->setTextVisible(false);
    m_progress->setToolTip(tr("Share of the prompts captured so far."));
    initJobProgress(m_progress);
    buttons->addWidget(m_capture);
    buttons->addWidget(m_cancel);
    buttons->addWidget(m_progress, 1);
    layout->addLayout(buttons);
    m_status = new QLabel(this);
    m_status->setObjectName("captureStatus");
    m_status->setWordWrap(true);
    m_status->setTextFormat(Qt::RichText);
    layout->addWidget(m_status);

    auto *results = new QHBoxLayout;
    auto *runBox = new QGroupBox(tr("This run"), this);
    runBox->setToolTip(tr("What the last capture wrote, and how long each step took."));
    auto *runLayout = new QVBoxLayout(runBox);
    m_run = makeTable(runBox, "runTable");
    m_run->setToolTip(runBox->toolTip());
    runLayout->addWidget(m_run);
    auto *fileBox = new QGroupBox(tr("In the file"), this);
    fileBox->setToolTip(tr("What the experiment file shown in the workbench holds, all runs together."));
    auto *fileLayout = new QVBoxLayout(fileBox);
    m_file = makeTable(fileBox, "fileTable");
    m_file->setToolTip(fileBox->toolTip());
    fileLayout->addWidget(m_file);
    results->addWidget(runBox, 1);
    results->addWidget(fileBox, 1);
    layout->addLayout(results, 1);

    fillTable(m_run, {{tr("Nothing captured yet"), QString()}});
    refreshFileTable();

    connect(m_browse, &QPushButton::clicked, this, [this] {
        const QString path =
            QFileDialog::getOpenFileName(this, tr("Prompt set"), m_prompts->currentText(),
                                         tr("Prompts (*.txt *.jsonl *.json);;All files (*)"));
        if (!path.isEmpty())
            m_prompts->setCurrentText(path);
    });
    connect(m_saveAs, &QPushButton::clicked, this, [this] {
        QString path = QFileDialog::getSaveFileName(this, tr("Experiment file"), m_out->text(),
                                                    tr("Experiment files (*.h5);;All files (*)"), nullptr,
                                                    QFileDialog::DontConfirmOverwrite);
        if (path.isEmpty())
            return;
        if (QFileInfo(path).suffix().isEmpty())
            path += ".h5";
        m_out->setText(path);
    });
    connect(m_prompts, &QComboBox::currentTextChanged, this, &CapturePanel::inputChanged);
    connect(m_out, &QLineEdit::textChanged, this, &CapturePanel::inputChanged);
    connect(m_capture, &QPushButton::clicked, this, [this] {
        const CaptureRequest r = request();
        if (const QString refusal = captureRefusal(); !refusal.isEmpty()) {
            setError(refusal);
            return;
        }
        setBusy(true);
        setStatus(
            tr("Capturing %1 into %2...").arg(r.promptsPath.toHtmlEscaped(), r.outPath.toHtmlEscaped()));
        Q_EMIT captureRequested(r);
    });
    connect(m_cancel, &QPushButton::clicked, this, [this] {
        setStatus(tr("Cancelling after the current prompt..."));
        Q_EMIT cancelRequested();
    });
    refreshEnabled();
}

// The capture's settings: prompt set, experiment file, storage, compression, limits, RoPE form.
void CapturePanel::addSettingsGroup(QVBoxLayout *layout)
{
    auto *settings = new QGroupBox(tr("Capture KV caches"), this);
    auto *grid = new QGridLayout(settings);
    grid->addWidget(new QLabel(tr("Prompt set:"), settings), 0, 0);
    m_prompts = new QComboBox(settings);
    m_prompts->setObjectName("promptSetCombo");
    m_prompts->setEditable(true);
    m_prompts->setInsertPolicy(QComboBox::NoInsert);
    m_prompts->setMinimumContentsLength(30);
    m_prompts->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_prompts->lineEdit()->setPlaceholderText(tr("prompts.txt (one prompt per line) or a .jsonl workload"));
    m_prompts->setToolTip(
        tr("The prompts to run: a text file with one prompt per line, or JSONL with a 'prompt' or "
           "'text' field per line."));
    m_browse = new QPushButton(tr("Browse..."), settings);
    m_browse->setObjectName("browsePromptsButton");
    m_browse->setToolTip(tr("Choose a prompt file on disk."));
    grid->addWidget(m_prompts, 0, 1, 1, 7);
    grid->addWidget(m_browse, 0, 8);

    grid->addWidget(new QLabel(tr("Experiment file:"), settings), 1, 0);
    m_out = new QLineEdit(settings);
    m_out->setObjectName("outPathEdit");
    m_out->setPlaceholderText(tr("experiment.h5"));
    m_out->setToolTip(
        tr("The HDF5 file the caches go to; an existing file for the same two models is appended to."));
    m_saveAs = new QPushButton(tr("Save as..."), settings);
    m_saveAs->setObjectName("saveAsButton");
    m_saveAs->setToolTip(tr("Choose where to write the experiment file (.h5)."));
    grid->addWidget(m_out, 1, 1, 1, 7);
    grid->addWidget(m_saveAs, 1, 8);

    grid->addWidget(new QLabel(tr("KV storage:"), settings), 2, 0);
    m_storage = new QComboBox(settings);
    m_storage->setObjectName("storageCombo");
    m_storage->addItems({"f32", "f16", "bf16"});
    m_storage->setToolTip(
        tr("How K/V values are stored on disk: f32 keeps them exact, f16 and bf16 halve the file size."));
    grid->addWidget(m_storage, 2, 1);
    grid->addWidget(new QLabel(tr("Compression:"), settings), 2, 2);
    m_compress = new QSpinBox(settings);
    m_compress->setObjectName("compressSpin");
    m_compress->setRange(0, 9);
    m_compress->setSpecialValueText(tr("off"));
    m_compress->setToolTip(
        tr("Deflate level for the KV datasets, 0 = off; higher levels make smaller files but write "
           "slower."));
    grid->addWidget(m_compress, 2, 3);
    grid->addWidget(new QLabel(tr("Max tokens:"), settings), 2, 4);
    m_maxTokens = new QSpinBox(settings);
    m_maxTokens->setObjectName("maxTokensSpin");
    m_maxTokens->setRange(0, 1 << 20);
    m_maxTokens->setSpecialValueText(tr("model context"));
    m_maxTokens->setToolTip(
        tr("Truncate each prompt to this many tokens; 0 keeps up to the model's context length."));
    grid->addWidget(m_maxTokens, 2, 5);
    grid->addWidget(new QLabel(tr("Limit:"), settings), 2, 6);
    m_limit = new QSpinBox(settings);
    m_limit->setObjectName("limitSpin");
    m_limit->setRange(0, 1 << 24);
    m_limit->setSpecialValueText(tr("all prompts"));
    m_limit->setSuffix(tr(" prompts"));
    m_limit->setToolTip(tr("Capture only the first N prompts of the set; 0 captures them all."));
    grid->addWidget(m_limit, 2, 7);
    m_postRope = new QCheckBox(tr("Keys after RoPE"), settings);
    m_postRope->setObjectName("postRopeCheck");
    m_postRope->setToolTip(
        tr("Keys are stored before RoPE by default so that they can be mapped across models with "
           "different position encodings; check to store them rotated."));
    grid->addWidget(m_postRope, 2, 8);
    grid->setColumnStretch(1, 1);
    grid->setColumnStretch(3, 1);
    grid->setColumnStretch(5, 1);
    grid->setColumnStretch(7, 1);
    layout->addWidget(settings);
}

void CapturePanel::setPromptSets(const QStringList &paths)
{
    const QString typed = m_prompts->currentText();
    const QSignalBlocker block(m_prompts);
    m_prompts->clear();
    m_prompts->addItems(paths);
    m_prompts->setCurrentText(typed.isEmpty() && !paths.isEmpty() ? paths.front() : typed);
}

void CapturePanel::setRequest(const CaptureRequest &r)
{
    m_prompts->setCurrentText(r.promptsPath);
    m_out->setText(r.outPath);
    m_storage->setCurrentText(QString::fromUtf8(core::floatTypeName(r.storage)));
    m_compress->setValue(r.compress);
    m_maxTokens->setValue(r.maxTokens);
    m_limit->setValue(r.limit);
    m_postRope->setChecked(r.postRope);
}

CaptureRequest CapturePanel::request() const
{
    CaptureRequest r;
    r.promptsPath = m_prompts->currentText().trimmed();
    r.outPath = m_out->text().trimmed();
    r.storage = core::parseFloatType(m_storage->currentText().toStdString()).value_or(core::FloatType::F32);
    r.compress = m_compress->value();
    r.maxTokens = m_maxTokens->value();
    r.limit = m_limit->value();
    r.postRope = m_postRope->isChecked();
    return r;
}

void CapturePanel::setModelsLoaded(bool loaded)
{
    m_modelsLoaded = loaded;
    refreshEnabled();
}

void CapturePanel::refreshEnabled()
{
    m_capture->setEnabled(!m_busy && m_modelsLoaded);
    m_cancel->setEnabled(m_ownJob);
    for (QWidget *w : std::initializer_list<QWidget *>{m_prompts, m_browse, m_out, m_saveAs, m_storage,
                                                       m_compress, m_maxTokens, m_limit, m_postRope})
        w->setEnabled(!m_busy);
    if (!m_busy && !m_modelsLoaded)
        setStatus(tr("Load models A and B first (Models panel); Capture runs both of them."));
    else if (!m_busy && m_status->text().startsWith(tr("Load models")))
        setStatus(tr("Ready: choose a prompt set and an experiment file, then Capture."));
}

void CapturePanel::setSnapshot(std::shared_ptr<const ExperimentSnapshot> s)
{
    m_snapshot = std::move(s);
    if (m_snapshot && m_out->text().trimmed().isEmpty())
        m_out->setText(m_snapshot->path);
    refreshFileTable();
}

namespace {

// "f16, deflate 4, chunks of 256 tokens"
QString storageText(const core::ExperimentOptions &o)
{
    return QString("%1, %2, chunks of %3 tokens")
        .arg(QString::fromUtf8(core::floatTypeName(o.storage)),
             o.compress > 0 ? QString("deflate %1").arg(o.compress) : QString("uncompressed"))
        .arg(o.chunkTokens);
}

} // namespace

void CapturePanel::refreshFileTable()
{
    if (!m_snapshot) {
        fillTable(m_file, {{tr("No experiment file open"), QString()}});
        return;
    }
    const ExperimentSnapshot &s = *m_snapshot;
    fillTable(m_file, {
                          {tr("File"), s.path},
                          {tr("Prompts"), QString::number(s.prompts)},
                          {tr("Tokens A / B"), QString("%1 / %2").arg(s.tokensA).arg(s.tokensB)},
                          {tr("Layers captured, A"), layersText(s.a)},
                          {tr("Layers captured, B"), layersText(s.b)},
                          {tr("Storage"), storageText(s.storage)},
                          {tr("Key form"), QString::fromUtf8(core::keyFormName(s.storage.keyForm))},
                          {tr("Converters"), QString::number(s.converters.size())},
                          {tr("Replay ledgers"), QString::number(s.ledgers.size())},
                      });
}

void CapturePanel::showSummary(const CaptureSummary &s)
{
    setBusy(false);
    QList<QPair<QString, QString>> rows = {
        {tr("File"), s.outPath + (s.appended ? tr(" (appended)") : tr(" (new)"))},
        {tr("Prompts written"), tr("%1 (%2 in the file now)").arg(s.promptsWritten).arg(s.promptsInFile)},
        {tr("Tokens A / B"), QString("%1 / %2").arg(s.tokensA).arg(s.tokensB)},
        {tr("Layers A / B"), QString("%1 / %2").arg(s.layersA).arg(s.layersB)},
        {tr("KV bytes (float32)"), humanBytes(s.kvBytes)},
        {tr("File size"), humanBytes(s.fileBytes)},
        {tr("Storage"), s.storage},
        {tr("Key form"), s.keyForm},
        {tr("Prefill A / B"), QString("%1 / %2").arg(milliseconds(s.prefillMsA), milliseconds(s.prefillMsB))},
        {tr("Write"), milliseconds(s.writeMs)},
        {tr("Wall time"), milliseconds(s.wallMs)},
        {tr("Warnings"), QString::number(s.warnings.size())},
    };
    for (int i = 0; i < s.warnings.size(); ++i)
        rows.append({tr("  warning %1").arg(i + 1), s.warnings[i]});
    fillTable(m_run, rows);
    m_summaryText.clear();
    for (const auto &[k, v] : rows)
        m_summaryText += k.trimmed() + ": " + v + "\n";

    m_progress->setValue(s.cancelled ? m_progress->value() : 1000);
    // the KV computed (f32) and what the file holds on disk differ by the storage type and compression
    const QString what = tr("%1 prompts (KV %2 in f32 as computed; the file is now %3) into %4")
                             .arg(s.promptsWritten)
                             .arg(humanBytes(s.kvBytes), humanBytes(s.fileBytes), s.outPath);
    setStatus((s.cancelled ? tr("Cancelled after %1; they stay in the file.") : tr("Captured %1."))
                  .arg(what.toHtmlEscaped()) +
              (s.warnings.isEmpty()
                   ? QString()
                   : (s.warnings.size() == 1 ? tr(" 1 warning, listed below.")
                                             : tr(" %1 warnings, listed below.").arg(s.warnings.size()))));
    refreshFileTable();
}

QString CapturePanel::summaryText() const
{
    return m_summaryText;
}

QString CapturePanel::statusText() const
{
    return m_status->text();
}

void CapturePanel::setBusy(bool busy, bool ownJob)
{
    m_busy = busy;
    m_ownJob = busy && ownJob;
    if (m_ownJob)
        m_progress->setValue(0);
    setJobProgressRunning(m_progress, m_ownJob);
    refreshEnabled();
}

void CapturePanel::setProgress(double fraction, const QString &stage)
{
    m_progress->setValue(int(1000 * fraction));
    setStatus(tr("Capturing: %1").arg(stage.toHtmlEscaped()));
}

void CapturePanel::setFailed(const QString &message)
{
    setBusy(false);
    m_progress->setValue(0);
    setError(message);
}

void CapturePanel::setCancelled()
{
    setBusy(false);
    setStatus(tr("Capture cancelled; the prompts written before stay in the file."));
}

void CapturePanel::setStatus(const QString &html)
{
    m_errorShown = false;
    m_status->setText(html);
}

QString CapturePanel::captureRefusal() const
{
    const CaptureRequest r = request();
    QStringList missing;
    if (r.promptsPath.isEmpty())
        missing << tr("choose a prompt set");
    if (r.outPath.isEmpty())
        missing << tr("choose an experiment file to write");
    return missing.isEmpty() ? QString() : tr("Cannot capture yet: %1.").arg(missing.join(tr(" and ")));
}

void CapturePanel::inputChanged()
{
    if (!m_errorShown || m_busy)
        return;
    const QString refusal = captureRefusal();
    if (refusal.isEmpty())
        setStatus(tr("Ready: press Capture."));
    else
        setError(refusal);
}

void CapturePanel::setError(const QString &message)
{
    m_errorShown = true;
    m_status->setText(QString("<span style='color:#b00020'>%1</span>").arg(message.toHtmlEscaped()));
}

} // namespace kvwb::ui
