#include "gpu/train/embedder_trainer.h"

#include "core/cache/semantic_tier.h"
#include "core/model/encoder_config.h"
#include "core/tokenize/tokenizer.h"
#include "core/tokenize/wordpiece_tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/util/text_util.h"
#include "core/workload/corpus.h"
#include "gpu/model/cross_encoder.h"
#include "gpu/model/encoder.h"
#include "gpu/src/model/encoder_forward_p.h"
#include "gpu/src/torch_error_p.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;
namespace fs = std::filesystem;

namespace {

void checkOptions(const EmbedderTrainOptions &o)
{
    const auto in = [](const char *name, int64_t v, int64_t lo, int64_t hi) {
        if (v < lo || v > hi)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{} is {}; expected {}..{}", name, v, lo, hi));
    };
    if (o.pairs.empty())
        in("concepts", int64_t(o.concepts), 2, 100000);
    else if (!(o.validationShare > 0 && o.validationShare < 1))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("validation is {}; --pairs needs a share in (0, 1) to judge and stop on",
                                o.validationShare));
    in("eval-every", o.evalEvery, 1, 10000000);
    in("patience", o.patience, 0, 1000000);
    if (!o.init.empty() && o.pairs.empty())
        throw Error(ErrorCode::InvalidArgument, "--init fine-tunes on labelled pairs: give --pairs FILE");
    in("vocab", o.vocabSize, 64, 1 << 20);
    in("hidden", o.hidden, 8, 4096);
    in("layers", o.layers, 1, 48);
    in("heads", o.heads, 1, 64);
    in("intermediate", o.intermediate, 8, 16384);
    in("max-positions", o.maxPositions, 8, 4096);
    in("steps", o.steps, 1, 10000000);
    in("batch", o.batch, 2, 4096);
    in("warmup", o.warmup, 0, 10000000);
    in("eval-pairs", int64_t(o.evalPairs), 10, 10000000);
    in("threads", o.threads, 0, kMaxThreads);
    if (o.hidden % o.heads != 0)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("heads ({}) must divide hidden ({})", o.heads, o.hidden));
    if (!(o.lr > 0) || !(o.temperature > 0))
        throw Error(ErrorCode::InvalidArgument, "lr and temperature must be positive");
    if (o.out.empty())
        throw Error(ErrorCode::InvalidArgument, "an output directory is needed (--out DIR)");
}

// Every training question: each concept's lemmas in each training template (the vocabulary's and
// the IDF's texts; no labels).
std::vector<std::string> vocabularyTexts(const std::vector<core::ParaphraseConcept> &concepts)
{
    std::vector<std::string> out;
    for (const auto &c : concepts)
        for (const auto &l : c.lemmas)
            for (const auto &t : core::questionTemplates())
                if (!t.validation)
                    out.push_back(core::renderQuestion(t, l));
    return out;
}

// BERT's initialisation: normal(0, 0.02) matrices and embeddings, zero biases, unit LayerNorms.
detail::EncoderWeights initialWeights(const core::EncoderConfig &c)
{
    detail::EncoderWeights w;
    w.layers.resize(size_t(c.numLayers));
    const auto shapes = core::EncoderCheckpoint::requiredTensors(c);
    auto named = w.named();
    for (size_t i = 0; i < named.size(); ++i) {
        const std::string &name = shapes[i].first;
        const auto &shape = shapes[i].second;
        torch::Tensor t;
        if (name.find("LayerNorm.weight") != std::string::npos)
            t = torch::ones(shape);
        else if (shape.size() == 1)
            t = torch::zeros(shape);
        else
            t = torch::randn(shape) * 0.02;
        *named[i].second = t.set_requires_grad(true);
    }
    return w;
}

// The encoder's sizes and the optimisation schedule, as both trainers log them.
nlohmann::json modelAndScheduleJson(const EmbedderTrainOptions &o)
{
    return {{"hidden", o.hidden},
            {"layers", o.layers},
            {"heads", o.heads},
            {"intermediate", o.intermediate},
            {"max_positions", o.maxPositions},
            {"steps", o.steps},
            {"batch", o.batch},
            {"lr", o.lr},
            {"warmup", o.warmup},
            {"temperature", o.temperature},
            {"seed", o.seed}};
}

// AdamW with decoupled weight decay on the matrices only (decay: 0.01), as BERT trains.
torch::optim::AdamW makeOptimizer(const std::vector<torch::Tensor> &decay,
                                  const std::vector<torch::Tensor> &noDecay, double lr)
{
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(lr).weight_decay(0.01)));
    groups.emplace_back(noDecay, std::make_unique<torch::optim::AdamWOptions>(
                                     torch::optim::AdamWOptions(lr).weight_decay(0.0)));
    return torch::optim::AdamW(groups, torch::optim::AdamWOptions(lr));
}

// Linear warmup, then cosine decay to 0 at the last step.
void setScheduledLr(torch::optim::AdamW &opt, const EmbedderTrainOptions &o, int step)
{
    const double lr =
        step < o.warmup
            ? o.lr * double(step + 1) / double(o.warmup)
            : o.lr * 0.5 *
                  (1 + std::cos(M_PI * double(step - o.warmup) / double(std::max(1, o.steps - o.warmup))));
    for (auto &g : opt.param_groups())
        static_cast<torch::optim::AdamWOptions &>(g.options()).lr(lr);
}

