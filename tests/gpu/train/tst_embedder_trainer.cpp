// The demo embedder's trainer on a tiny WordNet the test writes: its loss falls, its directory
// reloads as a sentence encoder with its own WordPiece vocabulary, its log holds the held-out
// evaluation, and cancelling or a taken output writes nothing. And the embedder shipped with the
// demo (projects/demo/models/embedder) against the lexical embedders on held-out paraphrases of
// the demo's own concepts (Debian's WordNet, as the demo was built from).
#include "core/cache/semantic_sweep.h"
#include "core/cache/semantic_tier.h"
#include "core/model/encoder_config.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/seeded_random.h"
#include "core/util/text_util.h"
#include "core/workload/labelled_pairs.h"
#include "core/workload/paraphrase_pairs.h"
#include "core/workload/wordnet.h"
#include "core/workload/workload.h"
#include "gpu/model/cross_encoder.h"
#include "gpu/model/encoder.h"
#include "gpu/train/embedder_trainer.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"
#include "tests/support/wordnet_fixture.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

gpu::EmbedderTrainOptions tinyOptions(const fs::path &wordnet, const fs::path &out)
{
    gpu::EmbedderTrainOptions o;
    o.wordnetDir = wordnet;
    o.concepts = 40;
    o.holdOutEvery = 4;
    o.vocabSize = 300;
    o.hidden = 32;
    o.layers = 1;
    o.heads = 2;
    o.intermediate = 64;
    o.maxPositions = 32;
    o.steps = 120;
    o.batch = 16;
    o.warmup = 10;
    o.lr = 3e-3;
    o.evalPairs = 300;
    o.threads = 1;
    o.out = out;
    return o;
}

std::vector<double> cosines(core::Embedder &e, const std::vector<core::LabelledPair> &pairs)
{
    std::vector<double> out;
    for (const auto &p : pairs) {
        const auto a = e.embed(p.a), b = e.embed(p.b);
        double d = 0;
        for (size_t i = 0; i < a.size(); ++i)
            d += double(a[i]) * b[i];
        out.push_back(d);
    }
    return out;
}

// A planted separable set: a duplicate asks about one made-up topic in two templates; a
// non-duplicate asks about two topics in one template (a near miss that word overlap rates high).
fs::path writePlantedPairs(const fs::path &file, int count)
{
    // 400 made-up topics ("zorbplix") in 8 templates: few pairs share a text, so the split by shared
    // text has groups to draw
    const char *syllables[] = {"zor", "plix", "quen", "mav", "tul", "fer", "gon", "hex", "jur", "kel",
                               "lom", "nuv",  "orp",  "pas", "rin", "sov", "bri", "dak", "wem", "yul"};
    const char *templates[] = {"how do i clean a {} at home", "what is the best way to clean a {}",
                               "tips for cleaning my {}",     "cleaning a {} the easy way",
                               "can you clean a {} quickly",  "what should i use to clean a {}",
                               "is it hard to clean a {}",    "the right way to wash a {}"};
    core::SeededRandom rng(3);
    const auto topic = [&] { return std::string(syllables[rng.below(20)]) + syllables[rng.below(20)]; };
    std::string text;
    const auto fill = [](const char *t, const std::string &topic) {
        std::string s = t;
        return s.replace(s.find("{}"), 2, topic);
    };
    for (int i = 0; i < count; ++i) {
        const char *t1 = templates[rng.below(8)];
        const std::string a = topic();
        if (i % 2 == 0) {
            const char *t2 = t1;
            while (t2 == t1)
                t2 = templates[rng.below(8)];
            text += fill(t1, a) + "\t" + fill(t2, a) + "\t1\n";
        } else {
            std::string b = a;
            while (b == a)
                b = topic();
            text += fill(t1, a) + "\t" + fill(t1, b) + "\t0\n";
        }
    }
    core::writeFileAtomic(file, text);
    return file;
}

