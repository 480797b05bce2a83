// What model B does with a target layer's keys and values, as metrics of their rows: the attention-
// aligned ridge family (alignment_p.h targetMetric) fits each map under them.
//
// Keys: an error e in the key at position n changes the logit of every query m >= n that sees it by
// q_m . R_n e (post-RoPE query, the key's rotation at n when the file keeps keys before RoPE), so the
// key metric is sum_n R_n^T (sum_{m >= n, within the window} q_m q_m^T) R_n over B's own queries on
// the calibration prompts, summed over the query heads of each kv head: a suffix sum of the queries'
// outer products, rotated at each key position with B's own RoPE tables.
// Values: an error e in a value of kv head h moves the output of each query head g it serves by about
// W_o[:, g] e (the attention weights aside), so the value metric is sum_g W_o[:, g]^T W_o[:, g].
#include "gpu/src/align/alignment_p.h"

#include "core/model/safetensors.h"
#include "core/util/error.h"
#include "gpu/src/model/rope_p.h"
#include "gpu/src/torch_error_p.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;
using detail::aligned;
using detail::checkTarget;
using detail::RopeTables;
using detail::translateTorch;

TargetMetric targetMetric(const core::ExperimentReader &f, const Model &target,
                          const std::vector<int> &prompts, int maxPrompts, int64_t chunkValues)
{
    checkTarget(f, target);
    const auto &cb = target.config();
    const int nh = cb.numHeads, kv = cb.numKvHeads, hd = cb.headDim, rep = nh / kv;
    const bool preRope = f.storage().keyForm == core::KeyForm::PreRope;
    TargetMetric out;
    translateTorch("attention metric", [&] {
        c10::InferenceMode guard;
        const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
        std::vector<torch::Tensor> keys(size_t(cb.numLayers));
        for (auto &k : keys)
            k = torch::zeros({kv, hd, hd}, f64);
        RopeTables rope(cb, torch::kCPU);
        for (int p : prompts) {
            if (out.prompts >= maxPrompts)
                break;
            if (!aligned(f, p, nullptr))
                continue;
            const auto info = f.prompt(p);
            const std::vector<int> ids(info.b.ids.begin(), info.b.ids.end());
            const int64_t t = int64_t(ids.size());
            if (t == 0)
                continue;
            auto cache = target.newCache();
            const auto queries = target.queries(ids, cache);
            for (int l = 0; l < cb.numLayers; ++l) {
                auto q = torch::from_blob(const_cast<float *>(queries[size_t(l)].data()), {kv, rep, t, hd})
                             .to(torch::kFloat64);
                const bool windowed = cb.isSlidingLayer(l) && cb.slidingWindow > 0 && cb.slidingWindow < t;
                // Key positions [from, to) at a time, last first, so that the [kv, positions, hd, hd]
                // suffix sums stay within chunkValues: later carries sum_{m >= to} outer[m]. A
                // sliding layer whose window the prompt exceeds takes the prompt whole (its sums are
                // cut at the window).
                const int64_t chunk =
                    windowed ? t : std::max<int64_t>(1, chunkValues / (int64_t(kv) * hd * hd));
                auto later = torch::zeros({kv, hd, hd}, f64);
                for (int64_t to = t; to > 0; to -= chunk) {
                    const int64_t from = std::max<int64_t>(0, to - chunk), n = to - from;
                    auto qc = q.narrow(2, from, n);
                    // per kv head and query position: the outer products of its query heads
                    auto outer = torch::einsum("grti,grtj->gtij", {qc, qc}); // [kv, n, hd, hd]
                    auto suffix = outer.flip(1).cumsum(1).flip(1) + later.unsqueeze(1);
                    later = suffix.select(1, 0).clone();
                    if (windowed) { // c[n] = sum_{n <= m < n + w}
                        const int64_t w = cb.slidingWindow;
                        auto beyond = torch::zeros_like(suffix);
                        beyond.narrow(1, 0, t - w).copy_(suffix.narrow(1, w, t - w));
                        suffix = suffix - beyond;
                    }
                    if (preRope) { // R_n^T c[n] R_n: rotate the rows at n, transpose, rotate again
                        for (int h = 0; h < kv; ++h) {
                            auto c =
                                suffix[h].permute({1, 0, 2}).to(torch::kFloat32).contiguous(); // [hd, n, hd]
                            auto x = rope.apply(c, l, from, true);                             // c[n] R_n
                            auto y = rope.apply(x.permute({2, 1, 0}).contiguous(), l, from, true); // R^T c R
                            keys[size_t(l)][h] += y.to(torch::kFloat64).sum(1);
                        }
                    } else {
                        keys[size_t(l)] += suffix.sum(1);
                    }
                }
            }
            ++out.prompts;
            out.tokens += t;
        }
        if (out.prompts == 0)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{}: no calibration prompt B tokenised to read its queries from "
                                    "(attention-aligned ridge)",
                                    f.path().string()));
        out.keys.resize(size_t(cb.numLayers));
        out.values.resize(size_t(cb.numLayers));
        for (int l = 0; l < cb.numLayers; ++l) {
            const std::string name = fmt::format("model.layers.{}.self_attn.o_proj.weight", l);
            const auto wo = core::toFloatVector(target.checkpoint().require(name, {}));
            if (wo.size() % size_t(int64_t(nh) * hd) != 0)
                throw Error(ErrorCode::Shape, fmt::format("{}: {} values, not a multiple of {} heads x {}",
                                                          name, wo.size(), nh, hd));
            const int64_t rows = int64_t(wo.size()) / (int64_t(nh) * hd);
            auto w =
                torch::from_blob(const_cast<float *>(wo.data()), {rows, kv, rep, hd}).to(torch::kFloat64);
            auto gram = torch::einsum("okri,okrj->kij", {w, w}); // [kv, hd, hd]
            for (int h = 0; h < kv; ++h) {
                const auto copy = [&](const torch::Tensor &m) { // symmetric to the last bit (RoPE is f32)
                    auto c = (0.5 * (m + m.t())).contiguous();
                    return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
                };
                out.keys[size_t(l)].push_back(copy(keys[size_t(l)][h]));
                out.values[size_t(l)].push_back(copy(gram[h]));
            }
        }
        return 0;
    });
    return out;
}

namespace detail {

std::vector<double> blockMetric(const std::vector<std::vector<double>> &heads, int hd)
{
    const size_t n = heads.size() * size_t(hd);
    std::vector<double> m(n * n, 0.0);
    for (size_t h = 0; h < heads.size(); ++h)
        for (int i = 0; i < hd; ++i)
            for (int j = 0; j < hd; ++j)
                m[(h * size_t(hd) + size_t(i)) * n + h * size_t(hd) + size_t(j)] =
                    heads[h][size_t(i) * size_t(hd) + size_t(j)];
    return m;
}

} // namespace detail

} // namespace kvwb::gpu
