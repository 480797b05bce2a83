// The value types the workbench's panels send to the engine (requests) and get back (summaries).
// Panels build a request from their controls and emit it; app/engine/engine_controller.h runs it on the
// engine thread and hands the result back as shared_ptr<const T>. Plain values, copied freely.
#pragma once

#include "core/settings/compare_settings.h"
#include "core/settings/embedder_train_settings.h"
#include "core/settings/fit_settings.h"
#include "core/settings/project.h"
#include "core/settings/replay_settings.h"
#include "core/workload/labelled_pairs.h"

#include "core/cache/semantic_sweep.h"
#include "core/knowledge/knowledge_graph.h"
#include "core/ledger/replay_ledger.h"
#include "core/metrics/bootstrap.h"
#include "core/metrics/compare_summary.h"
#include "core/metrics/metric_table.h"
#include "core/model/device.h"
#include "core/model/dtype.h"
#include "core/store/comparison_store.h"
#include "core/store/experiment_file.h"

#include <QString>
#include <QStringList>

#include <cstdint>
#include <optional>
#include <vector>

namespace kvwb::ui {

// Capture panel -> engine: run both loaded models over a prompt set into an experiment file; the
// capture settings a project keeps, and the prompts and the file.
struct CaptureRequest : core::CaptureSettings
{
    QString promptsPath; // text (one prompt per line) or JSONL (corpus/workload)
    QString outPath;     // experiment file; appended to when it exists (same models)
};

struct CaptureSummary
{
    QString outPath;
    bool appended = false;
    bool cancelled = false;
    int promptsWritten = 0;
    int promptsInFile = 0; // after this run
    int64_t tokensA = 0, tokensB = 0;
    int layersA = 0, layersB = 0; // captured layers
    int64_t kvBytes = 0;          // float32 K/V bytes handed to the file by this run
    int64_t fileBytes = 0;        // the file's size afterwards
    QString storage, keyForm;     // the file's storage settings
    double prefillMsA = 0, prefillMsB = 0, writeMs = 0, wallMs = 0;
    QStringList warnings;
};

// Alignment panel -> engine: a converter sweep (kvwb sweep) of the shown experiment file: a
// converter fitted for every k x lambda x calibration-token count on one split, the held-out scores
// stored as /sweeps/<name>; engine -> panel: what came of it.
struct ConverterSweepRequest
{
    QString experimentPath;
    QString name = "sweep";
    core::LayerSelection selection = core::LayerSelection::Proportional;
    std::vector<int> ks = {1};
    std::vector<double> lambdas = {0.01};
    std::vector<int64_t> tokens = {0}; // 0: every training prompt
    bool perHead = false;
};

struct ConverterSweepSummary
{
    QString experimentPath;
    QString name;
    int rows = 0;
    bool cancelled = false; // nothing stored
    QStringList warnings;
};

// Alignment panel -> engine: fit a converter from the shown experiment file, as core::FitSettings
// (core/settings/fit_settings.h); engine -> panel: what came of it.
struct FitSummary
{
    QString experimentPath;
    QString name;
    bool cancelled = false; // nothing stored
    double fitMs = 0;
    double meanR2K = 0, meanR2V = 0, meanAttnCos = 0;
    QString family;             // the stored converter's (family auto: the one it chose)
    QStringList autoCandidates; // family auto: each candidate's line, in the order tried
    QString klObjective;        // objective kl: what training through B did (gpu::AlignResult::klObjective)
    QStringList warnings;
};

// Compare panel -> engine: one prompt, three ways (A; B scratch; B from A's converted cache), or a
// prompt set as `kvwb compare --held-out` (or --prompts FILE) with the baselines of --baselines when
// asked: core::CompareSettings (core/settings/compare_settings.h), whose saveSamples the window sets
// to "workbench" for a single prompt (appended there).
using CompareResult = core::ComparisonSample;

struct CompareSetSummary
{
    QString converter;
    QString source;              // "held-out prompts" or the prompt file
    int requested = 0;           // in the set (after the limit)
    bool cancelled = false;      // the prompts done so far are summarised
    core::CompareSetSummary set; // the means, the intervals and the baselines
    QStringList warnings;
};

// Replay step -> engine: the semantic threshold sweep of a labelled workload (kvwb sweep-semantic).
struct SemanticSweepRequest
{
    QString workloadPath;
    QString embedder = "lexical"; // lexical | lexical-idf | model (model A) | an embedding model's path
    int embedderLayer = -1;       // the model embedder's block (-1: the middle one), as the replay's
    QString embedderPrefix;       // an embedding model's query prefix, as the replay's
    double target = 0.1;          // false-hit rate the suggested threshold must meet
    int limit = 0;
    // A verifier's directory: its threshold is swept too, over the candidates at or above the
    // similarity threshold (the Replay step's)
    QString verifier;
    double similarityThreshold = 0.8;
};

struct SemanticSweepResult
{
    QString workloadPath;
    QString embedder; // its name, e.g. "lexical-idf-512"
    qint64 scored = 0, shouldHit = 0;
    double target = 0;
    std::optional<double> suggested; // the lowest threshold meeting the target
    std::vector<core::SweepPoint> points;
    QString verifierName;                        // "cross-<folder>" when a verifier was swept
    std::optional<core::VerifierSweep> verifier; // its sweep (suggested: verifier->atTarget)
};

// Replay step -> engine: train a sentence embedder on a labelled pairs file (kvwb train-embedder
// --pairs), from a new encoder or fine-tuning one.
struct EmbedderTrainRequest
{
    core::EmbedderTrainSettings settings; // pairs, out, init, steps, validation share, ...
    bool verifier = false;                // a cross-encoder (kvwb train-verifier), not an embedder
};

// Engine -> Replay step: what the trained embedder scored on the validation pairs.
struct EmbedderTrainView
{
    bool verifier = false; // a cross-encoder was trained
    QString out;           // the embedder's (or verifier's) directory
    QString pairs;         // the pairs file
    int steps = 0, bestStep = 0;
    bool stoppedEarly = false;
    qint64 trainPairs = 0, validationPairs = 0, skippedLines = 0;
    double auc = 0, averagePrecision = 0, lexicalAuc = 0;
    std::optional<double> thresholdAt90; // the lowest threshold with validation precision >= 0.9
    double recallAt90 = 0;
    std::vector<core::PrPoint> curve;
};

// Knowledge step -> engine: open a graph file (its nodes, module freshness for model B in use), or
// first build it from WordNet's most popular concepts with model B's modules.
struct KnowledgeOpenRequest
{
    QString graphPath;
    bool build = false; // build (WordNet, `concepts` nodes, modules by model B), then open
    int concepts = 300;
    QString system; // text the modules are computed after (build; "" = BOS only)
};

// A graph as the Knowledge step shows it.
struct KnowledgeView
{
    QString path;
    QString description;
    core::KnowledgeGraph graph;
    std::vector<int> moduleTokens;  // [node] (0: no module)
    std::vector<QString> freshness; // [node] fresh | stale | missing, for model B in use
    bool built = false;             // this job built the file
};

// Knowledge step -> engine: a question's path through the graph.
struct KnowledgeTraceRequest
{
    QString graphPath;
    QString question;
    QString user;         // "" none
    QString profilesPath; // "" none
};

struct KnowledgeTraceResult
{
    struct Candidate
    {
        QString node, name, matched, reason;
        double similarity = 0;
        bool accepted = false;
    };
    QString question;
    std::vector<Candidate> candidates; // recall's, best first
    QString chosen;                    // "" answered from scratch
    QString freshness;
    int moduleTokens = 0;
    QString profileLine;
    double recallMs = 0, verifyMs = 0;
};

// Knowledge step -> engine: the economics (kvwb knowledge evaluate).
struct KnowledgeEvalRequest
{
    QString graphPath;
    QString profilesPath;
    QString workloadPath;
    int limit = 200; // first N requests of the workload (its model-b ones are evaluated)
    double threshold = 0.8;
};

struct KnowledgeEconomics
{
    int64_t requests = 0, users = 0, concepts = 0;
    std::vector<QString> arms;                      // rows of table
    core::MetricTable table;                        // app/jobs/knowledge_eval.h's columns
    std::vector<std::pair<QString, double>> timeMs; // the knowledge tier's steps
    QString markdown;                               // the whole result as kvwb knowledge evaluate prints it
};

// The tier names of a stack in lookup order ("exact", "semantic", ...), for labels and logs.
inline QStringList tierNames(const std::vector<core::TierKind> &tiers)
{
    QStringList out;
    for (auto t : tiers)
        out << QString::fromUtf8(core::tierKindName(t));
    return out;
}

} // namespace kvwb::ui