gpu::EmbedderTrainOptions pairOptions(const fs::path &pairs, const fs::path &out)
{
    gpu::EmbedderTrainOptions o;
    o.pairs = pairs;
    o.out = out;
    o.vocabSize = 200;
    o.hidden = 32;
    o.layers = 1;
    o.heads = 2;
    o.intermediate = 64;
    o.maxPositions = 24;
    o.steps = 60;
    o.batch = 16;
    o.warmup = 5;
    o.lr = 3e-3;
    o.evalEvery = 10;
    o.patience = 0;
    o.validationShare = 0.25;
    o.threads = 1;
    return o;
}

std::string fileBytes(const fs::path &p)
{
    return core::text::readWholeFile(p);
}

} // namespace

class TestEmbedderTrainer : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void trainsAndReloads();
    void cancelAndTakenOutputWriteNothing();
    void demoEmbedderBeatsLexical();
    void learnsPlantedPairsAndResumesExactly();
    void stopsEarlyAndFineTunes();
    void trainsAVerifierThatReloads();
};

void TestEmbedderTrainer::trainsAndReloads()
{
    QTemporaryDir tmp;
    const fs::path root(tmp.path().toStdString());
    test::writeWordNetFixture(root / "wn", 30, false);
    const auto r = gpu::trainEmbedder(tinyOptions(root / "wn", root / "emb"));
    QVERIFY(!r.cancelled);
    QVERIFY(r.losses.size() >= 2);
    QVERIFY2(r.losses.back().second < 0.7 * r.losses.front().second,
             qPrintable(QString("%1 -> %2").arg(r.losses.front().second).arg(r.losses.back().second)));
    QVERIFY(core::isEncoderModel(root / "emb"));
    const auto ck = core::EncoderCheckpoint::open(root / "emb");
    QCOMPARE(ck.config().pooling, core::Pooling::Mean);
    QVERIFY(ck.config().normalize);
    QCOMPARE(ck.config().vocabSize, r.vocabSize);
    QVERIFY(fs::exists(root / "emb" / "vocab.txt"));
    gpu::LoadOptions lo;
    lo.threads = 1;
    gpu::EncoderEmbedder e(root / "emb", lo);
    QCOMPARE(e.dim(), 32);
    QCOMPARE(e.tokenizer().kind(), std::string("wordpiece"));
    const auto log = nlohmann::json::parse(core::text::readWholeFile(root / "emb" / "train_log.json"));
    for (const char *name : {"trained", "lexical", "lexical-idf"})
        QVERIFY2(log["evaluation"].contains(name), name);
    const double loggedAuc = log["evaluation"]["trained"]["auc"];
    QCOMPARE(loggedAuc, r.evaluation[0].separation.auc);
    // the log's numbers are the reloaded embedder's
    const auto wn = core::WordNet::load(root / "wn");
    const auto pairs = core::heldOutPairs(core::paraphraseConcepts(wn, 40, 4), 300, 1 + 1000);
    QCOMPARE(core::separation(pairs, cosines(e, pairs)).auc, r.evaluation[0].separation.auc);
}

void TestEmbedderTrainer::cancelAndTakenOutputWriteNothing()
{
    QTemporaryDir tmp;
    const fs::path root(tmp.path().toStdString());
    test::writeWordNetFixture(root / "wn", 30, false);
    auto o = tinyOptions(root / "wn", root / "emb");
    const auto r = gpu::trainEmbedder(o, [](int step, int, double, double) { return step < 5; });
    QVERIFY(r.cancelled);
    QVERIFY(!fs::exists(root / "emb"));
    fs::create_directories(root / "taken");
    core::writeFileAtomic(root / "taken" / "keep.txt", "mine");
    o.out = root / "taken";
    o.steps = 2;
    const auto e = test::expectError([&] { (void)gpu::trainEmbedder(o); });
    QVERIFY2(QString(e.what()).contains("--force"), e.what());
    QVERIFY(fs::exists(root / "taken" / "keep.txt"));
    o.heads = 3; // does not divide 32
    QVERIFY(QString(test::expectError([&] { (void)gpu::trainEmbedder(o); }).what()).contains("heads (3)"));
}