// values[i] as float32 vectors under names[i]'s name: what the HF writers take.
std::map<std::string, std::vector<float>>
floatWeights(const std::vector<std::pair<std::string, torch::Tensor *>> &names,
             const std::vector<torch::Tensor> &values)
{
    std::map<std::string, std::vector<float>> out;
    for (size_t i = 0; i < names.size(); ++i) {
        const auto c = values[i].detach().to(torch::kFloat32).contiguous();
        out[names[i].first] = std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    }
    return out;
}

struct Batch
{
    torch::Tensor ids, mask;
};

struct PairBatch
{
    torch::Tensor ids, mask, types;
};

PairBatch padPairs(const std::vector<detail::EncodedPair> &pairs)
{
    size_t T = 0;
    for (const auto &p : pairs)
        T = std::max(T, p.ids.size());
    const size_t B = pairs.size();
    std::vector<int64_t> ids(B * T, 0), keep(B * T, 0), types(B * T, 0);
    for (size_t b = 0; b < B; ++b)
        for (size_t i = 0; i < pairs[b].ids.size(); ++i) {
            ids[b * T + i] = pairs[b].ids[i];
            types[b * T + i] = pairs[b].types[i];
            keep[b * T + i] = 1;
        }
    const auto n = int64_t(B), t = int64_t(T);
    return {torch::tensor(ids).view({n, t}), torch::tensor(keep).view({n, t}) != 0,
            torch::tensor(types).view({n, t})};
}

Batch pad(const std::vector<std::vector<int>> &seqs)
{
    size_t T = 0;
    for (const auto &s : seqs)
        T = std::max(T, s.size());
    std::vector<int64_t> ids(seqs.size() * T, 0), keep(seqs.size() * T, 0);
    for (size_t b = 0; b < seqs.size(); ++b)
        for (size_t i = 0; i < seqs[b].size(); ++i) {
            ids[b * T + i] = seqs[b][i];
            keep[b * T + i] = 1;
        }
    const auto n = int64_t(seqs.size());
    return {torch::tensor(ids).view({n, int64_t(T)}), torch::tensor(keep).view({n, int64_t(T)}) != 0};
}

std::vector<double> cosines(core::Embedder &e, const std::vector<core::LabelledPair> &pairs)
{
    std::vector<double> out;
    out.reserve(pairs.size());
    for (const auto &p : pairs) {
        const auto a = e.embed(p.a), b = e.embed(p.b);
        double d = 0;
        for (size_t i = 0; i < a.size(); ++i)
            d += double(a[i]) * b[i];
        out.push_back(d);
    }
    return out;
}

nlohmann::json separationJson(const core::PairSeparation &s)
{
    return {{"auc", s.auc},
            {"near_miss_auc", s.nearMissAuc},
            {"recall_at_precision_0_9", s.recallAtPrecision90},
            {"threshold_at_precision_0_9", s.thresholdAtPrecision90}};
}

} // namespace

