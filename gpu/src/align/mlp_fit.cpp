// The MLP converter family: per B layer and kind (keys, values), y = x W + b + gelu(x W1 + b1) W2,
// trained with LibTorch autograd on the captured rows. The skip path starts at the layer's ridge
// solution and the branch's output weight at zero, so training starts exactly at ridge and the
// validation loss chooses the epoch (epoch 0 is ridge itself): the MLP is never worse than ridge on
// the validation prompts.
//
// Rows stream from the experiment file: each epoch reads the training prompts in a seeded order into
// a shuffle buffer of at most MlpOptions::bufferBytes, shuffles it and cuts it into mini-batches, so
// the calibration set never has to fit in memory. The validation loss uses at most
// MlpOptions::validationRows rows of the validation prompts, held in memory.
#include "gpu/src/align/alignment_p.h"
#include "gpu/src/align/kv_map_p.h"
#include "gpu/src/torch_error_p.h"

#include "core/util/clock.h"
#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <random>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;
using detail::aligned;
using detail::Geometry;
using detail::geometry;
using detail::sourceRows;

namespace {

// One kind's rows of a prompt as [maps, tokens, in] and [maps, tokens, out]: one map (full) or
// one per kv head (head-matched: head h of every source layer side by side).
std::pair<torch::Tensor, torch::Tensor> promptRows(const core::ExperimentReader &f, const Geometry &g,
                                                   const core::LayerConverter &layer, int prompt, bool keys,
                                                   int64_t tokens)
{
    const int64_t blocks = int64_t(layer.sourceLayers.size());
    auto xs = sourceRows(f, layer.sourceLayers, prompt, keys, tokens, layer.features);
    auto ys = keys ? f.keys(core::ModelRole::B, layer.targetLayer, prompt)
                   : f.values(core::ModelRole::B, layer.targetLayer, prompt);
    auto y = torch::from_blob(ys.data(), {tokens, g.kvB, g.hdB}, torch::kFloat32);
    if (layer.features.any()) // full maps only: A's rows and the token features side by side
        return {
            torch::from_blob(xs.data(), {1, tokens, int64_t(xs.size()) / std::max<int64_t>(tokens, 1)},
                             torch::kFloat32)
                .clone(at::MemoryFormat::Contiguous),
            y.slice(0, 0, tokens).reshape({1, tokens, g.kvB * g.hdB}).clone(at::MemoryFormat::Contiguous)};
    auto x = torch::from_blob(xs.data(), {tokens, blocks, g.kvA, g.hdA}, torch::kFloat32);
    if (layer.headMatched)
        return {x.permute({2, 0, 1, 3})
                    .reshape({g.kvA, tokens, blocks * g.hdA})
                    .clone(at::MemoryFormat::Contiguous),
                y.slice(0, 0, tokens).permute({1, 0, 2}).clone(at::MemoryFormat::Contiguous)};
    return {x.reshape({1, tokens, blocks * g.kvA * g.hdA}).clone(at::MemoryFormat::Contiguous),
            y.slice(0, 0, tokens).reshape({1, tokens, g.kvB * g.hdB}).clone(at::MemoryFormat::Contiguous)};
}

// The trainable form of one kind's maps: the skip path (from ridge), the branch, and the input
// normalisation of the branch (folded into W1, b1 when training ends).
struct Net
{
    torch::Tensor w, b;    // [maps, in, out], [maps, 1, out]
    torch::Tensor w1, b1;  // [maps, in, hidden], [maps, 1, hidden]: on normalised inputs
    torch::Tensor w2;      // [maps, hidden, out]
    torch::Tensor mu, inv; // [maps, 1, in]: branch input = (x - mu) * inv
    torch::Tensor yScale;  // [maps, 1, 1]: 1 / the targets' variance, so each map's loss is 1 - R^2-like

    std::vector<torch::Tensor> parameters() const { return {w, b, w1, b1, w2}; }