void TestEmbedderTrainer::demoEmbedderBeatsLexical()
{
    const fs::path demo = test::sourceDir() / "projects" / "demo";
    const auto wn = core::WordNet::load(core::WordNet::kDefaultDir);
    // another seed than the training log's: pairs the training never scored
    const auto pairs = core::heldOutPairs(core::paraphraseConcepts(wn, 1000, 10), 3000, 2026);
    gpu::LoadOptions lo;
    lo.threads = 1;
    gpu::EncoderEmbedder trained(demo / "models" / "embedder", lo);
    core::LexicalEmbedder lexical;
    const auto t = core::separation(pairs, cosines(trained, pairs));
    const auto l = core::separation(pairs, cosines(lexical, pairs));
    qInfo("held-out pairs: AUC trained %.3f lexical %.3f; near-miss AUC %.3f %.3f; recall at precision "
          "0.9: %.3f %.3f",
          t.auc, l.auc, t.nearMissAuc, l.nearMissAuc, t.recallAtPrecision90, l.recallAtPrecision90);
    QVERIFY(t.auc > l.auc);
    QVERIFY(t.nearMissAuc > l.nearMissAuc);
    QVERIFY(t.recallAtPrecision90 > l.recallAtPrecision90);

    // As the semantic tier meets them: every demo request against every earlier one of its tenant
    // (held-out wordings and concepts among them). At a false-hit rate of at most 10% the trained
    // embedder finds more of the duplicates than either lexical embedder (IDF fitted on the
    // questions, as the tier fits it).
    const auto read = core::readWorkloadJsonl(demo / "workloads" / "demo.jsonl");
    std::vector<core::LabelledText> texts;
    std::vector<std::string> docs;
    for (const auto &r : read.requests)
        if (texts.size() < 2000) {
            texts.push_back({r.tenant, r.question, r.intent});
            docs.push_back(r.question);
        }
    core::LexicalEmbedder idf;
    idf.fitIdf(docs);
    const auto recallAt10 = [&](core::Embedder &e) {
        const auto s = core::sweepSemantic(texts, e, 0.1);
        return s.atTarget ? s.atTarget->recall : 0.0;
    };
    const double rt = recallAt10(trained), rl = recallAt10(lexical), ri = recallAt10(idf);
    qInfo("demo workload, recall at false-hit rate <= 0.1: trained %.3f lexical %.3f lexical-idf %.3f", rt,
          rl, ri);
    QVERIFY(rt >= 0.5);
    QVERIFY(rt > ri && rt > rl);
}