namespace {

EmbedderTrainResult trainOnWordNet(const EmbedderTrainOptions &o, const EmbedderProgressFn &progress)
{
    core::claimOutputDirectory(o.out, "--out", o.force);
    const auto start = core::Clock::now();
    const auto wordnet = core::WordNet::load(o.wordnetDir);
    const auto concepts = core::paraphraseConcepts(wordnet, o.concepts, o.holdOutEvery);
    const auto texts = vocabularyTexts(concepts);
    core::WordPieceOptions wpo; // lower-cased, accents stripped: BERT uncased's defaults
    const auto tokens = core::buildWordPieceVocab(texts, size_t(o.vocabSize), wpo);
    const auto tokenizer = core::WordPieceTokenizer::fromTokens(tokens, wpo, "embedder vocabulary");

    core::EncoderConfig cfg;
    cfg.vocabSize = int(tokens.size());
    cfg.hiddenSize = o.hidden;
    cfg.numLayers = o.layers;
    cfg.numHeads = o.heads;
    cfg.intermediateSize = o.intermediate;
    cfg.maxPositions = o.maxPositions;
    cfg.typeVocabSize = 2;
    cfg.pooling = core::Pooling::Mean;
    cfg.normalize = true;
    cfg.maxSeqLength = o.maxPositions;
    cfg.validate("embedder");

    EmbedderTrainResult result;
    result.vocabSize = cfg.vocabSize;
    result.parameters = cfg.parameterCount();
    const auto encode = [&](const std::string &text) {
        auto ids = tokenizer->encode(text, true);
        if (int(ids.size()) > cfg.maxPositions) {
            const int last = ids.back();
            ids.resize(size_t(cfg.maxPositions));
            ids.back() = last;
        }
        return ids;
    };

    at::set_num_threads(o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency())));
    torch::manual_seed(o.seed);
    detail::EncoderWeights w = detail::translateTorch("embedder init", [&] { return initialWeights(cfg); });
    std::vector<torch::Tensor> decay, noDecay;
    for (const auto &[name, t] : w.named())
        (t->dim() == 2 && name.find("embeddings") == std::string::npos ? decay : noDecay).push_back(*t);
    torch::optim::AdamW opt = makeOptimizer(decay, noDecay, o.lr);
    std::vector<torch::Tensor> params;
    for (const auto &[name, t] : w.named())
        params.push_back(*t);

    core::SeededRandom rng(o.seed);
    double lossSum = 0;
    int lossCount = 0;
    for (int step = 0; step < o.steps; ++step) {
        setScheduledLr(opt, o, step);
        std::vector<std::vector<int>> seqs(size_t(3 * o.batch));
        for (int b = 0; b < o.batch; ++b) {
            const auto t = core::sampleTriple(concepts, rng);
            seqs[size_t(b)] = encode(t.anchor);
            seqs[size_t(o.batch + b)] = encode(t.positive);
            seqs[size_t(2 * o.batch + b)] = encode(t.negative);
        }
        const double loss = detail::translateTorch("embedder step", [&] {
            const Batch in = pad(seqs);
            auto v = detail::poolHidden(detail::encoderHidden(w, cfg, in.ids, in.mask), in.mask, cfg.pooling);
            v = torch::nn::functional::normalize(v, torch::nn::functional::NormalizeFuncOptions().dim(1));
            const auto anchors = v.narrow(0, 0, o.batch), candidates = v.narrow(0, o.batch, 2 * o.batch);
            const auto logits = torch::matmul(anchors, candidates.t()) / o.temperature; // [B, 2B]
            const auto l =
                torch::nn::functional::cross_entropy(logits, torch::arange(o.batch, torch::kInt64));
            opt.zero_grad();
            l.backward();
            torch::nn::utils::clip_grad_norm_(params, 1.0);
            opt.step();
            return l.item<double>();
        });
        lossSum += loss;
        ++lossCount;
        if ((step + 1) % 100 == 0 || step + 1 == o.steps) {
            result.losses.emplace_back(step + 1, lossSum / lossCount);
            lossSum = 0;
            lossCount = 0;
        }
        if (progress && !progress(step + 1, o.steps, loss, std::nan(""))) {
            result.cancelled = true;
            result.seconds = core::msSince(start) / 1000.0;
            return result;
        }
    }

    std::vector<torch::Tensor> trainedNow;
    for (const auto &[name, t] : w.named())
        trainedNow.push_back(*t);
    const auto weights = floatWeights(w.named(), trainedNow);
    const auto pairs = core::heldOutPairs(concepts, o.evalPairs, o.seed + 1000);
    core::writeDirectoryAtomic(o.out, "--out", o.force, [&](const fs::path &tmp) {
        core::writeEncoderHf(tmp, cfg, weights);
        core::writeWordPieceVocab(tmp, tokens, wpo);
        LoadOptions lo;
        lo.threads = o.threads;
        EncoderEmbedder trained(tmp, lo);
        core::LexicalEmbedder lexical;
        core::LexicalEmbedder idf; // fitted on the texts it will compare, as the tier fits it (no labels)
        std::vector<std::string> pairTexts;
        for (const auto &pr : pairs)
            pairTexts.insert(pairTexts.end(), {pr.a, pr.b});
        idf.fitIdf(pairTexts);
        result.evaluation = {{"trained", core::separation(pairs, cosines(trained, pairs))},
                             {"lexical", core::separation(pairs, cosines(lexical, pairs))},
                             {"lexical-idf", core::separation(pairs, cosines(idf, pairs))}};
        result.seconds = core::msSince(start) / 1000.0;
        nlohmann::json log;
        log["options"] = modelAndScheduleJson(o);
        log["options"]["concepts"] = o.concepts;
        log["options"]["hold_out_every"] = o.holdOutEvery;
        log["options"]["vocab_target"] = o.vocabSize;
        log["vocab_size"] = cfg.vocabSize;
        log["parameters"] = result.parameters;
        log["seconds"] = result.seconds;
        log["losses"] = nlohmann::json::array();
        for (const auto &[step, loss] : result.losses)
            log["losses"].push_back({{"step", step}, {"loss", loss}});
        log["held_out_pairs"] = pairs.size();
        for (const auto &e : result.evaluation)
            log["evaluation"][e.embedder] = separationJson(e.separation);
        core::writeFileAtomic(tmp / "train_log.json", log.dump(2) + "\n");
    });
    return result;
}

} // namespace

