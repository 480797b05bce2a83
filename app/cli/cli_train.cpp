#include "app/cli/cli_train.h"

#include "app/cli/cli_settings.h"

#include "app/cli/engine_options.h"
#include "core/metrics/text_metrics.h"
#include "core/model/random_model.h"
#include "core/tokenize/spm_library.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/error.h"
#include "core/util/text_util.h"
#include "core/workload/corpus_shard.h"

#include "core/workload/text_corpus.h"
#include "gpu/model/model.h"
#include "gpu/train/embedder_trainer.h"
#include "gpu/train/trainer.h"
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

namespace kvwb::app {

using namespace kvwb::app::cli;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// BOS + text + EOS: the model learns where a document starts and that an answer ends.
std::vector<int> documentIds(const core::Tokenizer &tok, const std::string &text)
{
    std::vector<int> ids;
    if (tok.bosId())
        ids.push_back(*tok.bosId());
    const auto body = tok.encode(text, false);
    ids.insert(ids.end(), body.begin(), body.end());
    if (tok.eosId())
        ids.push_back(*tok.eosId());
    return ids;
}

// type: bpe, unigram (boundaries that cross a BPE tokenizer's of the same corpus) or char (one piece
// per character seen in training; vocab is then an upper bound, and no byte pieces: an unseen
// character is <unk>).
fs::path trainTokenizer(const core::TextCorpus &corpus, const fs::path &outDir, int vocab,
                        const std::string &type)
{
    std::error_code ec;
    fs::create_directories(outDir, ec);
    const fs::path input = outDir / "tokenizer_corpus.txt";
    {
        std::ofstream out(input, std::ios::binary | std::ios::trunc);
        for (const auto &d : corpus.documents) {
            if (d.validation)
                continue; // the tokenizer sees only training text
            std::istringstream lines(d.text);
            for (std::string line; std::getline(lines, line);)
                if (!line.empty())
                    out << line << '\n';
        }
        if (!out)
            throw core::Error(core::ErrorCode::Io, input.string() + ": cannot write");
    }
    // identity normalisation and kept whitespace: the text round-trips exactly; newlines and any
    // unseen character fall back to byte pieces. BPE training is deterministic for its input.
    const bool chars = type == "char";
    core::trainSentencePiece(
        fmt::format("--input={} --model_prefix={} --vocab_size={} --model_type={} --character_coverage=1.0 "
                    "--byte_fallback={} --split_digits=true --normalization_rule_name=identity "
                    "--remove_extra_whitespaces=false --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 "
                    "--input_sentence_size=0 --num_threads=2 --minloglevel=2{}",
                    input.string(), (outDir / "tokenizer").string(), vocab, type, chars ? "false" : "true",
                    chars ? " --hard_vocab_limit=false" : ""));
    fs::remove(input, ec);
    fs::remove(outDir / "tokenizer.vocab", ec);
    return outDir / "tokenizer.model";
}

// --NAME I/N (0 <= I < N); the whole corpus (0/1) when not set.
core::CorpusShard shardOption(const QCommandLineParser &p, const QString &name)
{
    if (!p.isSet(name))
        return {};
    const QString text = p.value(name);
    const QStringList parts = text.split('/');
    bool okIndex = false, okCount = false;
    core::CorpusShard s;
    if (parts.size() == 2) {
        s.index = parts[0].trimmed().toInt(&okIndex);
        s.count = parts[1].trimmed().toInt(&okCount);
    }
    if (!okIndex || !okCount || s.count < 1 || s.index < 0 || s.index >= s.count)
        throw UsageError{
            fmt::format("--{} expects I/N with 0 <= I < N (e.g. 1/2), got '{}'", str(name), str(text))};
    return s;
}

// The options of `kvwb train`.
void addTrainOptions(QCommandLineParser &p)
{
    p.addOption({"corpus", "Corpus: JSONL from `kvwb corpus` (text, split) or plain text lines.", "FILE"});
    p.addOption({"out", "Output HF model directory.", "DIR"});
    p.addOption({"preset", "Architecture preset (demo-a, demo-b, tiny, gqa, ...).", "NAME"});
    p.addOption({"config", "Architecture from an HF config.json instead of a preset.", "FILE"});
    p.addOption(
        {"tokenizer", "Existing tokenizer (tokenizer.model / tokenizer.json) to use and copy.", "PATH"});
    p.addOption({"train-tokenizer", "Train a SentencePiece BPE tokenizer of this vocabulary size.", "VOCAB"});
    p.addOption({"tokenizer-type",
                 "With --train-tokenizer: bpe (default), unigram (boundaries that cross BPE's) or char (one "
                 "piece per character; VOCAB is then an upper bound).",
                 "TYPE", "bpe"});
    p.addOption({"shard",
                 "Train on part I of N only: the documents whose concept rank (corpus field rank; "
                 "without one, the document's position in its split) mod N is I, in both splits.",
                 "I/N"});
    p.addOption({"steps", "Optimizer steps (default 1000).", "N", "1000"});
    p.addOption({"seq-len", "Tokens per row (default 128).", "N", "128"});
    p.addOption({"batch", "Rows per step (default 16).", "N", "16"});
    p.addOption({"lr", "Peak learning rate (default 3e-3).", "LR", "3e-3"});
    p.addOption({"min-lr", "Final learning rate of the cosine (default lr/10).", "LR"});
    p.addOption({"warmup", "Linear warmup steps (default 50).", "N", "50"});
    p.addOption({"weight-decay", "AdamW weight decay on matrices (default 0.1).", "WD", "0.1"});
    p.addOption({"grad-clip", "Global gradient-norm clip (default 1.0).", "C", "1.0"});
    addSeedOption(p, "Seed for initialisation and batches");
    p.addOption({"eval-every", "Steps between validation losses (default 100).", "N", "100"});
    p.addOption({"checkpoint-every", "Steps between resumable state saves (default 200).", "N", "200"});
    p.addOption({"weight-dtype", "Stored weights: F32 (default), BF16 or F16.", "DTYPE", "F32"});
    p.addOption({"threads", "Intra-op threads (default: all cores).", "N"});
    p.addOption({"resume", "Continue from DIR/train_state if present."});
    p.addOption({"init",
                 "Fine-tune: start from this model's weights (same architecture: give its config.json "
                 "with --config).",
                 "MODEL"});
}

// The architecture and the optimisation from the options (UsageError when one is out of range).
gpu::TrainOptions trainOptions(const QCommandLineParser &p)
{
    gpu::TrainOptions o;
    o.model = p.isSet("preset") ? core::randomModelPreset(str(p.value("preset"))).config
                                : core::ModelConfig::fromHfJsonFile(str(p.value("config")));
    o.steps = intOption(p, "steps", 1000, 1);
    o.seqLen = intOption(p, "seq-len", 128, 2);
    o.batchSize = intOption(p, "batch", 16, 1);
    o.lr = doubleOption(p, "lr", 3e-3, 0, 10);
    o.minLr = doubleOption(p, "min-lr", o.lr / 10, 0, o.lr);
    o.warmupSteps = intOption(p, "warmup", 50, 0);
    o.weightDecay = doubleOption(p, "weight-decay", 0.1, 0, 10);
    o.gradClip = doubleOption(p, "grad-clip", 1.0, 0, 1e9);
    o.seed = uint64_t(intOption(p, "seed", 1, 0));
    o.evalEvery = intOption(p, "eval-every", 100, 0);
    o.checkpointEvery = intOption(p, "checkpoint-every", 200, 0);
    o.weightDtype = str(p.value("weight-dtype")).empty() ? "F32" : str(p.value("weight-dtype"));
    for (char &ch : o.weightDtype)
        ch = char(std::toupper(static_cast<unsigned char>(ch)));
    if (o.weightDtype != "F32" && o.weightDtype != "BF16" && o.weightDtype != "F16")
        throw UsageError{"--weight-dtype expects F32, BF16 or F16, got '" + str(p.value("weight-dtype")) +
                         "'"};
    o.threads = intOption(p, "threads", 0, 0, gpu::kMaxThreads);
    o.resume = p.isSet("resume");
    if (p.isSet("init"))
        o.initFrom = str(p.value("init"));
    if (o.seqLen > o.model.maxPositionEmbeddings)
        throw UsageError{fmt::format("--seq-len {} exceeds the architecture's context {}", o.seqLen,
                                     o.model.maxPositionEmbeddings)};
    return o;
}

// The corpus at corpusPath, its part `shard` (shardName: how it is shown, "I/N"); warns about
// malformed lines and reports the shard's share. Error(InvalidArgument) when it lacks training or
// validation documents.
core::TextCorpus readTrainCorpus(const fs::path &corpusPath, const core::CorpusShard &shard,
                                 const std::string &shardName)
{
    const auto whole = core::readTextCorpus(corpusPath);
    for (const auto &w : whole.warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (whole.skipped > whole.warnings.size())
        std::fprintf(stderr, "warning: %zu malformed lines skipped in all\n", whole.skipped);
    core::TextCorpus corpus = core::selectShard(whole, shard);
    const auto countValidation = [](const core::TextCorpus &c) {
        return size_t(std::count_if(c.documents.begin(), c.documents.end(),
                                    [](const auto &d) { return d.validation; }));
    };
    const size_t validationDocs = countValidation(corpus);
    if (shard.count > 1) {
        const size_t wholeValidation = countValidation(whole);
        std::fprintf(stderr, "shard %s: %zu of %zu training documents, %zu of %zu validation\n",
                     shardName.c_str(), corpus.documents.size() - validationDocs,
                     whole.documents.size() - wholeValidation, validationDocs, wholeValidation);
    }
    if (validationDocs == 0 || validationDocs == corpus.documents.size())
        throw core::Error(core::ErrorCode::InvalidArgument,
                          corpusPath.string() +
                              (shard.count > 1 ? " (shard " + shardName + ")" : std::string()) +
                              ": training needs both training and validation documents (JSONL: "
                              "'split' train/validation; plain text: every 20th line is validation)");
    return corpus;
}

} // namespace

int cmdTrain(const QStringList &args)
{
    QCommandLineParser p;
    addTrainOptions(p);
    parse(p, args,
          "Train a Llama-architecture model on a corpus and write an HF directory the engine loads.");
    if (!p.isSet("corpus") || !p.isSet("out"))
        throw UsageError{"--corpus and --out are required"};
    if (p.isSet("preset") == p.isSet("config"))
        throw UsageError{"give exactly one of --preset or --config"};
    if (p.isSet("tokenizer") == p.isSet("train-tokenizer"))
        throw UsageError{"give exactly one of --tokenizer or --train-tokenizer"};
    const fs::path out = str(p.value("out"));
    // Every flag is checked before anything slow (tokenizer training, model setup) starts.
    gpu::TrainOptions o = trainOptions(p);
    const std::string tokenizerType = str(p.value("tokenizer-type"));
    if (tokenizerType != "bpe" && tokenizerType != "unigram" && tokenizerType != "char")
        throw UsageError{
            fmt::format("--tokenizer-type expects bpe, unigram or char, got '{}'", tokenizerType)};
    if (p.isSet("tokenizer-type") && !p.isSet("train-tokenizer"))
        throw UsageError{"--tokenizer-type needs --train-tokenizer"};
    const int tokenizerVocab = p.isSet("train-tokenizer")
                                   ? intOption(p, "train-tokenizer", 1024, tokenizerType == "char" ? 8 : 260)
                                   : 0;
    const core::CorpusShard shard = shardOption(p, "shard");
    if (shard.count > 1)
        o.shard = fmt::format("{}/{}", shard.index, shard.count);

    const fs::path corpusPath = str(p.value("corpus"));
    const auto corpus = readTrainCorpus(corpusPath, shard, o.shard);

    fs::path tokPath;
    if (tokenizerVocab > 0) {
        tokPath = trainTokenizer(corpus, out, tokenizerVocab, tokenizerType);
        std::fprintf(stderr, "trained SentencePiece %s tokenizer (%d pieces): %s\n", tokenizerType.c_str(),
                     core::loadTokenizer(tokPath)->vocabSize(), tokPath.c_str());
    } else {
        tokPath = str(p.value("tokenizer"));
    }
    const auto tok = core::loadTokenizer(tokPath);
    o.model.vocabSize = tok->vocabSize();
    o.model.bosTokenId = tok->bosId();
    o.model.eosTokenIds.clear();
    if (tok->eosId())
        o.model.eosTokenIds.push_back(*tok->eosId());

    gpu::TrainData data;
    for (const auto &d : corpus.documents)
        (d.validation ? data.validation : data.train).push_back(documentIds(*tok, d.text));
    size_t trainTokens = 0;
    for (const auto &d : data.train)
        trainTokens += d.size();
    std::fprintf(
        stderr,
        "%zu training documents (%zu tokens), %zu validation; %.2fM parameters; %d steps x %d x %d tokens\n",
        data.train.size(), trainTokens, data.validation.size(), o.model.parameterCount() / 1e6, o.steps,
        o.batchSize, o.seqLen);

    std::optional<InterruptScope> ctrlC(std::in_place);
    const auto r = gpu::trainModel(o, data, out, tokPath, [&](const gpu::TrainProgress &tp) {
        if (tp.valLoss || tp.step % 50 == 0 || tp.step == 1)
            std::fprintf(stderr, "step %5d/%d  loss %.4f  lr %.2e  |g| %.2f  %s%.0f tok/s\n", tp.step,
                         tp.steps, tp.loss, tp.lr, tp.gradNorm,
                         tp.valLoss ? fmt::format("val {:.4f}  ", *tp.valLoss).c_str() : "",
                         tp.tokensPerSecond);
        return !InterruptScope::interrupted();
    });
    ctrlC.reset();
    if (r.cancelled) {
        std::fprintf(stderr, "interrupted at step %d; state saved, continue with --resume\n", r.stepsDone);
        return 130;
    }
    std::printf("%s\n", json{{"out", out.string()},
                             {"steps", r.stepsDone},
                             {"seconds", r.seconds},
                             {"final_loss", r.finalLoss},
                             {"final_val_loss", r.finalValLoss},
                             {"val_perplexity", std::exp(r.finalValLoss)},
                             {"parameters", o.model.parameterCount()}}
                            .dump(-1, ' ', false, json::error_handler_t::replace)
                            .c_str());
    return 0;
}

namespace {

// The evaluation table train-embedder and train-verifier print.
void printPairEvaluation(const gpu::EmbedderTrainResult &r, const std::filesystem::path &pairsFile,
                         bool pairs)
{
    if (r.warningCount > 0) {
        std::fprintf(stderr, "%zu lines of %s skipped:\n", r.warningCount, pairsFile.string().c_str());
        for (size_t i = 0; i < r.warnings.size() && i < 5; ++i)
            std::fprintf(stderr, "  %s\n", r.warnings[i].c_str());
    }
    if (pairs)
        std::fprintf(stderr,
                     "%zu training pairs, %zu validation pairs (grouped by shared text); %d steps%s, best at "
                     "step %d%s\n",
                     r.trainPairs, r.validationPairs, r.stepsDone, r.stoppedEarly ? " (stopped early)" : "",
                     r.bestStep, r.resumedFrom ? "; resumed" : "");
    std::fprintf(stderr, "%s pairs: %-12s %6s %8s %14s %10s\n", pairs ? "validation" : "held-out", "scorer",
                 "AUC", pairs ? "AP" : "near AUC", "recall@P0.9", "threshold");
    for (const auto &e : r.evaluation) {
        const auto &s = e.separation;
        std::fprintf(stderr, "%s        %-12s %6.3f %8.3f %14.3f %10.3f\n", pairs ? "  " : "",
                     e.embedder.c_str(), s.auc, pairs ? e.averagePrecision : s.nearMissAuc,
                     s.recallAtPrecision90, s.thresholdAtPrecision90);
    }
}

// Trains with `train` under Ctrl+C; prints progress, the table and the log; the exit code.
int runPairTraining(const core::EmbedderTrainSettings &o,
                    const std::function<gpu::EmbedderTrainResult(const gpu::EmbedderProgressFn &)> &train)
{
    const bool pairs = !o.pairs.empty();
    std::optional<InterruptScope> ctrlC(std::in_place);
    const auto r = train([&](int step, int steps, double loss, double auc) {
        if (std::isfinite(auc))
            std::fprintf(stderr, "step %5d/%d  loss %.4f  validation AUC %.4f\n", step, steps, loss, auc);
        else if (!pairs && (step % 100 == 0 || step == 1))
            std::fprintf(stderr, "step %5d/%d  loss %.4f\n", step, steps, loss);
        return !InterruptScope::interrupted();
    });
    ctrlC.reset();
    if (r.cancelled) {
        std::fprintf(stderr,
                     pairs ? "interrupted at step %d; the state is kept, continue with --resume\n"
                           : "interrupted at step %d; nothing written\n",
                     r.stepsDone);
        return 130;
    }
    printPairEvaluation(r, o.pairs, pairs);
    // the log the trainer wrote beside the model: options, losses, the held-out evaluation
    json log = json::parse(core::text::readWholeFile(o.out / "train_log.json"));
    log["out"] = o.out.string();
    std::printf("%s\n", log.dump().c_str());
    return 0;
}

} // namespace

int cmdTrainEmbedder(const QStringList &args)
{
    QCommandLineParser p;
    addSettingOptions<core::EmbedderTrainSettings>(
        p, core::embedderTrainFlags(), [&](const std::string &name) {
            if (name == "seed")
                p.addOption({"threads", "Intra-op threads (default: all cores).", "N"});
        });
    parse(
        p, args,
        "Train a sentence embedder for the semantic tier: a small BERT-family encoder with its own WordPiece "
        "vocabulary, trained contrastively on WordNet question paraphrases and synonyms with near misses as "
        "hard negatives; or, with --pairs FILE, on labelled question pairs (your own logs or a public "
        "paraphrase set), from scratch or fine-tuning --init DIR, with a validation split, early stopping "
        "and --resume. Prints the held-out evaluation against the lexical embedders.");
    if (!p.isSet("out")) // before the values: the missing output is the first thing to say
        throw UsageError{"--out is required"};
    auto o = settingsFromFlags(p, core::embedderTrainFlags());
    o.threads = intOption(p, "threads", 0, 0, gpu::kMaxThreads);
    return runPairTraining(o, [&](const gpu::EmbedderProgressFn &f) { return gpu::trainEmbedder(o, f); });
}

int cmdTrainVerifier(const QStringList &args)
{
    // the embedder's settings without the WordNet data's and the contrastive loss's
    static const auto rows = [] {
        std::vector<core::EmbedderTrainFlag> out;
        for (const auto &f : core::embedderTrainFlags())
            if (f.name != "wordnet-dir" && f.name != "concepts" && f.name != "hold-out-every" &&
                f.name != "eval-pairs" && f.name != "temperature" && f.name != "margin")
                out.push_back(f);
        return out;
    }();
    QCommandLineParser p;
    addSettingOptions<core::EmbedderTrainSettings>(p, rows, [&](const std::string &name) {
        if (name == "seed")
            p.addOption({"threads", "Intra-op threads (default: all cores).", "N"});
    });
    parse(
        p, args,
        "Train a cross-encoder verifier for the semantic tier on labelled pairs (--pairs FILE: your own logs "
        "or a public paraphrase set): a BERT-family pair classifier reading both questions together, new or "
        "fine-tuning --init DIR (an embedder's encoder, or a cross-encoder), with a validation split, early "
        "stopping and --resume. Prints the held-out evaluation; the threshold for validation precision 0.9 "
        "is the one `kvwb replay --verifier` uses by default.");
    if (!p.isSet("out"))
        throw UsageError{"--out is required"};
    if (!p.isSet("pairs"))
        throw UsageError{"--pairs is required"};
    auto o = settingsFromFlags(p, rows);
    o.threads = intOption(p, "threads", 0, 0, gpu::kMaxThreads);
    return runPairTraining(o, [&](const gpu::EmbedderProgressFn &f) { return gpu::trainVerifier(o, f); });
}

namespace {

std::string trim(std::string s)
{
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
        s.pop_back();
    size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
        ++i;
    return s.substr(i);
}

} // namespace

int cmdEvalQa(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"model", "Model directory.", "PATH"});
    p.addOption({"corpus", "Corpus JSONL from `kvwb corpus` (prompt, answer, split, rank).", "FILE"});
    p.addOption(
        {"split", "validation (default: phrasings never trained on) or train.", "SPLIT", "validation"});
    p.addOption({"top", "Only concepts of popularity rank < N (default 200).", "N", "200"});
    p.addOption({"limit", "At most this many questions (default 400).", "N", "400"});
    p.addOption({"max-tokens", "Answer length limit (default 64).", "N", "64"});
    p.addOption(
        {"shard", "Only the questions of corpus part I of N, as `kvwb train --shard` selects them.", "I/N"});
    p.addOption({"json", "Print JSON."});
    addEngineOptions(p);
    parse(p, args,
          "Ask a model the corpus's questions greedily and score its answers against the reference "
          "(exact match and word F1).");
    if (!p.isSet("model") || !p.isSet("corpus"))
        throw UsageError{"--model and --corpus are required"};
    const bool validation = p.value("split") == "validation";
    if (!validation && p.value("split") != "train")
        throw UsageError{"--split expects validation or train"};
    const int top = intOption(p, "top", 200, 1), limit = intOption(p, "limit", 400, 1);
    const core::CorpusShard shard = shardOption(p, "shard");
    const auto corpus = core::selectShard(core::readTextCorpus(str(p.value("corpus"))), shard);
    auto model = gpu::Model::load(str(p.value("model")), loadOptions(p));
    const auto tok = core::loadTokenizer(modelTokenizerPath(*model));
    gpu::GenerateOptions go;
    go.maxTokens = intOption(p, "max-tokens", 64, 1);
    int n = 0, exact = 0;
    double f1 = 0, ttft = 0;
    json samples = json::array();
    for (const auto &d : corpus.documents) {
        if (n >= limit)
            break;
        if (d.validation != validation || d.prompt.empty() || d.answer.empty() || d.rank < 0 || d.rank >= top)
            continue;
        const auto r = model->generate(tok->encode(d.prompt, true), go); // as `kvwb generate` encodes
        const std::string got = trim(tok->decode(r.outputIds, true));
        const bool same = got == trim(d.answer);
        const double f = core::wordF1(got, d.answer);
        exact += same ? 1 : 0;
        f1 += f;
        ttft += r.stats.ttftMs;
        if (samples.size() < 8)
            samples.push_back({{"prompt", d.prompt}, {"answer", d.answer}, {"generated", got}, {"f1", f}});
        ++n;
    }
    if (n == 0)
        throw core::Error(core::ErrorCode::InvalidArgument,
                          str(p.value("corpus")) + ": no " + str(p.value("split")) +
                              " questions with prompt/answer/rank below --top");
    json result = {{"model", model->checkpoint().path().string()},
                   {"split", str(p.value("split"))},
                   {"top", top},
                   {"questions", n},
                   {"exact_match", double(exact) / n},
                   {"word_f1", f1 / n},
                   {"mean_ttft_ms", ttft / n},
                   {"samples", samples}};
    if (shard.count > 1)
        result["shard"] = fmt::format("{}/{}", shard.index, shard.count);
    if (p.isSet("json")) {
        std::printf("%s\n", result.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    } else {
        std::printf("%s: %d %s questions (rank < %d): exact %.1f%%, word F1 %.3f\n",
                    result["model"].get<std::string>().c_str(), n, str(p.value("split")).c_str(), top,
                    100.0 * exact / n, f1 / n);
        for (const auto &s : samples)
            std::printf("  Q %s\n    want: %s\n    got:  %s\n", s["prompt"].get<std::string>().c_str(),
                        s["answer"].get<std::string>().c_str(), s["generated"].get<std::string>().c_str());
    }
    return 0;
}

} // namespace kvwb::app
