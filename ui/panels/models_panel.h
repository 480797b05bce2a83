// The Models panel: choose model A (source) and B (target) - an HF directory or a llama2.c .bin -,
// their device and dtype, see the memory each will need before loading, then load both with
// progress and cancel. The panel only asks (loadRequested / cancelRequested); the engine (app/)
// loads and reports back through setProgress / setLoaded / setFailed.
//
// GUI-thread only. Reads config.json (and maps the weights' headers) to estimate memory; loads
// nothing itself.
#pragma once

#include "core/model/model_config.h"

#include <QString>
#include <QWidget>

#include <cstdint>
#include <optional>

class QCheckBox;
class QComboBox;
class QSpinBox;
class QGridLayout;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;

namespace kvwb::ui {

// What the user chose for one model.
struct ModelChoice
{
    QString path;            // HF directory, .gguf file or llama2.c .bin
    QString device = "cpu";  // cpu | cuda
    QString dtype = "f32";   // f32 | bf16 | f16
    int threads = 0;         // 0 = all cores
    int context = 0;         // positions served (gpu::LoadOptions::context); 0 = the model's own
    bool dequantize = false; // GGUF quantised weights dequantised at load (gpu::LoadOptions::dequantize)
    QString kvDtype = {};    // the KV cache's f32 | bf16 | f16; empty = the compute dtype
};

// What the engine loaded.
struct LoadedModelInfo
{
    QString path;
    core::ModelConfig config;
    QString fingerprint;
    QString device; // e.g. "cpu (2 threads of 2 cores)"
    QString dtype;
    int64_t deviceBytes = 0; // weights on the device
    QString tokenizer;       // e.g. "sentencepiece, 1024 pieces (tokenizer.model)"; empty when none
    QString tokenizerError;  // why it has no usable tokenizer (capture, compare, replay need one)
};

class ModelsPanel : public QWidget
{
    Q_OBJECT

public:
    explicit ModelsPanel(QWidget *parent = nullptr);

    void setChoice(char role, const ModelChoice &choice); // role 'a' or 'b'
    // What the linked LibTorch offers: without CUDA the cuda entries are disabled, `why` in their
    // tooltip.
    void setCudaAvailable(bool available, const QString &why);
    ModelChoice choice(char role) const;
    // The config read from the chosen path, when it could be read.
    std::optional<core::ModelConfig> previewConfig(char role) const;
    // The estimate line shown for a model ("weights 3.7 MB + KV 0.8 MB at 512 tokens = ...").
    QString estimateText(char role) const;
    // A note above the model rows (rich text; "" hides it): the models an opened run archive names
    // that are not where it says on this machine. Cleared when a model path is edited to one that
    // exists.
    void setArchiveNote(const QString &html);
    QString archiveNote() const;

public Q_SLOTS:
    // Another engine job runs (capture, fit, ...): loading is disabled until it ends.
    void setEngineBusy(bool busy);
    void setProgress(double fraction, const QString &stage);
    void setLoaded(const kvwb::ui::LoadedModelInfo &a, const kvwb::ui::LoadedModelInfo &b, double ms);
    void setFailed(const QString &message);
    void setCancelled();
    // Whether the loaded pair is the one now chosen (another project opened): when not, the status
    // says so ("... stay loaded from before, but <whyNot>") and later messages no longer call it in use.
    void setLoadedInUse(bool inUse, const QString &whyNot = {});

Q_SIGNALS:
    void loadRequested(const kvwb::ui::ModelChoice &a, const kvwb::ui::ModelChoice &b);
    void cancelRequested();
    void choiceChanged(char role); // path, device or dtype edited (preview configs changed)

private:
    struct Row
    {
        QLineEdit *path = nullptr;
        QComboBox *device = nullptr;
        QComboBox *dtype = nullptr;
        QSpinBox *context = nullptr;
        QCheckBox *dequantize = nullptr;
        QComboBox *kvDtype = nullptr; // item data: "" (the compute dtype), f32, bf16, f16
        QLabel *estimate = nullptr;
        std::optional<core::ModelConfig> config;
    };
    Row &row(char role) { return role == 'a' ? m_a : m_b; }
    const Row &row(char role) const { return role == 'a' ? m_a : m_b; }
    void buildRow(char role, QGridLayout *grid, int line);
    void refreshEstimate(char role);
    void setBusy(bool busy);
    void setChoicesEnabled(bool enabled); // both rows' controls

    Row m_a, m_b;
    QPushButton *m_load = nullptr;
    QPushButton *m_cancel = nullptr;
    QProgressBar *m_progress = nullptr;
    QString m_heldText;
    QLabel *m_archiveNote = nullptr; // what the last successful load loaded (the engine holds it)
    QString
        m_loadedText; // the same while it is in use (the project's pair), for the failure and cancel lines
    QLabel *m_status = nullptr;
};

} // namespace kvwb::ui
