// Transfer: with identity maps from a model to itself, B generating from the converted cache equals
// B from scratch token for token (the converted prefix is not recomputed); scoring's host conversion
// and transfer's device conversion agree on random multi-source maps; the cross-tokenizer path puts
// A's paired rows at B's positions; maps that do not fit the geometry are refused naming the layer.
#include "core/model/random_model.h"
#include "core/store/converter_store.h"
#include "core/util/error.h"
#include "gpu/transfer/cross_tokenizer.h"
#include "gpu/transfer/transfer.h"
#include "tests/support/expect_error.h"
#include "tests/support/identity_map.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

using namespace kvwb;
namespace fs = std::filesystem;

class TestTransfer : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void identityTransferEqualsScratch_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<bool>("postRope");
        QTest::newRow("pre-rope keys") << "gqa" << false;
        QTest::newRow("post-rope keys") << "gqa" << true;
        // sliding-window layers with their own RoPE base, global layers with scaled RoPE
        QTest::newRow("gemma3-b pre-rope keys") << "gemma3-b" << false;
        QTest::newRow("gemma3-b post-rope keys") << "gemma3-b" << true;
    }
    void identityTransferEqualsScratch()
    {
        QFETCH(QString, preset);
        QFETCH(bool, postRope);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "m", core::randomModelPreset(preset.toStdString()));
        auto a = gpu::Model::load(dir / "m", {});
        auto b = gpu::Model::load(dir / "m", {}); // separate instance: caches cannot be shared
        const auto &c = b->config();
        core::ConverterRecord conv =
            test::identityConverter(c, postRope ? core::KeyForm::PostRope : core::KeyForm::PreRope);
        std::vector<int> prompt;
        for (int i = 0; i < 30; ++i)
            prompt.push_back((i * 37 + 11) % c.vocabSize);
        gpu::GenerateOptions o;
        o.maxTokens = 12;
        o.stopAtEos = false;
        const auto scratch = b->generate(prompt, o);
        const auto t = gpu::transferGenerate(*a, *b, gpu::Converter::create(conv, *a, *b), prompt, o);
        QCOMPARE(t.generation.stats.reusedTokens, 29);
        QCOMPARE(t.generation.stats.prefillTokens, 1);
        QCOMPARE(t.generation.outputIds, scratch.outputIds);
    }

    // The cross-tokenizer path: A's cache re-laid in B's positions holds A's row alignment[t] at
    // position t (values and post-RoPE keys bit for bit, pre-RoPE keys through the rotation and
    // back) with B's ids; with an identity pairing and identity maps the whole path (re-lay,
    // convert, B's last token, generation, teacher-forced agreement) reproduces B from scratch.
    void crossTokenizerPath()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "m", core::randomModelPreset("gqa"));
        auto a = gpu::Model::load(dir / "m", {});
        auto b = gpu::Model::load(dir / "m", {});
        const auto &c = b->config();
        std::vector<int> prompt;
        for (int i = 0; i < 30; ++i)
            prompt.push_back((i * 37 + 11) % c.vocabSize);

        gpu::TokenPairing shuffled;
        shuffled.idsA = prompt;
        for (int t = 0; t < 12; ++t) {
            shuffled.idsB.push_back((t * 13 + 5) % c.vocabSize);
            shuffled.alignment.push_back(int32_t((t * 5 + 3) % 29));
        }
        const int needed = gpu::sourceTokensNeeded(shuffled);
        QCOMPARE(needed, 29); // the largest paired index among B's 11 prefix positions is 28
        auto cacheA = a->newCache();
        a->forward(std::vector<int>(prompt.begin(), prompt.begin() + needed), cacheA);
        for (const core::KeyForm form : {core::KeyForm::PostRope, core::KeyForm::PreRope}) {
            const auto paired = gpu::pairedSourceCache(*a, cacheA, shuffled, form);
            QCOMPARE(paired.tokens(), 11);
            QCOMPARE(paired.tokenIds(), std::vector<int>(shuffled.idsB.begin(), shuffled.idsB.end() - 1));
            const size_t hd = size_t(c.headDim), heads = size_t(c.numKvHeads);
            for (int l = 0; l < c.numLayers; ++l) {
                const auto own = cacheA.layer(l, form), got = paired.layer(l, form);
                for (size_t h = 0; h < heads; ++h)
                    for (size_t t = 0; t < 11; ++t)
                        for (size_t i = 0; i < hd; ++i) {
                            const size_t from = (h * size_t(needed) + size_t(shuffled.alignment[t])) * hd + i,
                                         to = (h * 11 + t) * hd + i;
                            QCOMPARE(got.values[to], own.values[from]);
                            if (form == core::KeyForm::PostRope)
                                QCOMPARE(got.keys[to], own.keys[from]);
                            else
                                QVERIFY(std::abs(got.keys[to] - own.keys[from]) <=
                                        1e-4f * (1.0f + std::abs(own.keys[from])));
                        }
            }
        }
        auto tooShort = a->newCache();
        a->forward({prompt[0], prompt[1]}, tooShort);
        QCOMPARE(test::expectError([&] {
                     gpu::pairedSourceCache(*a, tooShort, shuffled, core::KeyForm::PreRope);
                 }).code(),
                 core::ErrorCode::InvalidArgument);

        gpu::TokenPairing identity;
        identity.idsA = prompt;
        identity.idsB = prompt;
        for (int t = 0; t < 30; ++t)
            identity.alignment.push_back(t);
        QVERIFY(identity.crossTokenizer());
        gpu::GenerateOptions o;
        o.maxTokens = 8;
        o.stopAtEos = false;
        const auto scratch = b->generate(prompt, o);
        for (const core::KeyForm form : {core::KeyForm::PreRope, core::KeyForm::PostRope}) {
            const auto conv = gpu::Converter::create(test::identityConverter(c, form), *a, *b);
            const auto t = gpu::transferGenerate(*a, *b, conv, identity, o);
            QCOMPARE(t.generation.stats.reusedTokens, 29);
            QCOMPARE(t.generation.outputIds, scratch.outputIds);
            const auto agree = gpu::teacherForcedAgreement(*a, *b, conv, identity, scratch.outputIds);
            QCOMPARE(agree.top1Rate(), 1.0);
            QVERIFY2(agree.meanKl() < 1e-5, qPrintable(QString::number(agree.meanKl())));
        }
    }

    // Keys converted pre-RoPE and rotated at B's positions with B's RoPE are B's own keys: A and B
    // share weights but not rope_theta, so their post-RoPE keys differ while layer 0's pre-RoPE
    // keys are the same; an identity map must give B's own layer-0 keys.
    void preRopeIdentityMatchesTargetsOwnKeys()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        auto spec = core::randomModelPreset("gqa");
        core::writeRandomHfModel(dir / "a", spec);
        spec.config.ropeTheta = 500000.0;
        core::writeRandomHfModel(dir / "b", spec);
        auto a = gpu::Model::load(dir / "a", {});
        auto b = gpu::Model::load(dir / "b", {});
        const auto &c = b->config();
        core::ConverterRecord set = test::identityConverter(c);
        std::vector<int> ids;
        for (int i = 0; i < 40; ++i)
            ids.push_back((i * 17 + 3) % c.vocabSize);
        auto cacheA = a->newCache(), own = b->newCache();
        a->forward(ids, cacheA);
        b->forward(ids, own);
        const auto converted = gpu::Converter::create(set, *a, *b).convertToHost(cacheA);
        const auto mine = own.layer(0, gpu::KeyForm::PreRope);
        const auto aPost = cacheA.layer(0, gpu::KeyForm::PostRope);
        QCOMPARE(converted[0].keys.size(), mine.keys.size());
        double maxErr = 0, maxDiffAB = 0;
        auto conv = b->newCache();
        conv.assign(ids, converted, gpu::KeyForm::PreRope);
        const auto convPost = conv.layer(0, gpu::KeyForm::PostRope),
                   ownPost = own.layer(0, gpu::KeyForm::PostRope);
        for (size_t i = 0; i < ownPost.keys.size(); ++i) {
            maxErr = std::max(maxErr, double(std::abs(convPost.keys[i] - ownPost.keys[i])));
            maxDiffAB = std::max(maxDiffAB, double(std::abs(aPost.keys[i] - ownPost.keys[i])));
        }
        QVERIFY2(maxErr < 1e-5, qPrintable(QString::number(maxErr)));
        QVERIFY(maxDiffAB > 1e-2); // the two RoPEs really differ: copying A's rotated keys would be wrong
        // the direct device path equals the host path
        auto direct = b->newCache();
        gpu::Converter::create(set, *a, *b).convert(cacheA, direct);
        QCOMPARE(direct.tokenIds(), ids);
        const auto d0 = direct.layer(0, gpu::KeyForm::PostRope);
        for (size_t i = 0; i < d0.keys.size(); ++i)
            QVERIFY(std::abs(d0.keys[i] - convPost.keys[i]) < 1e-6);
    }

    // Pre-RoPE conversion undoes each source layer's RoPE and applies each target layer's: with
    // Gemma 3's two RoPEs (local base on sliding layers, scaled global one) an identity map of a
    // model onto itself gives back every layer's own keys, before and after RoPE.
    void perLayerRopeIdentity()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "m", core::randomModelPreset("gemma3-b"));
        auto a = gpu::Model::load(dir / "m", {});
        auto b = gpu::Model::load(dir / "m", {});
        const auto &c = b->config();
        QVERIFY(c.ropeInvFreq(0) != c.ropeInvFreq(2)); // layer 0 slides, layer 2 is global
        core::ConverterRecord set = test::identityConverter(c);
        std::vector<int> ids;
        for (int i = 0; i < 40; ++i)
            ids.push_back((i * 17 + 3) % c.vocabSize);
        auto cacheA = a->newCache();
        a->forward(ids, cacheA);
        const auto converter = gpu::Converter::create(set, *a, *b);
        const auto host = converter.convertToHost(cacheA);
        auto direct = b->newCache();
        converter.convert(cacheA, direct);
        for (int l = 0; l < c.numLayers; ++l) {
            const auto pre = cacheA.layer(l, gpu::KeyForm::PreRope).keys;
            const auto post = cacheA.layer(l, gpu::KeyForm::PostRope).keys;
            const auto got = direct.layer(l, gpu::KeyForm::PostRope).keys;
            QCOMPARE(host[size_t(l)].keys.size(), pre.size());
            double hostErr = 0, directErr = 0;
            for (size_t i = 0; i < pre.size(); ++i) {
                hostErr = std::max(hostErr, double(std::abs(host[size_t(l)].keys[i] - pre[i])));
                directErr = std::max(directErr, double(std::abs(got[i] - post[i])));
            }
            QVERIFY2(hostErr < 1e-4, qPrintable(QString("layer %1 pre-RoPE: %2").arg(l).arg(hostErr)));
            QVERIFY2(directErr < 1e-4, qPrintable(QString("layer %1 post-RoPE: %2").arg(l).arg(directErr)));
        }
    }

    // Identity transfer: KL 0, top-1 agreement 1, the gate's signal 1; maps that scramble the cache
    // drive the signal down and the gate closes.
    // Selective recompute: share 1 is B's own prefill (the same tokens and a KL of exactly 0 to
    // scratch), share 0 the plain transfer, and a share between recomputes its positions only (the
    // rest stay converted) and moves B towards scratch.
    void selectiveRecompute()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "m", core::randomModelPreset("gqa"));
        auto a = gpu::Model::load(dir / "m", {});
        auto b = gpu::Model::load(dir / "m", {});
        const auto &c = b->config();
        const int w = c.numKvHeads * c.headDim;
        core::ConverterRecord noisy;
        std::mt19937_64 rng(5);
        std::normal_distribution<float> N(0.0f, 0.05f);
        for (int l = 0; l < c.numLayers; ++l) {
            auto m = test::identityMap(w);
            for (float &x : m.weight)
                x += N(rng);
            noisy.layers.push_back({l, {l}, false, {m}, {m}, {}});
        }
        const auto conv = gpu::Converter::create(noisy, *a, *b);
        std::vector<int> prompt;
        for (int i = 0; i < 24; ++i)
            prompt.push_back((i * 29 + 1) % c.vocabSize);
        gpu::GenerateOptions o;
        o.maxTokens = 8;
        o.stopAtEos = false;
        const auto scratch = b->generate(prompt, o);
        const auto klAt = [&](double share) {
            return gpu::teacherForcedAgreement(*a, *b, conv, prompt, scratch.outputIds,
                                               {share, core::RecomputePositions::Ends})
                .meanKl();
        };
        const double plain = gpu::teacherForcedAgreement(*a, *b, conv, prompt, scratch.outputIds).meanKl();
        QVERIFY2(plain > 1e-4, qPrintable(QString::number(plain)));
        QCOMPARE(klAt(0.0), plain);
        QCOMPARE(klAt(1.0), 0.0);
        const double half = klAt(0.5);
        QVERIFY2(half > 0 && half < plain, qPrintable(QString("%1 %2").arg(half).arg(plain)));

        const auto all = gpu::transferGenerate(*a, *b, conv, prompt, o, nullptr, {1.0});
        QCOMPARE(all.recomputed, 23);
        QCOMPARE(all.generation.stats.reusedTokens, 0);
        QCOMPARE(all.generation.outputIds, scratch.outputIds);
        const auto some = gpu::transferGenerate(*a, *b, conv, prompt, o, nullptr, {0.25});
        QCOMPARE(some.recomputed, 6); // round(0.25 * 23)
        QCOMPARE(some.generation.stats.reusedTokens, 17);

        // the destroyed-cache baseline: the rows at shuffled positions move B further from scratch,
        // and recomputing everything afterwards still gives B's own prefill
        core::RecomputePlan shuffled;
        shuffled.shuffleSeed = 1;
        const double destroyed =
            gpu::teacherForcedAgreement(*a, *b, conv, prompt, scratch.outputIds, shuffled).meanKl();
        QVERIFY2(destroyed > plain, qPrintable(QString("%1 %2").arg(destroyed).arg(plain)));
        shuffled.share = 1;
        QCOMPARE(gpu::teacherForcedAgreement(*a, *b, conv, prompt, scratch.outputIds, shuffled).meanKl(),
                 0.0);

        // the recomputed positions hold B's own K/V; a converted position after them keeps its conversion
        auto cacheA = a->newCache();
        a->forward(std::vector<int>(prompt.begin(), prompt.end() - 1), cacheA);
        auto converted = b->newCache(), mixed = b->newCache(), own = b->newCache();
        conv.convert(cacheA, converted);
        conv.convert(cacheA, mixed);
        QCOMPARE(gpu::recomputeConverted(*b, mixed, {2.0 / 23, core::RecomputePositions::First}), 2);
        b->forward(std::vector<int>(prompt.begin(), prompt.end() - 1), own);
        QCOMPARE(mixed.tokens(), 23);
        QCOMPARE(mixed.tokenIds(), converted.tokenIds());
        const auto m0 = mixed.layer(1, core::KeyForm::PostRope), o0 = own.layer(1, core::KeyForm::PostRope),
                   c0 = converted.layer(1, core::KeyForm::PostRope);
        const int hd = c.headDim;
        for (int h = 0; h < c.numKvHeads; ++h)
            for (int t : {0, 1, 2, 22})
                for (int j = 0; j < hd; ++j) {
                    const size_t i = (size_t(h) * 23 + size_t(t)) * size_t(hd) + size_t(j);
                    QCOMPARE(m0.values[i], t < 2 ? o0.values[i] : c0.values[i]);
                }
    }

    void agreementAndGate()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "m", core::randomModelPreset("gqa"));
        auto a = gpu::Model::load(dir / "m", {});
        auto b = gpu::Model::load(dir / "m", {});
        const auto &c = b->config();
        const int w = c.numKvHeads * c.headDim;
        core::ConverterRecord good, bad;
        std::mt19937_64 rng(3);
        std::normal_distribution<float> N(0.0f, 0.2f);
        for (int l = 0; l < c.numLayers; ++l) {
            good.layers.push_back({l, {l}, false, {test::identityMap(w)}, {test::identityMap(w)}, {}});
            auto noise = test::identityMap(w);
            for (float &x : noise.weight)
                x = N(rng);
            bad.layers.push_back({l, {l}, false, {noise}, {noise}, {}});
        }
        std::vector<int> prompt;
        for (int i = 0; i < 24; ++i)
            prompt.push_back((i * 29 + 1) % c.vocabSize);
        const std::vector<int> continuation = {5, 9, 200, 7};
        const auto ok =
            gpu::teacherForcedAgreement(*a, *b, gpu::Converter::create(good, *a, *b), prompt, continuation);
        QCOMPARE(ok.kl.size(), size_t(4));
        QVERIFY2(ok.meanKl() < 1e-6, qPrintable(QString::number(ok.meanKl())));
        QCOMPARE(ok.top1Rate(), 1.0);
        const auto off =
            gpu::teacherForcedAgreement(*a, *b, gpu::Converter::create(bad, *a, *b), prompt, continuation);
        QVERIFY(off.meanKl() > 1e-3);
        // without any prefix B's predictions move: the floor a converted cache must beat
        const auto floor = gpu::noPrefixAgreement(*b, prompt, continuation);
        QCOMPARE(floor.kl.size(), size_t(4));
        QVERIFY(floor.meanKl() > 1e-3);

        auto cacheA = a->newCache();
        a->forward(std::vector<int>(prompt.begin(), prompt.end() - 1), cacheA);
        const auto good1 = gpu::Converter::create(good, *a, *b), bad1 = gpu::Converter::create(bad, *a, *b);
        const auto pass = gpu::qualityGate(*b, good1, cacheA, prompt.back(), 4, gpu::GateSignal::KvCos, 0.9);
        QCOMPARE(pass.tail, 4);
        QVERIFY2(pass.kvCos > 0.99999 && pass.passed, qPrintable(QString::number(pass.kvCos)));
        QVERIFY2(pass.tailKl < 1e-8, qPrintable(QString::number(pass.tailKl)));
        QCOMPARE(pass.value, pass.kvCos);
        // the tail NLL is B's own on the prompt: the same whatever maps produced the prefix when they are
        // exact
        auto own = b->newCache();
        const auto logits = b->forward(prompt, own, true);
        const size_t vocab = logits.size() / prompt.size();
        double nll = 0;
        for (int i = 19; i < 23; ++i) { // positions 19..22 predict tokens 20..23
            const float *x = logits.data() + size_t(i) * vocab;
            double m = *std::max_element(x, x + vocab), sum = 0;
            for (size_t j = 0; j < vocab; ++j)
                sum += std::exp(x[j] - m);
            nll += m + std::log(sum) - x[prompt[size_t(i) + 1]];
        }
        QVERIFY2(std::abs(pass.nll - nll / 4) < 1e-4,
                 qPrintable(QString("%1 vs %2").arg(pass.nll).arg(nll / 4)));
        const auto fail = gpu::qualityGate(*b, bad1, cacheA, prompt.back(), 4, gpu::GateSignal::KvCos, 0.9);
        QVERIFY2(fail.kvCos < 0.5 && !fail.passed, qPrintable(QString::number(fail.kvCos)));
        QVERIFY(fail.tailKl > 1e-4);
        const auto klGate =
            gpu::qualityGate(*b, bad1, cacheA, prompt.back(), 4, gpu::GateSignal::TailKl, 1e-6);
        QVERIFY(!klGate.passed && klGate.value == klGate.tailKl);
        // attention-output cosine: 1 for the identity on a self pair, lower for noise maps, and the
        // gate passes or fails on it alone
        const auto attnPass =
            gpu::qualityGate(*b, good1, cacheA, prompt.back(), 4, gpu::GateSignal::AttnCos, 0.9);
        QVERIFY2(attnPass.attnCos > 0.99999 && attnPass.passed,
                 qPrintable(QString::number(attnPass.attnCos)));
        QCOMPARE(attnPass.value, attnPass.attnCos);
        const auto attnFail =
            gpu::qualityGate(*b, bad1, cacheA, prompt.back(), 4, gpu::GateSignal::AttnCos, 0.9);
        QVERIFY2(attnFail.attnCos < 0.9 && !attnFail.passed, qPrintable(QString::number(attnFail.attnCos)));
        QCOMPARE(attnFail.kvCos, fail.kvCos); // one computation whatever signal decides
        // a random map of the converter's shape (weights N(0, 1/width), biases kept)
        const auto randomMap = gpu::Converter::create(gpu::randomMapRecord(good, 1), *a, *b);
        const auto attnRandom =
            gpu::qualityGate(*b, randomMap, cacheA, prompt.back(), 4, gpu::GateSignal::AttnCos, 0.9);
        QVERIFY2(attnRandom.attnCos < 0.9 && !attnRandom.passed,
                 qPrintable(QString::number(attnRandom.attnCos)));
        // of a low-rank or MLP record: the same random linear maps, none of the fitted parts kept
        for (auto family : {core::ConverterFamily::LowRank, core::ConverterFamily::Mlp}) {
            core::ConverterRecord fitted = good;
            fitted.family = family;
            for (auto &layer : fitted.layers)
                for (auto *maps : {&layer.keys, &layer.values})
                    for (auto &m : *maps) {
                        if (family == core::ConverterFamily::LowRank) {
                            m.rank = 2;
                            m.down.assign(size_t(m.inputDim) * 2, 0.5f);
                            m.up.assign(size_t(2 * m.outputDim), 0.5f);
                            m.weight.clear();
                        } else {
                            m.hidden = 3;
                            m.hiddenWeight.assign(size_t(m.inputDim) * 3, 0.5f);
                            m.hiddenBias.assign(3, 0.5f);
                            m.outWeight.assign(size_t(3 * m.outputDim), 0.5f);
                        }
                    }
            const auto r = gpu::randomMapRecord(fitted, 1), plain = gpu::randomMapRecord(good, 1);
            QCOMPARE(r.family, core::ConverterFamily::Ridge);
            for (size_t l = 0; l < r.layers.size(); ++l) {
                const auto &m = r.layers[l].values[0];
                QCOMPARE(m.family(), core::ConverterFamily::Ridge);
                QVERIFY(m.down.empty() && m.hiddenWeight.empty() && m.outWeight.empty());
                QVERIFY(m.weight == plain.layers[l].values[0].weight);
                QVERIFY(m.bias == good.layers[l].values[0].bias);
            }
        }
        // a tail of 1: both queries read the single tail key, so the outputs are that position's
        // values (repeated over each kv head's query group): the cosine of B's own value row there
        // (recomputed on the converted prefix) with the converted one, averaged over layers
        const auto one = gpu::qualityGate(*b, bad1, cacheA, prompt.back(), 1, gpu::GateSignal::AttnCos, 0.9);
        QCOMPARE(one.tail, 1);
        {
            const int n = cacheA.tokens();
            const auto conv = bad1.convertToHost(cacheA);
            auto recomputed = b->newCache();
            bad1.convert(cacheA, recomputed);
            recomputed.truncate(n - 1);
            b->forward({prompt[size_t(n) - 1]}, recomputed);
            double expected = 0;
            for (int l = 0; l < c.numLayers; ++l) {
                const auto own = recomputed.layer(l, core::KeyForm::PreRope);
                double dot = 0, nx = 0, ny = 0;
                for (int h = 0; h < c.numKvHeads; ++h)
                    for (int d = 0; d < c.headDim; ++d) {
                        const size_t at =
                            (size_t(h) * size_t(n) + size_t(n - 1)) * size_t(c.headDim) + size_t(d);
                        const double x = own.values[at], y = conv[size_t(l)].values[at];
                        dot += x * y;
                        nx += x * x;
                        ny += y * y;
                    }
                expected += dot / std::sqrt(nx * ny);
            }
            expected /= c.numLayers;
            QVERIFY2(std::abs(one.attnCos - expected) < 1e-4,
                     qPrintable(QString("%1 vs %2").arg(one.attnCos).arg(expected)));
        }
        // a tail longer than the converted prefix is clamped to n - 1 positions, still exact for the
        // identity
        const auto longTail =
            gpu::qualityGate(*b, good1, cacheA, prompt.back(), 100, gpu::GateSignal::AttnCos, 0.9);
        QCOMPARE(longTail.tail, cacheA.tokens() - 1);
        QVERIFY2(longTail.attnCos > 0.99999, qPrintable(QString::number(longTail.attnCos)));
        QCOMPARE(core::gateSignalName(core::GateSignal::AttnCos), "attn_cos");
        QVERIFY(core::parseGateSignal("attn_cos") == core::GateSignal::AttnCos);
        QVERIFY(core::gateHigherIsBetter(core::GateSignal::AttnCos));
        QCOMPARE(core::defaultGateThreshold(core::GateSignal::AttnCos), 0.9);
        // the source cache is untouched by the gate
        QCOMPARE(cacheA.tokens(), 23);
    }

    // Scoring (gpu::convertRows on the host, what alignment metrics use) and transfer
    // (Converter, on B's device: the CPU here) are two implementations of one conversion: on random
    // multi-source maps with biases, full cross-head and per-head, they must give the same B rows from the
    // same A cache. A = demo-a (4 layers, 2 kv heads of 32), B = demo-b (6 layers, 2 kv heads of 64), so
    // rows, heads and layers all change shape on the way.
    void scoringAndTransferConvertAlike_data()
    {
        QTest::addColumn<bool>("perHead");
        QTest::addColumn<bool>("postRope");
        QTest::addColumn<int>("family");
        const int ridge = int(core::ConverterFamily::Ridge), lowRank = int(core::ConverterFamily::LowRank),
                  mlp = int(core::ConverterFamily::Mlp);
        QTest::newRow("full cross-head, pre-rope keys") << false << false << ridge;
        QTest::newRow("per head, pre-rope keys") << true << false << ridge;
        QTest::newRow("full cross-head, post-rope keys") << false << true << ridge;
        QTest::newRow("per head, post-rope keys") << true << true << ridge;
        QTest::newRow("low-rank, full cross-head") << false << false << lowRank;
        QTest::newRow("low-rank, per head") << true << false << lowRank;
        QTest::newRow("MLP, full cross-head") << false << false << mlp;
        QTest::newRow("MLP, per head") << true << true << mlp;
    }
    void scoringAndTransferConvertAlike()
    {
        QFETCH(bool, perHead);
        QFETCH(bool, postRope);
        QFETCH(int, family);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "a", core::randomModelPreset("demo-a"));
        core::writeRandomHfModel(dir / "b", core::randomModelPreset("demo-b"));
        auto a = gpu::Model::load(dir / "a", {});
        auto b = gpu::Model::load(dir / "b", {});
        const auto &ca = a->config(), &cb = b->config();
        QCOMPARE(ca.numKvHeads, cb.numKvHeads); // per-head maps need it
        QVERIFY(ca.headDim != cb.headDim && ca.numLayers != cb.numLayers);
        const int kvA = ca.numKvHeads, hdA = ca.headDim, kvB = cb.numKvHeads, hdB = cb.headDim;
        std::mt19937_64 rng(11);
        std::normal_distribution<float> N(0.0f, 1.0f);
        auto randomPart = [&](std::vector<float> &v, int rows, int cols) {
            v.resize(size_t(rows) * size_t(cols));
            for (float &w : v)
                w = N(rng) / std::sqrt(float(rows)); // outputs of the inputs' scale
        };
        auto randomMap = [&](int in, int out) {
            core::KvMap m;
            m.inputDim = in;
            m.outputDim = out;
            if (family == int(core::ConverterFamily::LowRank)) {
                m.rank = 5;
                randomPart(m.down, in, 5);
                randomPart(m.up, 5, out);
            } else {
                randomPart(m.weight, in, out);
            }
            if (family == int(core::ConverterFamily::Mlp)) {
                m.hidden = 24;
                randomPart(m.hiddenWeight, in, 24);
                randomPart(m.hiddenBias, 1, 24);
                randomPart(m.outWeight, 24, out);
            }
            m.bias.resize(size_t(out));
            for (float &x : m.bias)
                x = 0.5f * N(rng);
            return m;
        };
        core::ConverterRecord set;
        set.family = core::ConverterFamily(family);
        set.keyForm = postRope ? core::KeyForm::PostRope : core::KeyForm::PreRope;
        for (int l = 0; l < cb.numLayers; ++l) {
            core::LayerConverter m;
            m.targetLayer = l;
            m.sourceLayers = gpu::proportionalSourceLayers(l, cb.numLayers, ca.numLayers, 2);
            m.headMatched = perHead;
            const int k = int(m.sourceLayers.size());
            QCOMPARE(k, 2);
            for (int h = 0; h < (perHead ? kvB : 1); ++h) {
                m.keys.push_back(perHead ? randomMap(k * hdA, hdB) : randomMap(k * kvA * hdA, kvB * hdB));
                m.values.push_back(perHead ? randomMap(k * hdA, hdB) : randomMap(k * kvA * hdA, kvB * hdB));
            }
            set.layers.push_back(std::move(m));
        }
        // Per-head maps are the block-diagonal case of a full map: head h of every source layer
        // feeds B's head h only. The same maps written as full ones, for a third path.
        auto blockDiagonal = [&](const std::vector<core::KvMap> &heads, int k) {
            core::KvMap f;
            f.inputDim = k * kvA * hdA;
            f.outputDim = kvB * hdB;
            f.weight.assign(size_t(f.inputDim) * size_t(f.outputDim), 0.0f);
            f.bias.resize(size_t(f.outputDim));
            for (int h = 0; h < kvB; ++h) {
                const auto &m = heads[size_t(h)];
                for (int blk = 0; blk < k; ++blk)
                    for (int i = 0; i < hdA; ++i)
                        for (int j = 0; j < hdB; ++j)
                            f.weight[size_t((blk * kvA + h) * hdA + i) * size_t(f.outputDim) +
                                     size_t(h * hdB + j)] =
                                m.weight[size_t(blk * hdA + i) * size_t(hdB) + size_t(j)];
                std::copy(m.bias.begin(), m.bias.end(), f.bias.begin() + h * hdB);
            }
            return f;
        };

        std::vector<int> ids;
        for (int i = 0; i < 33; ++i)
            ids.push_back((i * 37 + 11) % ca.vocabSize);
        auto cacheA = a->newCache();
        a->forward(ids, cacheA);
        const int64_t n = int64_t(ids.size());
        const gpu::KeyForm form = postRope ? gpu::KeyForm::PostRope : gpu::KeyForm::PreRope;
        // A's rows as the experiment file holds them: token-major [n, kvA, hdA], keys in `form`
        std::vector<gpu::TokenMajorKv> rowsA;
        for (int l = 0; l < ca.numLayers; ++l)
            rowsA.push_back(cacheA.layerTokenMajor(l, form));
        // scoring's conversion of B layer l: token-major [n, kvB * hdB]
        auto scoring = [&](const core::LayerConverter &m, bool keys) {
            std::vector<const float *> src;
            for (int s : m.sourceLayers)
                src.push_back((keys ? rowsA[size_t(s)].keys : rowsA[size_t(s)].values).data());
            return gpu::convertRows(m, keys, src, n, kvA, hdA, kvB, hdB);
        };
        // the largest |scoring - transfer| over every layer and kind, relative to the largest |scoring|
        auto relativeDifference = [&](const std::vector<gpu::HeadMajorKv> &transfer) {
            double maxDiff = 0, scale = 0;
            for (int l = 0; l < cb.numLayers; ++l)
                for (bool keys : {true, false}) {
                    const auto want = scoring(set.layers[size_t(l)], keys); // [n, kvB, hdB]
                    const auto &got =
                        keys ? transfer[size_t(l)].keys : transfer[size_t(l)].values; // [kvB, n, hdB]
                    if (got.size() != want.size())
                        return std::numeric_limits<double>::infinity();
                    for (int64_t t = 0; t < n; ++t)
                        for (int h = 0; h < kvB; ++h)
                            for (int j = 0; j < hdB; ++j) {
                                const double w = want[size_t((t * kvB + h) * hdB + j)],
                                             g = got[size_t((h * n + t) * hdB + j)];
                                maxDiff = std::max(maxDiff, std::abs(w - g));
                                scale = std::max(scale, std::abs(w));
                            }
                }
            return scale > 0 ? maxDiff / scale : std::numeric_limits<double>::infinity();
        };
        // Converter's host output gives keys in the set's form: B's RoPE undone again for pre-RoPE
        const double diff = relativeDifference(gpu::Converter::create(set, *a, *b).convertToHost(cacheA));
        QVERIFY2(diff < 1e-4, qPrintable(QString::number(diff)));

        // the check can fail: the same maps reading their source layers in the other order differ
        core::ConverterRecord swapped = set;
        for (auto &m : swapped.layers)
            std::reverse(m.sourceLayers.begin(), m.sourceLayers.end());
        const double off = relativeDifference(gpu::Converter::create(swapped, *a, *b).convertToHost(cacheA));
        qInfo("max |scoring - transfer| / max |scoring|: %.3g; with the source layers swapped: %.3g", diff,
              off);
        QVERIFY2(off > 1e-2, qPrintable(QString::number(off)));

        if (perHead && family == int(core::ConverterFamily::Ridge))
            // the per-head maps written as block-diagonal full maps convert alike on the host
            for (const auto &m : set.layers) {
                core::LayerConverter full = m;
                full.headMatched = false;
                full.keys = {blockDiagonal(m.keys, int(m.sourceLayers.size()))};
                full.values = {blockDiagonal(m.values, int(m.sourceLayers.size()))};
                for (bool keys : {true, false}) {
                    const auto x = scoring(m, keys), y = scoring(full, keys);
                    QCOMPARE(y.size(), x.size());
                    double d = 0, s = 0;
                    for (size_t i = 0; i < x.size(); ++i) {
                        d = std::max(d, double(std::abs(x[i] - y[i])));
                        s = std::max(s, double(std::abs(x[i])));
                    }
                    QVERIFY2(d < 1e-5 * s, qPrintable(QString::number(d / s)));
                }
            }
    }

    // Model::tokenLocalKv is what B's own prefill writes to layer 0, for every kind of layer-0
    // projection: biases (qwen2), key norms (qwen3), scaled embeddings and unit-offset norms (gemma3).
    void tokenLocalKvIsLayerZero_data()
    {
        QTest::addColumn<QString>("preset");
        for (const char *p : {"tiny", "qwen2", "qwen3", "gemma3"})
            QTest::newRow(p) << QString::fromLatin1(p);
    }
    void tokenLocalKvIsLayerZero()
    {
        QFETCH(QString, preset);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "m", core::randomModelPreset(preset.toStdString()));
        auto m = gpu::Model::load(dir / "m", {});
        std::vector<int> ids;
        for (int t = 0; t < 19; ++t)
            ids.push_back((t * 29 + 3) % m->config().vocabSize);
        const auto local = m->tokenLocalKv(ids);
        auto cache = m->newCache();
        m->forward(ids, cache);
        const auto own = cache.layer(0, core::KeyForm::PreRope);
        QCOMPARE(local.keys.size(), own.keys.size());
        QCOMPARE(local.values.size(), own.values.size());
        double d = 0, s = 0;
        for (size_t i = 0; i < own.keys.size(); ++i) {
            d = std::max({d, double(std::abs(local.keys[i] - own.keys[i])),
                          double(std::abs(local.values[i] - own.values[i]))});
            s = std::max({s, double(std::abs(own.keys[i])), double(std::abs(own.values[i]))});
        }
        QVERIFY2(s > 0 && d < 1e-5 * s, qPrintable(QString("%1 of %2").arg(d).arg(s)));
        QCOMPARE(test::expectError([&] { m->tokenLocalKv({m->config().vocabSize}); }).code(),
                 core::ErrorCode::InvalidArgument);
    }

    // Token features at transfer time (core::TokenFeatures): B's layer-0 rows come from
    // Model::tokenLocalKv, which equals what B's own prefill writes to layer 0; a converter with
    // every feature, across a pairing where several B positions share an A token, converts a paired
    // source cache exactly as the documented layout fed to convertRows (what fitting and scoring read
    // from the file) says. A = demo-a, B = demo-b.
    void tokenFeaturesConvertAsDocumented()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "a", core::randomModelPreset("demo-a"));
        core::writeRandomHfModel(dir / "b", core::randomModelPreset("demo-b"));
        auto a = gpu::Model::load(dir / "a", {});
        auto b = gpu::Model::load(dir / "b", {});
        const auto &ca = a->config(), &cb = b->config();
        const int kvA = ca.numKvHeads, hdA = ca.headDim, kvB = cb.numKvHeads, hdB = cb.headDim;
        const int wA = kvA * hdA, wB = kvB * hdB;

        // B's prompt: 30 tokens; A's: 14, each A token covering 1-4 of B's
        gpu::TokenPairing p;
        for (int t = 0; t < 30; ++t)
            p.idsB.push_back((t * 41 + 7) % cb.vocabSize);
        for (int w = 0, t = 0; t < 30; ++w) {
            p.idsA.push_back((w * 23 + 5) % ca.vocabSize);
            for (int c = 0; c < 1 + (w * 5) % 4 && t < 30; ++c, ++t)
                p.alignment.push_back(w);
        }
        QVERIFY(p.crossTokenizer());
        const int64_t n = int64_t(p.idsB.size()) - 1;
        const std::vector<int> prefixB(p.idsB.begin(), p.idsB.end() - 1);

        // tokenLocalKv is layer 0 of B's own prefill
        const auto local = b->tokenLocalKv(prefixB);
        auto own = b->newCache();
        b->forward(prefixB, own);
        const auto layer0 = own.layer(0, core::KeyForm::PreRope);
        QCOMPARE(local.keys.size(), layer0.keys.size());
        double d0 = 0, s0 = 0;
        for (const auto *part : {&local.keys, &local.values})
            for (size_t i = 0; i < part->size(); ++i) {
                const float want = (part == &local.keys ? layer0.keys : layer0.values)[i];
                d0 = std::max(d0, double(std::abs((*part)[i] - want)));
                s0 = std::max(s0, double(std::abs(want)));
            }
        QVERIFY2(d0 < 1e-5 * s0, qPrintable(QString::number(d0 / s0)));

        const core::TokenFeatures features{2, true, 4};
        std::mt19937_64 rng(3);
        std::normal_distribution<float> N(0.0f, 1.0f);
        core::ConverterRecord set;
        set.keyForm = core::KeyForm::PreRope;
        for (int l = 0; l < cb.numLayers; ++l) {
            core::LayerConverter m;
            m.targetLayer = l;
            m.sourceLayers = gpu::proportionalSourceLayers(l, cb.numLayers, ca.numLayers, 2);
            m.features = features;
            const int in = int(2 * wA + features.extraDim(2, wA, wB));
            for (auto *list : {&m.keys, &m.values}) {
                core::KvMap map;
                map.inputDim = in;
                map.outputDim = wB;
                map.weight.resize(size_t(in) * size_t(wB));
                for (float &w : map.weight)
                    w = N(rng) / std::sqrt(float(in));
                map.bias.assign(size_t(wB), 0.25f);
                list->push_back(std::move(map));
            }
            set.layers.push_back(std::move(m));
        }
        auto cacheA = a->newCache();
        a->forward(std::vector<int>(p.idsA.begin(), p.idsA.begin() + gpu::sourceTokensNeeded(p)), cacheA);
        const auto paired = gpu::pairedSourceCache(*a, cacheA, p, core::KeyForm::PreRope);
        const auto got = gpu::Converter::create(set, *a, *b).convertToHost(paired);

        // the documented layout, by hand
        const auto plan = core::tokenFeaturePlan(
            features, std::vector<int32_t>(p.alignment.begin(), p.alignment.begin() + n), n);
        std::vector<gpu::TokenMajorKv> rowsA; // A's rows in B's positions
        for (int l = 0; l < ca.numLayers; ++l)
            rowsA.push_back(paired.layerTokenMajor(l, core::KeyForm::PreRope));
        double maxDiff = 0, scale = 0;
        for (int l = 0; l < cb.numLayers; ++l)
            for (bool keys : {true, false}) {
                const auto &m = set.layers[size_t(l)];
                std::vector<const float *> src;
                for (int s : m.sourceLayers)
                    src.push_back((keys ? rowsA[size_t(s)].keys : rowsA[size_t(s)].values).data());
                const int64_t extraDim = features.extraDim(2, wA, wB);
                std::vector<float> extra(size_t(n * extraDim), 0.0f);
                for (int64_t t = 0; t < n; ++t) {
                    float *row = extra.data() + t * extraDim;
                    for (int w = 0; w < features.window; ++w) {
                        const int32_t r = plan.windowRows[size_t(t * features.window + w)];
                        for (size_t b2 = 0; r >= 0 && b2 < src.size(); ++b2)
                            std::copy_n(src[b2] + r * wA, wA, row + (w * 2 + int(b2)) * wA);
                    }
                    float *b0 = row + features.window * 2 * wA;
                    for (int h = 0; h < kvB; ++h)
                        for (int j = 0; j < hdB; ++j) {
                            b0[h * hdB + j] = local.keys[size_t((h * n + t) * hdB + j)];
                            b0[wB + h * hdB + j] = local.values[size_t((h * n + t) * hdB + j)];
                        }
                    b0[2 * wB + plan.offset[size_t(t)]] = 1.0f;
                }
                const auto want = gpu::convertRows(m, keys, src, n, kvA, hdA, kvB, hdB, extra.data());
                const auto &g = keys ? got[size_t(l)].keys : got[size_t(l)].values; // [kvB, n, hdB]
                QCOMPARE(g.size(), want.size());
                for (int64_t t = 0; t < n; ++t)
                    for (int h = 0; h < kvB; ++h)
                        for (int j = 0; j < hdB; ++j) {
                            const double w = want[size_t((t * kvB + h) * hdB + j)],
                                         x = g[size_t((h * n + t) * hdB + j)];
                            maxDiff = std::max(maxDiff, std::abs(w - x));
                            scale = std::max(scale, std::abs(w));
                        }
            }
        QVERIFY2(maxDiff < 1e-4 * scale, qPrintable(QString::number(maxDiff / scale)));
        // the offsets matter here: positions 1.. of a run differ from the run's first
        QVERIFY(std::count(plan.offset.begin(), plan.offset.end(), 0) < n);
        // maps without their features are refused by name
        const auto e = test::expectError([&] {
            gpu::convertRows(set.layers[0], true, {nullptr, nullptr}, n, kvA, hdA, kvB, hdB);
        });
        QVERIFY2(std::string(e.what()).find("takes token features; none were given") != std::string::npos,
                 e.what());
    }

    void geometryMismatchIsRefused()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        core::writeRandomHfModel(dir / "a", core::randomModelPreset("tiny"));
        core::writeRandomHfModel(dir / "b", core::randomModelPreset("gqa"));
        auto a = gpu::Model::load(dir / "a", {});
        auto b = gpu::Model::load(dir / "b", {});
        core::ConverterRecord conv; // identity of A's width: wrong for B
        for (int l = 0; l < b->config().numLayers; ++l)
            conv.layers.push_back({l, {0}, false, {test::identityMap(64)}, {test::identityMap(64)}, {}});
        const auto e = test::expectError([&] { gpu::Converter::create(conv, *a, *b); });
        QCOMPARE(e.code(), core::ErrorCode::Shape);
        QVERIFY2(QString(e.what()).contains("layer 0"), e.what());
        conv.layers.pop_back();
        QCOMPARE(test::expectError([&] { gpu::Converter::create(conv, *a, *b); }).code(),
                 core::ErrorCode::Shape);
    }
};

QTEST_GUILESS_MAIN(TestTransfer)
#include "tst_transfer.moc"
