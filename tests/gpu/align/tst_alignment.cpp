// Layer-wise fitting from an experiment file: on synthetic files whose B caches are an exact affine
// function of A's, the fit recovers it on held-out prompts; prompts tokenised differently pair
// through their stored token alignment, or are skipped, not mixed in, without one; source-layer
// selection follows relative depth.
#include "core/model/random_model.h"
#include "core/store/experiment_file.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/error.h"
#include "gpu/align/alignment.h"
#include "gpu/capture/capture.h"
#include "gpu/transfer/transfer.h"
#include "tests/support/expect_error.h"

#include <nlohmann/json.hpp>

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

core::ModelInfo info(char role, int layers, int kvHeads, int headDim, const char *sha)
{
    core::ModelInfo m;
    m.role = *core::parseRole(std::string(1, role)); // test helpers name roles by letter
    m.config = core::randomModelPreset("tiny").config;
    m.config.numLayers = layers;
    m.config.numKvHeads = kvHeads;
    m.config.numHeads = kvHeads;
    m.config.headDim = headDim;
    m.weightsSha256 = sha;
    return m;
}

// A: 2 layers, rows of 1 x 4; B: 3 layers, rows of 2 x 3. B layer l = A layer src(l) * W_l + b_l,
// for keys and values alike (different W per layer and kind). Prompt 3 has different ids in B and
// garbage KV: a fit that used it would be visibly off.
fs::path writeSynthetic(const fs::path &dir)
{
    const auto a = info('a', 2, 1, 4, "aaaa"), b = info('b', 3, 2, 3, "bbbb");
    std::mt19937_64 rng(5);
    std::normal_distribution<float> N(0.0f, 1.0f);
    std::vector<std::vector<float>> W(6, std::vector<float>(4 * 6)), B(6, std::vector<float>(6));
    for (auto &w : W)
        for (float &v : w)
            v = N(rng);
    for (auto &v : B)
        for (float &x : v)
            x = N(rng);
    const fs::path path = dir / "syn.h5";
    auto writer = core::ExperimentWriter::create(path, {}, {}, a, b);
    for (int p = 0; p < 8; ++p) {
        const int tokens = 20 + p;
        core::PromptRecord rec;
        rec.text = "p" + std::to_string(p);
        for (int t = 0; t < tokens; ++t)
            rec.a.ids.push_back(10 + t);
        rec.b.ids = rec.a.ids;
        for (int l = 0; l < 2; ++l) {
            std::vector<float> k(size_t(tokens) * 4), v(size_t(tokens) * 4);
            for (float &x : k)
                x = N(rng);
            for (float &x : v)
                x = N(rng);
            rec.a.keys.push_back(k);
            rec.a.values.push_back(v);
        }
        for (int l = 0; l < 3; ++l) {
            const int src = gpu::proportionalSourceLayers(l, 3, 2).front();
            for (int kv = 0; kv < 2; ++kv) {
                const auto &x = kv == 0 ? rec.a.keys[size_t(src)] : rec.a.values[size_t(src)];
                const auto &w = W[size_t(l * 2 + kv)];
                const auto &bias = B[size_t(l * 2 + kv)];
                std::vector<float> y(size_t(tokens) * 6);
                for (int t = 0; t < tokens; ++t)
                    for (int j = 0; j < 6; ++j) {
                        float s = bias[size_t(j)];
                        for (int i = 0; i < 4; ++i)
                            s += x[size_t(t * 4 + i)] * w[size_t(i * 6 + j)];
                        y[size_t(t * 6 + j)] = p == 3 ? 100.0f * N(rng) : s;
                    }
                (kv == 0 ? rec.b.keys : rec.b.values).push_back(y);
            }
        }
        if (p == 3)
            rec.b.ids.back() += 1; // another tokenisation: no row correspondence
        writer.appendPrompt(rec);
    }
    writer.close();
    return path;
}

// Different tokenizers: A's prompt p has 15 + p tokens, B's 10 + p, and B's row t is an exact affine
// function of A's row alignment[t] (an arbitrary pairing, stored with the prompt as capture stores
// it); one layer each, A rows 1 x 4, B rows 1 x 3. withAlignment false writes the same rows without
// the pairing (a file from before alignments, or prompts given as ids).
fs::path writeCrossTokenizer(const fs::path &dir, bool withAlignment)
{
    const auto a = info('a', 1, 1, 4, "aaaa"), b = info('b', 1, 1, 3, "bbbb");
    std::mt19937_64 rng(11);
    std::normal_distribution<float> N(0.0f, 1.0f);
    std::vector<std::vector<float>> W(2, std::vector<float>(12)), B(2, std::vector<float>(3));
    for (auto *m : {&W, &B})
        for (auto &w : *m)
            for (float &v : w)
                v = N(rng);
    const fs::path path = dir / (withAlignment ? "cross.h5" : "cross-unpaired.h5");
    auto writer = core::ExperimentWriter::create(path, {}, {}, a, b);
    for (int p = 0; p < 10; ++p) {
        const int na = 15 + p, nb = 10 + p;
        core::PromptRecord rec;
        for (int t = 0; t < na; ++t)
            rec.a.ids.push_back(3 + t);
        for (int t = 0; t < nb; ++t) {
            rec.b.ids.push_back(200 + t);
            rec.alignment.push_back(int32_t((t * 7 + p) % na));
        }
        for (int kv = 0; kv < 2; ++kv) {
            std::vector<float> x(size_t(na) * 4), y(size_t(nb) * 3);
            for (float &v : x)
                v = N(rng);
            for (int t = 0; t < nb; ++t)
                for (int j = 0; j < 3; ++j) {
                    float acc = B[size_t(kv)][size_t(j)];
                    for (int i = 0; i < 4; ++i)
                        acc += x[size_t(rec.alignment[size_t(t)]) * 4 + size_t(i)] *
                               W[size_t(kv)][size_t(i * 3 + j)];
                    y[size_t(t * 3 + j)] = acc;
                }
            (kv == 0 ? rec.a.keys : rec.a.values).push_back(x);
            (kv == 0 ? rec.b.keys : rec.b.values).push_back(y);
        }
        if (!withAlignment)
            rec.alignment.clear();
        writer.appendPrompt(rec);
    }
    writer.close();
    return path;
}

// A character-level target: A tokens ("words", random rows of 1 x 4) split into 1-3 B positions
// ("characters" from an alphabet of 6); B's layer 0 is its character's own K and V (token-local, as
// in a real model), and B's layer 1 an exact linear function of A's row, the character's layer-0 K
// and V, the previous A token's row and the character's offset inside its word. A's rows alone give
// every character of a word the same input, so they cannot explain it; with B's token features
// (core::TokenFeatures window 1, B tokens, offsets 4) a linear map can.
fs::path writeCharacterTarget(const fs::path &dir)
{
    const auto a = info('a', 1, 1, 4, "aaaa"), b = info('b', 2, 1, 4, "bbbb");
    std::mt19937_64 rng(17);
    std::normal_distribution<float> N(0.0f, 1.0f);
    const auto randoms = [&](size_t n) {
        std::vector<float> v(n);
        for (float &x : v)
            x = N(rng);
        return v;
    };
    const auto charK = randoms(6 * 4), charV = randoms(6 * 4), offsetBias = randoms(4 * 4 * 2);
    // per kind: weights of A's row, the previous A row, layer-0 K, layer-0 V, each [4, 4]
    std::vector<std::vector<float>> W;
    for (int i = 0; i < 8; ++i)
        W.push_back(randoms(16));
    const fs::path path = dir / "chars.h5";
    auto writer = core::ExperimentWriter::create(path, {}, {}, a, b);
    for (int p = 0; p < 24; ++p) {
        core::PromptRecord rec;
        rec.text = "w" + std::to_string(p);
        const int words = 12 + p % 5;
        std::vector<float> xk = randoms(size_t(words) * 4), xv = randoms(size_t(words) * 4);
        std::vector<int> offset;
        for (int w = 0; w < words; ++w) {
            rec.a.ids.push_back(3 + w);
            const int chars = 1 + int(rng() % 3);
            for (int c = 0; c < chars; ++c) {
                rec.b.ids.push_back(int32_t(3 + rng() % 6));
                rec.alignment.push_back(w);
                offset.push_back(c);
            }
        }
        const size_t nb = rec.b.ids.size();
        rec.a.keys.push_back(xk);
        rec.a.values.push_back(xv);
        std::vector<float> k0(nb * 4), v0(nb * 4), k1(nb * 4), v1(nb * 4);
        for (size_t t = 0; t < nb; ++t) {
            const size_t c = size_t(rec.b.ids[t] - 3);
            std::copy_n(charK.data() + c * 4, 4, k0.data() + t * 4);
            std::copy_n(charV.data() + c * 4, 4, v0.data() + t * 4);
        }
        for (int kind = 0; kind < 2; ++kind) {
            const auto &x = kind == 0 ? xk : xv;
            auto &y = kind == 0 ? k1 : v1;
            for (size_t t = 0; t < nb; ++t) {
                const int w = rec.alignment[t];
                for (int j = 0; j < 4; ++j) {
                    float acc = offsetBias[size_t((kind * 4 + std::min(offset[t], 3)) * 4 + j)];
                    for (int i = 0; i < 4; ++i) {
                        acc += x[size_t(w * 4 + i)] * W[size_t(kind * 4)][size_t(i * 4 + j)];
                        if (w > 0)
                            acc += x[size_t((w - 1) * 4 + i)] * W[size_t(kind * 4 + 1)][size_t(i * 4 + j)];
                        acc += k0[t * 4 + size_t(i)] * W[size_t(kind * 4 + 2)][size_t(i * 4 + j)];
                        acc += v0[t * 4 + size_t(i)] * W[size_t(kind * 4 + 3)][size_t(i * 4 + j)];
                    }
                    y[t * 4 + size_t(j)] = acc;
                }
            }
        }
        rec.b.keys = {k0, k1};
        rec.b.values = {v0, v1};
        writer.appendPrompt(rec);
    }
    writer.close();
    return path;
}

