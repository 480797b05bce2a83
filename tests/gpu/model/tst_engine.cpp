// Engine correctness on tiny random models the test builds itself, one per architecture variant:
// logits against a naive double-precision reference, incremental decode against a full forward,
// generation from a supplied prefix cache against generation from scratch, llama2.c against its HF
// conversion, GGUF files against the HF directory they were written from, and the KV cache's
// read/write/truncate/fork contract.
#include "core/model/checkpoint.h"
#include "core/model/dtype.h"
#include "core/model/gguf_model.h"
#include "core/model/quant_kernels.h"
#include "core/model/random_model.h"
#include "core/util/error.h"
#include "gpu/model/model.h"
#include "tests/support/expect_error.h"
#include "tests/support/reference_forward.h"

#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <random>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

std::vector<int> randomIds(int n, int vocab, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::vector<int> ids(static_cast<size_t>(n));
    for (int &id : ids)
        id = int(rng() % uint64_t(vocab));
    return ids;
}

// variant -> model path written into dir
fs::path makeVariant(const fs::path &dir, const QString &variant)
{
    if (variant.startsWith("llama2c")) {
        core::RandomModelSpec spec = core::randomModelPreset("gqa");
        spec.config.modelType = "llama2c";
        spec.config.architecture = "Llama2c";
        spec.config.ropeLayout = core::RopeLayout::Interleaved;
        spec.config.tieWordEmbeddings = variant == "llama2c-legacy-shared";
        spec.seed = 7;
        const int version = variant == "llama2c-v1" ? 1 : 0;
        const fs::path out = dir / "model.bin";
        core::writeLlama2c(out, spec.config, core::randomWeights(spec), version);
        return out;
    }
    // gemma2-caps: soft-caps tight enough to bind on random weights (Gemma 2's 50 / 30 barely do)
    const bool caps = variant == "gemma2-caps";
    core::RandomModelSpec spec = core::randomModelPreset(caps ? "gemma2" : variant.toStdString());
    if (caps) {
        spec.config.attnLogitSoftcap = 0.5;
        spec.config.finalLogitSoftcap = 5.0;
    }
    spec.seed = 11;
    const fs::path out = dir / "hf";
    core::writeRandomHfModel(out, spec);
    return out;
}

// The preset `variant` with 1,024 positions (seed 11) as an HF directory dir/hf, opened.
core::Checkpoint longContextModel(const fs::path &dir, const std::string &variant)
{
    core::RandomModelSpec spec = core::randomModelPreset(variant);
    spec.config.maxPositionEmbeddings = 1024;
    spec.seed = 11;
    core::writeRandomHfModel(dir / "hf", spec);
    return core::Checkpoint::open(dir / "hf");
}

// Logits [ids.size() * vocab] of a full forward of the model `spec` describes (seed 11).
std::vector<float> logitsOf(const fs::path &dir, core::RandomModelSpec spec, const std::vector<int> &ids)
{
    spec.seed = 11;
    core::writeRandomHfModel(dir, spec);
    auto model = gpu::Model::load(dir, {});
    auto cache = model->newCache();
    return model->forward(ids, cache, true);
}

} // namespace