void TestEmbedderTrainer::learnsPlantedPairsAndResumesExactly()
{
    QTemporaryDir tmp;
    const fs::path root(tmp.path().toStdString());
    const auto pairs = writePlantedPairs(root / "pairs.tsv", 600);
    const auto r = gpu::trainEmbedder(pairOptions(pairs, root / "emb"));
    QVERIFY(!r.cancelled && !r.stoppedEarly);
    QCOMPARE(r.stepsDone, 60);
    QCOMPARE(r.validationAuc.size(), size_t(6));
    QCOMPARE(r.trainPairs + r.validationPairs, size_t(600));
    QCOMPARE(r.evaluation.at(0).embedder, std::string("trained"));
    QCOMPARE(r.evaluation.at(1).embedder, std::string("lexical"));
    const double trained = r.evaluation[0].separation.auc, lexical = r.evaluation[1].separation.auc;
    // word overlap rates the near misses high; the trained encoder learns that the topic decides
    QVERIFY2(trained > 0.95 && trained > lexical + 0.2,
             qPrintable(QString("trained %1, lexical %2").arg(trained).arg(lexical)));
    QVERIFY(r.evaluation[0].averagePrecision > 0.9);
    QVERIFY(!r.evaluation[0].curve.empty());
    QVERIFY(!fs::exists(root / "emb.train_state")); // finished: nothing to resume
    // the written encoder is the best validation pass's, and its log says so
    const auto log = nlohmann::json::parse(fileBytes(root / "emb" / "train_log.json"));
    QCOMPARE(log["best_step"].get<int>(), r.bestStep);
    double best = 0;
    for (const auto &[step, auc] : r.validationAuc)
        best = std::max(best, auc);
    QCOMPARE(log["validation_auc"].size(), size_t(6));
    QVERIFY(log["evaluation"]["trained"].contains("at_precision_0_9"));
    gpu::LoadOptions lo;
    lo.threads = 1;
    gpu::EncoderEmbedder e(root / "emb", lo);
    const auto split = core::splitPairsByText(core::readLabelledPairs(pairs).pairs, 0.25, 1);
    QCOMPARE(core::separation(split.validation, cosines(e, split.validation)).auc, trained);
    QVERIFY(std::abs(trained - best) < 1e-6); // the reloaded best weights score what validation measured

    // interrupted at step 25 (between validation passes) and resumed: the same validation passes and
    // the same encoder
    auto o = pairOptions(pairs, root / "emb2");
    const auto cut = gpu::trainEmbedder(o, [](int step, int, double, double) { return step < 25; });
    QVERIFY(cut.cancelled);
    QCOMPARE(cut.stepsDone, 25);
    QVERIFY(!fs::exists(root / "emb2"));
    QVERIFY(fs::exists(root / "emb2.train_state" / "state.json"));
    o.resume = true;
    const auto resumed = gpu::trainEmbedder(o);
    QVERIFY(resumed.resumedFrom);
    QCOMPARE(resumed.validationAuc, r.validationAuc);
    // the same encoder to float rounding (the summation order of a kernel may differ in the last bit)
    gpu::EncoderEmbedder again(root / "emb2", lo);
    for (const auto &p : split.validation) {
        const auto x = e.embed(p.a), y = again.embed(p.a);
        for (size_t k = 0; k < x.size(); ++k)
            QVERIFY2(std::abs(x[k] - y[k]) < 1e-4, p.a.c_str());
    }
    // a resume with other settings is refused, naming the setting
    auto other = pairOptions(pairs, root / "emb3");
    QVERIFY(gpu::trainEmbedder(other, [](int step, int, double, double) { return step < 3; }).cancelled);
    other.resume = true;
    other.lr = 1e-2;
    const auto e2 = test::expectError([&] { (void)gpu::trainEmbedder(other); });
    QVERIFY2(QString(e2.what()).contains("'lr' was 0.003"), e2.what());
}

void TestEmbedderTrainer::stopsEarlyAndFineTunes()
{
    QTemporaryDir tmp;
    const fs::path root(tmp.path().toStdString());
    const auto pairs = writePlantedPairs(root / "pairs.tsv", 300);
    auto o = pairOptions(pairs, root / "frozen");
    o.lr = 1e-30; // no step moves a weight: the validation AUC never improves after the first pass
    o.patience = 2;
    const auto r = gpu::trainEmbedder(o);
    QVERIFY(r.stoppedEarly);
    QCOMPARE(r.stepsDone, 30);
    QCOMPARE(r.bestStep, 10);
    // fine-tuning an encoder keeps its vocabulary and sizes and moves its validation AUC
    auto base = pairOptions(pairs, root / "base");
    base.steps = 10;
    const auto b = gpu::trainEmbedder(base);
    auto ft = pairOptions(pairs, root / "tuned");
    ft.init = root / "base";
    ft.hidden = 8; // ignored: the encoder's own sizes are kept
    ft.steps = 50;
    const auto t = gpu::trainEmbedder(ft);
    QCOMPARE(t.vocabSize, b.vocabSize);
    QCOMPARE(core::EncoderCheckpoint::open(root / "tuned").config().hiddenSize, 32);
    QCOMPARE(fileBytes(root / "tuned" / "vocab.txt"), fileBytes(root / "base" / "vocab.txt"));
    QVERIFY2(
        t.evaluation[0].separation.auc > b.evaluation[0].separation.auc,
        qPrintable(
            QString("%1 -> %2").arg(b.evaluation[0].separation.auc).arg(t.evaluation[0].separation.auc)));
    // refusals name the file or setting
    auto bad = pairOptions(root / "missing.tsv", root / "x");
    QCOMPARE(test::expectError([&] { (void)gpu::trainEmbedder(bad); }).code(), core::ErrorCode::Io);
    core::writeFileAtomic(root / "onelabel.tsv", "a b\tc d\t1\ne f\tg h\t1\ni j\tk l\t1\nm n\to p\t1\n");
    bad.pairs = root / "onelabel.tsv";
    bad.validationShare = 0.5;
    QVERIFY(QString(test::expectError([&] { (void)gpu::trainEmbedder(bad); }).what())
                .contains("needs both labels"));
    bad.pairs.clear();
    bad.init = root / "base";
    QVERIFY(QString(test::expectError([&] { (void)gpu::trainEmbedder(bad); }).what()).contains("--init"));
}