// A: 2 kv heads of 4, B: 2 kv heads of 3, one layer each. B head h = A head h * W_h + b_h: a map
// that never mixes heads, which head-matched fitting must recover weight for weight.
struct HeadSynthetic
{
    fs::path path;
    std::vector<std::vector<float>> W, B; // [kind * 2 + head] -> [4 * 3], [3]
};

HeadSynthetic writeHeadSynthetic(const fs::path &dir)
{
    const auto a = info('a', 1, 2, 4, "aaaa"), b = info('b', 1, 2, 3, "bbbb");
    std::mt19937_64 rng(9);
    std::normal_distribution<float> N(0.0f, 1.0f);
    HeadSynthetic s;
    s.W.assign(4, std::vector<float>(12));
    s.B.assign(4, std::vector<float>(3));
    for (auto &w : s.W)
        for (float &v : w)
            v = N(rng);
    for (auto &v : s.B)
        for (float &x : v)
            x = N(rng);
    s.path = dir / "heads.h5";
    auto writer = core::ExperimentWriter::create(s.path, {}, {}, a, b);
    for (int p = 0; p < 10; ++p) {
        const int tokens = 16 + p;
        core::PromptRecord rec;
        for (int t = 0; t < tokens; ++t)
            rec.a.ids.push_back(5 + t);
        rec.b.ids = rec.a.ids;
        for (int kv = 0; kv < 2; ++kv) {
            std::vector<float> x(size_t(tokens) * 8), y(size_t(tokens) * 6);
            for (float &v : x)
                v = N(rng);
            for (int t = 0; t < tokens; ++t)
                for (int h = 0; h < 2; ++h)
                    for (int j = 0; j < 3; ++j) {
                        float acc = s.B[size_t(kv * 2 + h)][size_t(j)];
                        for (int i = 0; i < 4; ++i)
                            acc += x[size_t(t * 8 + h * 4 + i)] * s.W[size_t(kv * 2 + h)][size_t(i * 3 + j)];
                        y[size_t(t * 6 + h * 3 + j)] = acc;
                    }
            (kv == 0 ? rec.a.keys : rec.a.values).push_back(x);
            (kv == 0 ? rec.b.keys : rec.b.values).push_back(y);
        }
        writer.appendPrompt(rec);
    }
    writer.close();
    return s;
}

// A: one layer of 1 kv head x 4, B: one layer of 1 kv head x 6; every B row is f(A row) for keys
// and values alike, on `prompts` prompts of 30-39 tokens of N(0, 1) rows.
fs::path writePlanted(const fs::path &dir, const std::function<std::vector<float>(const float *x)> &f,
                      int prompts = 40)
{
    const auto a = info('a', 1, 1, 4, "aaaa"), b = info('b', 1, 1, 6, "bbbb");
    std::mt19937_64 rng(11);
    std::normal_distribution<float> N(0.0f, 1.0f);
    const fs::path path = dir / "planted.h5";
    auto writer = core::ExperimentWriter::create(path, {}, {}, a, b);
    for (int p = 0; p < prompts; ++p) {
        const int tokens = 30 + p % 10;
        core::PromptRecord rec;
        for (int t = 0; t < tokens; ++t)
            rec.a.ids.push_back(7 + t);
        rec.b.ids = rec.a.ids;
        for (int kv = 0; kv < 2; ++kv) {
            std::vector<float> x(size_t(tokens) * 4), y;
            for (float &v : x)
                v = N(rng);
            for (int t = 0; t < tokens; ++t) {
                const auto row = f(x.data() + t * 4);
                y.insert(y.end(), row.begin(), row.end());
            }
            (kv == 0 ? rec.a.keys : rec.a.values).push_back(x);
            (kv == 0 ? rec.b.keys : rec.b.values).push_back(y);
        }
        writer.appendPrompt(rec);
    }
    writer.close();
    return path;
}

// Random [rows, cols] matrix, row-major.
std::vector<float> randomMatrix(int rows, int cols, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> N(0.0f, 1.0f);
    std::vector<float> m(size_t(rows) * size_t(cols));
    for (float &v : m)
        v = N(rng);
    return m;
}

// x [4] times m [4, 6].
std::vector<float> times(const float *x, const std::vector<float> &m)
{
    std::vector<float> y(6, 0.0f);
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 6; ++j)
            y[size_t(j)] += x[i] * m[size_t(i * 6 + j)];
    return y;
}

// Captures a random model together with itself (A = B, separate instances).
fs::path captureSelf(const fs::path &dir, std::unique_ptr<gpu::Model> &a, std::unique_ptr<gpu::Model> &b,
                     int prompts = 14)
{
    core::writeRandomHfModel(dir / "m", core::randomModelPreset("gqa"));
    a = gpu::Model::load(dir / "m", {});
    b = gpu::Model::load(dir / "m", {});
    const auto tok = core::loadTokenizer(dir / "m" / "tokenizer.json");
    const fs::path path = dir / "self.h5";
    auto writer = core::ExperimentWriter::create(
        path, {}, {}, gpu::describeModel(core::ModelRole::A, *a, dir / "m" / "tokenizer.json"),
        gpu::describeModel(core::ModelRole::B, *b, dir / "m" / "tokenizer.json"));
    std::vector<gpu::CapturePrompt> list;
    for (int p = 0; p < prompts; ++p) {
        gpu::CapturePrompt cp;
        cp.text = "p" + std::to_string(p);
        for (int t = 0; t < 20 + p; ++t)
            cp.idsA.push_back((t * 31 + p * 7 + 3) % a->config().vocabSize);
        cp.idsB = cp.idsA;
        list.push_back(cp);
    }
    gpu::capturePrompts(writer, *a, *tok, *b, *tok, list, {});
    writer.close();
    return path;
}

// A random model's own caches of `prompts` prompts as model B, and as model A rows bent by the
// elementwise `bend` (A's rows = bend(B's rows), keys and values alike, the same geometry): a
// converter has to undo the bend, and B itself scores what a converted cache does to its predictions.
fs::path captureBent(const fs::path &dir, std::unique_ptr<gpu::Model> &b,
                     const std::function<float(float)> &bend, int prompts = 40,
                     core::KeyForm form = core::KeyForm::PreRope, const std::string &preset = "gqa",
                     double weightStd = 0.3)
{
    auto spec = core::randomModelPreset(preset);
    spec.weightStd = weightStd; // sharp attention: B's predictions depend on the context, so there is a gap
    core::writeRandomHfModel(dir / "m", spec);
    b = gpu::Model::load(dir / "m", {});
    const fs::path tok = dir / "m" / "tokenizer.json";
    const fs::path path = dir / "bent.h5";
    core::ExperimentOptions options;
    options.keyForm = form;
    auto writer =
        core::ExperimentWriter::create(path, options, {}, gpu::describeModel(core::ModelRole::A, *b, tok),
                                       gpu::describeModel(core::ModelRole::B, *b, tok));
    std::mt19937_64 rng(23);
    for (int p = 0; p < prompts; ++p) {
        core::PromptRecord rec;
        rec.text = "p" + std::to_string(p);
        const int tokens = 24 + p % 17;
        for (int t = 0; t < tokens; ++t)
            rec.a.ids.push_back(int32_t(3 + rng() % uint64_t(b->config().vocabSize - 3)));
        rec.b.ids = rec.a.ids;
        auto cache = b->newCache();
        b->forward(std::vector<int>(rec.b.ids.begin(), rec.b.ids.end()), cache);
        for (int l = 0; l < b->config().numLayers; ++l) {
            const auto kv = cache.layerTokenMajor(l, form);
            rec.b.keys.push_back(kv.keys);
            rec.b.values.push_back(kv.values);
            for (const auto *part : {&kv.keys, &kv.values}) {
                std::vector<float> bent(part->size());
                std::transform(part->begin(), part->end(), bent.begin(), bend);
                (part == &kv.keys ? rec.a.keys : rec.a.values).push_back(std::move(bent));
            }
        }
        writer.appendPrompt(rec);
    }
    writer.close();
    return path;
}

} // namespace

