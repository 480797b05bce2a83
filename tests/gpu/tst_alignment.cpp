// Layer-wise fitting from an experiment file: on synthetic files whose B caches are an exact affine
// function of A's, the fit recovers it on held-out prompts; prompts tokenised differently are
// skipped, not mixed in; source-layer selection follows relative depth.
#include "core/error.h"
#include "core/experiment_file.h"
#include "core/random_model.h"
#include "gpu/alignment.h"
#include "tests/support/expect_error.h"

#include <QTemporaryDir>
#include <QtTest>

#include <random>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

core::ModelInfo info(char role, int layers, int kvHeads, int headDim, const char *sha)
{
    core::ModelInfo m;
    m.role = role;
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

    void topKAndLambda()
    {
        QTemporaryDir tmp;
        const auto file = core::ExperimentReader::open(writeSynthetic(tmp.path().toStdString()));
        const std::vector<int> train = {0, 1, 2, 4}, valid = {5, 6, 7};
        for (int l = 0; l < 3; ++l) // the layer B was built from ranks first
            QCOMPARE(gpu::topKSourceLayers(file, l, 1, train, valid, 1e-6),
                     gpu::proportionalSourceLayers(l, 3, 2));
        QCOMPARE(gpu::topKSourceLayers(file, 1, 5, train, valid, 1e-6), std::vector<int>({0, 1}));
        // exact data: the least regularisation explains it best
        QCOMPARE(gpu::chooseLambda(file, 2, {1}, train, valid), 1e-4);
        QVERIFY_THROWS_EXCEPTION(core::Error, gpu::chooseLambda(file, 2, {1}, train, valid, {}));
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