namespace {

// ---- learning from labelled pairs ----

enum class PairObjective
{
    Embedder, // a bi-encoder: cosines of pooled vectors
    Verifier  // a cross-encoder: a pair classifier over both texts
};

struct PairModel
{
    core::EncoderConfig cfg;
    detail::CrossEncoderHead head; // the verifier's
    int labels = 1;
    std::unique_ptr<core::Tokenizer> tokenizer;
    std::vector<std::string> newVocab; // the WordPiece vocabulary built here (empty when fine-tuning)
    core::WordPieceOptions wpo;
    fs::path initDir;
};

// The encoder to train: options.init's (its tokenizer, sizes and weights) or a new one.
// The verifier's head: from a cross-encoder being fine-tuned, else new (one label).
void initHead(PairModel &m, const EmbedderTrainOptions &o, const core::EncoderCheckpoint *ck)
{
    const bool fromModel = ck && isCrossEncoderModel(o.init);
    m.labels = fromModel ? core::crossEncoderInfo(o.init).labels : 1;
    const auto shapes = core::crossEncoderHeadTensors(m.cfg, m.labels);
    auto named = m.head.named();
    for (size_t i = 0; i < named.size(); ++i) {
        torch::Tensor t;
        if (fromModel) {
            std::vector<float> v = core::toFloatVector(ck->require(shapes[i].first, shapes[i].second));
            t = torch::from_blob(v.data(), shapes[i].second, torch::kFloat32).clone();
        } else {
            t = shapes[i].second.size() == 1 ? torch::zeros(shapes[i].second)
                                             : torch::randn(shapes[i].second) * 0.02;
        }
        *named[i].second = t.set_requires_grad(true);
    }
}

PairModel pairModel(const EmbedderTrainOptions &o, PairObjective objective,
                    const std::vector<core::LabelledPair> &train, detail::EncoderWeights &w)
{
    PairModel m;
    w.layers.clear();
    if (!o.init.empty()) {
        const auto ck = core::EncoderCheckpoint::open(o.init);
        const auto tok = ck.tokenizerPath();
        if (!tok)
            throw Error(ErrorCode::Config, o.init.string() + ": no tokenizer (tokenizer.json or vocab.txt)");
        m.tokenizer = core::loadTokenizer(*tok);
        m.cfg = ck.config();
        m.initDir = fs::is_directory(o.init) ? o.init : o.init.parent_path();
        if (ck.isGguf())
            throw Error(ErrorCode::InvalidArgument,
                        o.init.string() +
                            ": --init takes a sentence-transformers directory, not a GGUF file");
        w.layers.resize(size_t(m.cfg.numLayers));
        const auto shapes = core::EncoderCheckpoint::requiredTensors(m.cfg);
        auto named = w.named();
        for (size_t i = 0; i < named.size(); ++i) {
            std::vector<float> values = core::toFloatVector(ck.require(shapes[i].first, shapes[i].second));
            *named[i].second = torch::from_blob(values.data(), shapes[i].second, torch::kFloat32)
                                   .clone()
                                   .set_requires_grad(true);
        }
        if (objective == PairObjective::Verifier)
            initHead(m, o, &ck);
        return m;
    }
    std::vector<std::string> texts;
    for (const auto &p : train)
        texts.insert(texts.end(), {p.a, p.b});
    m.newVocab = core::buildWordPieceVocab(texts, size_t(o.vocabSize), m.wpo);
    m.tokenizer = core::WordPieceTokenizer::fromTokens(m.newVocab, m.wpo, "embedder vocabulary");
    m.cfg.vocabSize = int(m.newVocab.size());
    m.cfg.hiddenSize = o.hidden;
    m.cfg.numLayers = o.layers;
    m.cfg.numHeads = o.heads;
    m.cfg.intermediateSize = o.intermediate;
    m.cfg.maxPositions = o.maxPositions;
    m.cfg.typeVocabSize = 2;
    m.cfg.pooling = core::Pooling::Mean;
    m.cfg.normalize = true;
    m.cfg.maxSeqLength = o.maxPositions;
    m.cfg.validate("embedder");
    w = initialWeights(m.cfg);
    if (objective == PairObjective::Verifier)
        initHead(m, o, nullptr);
    return m;
}

// What must match for --resume to continue a saved state.
nlohmann::json resumeKey(const EmbedderTrainOptions &o, PairObjective objective, size_t pairs)
{
    auto key = modelAndScheduleJson(o);
    key.update({{"objective", objective == PairObjective::Verifier ? "verifier" : "embedder"},
                {"pairs", fs::absolute(o.pairs).string()},
                {"pair_count", pairs},
                {"init", o.init.empty() ? "" : fs::absolute(o.init).string()},
                {"vocab", o.vocabSize},
                {"margin", o.margin},
                {"validation", o.validationShare},
                {"eval_every", o.evalEvery}});
    return key;
}

struct PairState
{
    int step = 0, bestStep = 0, badEvals = 0;
    double bestAuc = -1;
    std::vector<std::pair<int, double>> losses, aucs;
};

void savePairState(const fs::path &dir, const PairState &st, const nlohmann::json &key,
                   std::vector<torch::Tensor> params, const std::vector<torch::Tensor> &best,
                   torch::optim::AdamW &opt)
{
    const std::string name = fmt::format("step-{:07d}", st.step);
    const fs::path at = dir / name;
    try {
        fs::create_directories(at);
        for (auto &t : params)
            t = t.detach();
        torch::save(params, (at / "params.pt").string());
        torch::save(best, (at / "best.pt").string());
        torch::save(opt, (at / "optimizer.pt").string());
    } catch (const c10::Error &e) {
        throw Error(ErrorCode::Io,
                    at.string() + ": cannot save training state: " + e.what_without_backtrace());
    } catch (const fs::filesystem_error &e) {
        throw Error(ErrorCode::Io, at.string() + ": cannot save training state: " + e.code().message());
    }
    nlohmann::json j{{"checkpoint", name},       {"settings", key},        {"step", st.step},
                     {"best_step", st.bestStep}, {"best_auc", st.bestAuc}, {"bad_evals", st.badEvals},
                     {"losses", st.losses},      {"aucs", st.aucs}};
    core::writeFileAtomic(dir / "state.json", j.dump(1)); // last: it names a complete checkpoint
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(dir, ec))
        if (e.is_directory() && e.path().filename() != name &&
            e.path().filename().string().starts_with("step-"))
            fs::remove_all(e.path(), ec);
}

