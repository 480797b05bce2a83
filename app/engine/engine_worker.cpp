// The engine thread's side (EngineWorker): each job's set-up, run and result, on the thread that owns
// the models. The GUI thread's side is engine_controller.cpp.
#include "app/engine/engine_controller.h"
#include "core/store/ledger_store.h"

#include "core/cache/semantic_sweep.h"
#include "core/cache/shared_store.h"
#include "core/ledger/prices.h"

#include "app/jobs/capture_job.h"
#include "app/jobs/compare_job.h"
#include "app/jobs/fit_job.h"
#include "app/jobs/job_inputs.h"
#include "app/jobs/knowledge_eval.h"
#include "app/jobs/knowledge_job.h"
#include "app/jobs/replay_job.h"
#include "core/cache/semantic_tier.h"
#include "core/metrics/bootstrap.h"
#include "core/metrics/text_metrics.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_upgrade.h"
#include "core/store/knowledge_store.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/util/text_util.h"
#include "core/workload/wordnet.h"
#include "core/workload/workload.h"
#include "gpu/align/alignment.h"
#include "gpu/model/cross_encoder.h"
#include "gpu/model/device.h"
#include "gpu/model/encoder.h"
#include "gpu/model/model.h"
#include "gpu/replay/replay.h"
#include "gpu/train/embedder_trainer.h"
#include "gpu/transfer/compare.h"
#include "gpu/transfer/transfer.h"

#include <QMetaObject>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <thread>

