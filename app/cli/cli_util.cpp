#include "app/cli/cli_util.h"

#include "core/model/checkpoint.h"
#include "core/model/encoder_config.h"
#include "core/model/gguf_model.h"
#include "core/tokenize/gguf_tokenizer.h"

#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/install_layout.h"
#include "core/util/text_util.h"

#include <QFile>

#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <utility>

namespace kvwb::app::cli {

std::string str(const QString &s)
{
    return s.toStdString();
}

QCommandLineParser &parse(QCommandLineParser &p, const QStringList &args, const QString &description,
                          const QString &positional, const QString &positionalHelp)
{
    p.setApplicationDescription(description);
    p.addHelpOption();
    if (!positional.isEmpty())
        p.addPositionalArgument(positional, positionalHelp);
    if (!p.parse(args))
        throw UsageError{str(p.errorText())};
    if (p.isSet("help") || p.isSet("help-all")) {
        std::fputs(qPrintable(p.helpText()), stdout);
        throw HelpShown{0};
    }
    return p;
}

void addForceOption(QCommandLineParser &p)
{
    p.addOption({"force", "Replace an output file that exists, or an output directory kvwb wrote."});
}

std::filesystem::path outputFileOption(const QCommandLineParser &p, const QString &name)
{
    const std::filesystem::path path = str(p.value(name));
    core::claimOutputFile(path, "--" + str(name), p.isSet("force"));
    return path;
}

std::filesystem::path outputDirectoryOption(const QCommandLineParser &p, const QString &name)
{
    const std::filesystem::path path = str(p.value(name));
    core::claimOutputDirectory(path, "--" + str(name), p.isSet("force"));
    return path;
}

std::string notServedLine(const core::LedgerSummary &summary)
{
    std::string reasons;
    for (const auto &[reason, n] : summary.notServedBy)
        reasons += fmt::format("{}{} {}", reasons.empty() ? "" : ", ", reason, n);
    return fmt::format(
        "not served: {} requests ({}; context: prompt + max_tokens beyond the model's context, "
        "worker: its fleet worker died)",
        summary.notServed, reasons);
}

void distinctOutputs(const QCommandLineParser &p, const QStringList &names)
{
    std::vector<std::pair<QString, std::filesystem::path>> seen;
    for (const QString &name : names) {
        if (!p.isSet(name))
            continue;
        std::error_code ec;
        std::filesystem::path path = std::filesystem::weakly_canonical(str(p.value(name)), ec);
        if (ec)
            path = str(p.value(name));
        for (const auto &[other, otherPath] : seen)
            if (otherPath == path)
                throw UsageError{"--" + str(other) + " and --" + str(name) + " name the same file " +
                                 path.string()};
        seen.emplace_back(name, path);
    }
}

int intOption(const QCommandLineParser &p, const QString &name, int fallback, int min, int max)
{
    if (!p.isSet(name))
        return fallback;
    bool ok = false;
    const int v = p.value(name).toInt(&ok);
    if (!ok || v < min || v > max) {
        if (max == INT_MAX)
            throw UsageError{
                fmt::format("--{} expects an integer >= {}, got '{}'", str(name), min, str(p.value(name)))};
        throw UsageError{fmt::format("--{} expects an integer in [{}, {}], got '{}'", str(name), min, max,
                                     str(p.value(name)))};
    }
    return v;
}

double doubleOption(const QCommandLineParser &p, const QString &name, double fallback, double min, double max)
{
    if (!p.isSet(name))
        return fallback;
    bool ok = false;
    const double v = p.value(name).toDouble(&ok);
    if (!ok || !(v >= min && v <= max)) // NaN is in no range
        throw UsageError{fmt::format("--{} expects a number in [{}, {}], got '{}'", str(name), min, max,
                                     str(p.value(name)))};
    return v;
}

std::vector<int> parseIdList(const QString &text, const char *flag)
{
    std::vector<int> ids;
    for (const QString &part : text.split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const int v = part.trimmed().toInt(&ok);
        if (!ok || v < 0)
            throw UsageError{
                fmt::format("{} expects comma-separated non-negative integers, got '{}'", flag, str(part))};
        ids.push_back(v);
    }
    if (ids.empty())
        throw UsageError{fmt::format("{} is empty", flag)};
    return ids;
}

void addSeedOption(QCommandLineParser &p, const QString &what)
{
    p.addOption({"seed", what + " (default 1).", "S", "1"});
}

uint64_t seedOption(const QCommandLineParser &p)
{
    bool ok = false;
    const uint64_t s = p.value("seed").toULongLong(&ok);
    if (!ok)
        throw UsageError{"--seed expects a non-negative integer"};
    return s;
}

std::string readTextFile(const QString &path, uint64_t maxBytes)
{
    return core::text::readWholeFile(str(path), maxBytes);
}

namespace {

// In the order the help texts and messages list them: F32 (the default) first.
constexpr core::DType kGgufWeightTypes[] = {core::DType::F32,  core::DType::F16,  core::DType::BF16,
                                            core::DType::Q8_0, core::DType::Q4_0, core::DType::Q4_1,
                                            core::DType::Q5_0, core::DType::Q5_1, core::DType::Q4_K,
                                            core::DType::Q5_K, core::DType::Q6_K};

} // namespace

core::DType ggufWeightType(const std::string &name)
{
    for (core::DType t : kGgufWeightTypes)
        if (name == core::dtypeName(t))
            return t;
    throw UsageError{"weight type " + name + " is not one of " +
                     ggufWeightTypeNames(WeightTypeSet::All, NameList::Plain)};
}

std::string ggufWeightTypeNames(WeightTypeSet set, NameList style)
{
    std::vector<std::string> names;
    for (core::DType t : kGgufWeightTypes)
        if (set == WeightTypeSet::All || core::isBlockQuantized(t) == (set == WeightTypeSet::Quantised))
            names.push_back(std::string(core::dtypeName(t)) +
                            (style == NameList::Help && t == core::DType::F32 ? " (default)" : ""));
    if (style == NameList::Plain || names.size() < 2)
        return core::text::join(names);
    const std::string last = names.back();
    names.pop_back();
    return core::text::join(names) + " or " + last;
}

void writeGgufFrom(const core::Checkpoint &ck, const std::filesystem::path &out, core::DType type)
{
    core::GgufWriter w;
    if (const auto tok = ck.tokenizerPath()) {
        if (tok->extension() == ".gguf") {
            // GGUF to GGUF: carry every tokenizer key over as it is
            const auto src = core::GgufFile::open(*tok);
            core::copyTokenizerMetadata(src, w);
        } else {
            core::writeTokenizerToGguf(*tok, w, ck.config().vocabSize);
        }
    }
    for (const std::string &note : core::writeGguf(ck, out, type, std::move(w)))
        std::fprintf(stderr, "%s\n", note.c_str());
}

std::filesystem::path demoProjectDir()
{
    if (auto installed = core::installedDemoProject())
        return *installed;
    return std::filesystem::path(KVWB_SOURCE_DIR) / "projects" / "demo";
}

namespace {
std::atomic_bool g_interrupted{false};
extern "C" void kvwbOnSigint(int)
{
    g_interrupted = true;
}
} // namespace

InterruptScope::InterruptScope()
{
    g_interrupted = false;
    m_previous = std::signal(SIGINT, kvwbOnSigint);
}

InterruptScope::~InterruptScope()
{
    std::signal(SIGINT, m_previous);
}

bool InterruptScope::interrupted()
{
    return g_interrupted.load();
}

void checkEmbedderOption(const QCommandLineParser &p, bool hasPrefixOption)
{
    const std::string spec = str(p.value("embedder"));
    std::error_code ec;
    if (!core::isBuiltinEmbedder(spec) && (spec.empty() || !std::filesystem::exists(spec, ec)))
        throw UsageError{"--embedder expects lexical, lexical-idf, model or the path of an embedding model "
                         "(a sentence-transformers directory, a bert GGUF, a decoder embedder), got '" +
                         spec + "'"};
    if (hasPrefixOption && p.isSet("embedder-prefix") && core::isBuiltinEmbedder(spec))
        throw UsageError{"--embedder-prefix is for an embedding model given by path"};
}

} // namespace kvwb::app::cli
