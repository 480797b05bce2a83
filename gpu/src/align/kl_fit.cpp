// The KL objective (alignment_p.h trainKlObjective): a fitted converter's maps trained further through
// frozen model B on what B predicts from the cache they write, not on how close its rows are.
#include "gpu/src/align/alignment_p.h"
#include "gpu/src/align/kv_map_p.h"
#include "gpu/src/model/model_grad_p.h"
#include "gpu/src/model/model_p.h"
#include "gpu/src/torch_error_p.h"

#include "core/util/atomic_file.h"
#include "core/util/clock.h"
#include "core/util/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>

namespace kvwb::gpu::detail {

using core::Error;
using core::ErrorCode;

namespace {

// Every layer's maps as tensors autograd trains, keys and values apart.
struct Params
{
    std::vector<MapTensors> keys, values; // [B layers]

    // The defined parts in a fixed order (the optimizer's and the state file's).
    std::vector<torch::Tensor> leaves() const
    {
        std::vector<torch::Tensor> out;
        for (const auto *kind : {&keys, &values})
            for (const MapTensors &m : *kind)
                for (const torch::Tensor *t : {&m.weight, &m.bias, &m.down, &m.up, &m.w1, &m.b1, &m.w2})
                    if (t->defined())
                        out.push_back(*t);
        return out;
    }
};

Params paramsOf(const std::vector<core::LayerConverter> &layers)
{
    Params p;
    for (const auto &l : layers) {
        p.keys.push_back(stackMaps(l.keys, torch::kCPU, fmt::format("layer {} key", l.targetLayer)));
        p.values.push_back(stackMaps(l.values, torch::kCPU, fmt::format("layer {} value", l.targetLayer)));
    }
    for (auto &t : p.leaves())
        t.requires_grad_(true);
    return p;
}

std::vector<core::LayerConverter> layersOf(const Params &p, std::vector<core::LayerConverter> like)
{
    torch::NoGradGuard noGrad;
    for (size_t l = 0; l < like.size(); ++l) {
        like[l].keys = unstackMaps(p.keys[l], like[l].keys);
        like[l].values = unstackMaps(p.values[l], like[l].values);
    }
    return like;
}

// A prompt the objective trains on: B's ids, where its continuation starts and ends.
struct Prompt
{
    int index = 0;
    std::vector<int> ids;
    int64_t cut = 0; // converted positions; ids[cut..end) run on top
    int64_t end = 0;
};

// Prompt p with transferKl's split (the last min(continuation, n / 2) of its n tokens), or nullopt
// unless its B tokens pair with A's rows and number 4 to B's context.
std::optional<Prompt> scoredPrompt(const core::ExperimentReader &f, int p, const Model &target,
                                   int continuation)
{
    if (!aligned(f, p, nullptr))
        return std::nullopt;
    const auto info = f.prompt(p);
    const int64_t t = int64_t(info.b.ids.size());
    if (t < 4 || t > target.contextLimit())
        return std::nullopt;
    const int64_t m = std::min<int64_t>(continuation, t / 2);
    return Prompt{p, std::vector<int>(info.b.ids.begin(), info.b.ids.end()), t - m, t};
}

// Sum over the prompt's continuation positions of KL(B's own || B's from the converted cache).
torch::Tensor promptLoss(const core::ExperimentReader &f, const Geometry &g,
                         const std::vector<core::LayerConverter> &layers, const Params &params,
                         const Model &target, const Prompt &pr)
{
    const int64_t t = int64_t(pr.ids.size()), m = pr.end - pr.cut, vocab = target.config().vocabSize;
    auto own = target.newCache(); // B's own prefill: the prefix, then the m positions' logits only
    target.forward(std::vector<int>(pr.ids.begin(), pr.ids.begin() + pr.cut), own, false);
    const auto ownLogits = // [m, vocab], no gradients
        target.forward(std::vector<int>(pr.ids.begin() + pr.cut, pr.ids.begin() + pr.end), own, true);
    const auto ownLog = torch::log_softmax(
        torch::from_blob(const_cast<float *>(ownLogits.data()), {m, vocab}, torch::kFloat32), -1);
    std::vector<torch::Tensor> keys(layers.size()), values(layers.size());
    for (int kv = 0; kv < 2; ++kv) {
        const auto xs = promptMapInputs(f, layers, pr.index, kv == 0, t);
        for (size_t l = 0; l < layers.size(); ++l) {
            const auto rows = mapOutputRows(layers[l], applyMaps(kv == 0 ? params.keys[l] : params.values[l],
                                                                 xs[l].narrow(1, 0, pr.cut)));
            (kv == 0 ? keys : values)[l] =
                rows.view({pr.cut, g.kvB, g.hdB}).transpose(0, 1); // [kvB, cut, hdB]
        }
    }
    const std::vector<int> rest(pr.ids.begin() + pr.cut, pr.ids.begin() + pr.end);
    const auto logits = ModelAccess::logitsAfter(target, keys, values, f.storage().keyForm, rest);
    return (ownLog.exp() * (ownLog - torch::log_softmax(logits, -1))).sum();
}

// The state file: the maps, the best maps, Adam's moments and the scores, one archive.
void saveState(const std::filesystem::path &file, const Params &p, const std::vector<torch::Tensor> &best,
               torch::optim::Adam &opt, const nlohmann::json &scores)
{
    torch::serialize::OutputArchive archive;
    const auto leaves = p.leaves();
    for (size_t i = 0; i < leaves.size(); ++i) {
        archive.write(fmt::format("param.{}", i), leaves[i].detach());
        archive.write(fmt::format("best.{}", i), best[i]);
    }
    torch::serialize::OutputArchive optimizer;
    opt.save(optimizer);
    archive.write("optimizer", optimizer);
    archive.write("scores", c10::IValue(scores.dump()));
    std::ostringstream out;
    archive.save_to(out);
    std::filesystem::create_directories(file.parent_path());
    core::writeFileAtomic(file, out.str());
}

// Reads saveState's file into p, best and opt; its scores. Error(InvalidArgument) naming the file
// when it was written by another fit (its key) or holds maps of other shapes.
nlohmann::json loadState(const std::filesystem::path &file, const std::string &key, Params &p,
                         std::vector<torch::Tensor> &best, torch::optim::Adam &opt)
{
    torch::serialize::InputArchive archive;
    archive.load_from(file.string());
    c10::IValue scoresValue;
    archive.read("scores", scoresValue);
    const auto scores = nlohmann::json::parse(scoresValue.toStringRef(), nullptr, false);
    for (const char *field :
         {"key", "epoch", "since_gain", "best_epoch", "start", "kept", "history", "train_history"})
        if (scores.is_discarded() || !scores.contains(field))
            throw Error(ErrorCode::Format, fmt::format("{}: its scores lack '{}'; remove it to start again",
                                                       file.string(), field));
    if (scores.value("key", std::string()) != key)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: written by a KL fit of other settings; remove it to start again",
                                file.string()));
    torch::NoGradGuard noGrad;
    const auto leaves = p.leaves();
    for (size_t i = 0; i < leaves.size(); ++i) {
        torch::Tensor cur, b;
        archive.read(fmt::format("param.{}", i), cur);
        archive.read(fmt::format("best.{}", i), b);
        if (!cur.sizes().equals(leaves[i].sizes()) || !b.sizes().equals(leaves[i].sizes()))
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{}: map part {} has another shape than this fit's", file.string(), i));
        leaves[i].copy_(cur);
        best[i] = b;
    }
    torch::serialize::InputArchive optimizer;
    archive.read("optimizer", optimizer);
    opt.load(optimizer);
    return scores;
}