    torch::Tensor forward(const torch::Tensor &x) const
    {
        auto skip = torch::baddbmm(b, x, w);
        return skip + torch::bmm(torch::gelu(torch::baddbmm(b1, (x - mu) * inv, w1)), w2);
    }
    torch::Tensor loss(const torch::Tensor &x, const torch::Tensor &y) const
    {
        return ((forward(x) - y).pow(2).mean({1, 2}, true) * yScale).mean();
    }
    detail::MapTensors folded() const
    {
        torch::NoGradGuard ng;
        detail::MapTensors m;
        m.weight = w.detach().clone();
        m.bias = b.detach().clone();
        m.w1 = (w1 * inv.transpose(1, 2)).detach().clone();      // [maps, in, hidden]
        m.b1 = (b1 - torch::bmm(mu * inv, w1)).detach().clone(); // [maps, 1, hidden]
        m.w2 = w2.detach().clone();
        return m;
    }
    std::vector<torch::Tensor> snapshot() const
    {
        std::vector<torch::Tensor> s;
        for (const auto &p : parameters())
            s.push_back(p.detach().clone());
        return s;
    }
    void restore(const std::vector<torch::Tensor> &s)
    {
        torch::NoGradGuard ng;
        const auto ps = parameters();
        for (size_t i = 0; i < ps.size(); ++i)
            ps[i].copy_(s[i]);
    }
};

// Refuses options out of range, no validation prompts, and a start that is not a ridge map.
void checkMlpInputs(const core::ExperimentReader &f, const core::LayerConverter &ridge,
                    const std::vector<int> &valid, const MlpOptions &o)
{
    if (o.hidden < 1 || o.epochs < 0 || o.batch < 1 || !(o.learningRate > 0) || o.patience < 1)
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("MLP training needs hidden >= 1, epochs >= 0, batch >= 1, learning rate > 0 and "
                        "patience >= 1 (got {}, {}, {}, {}, {})",
                        o.hidden, o.epochs, o.batch, o.learningRate, o.patience));
    if (valid.empty())
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("{}: MLP training needs validation prompts for early stopping", f.path().string()));
    for (const auto *list : {&ridge.keys, &ridge.values})
        for (const core::KvMap &m : *list)
            if (m.rank > 0 || m.hidden > 0 || m.weight.empty())
                throw Error(ErrorCode::InvalidArgument,
                            fmt::format("layer {}: the MLP starts from a ridge map with its weights",
                                        ridge.targetLayer));
}

// Rows per kind (0: keys, 1: values): x [maps, rows, in], y [maps, rows, out].
struct KindRows
{
    std::array<torch::Tensor, 2> x, y;
};

// Validation rows, at most validationRows of them, per kind. Prompts that are not aligned are
// noted in skipped.
KindRows validationSet(const core::ExperimentReader &f, const Geometry &g, const core::LayerConverter &ridge,
                       const std::vector<int> &valid, const MlpOptions &o, std::vector<std::string> &skipped)
{
    KindRows v;
    std::array<std::vector<torch::Tensor>, 2> xs, ys;
    int64_t rows = 0;
    for (int p : valid) {
        if (rows >= o.validationRows)
            break;
        if (!aligned(f, p, &skipped))
            continue;
        for (int kv = 0; kv < 2; ++kv) {
            auto [x, y] = promptRows(f, g, ridge, p, kv == 0, int64_t(f.prompt(p).b.ids.size()));
            const int64_t take = std::min<int64_t>(x.size(1), o.validationRows - rows);
            xs[size_t(kv)].push_back(x.slice(1, 0, take));
            ys[size_t(kv)].push_back(y.slice(1, 0, take));
        }
        rows += xs[0].back().size(1);
    }
    if (rows < 2)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: the validation prompts give {} aligned rows; MLP early stopping "
                                "needs at least 2",
                                f.path().string(), rows));
    for (int kv = 0; kv < 2; ++kv) {
        v.x[size_t(kv)] = torch::cat(xs[size_t(kv)], 1);
        v.y[size_t(kv)] = torch::cat(ys[size_t(kv)], 1);
    }
    return v;
}

// The training prompts and how many of each one's rows are used: every aligned prompt, or
// the first ones (in the given order) up to maxTrainRows, the last one cut, as for ridge.
std::vector<std::pair<int, int64_t>> trainingPlan(const core::ExperimentReader &f,
                                                  const core::LayerConverter &ridge,
                                                  const std::vector<int> &train, const MlpOptions &o,
                                                  std::vector<std::string> &skipped)
{
    std::vector<std::pair<int, int64_t>> plan;
    int64_t rows = 0;
    for (int p : train) {
        if (o.maxTrainRows > 0 && rows >= o.maxTrainRows)
            break;
        if (!aligned(f, p, &skipped))
            continue;
        int64_t tokens = int64_t(f.prompt(p).b.ids.size());
        if (o.maxTrainRows > 0)
            tokens = std::min(tokens, o.maxTrainRows - rows);
        plan.emplace_back(p, tokens);
        rows += tokens;
    }
    if (rows < 2)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("{}: the training prompts give {} aligned rows for layer {}; the MLP "
                                "needs at least 2",
                                f.path().string(), rows, ridge.targetLayer));
    return plan;
}

