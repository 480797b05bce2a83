// Shared plumbing for the headless subcommands: option parsing with usage errors, text files, GGUF
// output (make-model, convert), Ctrl-C. Torch-free, so the light `kvwb` front end links it (the
// engine's options are in app/cli/engine_options.h). GUI-free; used on the main thread of a
// `kvwb <subcommand>` process.
#pragma once

#include "core/ledger/replay_ledger.h"
#include "core/model/dtype.h"
#include "core/util/text_util.h"

#include <QCommandLineParser>
#include <QStringList>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kvwb::core {
class Checkpoint;
} // namespace kvwb::core

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
int intOption(const QCommandLineParser &p, const QString &name, int fallback, int min = INT_MIN,
              int max = INT_MAX);
double doubleOption(const QCommandLineParser &p, const QString &name, double fallback, double min,
                    double max);
std::vector<int> parseIdList(const QString &text, const char *flag);
// --seed S, default 1, its help `what (default 1).`; seedOption reads it as any non-negative 64-bit
// integer (UsageError otherwise).
void addSeedOption(QCommandLineParser &p, const QString &what);
uint64_t seedOption(const QCommandLineParser &p);
// The output rule (core::claimOutputFile / claimOutputDirectory) for option `name`, with the
// command's --force (addForceOption): checked before any work; returns the path.
void addForceOption(QCommandLineParser &p);
std::filesystem::path outputFileOption(const QCommandLineParser &p, const QString &name);
std::filesystem::path outputDirectoryOption(const QCommandLineParser &p, const QString &name);
// "not served: 5 requests (context 3, worker 2)": the ledger's not_served rows by reason, for a
// replay's text summary (call it when summary.notServed > 0).
std::string notServedLine(const core::LedgerSummary &summary);
// UsageError when two of the set options name the same file (one would overwrite the other).
void distinctOutputs(const QCommandLineParser &p, const QStringList &names);
// --embedder: lexical, lexical-idf, model, or the path of an embedding model that exists; and,
// where the command has one, --embedder-prefix only with a model path (UsageError otherwise).
void checkEmbedderOption(const QCommandLineParser &p, bool hasPrefixOption = false);
// The whole of a regular file of at most maxBytes (core::text::readWholeFile: checked before it is
// read; Error(Io) naming the path when unreadable or not a regular file).
std::string readTextFile(const QString &path, uint64_t maxBytes = core::text::kMaxInputFileBytes);
// The GGUF weight types (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) of
// `make-model --weight-dtype` and `convert --weight-type`. ggufWeightType reads one by name (UsageError
// for any other name). ggufWeightTypeNames lists all of them, the unquantised ones (F32, F16, BF16:
// safetensors types too) or the block-quantised ones, plainly ("F32, F16, BF16") or as a help text
// does ("F32 (default), F16 or BF16": F32, both options' default, marked, "or" before the last).
enum class WeightTypeSet
{
    All,
    Unquantised,
    Quantised
};
enum class NameList
{
    Plain,
    Help
};
core::DType ggufWeightType(const std::string &name);
std::string ggufWeightTypeNames(WeightTypeSet set, NameList style);
// The checkpoint as GGUF, its tokenizer (when it has one) in the metadata; prints what stayed F32.
void writeGgufFrom(const core::Checkpoint &ck, const std::filesystem::path &out, core::DType type);
// The demo project folder (holding demo.kvwb, models/a, models/b, workloads/): the installed one,
// <prefix>/share/kvwb/projects/demo, when this executable runs installed (core/util/install_layout.h),
// else the source tree's projects/demo.
std::filesystem::path demoProjectDir();
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