nlohmann::json transferJson(const TransferKl &s)
{
    return {{"kl", s.kl},
            {"kl_no_prefix", s.klNoPrefix},
            {"top1", s.top1},
            {"prompts", s.prompts},
            {"tokens", s.tokens}};
}

TransferKl transferFromJson(const nlohmann::json &j)
{
    TransferKl s;
    s.kl = j.value("kl", kNaN);
    s.klNoPrefix = j.value("kl_no_prefix", kNaN);
    s.top1 = j.value("top1", kNaN);
    s.prompts = j.value("prompts", 0);
    s.tokens = j.value("tokens", int64_t(0));
    return s;
}

} // namespace

void checkKlTarget(const core::ExperimentReader &f, const Model &target, const std::vector<int> &train,
                   const std::vector<int> &valid)
{
    checkTarget(f, target);
    ModelAccess::checkDense(target);
    for (const auto *set : {&train, &valid}) {
        const bool usable = std::any_of(set->begin(), set->end(),
                                        [&](int p) { return scoredPrompt(f, p, target, 1).has_value(); });
        if (!usable)
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format("{}: no {} prompt of 4 or more tokens paired with A's rows: the KL objective "
                            "has nothing to {}",
                            f.path().string(), set == &train ? "training" : "validation",
                            set == &train ? "train on" : "choose its epoch on"));
    }
}