class TestEngine : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void variants_data()
    {
        QTest::addColumn<QString>("variant");
        for (const char *v : {"tiny", "gqa", "qwen2", "qwen3", "qwen3-b", "phi3", "gemma2", "gemma2-caps",
                              "gemma3", "gemma3-b", "smollm", "llama3", "bias", "llama2c-legacy-shared",
                              "llama2c-legacy-separate", "llama2c-v1"})
            QTest::newRow(v) << QString(v);
    }

    // The engine's full forward agrees with the naive reference at every position.
    void matchesReference_data() { variants_data(); }
    void matchesReference()
    {
        QFETCH(QString, variant);
        QTemporaryDir tmp;
        const auto path = makeVariant(tmp.path().toStdString(), variant);
        const auto ck = core::Checkpoint::open(path);
        auto model = gpu::Model::load(ck, {});
        QVERIFY(model);
        // 80 tokens: crosses the llama3 preset's 64-token original context, so all RoPE bands act.
        const auto ids = randomIds(80, ck.config().vocabSize, 3);
        auto cache = model->newCache();
        const auto logits = model->forward(ids, cache, true);
        const auto ref = test::referenceForward(ck, ids);
        const int vocab = ck.config().vocabSize;
        QCOMPARE(logits.size(), ids.size() * size_t(vocab));
        for (size_t p = 0; p < ids.size(); ++p) {
            std::vector<float> row(logits.begin() + std::ptrdiff_t(p * size_t(vocab)),
                                   logits.begin() + std::ptrdiff_t((p + 1) * size_t(vocab)));
            const double err = test::maxRelativeError(row, ref[p]);
            if (err > 1e-4)
                QFAIL(qPrintable(QString("position %1: relative error %2").arg(p).arg(err)));
        }
    }

    // Prefill of a prefix then one token at a time gives the logits of one full forward.
    void incrementalEqualsFull_data() { variants_data(); }
    void incrementalEqualsFull()
    {
        QFETCH(QString, variant);
        QTemporaryDir tmp;
        auto model = gpu::Model::load(makeVariant(tmp.path().toStdString(), variant), {});
        const int vocab = model->config().vocabSize;
        const auto ids = randomIds(40, vocab, 5);
        auto full = model->newCache();
        const auto all = model->forward(ids, full, true);
        auto inc = model->newCache();
        model->forward(std::vector<int>(ids.begin(), ids.begin() + 17), inc);
        for (size_t p = 17; p < ids.size(); ++p) {
            const auto step = model->forward({ids[p]}, inc);
            std::vector<float> row(all.begin() + std::ptrdiff_t(p * size_t(vocab)),
                                   all.begin() + std::ptrdiff_t((p + 1) * size_t(vocab)));
            const double err = test::maxRelativeError(step, row);
            if (err > 1e-4)
                QFAIL(qPrintable(QString("position %1: relative error %2").arg(p).arg(err)));
        }
        QCOMPARE(inc.tokens(), int(ids.size()));
        QCOMPARE(inc.tokenIds(), ids);
        // a multi-token chunk at an offset (masked prefill over a cache) gives the same logits
        auto chunked = model->newCache();
        model->forward(std::vector<int>(ids.begin(), ids.begin() + 17), chunked);
        const auto chunk =
            model->forward(std::vector<int>(ids.begin() + 17, ids.begin() + 24), chunked, true);
        const std::vector<float> expected(all.begin() + std::ptrdiff_t(17 * size_t(vocab)),
                                          all.begin() + std::ptrdiff_t(24 * size_t(vocab)));
        QVERIFY(test::maxRelativeError(chunk, expected) < 1e-4);
    }

    // A cache captured elsewhere, read out and written into a fresh cache (pre-RoPE keys), lets
    // generation skip the prefix and still produce the same tokens as from scratch.
    void prefixCacheGenerationEqualsScratch_data() { variants_data(); }
    void prefixCacheGenerationEqualsScratch()
    {
        QFETCH(QString, variant);
        QTemporaryDir tmp;
        auto model = gpu::Model::load(makeVariant(tmp.path().toStdString(), variant), {});
        const auto prompt = randomIds(30, model->config().vocabSize, 9);
        gpu::GenerateOptions opt;
        opt.maxTokens = 12;
        opt.stopAtEos = false;
        const auto scratch = model->generate(prompt, opt);
        QCOMPARE(scratch.stats.reusedTokens, 0);
        QCOMPARE(scratch.stats.prefillTokens, 30);
        QCOMPARE(int(scratch.outputIds.size()), 12);

        auto donor = model->newCache();
        model->forward(std::vector<int>(prompt.begin(), prompt.begin() + 25), donor);
        std::vector<gpu::HeadMajorKv> layers;
        for (int l = 0; l < donor.numLayers(); ++l)
            layers.push_back(donor.layer(l, gpu::KeyForm::PreRope));
        auto supplied = model->newCache();
        supplied.assign(donor.tokenIds(), layers, gpu::KeyForm::PreRope);
        const auto reused = model->generate(prompt, supplied, opt);
        QCOMPARE(reused.stats.reusedTokens, 25);
        QCOMPARE(reused.stats.prefillTokens, 5);
        QCOMPARE(reused.outputIds, scratch.outputIds);

        // A cache holding the whole prompt: the last token is still recomputed for its logits.
        auto whole = model->newCache();
        model->forward(prompt, whole);
        const auto again = model->generate(prompt, whole, opt);
        QCOMPARE(again.stats.reusedTokens, 29);
        QCOMPARE(again.outputIds, scratch.outputIds);
    }

    void llama2cMatchesHfConversion_data()
    {
        QTest::addColumn<QString>("variant");
        QTest::newRow("legacy-shared") << "llama2c-legacy-shared";
        QTest::newRow("legacy-separate") << "llama2c-legacy-separate";
        QTest::newRow("v1") << "llama2c-v1";
    }
    void llama2cMatchesHfConversion()
    {
        QFETCH(QString, variant);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        const auto bin = core::Checkpoint::open(makeVariant(dir, variant));
        QCOMPARE(bin.config().ropeLayout, core::RopeLayout::Interleaved);
        core::convertToHf(bin, dir / "converted");
        const auto hf = core::Checkpoint::open(dir / "converted");
        QCOMPARE(hf.config().ropeLayout, core::RopeLayout::RotateHalf);
        auto a = gpu::Model::load(bin, {});
        auto b = gpu::Model::load(hf, {});
        const auto ids = randomIds(33, bin.config().vocabSize, 21);
        auto ca = a->newCache(), cb = b->newCache();
        const auto la = a->forward(ids, ca, true), lb = b->forward(ids, cb, true);
        QVERIFY2(test::maxRelativeError(la, lb) < 1e-5, "llama2.c and HF-converted logits differ");
        // Pre-RoPE keys differ only by the q/k row permutation; post-RoPE attention is identical.
        const auto ka = ca.layer(0, gpu::KeyForm::PostRope), kb = cb.layer(0, gpu::KeyForm::PostRope);
        QCOMPARE(ka.values.size(), kb.values.size());
        QVERIFY(test::maxRelativeError(ka.values, kb.values) < 1e-5);
        // keys: interleaved pair (2j, 2j+1) of llama2.c is (j, j + hd/2) after conversion
        const int hd = ca.headDim();
        std::vector<float> mapped(ka.keys.size());
        for (size_t row = 0; row < ka.keys.size() / size_t(hd); ++row)
            for (int j = 0; j < hd / 2; ++j) {
                mapped[row * size_t(hd) + size_t(j)] = ka.keys[row * size_t(hd) + size_t(2 * j)];
                mapped[row * size_t(hd) + size_t(j + hd / 2)] = ka.keys[row * size_t(hd) + size_t(2 * j + 1)];
            }
        QVERIFY(test::maxRelativeError(mapped, kb.keys) < 1e-5);
    }

    // A GGUF written from an HF directory (llama's q/k rows permuted for llama.cpp and back) gives
    // the same logits and the same captured KV; quantised weights give close logits.
    void ggufMatchesHf_data()
    {
        QTest::addColumn<QString>("variant");
        for (const char *v : {"gqa", "qwen2", "qwen3", "phi3", "llama3", "gemma2", "gemma3", "gemma3-b"})
            QTest::newRow(v) << QString(v);
    }
    void ggufMatchesHf()
    {
        QFETCH(QString, variant);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        const auto hf = core::Checkpoint::open(makeVariant(dir, variant));
        core::writeGguf(hf, dir / "m.gguf", core::DType::F32);
        core::writeGguf(hf, dir / "q8.gguf", core::DType::Q8_0);
        auto a = gpu::Model::load(hf, {});
        auto b = gpu::Model::load(core::Checkpoint::open(dir / "m.gguf"), {});
        auto q = gpu::Model::load(core::Checkpoint::open(dir / "q8.gguf"), {});
        const auto ids = randomIds(29, hf.config().vocabSize, 5);
        auto ca = a->newCache(), cb = b->newCache(), cq = q->newCache();
        const auto la = a->forward(ids, ca, true), lb = b->forward(ids, cb, true),
                   lq = q->forward(ids, cq, true);
        QCOMPARE(lb, la);
        for (int l = 0; l < hf.config().numLayers; ++l) {
            QCOMPARE(cb.layer(l, gpu::KeyForm::PreRope).keys, ca.layer(l, gpu::KeyForm::PreRope).keys);
            QCOMPARE(cb.layer(l, gpu::KeyForm::PreRope).values, ca.layer(l, gpu::KeyForm::PreRope).values);
        }
        const double e = test::maxRelativeError(lq, la);
        QVERIFY2(e > 0 && e < 0.05, qPrintable(QString("Q8_0 logits relative error %1").arg(e)));
    }

    // A GGUF's quantised matrices run in their blocks on the CPU (core/model/quant_kernels.h): held
    // at their stored size; a prompt's logits are those of the weights dequantised at load, bit for
    // bit (the same floats, the same tiles); one token's come from 8-bit activations, close to them
    // and the same on any thread count and on the portable path.
    void quantizedWeightsKeptInBlocks_data()
    {
        QTest::addColumn<int>("type");
        for (core::DType t : {core::DType::Q8_0, core::DType::Q4_0, core::DType::Q4_1, core::DType::Q5_0,
                              core::DType::Q5_1, core::DType::Q4_K, core::DType::Q5_K, core::DType::Q6_K})
            QTest::newRow(core::dtypeName(t)) << int(t);
    }
    void quantizedWeightsKeptInBlocks()
    {
        QFETCH(int, type);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::RandomModelSpec spec = core::randomModelPreset("gqa");
        spec.config.hiddenSize = 256; // whole K-quant super-blocks
        spec.config.numHeads = 4;
        spec.config.numKvHeads = 2;
        spec.config.headDim = 64;
        spec.config.intermediateSize = 512;
        spec.config.numLayers = 2;
        spec.seed = 9;
        core::writeRandomHfModel(dir / "hf", spec);
        core::writeGguf(core::Checkpoint::open(dir / "hf"), dir / "q.gguf", core::DType(type));
        const auto file = core::Checkpoint::open(dir / "q.gguf");
        auto kept = gpu::Model::load(file, {});
        gpu::LoadOptions deq;
        deq.dequantize = true;
        auto ref = gpu::Model::load(file, deq);
        QVERIFY2(
            kept->deviceBytes() * 3 < ref->deviceBytes(),
            qPrintable(
                QString("%1 bytes kept, %2 dequantised").arg(kept->deviceBytes()).arg(ref->deviceBytes())));
        const auto ids = randomIds(37, spec.config.vocabSize, 4);
        auto ck = kept->newCache(), cr = ref->newCache();
        const auto pk = kept->forward(ids, ck, true), pr = ref->forward(ids, cr, true);
        bool tiles = false; // the f32 tiles (AVX-512): elsewhere the BLAS multiplies the chunks
#if defined(__x86_64__) && defined(__GNUC__)
        tiles = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
        if (core::quant::hasPromptRows(core::DType(type), spec.config.hiddenSize, core::quant::activeIsa())) {
            // AVX-512 VNNI: the prompt in integers, rounded as one token is
            const double e = test::maxRelativeError(pk, pr);
            QVERIFY2(e > 0 && e < 0.05, qPrintable(QString("prompt logits relative error %1").arg(e)));
        } else if (tiles) {
            QVERIFY(pk == pr);
        } else {
            QVERIFY(test::maxRelativeError(pk, pr) < 1e-5);
        }
        // one token at a time: 8-bit activations, close to the dequantised weights' logits
        std::vector<float> dk, dr;
        for (int step = 0; step < 6; ++step) {
            const auto a = kept->forward({ids[size_t(step)]}, ck), b = ref->forward({ids[size_t(step)]}, cr);
            dk.insert(dk.end(), a.begin(), a.end());
            dr.insert(dr.end(), b.begin(), b.end());
        }
        const double e = test::maxRelativeError(dk, dr);
        QVERIFY2(e > 0 && e < 0.05, qPrintable(QString("decode logits relative error %1").arg(e)));
        // the same on two threads, and near the portable path (the reference of the vector paths,
        // whose own tests hold each kernel to its bound): the paths sum in other orders, so an
        // activation element that lands on a rounding boundary can take the neighbouring 8-bit level
        // on one path and move the logits by up to about 1% (Q4_K here, after a change to attention's
        // summation order); without such a flip they agree within 1e-4
        auto decode = [&](const gpu::LoadOptions &o) {
            auto m = gpu::Model::load(file, o);
            auto c = m->newCache();
            std::vector<float> out;
            for (int step = 0; step < 6; ++step) {
                const auto a = m->forward({ids[size_t(step)]}, c);
                out.insert(out.end(), a.begin(), a.end());
            }
            return out;
        };
        gpu::LoadOptions one, two;
        one.threads = 1;
        two.threads = 2;
        const auto d1 = decode(one);
        QVERIFY(decode(two) == d1);
        qputenv("KVWB_QUANT_ISA", "portable");
        const auto portable = decode(one);
        qunsetenv("KVWB_QUANT_ISA");
        QVERIFY2(
            test::maxRelativeError(portable, d1) < 0.02,
            qPrintable(QString("portable path relative error %1").arg(test::maxRelativeError(portable, d1))));
    }

    // Keys read back before RoPE are the reference's keys before RoPE, in every layer: each layer's
    // rotation is undone with that layer's tables (Gemma 3: local and global RoPE).
    void preRopeKeysMatchReference_data()
    {
        variants_data();
    }
    void preRopeKeysMatchReference()
    {
        QFETCH(QString, variant);
        QTemporaryDir tmp;
        const auto ck = core::Checkpoint::open(makeVariant(tmp.path().toStdString(), variant));
        auto model = gpu::Model::load(ck, {});
        const auto ids = randomIds(30, ck.config().vocabSize, 8);
        auto cache = model->newCache();
        model->forward(ids, cache);
        std::vector<std::vector<std::vector<double>>> ref; // [layer][pos][kvHeads * headDim]
        test::referenceForward(ck, ids, &ref);
        const int nkv = cache.numKvHeads(), hd = cache.headDim();
        for (int l = 0; l < cache.numLayers(); ++l) {
            const auto keys = cache.layer(l, gpu::KeyForm::PreRope).keys; // [kvHeads, tokens, headDim]
            std::vector<double> expected(keys.size());
            for (int h = 0; h < nkv; ++h)
                for (size_t p = 0; p < ids.size(); ++p)
                    for (int i = 0; i < hd; ++i)
                        expected[(size_t(h) * ids.size() + p) * size_t(hd) + size_t(i)] =
                            ref[size_t(l)][p][size_t(h * hd + i)];
            const double err = test::maxRelativeError(keys, expected);
            if (err > 1e-4)
                QFAIL(qPrintable(QString("layer %1: relative error %2").arg(l).arg(err)));
        }
    }

    // Phi-3's LongRoPE (original context 16 of 256, attention factor sqrt 2): loaded with the
    // default context, the model serves 16 positions with the short divisors; loaded for 48, the
    // long ones. Either way logits, decode steps and keys read back before RoPE (the factor undone)
    // are the reference's, the two sets give different logits, and a sequence past the context is
    // refused rather than rotated with the wrong set. A GGUF of it reads back the same.
    void longRopeMatchesReference()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        const auto ck = core::Checkpoint::open(makeVariant(dir, "phi3-longrope"));
        const int vocab = ck.config().vocabSize;
        std::vector<float> shortLogits;
        for (const int context : {0, 48}) {
            gpu::LoadOptions o;
            o.context = context;
            auto model = gpu::Model::load(ck, o);
            QCOMPARE(model->contextLimit(), context == 0 ? 16 : 48);
            const auto ids = randomIds(model->contextLimit(), vocab, 4);
            auto cache = model->newCache();
            const auto logits = model->forward(std::vector<int>(ids.begin(), ids.end() - 5), cache, true);
            std::vector<float> steps = logits;
            for (size_t p = ids.size() - 5; p < ids.size(); ++p) {
                const auto step = model->forward({ids[p]}, cache);
                steps.insert(steps.end(), step.begin(), step.end());
            }
            std::vector<std::vector<std::vector<double>>> keys;
            const auto ref = test::referenceForward(ck, ids, &keys, context > 16);
            for (size_t p = 0; p < ids.size(); ++p) {
                std::vector<float> row(steps.begin() + std::ptrdiff_t(p * size_t(vocab)),
                                       steps.begin() + std::ptrdiff_t((p + 1) * size_t(vocab)));
                const double err = test::maxRelativeError(row, ref[p]);
                if (err > 1e-4)
                    QFAIL(qPrintable(
                        QString("context %1, position %2: relative error %3").arg(context).arg(p).arg(err)));
            }
            const int hd = cache.headDim();
            for (int l = 0; l < cache.numLayers(); ++l) {
                const auto k = cache.layer(l, gpu::KeyForm::PreRope).keys; // [kvHeads, tokens, headDim]
                std::vector<double> expected(k.size());
                for (int h = 0; h < cache.numKvHeads(); ++h)
                    for (size_t p = 0; p < ids.size(); ++p)
                        for (int i = 0; i < hd; ++i)
                            expected[(size_t(h) * ids.size() + p) * size_t(hd) + size_t(i)] =
                                keys[size_t(l)][p][size_t(h * hd + i)];
                QVERIFY2(test::maxRelativeError(k, expected) < 1e-5, qPrintable(QString::number(l)));
            }
            const auto e = test::expectError([&] { model->forward({ids[0]}, cache); });
            QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
            QVERIFY2(QString(e.what()).contains("exceed the context of"), e.what());
            if (context == 0) {
                shortLogits.assign(logits.begin(), logits.begin() + 8 * vocab);
            } else {
                const std::vector<float> first(logits.begin(), logits.begin() + 8 * vocab);
                QVERIFY(test::maxRelativeError(first, shortLogits) > 1e-2); // the divisors matter
            }
        }
        gpu::LoadOptions tooLong;
        tooLong.context = 257;
        const auto e = test::expectError([&] { (void)gpu::Model::load(ck, tooLong); });
        QVERIFY2(QString(e.what()).contains("max_position_embeddings"), e.what());
        core::writeGguf(ck, dir / "m.gguf", core::DType::F32);
        const auto g = core::Checkpoint::open(dir / "m.gguf");
        QVERIFY(g.config().ropeScaling == ck.config().ropeScaling);
        auto a = gpu::Model::load(ck, {}), b = gpu::Model::load(g, {});
        const auto ids = randomIds(16, vocab, 9);
        auto ca = a->newCache(), cb = b->newCache();
        QCOMPARE(b->forward(ids, cb, true), a->forward(ids, ca, true));
    }

    // The sliding window changes the logits exactly where a query has keys beyond it: the same
    // weights with a window longer than the prompt agree on the first `window` positions and
    // differ after them (so matchesReference would catch an engine that ignored the mask).
    void slidingWindowMatters_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::newRow("gemma2") << "gemma2";
        QTest::newRow("gemma3") << "gemma3";
        QTest::newRow("gemma3-b") << "gemma3-b";
    }
    void slidingWindowMatters()
    {
        QFETCH(QString, preset);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        const core::RandomModelSpec spec = core::randomModelPreset(preset.toStdString());
        const int window = spec.config.slidingWindow;
        QVERIFY(window > 0 && window < 40);
        const auto ids = randomIds(40, spec.config.vocabSize, 6);
        const auto windowed = logitsOf(dir / "windowed", spec, ids);
        core::RandomModelSpec wide = spec;
        wide.config.slidingWindow = 1000; // the sliding layers keep their RoPE, lose their mask
        const auto unmasked = logitsOf(dir / "wide", wide, ids);
        const size_t vocab = size_t(spec.config.vocabSize);
        const auto row = [&](const std::vector<float> &l, size_t p) {
            return std::vector<float>(l.begin() + std::ptrdiff_t(p * vocab),
                                      l.begin() + std::ptrdiff_t((p + 1) * vocab));
        };
        for (size_t p = 0; p < ids.size(); ++p) {
            const double diff = test::maxRelativeError(row(windowed, p), row(unmasked, p));
            if (p < size_t(window) && diff > 1e-6)
                QFAIL(qPrintable(QString("position %1 inside the window differs by %2").arg(p).arg(diff)));
            if (p >= size_t(window) && diff < 1e-3)
                QFAIL(
                    qPrintable(QString("position %1 beyond the window differs by only %2").arg(p).arg(diff)));
        }
    }

    // Tight soft-caps change the logits (so the gemma2-caps reference comparison tests them).
    void softcapsMatter()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::RandomModelSpec spec = core::randomModelPreset("gemma2");
        const auto ids = randomIds(20, spec.config.vocabSize, 6);
        const auto base = logitsOf(dir / "base", spec, ids);
        spec.config.attnLogitSoftcap = 0.5;
        const auto attn = logitsOf(dir / "attn", spec, ids);
        QVERIFY(test::maxRelativeError(attn, base) > 1e-2);
        spec.config.attnLogitSoftcap = 50.0;
        spec.config.finalLogitSoftcap = 5.0;
        const auto final = logitsOf(dir / "final", spec, ids);
        QVERIFY(test::maxRelativeError(final, base) > 1e-2);
        for (float v : final)
            QVERIFY(std::abs(v) <= 5.0f); // tanh saturates to 1 in f32
    }

    void preRopeRoundTrip()
    {
        QTemporaryDir tmp;
        auto model = gpu::Model::load(makeVariant(tmp.path().toStdString(), "gqa"), {});
        auto cache = model->newCache();
        model->forward(randomIds(20, model->config().vocabSize, 1), cache);
        const auto post = cache.layer(1, gpu::KeyForm::PostRope);
        const auto pre = cache.layer(1, gpu::KeyForm::PreRope);
        const int hd = cache.headDim();
        // position 0 is not rotated; later positions are
        for (int i = 0; i < hd; ++i)
            QVERIFY(std::abs(pre.keys[size_t(i)] - post.keys[size_t(i)]) < 1e-6);
        QVERIFY(test::maxRelativeError(pre.keys, post.keys) > 1e-2);
        // writing pre-RoPE keys back reproduces the post-RoPE cache
        std::vector<gpu::HeadMajorKv> layers;
        for (int l = 0; l < cache.numLayers(); ++l)
            layers.push_back(cache.layer(l, gpu::KeyForm::PreRope));
        auto copy = model->newCache();
        copy.assign(cache.tokenIds(), layers, gpu::KeyForm::PreRope);
        QVERIFY(test::maxRelativeError(copy.layer(1, gpu::KeyForm::PostRope).keys, post.keys) < 1e-5);
        QCOMPARE(copy.bytes(), cache.bytes());
        QCOMPARE(cache.bytes(), int64_t(2) * 3 * 2 * 16 * 20 * 4);
    }

    void emptyAndForeignCaches()
    {
        QTemporaryDir tmp;
        auto model = gpu::Model::load(makeVariant(tmp.path().toStdString(), "gqa"), {});
        auto cache = model->newCache();
        QVERIFY(cache.layer(0, gpu::KeyForm::PreRope).keys.empty());
        cache.assign({}, std::vector<gpu::HeadMajorKv>(3), gpu::KeyForm::PreRope);
        QCOMPARE(cache.tokens(), 0);
        // a same-shaped cache of another model is refused, not silently mixed
        auto other = gpu::Model::load(makeVariant(tmp.path().toStdString(), "gqa"), {});
        auto foreign = other->newCache();
        QVERIFY_THROWS_EXCEPTION(core::Error, model->forward({1, 2}, foreign));
        // wrong sizes name the layer
        try {
            cache.assign({1, 2}, std::vector<gpu::HeadMajorKv>(3), gpu::KeyForm::PreRope);
            QFAIL("misshapen K/V accepted");
        } catch (const core::Error &e) {
            QCOMPARE(e.code(), core::ErrorCode::Shape);
            QVERIFY(QString(e.what()).contains("layer 0"));
        }
    }

    void contextFullAndStats()
    {
        QTemporaryDir tmp;
        auto model = gpu::Model::load(makeVariant(tmp.path().toStdString(), "tiny"), {});
        const int ctx = model->contextLimit();
        gpu::GenerateOptions o;
        o.maxTokens = 50;
        o.stopAtEos = false;
        const auto r = model->generate(randomIds(ctx - 10, model->config().vocabSize, 1), o);
        QCOMPARE(r.stopReason, gpu::StopReason::ContextFull);
        QCOMPARE(int(r.outputIds.size()), 11); // positions ctx-10 .. ctx-1 computed, one more sampled
        o.maxTokens = 0;
        const auto none = model->generate(randomIds(20, model->config().vocabSize, 1), o);
        QVERIFY(none.outputIds.empty());
        QVERIFY(none.stats.prefillTokPerS > 0);
        // a cache that diverges mid-prompt is cut back to the common prefix
        auto cache = model->newCache();
        auto prompt = randomIds(20, model->config().vocabSize, 2);
        model->forward(prompt, cache);
        prompt[12] = (prompt[12] + 1) % model->config().vocabSize;
        o.maxTokens = 3;
        const auto cut = model->generate(prompt, cache, o);
        QCOMPARE(cut.stats.reusedTokens, 12);
        QCOMPARE(cut.outputIds, model->generate(prompt, o).outputIds);
    }

    void sampleTokenOnCraftedLogits()
    {
        const std::vector<float> logits = {0.0f, 3.0f, 2.0f, 3.0f, -1.0f};
        gpu::SamplingOptions greedy;
        float lp = 0;
        QCOMPARE(gpu::sampleToken(logits.data(), 5, greedy, 0, &lp), 1); // first maximum wins ties
        QVERIFY(lp < 0);
        gpu::SamplingOptions topk;
        topk.temperature = 1.0;
        topk.topK = 2;
        std::map<int, int> counts;
        for (uint64_t s = 0; s < 2000; ++s)
            counts[gpu::sampleToken(logits.data(), 5, topk, s, nullptr)]++;
        QCOMPARE(counts.size(), size_t(2)); // only ids 1 and 3 (the two 3.0 logits)
        QVERIFY(counts[1] > 850 && counts[3] > 850);
        gpu::SamplingOptions topp;
        topp.temperature = 1.0;
        topp.topP = 0.9; // p = [.02,.41,.15,.41,.01]: 1, 3 reach .82 < .9, so 2 joins; 0 and 4 never
        counts.clear();
        for (uint64_t s = 0; s < 3000; ++s)
            counts[gpu::sampleToken(logits.data(), 5, topp, s, nullptr)]++;
        QCOMPARE(counts.count(0), size_t(0));
        QCOMPARE(counts.count(4), size_t(0));
        QVERIFY(counts[2] > 200);
    }

    void truncateAndFork()
    {
        QTemporaryDir tmp;
        auto model = gpu::Model::load(makeVariant(tmp.path().toStdString(), "tiny"), {});
        const auto ids = randomIds(24, model->config().vocabSize, 2);
        auto cache = model->newCache();
        model->forward(std::vector<int>(ids.begin(), ids.begin() + 12), cache);
        auto fork = cache.fork();
        const auto next = model->forward({ids[12]}, cache);
        QCOMPARE(cache.tokens(), 13);
        QCOMPARE(fork.tokens(), 12);
        QCOMPARE(model->forward({ids[12]}, fork), next); // the fork is independent and equivalent
        cache.truncate(12);
        QCOMPARE(model->forward({ids[12]}, cache), next);
        QVERIFY_THROWS_EXCEPTION(core::Error, cache.truncate(99));
    }

    void sampling()
    {
        QTemporaryDir tmp;
        auto model = gpu::Model::load(makeVariant(tmp.path().toStdString(), "tiny"), {});
        const auto prompt = randomIds(8, model->config().vocabSize, 4);
        gpu::GenerateOptions o;
        o.maxTokens = 16;
        o.stopAtEos = false;
        const auto greedy = model->generate(prompt, o);
        o.sampling.topK = 1;
        o.sampling.temperature = 1.5;
        QCOMPARE(model->generate(prompt, o).outputIds, greedy.outputIds); // top-k 1 is greedy
        o.sampling.topK = 0;
        o.sampling.seed = 42;
        const auto s1 = model->generate(prompt, o), s2 = model->generate(prompt, o);
        QCOMPARE(s1.outputIds, s2.outputIds); // seeded: reproducible
        o.sampling.seed = 43;
        const auto s3 = model->generate(prompt, o);
        QVERIFY(s3.outputIds != s1.outputIds);
        o.sampling.topP = 1e-9; // nucleus of one token: greedy again
        QCOMPARE(model->generate(prompt, o).outputIds, greedy.outputIds);
        // logprobs are log-probabilities
        for (float lp : greedy.logprobs)
            QVERIFY(lp <= 0.0f && lp > -50.0f);
    }

    void stopsAndCancel()
    {
        QTemporaryDir tmp;
        auto model = gpu::Model::load(makeVariant(tmp.path().toStdString(), "tiny"), {});
        const auto prompt = randomIds(8, model->config().vocabSize, 4);
        gpu::GenerateOptions o;
        o.maxTokens = 10;
        o.stopAtEos = false;
        const auto base = model->generate(prompt, o);
        QCOMPARE(base.stopReason, gpu::StopReason::MaxTokens);
        o.stopTokens = {base.outputIds[3]};
        const auto stopped = model->generate(prompt, o);
        QCOMPARE(stopped.stopReason, gpu::StopReason::StopToken);
        QVERIFY(stopped.outputIds.size() <= 4);
        QCOMPARE(stopped.outputIds.back(), base.outputIds[3]);
        o.stopTokens.clear();
        int seen = 0;
        const auto cancelled = model->generate(prompt, o, [&](int, float) { return ++seen < 5; });
        QCOMPARE(cancelled.stopReason, gpu::StopReason::Cancelled);
        QCOMPARE(int(cancelled.outputIds.size()), 5);
        std::atomic_bool flag{true};
        QCOMPARE(model->generate(prompt, o, {}, &flag).outputIds.size(), size_t(1));
        // streaming callback sees every token in order
        std::vector<int> streamed;
        const auto r = model->generate(prompt, o, [&](int id, float) {
            streamed.push_back(id);
            return true;
        });
        QCOMPARE(streamed, r.outputIds);
        QVERIFY(r.stats.ttftMs > 0);
        QCOMPARE(r.stats.generatedTokens, 10);
    }

    void loadCancelAndErrors()
    {
        QTemporaryDir tmp;
        const auto path = makeVariant(tmp.path().toStdString(), "tiny");
        int calls = 0;
        auto none = gpu::Model::load(path, {}, [&](double, const std::string &) { return ++calls < 2; });
        QVERIFY(!none);
        std::vector<double> fractions;
        auto model = gpu::Model::load(path, {}, [&](double f, const std::string &) {
            fractions.push_back(f);
            return true;
        });
        QVERIFY(model);
        QVERIFY(std::is_sorted(fractions.begin(), fractions.end()));
        QCOMPARE(fractions.back(), 1.0);
        auto cache = model->newCache();
        try {
            model->forward({0, 99999}, cache);
            QFAIL("out-of-vocabulary id accepted");
        } catch (const core::Error &e) {
            QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
            QVERIFY(QString(e.what()).contains("99999"));
        }
        gpu::LoadOptions f16;
        f16.dtype = gpu::FloatType::F16;
        try {
            gpu::Model::load(path, f16);
            QFAIL("f16 on CPU accepted");
        } catch (const core::Error &e) {
            QCOMPARE(e.code(), core::ErrorCode::Device);
        }
    }

    // bf16 runs end to end and stays close to f32 (bf16 keeps ~3 significant digits).
    void bf16CloseToF32()
    {
        QTemporaryDir tmp;
        const auto path = makeVariant(tmp.path().toStdString(), "gqa");
        auto f32 = gpu::Model::load(path, {});
        gpu::LoadOptions o;
        o.dtype = gpu::FloatType::BF16;
        auto bf16 = gpu::Model::load(path, o);
        const auto ids = randomIds(16, f32->config().vocabSize, 8);
        auto c1 = f32->newCache(), c2 = bf16->newCache();
        const double err = test::maxRelativeError(bf16->forward(ids, c2), f32->forward(ids, c1));
        QVERIFY2(err < 0.08, qPrintable(QString("bf16 relative error %1").arg(err)));
        QCOMPARE(c2.bytes() * 2, c1.bytes());
    }

    // A prompt long enough that the prefill attends in blocks of queries (over 256 tokens), at an
    // offset over a cached prefix too, agrees with the reference at every position; Gemma 2's
    // sliding layers (window 8) included.
    void longPromptMatchesReference_data()
    {
        QTest::addColumn<QString>("variant");
        for (const char *v : {"gqa", "gemma2", "qwen3"})
            QTest::newRow(v) << QString(v);
    }
    void longPromptMatchesReference()
    {
        QFETCH(QString, variant);
        QTemporaryDir tmp;
        const auto ck = longContextModel(tmp.path().toStdString(), variant.toStdString());
        auto model = gpu::Model::load(ck, {});
        const int vocab = ck.config().vocabSize;
        const auto ids = randomIds(600, vocab, 12);
        const auto ref = test::referenceForward(ck, ids);
        auto cache = model->newCache();
        // 300 tokens from position 0, then 300 more over them
        const auto first = model->forward(std::vector<int>(ids.begin(), ids.begin() + 300), cache, true);
        const auto second = model->forward(std::vector<int>(ids.begin() + 300, ids.end()), cache, true);
        for (size_t p = 0; p < ids.size(); ++p) {
            const auto &all = p < 300 ? first : second;
            const size_t row = p < 300 ? p : p - 300;
            const std::vector<float> logits(all.begin() + std::ptrdiff_t(row * size_t(vocab)),
                                            all.begin() + std::ptrdiff_t((row + 1) * size_t(vocab)));
            const double err = test::maxRelativeError(logits, ref[p]);
            if (err > 1e-4)
                QFAIL(qPrintable(QString("position %1: relative error %2").arg(p).arg(err)));
        }
    }

    // bf16 decode (one token per step: the CPU's own bf16 matrix-vector kernel where the CPU has
    // AVX-512 BF16) stays as close to the f32 reference as a bf16 prefill does, on widths that are
    // not multiples of the kernel's 32 columns (hidden 72, intermediate 200) and on the gqa preset.
    void bf16DecodeCloseToReference_data()
    {
        QTest::addColumn<QString>("variant");
        QTest::newRow("odd-widths") << "odd-widths";
        QTest::newRow("gqa") << "gqa";
        QTest::newRow("bias") << "bias";
    }
    void bf16DecodeCloseToReference()
    {
        QFETCH(QString, variant);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        fs::path path;
        if (variant == "odd-widths") {
            core::RandomModelSpec spec = core::randomModelPreset("gqa");
            spec.config.hiddenSize = 72;
            spec.config.numHeads = 3;
            spec.config.numKvHeads = 1;
            spec.config.headDim = 24;
            spec.config.intermediateSize = 200;
            spec.config.vocabSize = 301;
            spec.seed = 11;
            path = dir / "hf";
            core::writeRandomHfModel(path, spec);
        } else {
            path = makeVariant(dir, variant);
        }
        const auto ck = core::Checkpoint::open(path);
        gpu::LoadOptions o;
        o.dtype = gpu::FloatType::BF16;
        auto bf16 = gpu::Model::load(ck, o);
        const int vocab = ck.config().vocabSize;
        const auto ids = randomIds(24, vocab, 4);
        const auto ref = test::referenceForward(ck, ids);
        auto full = bf16->newCache();
        const auto all = bf16->forward(ids, full, true);
        auto inc = bf16->newCache();
        bf16->forward(std::vector<int>(ids.begin(), ids.begin() + 8), inc);
        for (size_t p = 8; p < ids.size(); ++p) {
            const auto step = bf16->forward({ids[p]}, inc);
            const std::vector<float> row(all.begin() + std::ptrdiff_t(p * size_t(vocab)),
                                         all.begin() + std::ptrdiff_t((p + 1) * size_t(vocab)));
            const double toRef = test::maxRelativeError(step, ref[p]);
            const double toPrefill = test::maxRelativeError(step, row);
            if (toRef > 0.08 || toPrefill > 0.08)
                QFAIL(qPrintable(QString("position %1: relative error %2 to the reference, %3 to the bf16 "
                                         "prefill")
                                     .arg(p)
                                     .arg(toRef)
                                     .arg(toPrefill)));
        }
    }

    // Every product on the CPU splits its rows over a team of threads: the one-token row kernels,
    // decode attention's heads once the cache is long enough, and a prompt's projections and
    // attention products (4 x 4 register tiles, one dot product per output element). Each element
    // is one thread's work, so prefill and decode give the same logits, bit for bit, on 1, 2 or 3
    // threads (f32 and bf16), on widths that are not multiples of the tiles (intermediate 520,
    // vocabulary 4099, 37 prompt tokens), and a 300-token prompt attends in query blocks. The f32
    // prefill stays within 1e-4 of the reference forward.
    void identicalOnAnyThreadCount_data()
    {
        QTest::addColumn<bool>("bf16");
        QTest::newRow("f32") << false;
        QTest::newRow("bf16") << true;
    }
    void identicalOnAnyThreadCount()
    {
        QFETCH(bool, bf16);
        QTemporaryDir tmp;
        core::RandomModelSpec spec = core::randomModelPreset("gqa");
        spec.config.hiddenSize = 128;
        spec.config.numHeads = 4;
        spec.config.numKvHeads = 2;
        spec.config.headDim = 32;
        spec.config.intermediateSize = 520; // not a multiple of the 16-row blocks
        spec.config.vocabSize = 4099;
        spec.seed = 5;
        const fs::path path = fs::path(tmp.path().toStdString()) / "hf";
        core::writeRandomHfModel(path, spec);
        // 300 positions: past 256 keys the heads' attention is split too (4 heads x 2 x keys x 32)
        const auto ids = randomIds(300, spec.config.vocabSize, 3);
        const std::vector<int> prompt(ids.begin(), ids.begin() + 37);
        std::vector<std::vector<float>> decodes, prefills;
        for (int threads : {1, 2, 3}) {
            gpu::LoadOptions o;
            o.threads = threads;
            if (bf16)
                o.dtype = gpu::FloatType::BF16;
            auto model = gpu::Model::load(path, o);
            auto cache = model->newCache(); // one token at a time from the start: all one-token products
            std::vector<float> all;
            for (size_t p = 0; p < ids.size(); ++p) {
                const auto step = model->forward({ids[p]}, cache);
                if (p % 10 == 0 || p + 1 == ids.size())
                    all.insert(all.end(), step.begin(), step.end());
            }
            decodes.push_back(std::move(all));
            auto short_ = model->newCache();
            auto prefill = model->forward(prompt, short_, true); // 37 tokens: 9 tiles of 4 rows and 1
            auto longCache = model->newCache();
            const auto blocks = model->forward(ids, longCache, true); // query blocks of 128
            prefill.insert(prefill.end(), blocks.begin(), blocks.end());
            prefills.push_back(std::move(prefill));
        }
        QCOMPARE(decodes[0].size(), size_t(31) * size_t(spec.config.vocabSize));
        QVERIFY(decodes[1] == decodes[0]);
        QVERIFY(decodes[2] == decodes[0]);
        QCOMPARE(prefills[0].size(), size_t(337) * size_t(spec.config.vocabSize));
        // (the tiles need AVX-512 F, BW, VL and FMA, and AVX-512 BF16 for bf16; elsewhere LibTorch's)
        bool tiles = false;
#if defined(__x86_64__) && defined(__GNUC__)
        tiles = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                (!bf16 || __builtin_cpu_supports("avx512bf16"));
#endif
        if (tiles) {
            QVERIFY(prefills[1] == prefills[0]);
            QVERIFY(prefills[2] == prefills[0]);
        }
        if (!bf16) {
            const auto ref = test::referenceForward(core::Checkpoint::open(path), ids);
            const size_t vocab = size_t(spec.config.vocabSize);
            for (size_t p = 0; p < ids.size(); ++p) {
                const size_t row = 37 + p;
                const std::vector<float> logits(prefills[0].begin() + std::ptrdiff_t(row * vocab),
                                                prefills[0].begin() + std::ptrdiff_t((row + 1) * vocab));
                const double err = test::maxRelativeError(logits, ref[p]);
                if (err > 1e-4)
                    QFAIL(qPrintable(QString("position %1: relative error %2").arg(p).arg(err)));
            }
        }
    }

    // A prompt longer than the prefill chunk runs chunk by chunk over the cache the chunks before
    // it wrote (LoadOptions::prefillChunk; 2048 by default): 300 tokens in chunks of 64 (the last
    // one 44) agree with the reference at every position, Gemma 2's sliding layers included, and
    // leave the same cache, queries and hidden states as one unchunked pass.
    void chunkedPrefillMatchesReference_data()
    {
        longPromptMatchesReference_data();
    }
    void chunkedPrefillMatchesReference()
    {
        QFETCH(QString, variant);
        QTemporaryDir tmp;
        const auto ck = longContextModel(tmp.path().toStdString(), variant.toStdString());
        gpu::LoadOptions chunked;
        chunked.prefillChunk = 64;
        auto model = gpu::Model::load(ck, chunked);
        auto whole = gpu::Model::load(ck, {});
        const int vocab = ck.config().vocabSize;
        const auto ids = randomIds(300, vocab, 12);
        const auto ref = test::referenceForward(ck, ids);
        auto cache = model->newCache();
        const auto logits = model->forward(ids, cache, true);
        QCOMPARE(logits.size(), ids.size() * size_t(vocab));
        for (size_t p = 0; p < ids.size(); ++p) {
            const std::vector<float> row(logits.begin() + std::ptrdiff_t(p * size_t(vocab)),
                                         logits.begin() + std::ptrdiff_t((p + 1) * size_t(vocab)));
            const double err = test::maxRelativeError(row, ref[p]);
            if (err > 1e-4)
                QFAIL(qPrintable(QString("position %1: relative error %2").arg(p).arg(err)));
        }
        auto one = whole->newCache();
        const auto last = whole->forward(ids, one);
        QCOMPARE(cache.tokens(), 300);
        QCOMPARE(cache.tokenIds(), ids);
        QVERIFY(test::maxRelativeError(model->forward({ids[0]}, cache), whole->forward({ids[0]}, one)) <
                1e-4);
        QVERIFY(test::maxRelativeError(std::vector<float>(logits.end() - vocab, logits.end()), last) < 1e-4);
        for (int l = 0; l < ck.config().numLayers; ++l) {
            const auto a = cache.layer(l, core::KeyForm::PostRope), b = one.layer(l, core::KeyForm::PostRope);
            QVERIFY(test::maxRelativeError(a.keys, b.keys) < 1e-4);
            QVERIFY(test::maxRelativeError(a.values, b.values) < 1e-4);
        }
        auto c1 = model->newCache(), c2 = whole->newCache();
        const auto q1 = model->queries(ids, c1), q2 = whole->queries(ids, c2);
        QCOMPARE(q1.size(), size_t(ck.config().numLayers));
        for (size_t l = 0; l < q1.size(); ++l) {
            QCOMPARE(q1[l].size(), q2[l].size()); // [heads, 300, hd] in position order
            QVERIFY(test::maxRelativeError(q1[l], q2[l]) < 1e-4);
        }
        const auto h1 = model->meanHiddenState(ids, 1), h2 = whole->meanHiddenState(ids, 1);
        QVERIFY(test::maxRelativeError(h1, h2) < 1e-4);
        gpu::LoadOptions bad;
        bad.prefillChunk = -1;
        const auto e = test::expectError([&] { (void)gpu::Model::load(ck, bad); });
        QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
        QVERIFY2(QString(e.what()).contains("prefill chunk is -1"), e.what());
    }

    // A KV cache of bf16 or f16 under an f32 (or bf16) model (LoadOptions::kvDtype): half the
    // bytes; the keys and values are rounded once as they are written, and prefill and decode
    // both read them widened to f32, so one token at a time agrees with a full prefill of the same
    // model to f32 rounding, and both stay near the f32 reference (bf16 keeps ~3 significant
    // digits, f16 ~4 on these magnitudes). A cache of another element type is refused.
    void lowPrecisionKvCache_data()
    {
        QTest::addColumn<QString>("compute");
        QTest::addColumn<QString>("kv");
        QTest::addColumn<double>("toReference");
        QTest::newRow("f32-bf16") << "f32"
                                  << "bf16" << 0.05;
        QTest::newRow("f32-f16") << "f32"
                                 << "f16" << 0.01;
        QTest::newRow("bf16-f16") << "bf16"
                                  << "f16" << 0.08;
        QTest::newRow("bf16-f32") << "bf16"
                                  << "f32" << 0.08;
    }
    void lowPrecisionKvCache()
    {
        QFETCH(QString, compute);
        QFETCH(QString, kv);
        QFETCH(double, toReference);
        QTemporaryDir tmp;
        const auto ck = longContextModel(tmp.path().toStdString(), "gqa");
        gpu::LoadOptions o;
        o.dtype = *gpu::parseFloatType(compute.toStdString());
        o.kvDtype = *gpu::parseFloatType(kv.toStdString());
        o.prefillChunk = 48;
        auto model = gpu::Model::load(ck, o);
        QCOMPARE(model->kvDtype(), *o.kvDtype);
        gpu::LoadOptions same = o;
        same.kvDtype.reset();
        auto plain = gpu::Model::load(ck, same);
        const int vocab = ck.config().vocabSize;
        // 300 positions: decode attention splits its heads over the team past 256 keys
        const auto ids = randomIds(300, vocab, 21);
        const auto ref = test::referenceForward(ck, ids);
        auto full = model->newCache();
        const auto all = model->forward(ids, full, true);
        auto inc = model->newCache();
        model->forward(std::vector<int>(ids.begin(), ids.begin() + 100), inc);
        const double prefillTolerance = compute == "f32" ? 1e-4 : 0.08;
        for (size_t p = 0; p < ids.size(); ++p) {
            const std::vector<float> row(all.begin() + std::ptrdiff_t(p * size_t(vocab)),
                                         all.begin() + std::ptrdiff_t((p + 1) * size_t(vocab)));
            const double err = test::maxRelativeError(row, ref[p]);
            if (err > toReference)
                QFAIL(qPrintable(
                    QString("prefill position %1: relative error %2 to the reference").arg(p).arg(err)));
            if (p < 100 || p % 20 != 0)
                continue;
            while (inc.tokens() < int(p))
                model->forward({ids[size_t(inc.tokens())]}, inc);
            const auto step = model->forward({ids[p]}, inc);
            const double toPrefill = test::maxRelativeError(step, row);
            if (toPrefill > prefillTolerance)
                QFAIL(qPrintable(
                    QString("decode position %1: relative error %2 to the prefill").arg(p).arg(toPrefill)));
        }
        auto wide = plain->newCache();
        plain->forward(ids, wide);
        const int64_t kvBytes = gpu::floatTypeBytes(*o.kvDtype), computeBytes = gpu::floatTypeBytes(o.dtype);
        QCOMPARE(full.bytes() * computeBytes, wide.bytes() * kvBytes);
        const auto e = test::expectError([&] { plain->forward({ids[0]}, full); });
        QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
        QVERIFY2(QString(e.what()).contains("KV cache belongs to another model"), e.what());
    }

    void cudaMatchesCpu()
    {
        if (!gpu::cudaAvailable())
            QSKIP("no CUDA device with this LibTorch build");
        QTemporaryDir tmp;
        const auto path = makeVariant(tmp.path().toStdString(), "gqa");
        auto cpu = gpu::Model::load(path, {});
        gpu::LoadOptions o;
        o.device = gpu::Device::Cuda;
        auto cuda = gpu::Model::load(path, o);
        const auto ids = randomIds(64, cpu->config().vocabSize, 8);
        auto c1 = cpu->newCache(), c2 = cuda->newCache();
        QVERIFY(test::maxRelativeError(cuda->forward(ids, c2, true), cpu->forward(ids, c1, true)) < 1e-3);
    }
};

QTEST_GUILESS_MAIN(TestEngine)
#include "tst_engine.moc"