// Loads the state into params/best/opt; the step to continue from.
PairState loadPairState(const fs::path &dir, const nlohmann::json &key, std::vector<torch::Tensor> &params,
                        std::vector<torch::Tensor> &best, torch::optim::AdamW &opt)
{
    const fs::path file = dir / "state.json";
    try {
        const auto j = nlohmann::json::parse(core::text::readWholeFile(file));
        for (const auto &[k, v] : key.items())
            if (!j.at("settings").contains(k) || j.at("settings").at(k) != v)
                throw Error(
                    ErrorCode::InvalidArgument,
                    fmt::format("{}: cannot resume: '{}' was {} and is now {} (start again without "
                                "--resume, or use the first run's settings and pairs)",
                                file.string(), k,
                                j.at("settings").contains(k) ? j.at("settings").at(k).dump() : "absent",
                                v.dump()));
        PairState st;
        st.step = j.at("step");
        st.bestStep = j.at("best_step");
        st.bestAuc = j.at("best_auc");
        st.badEvals = j.at("bad_evals");
        st.losses = j.at("losses").get<std::vector<std::pair<int, double>>>();
        st.aucs = j.at("aucs").get<std::vector<std::pair<int, double>>>();
        const fs::path at = dir / j.at("checkpoint").get<std::string>();
        std::vector<torch::Tensor> saved, savedBest;
        torch::load(saved, (at / "params.pt").string());
        torch::load(savedBest, (at / "best.pt").string());
        if (saved.size() != params.size() || savedBest.size() != params.size())
            throw Error(ErrorCode::Format, at.string() + ": the saved weights do not fit the encoder");
        torch::NoGradGuard ng;
        for (size_t i = 0; i < params.size(); ++i) {
            if (!saved[i].sizes().equals(params[i].sizes()) ||
                !savedBest[i].sizes().equals(params[i].sizes()))
                throw Error(ErrorCode::Shape,
                            fmt::format("{}: saved tensor {} has another shape", at.string(), i));
            params[i].copy_(saved[i]);
            best[i] = savedBest[i];
        }
        torch::load(opt, (at / "optimizer.pt").string());
        return st;
    } catch (const nlohmann::json::exception &e) {
        throw Error(ErrorCode::Format, file.string() + ": " + e.what());
    } catch (const c10::Error &e) {
        throw Error(ErrorCode::Format,
                    dir.string() + ": cannot read training state: " + e.what_without_backtrace());
    }
}

// Cosines of the pairs under the weights being trained (no gradients), in batches.
std::vector<double> pairCosines(const detail::EncoderWeights &w, const core::EncoderConfig &cfg,
                                const std::function<std::vector<int>(const std::string &)> &encode,
                                const std::vector<core::LabelledPair> &pairs)
{
    torch::NoGradGuard ng;
    std::vector<double> out;
    out.reserve(pairs.size());
    constexpr size_t kChunk = 64;
    for (size_t at = 0; at < pairs.size(); at += kChunk) {
        const size_t n = std::min(kChunk, pairs.size() - at);
        std::vector<std::vector<int>> seqs;
        for (size_t i = 0; i < n; ++i)
            seqs.push_back(encode(pairs[at + i].a));
        for (size_t i = 0; i < n; ++i)
            seqs.push_back(encode(pairs[at + i].b));
        const Batch in = pad(seqs);
        auto v = detail::poolHidden(detail::encoderHidden(w, cfg, in.ids, in.mask), in.mask, cfg.pooling);
        v = torch::nn::functional::normalize(v, torch::nn::functional::NormalizeFuncOptions().dim(1));
        const auto c =
            (v.narrow(0, 0, int64_t(n)) * v.narrow(0, int64_t(n), int64_t(n))).sum(1).to(torch::kFloat64);
        for (size_t i = 0; i < n; ++i)
            out.push_back(c[int64_t(i)].item<double>());
    }
    return out;
}

