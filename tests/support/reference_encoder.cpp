#include "tests/support/reference_encoder.h"

#include "core/model/safetensors.h"

#include <cmath>
#include <random>

namespace kvwb::test {

namespace {

using Mat = std::vector<std::vector<double>>;

std::vector<double> weights(const core::EncoderCheckpoint &ck, const std::string &name)
{
    const auto v = core::toFloatVector(ck.require(name, {}));
    return {v.begin(), v.end()};
}

// y[t] = W x[t] + b, W [out][in] row-major
Mat linear(const Mat &x, const std::vector<double> &w, const std::vector<double> &b)
{
    const size_t out = b.size(), in = x.empty() ? 0 : x[0].size();
    Mat y(x.size(), std::vector<double>(out));
    for (size_t t = 0; t < x.size(); ++t)
        for (size_t o = 0; o < out; ++o) {
            double s = b[o];
            for (size_t i = 0; i < in; ++i)
                s += w[o * in + i] * x[t][i];
            y[t][o] = s;
        }
    return y;
}

void layerNorm(Mat &x, const std::vector<double> &w, const std::vector<double> &b, double eps)
{
    for (auto &row : x) {
        double mean = 0, var = 0;
        for (double v : row)
            mean += v;
        mean /= double(row.size());
        for (double v : row)
            var += (v - mean) * (v - mean);
        var /= double(row.size());
        for (size_t i = 0; i < row.size(); ++i)
            row[i] = (row[i] - mean) / std::sqrt(var + eps) * w[i] + b[i];
    }
}

double activation(double x, core::EncoderActivation a)
{
    switch (a) {
    case core::EncoderActivation::GeluTanh:
        return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case core::EncoderActivation::Relu:
        return x > 0 ? x : 0;
    case core::EncoderActivation::Gelu:
        break;
    }
    return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

} // namespace

std::vector<std::vector<double>> referenceEncoder(const core::EncoderCheckpoint &ck,
                                                  const std::vector<int> &ids)
{
    const core::EncoderConfig &c = ck.config();
    const size_t T = ids.size(), H = size_t(c.hiddenSize), nh = size_t(c.numHeads), hd = H / nh;
    const auto word = weights(ck, "embeddings.word_embeddings.weight");
    const auto pos = weights(ck, "embeddings.position_embeddings.weight");
    const auto type = weights(ck, "embeddings.token_type_embeddings.weight");
    Mat x(T, std::vector<double>(H));
    for (size_t t = 0; t < T; ++t)
        for (size_t i = 0; i < H; ++i)
            x[t][i] = word[size_t(ids[t]) * H + i] + pos[t * H + i] + type[i];
    layerNorm(x, weights(ck, "embeddings.LayerNorm.weight"), weights(ck, "embeddings.LayerNorm.bias"),
              c.layerNormEps);
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string p = "encoder.layer." + std::to_string(l) + ".";
        const auto w = [&](const std::string &n) { return weights(ck, p + n); };
        const Mat q = linear(x, w("attention.self.query.weight"), w("attention.self.query.bias"));
        const Mat k = linear(x, w("attention.self.key.weight"), w("attention.self.key.bias"));
        const Mat v = linear(x, w("attention.self.value.weight"), w("attention.self.value.bias"));
        Mat ctx(T, std::vector<double>(H, 0.0));
        for (size_t h = 0; h < nh; ++h)
            for (size_t i = 0; i < T; ++i) {
                std::vector<double> s(T);
                double mx = -1e300;
                for (size_t j = 0; j < T; ++j) {
                    double d = 0;
                    for (size_t e = 0; e < hd; ++e)
                        d += q[i][h * hd + e] * k[j][h * hd + e];
                    s[j] = d / std::sqrt(double(hd));
                    mx = std::max(mx, s[j]);
                }
                double z = 0;
                for (double &e : s)
                    z += (e = std::exp(e - mx));
                for (size_t j = 0; j < T; ++j)
                    for (size_t e = 0; e < hd; ++e)
                        ctx[i][h * hd + e] += s[j] / z * v[j][h * hd + e];
            }
        Mat a = linear(ctx, w("attention.output.dense.weight"), w("attention.output.dense.bias"));
        for (size_t t = 0; t < T; ++t)
            for (size_t i = 0; i < H; ++i)
                a[t][i] += x[t][i];
        layerNorm(a, w("attention.output.LayerNorm.weight"), w("attention.output.LayerNorm.bias"),
                  c.layerNormEps);
        Mat f = linear(a, w("intermediate.dense.weight"), w("intermediate.dense.bias"));
        for (auto &row : f)
            for (double &e : row)
                e = activation(e, c.activation);
        Mat o = linear(f, w("output.dense.weight"), w("output.dense.bias"));
        for (size_t t = 0; t < T; ++t)
            for (size_t i = 0; i < H; ++i)
                o[t][i] += a[t][i];
        layerNorm(o, w("output.LayerNorm.weight"), w("output.LayerNorm.bias"), c.layerNormEps);
        x = std::move(o);
    }
    return x;
}

std::vector<double> referenceSentenceEmbedding(const core::EncoderCheckpoint &ck, const std::vector<int> &ids)
{
    const Mat h = referenceEncoder(ck, ids);
    const size_t H = h[0].size();
    std::vector<double> out(H, 0.0);
    switch (ck.config().pooling) {
    case core::Pooling::Cls:
        out = h.front();
        break;
    case core::Pooling::Last:
        out = h.back();
        break;
    case core::Pooling::Max:
        out.assign(H, -1e300);
        for (const auto &row : h)
            for (size_t i = 0; i < H; ++i)
                out[i] = std::max(out[i], row[i]);
        break;
    case core::Pooling::Mean:
        for (const auto &row : h)
            for (size_t i = 0; i < H; ++i)
                out[i] += row[i] / double(h.size());
        break;
    }
    double n = 0;
    for (double v : out)
        n += v * v;
    for (double &v : out)
        v /= std::sqrt(n);
    return out;
}

std::map<std::string, std::vector<float>> randomEncoderWeights(const core::EncoderConfig &config,
                                                               uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    std::map<std::string, std::vector<float>> out;
    for (const auto &[name, shape] : core::EncoderCheckpoint::requiredTensors(config)) {
        int64_t n = 1;
        for (int64_t d : shape)
            n *= d;
        std::vector<float> v(static_cast<size_t>(n));
        const bool lnWeight = name.find("LayerNorm.weight") != std::string::npos;
        for (float &e : v)
            e = lnWeight ? 1.0f + normal(rng) * 0.5f : normal(rng);
        out[name] = std::move(v);
    }
    return out;
}

} // namespace kvwb::test
