// Shared plumbing for the headless subcommands: option parsing with usage errors, engine options.
// GUI-free; used on the main thread of a `kvwb <subcommand>` process.
#pragma once

#include "app/jobs/job_inputs.h"
#include "core/tokenize/tokenizer.h"
#include "gpu/model/model.h"

#include <QCommandLineParser>
#include <QStringList>

#include <climits>
#include <cstddef>
#include <filesystem>
#include <memory>
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

// Thrown for bad usage; runSubcommand prints it and exits 2.
struct UsageError
{
    std::string message;
};
// Thrown by parse() after printing --help; runSubcommand exits with this code.
struct HelpShown
{
    int code = 0;
};

std::string str(const QString &s);
// Adds --help, parses, prints help (throws HelpShown) or throws UsageError.
QCommandLineParser &parse(QCommandLineParser &p, const QStringList &args, const QString &description,
                          const QString &positional = {}, const QString &positionalHelp = {});
int intOption(const QCommandLineParser &p, const QString &name, int fallback, int min = INT_MIN,
              int max = INT_MAX);
double doubleOption(const QCommandLineParser &p, const QString &name, double fallback, double min,
                    double max);
std::vector<int> parseIdList(const QString &text, const char *flag);
// Error(Io) naming the path when unreadable.
std::string readTextFile(const QString &path);
// --device, --dtype, --threads
void addEngineOptions(QCommandLineParser &p);
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

// While alive, Ctrl-C sets a flag instead of killing the process, so long commands (train,
// capture) can stop between steps and save their state. Restores the previous handler.
class InterruptScope
{
public:
    InterruptScope();
    ~InterruptScope();
    InterruptScope(const InterruptScope &) = delete;
    InterruptScope &operator=(const InterruptScope &) = delete;
    static bool interrupted();

private:
    void (*m_previous)(int) = nullptr;
};

} // namespace kvwb::app::cli
