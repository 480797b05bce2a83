#include "gpu/align/ridge.h"

#include "core/util/error.h"
#include "gpu/src/align/kv_map_p.h"
#include "gpu/src/torch_error_p.h"

#include <fmt/format.h>

#include <cmath>

namespace kvwb::gpu {

using core::Error;
using core::ErrorCode;

struct RidgeAccumulator::Impl
{
    int dx = 0, dy = 0;
    int64_t n = 0;
    torch::Tensor sumX;  // [dx] f64
    torch::Tensor sumY;  // [dy] f64
    torch::Tensor xtx;   // [dx, dx] f64
    torch::Tensor xty;   // [dx, dy] f64
    torch::Tensor sumY2; // [dy] f64, sum of squares per output (for R^2)

    // Centred statistics: Xc^T Xc, Xc^T Yc, means.
    void centred(torch::Tensor &cxx, torch::Tensor &cxy, torch::Tensor &mx, torch::Tensor &my) const
    {
        mx = sumX / double(n);
        my = sumY / double(n);
        cxx = xtx - double(n) * torch::outer(mx, mx);
        cxy = xty - double(n) * torch::outer(mx, my);
    }
    // The ridge solution: W [dx, dy] and b [dy], float64.
    std::pair<torch::Tensor, torch::Tensor> solve(double lambda) const;
};

RidgeAccumulator::RidgeAccumulator(int inputDim, int outputDim) : m_impl(std::make_unique<Impl>())
{
    if (inputDim <= 0 || outputDim <= 0)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("ridge dimensions must be positive, got [{}, {}]", inputDim, outputDim));
    auto &d = *m_impl;
    d.dx = inputDim;
    d.dy = outputDim;
    const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
    d.sumX = torch::zeros({inputDim}, f64);
    d.sumY = torch::zeros({outputDim}, f64);
    d.xtx = torch::zeros({inputDim, inputDim}, f64);
    d.xty = torch::zeros({inputDim, outputDim}, f64);
    d.sumY2 = torch::zeros({outputDim}, f64);
}

RidgeAccumulator::~RidgeAccumulator() = default;
RidgeAccumulator::RidgeAccumulator(RidgeAccumulator &&) noexcept = default;
RidgeAccumulator &RidgeAccumulator::operator=(RidgeAccumulator &&) noexcept = default;

int RidgeAccumulator::inputDim() const
{
    return m_impl->dx;
}
int RidgeAccumulator::outputDim() const
{
    return m_impl->dy;
}
int64_t RidgeAccumulator::rows() const
{
    return m_impl->n;
}

void RidgeAccumulator::add(const float *x, const float *y, int64_t rows)
{
    if (rows <= 0)
        return;
    auto &d = *m_impl;
    detail::translateTorch("ridge accumulate", [&] {
        c10::InferenceMode guard;
        auto X = torch::from_blob(const_cast<float *>(x), {rows, d.dx}, torch::kFloat32).to(torch::kFloat64);
        auto Y = torch::from_blob(const_cast<float *>(y), {rows, d.dy}, torch::kFloat32).to(torch::kFloat64);
        d.sumX += X.sum(0);
        d.sumY += Y.sum(0);
        d.xtx.addmm_(X.t(), X); // in place: no product-sized temporary per call
        d.xty.addmm_(X.t(), Y);
        d.sumY2 += (Y * Y).sum(0);
        return 0;
    });
    d.n += rows;
}

void RidgeAccumulator::merge(const RidgeAccumulator &other)
{
    auto &d = *m_impl;
    const auto &o = *other.m_impl;
    if (o.dx != d.dx || o.dy != d.dy)
        throw Error(ErrorCode::Shape, fmt::format("cannot merge ridge statistics [{}, {}] into [{}, {}]",
                                                  o.dx, o.dy, d.dx, d.dy));
    c10::InferenceMode guard;
    d.sumX += o.sumX;
    d.sumY += o.sumY;
    d.xtx += o.xtx;
    d.xty += o.xty;
    d.sumY2 += o.sumY2;
    d.n += o.n;
}

namespace {

core::KvMap hostMap(int dx, int dy, double lambda, const torch::Tensor &w, const torch::Tensor &b)
{
    auto wf = w.to(torch::kFloat32).contiguous(), bf = b.to(torch::kFloat32).contiguous();
    core::KvMap s;
    s.inputDim = dx;
    s.outputDim = dy;
    s.lambda = lambda;
    s.weight.assign(wf.data_ptr<float>(), wf.data_ptr<float>() + wf.numel());
    s.bias.assign(bf.data_ptr<float>(), bf.data_ptr<float>() + bf.numel());
    return s;
}

} // namespace

