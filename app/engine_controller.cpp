#include "app/engine_controller.h"

#include "core/error.h"
#include "gpu/device.h"
#include "gpu/model.h"

#include <QMetaObject>

#include <chrono>

namespace kvwb::app {

namespace {

gpu::LoadOptions loadOptions(const ModelRequest &r)
{
    gpu::LoadOptions o;
    if (r.device == "cuda")
        o.device = gpu::Device::Cuda;
    else if (r.device != "cpu")
        throw core::Error(core::ErrorCode::InvalidArgument,
                          "unknown device '" + r.device.toStdString() + "'");
    if (r.dtype == "bf16")
        o.dtype = gpu::ComputeType::BF16;
    else if (r.dtype == "f16")
        o.dtype = gpu::ComputeType::F16;
    else if (r.dtype != "f32")
        throw core::Error(core::ErrorCode::InvalidArgument, "unknown dtype '" + r.dtype.toStdString() + "'");
    o.threads = r.threads;
    return o;
}

LoadedModel describe(const gpu::Model &m, const ModelRequest &r)
{
    LoadedModel l;
    l.path = r.path;
    l.config = m.config();
    l.fingerprint = QString::fromStdString(m.checkpoint().fingerprint());
    l.device = QString::fromStdString(gpu::describeDevice(m.options().device));
    l.dtype = QString::fromUtf8(gpu::computeTypeName(m.options().dtype));
    l.deviceBytes = m.deviceBytes();
    return l;
}

} // namespace

EngineWorker::EngineWorker(QObject *parent) : QObject(parent) {}
EngineWorker::~EngineWorker() = default;

const gpu::Model *EngineWorker::modelA() const
{
    return m_a.get();
}
const gpu::Model *EngineWorker::modelB() const
{
    return m_b.get();
}

void EngineWorker::loadModels(quint64 job, const ModelRequest &a, const ModelRequest &b,
                              std::shared_ptr<std::atomic_bool> cancel)
{
    const auto t0 = std::chrono::steady_clock::now();
    try {
        std::unique_ptr<gpu::Model> models[2];
        const ModelRequest *requests[2] = {&a, &b};
        for (int i = 0; i < 2; ++i) {
            const QString name = i == 0 ? "A" : "B";
            models[i] = gpu::Model::load(
                requests[i]->path.toStdString(), loadOptions(*requests[i]),
                [&](double f, const std::string &stage) {
                    Q_EMIT progress(job, 0.5 * (i + f),
                                    QString("model %1: %2").arg(name, QString::fromStdString(stage)));
                    return !cancel->load();
                });
            if (!models[i]) {
                Q_EMIT cancelled(job);
                return;
            }
        }
        auto pair = std::make_shared<LoadedPair>();
        pair->a = describe(*models[0], a);
        pair->b = describe(*models[1], b);
        pair->ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        m_a = std::move(models[0]);
        m_b = std::move(models[1]);
        Q_EMIT modelsLoaded(job, pair);
    } catch (const core::Error &e) {
        Q_EMIT failed(job,
                      QString("%1 [%2]").arg(QString::fromUtf8(e.what()), core::errorCodeName(e.code())));
    } catch (const std::exception &e) {
        Q_EMIT failed(job, QString("internal error: %1").arg(QString::fromUtf8(e.what())));
    }
}

void EngineWorker::readExperiment(quint64 job, const QString &path)
{
    try {
        auto snap = std::make_shared<ExperimentSnapshot>();
        const std::filesystem::path file = path.toStdString();
        {
            const auto reader = core::ExperimentReader::open(file);
            snap->a = reader.model('a');
            snap->b = reader.model('b');
            snap->prompts = reader.promptCount();
            snap->tokensA = reader.totalTokens('a');
            snap->tokensB = reader.totalTokens('b');
        }
        snap->path = path;
        for (const auto &name : core::listConverters(file))
            snap->converters.push_back(core::loadConverters(file, name));
        for (const auto &name : core::listTables(file))
            snap->sweeps.emplace_back(name, core::loadTable(file, name));
        for (const auto &name : core::listLedgers(file))
            snap->ledgers.emplace_back(name, core::loadLedger(file, name));
        Q_EMIT experimentRead(job, snap);
    } catch (const core::Error &e) {
        Q_EMIT failed(job,
                      QString("%1 [%2]").arg(QString::fromUtf8(e.what()), core::errorCodeName(e.code())));
    } catch (const std::exception &e) {
        Q_EMIT failed(job, QString("internal error: %1").arg(QString::fromUtf8(e.what())));
    }
}

void EngineWorker::collectReport(quint64 job, const QString &path)
{
    try {
        Q_EMIT reportCollected(job,
                               std::make_shared<const ui::ReportData>(ui::collectReport(path.toStdString())));
    } catch (const core::Error &e) {
        Q_EMIT failed(job,
                      QString("%1 [%2]").arg(QString::fromUtf8(e.what()), core::errorCodeName(e.code())));
    } catch (const std::exception &e) {
        Q_EMIT failed(job, QString("internal error: %1").arg(QString::fromUtf8(e.what())));
    }
}

EngineController::EngineController(QObject *parent) : QObject(parent)
{
    qRegisterMetaType<std::shared_ptr<const kvwb::ui::ReportData>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::app::LoadedPair>>();
    qRegisterMetaType<std::shared_ptr<const kvwb::app::ExperimentSnapshot>>();
    m_thread.setObjectName("kvwb-engine");
    m_worker = new EngineWorker;
    m_worker->moveToThread(&m_thread);
    connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
    connect(m_worker, &EngineWorker::progress, this, [this](quint64 job, double f, const QString &stage) {
        m_state = QString("loading models %1% (%2)").arg(int(100 * f)).arg(stage);
        Q_EMIT progress(job, f, stage);
        Q_EMIT stateChanged(m_state);
    });
    connect(m_worker, &EngineWorker::modelsLoaded, this,
            [this](quint64 job, std::shared_ptr<const LoadedPair> pair) {
                finish("idle");
                Q_EMIT modelsLoaded(job, pair);
            });
    connect(m_worker, &EngineWorker::experimentRead, this,
            [this](quint64 job, std::shared_ptr<const ExperimentSnapshot> snap) {
                finish("idle");
                Q_EMIT experimentRead(job, snap);
            });
    connect(m_worker, &EngineWorker::reportCollected, this,
            [this](quint64 job, std::shared_ptr<const ui::ReportData> data) {
                finish("idle");
                Q_EMIT reportCollected(job, data);
            });
    connect(m_worker, &EngineWorker::failed, this, [this](quint64 job, const QString &message) {
        finish("idle");
        Q_EMIT failed(job, message);
    });
    connect(m_worker, &EngineWorker::cancelled, this, [this](quint64 job) {
        finish("idle");
        Q_EMIT cancelled(job);
    });
    m_thread.start();
}

EngineController::~EngineController()
{
    if (m_cancel)
        m_cancel->store(true);
    m_thread.quit();
    m_thread.wait();
}

quint64 EngineController::loadModels(const ModelRequest &a, const ModelRequest &b)
{
    if (m_busy) {
        Q_EMIT failed(0, "the engine is busy: cancel the running job first");
        return 0;
    }
    const quint64 job = m_nextJob++;
    m_cancel = std::make_shared<std::atomic_bool>(false);
    m_busy = true;
    m_state = "loading models";
    Q_EMIT stateChanged(m_state);
    auto cancel = m_cancel;
    EngineWorker *worker = m_worker;
    QMetaObject::invokeMethod(
        worker, [worker, job, a, b, cancel] { worker->loadModels(job, a, b, cancel); }, Qt::QueuedConnection);
    return job;
}

template <typename F> quint64 EngineController::start(const QString &state, F &&job)
{
    if (m_busy) {
        Q_EMIT failed(0, "the engine is busy: cancel the running job first");
        return 0;
    }
    const quint64 id = m_nextJob++;
    m_busy = true;
    m_state = state;
    Q_EMIT stateChanged(m_state);
    EngineWorker *worker = m_worker;
    QMetaObject::invokeMethod(
        worker, [worker, id, job = std::forward<F>(job)] { job(worker, id); }, Qt::QueuedConnection);
    return id;
}

quint64 EngineController::readExperiment(const QString &path)
{
    return start("reading " + path, [path](EngineWorker *w, quint64 id) { w->readExperiment(id, path); });
}

quint64 EngineController::collectReport(const QString &path)
{
    return start("collecting the report of " + path,
                 [path](EngineWorker *w, quint64 id) { w->collectReport(id, path); });
}

void EngineController::cancel()
{
    if (m_cancel)
        m_cancel->store(true);
}

void EngineController::finish(const QString &state)
{
    m_busy = false;
    m_state = state;
    Q_EMIT stateChanged(m_state);
}

} // namespace kvwb::app