namespace kvwb::app {

namespace fs = std::filesystem;
using core::Clock;
using core::msSince;

namespace {

gpu::LoadOptions loadOptions(const ModelRequest &r)
{
    gpu::LoadOptions o;
    const auto device = gpu::parseDevice(r.device.toStdString());
    if (!device)
        throw core::Error(core::ErrorCode::InvalidArgument,
                          "unknown device '" + r.device.toStdString() + "': expected cpu or cuda");
    const auto dtype = gpu::parseFloatType(r.dtype.toStdString());
    if (!dtype)
        throw core::Error(core::ErrorCode::InvalidArgument,
                          "unknown dtype '" + r.dtype.toStdString() + "': expected f32, bf16 or f16");
    o.device = *device;
    o.dtype = *dtype;
    o.threads = r.threads;
    o.context = r.context;
    o.dequantize = r.dequantize;
    if (!r.kvDtype.isEmpty()) {
        const auto kv = gpu::parseFloatType(r.kvDtype.toStdString());
        if (!kv)
            throw core::Error(core::ErrorCode::InvalidArgument, "unknown KV dtype '" +
                                                                    r.kvDtype.toStdString() +
                                                                    "': expected f32, bf16 or f16");
        o.kvDtype = *kv;
    }
    return o;
}

LoadedModel describe(const gpu::Model &m, const ModelRequest &r)
{
    LoadedModel l;
    l.path = r.path;
    l.config = m.config();
    l.fingerprint = QString::fromStdString(m.checkpoint().fingerprint());
    l.device = QString::fromStdString(gpu::describeDevice(m.options().device));
    l.dtype = QString::fromUtf8(gpu::floatTypeName(m.options().dtype));
    l.deviceBytes = m.deviceBytes();
    return l;
}

QStringList qStrings(const std::vector<std::string> &v)
{
    QStringList out;
    for (const auto &s : v)
        out << QString::fromStdString(s);
    return out;
}

double columnMean(const core::MetricTable &t, const char *column)
{
    const int c = t.column(column);
    if (c < 0 || t.rows.empty())
        return std::nan("");
    double sum = 0;
    int n = 0;
    for (const auto &row : t.rows)
        if (std::isfinite(row[c])) {
            sum += row[c];
            ++n;
        }
    return n ? sum / n : std::nan("");
}

} // namespace

EngineWorker::EngineWorker(QObject *parent) : EngineSignals(parent) {}
EngineWorker::~EngineWorker() = default;

const gpu::Model *EngineWorker::modelA() const
{
    return m_a.get();
}
const gpu::Model *EngineWorker::modelB() const
{
    return m_b.get();
}

template <typename F> void EngineWorker::guarded(quint64 job, F &&body)
{
    try {
        body();
    } catch (const core::Error &e) {
        Q_EMIT failed(job,
                      QString("%1 [%2]").arg(QString::fromUtf8(e.what()), core::errorCodeName(e.code())));
    } catch (const std::exception &e) {
        Q_EMIT failed(job, QString("internal error: %1").arg(QString::fromUtf8(e.what())));
    }
}

void EngineWorker::requireModels(const char *what) const
{
    if (!m_a || !m_b)
        throw core::Error(core::ErrorCode::InvalidArgument,
                          std::string(what) + " needs both models: load A and B in the Models panel first");
    if (!m_tokA || !m_tokB)
        throw core::Error(core::ErrorCode::Tokenizer,
                          std::string(what) + " needs both models' tokenizers: " +
                              (m_tokA   ? m_tokErrorB
                               : m_tokB ? m_tokErrorA
                                        : m_tokErrorA + "; " + m_tokErrorB) +
                              " (put the model's tokenizer file beside it and load again)");
}

void EngineWorker::requireExperimentModels(const QString &experiment) const
{
    const auto reader = core::ExperimentReader::open(experiment.toStdString());
    for (const core::ModelRole role : core::kRoles) {
        const gpu::Model &m = role == core::ModelRole::A ? *m_a : *m_b;
        const auto &info = reader.model(role);
        if (m.checkpoint().fingerprint() != info.weightsSha256)
            throw core::Error(core::ErrorCode::Config,
                              fmt::format("{}: the loaded model {} ({}) is not the model this experiment was "
                                          "captured with ({}): load {} as model {}",
                                          experiment.toStdString(), core::roleLabel(role),
                                          m.checkpoint().path().string(), info.weightsSha256.substr(0, 12),
                                          info.sourcePath, core::roleLabel(role)));
    }
}

const gpu::Converter &EngineWorker::converter(const QString &experiment, const QString &name)
{
    const std::string key = experiment.toStdString() + "\n" + name.toStdString() + "\n" +
                            m_a->checkpoint().fingerprint() + "\n" + m_b->checkpoint().fingerprint();
    if (!m_converter || key != m_converterKey) {
        m_converter.reset();
        m_converter = std::make_unique<gpu::Converter>(gpu::Converter::create(
            core::loadConverters(experiment.toStdString(), name.toStdString()), *m_a, *m_b));
        m_converterKey = key;
    }
    return *m_converter;
}

void EngineWorker::loadModels(quint64 job, const ModelRequest &a, const ModelRequest &b,
                              std::shared_ptr<std::atomic_bool> cancel)
{
    const auto t0 = Clock::now();
    guarded(job, [&] {
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
        // a model without a usable tokenizer still loads (its card, memory); the jobs that need
        // text say why they cannot run
        std::unique_ptr<core::Tokenizer> toks[2];
        std::string tokErrors[2];
        for (int i = 0; i < 2; ++i)
            try {
                toks[i] = jobs::loadModelTokenizer(*models[i]);
            } catch (const core::Error &e) {
                tokErrors[i] = e.what();
            }
        auto pair = std::make_shared<LoadedPair>();
        pair->a = describe(*models[0], a);
        pair->b = describe(*models[1], b);
        for (int i = 0; i < 2; ++i) {
            LoadedModel &info = i == 0 ? pair->a : pair->b;
            info.tokenizerError = QString::fromStdString(tokErrors[i]);
            if (toks[i])
                info.tokenizer =
                    QString("%1, %2 pieces (%3)")
                        .arg(QString::fromStdString(toks[i]->kind()))
                        .arg(toks[i]->vocabSize())
                        .arg(QString::fromStdString(
                            models[i]->checkpoint().tokenizerPath().value_or("").filename().string()));
        }
        pair->ms = msSince(t0);
        m_converter.reset();
        m_compareWarm = false;
        m_a = std::move(models[0]);
        m_b = std::move(models[1]);
        m_tokA = std::move(toks[0]);
        m_tokB = std::move(toks[1]);
        m_tokErrorA = tokErrors[0];
        m_tokErrorB = tokErrors[1];
        Q_EMIT modelsLoaded(job, pair);
    });
}

void EngineWorker::readExperiment(quint64 job, const QString &path, bool upgradeFirst)
{
    guarded(job, [&] {
        auto snap = std::make_shared<ExperimentSnapshot>();
        const fs::path file = path.toStdString();
        if (upgradeFirst) {
            Q_EMIT progress(job, 0, QStringLiteral("upgrading"));
            core::upgradeExperiment(file);
        }
        {
            const auto reader = core::ExperimentReader::open(file);
            snap->a = reader.model(core::ModelRole::A);
            snap->b = reader.model(core::ModelRole::B);
            snap->prompts = reader.promptCount();
            snap->storage = reader.storage();
            snap->tokensA = reader.totalTokens(core::ModelRole::A);
            snap->tokensB = reader.totalTokens(core::ModelRole::B);
        }
        snap->path = path;
        for (const auto &name : core::listConverters(file))
            snap->converters.push_back(core::loadConverters(file, name, core::ConverterParts::MetricsOnly));
        for (const auto &name : core::listTables(file))
            snap->sweeps.emplace_back(name, core::loadTable(file, name));
        for (const auto &name : core::listLedgers(file))
            snap->ledgers.emplace_back(name, core::loadLedger(file, name));
        for (const auto &name : core::listComparisons(file))
            snap->comparisons.emplace_back(name, core::loadComparisons(file, name));
        Q_EMIT experimentRead(job, snap);
    });
}

void EngineWorker::collectReport(quint64 job, const QString &path)
{
    guarded(job, [&] {
        Q_EMIT reportCollected(job,
                               std::make_shared<const ui::ReportData>(ui::collectReport(path.toStdString())));
    });
}

void EngineWorker::capture(quint64 job, const ui::CaptureRequest &request,
                           std::shared_ptr<std::atomic_bool> cancel)
{
    guarded(job, [&] {
        requireModels("a capture");
        if (request.promptsPath.isEmpty() || request.outPath.isEmpty())
            throw core::Error(core::ErrorCode::InvalidArgument,
                              "a capture needs a prompt set and an output experiment file");
        const auto t0 = Clock::now();
        gpu::CaptureOptions co;
        co.file.storage = request.storage;
        co.file.compress = request.compress;
        co.file.keyForm = request.postRope ? core::KeyForm::PostRope : core::KeyForm::PreRope;
        co.maxTokens = request.maxTokens;
        std::vector<std::string> warnings;
        std::vector<gpu::CapturePrompt> prompts;
        for (auto &t : jobs::readPromptFile(request.promptsPath.toStdString(), {}, warnings))
            prompts.push_back({std::move(t.text), std::move(t.label), {}, {}});
        if (request.limit > 0 && size_t(request.limit) < prompts.size())
            prompts.resize(request.limit);
        const fs::path out = request.outPath.toStdString();
        const auto fc =
            jobs::captureIntoFile(out, *m_a, *m_tokA, *m_b, *m_tokB, prompts, co,
                                  request.promptsPath.toStdString(), [&](int done, int total) {
                                      Q_EMIT progress(job, total ? double(done) / total : 1.0,
                                                      QString("%1 / %2 prompts").arg(done).arg(total));
                                      return !cancel->load();
                                  });
        warnings.insert(warnings.end(), fc.warnings.begin(), fc.warnings.end());
        auto s = std::make_shared<ui::CaptureSummary>();
        s->outPath = request.outPath;
        s->appended = fc.appended;
        s->cancelled = fc.result.cancelled;
        s->promptsWritten = fc.result.promptsWritten;
        s->tokensA = fc.result.tokensA;
        s->tokensB = fc.result.tokensB;
        s->kvBytes = fc.result.timings.kvBytes;
        s->prefillMsA = fc.result.timings.prefillMsA;
        s->prefillMsB = fc.result.timings.prefillMsB;
        s->writeMs = fc.result.timings.writeMs;
        s->storage = QString::fromUtf8(core::floatTypeName(fc.storage.storage));
        s->keyForm = QString::fromUtf8(core::keyFormName(fc.storage.keyForm));
        {
            const auto reader = core::ExperimentReader::open(out);
            s->promptsInFile = reader.promptCount();
            s->layersA = int(reader.model(core::ModelRole::A).capturedLayers.size());
            s->layersB = int(reader.model(core::ModelRole::B).capturedLayers.size());
        }
        s->fileBytes = int64_t(fs::file_size(out));
        s->warnings = qStrings(warnings);
        s->wallMs = msSince(t0);
        Q_EMIT captured(job, s);
    });
}

const gpu::Model *EngineWorker::fileModelB(const core::ExperimentReader &file) const
{
    return m_b && m_b->checkpoint().fingerprint() == file.model(core::ModelRole::B).weightsSha256 ? m_b.get()
                                                                                                  : nullptr;
}

void EngineWorker::sweepConverters(quint64 job, const ui::ConverterSweepRequest &request,
                                   std::shared_ptr<std::atomic_bool> cancel)
{
    guarded(job, [&] {
        gpu::SweepOptions o;
        o.selection = request.selection;
        o.ks = request.ks;
        o.lambdas = request.lambdas;
        o.trainTokens = request.tokens;
        o.perHead = request.perHead;
        o.progress = [&](double f, const std::string &stage) {
            Q_EMIT progress(job, f, QString::fromStdString(stage));
            return !cancel->load();
        };
        // attention-output cosine needs model B's queries: the loaded B when it is the file's
        const auto sweep = jobs::runSweep(
            request.experimentPath.toStdString(), request.name.toStdString(), /*replace=*/false, o,
            [&](const core::ExperimentReader &file, std::vector<std::string> &warnings) {
                const gpu::Model *b = fileModelB(file);
                if (!b)
                    warnings.push_back(
                        "attention-output cosine not computed: load the experiment's model B to get it");
                return b;
            });
        auto s = std::make_shared<ui::ConverterSweepSummary>();
        s->experimentPath = request.experimentPath;
        s->name = request.name;
        s->rows = int(sweep.result.table.rows.size());
        s->cancelled = sweep.result.cancelled;
        s->warnings = qStrings(sweep.warnings);
        Q_EMIT convertersSwept(job, s);
    });
}

void EngineWorker::fit(quint64 job, const core::FitSettings &request,
                       std::shared_ptr<std::atomic_bool> cancel)
{
    guarded(job, [&] {
        core::FitSettings settings = request;
        settings.dryRun = false; // the window stores what it fits
        // settings.replace: the Alignment step asked the user before a fit over an existing name
        double last = 0;
        const auto progressOf = [&](double f, const std::string &stage) {
            last = f;
            Q_EMIT progress(job, f, QString::fromStdString(stage));
            return !cancel->load();
        };
        auto s = std::make_shared<ui::FitSummary>();
        s->experimentPath = QString::fromStdString(request.experiment);
        s->name = QString::fromStdString(request.name);
        // attention-output cosine needs model B's queries: the loaded B when it is the file's
        const auto fit = jobs::runFit(
            settings,
            [&](const core::ExperimentReader &file, std::vector<std::string> &warnings) {
                if (const gpu::Model *b = fileModelB(file))
                    return b;
                if (settings.family == core::ConverterFamily::Auto)
                    throw core::Error(core::ErrorCode::InvalidArgument,
                                      "family auto chooses the converter by model B's validation KL: load "
                                      "the experiment's model B first, or choose a family");
                if (settings.objective == core::FitObjective::Kl)
                    throw core::Error(
                        core::ErrorCode::InvalidArgument,
                        "the KL objective trains the maps through model B: load the experiment's "
                        "model B first (dequantised, if it is a quantised GGUF file), or fit "
                        "with the KV objective");
                if (settings.family == core::ConverterFamily::AttnRidge)
                    throw core::Error(
                        core::ErrorCode::InvalidArgument,
                        "attention-aligned ridge weighs the maps by model B's queries and output "
                        "projection: load the experiment's model B first, or choose a family");
                warnings.push_back("attention-output cosine not computed: load the "
                                   "experiment's model B to get it");
                return static_cast<const gpu::Model *>(nullptr);
            },
            progressOf,
            [&](const gpu::AutoCandidate &c) { // in the status line as soon as it is scored
                Q_EMIT progress(job, last, QString::fromStdString(gpu::autoCandidateLine(c)));
            });
        const auto &r = fit.result;
        s->fitMs = fit.fitMs;
        s->warnings = qStrings(fit.warnings);
        s->cancelled = r.cancelled;
        if (!r.cancelled) {
            s->meanR2K = columnMean(r.record.layerMetrics, "r2_k");
            s->meanR2V = columnMean(r.record.layerMetrics, "r2_v");
            s->meanAttnCos = columnMean(r.record.layerMetrics, "attn_cos");
            s->family = QString::fromUtf8(core::converterFamilyName(r.record.family));
            for (const auto &c : r.candidates)
                s->autoCandidates << QString::fromStdString(gpu::autoCandidateLine(c));
            s->klObjective = QString::fromStdString(r.klObjective);
            if (m_converterKey.rfind(request.experiment + "\n" + request.name + "\n", 0) == 0)
                m_converter.reset(); // refitted: the cached one is stale
        }
        Q_EMIT fitted(job, s);
    });
}

const gpu::Converter &EngineWorker::compareConverter(const core::CompareSettings &request)
{
    requireModels("a comparison");
    if (request.experiment.empty() || request.converter.empty())
        throw core::Error(core::ErrorCode::InvalidArgument,
                          "a comparison needs an experiment file with a converter: fit one first");
    const QString experiment = QString::fromStdString(request.experiment);
    requireExperimentModels(experiment);
    return converter(experiment, QString::fromStdString(request.converter));
}

void EngineWorker::compare(quint64 job, const core::CompareSettings &request,
                           std::shared_ptr<std::atomic_bool> cancel)
{
    guarded(job, [&] {
        Q_EMIT progress(job, 0.1, "preparing the converter");
        const auto &conv = compareConverter(request);
        gpu::CompareOptions co = jobs::compareSetOptions(request).compare;
        const auto ids = gpu::comparablePair(request.prompt, *m_a, *m_tokA, *m_b, *m_tokB, co.maxTokens,
                                             request.alignPolicy);
        co.warmUp = !m_compareWarm; // the first comparison after a load would time allocations
        co.cancel = cancel.get();
        Q_EMIT progress(job, 0.3, "generating A, B from scratch and B from the converted cache");
        const jobs::ComparePair pair{*m_a, *m_tokA, *m_b, *m_tokB, conv, request.converter};
        auto outcome = jobs::compareOne(pair, request.prompt, ids, co);
        if (outcome.cancelled) {
            Q_EMIT cancelled(job); // nothing stored
            return;
        }
        m_compareWarm = true;
        auto sample = std::make_shared<core::ComparisonSample>(std::move(outcome.sample));
        if (!request.saveSamples.empty()) {
            Q_EMIT progress(job, 0.95, "storing the sample");
            jobs::storeComparisons(request.experiment, request.saveSamples, {*sample}, true);
        }
        Q_EMIT compared(job, sample);
    });
}

void EngineWorker::compareSet(quint64 job, const core::CompareSettings &request,
                              std::shared_ptr<std::atomic_bool> cancel)
{
    guarded(job, [&] {
        Q_EMIT progress(job, 0.02, "preparing the converters");
        const auto &conv = compareConverter(request);
        const auto record = core::loadConverters(request.experiment, request.converter);
        auto out = std::make_shared<ui::CompareSetSummary>();
        out->converter = QString::fromStdString(request.converter);
        std::vector<std::string> warnings;
        std::vector<std::string> texts, answers;
        if (request.promptsFile.empty()) {
            out->source = "held-out prompts";
            const auto file = core::ExperimentReader::open(request.experiment);
            for (int i : record.testPrompts)
                texts.push_back(file.prompt(i).text);
        } else {
            out->source = QString::fromStdString(request.promptsFile);
            for (auto &t : jobs::readPromptFile(request.promptsFile, {}, warnings)) {
                texts.push_back(std::move(t.text));
                answers.push_back(std::move(t.answer));
            }
        }
        if (request.limit > 0 && texts.size() > size_t(request.limit))
            texts.resize(size_t(request.limit));
        if (texts.empty())
            throw core::Error(core::ErrorCode::InvalidArgument,
                              fmt::format("'{}' has no held-out prompts to compare", record.name));
        out->requested = int(texts.size());
        jobs::CompareSetOptions o = jobs::compareSetOptions(request);
        o.compare.cancel = cancel.get();
        if (std::any_of(answers.begin(), answers.end(), [](const std::string &a) { return !a.empty(); }))
            o.answers = std::move(answers);
        if (!request.versus.empty()) { // side by side: a second converter on the same prompts
            o.versus = core::loadConverters(request.experiment, request.versus);
            if (request.promptsFile.empty())
                if (std::string w = jobs::versusOverlapWarning(record, *o.versus, texts.size()); !w.empty())
                    warnings.push_back(std::move(w));
        }
        const jobs::ComparePair pair{*m_a, *m_tokA, *m_b, *m_tokB, conv, record.name};
        const auto run =
            jobs::compareSet(pair, record, texts, o, m_compareWarm, [&](size_t i, size_t n, auto *) {
                Q_EMIT progress(job, 0.05 + 0.9 * double(i) / double(n),
                                QString("prompt %1 of %2").arg(i + 1).arg(n));
                return !cancel->load();
            });
        warnings.insert(warnings.end(), run.warnings.begin(), run.warnings.end());
        out->cancelled = run.cancelled;
        if (run.prompts.empty()) {
            if (out->cancelled) {
                Q_EMIT cancelled(job);
                return;
            }
            throw core::Error(core::ErrorCode::InvalidArgument,
                              "no prompt could be compared" +
                                  (warnings.empty() ? std::string() : ": " + warnings.front()));
        }
        out->set = jobs::summarizeCompareSet(run);
        out->warnings = qStrings(warnings);
        Q_EMIT comparedSet(job, out);
    });
}

void EngineWorker::replay(quint64 job, const core::ReplaySettings &request,
                          std::shared_ptr<std::atomic_bool> cancel, std::shared_ptr<std::atomic_bool> pause,
                          int batchMs)
{
    guarded(job, [&] {
        requireModels("a replay");
        if (request.uses(core::TierKind::Cross) && (request.experiment.empty() || request.converter.empty()))
            throw core::Error(core::ErrorCode::InvalidArgument,
                              "the cross tier needs a converter: fit one and press 'Use this converter'");
        if (request.uses(core::TierKind::Knowledge) && request.knowledgeGraphs.empty())
            throw core::Error(core::ErrorCode::InvalidArgument,
                              "the knowledge tier needs a graph: open or build one in the Knowledge step");
        auto read = jobs::readReplayRequests(request.workload, request.limit);
        const auto prepared = jobs::prepareReplay(
            request, std::move(read.requests),
            {m_a.get(), m_b.get(), m_tokA.get(), m_tokB.get(),
             [this](const std::string &experiment, const std::string &name) -> const gpu::Converter & {
                 return converter(QString::fromStdString(experiment), QString::fromStdString(name));
             }});
        auto batch = std::make_shared<RowBatch>();
        auto lastFlush = Clock::now();
        int lastDone = 0, lastTotal = int(prepared.requests.size());
        auto flush = [&] {
            if (!batch->empty())
                Q_EMIT replayRows(job, std::shared_ptr<const RowBatch>(std::move(batch)));
            batch = std::make_shared<RowBatch>();
            Q_EMIT replayProgress(job, lastDone, lastTotal);
            Q_EMIT progress(job, lastTotal ? double(lastDone) / lastTotal : 1.0,
                            QString("%1 / %2 requests").arg(lastDone).arg(lastTotal));
            lastFlush = Clock::now();
        };
        const auto r = gpu::replayWorkload(
            prepared.requests, prepared.models, prepared.options,
            [&](const core::LedgerRow &row, int done, int total) {
                batch->push_back(row);
                lastDone = done;
                lastTotal = total;
                if (msSince(lastFlush) >= batchMs)
                    flush();
                if (pause->load() && !cancel->load()) {
                    flush();
                    Q_EMIT progress(job, double(done) / total,
                                    QString("paused at %1 / %2 requests").arg(done).arg(total));
                    while (pause->load() && !cancel->load())
                        std::this_thread::sleep_for(std::chrono::milliseconds(20));
                }
                return !cancel->load();
            });
        flush();
        jobs::finishReplay(prepared, r);
        auto out = std::make_shared<ReplayOutcome>();
        out->summary = r.summary;
        out->requests = int(r.rows.size());
        out->total = int(prepared.requests.size());
        out->cancelled = r.cancelled;
        std::vector<std::string> warnings = read.warnings.messages();
        warnings.insert(warnings.end(), prepared.warnings.begin(), prepared.warnings.end());
        warnings.insert(warnings.end(), r.warnings.begin(), r.warnings.end());
        if (!request.ledgerName.empty() && !r.rows.empty())
            out->storedLedger = QString::fromStdString(request.ledgerName);
        out->warnings = qStrings(warnings);
        Q_EMIT replayFinished(job, out);
    });
}

void EngineWorker::openKnowledge(quint64 job, const ui::KnowledgeOpenRequest &request,
                                 std::shared_ptr<std::atomic_bool> cancel)
{
    guarded(job, [&] {
        const std::string path = request.graphPath.toStdString();
        if (path.empty())
            throw core::Error(core::ErrorCode::InvalidArgument, "no knowledge graph file named");
        if (request.build) {
            if (!m_b)
                throw core::Error(core::ErrorCode::InvalidArgument,
                                  "building a knowledge graph needs model B loaded");
            core::checkWritableOutput(path, "the knowledge graph file");
            const int64_t now = core::unixMsNow();
            core::KnowledgeFile file;
            file.graph = core::graphFromWordNet(core::WordNet::load(core::WordNet::kDefaultDir),
                                                size_t(std::max(request.concepts, 1)), now);
            file.description =
                fmt::format("wordnet-3.0: the {} most popular noun concepts", request.concepts);
            jobs::computeKnowledgeModules(
                file, *m_b, *m_tokB, request.system.toStdString(), now, [&](size_t done, size_t total) {
                    Q_EMIT progress(job, total ? double(done) / double(total) : 1.0,
                                    QString("%1 / %2 modules").arg(done).arg(total));
                    return !cancel->load();
                });
            if (!file.modules) {
                Q_EMIT cancelled(job);
                return;
            }
            core::saveKnowledge(path, file);
        }
        const auto file = core::loadKnowledge(path, false);
        auto view = std::make_shared<ui::KnowledgeView>();
        view->path = request.graphPath;
        view->description = QString::fromStdString(file.description);
        view->built = request.build;
        view->graph = file.graph;
        const std::string current = m_b ? m_b->checkpoint().fingerprint()
                                        : (file.modules ? file.modules->modelFingerprint : std::string());
        const int64_t now = core::unixMsNow();
        for (const auto &n : file.graph.nodes()) {
            const auto *m = file.modules ? file.modules->find(n.id) : nullptr;
            view->moduleTokens.push_back(m ? int(m->ids.size()) : 0);
            view->freshness.push_back(QString::fromUtf8(core::freshnessName(
                core::moduleFreshness(m != nullptr, m ? m->builtMs : 0,
                                      file.modules ? file.modules->modelFingerprint : "", current, now, 0))));
        }
        Q_EMIT knowledgeOpened(job, view);
    });
}

void EngineWorker::traceKnowledge(quint64 job, const ui::KnowledgeTraceRequest &request)
{
    guarded(job, [&] {
        const auto file = core::loadKnowledge(request.graphPath.toStdString(), false);
        std::optional<core::UserProfile> profile;
        if (!request.profilesPath.isEmpty() && !request.user.isEmpty())
            for (const auto &p : core::readProfiles(request.profilesPath.toStdString()))
                if (p.user == request.user.toStdString())
                    profile = p;
        core::LexicalEmbedder embedder;
        const std::string current = m_b ? m_b->checkpoint().fingerprint()
                                        : (file.modules ? file.modules->modelFingerprint : std::string());
        const auto t = jobs::traceKnowledge(file, embedder, request.question.toStdString(), 3, 0.3, current,
                                            core::unixMsNow(), 0, profile);
        auto out = std::make_shared<ui::KnowledgeTraceResult>();
        out->question = request.question;
        for (const auto &c : t.candidates)
            out->candidates.push_back({QString::fromStdString(c.node), QString::fromStdString(c.name),
                                       QString::fromStdString(c.matched), QString::fromStdString(c.reason),
                                       c.similarity, c.accepted});
        out->chosen = QString::fromStdString(t.chosen);
        out->freshness = QString::fromStdString(t.freshness);
        out->moduleTokens = t.moduleTokens;
        out->profileLine = QString::fromStdString(t.profileLine);
        out->recallMs = t.recallMs;
        out->verifyMs = t.verifyMs;
        Q_EMIT knowledgeTraced(job, out);
    });
}

void EngineWorker::sweepSemantic(quint64 job, const ui::SemanticSweepRequest &request)
{
    guarded(job, [&] {
        const auto read = jobs::readReplayRequests(request.workloadPath.toStdString(), request.limit);
        std::vector<core::LabelledText> texts;
        std::vector<std::string> documents;
        for (const auto &r : read.requests) {
            texts.push_back({r.tenant, r.question.empty() ? r.prompt : r.question, r.intent});
            documents.push_back(texts.back().text);
        }
        // every embedder the Replay step offers, as the replay builds it
        const std::string kind = request.embedder.toStdString();
        std::unique_ptr<core::Embedder> embedder;
        if (m_a) {
            embedder = jobs::makeEmbedder(kind, request.embedderLayer, *m_a, *m_tokA, documents,
                                          request.embedderPrefix.toStdString());
        } else if (kind == "model") {
            throw core::Error(core::ErrorCode::InvalidArgument, "the model embedder needs model A loaded");
        } else if (kind == "lexical" || kind == "lexical-idf") {
            auto lexical = std::make_unique<core::LexicalEmbedder>();
            if (kind == "lexical-idf")
                lexical->fitIdf(documents);
            embedder = std::move(lexical);
        } else { // an embedding model's path: on the CPU while no pair is loaded
            embedder = gpu::loadEmbedderModel(kind, gpu::LoadOptions{}, request.embedderPrefix.toStdString());
        }
        const auto s = core::sweepSemantic(texts, *embedder, request.target);
        auto out = std::make_shared<ui::SemanticSweepResult>();
        out->workloadPath = request.workloadPath;
        out->embedder = QString::fromStdString(embedder->name());
        out->scored = s.scored;
        out->shouldHit = s.shouldHit;
        out->target = request.target;
        if (s.atTarget)
            out->suggested = s.atTarget->threshold;
        out->points = s.points;
        if (!request.verifier.isEmpty()) { // on the models' device when a pair is loaded, as the replay's
            gpu::CrossEncoder verifier(request.verifier.toStdString(),
                                       m_a ? m_a->options() : gpu::LoadOptions{});
            out->verifierName = QString::fromStdString(verifier.name());
            out->verifier =
                core::sweepVerifier(texts, s, verifier, request.similarityThreshold, request.target);
        }
        Q_EMIT semanticSwept(job, out);
    });
}

void EngineWorker::trainEmbedder(quint64 job, const ui::EmbedderTrainRequest &request,
                                 std::shared_ptr<std::atomic_bool> cancel)
{
    guarded(job, [&] {
        const auto &o = request.settings;
        const auto report = [&](int step, int steps, double loss, double auc) {
            if (std::isfinite(auc) || step % 10 == 0)
                Q_EMIT progress(
                    job, double(step) / steps,
                    std::isfinite(auc)
                        ? QString("step %1 / %2: loss %3, validation AUC %4")
                              .arg(step)
                              .arg(steps)
                              .arg(loss, 0, 'f', 4)
                              .arg(auc, 0, 'f', 4)
                        : QString("step %1 / %2: loss %3").arg(step).arg(steps).arg(loss, 0, 'f', 4));
            return !cancel->load();
        };
        const auto r = request.verifier ? gpu::trainVerifier(o, report) : gpu::trainEmbedder(o, report);
        if (r.cancelled) {
            Q_EMIT cancelled(job);
            return;
        }
        auto out = std::make_shared<ui::EmbedderTrainView>();
        out->verifier = request.verifier;
        out->out = QString::fromStdString(o.out.string());
        out->pairs = QString::fromStdString(o.pairs.string());
        out->steps = r.stepsDone;
        out->bestStep = r.bestStep;
        out->stoppedEarly = r.stoppedEarly;
        out->trainPairs = qint64(r.trainPairs);
        out->validationPairs = qint64(r.validationPairs);
        out->skippedLines = qint64(r.warningCount);
        for (const auto &e : r.evaluation) {
            if (e.embedder == "trained") {
                out->auc = e.separation.auc;
                out->averagePrecision = e.averagePrecision;
                out->curve = e.curve;
                if (e.separation.recallAtPrecision90 > 0) {
                    out->thresholdAt90 = e.separation.thresholdAtPrecision90;
                    out->recallAt90 = e.separation.recallAtPrecision90;
                }
            } else if (e.embedder == "lexical") {
                out->lexicalAuc = e.separation.auc;
            }
        }
        Q_EMIT embedderTrained(job, out);
    });
}

void EngineWorker::evaluateKnowledge(quint64 job, const ui::KnowledgeEvalRequest &request,
                                     std::shared_ptr<std::atomic_bool> cancel)
{
    guarded(job, [&] {
        requireModels("the knowledge evaluation");
        core::ReplaySettings j;
        j.workload = request.workloadPath.toStdString();
        j.limit = request.limit;
        j.knowledgeGraphs = {request.graphPath.toStdString()};
        j.profiles = request.profilesPath.toStdString();
        j.threshold = request.threshold;
        const auto e = jobs::evaluateKnowledge(
            j, *m_a, *m_b, *m_tokA, *m_tokB, [&](const std::string &stage, int done, int total) {
                Q_EMIT progress(
                    job, total ? double(done) / total : 1.0,
                    QString("%1: %2 / %3 requests").arg(QString::fromStdString(stage)).arg(done).arg(total));
                return !cancel->load();
            });
        if (e.cancelled) {
            Q_EMIT cancelled(job);
            return;
        }
        auto out = std::make_shared<ui::KnowledgeEconomics>();
        out->requests = e.requests;
        out->users = e.users;
        out->concepts = e.concepts;
        for (const auto &a : e.arms)
            out->arms.push_back(QString::fromStdString(a.name));
        out->table = jobs::knowledgeEconomicsTable(e);
        const auto &c = e.costs;
        out->timeMs = {{"embed", c.embedMs},  {"recall", c.recallMs},         {"verify", c.verifyMs},
                       {"place", c.placeMs},  {"system prompts", c.prefixMs}, {"recompute", c.recomputeMs},
                       {"render", e.renderMs}};
        out->markdown = QString::fromStdString(jobs::knowledgeEvaluationMarkdown(e));
        Q_EMIT knowledgeEvaluated(job, out);
    });
}

} // namespace kvwb::app