std::pair<torch::Tensor, torch::Tensor> RidgeAccumulator::Impl::solve(double lambda) const
{
    const auto &d = *this;
    if (d.n < 2)
        throw Error(ErrorCode::InvalidArgument, fmt::format("ridge fit needs at least 2 rows, has {}", d.n));
    if (!(lambda >= 0))
        throw Error(ErrorCode::InvalidArgument, fmt::format("ridge lambda must be >= 0, got {}", lambda));
    return detail::translateTorch("ridge solve", [&] {
        c10::InferenceMode guard;
        torch::Tensor cxx, cxy, mx, my;
        d.centred(cxx, cxy, mx, my);
        const double scale = std::max(cxx.diagonal().mean().item<double>(), 1e-300);
        auto eye = torch::eye(d.dx, torch::kFloat64);
        torch::Tensor w;
        // lambda 0 on collinear features is singular: retry with a jitter of 1e-10 (relative)
        for (double jitter : {0.0, 1e-10, 1e-7}) {
            auto [l, info] = torch::linalg_cholesky_ex(cxx + (lambda + jitter) * scale * eye);
            if (info.item<int64_t>() == 0) {
                w = torch::cholesky_solve(cxy, l);
                break;
            }
        }
        if (!w.defined())
            throw Error(ErrorCode::Internal,
                        fmt::format("ridge system [{} x {}] is singular at lambda {}; use lambda > 0", d.dx,
                                    d.dx, lambda));
        return std::pair{w, my - torch::matmul(mx, w)};
    });
}

core::KvMap RidgeAccumulator::solve(double lambda) const
{
    const auto [w, b] = m_impl->solve(lambda);
    c10::InferenceMode guard;
    return hostMap(m_impl->dx, m_impl->dy, lambda, w, b);
}

core::KvMap RidgeAccumulator::solveReducedRank(double lambda, int rank) const
{
    const auto &d = *m_impl;
    if (rank < 1 || rank > std::min(d.dx, d.dy))
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("rank {} is outside 1..{} (the smaller of the map's {} inputs and {} outputs)", rank,
                        std::min(d.dx, d.dy), d.dx, d.dy));
    const auto [w, b0] = d.solve(lambda);
    return detail::translateTorch("reduced-rank solve", [&, w = w] {
        c10::InferenceMode guard;
        torch::Tensor cxx, cxy, mx, my;
        d.centred(cxx, cxy, mx, my);
        // The fitted values' covariance (Xc W)^T (Xc W) = W^T Cxx W [dy, dy]; its top eigenvectors
        // V_r span the best rank-r subspace of the fitted outputs: W_r = W V_r V_r^T.
        auto fitted = torch::matmul(w.t(), torch::matmul(cxx, w));
        fitted = 0.5 * (fitted + fitted.t());
        auto [values, vectors] = torch::linalg_eigh(fitted);               // ascending
        auto vr = vectors.slice(1, d.dy - rank, d.dy);                     // [dy, rank]
        auto down = torch::matmul(w, vr).to(torch::kFloat32).contiguous(); // [dx, rank]
        auto up = vr.t().to(torch::kFloat32).contiguous();                 // [rank, dy]
        auto b = (my - torch::matmul(mx, torch::matmul(down.to(torch::kFloat64), up.to(torch::kFloat64))))
                     .to(torch::kFloat32)
                     .contiguous();
        core::KvMap s;
        s.inputDim = d.dx;
        s.outputDim = d.dy;
        s.lambda = lambda;
        s.rank = rank;
        s.down.assign(down.data_ptr<float>(), down.data_ptr<float>() + down.numel());
        s.up.assign(up.data_ptr<float>(), up.data_ptr<float>() + up.numel());
        s.bias.assign(b.data_ptr<float>(), b.data_ptr<float>() + b.numel());
        return s;
    });
}