// Both kinds' nets under training, their optimisers and early stopping's state. Starts at the
// ridge maps (the branch's output weight zero), with the validation loss of ridge as the best.
struct MlpTraining
{
    const KindRows &valid;
    std::array<Net, 2> nets;
    std::vector<std::unique_ptr<torch::optim::Adam>> optim;
    std::array<double, 2> best{}, ridgeLoss{};
    std::array<int, 2> bestEpoch = {0, 0}, bad = {0, 0}; // bad: epochs since the best
    std::array<std::vector<torch::Tensor>, 2> bestState;

    MlpTraining(const core::LayerConverter &ridge, const KindRows &v, const MlpOptions &o) : valid(v)
    {
        for (int kv = 0; kv < 2; ++kv) {
            const auto &maps = kv == 0 ? ridge.keys : ridge.values;
            const auto start =
                detail::stackMaps(maps, torch::kCPU, fmt::format("layer {}", ridge.targetLayer));
            Net &n = nets[size_t(kv)];
            const auto &x = v.x[size_t(kv)], &y = v.y[size_t(kv)];
            const int64_t mapsN = x.size(0), in = x.size(2), out = y.size(2);
            n.w = start.weight.clone().requires_grad_(true);
            n.b = start.bias.clone().requires_grad_(true);
            n.mu = x.mean(1, true);
            n.inv = 1.0 / (x.std(1, true, true) + 1e-6);
            n.w1 = (torch::randn({mapsN, in, int64_t(o.hidden)}) * std::sqrt(2.0 / double(in)))
                       .requires_grad_(true);
            n.b1 = torch::zeros({mapsN, 1, int64_t(o.hidden)}).requires_grad_(true);
            n.w2 = torch::zeros({mapsN, int64_t(o.hidden), out}).requires_grad_(true);
            n.yScale = 1.0 / (y.var(1, true, true).mean(2, true) + 1e-12);
        }
        for (const Net &n : nets)
            optim.push_back(std::make_unique<torch::optim::Adam>(n.parameters(),
                                                                 torch::optim::AdamOptions(o.learningRate)));
        best = {validationLoss(0), validationLoss(1)};
        ridgeLoss = best;
        bestState = {nets[0].snapshot(), nets[1].snapshot()};
    }

    double validationLoss(int kv) const
    {
        torch::NoGradGuard ng;
        return nets[size_t(kv)].loss(valid.x[size_t(kv)], valid.y[size_t(kv)]).item<double>();
    }

    // Trains on the buffered rows (emptying the buffers): shuffled, then cut into mini-batches, each
    // one step of every kind that has not stopped.
    void trainBuffer(std::array<std::vector<torch::Tensor>, 2> &bx,
                     std::array<std::vector<torch::Tensor>, 2> &by, int64_t buffered, const MlpOptions &o,
                     std::mt19937_64 &rng)
    {
        std::array<torch::Tensor, 2> X, Y;
        for (int kv = 0; kv < 2; ++kv) {
            X[size_t(kv)] = torch::cat(bx[size_t(kv)], 1);
            Y[size_t(kv)] = torch::cat(by[size_t(kv)], 1);
            bx[size_t(kv)].clear();
            by[size_t(kv)].clear();
        }
        std::vector<int64_t> perm(static_cast<size_t>(buffered));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        const auto idx = torch::from_blob(perm.data(), {buffered}, torch::kInt64);
        for (int64_t s = 0; s < buffered; s += o.batch) {
            const auto pick = idx.slice(0, s, std::min(buffered, s + o.batch));
            for (int kv = 0; kv < 2; ++kv) {
                if (bad[size_t(kv)] >= o.patience)
                    continue; // this kind has stopped
                auto &opt = *optim[size_t(kv)];
                opt.zero_grad();
                auto loss = nets[size_t(kv)].loss(X[size_t(kv)].index_select(1, pick),
                                                  Y[size_t(kv)].index_select(1, pick));
                loss.backward();
                opt.step();
            }
        }
    }

    // After an epoch: each kind still training keeps its state if the validation loss improved,
    // else counts one more bad epoch.
    void validate(int epoch, int patience)
    {
        for (int kv = 0; kv < 2; ++kv) {
            if (bad[size_t(kv)] >= patience)
                continue;
            const double v = validationLoss(kv);
            if (v < best[size_t(kv)] * (1 - 1e-4)) {
                best[size_t(kv)] = v;
                bestEpoch[size_t(kv)] = epoch;
                bestState[size_t(kv)] = nets[size_t(kv)].snapshot();
                bad[size_t(kv)] = 0;
            } else {
                ++bad[size_t(kv)];
            }
        }
    }
};

