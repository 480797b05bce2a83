// Options of the subcommands that run the engine (kvwb-engine only: they name gpu/ types): device,
// compute type and threads, and prompt files. GUI-free; used on the main thread of a
// `kvwb-engine <subcommand>` process. The torch-free plumbing is app/cli/cli_util.h.
#pragma once

#include "app/cli/cli_util.h"
#include "app/jobs/job_inputs.h"
#include "core/tokenize/tokenizer.h"
#include "gpu/model/model.h"

#include <QCommandLineParser>

#include <string>
#include <vector>

namespace kvwb::app::cli {

// Prompt files and model tokenizers are the jobs' (app/jobs/job_inputs.h); the subcommands name
// them unqualified.
using jobs::loadModelTokenizer;
using jobs::modelTokenizerPath;
using jobs::PromptFileOptions;
using jobs::PromptText;
using jobs::readPromptFile;

// --device, --dtype, --threads, --context, --dequantize and addCacheOptions
void addEngineOptions(QCommandLineParser &p);
// The same with the compute dtype's option and --dequantize's help given: capture calls its compute
// dtype --compute-dtype (see loadOptions).
void addEngineOptions(QCommandLineParser &p, const QCommandLineOption &computeDtype,
                      const QString &dequantizeHelp);
// --kv-dtype (the KV cache's element type) and --prefill-chunk (prompt tokens per step).
void addCacheOptions(QCommandLineParser &p);
// Reads --device, --threads and the compute dtype from dtypeFlag (capture calls it --compute-dtype
// because its --dtype is the storage type).
gpu::LoadOptions loadOptions(const QCommandLineParser &p, const QString &dtypeFlag = "dtype");

// Prompt files (text lines, corpus or workload JSONL; core/workload/text_corpus.h) as prompts: --split
// train|validation|all, --whole-text (a corpus line's whole text, e.g. question and answer, instead
// of its prompt), --join N (N consecutive documents joined with newlines into one prompt).
void addPromptFileOptions(QCommandLineParser &p);
// The same with the options from --split, --whole-text and --join.
std::vector<PromptText> readPromptFile(const QCommandLineParser &p, const std::string &path,
                                       std::vector<std::string> &warnings);

} // namespace kvwb::app::cli
