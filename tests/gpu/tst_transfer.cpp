// Transfer: with identity maps from a model to itself, B generating from the converted cache equals
// B from scratch token for token (the converted prefix is not recomputed); maps that do not fit the
// geometry are refused naming the layer.
#include "core/error.h"
#include "core/random_model.h"
#include "gpu/transfer.h"
#include "tests/support/expect_error.h"

#include <QTemporaryDir>
#include <QtTest>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

gpu::RidgeSolution identity(int dim)
{
    gpu::RidgeSolution s;
    s.inputDim = s.outputDim = dim;
    s.weight.assign(size_t(dim * dim), 0.0f);
    for (int i = 0; i < dim; ++i)
        s.weight[size_t(i * dim + i)] = 1.0f;
    s.bias.assign(size_t(dim), 0.0f);
    return s;
}

} // namespace

class TestTransfer : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void identityTransferEqualsScratch_data()
    {
        QTest::addColumn<bool>("postRope");
        QTest::newRow("pre-rope keys") << false;
        QTest::newRow("post-rope keys") << true;
    }
    void identityTransferEqualsScratch()
    {
        QFETCH(bool, postRope);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "m", core::randomModelPreset("gqa"));
        auto a = gpu::Model::load(dir / "m", {});
        auto b = gpu::Model::load(dir / "m", {}); // separate instance: caches cannot be shared
        const auto &c = b->config();
        gpu::ConverterSet conv;
        conv.keyForm = postRope ? core::KeyForm::PostRope : core::KeyForm::PreRope;
        for (int l = 0; l < c.numLayers; ++l)
            conv.layers.push_back(
                {l, {l}, identity(c.numKvHeads * c.headDim), identity(c.numKvHeads * c.headDim)});
        std::vector<int> prompt;
        for (int i = 0; i < 30; ++i)
            prompt.push_back((i * 37 + 11) % c.vocabSize);
        gpu::GenerateOptions o;
        o.maxTokens = 12;
        o.stopAtEos = false;
        const auto scratch = b->generate(prompt, o);
        const auto t = gpu::transferGenerate(*a, *b, conv, prompt, o);
        QCOMPARE(t.generation.stats.reusedTokens, 29);
        QCOMPARE(t.generation.stats.prefillTokens, 1);
        QCOMPARE(t.generation.outputIds, scratch.outputIds);
    }

    void geometryMismatchIsRefused()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "a", core::randomModelPreset("tiny"));
        core::writeRandomHfModel(dir / "b", core::randomModelPreset("gqa"));
        auto a = gpu::Model::load(dir / "a", {});
        auto b = gpu::Model::load(dir / "b", {});
        gpu::ConverterSet conv; // identity of A's width: wrong for B
        for (int l = 0; l < b->config().numLayers; ++l)
            conv.layers.push_back({l, {0}, identity(64), identity(64)});
        const auto e = test::expectError([&] { gpu::transferGenerate(*a, *b, conv, {1, 2, 3}, {}); });
        QCOMPARE(e.code(), core::ErrorCode::Shape);
        QVERIFY2(QString(e.what()).contains("layer 0"), e.what());
        conv.layers.pop_back();
        QCOMPARE(test::expectError([&] {
                     gpu::transferGenerate(*a, *b, conv, {1, 2, 3}, {});
                 }).code(),
                 core::ErrorCode::Shape);
    }
};

QTEST_GUILESS_MAIN(TestTransfer)
#include "tst_transfer.moc"
