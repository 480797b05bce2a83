#include "tests/support/reference_forward.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <optional>
#include <string>

namespace kvwb::test {

namespace {

using Vec = std::vector<double>;

Vec load(const core::Checkpoint &ck, const std::string &name)
{
    const auto f = core::toFloatVector(ck.require(name, {}));
    return Vec(f.begin(), f.end());
}

// out[o] = sum_i w[o * in + i] * x[i] (+ b[o]); w is [out, in] row-major like torch Linear.
Vec matvec(const Vec &w, const Vec &x, const Vec *b)
{
    const size_t in = x.size(), out = w.size() / in;
    Vec y(out, 0.0);
    for (size_t o = 0; o < out; ++o) {
        double s = 0;
        for (size_t i = 0; i < in; ++i)
            s += w[o * in + i] * x[i];
        y[o] = s + (b ? (*b)[o] : 0.0);
    }
    return y;
}

// Llama: x / rms * w; Gemma (unitOffset): x / rms * (1 + w).
Vec rmsnormOf(const Vec &x, const Vec &w, double eps, bool unitOffset)
{
    double ss = 0;
    for (double v : x)
        ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
        y[i] = ((unitOffset ? 1.0 : 0.0) + w[i]) * (x[i] * inv);
    return y;
}

double softcap(double x, const std::optional<double> &cap)
{
    return cap ? *cap * std::tanh(x / *cap) : x;
}

// GELU, tanh approximation (HF gelu_pytorch_tanh).
double geluTanh(double x)
{
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

// scale: LongRoPE's attention factor on cos and sin (1 otherwise)
void rope(Vec &v, int heads, int hd, int pos, const std::vector<double> &invFreq, core::RopeLayout layout,
          double scale)
{
    for (int h = 0; h < heads; ++h) {
        double *x = v.data() + size_t(h) * size_t(hd);
        for (int j = 0; j < hd / 2; ++j) {
            const double a = pos * invFreq[size_t(j)];
            const double c = std::cos(a) * scale, s = std::sin(a) * scale;
            const int i0 = layout == core::RopeLayout::Interleaved ? 2 * j : j;
            const int i1 = layout == core::RopeLayout::Interleaved ? 2 * j + 1 : j + hd / 2;
            const double x0 = x[i0], x1 = x[i1];
            x[i0] = x0 * c - x1 * s;
            x[i1] = x0 * s + x1 * c;
        }
    }
}

} // namespace

std::vector<std::vector<double>> referenceForward(const core::Checkpoint &ck, const std::vector<int> &ids,
                                                  std::vector<std::vector<std::vector<double>>> *preRopeKeys,
                                                  bool longRopeFactors)
{
    core::ModelConfig c = ck.config();
    c.ropeScaling.useLongFactor = longRopeFactors;
    const double ropeScale = c.ropeAttentionFactor();
    const int H = c.hiddenSize, nh = c.numHeads, nkv = c.numKvHeads, hd = c.headDim;
    const bool g = c.unitOffsetNorm;
    const auto rmsnorm = [&](const Vec &x, const Vec &w) { return rmsnormOf(x, w, c.rmsNormEps, g); };
    if (preRopeKeys)
        preRopeKeys->assign(size_t(c.numLayers), {});
    // One layer's weights, row-major [out, in] like torch Linear (H hidden, nh / nkv query / kv heads,
    // hd head dim, I intermediate); an absent part is empty.
    struct L
    {
        Vec an;                      // [H] input norm
        Vec wq, wk, wv, wo;          // [nh*hd, H], [nkv*hd, H], [nkv*hd, H], [H, nh*hd]
        Vec bq, bk, bv, bo;          // [nh*hd], [nkv*hd], [nkv*hd], [H]
        Vec qn, kn;                  // [hd] each: Qwen3's per-head q/k norms
        Vec fn;                      // [H] post-attention norm
        Vec pre, post;               // [H] each: Gemma's pre/post feed-forward norms
        Vec w1, w2, w3;              // gate [I, H], down [H, I], up [I, H]
        Vec b1, b2, b3;              // [I], [H], [I]
        std::vector<double> invFreq; // [hd / 2]: this layer's RoPE inverse frequencies
    };
    std::vector<L> layers(size_t(c.numLayers));
    for (int l = 0; l < c.numLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        L &y = layers[size_t(l)];
        y.an = load(ck, p + "input_layernorm.weight");
        if (c.fusedProjections) {
            // Phi-3, split here from the stored tensors (not through Checkpoint's views): rows
            // [0, q) are q, then k, then v; gate_up is gate then up (Phi3MLP's chunk order).
            const size_t qn = size_t(nh) * size_t(hd) * size_t(H), kvn = size_t(nkv) * size_t(hd) * size_t(H);
            const Vec qkv = load(ck, p + "self_attn.qkv_proj.weight");
            y.wq.assign(qkv.begin(), qkv.begin() + std::ptrdiff_t(qn));
            y.wk.assign(qkv.begin() + std::ptrdiff_t(qn), qkv.begin() + std::ptrdiff_t(qn + kvn));
            y.wv.assign(qkv.begin() + std::ptrdiff_t(qn + kvn), qkv.end());
            const Vec gateUp = load(ck, p + "mlp.gate_up_proj.weight");
            const auto half = std::ptrdiff_t(gateUp.size() / 2);
            y.w1.assign(gateUp.begin(), gateUp.begin() + half);
            y.w3.assign(gateUp.begin() + half, gateUp.end());
        } else {
            y.wq = load(ck, p + "self_attn.q_proj.weight");
            y.wk = load(ck, p + "self_attn.k_proj.weight");
            y.wv = load(ck, p + "self_attn.v_proj.weight");
        }
        y.wo = load(ck, p + "self_attn.o_proj.weight");
        if (c.qkvBias) {
            y.bq = load(ck, p + "self_attn.q_proj.bias");
            y.bk = load(ck, p + "self_attn.k_proj.bias");
            y.bv = load(ck, p + "self_attn.v_proj.bias");
        }
        if (c.oBias)
            y.bo = load(ck, p + "self_attn.o_proj.bias");
        if (c.qkNorm) {
            y.qn = load(ck, p + "self_attn.q_norm.weight");
            y.kn = load(ck, p + "self_attn.k_norm.weight");
        }
        y.fn = load(ck, p + "post_attention_layernorm.weight");
        if (c.sandwichNorms) {
            y.pre = load(ck, p + "pre_feedforward_layernorm.weight");
            y.post = load(ck, p + "post_feedforward_layernorm.weight");
        }
        y.invFreq = c.ropeInvFreq(l);
        if (!c.fusedProjections) {
            y.w1 = load(ck, p + "mlp.gate_proj.weight");
            y.w3 = load(ck, p + "mlp.up_proj.weight");
        }
        y.w2 = load(ck, p + "mlp.down_proj.weight");
        if (c.mlpBias) {
            y.b1 = load(ck, p + "mlp.gate_proj.bias");
            y.b3 = load(ck, p + "mlp.up_proj.bias");
            y.b2 = load(ck, p + "mlp.down_proj.bias");
        }
    }
    const Vec emb = load(ck, "model.embed_tokens.weight");
    const Vec finalNorm = load(ck, "model.norm.weight");
    const Vec cls = c.tieWordEmbeddings ? emb : load(ck, "lm_head.weight");

    // kcache[l][pos] = [nkv*hd] post-RoPE keys; vcache likewise.
    std::vector<std::vector<Vec>> kc(size_t(c.numLayers)), vc(size_t(c.numLayers));
    std::vector<std::vector<double>> out;
    for (size_t pos = 0; pos < ids.size(); ++pos) {
        Vec x(emb.begin() + std::ptrdiff_t(size_t(ids[pos]) * size_t(H)),
              emb.begin() + std::ptrdiff_t(size_t(ids[pos] + 1) * size_t(H)));
        if (c.scaleEmbeddings)
            for (double &v : x)
                v *= std::sqrt(double(H));
        for (int l = 0; l < c.numLayers; ++l) {
            const L &y = layers[size_t(l)];
            const Vec xb = rmsnorm(x, y.an);
            Vec q = matvec(y.wq, xb, c.qkvBias ? &y.bq : nullptr);
            Vec k = matvec(y.wk, xb, c.qkvBias ? &y.bk : nullptr);
            Vec v = matvec(y.wv, xb, c.qkvBias ? &y.bv : nullptr);
            if (c.qkNorm) { // Qwen3: RMSNorm of each head's query and key, before RoPE
                const auto perHead = [&](Vec &t, int heads, const Vec &w) {
                    for (int h = 0; h < heads; ++h) {
                        const Vec part(t.begin() + std::ptrdiff_t(h * hd),
                                       t.begin() + std::ptrdiff_t((h + 1) * hd));
                        const Vec normed = rmsnorm(part, w);
                        std::copy(normed.begin(), normed.end(), t.begin() + std::ptrdiff_t(h * hd));
                    }
                };
                perHead(q, nh, y.qn);
                perHead(k, nkv, y.kn);
            }
            if (preRopeKeys)
                (*preRopeKeys)[size_t(l)].push_back(k);
            rope(q, nh, hd, int(pos), y.invFreq, c.ropeLayout, ropeScale);
            rope(k, nkv, hd, int(pos), y.invFreq, c.ropeLayout, ropeScale);
            kc[size_t(l)].push_back(k);
            vc[size_t(l)].push_back(v);
            // A sliding layer's query at pos sees keys t with pos - window < t <= pos.
            const size_t first = c.isSlidingLayer(l) && pos + 1 > size_t(c.slidingWindow)
                                     ? pos + 1 - size_t(c.slidingWindow)
                                     : 0;
            const double scale = 1.0 / std::sqrt(c.queryPreAttnScalar.value_or(double(hd)));
            Vec att(size_t(nh) * size_t(hd), 0.0);
            for (int h = 0; h < nh; ++h) {
                const int kvh = h / (nh / nkv); // kv head shared by this query head
                std::vector<double> scores(pos + 1 - first);
                double mx = -1e300;
                for (size_t t = first; t <= pos; ++t) {
                    double s = 0;
                    for (int i = 0; i < hd; ++i)
                        s += q[size_t(h * hd + i)] * kc[size_t(l)][t][size_t(kvh * hd + i)];
                    scores[t - first] = softcap(s * scale, c.attnLogitSoftcap);
                    mx = std::max(mx, scores[t - first]);
                }
                double z = 0;
                for (double &s : scores)
                    z += (s = std::exp(s - mx));
                for (size_t t = first; t <= pos; ++t)
                    for (int i = 0; i < hd; ++i)
                        att[size_t(h * hd + i)] +=
                            scores[t - first] / z * vc[size_t(l)][t][size_t(kvh * hd + i)];
            }
            Vec o = matvec(y.wo, att, c.oBias ? &y.bo : nullptr);
            if (c.sandwichNorms) // Gemma: post_attention_layernorm on the attention output
                o = rmsnorm(o, y.fn);
            for (int i = 0; i < H; ++i)
                x[size_t(i)] += o[size_t(i)];
            const Vec xb2 = rmsnorm(x, c.sandwichNorms ? y.pre : y.fn);
            Vec g1 = matvec(y.w1, xb2, c.mlpBias ? &y.b1 : nullptr);
            const Vec g3 = matvec(y.w3, xb2, c.mlpBias ? &y.b3 : nullptr);
            for (size_t i = 0; i < g1.size(); ++i) // act(w1 x) * w3 x
                g1[i] = (c.activation == core::MlpActivation::GeluTanh ? geluTanh(g1[i])
                                                                       : g1[i] / (1.0 + std::exp(-g1[i]))) *
                        g3[i];
            Vec d = matvec(y.w2, g1, c.mlpBias ? &y.b2 : nullptr);
            if (c.sandwichNorms)
                d = rmsnorm(d, y.post);
            for (int i = 0; i < H; ++i)
                x[size_t(i)] += d[size_t(i)];
        }
        Vec logits = matvec(cls, rmsnorm(x, finalNorm), nullptr);
        for (double &v : logits)
            v = softcap(v, c.finalLogitSoftcap);
        out.push_back(std::move(logits));
    }
    return out;
}

double maxRelativeError(const std::vector<float> &a, const std::vector<double> &b)
{
    double scale = 1e-6, err = 0;
    for (double v : b)
        scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
        err = std::max(err, std::abs(double(a[i]) - b[i]));
    return a.size() == b.size() ? err / scale : 1e30;
}

double maxRelativeError(const std::vector<float> &a, const std::vector<float> &b)
{
    return maxRelativeError(a, std::vector<double>(b.begin(), b.end()));
}

} // namespace kvwb::test