// One epoch: the planned prompts in a seeded order through the shuffle buffer of bufferRows rows,
// trained on each time it fills and at the end. Returns the rows trained on.
int64_t runEpoch(MlpTraining &t, const core::ExperimentReader &f, const Geometry &g,
                 const core::LayerConverter &ridge, const std::vector<std::pair<int, int64_t>> &plan,
                 int64_t bufferRows, const MlpOptions &o, std::mt19937_64 &rng)
{
    auto order = plan;
    std::shuffle(order.begin(), order.end(), rng);
    std::array<std::vector<torch::Tensor>, 2> bx, by;
    int64_t buffered = 0;
    int64_t trainRows = 0;
    const auto flush = [&] {
        if (buffered == 0)
            return;
        t.trainBuffer(bx, by, buffered, o, rng);
        trainRows += buffered;
        buffered = 0;
    };
    for (const auto &[p, tokens] : order) {
        for (int kv = 0; kv < 2; ++kv) {
            auto [x, y] = promptRows(f, g, ridge, p, kv == 0, tokens);
            bx[size_t(kv)].push_back(std::move(x));
            by[size_t(kv)].push_back(std::move(y));
        }
        buffered += bx[0].back().size(1);
        if (buffered >= bufferRows)
            flush();
    }
    flush();
    return trainRows;
}

} // namespace

std::optional<core::LayerConverter> trainMlpLayer(const core::ExperimentReader &f,
                                                  const core::LayerConverter &ridge,
                                                  const std::vector<int> &train,
                                                  const std::vector<int> &valid, const MlpOptions &o,
                                                  MlpFitStats *stats)
{
    checkMlpInputs(f, ridge, valid, o);
    const Geometry g = geometry(f);
    const auto started = core::Clock::now();
    return detail::translateTorch("MLP training", [&]() -> std::optional<core::LayerConverter> {
        c10::InferenceMode off(false);
        torch::AutoGradMode grad(true);
        torch::manual_seed(o.seed * 1000003ULL + uint64_t(ridge.targetLayer));
        std::mt19937_64 rng(o.seed * 7919ULL + uint64_t(ridge.targetLayer));
        std::vector<std::string> skipped;
        const KindRows v = validationSet(f, g, ridge, valid, o, skipped);
        const std::vector<std::pair<int, int64_t>> plan = trainingPlan(f, ridge, train, o, skipped);

        MlpTraining t(ridge, v, o);
        const int64_t in = v.x[0].size(2) + v.y[0].size(2);
        const int64_t bufferRows =
            std::max<int64_t>(o.batch, o.bufferBytes / std::max<int64_t>(1, 4 * 2 * in * v.x[0].size(0)));
        int epochs = 0;
        int64_t trainRows = 0;
        bool deadlineReached = false;
        for (int epoch = 1; epoch <= o.epochs; ++epoch) {
            if (t.bad[0] >= o.patience && t.bad[1] >= o.patience)
                break;
            if (o.deadline && core::Clock::now() >= *o.deadline) {
                deadlineReached = true;
                break;
            }
            trainRows = runEpoch(t, f, g, ridge, plan, bufferRows, o, rng);
            epochs = epoch;
            t.validate(epoch, o.patience);
            if (o.progress && !o.progress(epoch, o.epochs))
                return std::nullopt;
        }
        core::LayerConverter out = ridge;
        for (int kv = 0; kv < 2; ++kv) {
            t.nets[size_t(kv)].restore(t.bestState[size_t(kv)]);
            auto &list = kv == 0 ? out.keys : out.values;
            list = detail::unstackMaps(t.nets[size_t(kv)].folded(), list);
        }
        if (stats) {
            stats->epochs = epochs;
            stats->bestEpochKeys = t.bestEpoch[0];
            stats->bestEpochValues = t.bestEpoch[1];
            stats->ridgeLossKeys = t.ridgeLoss[0];
            stats->ridgeLossValues = t.ridgeLoss[1];
            stats->lossKeys = t.best[0];
            stats->lossValues = t.best[1];
            stats->trainRows = trainRows;
            stats->deadlineReached = deadlineReached;
            stats->seconds = core::msSince(started) / 1000;
            stats->warnings = std::move(skipped);
        }
        return out;
    });
}

} // namespace kvwb::gpu
