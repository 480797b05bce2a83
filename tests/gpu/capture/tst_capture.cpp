// Capture: what lands in the experiment file is exactly what the engine's caches hold (f32
// bit-exact, pre- or post-RoPE keys), prompts are ragged per model, appending continues the file,
// a file of other models is refused, and a layer subset reads only those layers.
#include "core/model/random_model.h"
#include "core/store/experiment_file.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/error.h"
#include "gpu/capture/capture.h"
#include "gpu/model/model.h"
#include "tests/support/expect_error.h"

#include <QTemporaryDir>
#include <QtTest>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

struct Pair
{
    std::unique_ptr<gpu::Model> a, b;
    std::unique_ptr<core::Tokenizer> tok;
    fs::path tokPath;
};

Pair makePair(const fs::path &dir, const char *presetA = "tiny", const char *presetB = "llama3")
{
    auto specA = core::randomModelPreset(presetA);
    auto specB = core::randomModelPreset(presetB); // other depth, kv heads and head size
    core::writeRandomHfModel(dir / "a", specA);
    core::writeRandomHfModel(dir / "b", specB);
    Pair p;
    p.a = gpu::Model::load(dir / "a", {});
    p.b = gpu::Model::load(dir / "b", {});
    p.tokPath = dir / "a" / "tokenizer.json";
    p.tok = core::loadTokenizer(p.tokPath);
    return p;
}

core::Provenance prov()
{
    core::Provenance p;
    p.appVersion = "test";
    p.runId = "r1";
    return p;
}

} // namespace