std::optional<std::vector<core::LayerConverter>>
trainKlObjective(const core::ExperimentReader &f, const std::vector<core::LayerConverter> &layers,
                 const Model &target, const std::vector<int> &train, const std::vector<int> &valid,
                 const KlOptions &o, KlFitStats *statsOut)
{
    checkTarget(f, target);
    if (int(layers.size()) != target.config().numLayers)
        throw Error(ErrorCode::Shape, fmt::format("{} layer maps for model B's {} layers", layers.size(),
                                                  target.config().numLayers));
    if (o.epochs < 1 || o.batch < 1 || o.continuation < 1 || o.patience < 1 || o.validationPrompts < 1 ||
        !(o.learningRate > 0))
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("KL objective: epochs {}, batch {}, continuation {}, patience {} and "
                                "validation prompts {} must be 1 or more, the learning rate {} above 0",
                                o.epochs, o.batch, o.continuation, o.patience, o.validationPrompts,
                                o.learningRate));
    const auto started = core::Clock::now();
    const Geometry g = geometry(f);
    KlFitStats stats;
    std::vector<Prompt> prompts;
    for (int p : train)
        if (auto pr = scoredPrompt(f, p, target, o.continuation)) {
            stats.trainTokens += pr->end - pr->cut;
            prompts.push_back(std::move(*pr));
        }
    stats.trainPrompts = int(prompts.size());
    if (prompts.empty())
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: no training prompt of 4 or more tokens paired with A's rows: the KL "
                                "objective has nothing to train on",
                                f.path().string()));
    const auto score = [&](const std::vector<core::LayerConverter> &maps) {
        return transferKl(f, maps, target, valid, o.validationPrompts, o.continuation);
    };
    // backward runs on this thread with the model's threads, outside inference mode
    JobScope scope(target.options().threads, false, /*inference=*/false);
    return translateTorch("KL objective", [&]() -> std::optional<std::vector<core::LayerConverter>> {
        Params params = paramsOf(layers);
        torch::optim::Adam opt(params.leaves(), torch::optim::AdamOptions(o.learningRate));
        std::vector<torch::Tensor> best;
        for (const auto &t : params.leaves())
            best.push_back(t.detach().clone());
        const std::filesystem::path stateFile =
            o.stateDir.empty() ? std::filesystem::path() : o.stateDir / "kl-state.pt";
        int firstEpoch = 1, sinceGain = 0;
        if (o.resume && !stateFile.empty() && std::filesystem::exists(stateFile)) {
            const auto s = loadState(stateFile, o.key, params, best, opt);
            try {
                firstEpoch = s.at("epoch").get<int>() + 1;
                sinceGain = s.at("since_gain").get<int>();
                stats.bestEpoch = s.at("best_epoch").get<int>();
                stats.start = transferFromJson(s.at("start"));
                stats.kept = transferFromJson(s.at("kept"));
                stats.history = s.at("history").get<std::vector<double>>();
                stats.trainHistory = s.at("train_history").get<std::vector<double>>();
                stats.epochs = firstEpoch - 1;
                stats.resumed = true;
            } catch (const nlohmann::json::exception &e) {
                throw Error(ErrorCode::Format,
                            fmt::format("{}: {}; remove it to start again", stateFile.string(), e.what()));
            }
        } else {
            stats.start = stats.kept = score(layers);
        }
        if (stats.start.prompts == 0)
            throw Error(
                ErrorCode::InvalidArgument,
                fmt::format("{}: no validation prompt of 4 or more tokens paired with A's rows: the KL "
                            "objective cannot choose its epoch",
                            f.path().string()));
        const int64_t stepsPerEpoch = (int64_t(prompts.size()) + o.batch - 1) / o.batch;
        const int64_t steps = stepsPerEpoch * o.epochs;
        const auto pastDeadline = [&] { return o.deadline && core::Clock::now() >= *o.deadline; };
        for (int epoch = firstEpoch; epoch <= o.epochs && sinceGain < o.patience; ++epoch) {
            if (pastDeadline()) { // no epoch starts after the deadline
                stats.deadlineReached = true;
                break;
            }
            std::vector<size_t> order(prompts.size());
            std::iota(order.begin(), order.end(), size_t(0));
            std::mt19937_64 rng(o.seed * 1000003ULL + uint64_t(epoch));
            std::shuffle(order.begin(), order.end(), rng);
            // each prompt's continuation of m tokens starts anywhere from a quarter of it: prefixes of
            // every length, and more distinct targets than the one split validation scores
            for (Prompt &pr : prompts) {
                const int64_t t = int64_t(pr.ids.size()), m = std::min<int64_t>(o.continuation, t / 2);
                const int64_t lo = std::max<int64_t>(1, t / 4), hi = t - m;
                pr.cut = lo + int64_t(rng() % uint64_t(hi - lo + 1));
                pr.end = pr.cut + m;
            }
            double trainSum = 0, trainTokens = 0; // the training KL as the epoch went
            for (int64_t step = 0; step < stepsPerEpoch; ++step) {
                if (pastDeadline()) {
                    stats.deadlineReached = true;
                    break;
                }
                const size_t from = size_t(step * o.batch),
                             to = std::min(order.size(), from + size_t(o.batch));
                int64_t tokens = 0;
                for (size_t i = from; i < to; ++i)
                    tokens += prompts[order[i]].end - prompts[order[i]].cut;
                opt.zero_grad();
                for (size_t i = from; i < to; ++i) {
                    const auto loss =
                        promptLoss(f, g, layers, params, target, prompts[order[i]]) / double(tokens);
                    loss.backward();
                    trainSum += loss.item<double>() * double(tokens);
                    trainTokens += tokens / double(to - from);
                }
                opt.step();
                if (o.progress && !o.progress((epoch - 1) * stepsPerEpoch + step + 1, steps, epoch))
                    return std::nullopt;
            }
            const auto maps = layersOf(params, layers);
            const TransferKl s = score(maps);
            stats.history.push_back(s.kl);
            stats.trainHistory.push_back(trainTokens > 0 ? trainSum / trainTokens : kNaN);
            stats.epochs = epoch;
            if (s.kl < stats.kept.kl * (1 - 1e-4)) {
                stats.kept = s;
                stats.bestEpoch = epoch;
                sinceGain = 0;
                torch::NoGradGuard noGrad;
                const auto leaves = params.leaves();
                for (size_t i = 0; i < leaves.size(); ++i)
                    best[i] = leaves[i].detach().clone();
            } else {
                ++sinceGain;
            }
            if (stats.deadlineReached) // an epoch the budget cut short is scored, never saved as done
                break;
            if (!stateFile.empty())
                saveState(stateFile, params, best, opt,
                          {{"key", o.key},
                           {"epoch", epoch},
                           {"since_gain", sinceGain},
                           {"best_epoch", stats.bestEpoch},
                           {"start", transferJson(stats.start)},
                           {"kept", transferJson(stats.kept)},
                           {"history", stats.history},
                           {"train_history", stats.trainHistory}});
        }
        {
            torch::NoGradGuard noGrad;
            const auto leaves = params.leaves();
            for (size_t i = 0; i < leaves.size(); ++i)
                leaves[i].copy_(best[i]);
        }
        stats.seconds = core::msSince(started) / 1000;
        if (statsOut)
            *statsOut = stats;
        return layersOf(params, layers);
    });
}

} // namespace kvwb::gpu::detail

namespace kvwb::gpu {

double klObjectiveLoss(const core::ExperimentReader &f, const std::vector<core::LayerConverter> &layers,
                       const Model &target, const std::vector<int> &prompts, int maxPrompts, int continuation)
{
    using namespace detail;
    checkTarget(f, target);
    if (int(layers.size()) != target.config().numLayers || continuation < 1)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{} layer maps for model B's {} layers, continuation {}", layers.size(),
                                target.config().numLayers, continuation));
    const Geometry g = geometry(f);
    JobScope scope(target.options().threads, false, /*inference=*/false);
    return translateTorch("KL objective loss", [&] {
        const Params params = paramsOf(layers);
        double sum = 0;
        int64_t tokens = 0;
        int taken = 0;
        for (int p : prompts) {
            if (taken >= maxPrompts)
                break;
            if (const auto pr = scoredPrompt(f, p, target, continuation)) {
                sum += promptLoss(f, g, layers, params, target, *pr).item<double>();
                tokens += pr->end - pr->cut;
                ++taken;
            }
        }
        return tokens > 0 ? sum / double(tokens) : kNaN;
    });
}

} // namespace kvwb::gpu