// train-verifier on the planted set: a cross-encoder that separates the near misses (which word
// overlap cannot), written as a BertForSequenceClassification directory that CrossEncoder reloads
// with the same scores, its precision-0.9 threshold recorded; fine-tuned from an embedder's encoder.
void TestEmbedderTrainer::trainsAVerifierThatReloads()
{
    QTemporaryDir tmp;
    const fs::path root(tmp.path().toStdString());
    const auto pairs = writePlantedPairs(root / "pairs.tsv", 600);
    auto o = pairOptions(pairs, root / "verifier");
    o.steps = 80;
    const auto r = gpu::trainVerifier(o);
    QVERIFY(!r.cancelled);
    const double trained = r.evaluation.at(0).separation.auc, lexical = r.evaluation.at(1).separation.auc;
    QVERIFY2(trained > 0.9 && trained > lexical + 0.2,
             qPrintable(QString("verifier %1, lexical %2").arg(trained).arg(lexical)));
    QVERIFY(gpu::isCrossEncoderModel(root / "verifier"));
    QVERIFY(!gpu::isCrossEncoderModel(test::sourceDir() / "projects" / "demo" / "models" / "embedder"));
    const auto info = core::crossEncoderInfo(root / "verifier");
    QCOMPARE(info.labels, 1);
    gpu::LoadOptions lo;
    lo.threads = 1;
    gpu::CrossEncoder v(root / "verifier", lo);
    QCOMPARE(v.name(), std::string("cross-verifier"));
    const auto log = nlohmann::json::parse(fileBytes(root / "verifier" / "train_log.json"));
    const auto &at9 = log["evaluation"]["trained"]["at_precision_0_9"];
    if (at9["threshold"].is_number()) {
        QVERIFY(v.recordedThreshold().has_value());
        QCOMPARE(*v.recordedThreshold(), at9["threshold"].get<double>());
    }
    // the reloaded scores are the evaluation's, and they are probabilities
    const auto split = core::splitPairsByText(core::readLabelledPairs(pairs).pairs, 0.25, 1);
    std::vector<double> scores;
    for (const auto &p : split.validation) {
        scores.push_back(v.score(p.a, p.b));
        QVERIFY(scores.back() >= 0 && scores.back() <= 1);
    }
    QCOMPARE(core::separation(split.validation, scores).auc, trained);
    // the verifier in the tier's interface, and fine-tuned from an embedder (its encoder, a new head)
    core::PairVerifier &asVerifier = v;
    QVERIFY(asVerifier.score("how do i clean a zorplix at home", "tips for cleaning my zorplix") >= 0);
    auto emb = pairOptions(pairs, root / "emb");
    emb.steps = 10;
    (void)gpu::trainEmbedder(emb);
    auto ft = pairOptions(pairs, root / "from-embedder");
    ft.init = root / "emb";
    ft.steps = 20;
    const auto f = gpu::trainVerifier(ft);
    QCOMPARE(f.vocabSize, core::EncoderCheckpoint::open(root / "emb").config().vocabSize);
    QVERIFY(gpu::isCrossEncoderModel(root / "from-embedder"));
    // a verifier needs both labels in training
    core::writeFileAtomic(root / "dups.tsv", "a b\tc d\t1\ne f\tg h\t1\ni j\tk l\t0\nm n\to p\t1\n");
    auto bad = pairOptions(root / "dups.tsv", root / "x");
    bad.validationShare = 0.5;
    QVERIFY(QString(test::expectError([&] { (void)gpu::trainVerifier(bad); }).what()).contains("label"));
}

QTEST_GUILESS_MAIN(TestEmbedderTrainer)
#include "tst_embedder_trainer.moc"