class TestCapture : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void fileHoldsTheEnginesCaches_data()
    {
        QTest::addColumn<bool>("postRope");
        QTest::newRow("pre-rope") << false;
        QTest::newRow("post-rope") << true;
    }
    void fileHoldsTheEnginesCaches()
    {
        QFETCH(bool, postRope);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        auto p = makePair(dir);
        gpu::CaptureOptions o;
        o.file.keyForm = postRope ? core::KeyForm::PostRope : core::KeyForm::PreRope;
        const std::vector<gpu::CapturePrompt> prompts = {
            {"What is a cache?", "n1", {}, {}},
            {"Hi", "", {}, {}},
            {"A longer prompt about key-value reuse.", "n3", {}, {}}};
        {
            auto w = core::ExperimentWriter::create(dir / "e.h5", o.file, prov(),
                                                    gpu::describeModel(core::ModelRole::A, *p.a, p.tokPath),
                                                    gpu::describeModel(core::ModelRole::B, *p.b, p.tokPath));
            std::vector<int> seen;
            const auto r = gpu::capturePrompts(w, *p.a, *p.tok, *p.b, *p.tok, prompts, o, [&](int done, int) {
                seen.push_back(done);
                return true;
            });
            QCOMPARE(r.promptsWritten, 3);
            QCOMPARE(seen, (std::vector<int>{1, 2, 3}));
            w.close();
        }
        const auto rd = core::ExperimentReader::open(dir / "e.h5");
        QCOMPARE(rd.promptCount(), 3);
        QCOMPARE(rd.prompt(2).label, std::string("n3"));
        const auto form = postRope ? gpu::KeyForm::PostRope : gpu::KeyForm::PreRope;
        for (int i = 0; i < 3; ++i) {
            const auto ids = p.tok->encode(prompts[size_t(i)].text, true);
            QCOMPARE(rd.prompt(i).a.ids, std::vector<int32_t>(ids.begin(), ids.end()));
            for (const auto &[role, model] :
                 {std::pair{core::ModelRole::A, p.a.get()}, std::pair{core::ModelRole::B, p.b.get()}}) {
                auto cache = model->newCache();
                model->forward(ids, cache);
                for (int l = 0; l < model->config().numLayers; ++l) {
                    const auto kv = cache.layerTokenMajor(l, form);
                    QCOMPARE(rd.keys(role, l, i), kv.keys); // f32: bit-exact
                    QCOMPARE(rd.values(role, l, i), kv.values);
                }
            }
        }
    }

    void appendAndRefuse()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        auto p = makePair(dir);
        gpu::CaptureOptions o;
        const auto infoA = gpu::describeModel(core::ModelRole::A, *p.a, p.tokPath),
                   infoB = gpu::describeModel(core::ModelRole::B, *p.b, p.tokPath);
        {
            auto w = core::ExperimentWriter::create(dir / "e.h5", o.file, prov(), infoA, infoB);
            gpu::capturePrompts(w, *p.a, *p.tok, *p.b, *p.tok, {{"one", "", {}, {}}}, o);
        }
        {
            auto w = core::ExperimentWriter::append(dir / "e.h5", infoA, infoB);
            const auto r = gpu::capturePrompts(w, *p.a, *p.tok, *p.b, *p.tok,
                                               {{"two", "", {}, {}}, {"three", "", {}, {}}}, o);
            QCOMPARE(r.firstPrompt, 1);
        }
        QCOMPARE(core::ExperimentReader::open(dir / "e.h5").promptCount(), 3);
        QCOMPARE(core::ExperimentReader::open(dir / "e.h5").prompt(2).text, std::string("three"));
        // a different model B is refused with both fingerprints named
        core::writeRandomHfModel(dir / "other", core::randomModelPreset("gqa"));
        auto other = gpu::Model::load(dir / "other", {});
        const auto e = test::expectError([&] {
            core::ExperimentWriter::append(dir / "e.h5", infoA,
                                           gpu::describeModel(core::ModelRole::B, *other, p.tokPath));
        });
        QCOMPARE(e.code(), core::ErrorCode::Config);
        QVERIFY2(QString(e.what()).contains(QString::fromStdString(infoB.weightsSha256.substr(0, 12))),
                 e.what());
    }

    void capturesOnlySelectedLayers()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        auto p = makePair(dir);
        QCOMPARE(p.b->config().numLayers, 2); // layer 0 stays out
        gpu::CaptureOptions o;
        o.layersB = {1};
        const auto infoA = gpu::describeModel(core::ModelRole::A, *p.a, p.tokPath);
        auto infoB = gpu::describeModel(core::ModelRole::B, *p.b, p.tokPath);
        const std::vector<gpu::CapturePrompt> prompts = {{"What is a cache?", "", {}, {}},
                                                         {"Hi", "", {}, {}}};
        {
            // Lists that disagree with the writer's are refused before any prompt.
            auto w = core::ExperimentWriter::create(dir / "mismatch.h5", o.file, prov(), infoA, infoB);
            const auto e =
                test::expectError([&] { gpu::capturePrompts(w, *p.a, *p.tok, *p.b, *p.tok, prompts, o); });
            QCOMPARE(e.code(), core::ErrorCode::Config);
            QCOMPARE(w.promptCount(), 0);
        }
        infoB.capturedLayers = o.layersB;
        {
            auto w = core::ExperimentWriter::create(dir / "e.h5", o.file, prov(), infoA, infoB);
            QCOMPARE(gpu::capturePrompts(w, *p.a, *p.tok, *p.b, *p.tok, prompts, o).promptsWritten, 2);
            w.close();
        }
        const auto rd = core::ExperimentReader::open(dir / "e.h5");
        QCOMPARE(rd.model(core::ModelRole::B).capturedLayers, std::vector<int>{1});
        QCOMPARE(int(rd.model(core::ModelRole::A).capturedLayers.size()), p.a->config().numLayers);
        QCOMPARE(test::expectError([&] { rd.keys(core::ModelRole::B, 0, 0); }).code(),
                 core::ErrorCode::InvalidArgument);
        for (int i = 0; i < 2; ++i) {
            const auto ids = p.tok->encode(prompts[size_t(i)].text, true);
            auto cache = p.b->newCache();
            p.b->forward(ids, cache);
            const auto kv = cache.layerTokenMajor(1, gpu::KeyForm::PreRope);
            QCOMPARE(rd.keys(core::ModelRole::B, 1, i), kv.keys); // f32: bit-exact
            QCOMPARE(rd.values(core::ModelRole::B, 1, i), kv.values);
        }
    }

    void cancelBetweenPrompts()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        auto p = makePair(dir);
        gpu::CaptureOptions o;
        auto w = core::ExperimentWriter::create(dir / "e.h5", o.file, prov(),
                                                gpu::describeModel(core::ModelRole::A, *p.a, p.tokPath),
                                                gpu::describeModel(core::ModelRole::B, *p.b, p.tokPath));
        std::vector<gpu::CapturePrompt> prompts(5, gpu::CapturePrompt{"same prompt", "", {}, {}});
        const auto r = gpu::capturePrompts(w, *p.a, *p.tok, *p.b, *p.tok, prompts, o,
                                           [](int done, int) { return done < 2; });
        QVERIFY(r.cancelled);
        QCOMPARE(r.promptsWritten, 2);
        w.close();
        QCOMPARE(core::ExperimentReader::open(dir / "e.h5").promptCount(), 2);
    }
};

QTEST_GUILESS_MAIN(TestCapture)
#include "tst_capture.moc"