// P(the same) of the pairs under the verifier being trained (no gradients), in batches.
std::vector<double> pairScores(const detail::EncoderWeights &w, const detail::CrossEncoderHead &head,
                               const core::EncoderConfig &cfg, const core::Tokenizer &tok,
                               const std::vector<core::LabelledPair> &pairs)
{
    torch::NoGradGuard ng;
    std::vector<double> out;
    out.reserve(pairs.size());
    constexpr size_t kChunk = 64;
    for (size_t at = 0; at < pairs.size(); at += kChunk) {
        std::vector<detail::EncodedPair> batch;
        for (size_t i = at; i < std::min(pairs.size(), at + kChunk); ++i)
            batch.push_back(detail::encodePair(tok, pairs[i].a, pairs[i].b, size_t(cfg.sequenceLimit())));
        const auto in = padPairs(batch);
        const auto p = detail::crossEncoderProbability(
                           detail::crossEncoderLogits(w, head, cfg, in.ids, in.mask, in.types))
                           .to(torch::kFloat64);
        for (int64_t i = 0; i < p.size(0); ++i)
            out.push_back(p[i].item<double>());
    }
    return out;
}

EmbedderEvaluation evaluationOf(const std::string &name, const std::vector<core::LabelledPair> &pairs,
                                const std::vector<double> &sims)
{
    return {name, core::separation(pairs, sims), core::averagePrecision(pairs, sims),
            core::precisionRecallCurve(pairs, sims, 64)};
}

nlohmann::json evaluationJson(const EmbedderEvaluation &e, const std::vector<core::LabelledPair> &pairs,
                              const std::vector<double> &sims)
{
    auto j = separationJson(e.separation);
    j.erase("near_miss_auc");
    j["average_precision"] = e.averagePrecision;
    const auto at9 = core::thresholdForPrecision(pairs, sims, 0.9);
    j["at_precision_0_9"] = {
        {"threshold", std::isfinite(at9.threshold) ? nlohmann::json(at9.threshold) : nullptr},
        {"precision", at9.precision},
        {"recall", at9.recall}};
    j["curve"] = nlohmann::json::array();
    for (const auto &p : e.curve)
        j["curve"].push_back({{"threshold", p.threshold},
                              {"precision", p.precision},
                              {"recall", p.recall},
                              {"served", p.served}});
    return j;
}

