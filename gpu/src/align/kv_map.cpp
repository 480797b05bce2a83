#include "gpu/src/align/kv_map_p.h"

#include "core/util/error.h"

#include <fmt/format.h>

namespace kvwb::gpu::detail {

using core::Error;
using core::ErrorCode;
using core::KvMap;

namespace {

// [maps, rows, cols] from each map's part (the sizes were checked by the caller).
torch::Tensor stackPart(const std::vector<KvMap> &maps, std::vector<float> KvMap::*part, int64_t rows,
                        int64_t cols, const torch::Device &device)
{
    std::vector<torch::Tensor> list;
    for (const KvMap &m : maps)
        list.push_back(
            torch::from_blob(const_cast<float *>((m.*part).data()), {rows, cols}, torch::kFloat32));
    return torch::stack(list).to(device); // stack copies: the maps may go away
}

std::vector<float> rowsOf(const torch::Tensor &t) // t [rows, cols] of one map
{
    const auto c = t.to(torch::kCPU, torch::kFloat32).contiguous();
    return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

} // namespace

MapTensors stackMaps(const std::vector<KvMap> &maps, const torch::Device &device, const std::string &what)
{
    if (maps.empty())
        throw Error(ErrorCode::Shape, what + ": no maps");
    const KvMap &f = maps.front();
    const int64_t in = f.inputDim, out = f.outputDim, rank = f.rank, hidden = f.hidden;
    for (size_t j = 0; j < maps.size(); ++j) {
        const KvMap &m = maps[j];
        const auto bad = [&](const char *part) {
            return Error(ErrorCode::Shape,
                         fmt::format("{} map {}: {} does not fit [{} -> {}] at rank {}, width {}", what, j,
                                     part, m.inputDim, m.outputDim, m.rank, m.hidden));
        };
        if (m.inputDim != in || m.outputDim != out || m.rank != rank || m.hidden != hidden || in <= 0 ||
            out <= 0 || rank < 0 || hidden < 0)
            throw bad("its shape, unlike map 0,");
        if (m.bias.size() != size_t(out))
            throw bad("bias");
        if (rank > 0 ? (m.down.size() != size_t(in * rank) || m.up.size() != size_t(rank * out))
                     : m.weight.size() != size_t(in * out))
            throw bad(rank > 0 ? "down or up" : "weight");
        if (hidden > 0 &&
            (m.hiddenWeight.size() != size_t(in * hidden) || m.hiddenBias.size() != size_t(hidden) ||
             m.outWeight.size() != size_t(hidden * out)))
            throw bad("the MLP branch");
    }
    MapTensors t;
    t.inputDim = in;
    t.outputDim = out;
    t.bias = stackPart(maps, &KvMap::bias, 1, out, device);
    if (rank > 0) {
        t.down = stackPart(maps, &KvMap::down, in, rank, device);
        t.up = stackPart(maps, &KvMap::up, rank, out, device);
    } else {
        t.weight = stackPart(maps, &KvMap::weight, in, out, device);
    }
    if (hidden > 0) {
        t.w1 = stackPart(maps, &KvMap::hiddenWeight, in, hidden, device);
        t.b1 = stackPart(maps, &KvMap::hiddenBias, 1, hidden, device);
        t.w2 = stackPart(maps, &KvMap::outWeight, hidden, out, device);
    }
    return t;
}

torch::Tensor applyMaps(const MapTensors &m, const torch::Tensor &x)
{
    torch::Tensor y = m.weight.defined() ? torch::baddbmm(m.bias, x, m.weight)
                                         : torch::baddbmm(m.bias, torch::bmm(x, m.down), m.up);
    if (m.w1.defined())
        y = y + torch::bmm(torch::gelu(torch::baddbmm(m.b1, x, m.w1)), m.w2);
    return y;
}

std::vector<KvMap> unstackMaps(const MapTensors &m, const std::vector<KvMap> &like)
{
    std::vector<KvMap> out = like;
    for (size_t j = 0; j < out.size(); ++j) {
        const int64_t i = int64_t(j);
        KvMap &k = out[j];
        k.bias = rowsOf(m.bias[i]);
        k.weight = m.weight.defined() ? rowsOf(m.weight[i]) : std::vector<float>{};
        k.down = m.down.defined() ? rowsOf(m.down[i]) : std::vector<float>{};
        k.up = m.up.defined() ? rowsOf(m.up[i]) : std::vector<float>{};
        k.rank = m.down.defined() ? int(m.down.size(2)) : 0;
        k.hiddenWeight = m.w1.defined() ? rowsOf(m.w1[i]) : std::vector<float>{};
        k.hiddenBias = m.b1.defined() ? rowsOf(m.b1[i]) : std::vector<float>{};
        k.outWeight = m.w2.defined() ? rowsOf(m.w2[i]) : std::vector<float>{};
        k.hidden = m.w1.defined() ? int(m.w1.size(2)) : 0;
    }
    return out;
}

} // namespace kvwb::gpu::detail
