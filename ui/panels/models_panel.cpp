#include "ui/panels/models_panel.h"
#include "ui/panels/job_progress.h"

#include "core/model/checkpoint.h"
#include "core/model/device.h"
#include "core/model/dtype.h"
#include "core/model/gguf_model.h"
#include "core/model/memory_estimate.h"
#include "core/util/error.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QVBoxLayout>

#include <algorithm>

namespace kvwb::ui {

namespace {

QString megabytes(int64_t bytes)
{
    return bytes >= (int64_t(1) << 30) ? QString("%1 GB").arg(double(bytes) / double(1 << 30), 0, 'f', 2)
                                       : QString("%1 MB").arg(double(bytes) / 1e6, 0, 'f', 1);
}

} // namespace

ModelsPanel::ModelsPanel(QWidget *parent) : QWidget(parent)
{
    auto *layout = new QVBoxLayout(this);
    m_archiveNote = new QLabel(this);
    m_archiveNote->setObjectName("archiveNote");
    m_archiveNote->setWordWrap(true);
    m_archiveNote->setTextFormat(Qt::RichText);
    m_archiveNote->setStyleSheet("QLabel { background:#fff4e0; border:1px solid #e0a040; padding:6px; }");
    m_archiveNote->hide();
    layout->addWidget(m_archiveNote);
    auto *grid = new QGridLayout;
    grid->addWidget(new QLabel(tr("<b>Model</b>")), 0, 0);
    grid->addWidget(new QLabel(tr("<b>Path</b> (HF directory, .gguf file or llama2.c .bin)")), 0, 1);
    grid->addWidget(new QLabel(tr("<b>Device</b>")), 0, 3);
    grid->addWidget(new QLabel(tr("<b>Dtype</b>")), 0, 4);
    grid->addWidget(new QLabel(tr("<b>Context</b>")), 0, 5);
    buildRow('a', grid, 1);
    buildRow('b', grid, 3);
    grid->setColumnStretch(1, 1);
    layout->addLayout(grid);

    auto *buttons = new QHBoxLayout;
    m_load = new QPushButton(tr("Load both models"), this);
    m_load->setObjectName("loadButton");
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setObjectName("cancelButton");
    m_cancel->setEnabled(false);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_progress->setValue(0);
    m_progress->setTextVisible(false);
    initJobProgress(m_progress);
    buttons->addWidget(m_load);
    buttons->addWidget(m_cancel);
    buttons->addWidget(m_progress, 1);
    layout->addLayout(buttons);
    m_status = new QLabel(tr("Choose the source (A) and target (B) models, then load them."), this);
    m_status->setObjectName("statusLabel");
    m_status->setWordWrap(true);
    layout->addWidget(m_status);
    layout->addStretch(1);

    connect(m_load, &QPushButton::clicked, this, [this] {
        setBusy(true);
        m_status->setText(tr("Loading..."));
        Q_EMIT loadRequested(choice('a'), choice('b'));
    });
    connect(m_cancel, &QPushButton::clicked, this, [this] {
        m_status->setText(tr("Cancelling..."));
        Q_EMIT cancelRequested();
    });
}

void ModelsPanel::buildRow(char role, QGridLayout *grid, int line)
{
    Row &r = row(role);
    const QString name = role == 'a' ? tr("A (source)") : tr("B (target)");
    grid->addWidget(new QLabel(name, this), line, 0);
    r.path = new QLineEdit(this);
    r.path->setObjectName(role == 'a' ? "pathA" : "pathB");
    r.path->setPlaceholderText(tr("model folder, .gguf file or llama2.c .bin"));
    // Models are folders (HF) or single files (GGUF, llama2.c): Browse offers both.
    auto *browse = new QPushButton(tr("Browse..."), this);
    browse->setObjectName(role == 'a' ? "browseA" : "browseB");
    auto *browseMenu = new QMenu(browse);
    QAction *pickFolder = browseMenu->addAction(tr("Model folder (Hugging Face)..."));
    pickFolder->setObjectName(role == 'a' ? "browseFolderA" : "browseFolderB");
    QAction *pickFile = browseMenu->addAction(tr("Model file (.gguf, llama2.c .bin)..."));
    pickFile->setObjectName(role == 'a' ? "browseFileA" : "browseFileB");
    browse->setMenu(browseMenu);
    r.device = new QComboBox(this);
    r.device->setObjectName(role == 'a' ? "deviceA" : "deviceB");
    r.device->addItems({"cpu", "cuda"});
    r.device->setToolTip(
        tr("cuda needs an NVIDIA GPU and a CUDA build of LibTorch; loading tells you why when it "
           "cannot use it"));
    r.dtype = new QComboBox(this);
    r.dtype->setObjectName(role == 'a' ? "dtypeA" : "dtypeB");
    r.dtype->addItems({"f32", "bf16", "f16"});
    r.dtype->setToolTip(tr("f16 runs on CUDA only"));
    r.context = new QSpinBox(this);
    r.context->setObjectName(role == 'a' ? "contextA" : "contextB");
    r.context->setRange(0, core::kMaxPositions);
    r.context->setSingleStep(1024);
    r.context->setSpecialValueText(tr("model's own"));
    r.context->setToolTip(
        tr("Positions the model serves (prompt and answer together). \"model's own\" is its "
           "configured context; a Phi-3 128k model then serves its original 4096 with the short RoPE "
           "factors, and a larger value switches it to the long ones for its whole life, as llama.cpp "
           "does for its context size. At most the model's max_position_embeddings."));
    r.dequantize = new QCheckBox(tr("dequantise"), this);
    r.dequantize->setObjectName(role == 'a' ? "dequantizeA" : "dequantizeB");
    r.dequantize->setToolTip(
        tr("A GGUF file's quantised weights run in their blocks on the CPU (about a sixth of their f32 "
           "size for Q4_K). Checked: dequantise them to the dtype as they load, the reference path "
           "(kvwb --dequantize)."));
    r.kvDtype = new QComboBox(this);
    r.kvDtype->setObjectName(role == 'a' ? "kvDtypeA" : "kvDtypeB");
    r.kvDtype->addItem(tr("KV as dtype"), QString());
    for (const char *t : {"f32", "bf16", "f16"})
        r.kvDtype->addItem(tr("KV %1").arg(t), QString(t));
    r.kvDtype->setToolTip(
        tr("The KV cache's element type. bf16 or f16 halves an f32 model's cache (rounded once as it is "
           "written; attention reads it widened to f32), e.g. for long prompts (kvwb --kv-dtype)."));
    r.estimate = new QLabel(this);
    r.estimate->setObjectName(role == 'a' ? "estimateA" : "estimateB");
    r.estimate->setWordWrap(true);
    grid->addWidget(r.path, line, 1);
    grid->addWidget(browse, line, 2);
    grid->addWidget(r.device, line, 3);
    grid->addWidget(r.dtype, line, 4);
    grid->addWidget(r.context, line, 5);
    grid->addWidget(r.dequantize, line, 6);
    grid->addWidget(r.kvDtype, line, 7);
    grid->addWidget(r.estimate, line + 1, 1, 1, 7);
    connect(pickFolder, &QAction::triggered, this, [this, role] {
        const QString dir =
            QFileDialog::getExistingDirectory(this, tr("Model directory"), row(role).path->text());
        if (!dir.isEmpty())
            row(role).path->setText(dir);
    });
    connect(pickFile, &QAction::triggered, this, [this, role] {
        const QString file = QFileDialog::getOpenFileName(
            this, tr("Model file"), row(role).path->text(),
            tr("Model files (*.gguf *.bin);;GGUF (*.gguf);;llama2.c checkpoints (*.bin);;All files (*)"));
        if (!file.isEmpty())
            row(role).path->setText(file);
    });
    connect(r.path, &QLineEdit::textChanged, this, [this, role] { refreshEstimate(role); });
    connect(r.device, &QComboBox::currentTextChanged, this, [this, role] { refreshEstimate(role); });
    connect(r.dtype, &QComboBox::currentTextChanged, this, [this, role] { refreshEstimate(role); });
    connect(r.context, &QSpinBox::valueChanged, this, [this, role] { refreshEstimate(role); });
    connect(r.dequantize, &QCheckBox::toggled, this, [this, role] { refreshEstimate(role); });
    connect(r.kvDtype, &QComboBox::currentIndexChanged, this, [this, role] { refreshEstimate(role); });
    refreshEstimate(role);
}

void ModelsPanel::refreshEstimate(char role)
{
    Row &r = row(role);
    r.config.reset();
    const QString path = r.path->text().trimmed();
    if (path.isEmpty()) {
        r.estimate->setText(tr("<i>no model chosen</i>"));
    } else {
        try {
            const auto ck = core::Checkpoint::open(path.toStdString());
            r.config = ck.config();
            const int bytes = core::floatTypeBytes(
                core::parseFloatType(r.dtype->currentText().toStdString()).value_or(core::FloatType::F32));
            const int most =
                r.config->maxPositionEmbeddings > 0 ? r.config->maxPositionEmbeddings : core::kMaxPositions;
            if (r.context->maximum() != most) {
                const QSignalBlocker quiet(r.context);
                r.context->setMaximum(most); // clamps a value above it
            }
            const int context = r.context->value() > 0 ? r.context->value() : r.config->contextLimit();
            const bool keep = r.device->currentText() == "cpu" && !r.dequantize->isChecked();
            const QString kv = r.kvDtype->currentData().toString();
            const int kvBytes =
                kv.isEmpty() ? 0 : core::floatTypeBytes(*core::parseFloatType(kv.toStdString()));
            const auto e = core::estimateMemory(ck, bytes, context, keep, kvBytes);
            r.estimate->setText(
                tr("%1 layers, %2 heads / %3 kv heads of %4, %5M parameters. Needs about %6 on %7 "
                   "(weights %8 + KV cache %9 at %10 tokens%12 + activations %11).")
                    .arg(r.config->numLayers)
                    .arg(r.config->numHeads)
                    .arg(r.config->numKvHeads)
                    .arg(r.config->headDim)
                    .arg(double(r.config->parameterCount()) / 1e6, 0, 'f', 2)
                    .arg(megabytes(e.totalBytes()), r.device->currentText(), megabytes(e.weightBytes),
                         megabytes(e.kvBytes))
                    .arg(context)
                    .arg(megabytes(e.activationBytes))
                    .arg(kv.isEmpty() ? QString() : tr(" in %1").arg(kv)));
            if (ck.format() == core::CheckpointFormat::Gguf) {
                QStringList types;
                bool quantized = false;
                for (const auto &t : core::ggufSummary(core::GgufFile::open(ck.path())).types) {
                    types << tr("%1 %2").arg(t.tensors).arg(QString::fromStdString(t.type));
                    quantized = quantized || t.type.starts_with('Q');
                }
                r.estimate->setText(
                    r.estimate->text() +
                    tr(" GGUF file: %1 tensors, %2 on disk%3.")
                        .arg(types.join(", "), megabytes(int64_t(ck.weightBytes())),
                             !quantized ? tr(", converted to %1 as it loads").arg(r.dtype->currentText())
                             : keep     ? tr(", quantised weights kept in their blocks")
                                        : tr(", dequantised to %1 as it loads").arg(r.dtype->currentText())));
            }
        } catch (const core::Error &e) {
            r.estimate->setText(QString("<span style='color:#b00020'>%1</span>")
                                    .arg(QString::fromUtf8(e.what()).toHtmlEscaped()));
        }
    }
    Q_EMIT choiceChanged(role);
}

void ModelsPanel::setChoice(char role, const ModelChoice &c)
{
    Row &r = row(role);
    r.device->setCurrentText(c.device);
    r.dtype->setCurrentText(c.dtype);
    {
        const QSignalBlocker quiet(r.context);
        r.context->setMaximum(core::kMaxPositions); // the model's own bound is applied as its config is read
        r.context->setValue(c.context);
    }
    r.dequantize->setChecked(c.dequantize);
    r.kvDtype->setCurrentIndex(std::max(0, r.kvDtype->findData(c.kvDtype)));
    r.path->setText(c.path); // last: refreshes the estimate once with the new device and dtype
    refreshEstimate(role);
}

ModelChoice ModelsPanel::choice(char role) const
{
    const Row &r = row(role);
    return {r.path->text().trimmed(),
            r.device->currentText(),
            r.dtype->currentText(),
            0,
            r.context->value(),
            r.dequantize->isChecked(),
            r.kvDtype->currentData().toString()};
}

std::optional<core::ModelConfig> ModelsPanel::previewConfig(char role) const
{
    return row(role).config;
}

QString ModelsPanel::estimateText(char role) const
{
    return row(role).estimate->text();
}

void ModelsPanel::setBusy(bool busy)
{
    m_load->setEnabled(!busy);
    m_cancel->setEnabled(busy);
    setChoicesEnabled(!busy);
    if (busy)
        m_progress->setValue(0);
    setJobProgressRunning(m_progress, busy);
}

void ModelsPanel::setChoicesEnabled(bool enabled)
{
    for (const Row *r : {&m_a, &m_b}) {
        r->path->setEnabled(enabled);
        r->device->setEnabled(enabled);
        r->dtype->setEnabled(enabled);
        r->context->setEnabled(enabled);
        r->dequantize->setEnabled(enabled);
        r->kvDtype->setEnabled(enabled);
    }
}

void ModelsPanel::setEngineBusy(bool busy)
{
    m_load->setEnabled(!busy);
    m_load->setToolTip(busy ? tr("The engine is busy with another job; load when it is done.") : QString());
    setChoicesEnabled(!busy);
}

void ModelsPanel::setProgress(double fraction, const QString &stage)
{
    m_progress->setValue(int(1000 * fraction));
    m_status->setText(tr("Loading: %1").arg(stage));
}

void ModelsPanel::setCudaAvailable(bool available, const QString &why)
{
    for (QComboBox *combo : findChildren<QComboBox *>()) {
        if (!combo->objectName().startsWith("device"))
            continue;
        auto *model = qobject_cast<QStandardItemModel *>(combo->model());
        const int i = combo->findText("cuda");
        if (!model || i < 0)
            continue;
        QStandardItem *item = model->item(i);
        item->setEnabled(available);
        item->setToolTip(available ? QString() : why);
        if (!available && combo->currentIndex() == i)
            combo->setToolTip(why);
    }
}

void ModelsPanel::setLoaded(const LoadedModelInfo &a, const LoadedModelInfo &b, double ms)
{
    setBusy(false);
    m_progress->setValue(0); // the bar shows a load in progress; the line below says what is loaded
    m_loadedText = m_heldText =
        tr("A %1 and B %2 (%3 / %4)")
            .arg(QFileInfo(a.path).fileName(), QFileInfo(b.path).fileName(), a.device, a.dtype);
    m_status->setText(
        tr("Loaded in %1 ms: A on %2 (%3, %4 weights), B on %5 (%6, %7 weights).")
            .arg(ms, 0, 'f', 0)
            .arg(a.device, a.dtype, megabytes(a.deviceBytes), b.device, b.dtype, megabytes(b.deviceBytes)));
    for (const auto *m : {&a, &b})
        if (!m->tokenizerError.isEmpty())
            m_status->setText(m_status->text() +
                              QString("<br><span style='color:#b00020'>%1</span>")
                                  .arg(tr("%1 has no usable tokenizer: %2. Capture, Compare and Replay need "
                                          "one: put it beside the model and load again.")
                                           .arg(m == &a ? "A" : "B", m->tokenizerError.toHtmlEscaped())));
}

void ModelsPanel::setLoadedInUse(bool inUse, const QString &whyNot)
{
    if (m_heldText.isEmpty() || inUse == !m_loadedText.isEmpty())
        return;
    m_progress->setValue(0);
    m_loadedText = inUse ? m_heldText : QString();
    m_status->setText(inUse ? tr("Loaded and in use: %1.").arg(m_heldText.toHtmlEscaped())
                            : tr("%1 stay loaded from before, but %2: load them (Load both models) before "
                                 "Capture, Compare or Replay.")
                                  .arg(m_heldText.toHtmlEscaped(), whyNot.toHtmlEscaped()));
}

void ModelsPanel::setFailed(const QString &message)
{
    setBusy(false);
    m_progress->setValue(0);
    m_status->setText(
        QString("<span style='color:#b00020'>%1</span><br>%2")
            .arg(message.toHtmlEscaped(),
                 m_loadedText.isEmpty()
                     ? tr("None of this project's models is loaded. Check the path and device, then load "
                          "again.")
                     : tr("Still loaded and in use: %1").arg(m_loadedText.toHtmlEscaped())));
}

void ModelsPanel::setCancelled()
{
    setBusy(false);
    m_progress->setValue(0);
    m_status->setText(m_loadedText.isEmpty()
                          ? tr("Loading cancelled; none of this project's models is loaded.")
                          : tr("Loading cancelled; still loaded and in use: %1").arg(m_loadedText));
}

void ModelsPanel::setArchiveNote(const QString &html)
{
    m_archiveNote->setText(html);
    m_archiveNote->setVisible(!html.isEmpty());
}

QString ModelsPanel::archiveNote() const
{
    return m_archiveNote->text();
}

} // namespace kvwb::ui
