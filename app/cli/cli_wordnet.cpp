#include "app/cli/cli_wordnet.h"
#include "app/cli/cli_util.h"

#include "core/util/atomic_file.h"
#include "core/workload/corpus.h"
#include "core/workload/wordnet.h"
#include "core/workload/workload.h"
#include "core/workload/workload_import.h"

#include <QCommandLineParser>

#include <chrono>
#include <cstdio>
#include <map>

namespace kvwb::app {

namespace {

using namespace kvwb::app::cli;
using Clock = std::chrono::steady_clock;

void addSourceOptions(QCommandLineParser &p)
{
    p.addOption({"out", "Output JSONL file (written atomically).", "FILE"});
    p.addOption({"wordnet-dir",
                 QString("WordNet database directory (default %1).").arg(core::WordNet::kDefaultDir), "DIR",
                 core::WordNet::kDefaultDir});
    p.addOption({"concepts", "Most popular noun concepts to use (default 3000).", "N", "3000"});
    p.addOption({"seed", "Random seed; the output is identical for a seed (default 1).", "S", "1"});
    p.addOption({"no-hypernym", "Answers without the \" It is a kind of X.\" sentence."});
}

// The first positional names the source; only WordNet exists so far.
void checkSource(const QCommandLineParser &p)
{
    const auto pos = p.positionalArguments();
    if (pos.size() != 1)
        throw UsageError{"expected exactly one SOURCE (wordnet)"};
    if (pos.first() != "wordnet")
        throw UsageError{"unknown source '" + str(pos.first()) + "' (only 'wordnet' is supported)"};
    if (!p.isSet("out"))
        throw UsageError{"--out is required"};
}

uint64_t seedOption(const QCommandLineParser &p)
{
    bool ok = false;
    const uint64_t s = p.value("seed").toULongLong(&ok);
    if (!ok)
        throw UsageError{"--seed expects a non-negative integer"};
    return s;
}

core::WordNet loadWordNet(const QCommandLineParser &p)
{
    const auto t0 = Clock::now();
    auto wn = core::WordNet::load(str(p.value("wordnet-dir")));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::fprintf(stderr, "read %zu synsets from %s in %.0f ms (%zu warnings)\n", wn.synsets().size(),
                 wn.dir().c_str(), ms, wn.warnings().total());
    if (!wn.warnings().empty())
        std::fprintf(stderr, "%s", wn.warnings().summary().c_str());
    return wn;
}

// Options of `kvwb workload wordnet` that mean nothing to an imported dataset.
const char *const kWordNetOnly[] = {"wordnet-dir", "concepts", "seed",         "no-hypernym",
                                    "requests",    "zipf",     "rate",         "tenants",
                                    "users",       "p-repeat", "p-paraphrase", "p-synonym",
                                    "p-near-miss", "frac-b",   "system-words", "history"};

// `kvwb workload sharegpt|quora`: a public dataset as a workload (core/workload/workload_import.h).
int importWorkload(const QCommandLineParser &p, const QString &source)
{
    for (const char *name : kWordNetOnly)
        if (p.isSet(name))
            throw UsageError{"--" + std::string(name) + " applies to the wordnet source only"};
    if (!p.isSet("input"))
        throw UsageError{"--input is required for " + str(source)};
    if (source == "sharegpt" && p.isSet("system-prompt"))
        throw UsageError{"--system-prompt applies to quora only (ShareGPT conversations bring their own)"};
    core::ImportOptions o;
    o.limit = size_t(intOption(p, "limit", 0, 0));
    o.gapMs = intOption(p, "gap-ms", 1000, 0);
    o.maxTokens = intOption(p, "max-tokens", 64, 1);
    o.systemPrompt = str(p.value("system-prompt"));
    const auto t0 = Clock::now();
    const std::string input = str(p.value("input"));
    const core::ImportResult r =
        source == "sharegpt" ? core::importShareGpt(input, o) : core::importQuoraPairs(input, o);
    if (!r.warnings.empty())
        std::fprintf(stderr, "skipped %zu malformed %s:\n%s", r.warnings.total(),
                     source == "sharegpt" ? "conversations" : "lines", r.warnings.summary().c_str());
    core::writeWorkloadJsonl(str(p.value("out")), r.requests);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::map<std::string, size_t> kinds;
    for (const auto &q : r.requests)
        ++kinds[core::requestKindName(q.kind)];
    std::printf("wrote %s: %zu requests from %zu %s of %s (%zu skipped), %.1f s of traffic, in %.0f ms\n",
                qPrintable(p.value("out")), r.requests.size(), r.records,
                source == "sharegpt" ? "conversations" : "pairs", input.c_str(), r.warnings.total(),
                r.requests.back().tMs / 1000.0, ms);
    std::printf("kinds:");
    for (const auto &[k, n] : kinds)
        std::printf(" %s %zu", k.c_str(), n);
    std::printf("\n");
    return 0;
}

} // namespace

int cmdCorpus(const QStringList &args)
{
    QCommandLineParser p;
    addSourceOptions(p);
    p.addOption({"min-examples", "Training examples for the least popular concept (default 4).", "N", "4"});
    p.addOption({"max-examples",
                 "Training examples for the most popular concept (default: one per training "
                 "template).",
                 "N", "0"});
    parse(p, args,
          "Write a question/answer training corpus (JSONL: synset, rank, lemma, template, split, question, "
          "prompt, "
          "answer, text) from WordNet noun concepts. Validation uses phrasing templates training never sees.",
          "SOURCE", "Where concepts come from: wordnet.");
    checkSource(p);
    core::CorpusOptions o;
    o.concepts = size_t(intOption(p, "concepts", 3000, 1));
    o.seed = seedOption(p);
    o.hypernymSentence = !p.isSet("no-hypernym");
    o.minPerConcept = intOption(p, "min-examples", 4, 1);
    o.maxPerConcept = intOption(p, "max-examples", 0, 0);
    const auto wn = loadWordNet(p);
    const auto t0 = Clock::now();
    const auto corpus = core::CorpusBuilder(wn, o).build();
    const std::string text = core::corpusToJsonl(corpus);
    core::writeFileAtomic(str(p.value("out")), text);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::printf("wrote %s: %zu concepts, %zu train + %zu validation examples, %.1f MiB in %.0f ms\n",
                qPrintable(p.value("out")), corpus.concepts, corpus.trainCount, corpus.validationCount,
                text.size() / 1048576.0, ms);
    return 0;
}

int cmdWorkload(const QStringList &args)
{
    QCommandLineParser p;
    addSourceOptions(p);
    p.addOption({"requests", "Requests to generate (default 10000).", "N", "10000"});
    p.addOption({"zipf", "Zipf exponent s of concept popularity (default 1.0).", "S", "1.0"});
    p.addOption({"rate", "Poisson arrival rate, requests per second (default 5).", "R", "5"});
    p.addOption({"tenants", "Tenants (default 3).", "T", "3"});
    p.addOption({"users", "Users per tenant (default 20).", "N", "20"});
    p.addOption(
        {"p-repeat", "Probability of an exact repeat of an earlier request (default 0.10).", "P", "0.10"});
    p.addOption({"p-paraphrase", "Probability of a paraphrase: same intent, another template (default 0.15).",
                 "P", "0.15"});
    p.addOption({"p-synonym", "Probability of a synonym swap: same intent, another lemma (default 0.10).",
                 "P", "0.10"});
    p.addOption({"p-near-miss",
                 "Probability of a near miss: a sibling concept, same template (default 0.10).", "P",
                 "0.10"});
    p.addOption({"frac-b", "Share of requests sent to model b (default 0.5).", "F", "0.5"});
    p.addOption({"max-tokens", "max_tokens of every request (default 64).", "N", "64"});
    p.addOption({"system-words",
                 "System prompt lengths in words per tenant, comma-separated; 0 = none "
                 "(default 10,60,250).",
                 "LIST", "10,60,250"});
    p.addOption({"history", "Derived requests pick their base among the tenant's last N (default 1000).", "N",
                 "1000"});
    p.addOption(
        {"input", "sharegpt, quora: the dataset file (ShareGPT JSON, Quora question pairs TSV).", "FILE"});
    p.addOption({"limit", "sharegpt, quora: at most N requests (default 0 = all).", "N", "0"});
    p.addOption({"gap-ms", "sharegpt, quora: arrival spacing in ms (default 1000).", "MS", "1000"});
    p.addOption({"system-prompt", "quora: system prompt put before every question (default none).", "STR"});
    parse(p, args,
          "Write a request workload (JSONL, one request a line). wordnet: over WordNet concepts, with Zipf "
          "popularity, Poisson arrivals, tenants with shared system prompts, exact repeats, paraphrases, "
          "synonym swaps and near misses. sharegpt: every human turn of ShareGPT conversations, prompted "
          "with the conversation so far. quora: both questions of each Quora question pair, duplicates "
          "sharing an intent (docs/corpus-and-workload.md).",
          "SOURCE", "wordnet, sharegpt or quora.");
    {
        const auto pos = p.positionalArguments();
        if (pos.size() != 1)
            throw UsageError{"expected exactly one SOURCE (wordnet, sharegpt or quora)"};
        if (!p.isSet("out"))
            throw UsageError{"--out is required"};
        if (pos.first() == "sharegpt" || pos.first() == "quora")
            return importWorkload(p, pos.first());
        if (pos.first() != "wordnet")
            throw UsageError{"unknown source '" + str(pos.first()) + "' (wordnet, sharegpt or quora)"};
        for (const char *name : {"input", "limit", "gap-ms", "system-prompt"})
            if (p.isSet(name))
                throw UsageError{"--" + std::string(name) +
                                 " applies to the sharegpt and quora sources only"};
    }
    core::WorkloadOptions o;
    o.requests = size_t(intOption(p, "requests", 10000, 0));
    o.concepts = size_t(intOption(p, "concepts", 3000, 1));
    o.zipfS = doubleOption(p, "zipf", 1.0, 0.0, 10.0);
    o.ratePerSecond = doubleOption(p, "rate", 5.0, 1e-6, 1e9);
    o.tenants = intOption(p, "tenants", 3, 1);
    o.usersPerTenant = intOption(p, "users", 20, 1);
    o.pRepeat = doubleOption(p, "p-repeat", 0.10, 0.0, 1.0);
    o.pParaphrase = doubleOption(p, "p-paraphrase", 0.15, 0.0, 1.0);
    o.pSynonym = doubleOption(p, "p-synonym", 0.10, 0.0, 1.0);
    o.pNearMiss = doubleOption(p, "p-near-miss", 0.10, 0.0, 1.0);
    if (o.pRepeat + o.pParaphrase + o.pSynonym + o.pNearMiss > 1.0 + 1e-9)
        throw UsageError{"--p-repeat + --p-paraphrase + --p-synonym + --p-near-miss must be <= 1"};
    o.fracB = doubleOption(p, "frac-b", 0.5, 0.0, 1.0);
    o.maxTokens = intOption(p, "max-tokens", 64, 1);
    o.systemPromptWords.clear();
    for (const QString &part : p.value("system-words").split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const int w = part.trimmed().toInt(&ok);
        if (!ok || w < 0)
            throw UsageError{"--system-words expects comma-separated word counts >= 0, got '" +
                             str(p.value("system-words")) + "'"};
        o.systemPromptWords.push_back(w);
    }
    if (o.systemPromptWords.empty())
        throw UsageError{"--system-words needs at least one length (0 = no system prompt)"};
    o.historyWindow = size_t(intOption(p, "history", 1000, 1));
    o.hypernymSentence = !p.isSet("no-hypernym");
    o.seed = seedOption(p);
    const auto wn = loadWordNet(p);
    const auto t0 = Clock::now();
    const core::WorkloadGenerator gen(wn, o);
    const auto w = gen.generate();
    core::writeWorkloadJsonl(str(p.value("out")), w.requests);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::map<std::string, size_t> kinds;
    size_t b = 0;
    for (const auto &r : w.requests) {
        ++kinds[core::requestKindName(r.kind)];
        b += r.model == "b";
    }
    std::printf("wrote %s: %zu requests over %zu concepts, %d tenants, %.1f s of traffic, in %.0f ms\n",
                qPrintable(p.value("out")), w.requests.size(), w.concepts, o.tenants,
                w.requests.empty() ? 0.0 : w.requests.back().tMs / 1000.0, ms);
    std::printf("kinds:");
    for (const auto &[k, n] : kinds)
        std::printf(" %s %zu", k.c_str(), n);
    std::printf("; model b %zu\n", b);
    for (const auto &sp : w.systemPrompts)
        std::printf("system prompt %s: %d words\n", sp.id.c_str(), sp.words);
    return 0;
}

} // namespace kvwb::app
