#include "gpu/train/embedder_trainer.h"

#include "core/cache/semantic_tier.h"
#include "core/model/encoder_config.h"
#include "core/tokenize/wordpiece_tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/workload/corpus.h"
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
    in("concepts", int64_t(o.concepts), 2, 100000);
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

struct Batch
{
    torch::Tensor ids, mask;
};

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

EmbedderTrainResult trainEmbedder(const EmbedderTrainOptions &o, const EmbedderProgressFn &progress)
{
    checkOptions(o);
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
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(o.lr).weight_decay(0.01)));
    groups.emplace_back(noDecay, std::make_unique<torch::optim::AdamWOptions>(
                                     torch::optim::AdamWOptions(o.lr).weight_decay(0.0)));
    torch::optim::AdamW opt(groups, torch::optim::AdamWOptions(o.lr));
    std::vector<torch::Tensor> params;
    for (const auto &[name, t] : w.named())
        params.push_back(*t);

    core::SeededRandom rng(o.seed);
    double lossSum = 0;
    int lossCount = 0;
    for (int step = 0; step < o.steps; ++step) {
        const double lr = step < o.warmup ? o.lr * double(step + 1) / double(o.warmup)
                                          : o.lr * 0.5 *
                                                (1 + std::cos(M_PI * double(step - o.warmup) /
                                                              double(std::max(1, o.steps - o.warmup))));
        for (auto &g : opt.param_groups())
            static_cast<torch::optim::AdamWOptions &>(g.options()).lr(lr);
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
        if (progress && !progress(step + 1, o.steps, loss)) {
            result.cancelled = true;
            result.seconds = core::msSince(start) / 1000.0;
            return result;
        }
    }

    std::map<std::string, std::vector<float>> weights;
    for (const auto &[name, t] : w.named()) {
        const auto c = t->detach().to(torch::kFloat32).contiguous();
        weights[name] = std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    }
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
        log["options"] = {{"concepts", o.concepts},
                          {"hold_out_every", o.holdOutEvery},
                          {"vocab_target", o.vocabSize},
                          {"hidden", o.hidden},
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

} // namespace kvwb::gpu
