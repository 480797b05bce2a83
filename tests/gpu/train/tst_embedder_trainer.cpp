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
#include "core/util/text_util.h"
#include "core/workload/paraphrase_pairs.h"
#include "core/workload/wordnet.h"
#include "core/workload/workload.h"
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

} // namespace

class TestEmbedderTrainer : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void trainsAndReloads();
    void cancelAndTakenOutputWriteNothing();
    void demoEmbedderBeatsLexical();
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
    const auto r = gpu::trainEmbedder(o, [](int step, int, double) { return step < 5; });
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

QTEST_GUILESS_MAIN(TestEmbedderTrainer)
#include "tst_embedder_trainer.moc"
