// The trainer: loss goes down, runs are deterministic for a seed, a resumed run equals an
// uninterrupted one, and the saved HF directory reloads in the engine scoring exactly what training
// reported.
#include "core/model/checkpoint.h"
#include "core/model/random_model.h"
#include "core/util/error.h"
#include "gpu/train/trainer.h"
#include "tests/support/expect_error.h"

#include <QTemporaryDir>
#include <QtTest>

#include <random>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

// Documents from a small "language": BOS, a subject id, then a fixed continuation that depends on
// it, then EOS. Learnable, so loss must fall well below log(vocab).
gpu::TrainData makeData(int vocab, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    gpu::TrainData d;
    for (int i = 0; i < 400; ++i) {
        const int subject = 10 + int(rng() % 40);
        std::vector<int> doc = {1, subject};
        for (int k = 1; k <= 6; ++k)
            doc.push_back(60 + (subject * k) % (vocab - 60));
        doc.push_back(2);
        (i % 10 == 0 ? d.validation : d.train).push_back(doc);
    }
    return d;
}

gpu::TrainOptions tinyOptions()
{
    gpu::TrainOptions o;
    o.model = core::randomModelPreset("gqa").config;
    o.model.vocabSize = 128;
    o.model.numLayers = 2;
    o.model.bosTokenId = 1;
    o.model.eosTokenIds = {2};
    o.seqLen = 32;
    o.batchSize = 8;
    o.steps = 40;
    o.warmupSteps = 5;
    o.lr = 1e-2;
    o.minLr = 1e-3;
    o.evalEvery = 10;
    o.evalRows = 16;
    o.checkpointEvery = 0;
    o.threads = 2;
    return o;
}

} // namespace

class TestTrainer : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void lossFallsDeterministically()
    {
        QTemporaryDir t1, t2;
        const auto o = tinyOptions();
        const auto data = makeData(o.model.vocabSize, 3);
        const auto a = gpu::trainModel(o, data, t1.path().toStdString());
        const auto b = gpu::trainModel(o, data, t2.path().toStdString());
        QCOMPARE(a.stepsDone, 40);
        QCOMPARE(a.evaluations.size(), size_t(4));
        // from ~log(128) = 4.85 nats at initialisation to well below
        QVERIFY2(a.evaluations.front().valLoss.value() < 4.6,
                 qPrintable(QString::number(*a.evaluations.front().valLoss)));
        QVERIFY2(a.finalValLoss < 0.6 * a.evaluations.front().valLoss.value(),
                 qPrintable(QString::number(a.finalValLoss)));
        for (size_t i = 0; i < a.evaluations.size(); ++i) {
            QCOMPARE(a.evaluations[i].loss, b.evaluations[i].loss); // bit-identical for the seed
            QCOMPARE(*a.evaluations[i].valLoss, *b.evaluations[i].valLoss);
        }
        auto other = o;
        other.seed = 99;
        QTemporaryDir t3;
        const auto c = gpu::trainModel(other, data, t3.path().toStdString());
        QVERIFY(c.evaluations.front().loss != a.evaluations.front().loss);
    }

    void savedModelReloadsWithSameScores()
    {
        QTemporaryDir tmp;
        auto o = tinyOptions();
        const auto data = makeData(o.model.vocabSize, 4);
        const auto r = gpu::trainModel(o, data, tmp.path().toStdString());
        const fs::path dir = tmp.path().toStdString();
        QVERIFY(fs::exists(dir / "config.json"));
        QVERIFY(fs::exists(dir / "train_log.json"));
        const auto ck = core::Checkpoint::open(dir);
        QCOMPARE(ck.config().numKvHeads, o.model.numKvHeads);
        const double engineLoss = gpu::validationLoss(dir, o, data);
        QVERIFY2(std::abs(engineLoss - r.finalValLoss) < 1e-4,
                 qPrintable(QString("engine %1 vs trainer %2").arg(engineLoss).arg(r.finalValLoss)));
        // bf16 storage: same model within bf16 precision
        QTemporaryDir tmp2;
        o.weightDtype = "BF16";
        const auto r2 = gpu::trainModel(o, data, tmp2.path().toStdString());
        QVERIFY(std::abs(gpu::validationLoss(tmp2.path().toStdString(), o, data) - r2.finalValLoss) < 0.05);
        QVERIFY(fs::file_size(fs::path(tmp2.path().toStdString()) / "model.safetensors") <
                fs::file_size(dir / "model.safetensors") * 6 / 10);
    }

    void resumeEqualsUninterrupted()
    {
        QTemporaryDir full, parts;
        auto o = tinyOptions();
        o.steps = 24;
        o.evalEvery = 8;
        const auto data = makeData(o.model.vocabSize, 5);
        const auto a = gpu::trainModel(o, data, full.path().toStdString());
        const auto stopped = gpu::trainModel(o, data, parts.path().toStdString(), std::nullopt,
                                             [](const gpu::TrainProgress &p) { return p.step < 11; });
        QVERIFY(stopped.cancelled);
        QCOMPARE(stopped.stepsDone, 11);
        QVERIFY(!fs::exists(fs::path(parts.path().toStdString()) / "model.safetensors"));
        o.resume = true;
        const auto b = gpu::trainModel(o, data, parts.path().toStdString());
        QCOMPARE(b.stepsDone, 24);
        QVERIFY2(std::abs(a.finalValLoss - b.finalValLoss) < 1e-6,
                 qPrintable(QString("%1 vs %2").arg(a.finalValLoss).arg(b.finalValLoss)));
        QCOMPARE(b.evaluations.size(), a.evaluations.size());
        for (size_t i = 0; i < a.evaluations.size(); ++i) // the loss window survives the interruption
            QVERIFY(std::abs(a.evaluations[i].loss - b.evaluations[i].loss) < 1e-6);
        // other settings: refused, naming the setting
        QTemporaryDir again;
        gpu::trainModel(o, data, again.path().toStdString(), std::nullopt,
                        [](const gpu::TrainProgress &p) { return p.step < 5; });
        o.lr *= 2;
        const auto e = test::expectError([&] { gpu::trainModel(o, data, again.path().toStdString()); });
        QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
        QVERIFY2(QString(e.what()).contains("'lr'"), e.what());
    }

    void badInput()
    {
        QTemporaryDir tmp;
        auto o = tinyOptions();
        auto data = makeData(o.model.vocabSize, 6);
        data.train[7].push_back(500);
        try {
            gpu::trainModel(o, data, tmp.path().toStdString());
            QFAIL("out-of-vocabulary id accepted");
        } catch (const core::Error &e) {
            QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
            QVERIFY(QString(e.what()).contains("document 7"));
        }
        auto biased = o;
        biased.model.mlpBias = true; // the trainer would write a model the engine cannot load
        QCOMPARE(test::expectError([&] {
                     gpu::trainModel(biased, makeData(o.model.vocabSize, 6), tmp.path().toStdString());
                 }).code(),
                 core::ErrorCode::Unsupported);
        data = makeData(o.model.vocabSize, 6);
        data.validation.clear();
        QVERIFY_THROWS_EXCEPTION(core::Error, gpu::trainModel(o, data, tmp.path().toStdString()));
    }
};

QTEST_GUILESS_MAIN(TestTrainer)
#include "tst_trainer.moc"
