// Shared plumbing for the headless subcommands: option parsing with usage errors, engine options.
// GUI-free; used on the main thread of a `kvwb <subcommand>` process.
#pragma once

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
int intOption(const QCommandLineParser &p, const QString &name, int fallback, int min = INT_MIN);
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
struct PromptText
{
    std::string text;
    std::string label; // intent / synset; the first document's when joined
};
struct PromptFileOptions
{
    std::string split = "all"; // train | validation | all
    bool wholeText = false;
    int join = 1;
};
std::vector<PromptText> readPromptFile(const std::string &path, const PromptFileOptions &options,
                                       std::vector<std::string> &warnings);
// The same with the options from --split, --whole-text and --join.
std::vector<PromptText> readPromptFile(const QCommandLineParser &p, const std::string &path,
                                       std::vector<std::string> &warnings);

// The tokenizer beside a loaded model's checkpoint, checked against the model: its path, and the
// tokenizer. Error(Tokenizer) naming the model when there is none or it does not fit.
std::filesystem::path modelTokenizerPath(const gpu::Model &model);
std::unique_ptr<core::Tokenizer> loadModelTokenizer(const gpu::Model &model);

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