class TestAlignment : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void proportionalSelection()
    {
        QCOMPARE(gpu::proportionalSourceLayers(0, 6, 4), std::vector<int>({0}));
        QCOMPARE(gpu::proportionalSourceLayers(5, 6, 4), std::vector<int>({3}));
        QCOMPARE(gpu::proportionalSourceLayers(2, 6, 4), std::vector<int>({1})); // depth 0.4 -> 1.2
        QCOMPARE(gpu::proportionalSourceLayers(2, 6, 4, 3), std::vector<int>({0, 1, 2}));
        QCOMPARE(gpu::proportionalSourceLayers(0, 1, 4, 9), std::vector<int>({0, 1, 2, 3}));
        QVERIFY_THROWS_EXCEPTION(core::Error, gpu::proportionalSourceLayers(6, 6, 4));
    }

    void recoversExactMapsOnHeldOutPrompts()
    {
        QTemporaryDir tmp;
        const auto path = writeSynthetic(tmp.path().toStdString());
        const auto file = core::ExperimentReader::open(path);
        const std::vector<int> train = {0, 1, 2, 3, 4, 5}, heldOut = {6, 7};
        for (int l = 0; l < 3; ++l) {
            gpu::LayerFitStats stats;
            const auto map =
                gpu::fitLayer(file, l, gpu::proportionalSourceLayers(l, 3, 2), train, 1e-9, &stats);
            QCOMPARE(stats.rows, int64_t(20 + 21 + 22 + 24 + 25)); // prompt 3 skipped
            QCOMPARE(stats.warnings.size(), size_t(1));
            QVERIFY(QString::fromStdString(stats.warnings[0]).contains("prompt 3"));
            const auto m = gpu::evaluateLayer(file, map, heldOut);
            QCOMPARE(m.rows, int64_t(26 + 27));
            QVERIFY2(m.r2Keys > 0.99999 && m.r2Values > 0.99999, qPrintable(QString::number(m.r2Keys)));
            QVERIFY(m.cosKeys > 0.99999 && m.relErrValues < 1e-3);
        }
        // the wrong source layer cannot explain B: R^2 collapses
        const auto wrong = gpu::fitLayer(file, 2, {0}, train, 1e-3);
        QVERIFY(gpu::evaluateLayer(file, wrong, heldOut).r2Keys < 0.2);
    }

    // B's token features: on a planted character-level target, A's rows alone leave most of B's deep
    // layer unexplained, while the map that also reads B's own layer 0, the previous A token and the
    // offset recovers it exactly on held-out prompts - in ridge, and as the MLP's start; the features
    // travel with the maps and every scoring path builds them alike (transfer-side: tst_transfer).
    void tokenFeaturesRecoverACharacterLevelTarget()
    {
        QTemporaryDir tmp;
        const auto file = core::ExperimentReader::open(writeCharacterTarget(tmp.path().toStdString()));
        std::vector<int> train, heldOut;
        for (int p = 0; p < 24; ++p)
            (p < 18 ? train : heldOut).push_back(p);
        const core::TokenFeatures all{1, true, 4};
        const auto plain = gpu::evaluateLayer(file, gpu::fitLayer(file, 1, {0}, train, 1e-9), heldOut);
        QVERIFY2(plain.r2Keys < 0.6 && plain.r2Values < 0.6,
                 qPrintable(QString("%1 %2").arg(plain.r2Keys).arg(plain.r2Values)));
        const auto map = gpu::fitLayer(file, 1, {0}, train, 1e-9, nullptr, false, 0, all);
        QCOMPARE(map.features, all);
        QCOMPARE(map.keys[0].inputDim, 4 + 4 + 2 * 4 + 4);
        const auto m = gpu::evaluateLayer(file, map, heldOut);
        QVERIFY2(m.r2Keys > 0.99999 && m.r2Values > 0.99999,
                 qPrintable(QString("%1 %2").arg(m.r2Keys).arg(m.r2Values)));
        // each feature is needed: without the offsets, or without B's tokens, the fit falls short
        for (const core::TokenFeatures &part :
             {core::TokenFeatures{1, true, 0}, core::TokenFeatures{1, false, 4},
              core::TokenFeatures{0, true, 4}}) {
            const auto r = gpu::evaluateLayer(
                file, gpu::fitLayer(file, 1, {0}, train, 1e-9, nullptr, false, 0, part), heldOut);
            QVERIFY2(r.r2Keys < 0.999, qPrintable(QString::fromStdString(core::describeTokenFeatures(part)) +
                                                  QString(": %1").arg(r.r2Keys)));
        }
        // B's layer 0 is its own token-local rows: recovered exactly too
        const auto first = gpu::evaluateLayer(
            file, gpu::fitLayer(file, 0, {0}, train, 1e-9, nullptr, false, 0, all), heldOut);
        QVERIFY(first.r2Keys > 0.99999 && first.r2Values > 0.99999);
        // the whole fit carries them into the record and its settings
        gpu::AlignOptions o;
        o.fit.family = core::ConverterFamily::Ridge;
        o.fit.lambda = 1e-9;
        o.fit.tokenFeatures = all;
        o.fit.attention = false;
        const auto r = gpu::alignExperiment(file, o, nullptr);
        for (const auto &l : r.record.layers)
            QCOMPARE(l.features, all);
        QCOMPARE(nlohmann::json::parse(r.record.settingsJson).at("token_features").get<std::string>(),
                 std::string("b,window=1,offsets=4"));
        QVERIFY(r.record.layerMetrics.at(1, "r2_k") > 0.9999);
        // the MLP starts from the features' ridge maps and keeps them
        gpu::MlpOptions mo;
        mo.epochs = 1;
        mo.hidden = 8;
        const auto mlp = gpu::trainMlpLayer(file, map, train, heldOut, mo);
        QVERIFY(mlp && mlp->features == all && mlp->keys[0].hidden == 8);
        QVERIFY(gpu::evaluateLayer(file, *mlp, heldOut).r2Keys > 0.9999);
        // head-matched maps take no features
        const auto e =
            test::expectError([&] { gpu::fitLayer(file, 1, {0}, train, 1e-9, nullptr, true, 0, all); });
        QVERIFY2(std::string(e.what()).find("token features need full maps") != std::string::npos, e.what());
    }

    // Different tokenizers: B's rows pair with A's through the stored alignment, so the exact map is
    // recovered on held-out prompts (R^2 1), every B row counts, and CKA sees the same pairing; in a
    // file without the alignment every such prompt is skipped, leaving nothing to fit.
    void crossTokenizerRowsPairThroughAlignment()
    {
        QTemporaryDir tmp;
        const auto file = core::ExperimentReader::open(writeCrossTokenizer(tmp.path().toStdString(), true));
        QCOMPARE(file.prompt(0).alignment.size(), size_t(10));
        const std::vector<int> train = {0, 1, 2, 3, 4, 5, 6}, heldOut = {7, 8, 9};
        gpu::LayerFitStats stats;
        const auto map = gpu::fitLayer(file, 0, {0}, train, 1e-9, &stats);
        QCOMPARE(stats.rows, int64_t(10 + 11 + 12 + 13 + 14 + 15 + 16)); // B's rows
        QVERIFY(stats.warnings.empty());
        const auto m = gpu::evaluateLayer(file, map, heldOut);
        QCOMPARE(m.rows, int64_t(17 + 18 + 19));
        QVERIFY2(m.r2Keys > 0.99999 && m.r2Values > 0.99999, qPrintable(QString::number(m.r2Keys)));
        const auto cka = gpu::linearCka(file, heldOut);
        QVERIFY2(cka.first.data[0] > 0.3, qPrintable(QString::number(cka.first.data[0])));

        const auto unpaired =
            core::ExperimentReader::open(writeCrossTokenizer(tmp.path().toStdString(), false));
        QVERIFY(unpaired.prompt(0).alignment.empty());
        const auto e = test::expectError([&] { gpu::fitLayer(unpaired, 0, {0}, train, 1e-9); });
        QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
        QVERIFY2(std::string(e.what()).find("only 0 aligned token rows") != std::string::npos, e.what());
    }

    // What alignExperiment's top-k selection and automatic lambda rest on: the layer B was built
    // from ranks first, every captured A layer is ranked, and on exact data the least regularised
    // lambda of the grid wins; the whole fit then picks both for every layer.
    void topKAndLambda()
    {
        QTemporaryDir tmp;
        const auto file = core::ExperimentReader::open(writeSynthetic(tmp.path().toStdString()));
        const std::vector<int> train = {0, 1, 2, 4}, valid = {5, 6, 7};
        const auto ranking = gpu::rankSourceLayers(file, train, valid, 1e-6);
        QCOMPARE(ranking.size(), size_t(3));
        // the shared accumulation scores each (target, source) pair as its own single-layer fit does
        const auto scores = gpu::sourceLayerScores(file, train, valid, 1e-6);
        for (int l = 0; l < 3; ++l)
            for (int a = 0; a < 2; ++a) {
                const auto m = gpu::evaluateLayer(file, gpu::fitLayer(file, l, {a}, train, 1e-6), valid);
                const double own = 0.5 * (m.r2Keys + m.r2Values);
                QVERIFY2(std::abs(scores[size_t(l)][size_t(a)] - own) <= 1e-9 * std::max(1.0, std::abs(own)),
                         qPrintable(QString("target %1 source %2: %3 vs %4")
                                        .arg(l)
                                        .arg(a)
                                        .arg(scores[size_t(l)][size_t(a)], 0, 'g', 12)
                                        .arg(own, 0, 'g', 12)));
            }
        int calls = 0; // cancelled at the second A layer: nothing
        QVERIFY(gpu::rankSourceLayers(file, train, valid, 1e-6, 0, [&](int, int) {
                    return ++calls < 2;
                }).empty());
        QCOMPARE(calls, 2);
        for (int l = 0; l < 3; ++l) { // the layer B was built from ranks first
            const auto &ranked = ranking[size_t(l)];
            QCOMPARE(ranked.size(), size_t(2));
            QCOMPARE(std::vector<int>{ranked.front()}, gpu::proportionalSourceLayers(l, 3, 2));
            QCOMPARE(std::vector<int>{ranked.back()}, std::vector<int>{1 - ranked.front()});
        }
        gpu::AlignOptions o;
        o.fit.family = core::ConverterFamily::Ridge;
        o.fit.selection = gpu::LayerSelection::TopK;
        o.fit.k = 5; // more than A's 2 layers: both, in layer order
        o.fit.autoLambda = true;
        o.fit.validFraction = o.fit.testFraction = 0.25;
        const auto all = gpu::alignExperiment(file, o, nullptr);
        for (const auto &map : all.record.layers)
            QCOMPARE(map.sourceLayers, std::vector<int>({0, 1}));
        o.fit.k = 1;
        const auto r = gpu::alignExperiment(file, o, nullptr);
        QCOMPARE(r.record.layers.size(), size_t(3));
        for (int l = 0; l < 3; ++l) {
            const auto &map = r.record.layers[size_t(l)];
            QCOMPARE(map.sourceLayers, gpu::proportionalSourceLayers(l, 3, 2));
            // exact data: the least regularisation of the default grid explains it best
            QCOMPARE(map.keys[0].lambda, 1e-4);
            QCOMPARE(map.values[0].lambda, 1e-4);
        }
        o.lambdaGrid = {};
        QVERIFY_THROWS_EXCEPTION(core::Error, gpu::alignExperiment(file, o, nullptr));
    }

    void headMatchedRecoversEachHeadsTransform()
    {
        QTemporaryDir tmp;
        const auto syn = writeHeadSynthetic(tmp.path().toStdString());
        const auto file = core::ExperimentReader::open(syn.path);
        const std::vector<int> train = {0, 1, 2, 3, 4, 5, 6}, test = {7, 8, 9};
        const auto map = gpu::fitLayer(file, 0, {0}, train, 1e-10, nullptr, /*headMatched=*/true);
        QVERIFY(map.headMatched);
        QCOMPARE(map.keys.size(), size_t(2));
        for (int kv = 0; kv < 2; ++kv)
            for (int h = 0; h < 2; ++h) {
                const auto &m = (kv == 0 ? map.keys : map.values)[size_t(h)];
                QCOMPARE(m.inputDim, 4);
                QCOMPARE(m.outputDim, 3);
                for (size_t i = 0; i < 12; ++i)
                    QVERIFY2(std::abs(m.weight[i] - syn.W[size_t(kv * 2 + h)][i]) < 1e-3,
                             qPrintable(QString("kind %1 head %2 weight %3").arg(kv).arg(h).arg(i)));
                for (size_t j = 0; j < 3; ++j)
                    QVERIFY(std::abs(m.bias[j] - syn.B[size_t(kv * 2 + h)][j]) < 1e-3);
            }
        const auto metrics = gpu::evaluateLayer(file, map, test);
        QCOMPARE(metrics.heads.size(), size_t(2));
        for (const auto &h : metrics.heads)
            QVERIFY(h.r2Keys > 0.99999 && h.r2Values > 0.99999 && h.relErrKeys < 1e-3);
        // the full cross-head map explains it too (it contains the head-matched one) ...
        const auto full = gpu::fitLayer(file, 0, {0}, train, 1e-10);
        QVERIFY(gpu::evaluateLayer(file, full, test).r2Keys > 0.99999);
        // ... and its cross-head blocks are zero: B head 0 reads nothing from A head 1
        for (int i = 4; i < 8; ++i)
            for (int j = 0; j < 3; ++j)
                QVERIFY(std::abs(full.keys[0].weight[size_t(i * 6 + j)]) < 1e-3);
        // head-matched needs equal kv-head counts
        QTemporaryDir tmp2;
        const auto other = core::ExperimentReader::open(writeSynthetic(tmp2.path().toStdString()));
        const auto refused = test::expectError([&] {
            gpu::fitLayer(other, 0, {0}, {0, 1}, 0.01, nullptr, true);
        });
        QCOMPARE(refused.code(), core::ErrorCode::InvalidArgument);
        QVERIFY2(
            QString(refused.what()).contains("head-matched maps need equal kv-head counts; A has 1, B has 2"),
            refused.what());
    }

    // Reduced-rank regression recovers a planted rank-2 map exactly at rank 2, stores it as factors
    // of that rank, loses fit at rank 1, and refuses ranks the map cannot have.
    void lowRankRecoversAPlantedLowRankMap()
    {
        const auto u = randomMatrix(4, 2, 21), v = randomMatrix(2, 6, 22);
        std::vector<float> w(24, 0.0f); // u v, [4, 6]
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 6; ++j)
                for (int r = 0; r < 2; ++r)
                    w[size_t(i * 6 + j)] += u[size_t(i * 2 + r)] * v[size_t(r * 6 + j)];
        QTemporaryDir tmp;
        const auto file =
            core::ExperimentReader::open(writePlanted(tmp.path().toStdString(), [&](const float *x) {
                auto y = times(x, w);
                for (int j = 0; j < 6; ++j)
                    y[size_t(j)] += 0.5f * float(j);
                return y;
            }));
        std::vector<int> train(30), test = {30, 31, 32, 33, 34, 35, 36, 37, 38, 39};
        std::iota(train.begin(), train.end(), 0);
        const auto two = gpu::fitLayerGridLowRank(file, 0, {0}, train, {1e-9}, 2).front();
        QCOMPARE(two.keys[0].rank, 2);
        QVERIFY(two.keys[0].weight.empty());
        QCOMPARE(two.keys[0].down.size(), size_t(4 * 2));
        QCOMPARE(two.keys[0].up.size(), size_t(2 * 6));
        QCOMPARE(two.keys[0].parameterCount(), int64_t(2 * (4 + 6) + 6));
        const auto m2 = gpu::evaluateLayer(file, two, test);
        QVERIFY2(m2.r2Keys > 0.99999 && m2.r2Values > 0.99999, qPrintable(QString::number(m2.r2Keys)));
        const auto one = gpu::fitLayerGridLowRank(file, 0, {0}, train, {1e-9}, 1).front();
        const auto m1 = gpu::evaluateLayer(file, one, test);
        QVERIFY2(m1.r2Keys < 0.97, qPrintable(QString::number(m1.r2Keys)));
        const auto err = test::expectError([&] { gpu::fitLayerGridLowRank(file, 0, {0}, train, {0.01}, 5); });
        QCOMPARE(err.code(), core::ErrorCode::InvalidArgument);
        QVERIFY2(QString(err.what()).contains("rank 5 is outside 1..4"), err.what());
    }

    // Every family recovers an exact affine map (low-rank at full rank; the MLP starts at ridge and
    // keeps it when training cannot improve on it), records its family, size and cost, and the MLP is
    // seeded: the same options give the same maps.
    void everyFamilyRecoversALinearMap()
    {
        QTemporaryDir tmp;
        const auto w = randomMatrix(4, 6, 31);
        const auto file = core::ExperimentReader::open(
            writePlanted(tmp.path().toStdString(), [&](const float *x) { return times(x, w); }));
        for (auto family :
             {core::ConverterFamily::Ridge, core::ConverterFamily::LowRank, core::ConverterFamily::Mlp}) {
            gpu::AlignOptions o;
            o.fit.family = family;
            o.fit.rank = 4;
            o.fit.lambda = 1e-9;
            o.fit.mlpHidden = 8;
            o.fit.mlpEpochs = 3;
            const auto r = gpu::alignExperiment(file, o, nullptr);
            QVERIFY(!r.cancelled);
            QCOMPARE(r.record.family, family);
            QCOMPARE(r.record.layers[0].keys[0].family(), family);
            QVERIFY(r.record.fitSeconds > 0 && r.record.convertMsPer1k > 0);
            const double r2k = r.record.layerMetrics.at(0, "r2_k"), r2v = r.record.layerMetrics.at(0, "r2_v");
            QVERIFY2(
                r2k > 0.9999 && r2v > 0.9999,
                qPrintable(QString("%1: %2 %3").arg(core::converterFamilyName(family)).arg(r2k).arg(r2v)));
            const int64_t want = family == core::ConverterFamily::LowRank ? 2 * (4 * (4 + 6) + 6)
                                 : family == core::ConverterFamily::Mlp   ? 2 * (4 * 6 + 6 + 8 * (4 + 1 + 6))
                                                                          : 2 * (4 * 6 + 6);
            QCOMPARE(r.record.parameterCount(), want);
            if (family == core::ConverterFamily::Mlp) {
                const auto again = gpu::alignExperiment(file, o, nullptr);
                QVERIFY(again.record.layers[0].keys[0].hiddenWeight ==
                        r.record.layers[0].keys[0].hiddenWeight);
                QVERIFY(again.record.layers[0].values[0].outWeight == r.record.layers[0].values[0].outWeight);
            }
        }
    }

    // An MLP fit cancelled after its first layer leaves that layer's checkpoint; resuming with the
    // same settings reads it back and trains the rest, giving exactly the maps of an uninterrupted
    // fit. A checkpoint of other settings, or of another layer, is refused.
    void mlpFitResumesFromLayerCheckpoints()
    {
        QTemporaryDir tmp;
        const auto file = core::ExperimentReader::open(writeSynthetic(tmp.path().toStdString()));
        gpu::AlignOptions o;
        o.fit.family = core::ConverterFamily::Mlp;
        o.fit.mlpHidden = 8;
        o.fit.mlpEpochs = 2;
        o.checkpointDir = fs::path(tmp.path().toStdString()) / "ckpt";
        const auto whole = gpu::alignExperiment(file, o, nullptr);
        QVERIFY(!whole.cancelled);
        QCOMPARE(whole.resumedLayers, 0);
        QVERIFY(fs::exists(o.checkpointDir / "layer-002.h5"));
        fs::remove_all(o.checkpointDir);

        auto cut = o; // cancelled as layer 2 of 3 starts: layer 0 is trained and kept
        cut.progress = [](double, const std::string &stage) {
            return stage.find("layer 2/") == std::string::npos;
        };
        QVERIFY(gpu::alignExperiment(file, cut, nullptr).cancelled);
        QVERIFY(fs::exists(o.checkpointDir / "layer-000.h5"));
        QVERIFY(!fs::exists(o.checkpointDir / "layer-001.h5"));

        auto resume = o;
        resume.fit.resume = true;
        const auto resumed = gpu::alignExperiment(file, resume, nullptr);
        QVERIFY(!resumed.cancelled);
        QCOMPARE(resumed.resumedLayers, 1);
        QCOMPARE(resumed.record.layers.size(), whole.record.layers.size());
        for (size_t l = 0; l < whole.record.layers.size(); ++l)
            for (int kv = 0; kv < 2; ++kv) {
                const auto &a = kv == 0 ? whole.record.layers[l].keys[0] : whole.record.layers[l].values[0];
                const auto &b =
                    kv == 0 ? resumed.record.layers[l].keys[0] : resumed.record.layers[l].values[0];
                QVERIFY2(a.weight == b.weight && a.bias == b.bias && a.hiddenWeight == b.hiddenWeight &&
                             a.hiddenBias == b.hiddenBias && a.outWeight == b.outWeight,
                         qPrintable(QString("layer %1 kind %2").arg(l).arg(kv)));
            }
        QCOMPARE(resumed.record.layerMetrics.at(2, "r2_k"), whole.record.layerMetrics.at(2, "r2_k"));

        auto other = resume; // another seed: the checkpoints are not this fit's
        other.fit.seed = 2;
        const auto refused = test::expectError([&] { gpu::alignExperiment(file, other, nullptr); });
        QCOMPARE(refused.code(), core::ErrorCode::InvalidArgument);
        QVERIFY2(QString(refused.what()).contains("layer-000.h5: written by a fit with other settings"),
                 refused.what());

        fs::copy_file(o.checkpointDir / "layer-001.h5", o.checkpointDir / "layer-000.h5",
                      fs::copy_options::overwrite_existing); // layer 1's maps under layer 0's name
        const auto wrong = test::expectError([&] { gpu::alignExperiment(file, resume, nullptr); });
        QCOMPARE(wrong.code(), core::ErrorCode::Format);
        QVERIFY2(QString(wrong.what()).contains("holds a mlp map of B layer 1"), wrong.what());
    }

    // y = x W + (x * x) M + b: the square is uncorrelated with x, so no linear map (ridge or
    // low-rank) explains more than the linear part; the MLP learns the rest.
    void onlyTheMlpFitsAPlantedNonlinearity()
    {
        QTemporaryDir tmp;
        const auto w = randomMatrix(4, 6, 41), m = randomMatrix(4, 6, 42);
        const auto file =
            core::ExperimentReader::open(writePlanted(tmp.path().toStdString(), [&](const float *x) {
                const float sq[4] = {x[0] * x[0], x[1] * x[1], x[2] * x[2], x[3] * x[3]};
                auto y = times(x, w);
                const auto q = times(sq, m);
                for (int j = 0; j < 6; ++j)
                    y[size_t(j)] += q[size_t(j)];
                return y;
            }));
        std::vector<int> train(28), valid = {28, 29, 30, 31}, test = {32, 33, 34, 35, 36, 37, 38, 39};
        std::iota(train.begin(), train.end(), 0);
        const auto ridge = gpu::fitLayer(file, 0, {0}, train, 1e-6);
        const auto lowRank = gpu::fitLayerGridLowRank(file, 0, {0}, train, {1e-6}, 4).front();
        gpu::MlpOptions o;
        o.hidden = 64;
        o.epochs = 150;
        o.batch = 64;
        o.learningRate = 3e-3;
        o.patience = 20;
        gpu::MlpFitStats stats;
        const auto mlp = gpu::trainMlpLayer(file, ridge, train, valid, o, &stats);
        QVERIFY(mlp.has_value());
        QCOMPARE(mlp->keys[0].hidden, 64);
        QVERIFY(stats.bestEpochKeys > 0 && stats.lossKeys < stats.ridgeLossKeys);
        const double r2Ridge = gpu::evaluateLayer(file, ridge, test).r2Keys,
                     r2Low = gpu::evaluateLayer(file, lowRank, test).r2Keys;
        const auto mm = gpu::evaluateLayer(file, *mlp, test);
        qInfo("held-out R^2 of keys: ridge %.3f, low-rank %.3f, MLP %.3f (values %.3f), %d epochs", r2Ridge,
              r2Low, mm.r2Keys, mm.r2Values, stats.epochs);
        QVERIFY2(r2Ridge < 0.7 && r2Low < 0.7, qPrintable(QString("%1 %2").arg(r2Ridge).arg(r2Low)));
        QVERIFY2(mm.r2Keys > 0.9 && mm.r2Values > 0.9,
                 qPrintable(QString("%1 %2").arg(mm.r2Keys).arg(mm.r2Values)));
        // cancelling after the first epoch gives nothing
        o.progress = [](int, int) { return false; };
        QVERIFY(!gpu::trainMlpLayer(file, ridge, train, valid, o).has_value());
        // early stopping needs validation prompts; the start must be a ridge map
        o.progress = nullptr;
        QCOMPARE(test::expectError([&] { gpu::trainMlpLayer(file, ridge, train, {}, o); }).code(),
                 core::ErrorCode::InvalidArgument);
        QCOMPARE(test::expectError([&] { gpu::trainMlpLayer(file, lowRank, train, valid, o); }).code(),
                 core::ErrorCode::InvalidArgument);
    }

    // Family auto keeps the converter that brings B's predictions closest to its own: with A's rows
    // B's bent by a kink (slope 1 below 0, 1/8 above), no linear map undoes it and the MLP does, so
    // auto scores ridge first and keeps the MLP (keys stored after RoPE: no token-feature candidate);
    // with keys before RoPE auto also tries ridge with B's token features, which reads B's own
    // layer 0 exactly; with A's rows B's own scaled, ridge is exact and the MLP is not fitted at
    // all. Without model B, auto refuses.
    void autoKeepsTheFamilyWithTheLowestValidationKl()
    {
        QTemporaryDir tmp;
        std::unique_ptr<gpu::Model> b;
        const auto kink = [](float x) { return x > 0 ? x / 8 : x; };
        const auto kinked =
            captureBent(fs::path(tmp.path().toStdString()) / "kink", b, kink, 40, core::KeyForm::PostRope);
        const auto file = core::ExperimentReader::open(kinked);
        gpu::AlignOptions o;
        QCOMPARE(o.fit.family, core::ConverterFamily::Auto);
        o.fit.lambda = 1e-6;
        o.fit.mlpHidden = 64;
        o.fit.mlpEpochs = 60;
        o.fit.mlpBatch = 64;
        o.fit.learningRate = 3e-3;
        o.fit.patience = 10;
        o.fit.validFraction = o.fit.testFraction = 0.2;
        std::vector<gpu::AutoCandidate> heard;
        o.onCandidate = [&](const gpu::AutoCandidate &c) { heard.push_back(c); };
        o.checkpointDir = fs::path(tmp.path().toStdString()) / "ckpt";
        const auto r = gpu::alignExperiment(file, o, b.get());
        QVERIFY(!r.cancelled);
        // ridge as asked, ridge on every A layer, the better one attention-aligned, the MLP
        QCOMPARE(r.candidates.size(), size_t(4));
        QCOMPARE(heard.size(), size_t(4));
        QCOMPARE(heard.front().family, core::ConverterFamily::Ridge); // ridge's score comes first
        QCOMPARE(r.candidates[0].selection, gpu::LayerSelection::Proportional);
        QCOMPARE(r.candidates[1].selection, gpu::LayerSelection::All);
        QCOMPARE(r.candidates[2].family, core::ConverterFamily::AttnRidge);
        QCOMPARE(r.candidates[3].family, core::ConverterFamily::Mlp);
        for (const auto &c : r.candidates) {
            qInfo("%s", gpu::autoCandidateLine(c).c_str());
            QCOMPARE(c.score.prompts, 8);
            QVERIFY(c.score.klNoPrefix > 0.01); // there is a gap to close
            QVERIFY(!c.features.any());
        }
        const double ridgeKl =
            std::min({r.candidates[0].score.kl, r.candidates[1].score.kl, r.candidates[2].score.kl});
        QVERIFY2(r.candidates[3].score.kl < 0.95 * ridgeKl, qPrintable(QString::number(ridgeKl)));
        QCOMPARE(r.chosen, 3);
        QCOMPARE(r.record.family, core::ConverterFamily::Mlp);
        const auto settings = nlohmann::json::parse(r.record.settingsJson);
        QCOMPARE(settings["auto"]["chosen"].get<int>(), 3);
        QCOMPARE(settings["auto"]["candidates"].size(), size_t(4));
        QCOMPARE(settings["auto"]["candidates"][2]["family"].get<std::string>(), std::string("attn_ridge"));
        QCOMPARE(settings["auto"]["candidates"][3]["valid_kl"].get<double>(), r.candidates[3].score.kl);
        // the chosen record scores like a plain fit's: test metrics of every layer
        QCOMPARE(int(r.record.layerMetrics.rows.size()), b->config().numLayers);

        // cancelled as the MLP candidate's second layer starts, an auto fit resumes: the ridge
        // candidates are fitted again, the MLP's first layer is read back, and the maps are the
        // uninterrupted fit's
        QVERIFY(b->config().numLayers >= 2);
        fs::remove_all(o.checkpointDir);
        auto cut = o;
        cut.onCandidate = nullptr;
        cut.progress = [](double, const std::string &stage) {
            return stage.find("auto, mlp") == std::string::npos ||
                   stage.find("layer 2/") == std::string::npos;
        };
        QVERIFY(gpu::alignExperiment(file, cut, b.get()).cancelled);
        QVERIFY(fs::exists(o.checkpointDir / "layer-000.h5"));
        QVERIFY(!fs::exists(o.checkpointDir / "layer-001.h5"));
        auto resume = o;
        resume.onCandidate = nullptr;
        resume.fit.resume = true;
        const auto resumed = gpu::alignExperiment(file, resume, b.get());
        QCOMPARE(resumed.resumedLayers, 1);
        QCOMPARE(resumed.chosen, 3);
        for (size_t l = 0; l < r.record.layers.size(); ++l) {
            const auto &a = r.record.layers[l].keys[0], &c = resumed.record.layers[l].keys[0];
            QVERIFY2(a.weight == c.weight && a.hiddenWeight == c.hiddenWeight && a.outWeight == c.outWeight,
                     qPrintable(QString("layer %1").arg(l)));
        }

        // keys before RoPE: ridge with B's token features is tried too, with the better plain ridge's
        // settings, and B's own layer 0 undoes most of what the kink does there
        std::unique_ptr<gpu::Model> bp;
        const auto pre = core::ExperimentReader::open(
            captureBent(fs::path(tmp.path().toStdString()) / "kink-pre", bp, kink, 40));
        o.onCandidate = nullptr;
        o.checkpointDir.clear();
        const auto rp = gpu::alignExperiment(pre, o, bp.get());
        QCOMPARE(rp.candidates.size(), size_t(5));
        QCOMPARE(rp.candidates[3].family, core::ConverterFamily::Ridge);
        QCOMPARE(rp.candidates[3].features, (core::TokenFeatures{1, true, 4})); // 4 x 32 inputs: window fits
        QCOMPARE(rp.candidates[4].family, core::ConverterFamily::Mlp);
        // the MLP starts from the best of the four ridge candidates, its features included
        size_t bestRidge = 0;
        for (size_t i = 1; i < 4; ++i)
            if (rp.candidates[i].score.kl < rp.candidates[bestRidge].score.kl)
                bestRidge = i;
        QCOMPARE(rp.candidates[4].features, rp.candidates[bestRidge].features);
        const double plainKl =
            std::min({rp.candidates[0].score.kl, rp.candidates[1].score.kl, rp.candidates[2].score.kl});
        QVERIFY2(rp.candidates[3].score.kl < 0.5 * plainKl,
                 qPrintable(QString("%1 vs %2").arg(rp.candidates[3].score.kl).arg(plainKl)));
        int lowest = 0; // auto keeps the lowest validation KL (ties: the earlier, cheaper candidate)
        for (int i = 1; i < int(rp.candidates.size()); ++i)
            if (rp.candidates[size_t(i)].score.kl < rp.candidates[size_t(lowest)].score.kl)
                lowest = i;
        QCOMPARE(rp.chosen, lowest);
        QCOMPARE(rp.record.layers[0].features, rp.candidates[size_t(lowest)].features);
        QCOMPARE(nlohmann::json::parse(rp.record.settingsJson)["auto"]["candidates"][3]["token_features"]
                     .get<std::string>(),
                 std::string("b,window=1,offsets=4"));

        // a linear bend: ridge on every layer is exact, so the MLP is not fitted
        std::unique_ptr<gpu::Model> b2;
        const auto scaled = captureBent(
            fs::path(tmp.path().toStdString()) / "scale", b2, [](float x) { return 2 * x; }, 20);
        const auto file2 = core::ExperimentReader::open(scaled);
        o.onCandidate = nullptr;
        const auto r2 = gpu::alignExperiment(file2, o, b2.get());
        QCOMPARE(r2.candidates.size(), size_t(4)); // the two ridges, attention-aligned, token features
        QCOMPARE(r2.record.family, core::ConverterFamily::Ridge);
        QVERIFY(r2.candidates[size_t(r2.chosen)].score.gapClosed() > 0.99);
        QVERIFY(std::any_of(r2.warnings.begin(), r2.warnings.end(), [](const std::string &w) {
            return w.find("did not fit the MLP") != std::string::npos;
        }));
        QCOMPARE(test::expectError([&] { gpu::alignExperiment(file2, o, nullptr); }).code(),
                 core::ErrorCode::InvalidArgument);
    }

    // The KL objective trains through B's forward in torch's own ops (autograd): its loss equals the
    // KL transferKl computes through B's inference path (kernels, cache) on the same prompts and maps,
    // for every architecture's forward: llama, qwen2 (q/k/v bias), qwen3 (q/k norms) and gemma3
    // (sliding layers, soft-capping, sandwich norms, scaled embeddings).
    void klObjectiveLossMatchesTransferKl_data()
    {
        QTest::addColumn<QString>("preset");
        for (const char *p : {"gqa", "qwen2", "qwen3", "gemma3"})
            QTest::newRow(p) << QString::fromLatin1(p);
    }
    void klObjectiveLossMatchesTransferKl()
    {
        QFETCH(QString, preset);
        QTemporaryDir tmp;
        std::unique_ptr<gpu::Model> b;
        const auto path = captureBent(
            fs::path(tmp.path().toStdString()), b, [](float x) { return x > 0 ? x / 4 : x; }, 12,
            core::KeyForm::PreRope, preset.toStdString());
        const auto file = core::ExperimentReader::open(path);
        gpu::AlignOptions o;
        o.fit.family = core::ConverterFamily::Ridge;
        o.fit.lambda = 1.0; // far from exact: a KL well above 0
        o.fit.attention = false;
        const auto r = gpu::alignExperiment(file, o, b.get());
        std::vector<int> prompts(12);
        std::iota(prompts.begin(), prompts.end(), 0);
        const auto reference = gpu::transferKl(file, r.record.layers, *b, prompts, 12);
        const double loss = gpu::klObjectiveLoss(file, r.record.layers, *b, prompts, 12);
        QVERIFY2(reference.kl > 1e-3, qPrintable(QString::number(reference.kl)));
        QVERIFY2(std::abs(loss - reference.kl) < 1e-4 * reference.kl + 1e-6,
                 qPrintable(QString("%1 vs %2").arg(loss, 0, 'g', 10).arg(reference.kl, 0, 'g', 10)));
    }

    // Objective kl on a planted pair: A's rows are twice B's own and the KV fit is over-regularised
    // ridge (lambda 10), whose maps shrink towards B's mean rows and leave B's predictions off; training
    // the maps through B on the KL lowers the KL on the held-out test prompts (neither trained on nor used to
    // pick the epoch). The epoch with the lowest validation KL is kept and recorded; cancelled after its
    // first epoch, the fit resumes from the state it saved and ends with the uninterrupted fit's maps;
    // without model B it is refused.
    void klObjectiveLowersTheHeldOutKl()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        std::unique_ptr<gpu::Model> b;
        const auto file = core::ExperimentReader::open(captureBent(
            dir, b, [](float x) { return 2 * x; }, 60, core::KeyForm::PreRope, "gqa", 0.2));
        gpu::AlignOptions o;
        o.fit.family = core::ConverterFamily::Ridge;
        o.fit.lambda = 10; // over-regularised: the maps shrink towards B's mean rows
        o.fit.attention = false;
        o.fit.validFraction = o.fit.testFraction = 0.2;
        const auto kvFit = gpu::alignExperiment(file, o, b.get());
        o.fit.objective = core::FitObjective::Kl;
        o.fit.klEpochs = 12;
        o.fit.klLearningRate = 3e-3;
        o.checkpointDir = dir / "state";
        const auto r = gpu::alignExperiment(file, o, b.get());
        QVERIFY(!r.cancelled);
        qInfo("%s", r.klObjective.c_str());
        QCOMPARE(r.record.family, core::ConverterFamily::Ridge); // the maps keep their form
        QCOMPARE(r.record.testPrompts, kvFit.record.testPrompts);
        const auto before = gpu::transferKl(file, kvFit.record.layers, *b, kvFit.record.testPrompts, 100);
        const auto after = gpu::transferKl(file, r.record.layers, *b, r.record.testPrompts, 100);
        QCOMPARE(after.prompts, 12);
        QVERIFY2(after.kl < 0.9 * before.kl, qPrintable(QString("%1 vs %2").arg(after.kl).arg(before.kl)));
        const auto s = nlohmann::json::parse(r.record.settingsJson);
        QCOMPARE(s["objective"].get<std::string>(), std::string("kl"));
        const auto &kl = s["kl"];
        QVERIFY(kl["best_epoch"].get<int>() >= 1);
        QCOMPARE(kl["history"].size(), size_t(kl["epochs"].get<int>()));
        QVERIFY(kl["valid_kl"].get<double>() < kl["valid_kl_kv_fit"].get<double>());
        QCOMPARE(kl["valid_kl"].get<double>(),
                 kl["history"][size_t(kl["best_epoch"].get<int>() - 1)].get<double>());
        QVERIFY(fs::exists(o.checkpointDir / "kl-state.pt"));

        // cancelled in its second epoch, the fit resumes from the first epoch's state
        fs::remove_all(o.checkpointDir);
        auto cut = o;
        cut.progress = [](double, const std::string &stage) {
            return stage.find("epoch 2/") == std::string::npos;
        };
        QVERIFY(gpu::alignExperiment(file, cut, b.get()).cancelled);
        QVERIFY(fs::exists(o.checkpointDir / "kl-state.pt"));
        auto resume = o;
        resume.fit.resume = true;
        const auto resumed = gpu::alignExperiment(file, resume, b.get());
        QVERIFY(nlohmann::json::parse(resumed.record.settingsJson)["kl"]["resumed"].get<bool>());
        for (size_t l = 0; l < r.record.layers.size(); ++l)
            QVERIFY2(r.record.layers[l].keys[0].weight == resumed.record.layers[l].keys[0].weight &&
                         r.record.layers[l].values[0].bias == resumed.record.layers[l].values[0].bias,
                     qPrintable(QString("layer %1").arg(l)));
        // another fit's state is refused, not silently continued
        auto other = resume;
        other.fit.klLearningRate = 2e-3;
        QCOMPARE(test::expectError([&] { gpu::alignExperiment(file, other, b.get()); }).code(),
                 core::ErrorCode::InvalidArgument);
        QCOMPARE(test::expectError([&] { gpu::alignExperiment(file, o, nullptr); }).code(),
                 core::ErrorCode::InvalidArgument);
        // a budget spent before training: no epoch starts, the KV fit's maps are kept and it says so
        auto spent = o;
        spent.checkpointDir.clear();
        spent.fit.budgetSeconds = 1e-6;
        const auto none = gpu::alignExperiment(file, spent, b.get());
        const auto k0 = nlohmann::json::parse(none.record.settingsJson)["kl"];
        QCOMPARE(k0["epochs"].get<int>(), 0);
        QCOMPARE(k0["best_epoch"].get<int>(), 0);
        QVERIFY(k0["deadline_reached"].get<bool>());
        QVERIFY(none.deadlineReached);
        QVERIFY(none.record.layers[0].keys[0].weight == kvFit.record.layers[0].keys[0].weight);
    }

    // The attention-aligned family. B's key metric is what its queries do with a key error: e^T M e
    // equals the sum over key positions n and the queries m >= n that see them of (q_m . R_n e)^2,
    // with R_n e read back from B's own cache (e stored before RoPE at every position); a fit under
    // the metrics stores ridge maps (the objective in its settings) that undo a linear bend as ridge
    // does; without model B it is refused.
    void attentionAlignedRidge()
    {
        QTemporaryDir tmp;
        std::unique_ptr<gpu::Model> b;
        const auto path = captureBent(
            fs::path(tmp.path().toStdString()) / "scale", b, [](float x) { return 2 * x; }, 20);
        const auto file = core::ExperimentReader::open(path);
        const auto &cb = b->config();
        const int kv = cb.numKvHeads, hd = cb.headDim, rep = cb.numHeads / cb.numKvHeads;
        const auto metric = gpu::targetMetric(file, *b, {3}, 1);
        const auto chunkedMetric =
            gpu::targetMetric(file, *b, {3}, 1, int64_t(5) * cb.numKvHeads * cb.headDim * cb.headDim);
        QCOMPARE(metric.prompts, 1);
        QCOMPARE(int(metric.keys.size()), cb.numLayers);
        const auto info = file.prompt(3);
        const std::vector<int> ids(info.b.ids.begin(), info.b.ids.end());
        const int64_t t = int64_t(ids.size());
        QCOMPARE(metric.tokens, t);
        auto own = b->newCache();
        const auto queries = b->queries(ids, own);
        std::mt19937_64 rng(5);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> e(static_cast<size_t>(hd));
        for (float &x : e)
            x = normal(rng);
        std::vector<core::HeadMajorKv> layers(size_t(cb.numLayers));
        for (auto &l : layers) {
            for (int h = 0; h < kv; ++h)
                for (int64_t n = 0; n < t; ++n)
                    l.keys.insert(l.keys.end(), e.begin(), e.end());
            l.values.assign(l.keys.size(), 0.0f);
        }
        auto rotated = b->newCache();
        rotated.assign(ids, layers, core::KeyForm::PreRope);
        for (int l = 0; l < cb.numLayers; ++l) {
            const auto post = rotated.layer(l, core::KeyForm::PostRope).keys; // [kv, t, hd]: R_n e
            const auto &q = queries[size_t(l)];                               // [heads, t, hd]
            for (int h = 0; h < kv; ++h) {
                double brute = 0;
                for (int64_t n = 0; n < t; ++n)
                    for (int64_t m = n; m < t; ++m)
                        for (int g = h * rep; g < (h + 1) * rep; ++g) {
                            double dot = 0;
                            for (int i = 0; i < hd; ++i)
                                dot +=
                                    double(q[(size_t(g) * size_t(t) + size_t(m)) * size_t(hd) + size_t(i)]) *
                                    post[(size_t(h) * size_t(t) + size_t(n)) * size_t(hd) + size_t(i)];
                            brute += dot * dot;
                        }
                const auto &mk = metric.keys[size_t(l)][size_t(h)];
                double quad = 0;
                for (int i = 0; i < hd; ++i)
                    for (int j = 0; j < hd; ++j)
                        quad += e[size_t(i)] * mk[size_t(i * hd + j)] * e[size_t(j)];
                QVERIFY2(
                    std::abs(quad - brute) <= 1e-4 * brute,
                    qPrintable(QString("layer %1 head %2: %3 vs %4").arg(l).arg(h).arg(quad).arg(brute)));
                // in chunks of a few key positions: the same sums
                const auto &chunked = chunkedMetric.keys[size_t(l)][size_t(h)];
                for (size_t i = 0; i < mk.size(); ++i)
                    QVERIFY(std::abs(chunked[i] - mk[i]) <= 1e-9 * (std::abs(mk[i]) + 1));
                // the value metric is a Gram matrix: symmetric, positive on e
                const auto &mv = metric.values[size_t(l)][size_t(h)];
                QCOMPARE(mv[1], mv[size_t(hd)]);
            }
        }

        gpu::AlignOptions o;
        o.fit.family = core::ConverterFamily::AttnRidge;
        o.fit.validFraction = o.fit.testFraction = 0.2;
        const auto r = gpu::alignExperiment(file, o, b.get());
        QCOMPARE(r.record.family, core::ConverterFamily::Ridge);
        QCOMPARE(r.record.layers[0].keys[0].family(), core::ConverterFamily::Ridge);
        const auto settings = nlohmann::json::parse(r.record.settingsJson);
        QCOMPARE(settings["objective"].get<std::string>(), std::string("attention"));
        QCOMPARE(settings["family"].get<std::string>(), std::string("attn_ridge"));
        QVERIFY(settings["attention_metric"]["prompts"].get<int>() > 0);
        const auto kl = gpu::transferKl(file, r.record.layers, *b, r.record.testPrompts, 8);
        QVERIFY2(kl.gapClosed() > 0.95, qPrintable(QString::number(kl.gapClosed())));
        // lambda auto: chosen per layer by the validation error in the metric, from the grid
        o.fit.autoLambda = true;
        const auto chosen = gpu::alignExperiment(file, o, b.get());
        for (const auto &layer : chosen.record.layers) {
            const double lambda = layer.keys[0].lambda;
            QVERIFY2(std::find(o.lambdaGrid.begin(), o.lambdaGrid.end(), lambda) != o.lambdaGrid.end(),
                     qPrintable(QString::number(lambda)));
        }
        QVERIFY(gpu::transferKl(file, chosen.record.layers, *b, chosen.record.testPrompts, 8).gapClosed() >
                0.95);
        QCOMPARE(test::expectError([&] { gpu::alignExperiment(file, o, nullptr); }).code(),
                 core::ErrorCode::InvalidArgument);
    }

    // The budget ends the MLP's training: with no time at all, every layer keeps its ridge start.
    void mlpBudgetKeepsTheRidgeStart()
    {
        QTemporaryDir tmp;
        const auto file =
            core::ExperimentReader::open(writePlanted(tmp.path().toStdString(), [&](const float *x) {
                const float sq[4] = {x[0] * x[0], x[1] * x[1], x[2] * x[2], x[3] * x[3]};
                return times(sq, randomMatrix(4, 6, 42));
            }));
        std::vector<int> train(28), valid = {28, 29, 30, 31};
        std::iota(train.begin(), train.end(), 0);
        const auto ridge = gpu::fitLayer(file, 0, {0}, train, 1e-6);
        gpu::MlpOptions o;
        o.hidden = 8;
        o.epochs = 5;
        o.deadline = core::Clock::now();
        gpu::MlpFitStats stats;
        const auto mlp = gpu::trainMlpLayer(file, ridge, train, valid, o, &stats);
        QVERIFY(mlp.has_value());
        QVERIFY(stats.deadlineReached);
        QCOMPARE(stats.epochs, 0);
        const std::vector<int> test = {32, 33};
        QCOMPARE(gpu::evaluateLayer(file, *mlp, test).r2Keys, gpu::evaluateLayer(file, ridge, test).r2Keys);
    }

    void calibrationTokensAreCapped()
    {
        QTemporaryDir tmp;
        const auto file = core::ExperimentReader::open(writeSynthetic(tmp.path().toStdString()));
        gpu::LayerFitStats stats;
        gpu::fitLayer(file, 0, {0}, {0, 1, 2}, 0.01, &stats, false, 30);
        QCOMPARE(stats.rows, int64_t(30)); // all of prompt 0 (20), 10 rows of prompt 1
    }

    void splitIsByPromptAndSeeded()
    {
        const auto s = gpu::splitPrompts(20, 0.15, 0.25, 7);
        QCOMPARE(s.test.size(), size_t(5));
        QCOMPARE(s.valid.size(), size_t(3));
        QCOMPARE(s.train.size(), size_t(12));
        std::vector<int> all = s.train;
        all.insert(all.end(), s.valid.begin(), s.valid.end());
        all.insert(all.end(), s.test.begin(), s.test.end());
        std::sort(all.begin(), all.end());
        for (int i = 0; i < 20; ++i)
            QCOMPARE(all[size_t(i)], i);
        QCOMPARE(gpu::splitPrompts(20, 0.15, 0.25, 7).test, s.test);
        QVERIFY(gpu::splitPrompts(20, 0.15, 0.25, 8).test != s.test);
        QVERIFY_THROWS_EXCEPTION(core::Error, gpu::splitPrompts(20, 0.5, 0.5, 1));
    }

    // A model aligned with itself: every layer is explained (R^2 > 0.999), B's attention output with
    // the converted cache is its own, CKA's diagonal is 1, and a transfer reproduces the scratch
    // generation token for token.
    void modelAlignedWithItself_data()
    {
        QTest::addColumn<int>("selection");
        QTest::addColumn<bool>("perHead");
        QTest::newRow("proportional k=1") << int(gpu::LayerSelection::Proportional) << false;
        QTest::newRow("proportional k=1 per head") << int(gpu::LayerSelection::Proportional) << true;
        QTest::newRow("top-1, auto lambda") << int(gpu::LayerSelection::TopK) << false;
    }
    void modelAlignedWithItself()
    {
        QFETCH(int, selection);
        QFETCH(bool, perHead);
        QTemporaryDir tmp;
        std::unique_ptr<gpu::Model> a, b;
        const auto path = captureSelf(tmp.path().toStdString(), a, b);
        const auto file = core::ExperimentReader::open(path);
        gpu::AlignOptions o;
        o.fit.family = core::ConverterFamily::Ridge;
        o.fit.selection = gpu::LayerSelection(selection);
        o.fit.perHead = perHead;
        o.fit.lambda = 1e-7;
        o.fit.autoLambda = o.fit.selection == gpu::LayerSelection::TopK;
        o.lambdaGrid = {1e-7, 1e-1};
        o.fit.validFraction = o.fit.testFraction = 0.2;
        const auto r = gpu::alignExperiment(file, o, b.get());
        const auto &rec = r.record;
        const int layers = b->config().numLayers;
        QCOMPARE(int(rec.layers.size()), layers);
        QCOMPARE(int(rec.layerMetrics.rows.size()), layers);
        QCOMPARE(int(rec.headMetrics.rows.size()), layers * b->config().numKvHeads);
        for (int l = 0; l < layers; ++l) {
            QCOMPARE(rec.layers[size_t(l)].sourceLayers, std::vector<int>({l}));
            QCOMPARE(rec.layers[size_t(l)].headMatched, perHead);
            for (const char *c : {"r2_k", "r2_v", "cos_k", "cos_v", "attn_cos"})
                QVERIFY2(
                    rec.layerMetrics.at(size_t(l), c) > 0.999,
                    qPrintable(
                        QString("layer %1 %2 = %3").arg(l).arg(c).arg(rec.layerMetrics.at(size_t(l), c))));
            QCOMPARE(rec.layers[size_t(l)].keys[0].lambda, 1e-7); // the auto choice is the smaller lambda
            QVERIFY(std::abs(rec.ckaKeys.data[size_t(l * layers + l)] - 1.0) < 1e-6);
            QVERIFY(std::abs(rec.ckaValues.data[size_t(l * layers + l)] - 1.0) < 1e-6);
        }
        QCOMPARE(rec.ckaKeys.rows, layers);
        QCOMPARE(rec.testPrompts.size(), size_t(3));
        // no prompt is both trained on and scored
        for (int p : rec.testPrompts)
            QVERIFY(std::find(rec.trainPrompts.begin(), rec.trainPrompts.end(), p) == rec.trainPrompts.end());
        // B from the converted cache predicts what B from its own does
        const auto kl = gpu::transferKl(file, rec.layers, *b, rec.testPrompts);
        QCOMPARE(kl.prompts, 3);
        QVERIFY2(kl.kl < 1e-4 && kl.top1 == 1.0 && kl.klNoPrefix > kl.kl, qPrintable(QString::number(kl.kl)));
        QVERIFY(kl.gapClosed() > 0.99);
        const auto conv = gpu::Converter::create(rec, *a, *b);
        std::vector<int> prompt;
        for (int i = 0; i < 26; ++i)
            prompt.push_back((i * 13 + 5) % b->config().vocabSize);
        gpu::GenerateOptions g;
        g.maxTokens = 10;
        g.stopAtEos = false;
        const auto scratch = b->generate(prompt, g);
        const auto t = gpu::transferGenerate(*a, *b, conv, prompt, g);
        QCOMPARE(t.generation.stats.reusedTokens, 25);
        QCOMPARE(t.generation.outputIds, scratch.outputIds);
    }

    // The attention-output cosine sees which kv head a conversion damages: with exact maps except
    // that B's kv head 1 gets its values scrambled, head 0's query group still reads exactly its
    // own output (cosine 1) and head 1's does not.
    void attentionCosinePerHead()
    {
        QTemporaryDir tmp;
        std::unique_ptr<gpu::Model> a, b;
        const auto path = captureSelf(tmp.path().toStdString(), a, b, 6);
        const auto file = core::ExperimentReader::open(path);
        const auto &c = b->config();
        const int w = c.numKvHeads * c.headDim;
        QCOMPARE(c.numKvHeads, 2);
        std::vector<core::LayerConverter> maps;
        std::mt19937_64 rng(4);
        std::normal_distribution<float> N(0.0f, 1.0f);
        for (int l = 0; l < c.numLayers; ++l) {
            const core::KvMap id = core::identityMap(w);
            auto scrambled = id;
            for (int i = 0; i < w; ++i) // output columns of kv head 1 read random mixtures
                for (int j = c.headDim; j < w; ++j)
                    scrambled.weight[size_t(i) * size_t(w) + size_t(j)] = N(rng);
            maps.push_back({l, {l}, false, {id}, {scrambled}, {}});
        }
        const auto m = gpu::attentionCosine(file, maps, *b, {0, 1, 2, 3, 4, 5});
        QCOMPARE(m.prompts, 6);
        for (int l = 0; l < c.numLayers; ++l) {
            QVERIFY2(std::abs(m.headCos[size_t(l)][0] - 1.0) < 1e-5,
                     qPrintable(QString("layer %1 head 0: %2").arg(l).arg(m.headCos[size_t(l)][0])));
            QVERIFY2(m.headCos[size_t(l)][1] < 0.9,
                     qPrintable(QString("layer %1 head 1: %2").arg(l).arg(m.headCos[size_t(l)][1])));
            QVERIFY(m.layerCos[size_t(l)] < 0.99);
        }
    }

    // linearCka against a direct double-precision implementation, every pair.
    void ckaMatchesANaiveComputation()
    {
        QTemporaryDir tmp;
        const auto file = core::ExperimentReader::open(writeSynthetic(tmp.path().toStdString()));
        const std::vector<int> prompts = {0, 1, 2};
        const auto [ck, cv] = gpu::linearCka(file, prompts, 0);
        QCOMPARE(ck.rows, 3);
        QCOMPARE(ck.cols, 2);
        for (int kv = 0; kv < 2; ++kv)
            for (int lb = 0; lb < 3; ++lb)
                for (int la = 0; la < 2; ++la) {
                    std::vector<std::vector<double>> X, Y; // rows
                    for (int p : prompts) {
                        const auto x = kv == 0 ? file.keys(core::ModelRole::A, la, p)
                                               : file.values(core::ModelRole::A, la, p);
                        const auto y = kv == 0 ? file.keys(core::ModelRole::B, lb, p)
                                               : file.values(core::ModelRole::B, lb, p);
                        for (size_t t = 0; t < x.size() / 4; ++t) {
                            X.emplace_back(x.begin() + long(t * 4), x.begin() + long(t * 4 + 4));
                            Y.emplace_back(y.begin() + long(t * 6), y.begin() + long(t * 6 + 6));
                        }
                    }
                    auto centre = [](std::vector<std::vector<double>> &M) {
                        for (size_t j = 0; j < M[0].size(); ++j) {
                            double mean = 0;
                            for (auto &r : M)
                                mean += r[j];
                            mean /= double(M.size());
                            for (auto &r : M)
                                r[j] -= mean;
                        }
                    };
                    centre(X);
                    centre(Y);
                    // ||A^T B||_F^2 for column sets A, B
                    auto cross = [](const auto &A, const auto &B) {
                        double sum = 0;
                        for (size_t i = 0; i < A[0].size(); ++i)
                            for (size_t j = 0; j < B[0].size(); ++j) {
                                double d = 0;
                                for (size_t t = 0; t < A.size(); ++t)
                                    d += A[t][i] * B[t][j];
                                sum += d * d;
                            }
                        return sum;
                    };
                    const double want = cross(Y, X) / std::sqrt(cross(X, X) * cross(Y, Y));
                    const double got = (kv == 0 ? ck : cv).data[size_t(lb * 2 + la)];
                    QVERIFY2(std::abs(got - want) < 1e-9, qPrintable(QString("%1 vs %2").arg(got).arg(want)));
                }
        // the layer each B layer was built from is the most similar one (an affine map of it)
        QVERIFY(ck.data[size_t(2 * 2 + 1)] > ck.data[size_t(2 * 2 + 0)]);
    }

    void sweepTable()
    {
        QTemporaryDir tmp;
        std::unique_ptr<gpu::Model> a, b;
        const auto path = captureSelf(tmp.path().toStdString(), a, b);
        const auto file = core::ExperimentReader::open(path);
        gpu::SweepOptions o;
        o.ks = {1, 2};
        o.lambdas = {1e-6, 10.0};
        o.trainTokens = {40, 0};
        o.validFraction = o.testFraction = 0.2;
        const auto sweep = gpu::sweepAlignment(file, o, b.get());
        QVERIFY(!sweep.cancelled);
        const auto &t = sweep.table;
        QCOMPARE(t.rows.size(), size_t(8));
        QCOMPARE(t.columns.front(), std::string("k"));
        for (size_t i = 0; i < t.rows.size(); ++i) {
            if (t.at(i, "train_tokens") == 40)
                continue;
            QVERIFY(t.at(i, "train_tokens") > 40);
            // exact self-maps at small lambda; heavy shrinkage costs R^2
            if (t.at(i, "lambda") < 1)
                QVERIFY2(t.at(i, "r2_k") > 0.999 && t.at(i, "attn_cos") > 0.999,
                         qPrintable(QString::number(i)));
            else
                QVERIFY(t.at(i, "r2_k") < 0.99);
        }
        // a file of another model B is refused for attention metrics
        QTemporaryDir tmp2;
        auto spec = core::randomModelPreset("gqa");
        spec.seed = 99;
        core::writeRandomHfModel(fs::path(tmp2.path().toStdString()) / "other", spec);
        const auto other = gpu::Model::load(fs::path(tmp2.path().toStdString()) / "other", {});
        QCOMPARE(test::expectError([&] { gpu::sweepAlignment(file, o, other.get()); }).code(),
                 core::ErrorCode::Config);
    }

    void errors()
    {
        QTemporaryDir tmp;
        const auto file = core::ExperimentReader::open(writeSynthetic(tmp.path().toStdString()));
        QCOMPARE(test::expectError([&] { gpu::fitLayer(file, 0, {0}, {3}, 0.01); }).code(),
                 core::ErrorCode::InvalidArgument); // only the misaligned prompt
        QVERIFY_THROWS_EXCEPTION(core::Error, gpu::fitLayer(file, 0, {}, {0}, 0.01));
        QVERIFY_THROWS_EXCEPTION(core::Error, gpu::fitLayer(file, 0, {5}, {0}, 0.01)); // A has 2 layers
    }
};

QTEST_GUILESS_MAIN(TestAlignment)
#include "tst_alignment.moc"