EmbedderTrainResult trainOnPairs(const EmbedderTrainOptions &o, PairObjective objective,
                                 const EmbedderProgressFn &progress)
{
    const bool verifier = objective == PairObjective::Verifier;
    core::claimOutputDirectory(o.out, "--out", o.force);
    const auto start = core::Clock::now();
    EmbedderTrainResult result;
    const auto file = core::readLabelledPairs(o.pairs);
    result.warnings = file.warnings.messages();
    result.warningCount = file.warnings.total();
    const auto split = core::splitPairsByText(file.pairs, o.validationShare, o.seed);
    std::vector<const core::LabelledPair *> pos, neg;
    for (const auto &p : split.train)
        (p.duplicate ? pos : neg).push_back(&p);
    size_t validDup = 0;
    for (const auto &p : split.validation)
        validDup += p.duplicate ? 1 : 0;
    if (pos.size() < 2)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: {} duplicate pairs to train on; at least 2 are needed", o.pairs.string(),
                                pos.size()));
    if (verifier && neg.empty())
        throw Error(ErrorCode::InvalidArgument,
                    o.pairs.string() +
                        ": no non-duplicate pair to train on; a verifier learns from both labels");
    if (validDup == 0 || validDup == split.validation.size())
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: the validation share ({} pairs) has {} duplicates; it needs both labels "
                                "(raise --validation or give more pairs)",
                                o.pairs.string(), split.validation.size(), validDup));
    result.trainPairs = split.train.size();
    result.validationPairs = split.validation.size();

    at::set_num_threads(o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency())));
    torch::manual_seed(o.seed);
    detail::EncoderWeights w;
    PairModel m =
        detail::translateTorch("embedder init", [&] { return pairModel(o, objective, split.train, w); });
    const core::EncoderConfig &cfg = m.cfg;
    result.vocabSize = cfg.vocabSize;
    result.parameters = cfg.parameterCount();
    const auto encode = [&](const std::string &text) {
        auto ids = m.tokenizer->encode(text, true);
        const size_t limit = size_t(cfg.sequenceLimit());
        if (ids.size() > limit) { // keep the start and the closing [SEP], as EncoderEmbedder does
            const int last = ids.back();
            ids.resize(limit);
            if (m.tokenizer->isSpecial(last))
                ids.back() = last;
        }
        return ids;
    };

    // every trained tensor under its name: the encoder's, and the verifier's head
    auto trained = w.named();
    if (verifier)
        for (const auto &n : m.head.named())
            trained.push_back(n);
    std::vector<torch::Tensor> decay, noDecay, params;
    for (const auto &[name, t] : trained) {
        (t->dim() == 2 && name.find("embeddings") == std::string::npos ? decay : noDecay).push_back(*t);
        params.push_back(*t);
    }
    torch::optim::AdamW opt = makeOptimizer(decay, noDecay, o.lr);
    std::vector<torch::Tensor> best;
    for (const auto &t : params)
        best.push_back(t.detach().clone());

    const fs::path stateDir = o.out.string() + ".train_state";
    const auto key = resumeKey(o, objective, file.pairs.size());
    PairState st;
    if (o.resume && fs::exists(stateDir / "state.json")) {
        st = detail::translateTorch("embedder resume",
                                    [&] { return loadPairState(stateDir, key, params, best, opt); });
        result.resumedFrom = true;
    }

    double lossSum = 0;
    int lossCount = 0;
    const int nNeg = neg.empty() ? 0 : std::max(1, o.batch / 2);
    bool stop = false;
    while (st.step < o.steps && !stop) {
        const int step = st.step;
        setScheduledLr(opt, o, step);
        // batch `step` is a pure function of the seed and the step, so a resumed run draws the same
        core::SeededRandom rng(o.seed * 0x9E3779B97F4A7C15ull + uint64_t(step) + 1);
        double loss = 0;
        if (verifier) { // half duplicates, half not, in either order
            std::vector<detail::EncodedPair> batch;
            std::vector<float> labels;
            for (int k = 0; k < o.batch; ++k) {
                const bool dup = k % 2 == 0;
                const auto *p = dup ? pos[rng.below(pos.size())] : neg[rng.below(neg.size())];
                const bool flip = rng.chance(0.5);
                batch.push_back(detail::encodePair(*m.tokenizer, flip ? p->b : p->a, flip ? p->a : p->b,
                                                   size_t(cfg.sequenceLimit())));
                labels.push_back(dup ? 1.0f : 0.0f);
            }
            loss = detail::translateTorch("verifier step", [&] {
                const auto in = padPairs(batch);
                const auto logits = detail::crossEncoderLogits(w, m.head, cfg, in.ids, in.mask, in.types);
                const auto target = torch::tensor(labels);
                // one label: its logit; more: label 1's log-odds against the rest
                const auto z = logits.size(1) == 1
                                   ? logits.select(1, 0)
                                   : logits.select(1, 1) - torch::logsumexp(logits.narrow(1, 0, 1), 1);
                const auto l = torch::binary_cross_entropy_with_logits(z, target);
                opt.zero_grad();
                l.backward();
                torch::nn::utils::clip_grad_norm_(params, 1.0);
                opt.step();
                return l.item<double>();
            });
        } else {
            const int nPos = std::min<int>(o.batch, int(pos.size()));
            std::vector<std::vector<int>> seqs;
            std::vector<size_t> chosen;
            while (int(chosen.size()) < nPos) { // distinct duplicates: each row's positive is its own
                const size_t i = rng.below(pos.size());
                if (std::find(chosen.begin(), chosen.end(), i) == chosen.end())
                    chosen.push_back(i);
            }
            for (size_t i : chosen) { // a duplicate either way round
                const bool flip = rng.chance(0.5);
                seqs.push_back(encode(flip ? pos[i]->b : pos[i]->a));
                seqs.push_back(encode(flip ? pos[i]->a : pos[i]->b));
            }
            for (int k = 0; k < nNeg; ++k) {
                const auto *p = neg[rng.below(neg.size())];
                seqs.push_back(encode(p->a));
                seqs.push_back(encode(p->b));
            }
            loss = detail::translateTorch("embedder step", [&] {
                const Batch in = pad(seqs);
                auto v =
                    detail::poolHidden(detail::encoderHidden(w, cfg, in.ids, in.mask), in.mask, cfg.pooling);
                v = torch::nn::functional::normalize(v, torch::nn::functional::NormalizeFuncOptions().dim(1));
                const auto rows = v.view({-1, 2, v.size(1)}); // [pairs, 2, H]
                const auto anchors = rows.narrow(0, 0, nPos).select(1, 0);
                const auto candidates = torch::cat({rows.narrow(0, 0, nPos).select(1, 1),
                                                    rows.narrow(0, nPos, nNeg).reshape({-1, v.size(1)})});
                const auto logits = torch::matmul(anchors, candidates.t()) / o.temperature;
                auto l = torch::nn::functional::cross_entropy(logits, torch::arange(nPos, torch::kInt64));
                if (nNeg > 0) {
                    const auto negCos =
                        (rows.narrow(0, nPos, nNeg).select(1, 0) * rows.narrow(0, nPos, nNeg).select(1, 1))
                            .sum(1);
                    l = l + torch::relu(negCos - o.margin).pow(2).mean();
                }
                opt.zero_grad();
                l.backward();
                torch::nn::utils::clip_grad_norm_(params, 1.0);
                opt.step();
                return l.item<double>();
            });
        }
        if (!std::isfinite(loss))
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{}: the training loss is {} at step {} (lower --lr)", o.pairs.string(),
                                    loss, step + 1));
        ++st.step;
        lossSum += loss;
        ++lossCount;
        double auc = std::nan("");
        if (st.step % o.evalEvery == 0 || st.step == o.steps) {
            st.losses.emplace_back(st.step, lossSum / lossCount);
            lossSum = 0;
            lossCount = 0;
            auc = detail::translateTorch("embedder validation", [&] {
                const auto scores = verifier ? pairScores(w, m.head, cfg, *m.tokenizer, split.validation)
                                             : pairCosines(w, cfg, encode, split.validation);
                return core::separation(split.validation, scores).auc;
            });
            st.aucs.emplace_back(st.step, auc);
            if (auc > st.bestAuc) {
                st.bestAuc = auc;
                st.bestStep = st.step;
                st.badEvals = 0;
                for (size_t i = 0; i < params.size(); ++i)
                    best[i] = params[i].detach().clone();
            } else if (o.patience > 0 && ++st.badEvals >= o.patience) {
                result.stoppedEarly = st.step < o.steps;
                stop = true;
            }
            detail::translateTorch("embedder state", [&] {
                savePairState(stateDir, st, key, params, best, opt);
                return 0;
            });
        }
        if (progress && !progress(st.step, o.steps, loss, auc)) {
            if (!std::isfinite(auc)) // keep what this run did for --resume
                detail::translateTorch("embedder state", [&] {
                    savePairState(stateDir, st, key, params, best, opt);
                    return 0;
                });
            result.cancelled = true;
            result.stepsDone = st.step;
            result.seconds = core::msSince(start) / 1000.0;
            return result;
        }
    }
    result.stepsDone = st.step;
    result.bestStep = st.bestStep;
    result.losses = st.losses;
    result.validationAuc = st.aucs;

    const auto weights = floatWeights(trained, best);
    core::writeDirectoryAtomic(o.out, "--out", o.force, [&](const fs::path &tmp) {
        if (verifier)
            core::writeCrossEncoderHf(tmp, cfg, m.labels, weights);
        else
            core::writeEncoderHf(tmp, cfg, weights);
        if (m.newVocab.empty()) { // the fine-tuned encoder keeps its tokenizer's files
            for (const char *f :
                 {"tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"})
                if (fs::exists(m.initDir / f))
                    fs::copy_file(m.initDir / f, tmp / f, fs::copy_options::overwrite_existing);
        } else {
            core::writeWordPieceVocab(tmp, m.newVocab, m.wpo);
        }
        LoadOptions lo;
        lo.threads = o.threads;
        core::LexicalEmbedder lexical, idf;
        std::vector<std::string> texts;
        for (const auto &p : split.validation)
            texts.insert(texts.end(), {p.a, p.b});
        idf.fitIdf(texts); // on the texts it compares, as the tier fits it (no labels)
        const auto &val = split.validation;
        std::vector<double> simT; // the written model's, reloaded as the tier will load it
        if (verifier) {
            CrossEncoder reloaded(tmp, lo);
            for (const auto &p : val)
                simT.push_back(reloaded.score(p.a, p.b));
        } else {
            EncoderEmbedder reloaded(tmp, lo);
            simT = cosines(reloaded, val);
        }
        const auto simL = cosines(lexical, val), simI = cosines(idf, val);
        result.evaluation = {evaluationOf("trained", val, simT), evaluationOf("lexical", val, simL),
                             evaluationOf("lexical-idf", val, simI)};
        result.seconds = core::msSince(start) / 1000.0;
        nlohmann::json log;
        log["options"] = resumeKey(o, objective, file.pairs.size());
        log["options"]["patience"] = o.patience;
        log["pairs_file"] = {{"path", o.pairs.string()},
                             {"format", file.format},
                             {"pairs", file.pairs.size()},
                             {"duplicates", file.duplicates},
                             {"skipped_lines", file.warnings.total()}};
        log["train_pairs"] = split.train.size();
        log["validation_pairs"] = split.validation.size();
        log["vocab_size"] = cfg.vocabSize;
        log["parameters"] = result.parameters;
        log["seconds"] = result.seconds;
        log["steps_done"] = result.stepsDone;
        log["best_step"] = result.bestStep;
        log["stopped_early"] = result.stoppedEarly;
        log["resumed"] = result.resumedFrom;
        log["losses"] = nlohmann::json::array();
        for (const auto &[s, l] : result.losses)
            log["losses"].push_back({{"step", s}, {"loss", l}});
        log["validation_auc"] = nlohmann::json::array();
        for (const auto &[s, a] : result.validationAuc)
            log["validation_auc"].push_back({{"step", s}, {"auc", a}});
        const std::vector<double> *sims[] = {&simT, &simL, &simI};
        for (size_t i = 0; i < result.evaluation.size(); ++i)
            log["evaluation"][result.evaluation[i].embedder] =
                evaluationJson(result.evaluation[i], val, *sims[i]);
        core::writeFileAtomic(tmp / "train_log.json", log.dump(2) + "\n");
    });
    std::error_code ec;
    fs::remove_all(stateDir, ec); // done: nothing left to resume
    return result;
}

} // namespace

EmbedderTrainResult trainEmbedder(const EmbedderTrainOptions &o, const EmbedderProgressFn &progress)
{
    checkOptions(o);
    return o.pairs.empty() ? trainOnWordNet(o, progress) : trainOnPairs(o, PairObjective::Embedder, progress);
}

EmbedderTrainResult trainVerifier(const EmbedderTrainOptions &o, const EmbedderProgressFn &progress)
{
    if (o.pairs.empty())
        throw Error(ErrorCode::InvalidArgument, "a verifier learns from labelled pairs: give --pairs FILE");
    checkOptions(o);
    return trainOnPairs(o, PairObjective::Verifier, progress);
}

} // namespace kvwb::gpu