core::KvMap RidgeAccumulator::solveWeighted(double lambda, const std::vector<double> &metric) const
{
    const auto &d = *m_impl;
    if (d.n < 2)
        throw Error(ErrorCode::InvalidArgument, fmt::format("ridge fit needs at least 2 rows, has {}", d.n));
    if (!(lambda >= 0))
        throw Error(ErrorCode::InvalidArgument, fmt::format("ridge lambda must be >= 0, got {}", lambda));
    if (metric.size() != size_t(d.dy) * size_t(d.dy))
        throw Error(ErrorCode::InvalidArgument, fmt::format("an output metric of {} values for a map of {} "
                                                            "outputs (needs {} x {})",
                                                            metric.size(), d.dy, d.dy, d.dy));
    for (int i = 0; i < d.dy; ++i)
        for (int j = 0; j < d.dy; ++j) {
            const double a = metric[size_t(i) * size_t(d.dy) + size_t(j)],
                         b = metric[size_t(j) * size_t(d.dy) + size_t(i)];
            if (!std::isfinite(a) || std::abs(a - b) > 1e-6 * (std::abs(a) + std::abs(b) + 1e-300))
                throw Error(ErrorCode::InvalidArgument,
                            fmt::format("the output metric is not finite and symmetric at ({}, {})", i, j));
        }
    return detail::translateTorch("weighted ridge solve", [&] {
        c10::InferenceMode guard;
        torch::Tensor cxx, cxy, mx, my;
        d.centred(cxx, cxy, mx, my);
        const double scale = std::max(cxx.diagonal().mean().item<double>(), 1e-300);
        auto m = torch::from_blob(const_cast<double *>(metric.data()), {d.dy, d.dy}, torch::kFloat64).clone();
        m = 0.5 * (m + m.t());
        auto [mEig, u] = torch::linalg_eigh(m);
        const double mean = mEig.mean().item<double>();
        if (!(mean > 0))
            throw Error(ErrorCode::InvalidArgument, "the output metric has no positive eigenvalue");
        mEig = torch::clamp_min(mEig / mean, 1e-4);
        auto [xEig, v] = torch::linalg_eigh(0.5 * (cxx + cxx.t()));
        xEig = torch::clamp_min(xEig, 0.0) + 1e-10 * scale;   // lambda 0 on collinear inputs stays finite
        auto p = torch::matmul(v.t(), torch::matmul(cxy, u)); // [dx, dy]
        auto denom =
            xEig.unsqueeze(1) + (lambda * scale) / mEig.unsqueeze(0); // per input and output direction
        auto w = torch::matmul(torch::matmul(v, p / denom), u.t());   // [dx, dy]
        return hostMap(d.dx, d.dy, lambda, w, my - torch::matmul(mx, w));
    });
}

double RidgeAccumulator::r2(const core::KvMap &s) const
{
    const auto &d = *m_impl;
    if (s.inputDim != d.dx || s.outputDim != d.dy)
        throw Error(ErrorCode::Shape, "ridge solution does not match the accumulator's dimensions");
    if (s.hidden > 0)
        throw Error(ErrorCode::InvalidArgument,
                    "an MLP map's R^2 needs its rows, not sums: score it with ridgeR2 on the data");
    c10::InferenceMode guard;
    auto W = s.rank > 0
                 ? torch::matmul(
                       torch::from_blob(const_cast<float *>(s.down.data()), {d.dx, s.rank}, torch::kFloat32),
                       torch::from_blob(const_cast<float *>(s.up.data()), {s.rank, d.dy}, torch::kFloat32))
                       .to(torch::kFloat64)
                 : torch::from_blob(const_cast<float *>(s.weight.data()), {d.dx, d.dy}, torch::kFloat32)
                       .to(torch::kFloat64);
    auto b =
        torch::from_blob(const_cast<float *>(s.bias.data()), {d.dy}, torch::kFloat32).to(torch::kFloat64);
    const double n = double(d.n);
    // SSE = sum ||y - xW - b||^2 expanded over the raw sums
    const double yy = d.sumY2.sum().item<double>();
    const double xwy = (W * d.xty).sum().item<double>();                    // sum_rows (xW) . y
    const double xwxw = (W * torch::matmul(d.xtx, W)).sum().item<double>(); // sum_rows ||xW||^2
    const double by = (b * d.sumY).sum().item<double>();
    const double bxw = (b * torch::matmul(d.sumX, W)).sum().item<double>();
    const double bb = n * (b * b).sum().item<double>();
    const double sse = yy - 2 * xwy - 2 * by + xwxw + 2 * bxw + bb;
    const double sst = yy - (d.sumY * d.sumY).sum().item<double>() / n;
    return sst > 0 ? 1.0 - sse / sst : 0.0;
}

std::vector<float> applyKvMap(const core::KvMap &m, const float *x, int64_t rows)
{
    return detail::translateTorch("map rows", [&] {
        c10::InferenceMode guard;
        const auto maps = detail::stackMaps({m}, torch::kCPU, "map");
        auto X = torch::from_blob(const_cast<float *>(x), {1, rows, int64_t(m.inputDim)}, torch::kFloat32);
        auto y = detail::applyMaps(maps, X).contiguous();
        return std::vector<float>(y.data_ptr<float>(), y.data_ptr<float>() + y.numel());
    });
}

double ridgeR2(const core::KvMap &s, const float *x, const float *y, int64_t rows)
{
    const auto pred = applyKvMap(s, x, rows);
    const size_t n = size_t(rows) * size_t(s.outputDim);
    std::vector<double> mean(size_t(s.outputDim), 0.0);
    for (size_t i = 0; i < n; ++i)
        mean[i % size_t(s.outputDim)] += y[i];
    for (double &m : mean)
        m /= double(rows);
    double sse = 0, sst = 0;
    for (size_t i = 0; i < n; ++i) {
        sse += (double(y[i]) - pred[i]) * (double(y[i]) - pred[i]);
        const double c = double(y[i]) - mean[i % size_t(s.outputDim)];
        sst += c * c;
    }
    return sst > 0 ? 1.0 - sse / sst : 0.0;
}

} // namespace kvwb::gpu
