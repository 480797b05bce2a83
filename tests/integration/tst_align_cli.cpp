// `kvwb align`, `kvwb sweep` and `kvwb compare` end to end: a model aligned with itself through the
// CLI gives R^2 ~ 1 on every layer and a transfer identical to scratch; a cross-geometry pair fits,
// stores and loads back; a pair with different tokenizers captures, fits and compares through its
// token alignment; the JSON carries the documented fields; bad input fails with the right exit code
// and a message naming what is at fault.
#include "core/metrics/text_metrics.h"
#include "core/model/random_model.h"
#include "core/store/comparison_store.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"

#include <fmt/format.h>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

using namespace kvwb;
namespace fs = std::filesystem;
using test::runKvwb;

namespace {
QString q(const fs::path &p)
{
    return QString::fromStdString(p.string());
}

// The random models' byte tokenizer with merges for words of the test prompts (ids 258..281, inside
// the presets' 300-row vocabulary): a second tokenizer that splits the prompts differently, into
// fewer tokens, with merges that take in the space before a word.
std::string mergedTokenizerJson()
{
    QJsonObject root =
        QJsonDocument::fromJson(QByteArray::fromStdString(core::byteLevelTokenizerJson())).object();
    QJsonObject model = root["model"].toObject();
    QJsonObject vocab = model["vocab"].toObject();
    QJsonArray merges;
    const char *pairs[][2] = {{"Ġ", "t"},   {"h", "e"},     {"Ġt", "he"},    {"a", "c"},   {"Ġ", "c"},
                              {"Ġc", "ac"}, {"Ġcac", "he"}, {"Ġ", "p"},      {"r", "o"},   {"Ġp", "ro"},
                              {"m", "p"},   {"Ġpro", "mp"}, {"Ġpromp", "t"}, {"Q", "u"},   {"e", "s"},
                              {"Qu", "es"}, {"Ques", "t"},  {"i", "o"},      {"io", "n"},  {"Quest", "ion"},
                              {"Ġ", "w"},   {"h", "a"},     {"Ġw", "ha"},    {"Ġwha", "t"}};
    int next = 258;
    for (const auto &pr : pairs) {
        const QString merged = QString::fromUtf8(pr[0]) + QString::fromUtf8(pr[1]);
        if (!vocab.contains(merged))
            vocab[merged] = next++;
        merges.append(QString::fromUtf8(pr[0]) + " " + QString::fromUtf8(pr[1]));
    }
    model["vocab"] = vocab;
    model["merges"] = merges;
    root["model"] = model;
    return QJsonDocument(root).toJson().toStdString();
}
} // namespace

class TestAlignCli : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    fs::path m_dir;

    fs::path capture(const char *a, const char *b, const char *name)
    {
        const fs::path out = m_dir / name;
        const auto r = runKvwb({"capture", "--model-a", q(m_dir / a), "--model-b", q(m_dir / b), "--out",
                                q(out), "--prompts", q(m_dir / "prompts.txt"), "--json"});
        if (r.exitCode != 0)
            qFatal("capture failed: %s", r.err.constData());
        return out;
    }

private Q_SLOTS:
    void initTestCase()
    {
        m_dir = m_tmp.path().toStdString();
        core::writeRandomHfModel(m_dir / "a", core::randomModelPreset("tiny"));
        core::writeRandomHfModel(m_dir / "b", core::randomModelPreset("gqa"));
        core::writeRandomHfModel(m_dir / "g3", core::randomModelPreset("gemma3"));
        core::writeRandomHfModel(m_dir / "g3b", core::randomModelPreset("gemma3-b"));
        std::string prompts;
        for (int i = 0; i < 40; ++i)
            prompts += "Question " + std::to_string(i) + ": what does the cache hold for prompt number " +
                       std::to_string(i * 7) + " today?\n";
        test::writeFile(m_dir / "prompts.txt", prompts);
    }

    void selfAlignmentThroughTheCli()
    {
        const auto exp = capture("b", "b", "self.h5");
        auto r = runKvwb({"align", "--experiment", q(exp), "--lambda", "1e-7", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["converter"].toString(), QString("default"));
        QCOMPARE(j["stored"].toBool(), true);
        const auto layers = j["layers"].toArray();
        QCOMPARE(layers.size(), core::randomModelPreset("gqa").config.numLayers);
        for (const auto &v : layers) {
            const auto l = v.toObject();
            for (const char *k : {"r2_k", "r2_v", "attn_cos"})
                QVERIFY2(l[k].toDouble() > 0.999, qPrintable(QString("%1 = %2").arg(k).arg(l[k].toDouble())));
            QCOMPARE(l["heads"].toArray().size(), core::randomModelPreset("gqa").config.numKvHeads);
        }
        r = runKvwb({"compare", "--experiment", q(exp), "--prompt", "What does the cache hold for me?",
                     "--max-tokens", "8", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto c = QJsonDocument::fromJson(r.out).object();
        const auto p0 = c["prompts"].toArray().at(0).toObject();
        for (const char *k :
             {"kl", "top1", "rouge_l", "ttft_ms_scratch", "ttft_ms_transfer", "first_divergence"})
            QVERIFY2(p0.contains(k), k);
        QVERIFY(p0["kl"].toDouble() < 1e-4);
        QCOMPARE(p0["top1"].toDouble(), 1.0);
        QCOMPARE(p0["first_divergence"].toInt(), -1);
        QCOMPARE(p0["text_transfer"].toString(), p0["text_scratch"].toString());
        QCOMPARE(p0["rouge_l"].toDouble(), 1.0);
        QCOMPARE(p0["gate"].toObject()["passed"].toBool(), true);
        QVERIFY2(r.err.contains("gate: prompt 0 tail_kl"), r.err.constData());
        QVERIFY(p0["answer"].isNull()); // no expected answer given

        // A prompt file with expected answers (as `kvwb corpus context` writes), read by index: two
        // with a word no model here writes, one with none. (Whether an answer is found is
        // core::answerFound's, tested in core.text_metrics; this random model writes stray bytes.)
        std::string jsonl;
        for (const auto &[prompt, answer] :
             std::vector<std::pair<QString, QString>>{{"What does the cache hold for me?", "Zzyzxqq"},
                                                      {"What does the cache hold?", ""},
                                                      {"What does the cache hold for you?", "Qqzzyx"}}) {
            QJsonObject o{{"prompt", prompt}, {"text", prompt}};
            if (!answer.isEmpty())
                o["answer"] = answer;
            jsonl += QJsonDocument(o).toJson(QJsonDocument::Compact).toStdString() + "\n";
        }
        test::writeFile(m_dir / "answers.jsonl", jsonl);
        r = runKvwb({"compare", "--experiment", q(exp), "--prompts", q(m_dir / "answers.jsonl"),
                     "--max-tokens", "8", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto set = QJsonDocument::fromJson(r.out).object();
        const auto rows = set["prompts"].toArray();
        QCOMPARE(rows.size(), 3);
        for (int i : {0, 2})
            for (const char *path : {"scratch", "transfer", "a"}) {
                const auto hit = rows[i].toObject()["answer"].toObject()[path];
                QVERIFY2(hit.isBool() && !hit.toBool(), path);
            }
        QVERIFY(rows[1].toObject()["answer"].isNull());
        const auto answers = set["summary"].toObject()["answers"].toObject();
        QCOMPARE(answers["prompts"].toInt(), 2);
        QCOMPARE(answers["found_scratch"].toDouble(), 0.0);
        QCOMPARE(answers["found_transfer"].toDouble(), 0.0);
        QCOMPARE(answers["transfer_minus_scratch"].toObject()["estimate"].toDouble(), 0.0);
        r = runKvwb({"compare", "--experiment", q(exp), "--prompts", q(m_dir / "answers.jsonl"),
                     "--max-tokens", "8"});
        QVERIFY2(r.out.contains("| expected answer given (2 prompts): scratch / transfer / A; transfer - "
                                "scratch, 95% CI | 0.000 / 0.000 / 0.000; "),
                 r.out.constData());
        // the recompute curve gives the answers at every share
        r = runKvwb({"compare", "--experiment", q(exp), "--prompts", q(m_dir / "answers.jsonl"),
                     "--max-tokens", "4", "--recompute-curve", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto curve = QJsonDocument::fromJson(r.out).object()["recompute_curve"].toArray();
        QCOMPARE(curve.size(), 6);
        for (const auto &row : curve)
            QCOMPARE(row.toObject()["answers"].toObject()["prompts"].toInt(), 2);
        r = runKvwb({"compare", "--experiment", q(exp), "--prompts", q(m_dir / "answers.jsonl"),
                     "--max-tokens", "4", "--recompute-curve"});
        QVERIFY2(r.out.contains("| top-1 | answer given, transfer / scratch | TTFT") &&
                     r.out.contains("| 0.000 / 0.000 |"),
                 r.out.constData());
        // a file without answers has none in its summary
        r = runKvwb({"compare", "--experiment", q(exp), "--prompts", q(m_dir / "prompts.txt"), "--limit", "2",
                     "--max-tokens", "4", "--json"});
        QVERIFY(QJsonDocument::fromJson(r.out).object()["summary"].toObject()["answers"].isNull());
    }

    // Gemma 3 end to end: a model aligned with itself through capture (keys before each layer's
    // RoPE), align and compare reproduces itself over prompts longer than its sliding window; a
    // pair of two geometries fits and compares.
    void gemma3ThroughTheCli()
    {
        const auto self = capture("g3b", "g3b", "gemma-self.h5");
        auto r = runKvwb({"align", "--experiment", q(self), "--lambda", "1e-7", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        for (const auto &v : QJsonDocument::fromJson(r.out).object()["layers"].toArray())
            for (const char *k : {"r2_k", "r2_v", "attn_cos"})
                QVERIFY2(v.toObject()[k].toDouble() > 0.999,
                         qPrintable(QString("%1 = %2").arg(k).arg(v.toObject()[k].toDouble())));
        r = runKvwb({"compare", "--experiment", q(self), "--held-out", "--limit", "2", "--max-tokens", "6",
                     "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        auto s = QJsonDocument::fromJson(r.out).object()["summary"].toObject();
        QVERIFY2(s["kl"].toDouble() < 1e-4, qPrintable(QString::number(s["kl"].toDouble())));
        QCOMPARE(s["top1"].toDouble(), 1.0);
        // B's own cache through an identity map closes the whole gap to no prefix, on every resample
        const auto gap = s["baselines"].toObject()["kl_gap_closed_vs_no_prefix"].toObject();
        QVERIFY2(gap["lo"].toDouble() > 0.999, qPrintable(QString::number(gap["lo"].toDouble())));
        // the baselines on a self pair: the raw source KV is B's own cache (KL ~ 0), a random map of
        // the same shape is far from it, and the fitted map beats the random one on every resample
        r = runKvwb({"compare", "--experiment", q(self), "--held-out", "--limit", "3", "--max-tokens", "6",
                     "--baselines", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto bs = QJsonDocument::fromJson(r.out).object()["summary"].toObject()["baselines"].toObject();
        const auto raw = bs["raw_source_kv"].toObject(), random = bs["random_map"].toObject();
        QVERIFY2(raw["kl"].toDouble() < 1e-4, qPrintable(QString::number(raw["kl"].toDouble())));
        QVERIFY2(random["kl"].toDouble() > 100 * raw["kl"].toDouble() + 1e-3,
                 qPrintable(QString::number(random["kl"].toDouble())));
        QVERIFY(random["kl_difference"].toObject()["hi"].toDouble() < 0);
        // the same exact maps with their rows at shuffled positions: the order is what B reads
        const auto shuffled = bs["shuffled_positions"].toObject();
        QVERIFY2(shuffled["kl"].toDouble() > 100 * raw["kl"].toDouble() + 1e-3,
                 qPrintable(QString::number(shuffled["kl"].toDouble())));
        // exact maps keep all of what the destroyed cache loses: retention above it is 1 - KL / its KL
        const auto retention = bs["retention_above_destroyed_cache"].toObject();
        const double kl = QJsonDocument::fromJson(r.out).object()["summary"].toObject()["kl"].toDouble();
        QVERIFY2(std::abs(retention["estimate"].toDouble() - (1 - kl / shuffled["kl"].toDouble())) < 1e-9 &&
                     retention["lo"].toDouble() > 0.99,
                 qPrintable(QString::number(retention["estimate"].toDouble())));
        QCOMPARE(shuffled["kl_gap_closed_vs_it"].toObject()["estimate"].toDouble(),
                 retention["estimate"].toDouble());

        const auto pair = capture("g3", "g3b", "gemma-pair.h5");
        r = runKvwb({"align", "--experiment", q(pair), "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(QJsonDocument::fromJson(r.out).object()["layers"].toArray().size(),
                 core::randomModelPreset("gemma3-b").config.numLayers);
        r = runKvwb({"compare", "--experiment", q(pair), "--held-out", "--limit", "2", "--max-tokens", "4",
                     "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        s = QJsonDocument::fromJson(r.out).object()["summary"].toObject();
        QCOMPARE(s["prompts"].toInt(), 2);
        QVERIFY(s["kl"].toDouble() >= 0);
    }

    void crossPairFitsStoresAndCompares()
    {
        const auto exp = capture("a", "b", "pair.h5");
        auto r = runKvwb({"align", "--experiment", q(exp), "--select", "topk", "--k", "2", "--lambda", "auto",
                          "--name", "top2", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["selection"].toString(), QString("topk"));
        for (const auto &v : j["layers"].toArray())
            QCOMPARE(v.toObject()["sources"].toArray().size(), 2);
        // no family given: auto fits ridge, then the MLP, and keeps the lower validation KL
        r = runKvwb({"align", "--experiment", q(exp), "--hidden", "16", "--epochs", "3", "--name", "picked",
                     "--dry-run", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        {
            const auto picked = QJsonDocument::fromJson(r.out).object();
            const auto a = picked["auto"].toObject();
            const auto list = a["candidates"].toArray();
            QVERIFY2(list.size() >= 2, r.out.constData());
            QCOMPARE(list[0].toObject()["family"].toString(), QString("ridge"));
            const int chosen = a["chosen"].toInt();
            const QString chosenFamily = list[chosen].toObject()["family"].toString();
            QCOMPARE(picked["family"].toString(), // attention-aligned ridge is stored as ridge
                     chosenFamily == "attn_ridge" ? QString("ridge") : chosenFamily);
            for (const auto &c : list) {
                QVERIFY(c.toObject()["valid_prompts"].toInt() > 0);
                QVERIFY(list[chosen].toObject()["valid_kl"].toDouble() <=
                        c.toObject()["valid_kl"].toDouble());
            }
        }
        r = runKvwb({"align", "--experiment", q(exp), "--hidden", "16", "--epochs", "2", "--dry-run"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("family auto chose"), r.out.constData());
        QVERIFY2(r.err.contains("auto: ridge (proportional, k 1, lambda fixed): validation KL"),
                 r.err.constData());
        // per head: tiny has 4 kv heads, gqa 2: refused as head-matched, fitted full with a warning
        r = runKvwb({"align", "--experiment", q(exp), "--per-head", "--name", "ph", "--no-attention"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(r.err.contains("per-head maps need equal kv-head counts"));
        QCOMPARE(core::listConverters(exp), std::vector<std::string>({"ph", "top2"}));
        // a name in use is refused before the fit, naming the converter; --replace stores over it
        r = runKvwb({"align", "--experiment", q(exp), "--per-head", "--name", "ph", "--no-attention"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("converter 'ph' exists (") && r.err.contains("--replace"), r.err.constData());
        r = runKvwb({"align", "--experiment", q(exp), "--family", "ridge", "--name", "ph", "--replace",
                     "--no-attention"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(core::listConverters(exp), std::vector<std::string>({"ph", "top2"}));
        QCOMPARE(core::loadConverters(exp, "ph").family, core::ConverterFamily::Ridge); // the new fit's
        const auto rec = core::loadConverters(exp, "top2");
        QCOMPARE(rec.k, 2);
        QCOMPARE(rec.lambdaMode, std::string("auto"));
        r = runKvwb({"compare", "--experiment", q(exp), "--converter", "top2", "--held-out", "--limit", "3",
                     "--max-tokens", "4", "--save-samples", "held-out", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto s = QJsonDocument::fromJson(r.out).object()["summary"].toObject();
        QCOMPARE(s["prompts"].toInt(), 3);
        // the baselines' paired intervals: the estimate is the plain statistic and lies inside
        QCOMPARE(s["recompute"].toObject()["share"].toDouble(), 0.0);
        // 4 tokens: the first-8 means are the whole continuation's
        QCOMPARE(s["kl_first8"].toDouble(), s["kl"].toDouble());
        QCOMPARE(s["kl_no_prefix_first8"].toDouble(), s["kl_no_prefix"].toDouble());
        QCOMPARE(
            s["baselines"].toObject()["kl_gap_closed_vs_no_prefix_first8"].toObject()["estimate"].toDouble(),
            s["baselines"].toObject()["kl_gap_closed_vs_no_prefix"].toObject()["estimate"].toDouble());
        // the gate judged by what B answered, counted from the stored samples: a pass is right when the
        // first --match-tokens (4) tokens are scratch's
        {
            const auto samples = core::loadComparisons(exp, "held-out");
            QCOMPARE(samples.size(), size_t(3));
            int passed = 0, passedMatching = 0, matching = 0;
            for (const auto &x : samples) {
                const bool match = x.firstDivergence < 0 || x.firstDivergence >= 4;
                passed += x.gatePassed;
                passedMatching += x.gatePassed && match;
                matching += match;
            }
            const auto first = s["gate"].toObject()["first_tokens"].toObject();
            QCOMPARE(first["tokens"].toInt(), 4);
            QCOMPARE(first["passed"].toInt(), passed);
            QCOMPARE(first["passed_matching"].toInt(), passedMatching);
            QCOMPARE(first["matching_rate"].toDouble(), matching / 3.0);
            if (passed > 0)
                QCOMPARE(first["precision"].toDouble(), double(passedMatching) / passed);
            else
                QVERIFY(first["precision"].isNull());
            QVERIFY(
                std::abs(s["gate"].toObject()["kl_first_token"].toDouble() -
                         (samples[0].transfer.kl[0] + samples[1].transfer.kl[0] + samples[2].transfer.kl[0]) /
                             3) < 1e-5);
        }
        // selective recompute: at share 1 B computes its whole prefix itself, so it is scratch exactly
        {
            auto rr = runKvwb({"compare", "--experiment", q(exp), "--converter", "top2", "--held-out",
                               "--limit", "2", "--max-tokens", "4", "--recompute", "1", "--json"});
            QVERIFY2(rr.exitCode == 0, rr.err.constData());
            const auto one = QJsonDocument::fromJson(rr.out).object()["summary"].toObject();
            QCOMPARE(one["kl"].toDouble(), 0.0);
            QCOMPARE(one["kl_first8"].toDouble(), 0.0);
            QCOMPARE(one["top1"].toDouble(), 1.0);
            QCOMPARE(one["gate"].toObject()["first_tokens"].toObject()["matching_rate"].toDouble(), 1.0);
            rr = runKvwb({"compare", "--experiment", q(exp), "--converter", "top2", "--held-out", "--limit",
                          "3", "--max-tokens", "4", "--recompute-curve", "--json"});
            QVERIFY2(rr.exitCode == 0, rr.err.constData());
            const auto curve = QJsonDocument::fromJson(rr.out).object()["recompute_curve"].toArray();
            QCOMPARE(curve.size(), 6);
            QCOMPARE(curve[0].toObject()["share"].toDouble(), 0.0);
            QCOMPARE(curve[0].toObject()["kl"].toDouble(), s["kl"].toDouble()); // share 0: the plain transfer
            QCOMPARE(curve[5].toObject()["share"].toDouble(), 1.0);
            QCOMPARE(curve[5].toObject()["kl"].toDouble(), 0.0);
            rr = runKvwb({"compare", "--experiment", q(exp), "--converter", "top2", "--held-out",
                          "--recompute-curve", "--recompute", "0.5"});
            QCOMPARE(rr.exitCode, 2);
            QVERIFY2(rr.err.contains("--recompute-curve"), rr.err.constData());
            rr = runKvwb({"compare", "--experiment", q(exp), "--held-out", "--recompute", "1.5"});
            QCOMPARE(rr.exitCode, 2);
            QVERIFY2(rr.err.contains("--recompute"), rr.err.constData());
        }
        const auto base = s["baselines"].toObject();
        const auto gap = base["kl_gap_closed_vs_no_prefix"].toObject();
        QVERIFY(std::abs(gap["estimate"].toDouble() -
                         (1 - s["kl"].toDouble() / s["kl_no_prefix"].toDouble())) < 1e-9);
        const auto top1 = base["top1_gain_vs_no_prefix"].toObject();
        QVERIFY(std::abs(top1["estimate"].toDouble() -
                         (s["top1"].toDouble() - s["top1_no_prefix"].toDouble())) < 1e-9);
        for (const auto &iv : {gap, top1, base["rouge_l_gain_vs_a"].toObject()})
            QVERIFY(iv["lo"].toDouble() <= iv["estimate"].toDouble() &&
                    iv["estimate"].toDouble() <= iv["hi"].toDouble());
        QVERIFY(s["versus"].isNull());
        // the gate's precision and recall against KL <= good-kl, recounted from the printed prompts
        {
            const auto quality = s["gate"].toObject()["quality"].toObject();
            const double goodKl = quality["good_kl"].toDouble();
            QCOMPARE(goodKl, 0.1);
            int passedGood = 0, passedAll = 0, goodAll = 0;
            for (const auto &v : QJsonDocument::fromJson(r.out).object()["prompts"].toArray()) {
                const bool good = v.toObject()["kl"].toDouble() <= goodKl;
                const bool pass = v.toObject()["gate"].toObject()["passed"].toBool();
                passedGood += good && pass;
                passedAll += pass;
                goodAll += good;
            }
            const auto at = quality["at_threshold"].toObject();
            if (passedAll > 0)
                QCOMPARE(at["precision"].toDouble(), double(passedGood) / passedAll);
            if (goodAll > 0)
                QCOMPARE(at["recall"].toDouble(), double(passedGood) / goodAll);
            for (const char *sig : {"kv_cos", "tail_kl", "nll", "attn_cos"})
                QVERIFY(quality["signals"].toObject()[sig].toObject()["curve"].toArray().size() >= 1);
            for (const auto &v : QJsonDocument::fromJson(r.out).object()["prompts"].toArray()) {
                const double attn = v.toObject()["gate"].toObject()["attn_cos"].toDouble(-2);
                QVERIFY2(attn >= -1 && attn <= 1 + 1e-6, qPrintable(QString::number(attn)));
            }
            QVERIFY(s["gate"].toObject().contains("spearman_attn_cos_kl"));
        }
        // two converters on the same prompts: the paired differences; 'ph' shares top2's split
        auto rv = runKvwb({"compare", "--experiment", q(exp), "--converter", "top2", "--versus", "ph",
                           "--held-out", "--limit", "3", "--max-tokens", "4", "--json"});
        QVERIFY2(rv.exitCode == 0, rv.err.constData());
        QVERIFY2(!rv.err.contains("were fitting or validation prompts"), rv.err.constData());
        const auto vs = QJsonDocument::fromJson(rv.out).object()["summary"].toObject();
        QVERIFY(vs["baselines"].toObject()["raw_source_kv"].isNull()); // not asked for
        const auto other = vs["versus"].toObject();
        QCOMPARE(other["converter"].toString(), QString("ph"));
        QVERIFY(std::abs(other["kl_difference"].toObject()["estimate"].toDouble() -
                         (vs["kl"].toDouble() - other["kl"].toDouble())) < 1e-9);
        QVERIFY(std::abs(other["top1_difference"].toObject()["estimate"].toDouble() -
                         (vs["top1"].toDouble() - other["top1"].toDouble())) < 1e-9);
        QCOMPARE(vs["kl"].toDouble(), s["kl"].toDouble()); // the first converter's run is unchanged
        // a converter fitted on another split has seen some of top2's test prompts: said so
        rv = runKvwb({"align", "--experiment", q(exp), "--seed", "7", "--name", "s7", "--no-attention"});
        QVERIFY2(rv.exitCode == 0, rv.err.constData());
        rv = runKvwb({"compare", "--experiment", q(exp), "--converter", "top2", "--versus", "s7",
                      "--held-out", "--max-tokens", "2", "--json"});
        QVERIFY2(rv.exitCode == 0, rv.err.constData());
        QVERIFY2(rv.err.contains("were fitting or validation prompts of 's7'"), rv.err.constData());
        // the samples are stored with what the JSON printed
        const auto samples = core::loadComparisons(exp, "held-out");
        QCOMPARE(samples.size(), size_t(3));
        const auto printed = QJsonDocument::fromJson(r.out).object()["prompts"].toArray();
        for (int i = 0; i < 3; ++i) {
            QCOMPARE(samples[i].converter, std::string("top2"));
            // (random models' texts hold invalid UTF-8, which JSON and QString replace differently)
            QCOMPARE(samples[i].firstDivergence, printed[i].toObject()["first_divergence"].toInt());
            QCOMPARE(samples[i].meanKl, printed[i].toObject()["kl"].toDouble());
            QCOMPARE(samples[i].transfer.kl.size(), samples[i].scratch.ids.size());
        }
        QVERIFY(s["kl"].toDouble() >= 0);
        QVERIFY(s["top1"].toDouble() >= 0 && s["top1"].toDouble() <= 1);
        r = runKvwb({"sweep", "--experiment", q(exp), "--k", "1,2", "--lambda", "0.01,1", "--tokens",
                     "200,all", "--no-attention", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(QJsonDocument::fromJson(r.out).object()["rows"].toArray().size(), 8);
        QCOMPARE(core::loadTable(exp, "sweep").rows.size(), size_t(8));
    }

    // The low-rank and MLP families through the command line: stored with their family, size and
    // cost, listed with them, and B continues from their converted caches in compare.
    void familiesThroughTheCli()
    {
        const auto exp = capture("a", "b", "families.h5");
        auto r = runKvwb({"align", "--experiment", q(exp), "--family", "low-rank", "--rank", "8", "--name",
                          "lr8", "--no-attention", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["family"].toString(), QString("low_rank"));
        QVERIFY(j["fit_seconds"].toDouble() > 0 && j["convert_ms_per_1k"].toDouble() > 0);
        const auto low = core::loadConverters(exp, "lr8");
        QCOMPARE(low.family, core::ConverterFamily::LowRank);
        QCOMPARE(low.layers[0].keys[0].rank, 8);
        QCOMPARE(j["parameters"].toInteger(), low.parameterCount());
        QCOMPARE(j["bytes"].toInteger(), 4 * low.parameterCount());
        // attention-aligned ridge loads the file's model B for its metrics and stores ridge maps
        r = runKvwb({"align", "--experiment", q(exp), "--family", "attn-ridge", "--name", "attn",
                     "--no-attention", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["family"].toString(), QString("ridge"));
        QCOMPARE(j["settings"].toObject()["objective"].toString(), QString("attention"));
        QCOMPARE(j["settings"].toObject()["family"].toString(), QString("attn_ridge"));
        QCOMPARE(core::loadConverters(exp, "attn").family, core::ConverterFamily::Ridge);
        r = runKvwb({"align", "--experiment", q(exp), "--family", "mlp", "--hidden", "16", "--epochs", "2",
                     "--name", "mlp", "--no-attention", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["family"].toString(), QString("mlp"));
        const auto layers = j["settings"].toObject()["mlp"].toObject()["layers"].toArray();
        QCOMPARE(layers.size(), core::randomModelPreset("gqa").config.numLayers);
        for (const auto &v : layers) // never worse than the ridge start on the validation prompts
            QVERIFY(v.toObject()["valid_loss_k"].toDouble() <= v.toObject()["valid_loss_ridge_k"].toDouble());
        QCOMPARE(core::loadConverters(exp, "mlp").layers[0].values[0].hidden, 16);
        QCOMPARE(j["resumed_layers"].toInt(), 0);
        QVERIFY(!fs::exists(exp.string() + ".fit-mlp")); // the layer checkpoints go once it is stored
        r = runKvwb({"compare", "--experiment", q(exp), "--converter", "mlp", "--held-out", "--limit", "2",
                     "--max-tokens", "4", "--versus", "lr8", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto s = QJsonDocument::fromJson(r.out).object()["summary"].toObject();
        QCOMPARE(s["prompts"].toInt(), 2);
        QVERIFY(std::isfinite(s["kl"].toDouble()));
        // the KL objective: the ridge fit, then its maps trained through B; never worse on validation
        r = runKvwb({"align", "--experiment", q(exp), "--family", "ridge", "--objective", "kl", "--kl-epochs",
                     "2", "--name", "kl", "--no-attention", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["objective"].toString(), QString("kl"));
        QCOMPARE(j["family"].toString(), QString("ridge"));
        const auto kl = j["kl"].toObject();
        QVERIFY(kl["epochs"].toInt() >= 1 && kl["epochs"].toInt() <= 2);
        QVERIFY(kl["valid_kl"].toDouble() <= kl["valid_kl_kv_fit"].toDouble());
        QCOMPARE(j["settings"].toObject()["objective"].toString(), QString("kl"));
        QVERIFY(!fs::exists(exp.string() + ".fit-kl")); // its state goes once the converter is stored
        r = runKvwb({"align", "--experiment", q(exp), "--family", "ridge", "--objective", "kl", "--kl-epochs",
                     "1", "--name", "kl", "--replace", "--no-attention"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("KL objective: validation KL"), r.out.constData());
        // usage errors: exit 2, one line naming the flag
        for (const QStringList &bad :
             {QStringList{"--family", "spline"}, QStringList{"--family", "low-rank"},
              QStringList{"--family", "ridge", "--kl-epochs", "2"}, QStringList{"--objective", "mse"},
              QStringList{"--rank", "4"}, QStringList{"--family", "ridge", "--hidden", "8"},
              QStringList{"--family", "ridge", "--budget", "60"},
              QStringList{"--family", "mlp", "--auto-prompts", "4"},
              QStringList{"--family", "ridge", "--resume"},
              QStringList{"--family", "mlp", "--resume", "--dry-run"}}) {
            r = runKvwb(QStringList{"align", "--experiment", q(exp)} + bad);
            QCOMPARE(r.exitCode, 2);
            QVERIFY2(r.err.contains("--family") || r.err.contains("--rank") || r.err.contains("--hidden") ||
                         r.err.contains("--resume") || r.err.contains("--budget") ||
                         r.err.contains("--auto-prompts") || r.err.contains("--kl-epochs") ||
                         r.err.contains("--objective"),
                     r.err.constData());
        }
        // a rank the maps cannot have: refused naming it
        r = runKvwb(
            {"align", "--experiment", q(exp), "--family", "low-rank", "--rank", "100000", "--no-attention"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("rank 100000 is outside"), r.err.constData());
    }

    // Different tokenizers end to end: A reads the prompts byte by byte, B through its own merges.
    // Capture stores a token alignment for every prompt (info says so), align fits on every prompt
    // without skipping any, and compare runs A on A's tokens and B on B's, through the alignment.
    void crossTokenizerThroughTheCli()
    {
        core::writeRandomHfModel(m_dir / "bx", core::randomModelPreset("gqa"));
        test::writeFile(m_dir / "bx" / "tokenizer.json", mergedTokenizerJson());
        const fs::path exp = m_dir / "xtok.h5";
        auto r = runKvwb({"capture", "--model-a", q(m_dir / "a"), "--model-b", q(m_dir / "bx"), "--out",
                          q(exp), "--prompts", q(m_dir / "prompts.txt"), "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto cap = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(cap["prompts_aligned"].toInt(), 40);
        QCOMPARE(cap["align_policy"].toString(), QString("last"));
        QVERIFY(cap["tokens_b"].toInt() < cap["tokens_a"].toInt());
        {
            const auto file = core::ExperimentReader::open(exp);
            const auto p0 = file.prompt(0);
            QVERIFY(p0.a.ids != p0.b.ids);
            QCOMPARE(p0.alignment.size(), p0.b.ids.size());
            QCOMPARE(p0.a.spans.size(), 2 * p0.a.ids.size());
            QCOMPARE(p0.alignment.front(), 0); // BOS to BOS
            // under 'last' each B token pairs with the byte token of its last byte (A: BOS + bytes)
            for (size_t t = 1; t < p0.b.ids.size(); ++t)
                QCOMPARE(p0.alignment[t], p0.b.spans[2 * t + 1]);
        }
        r = runKvwb({"info", q(exp)});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto info = QJsonDocument::fromJson(r.out).object()["token_alignment"].toObject();
        QCOMPARE(info["in_use"].toBool(), true);
        QCOMPARE(info["same_tokenizer"].toBool(), false);
        QCOMPARE(info["prompts_aligned"].toInt(), 40);
        QCOMPARE(info["prompts_unpaired"].toInt(), 0);

        r = runKvwb({"align", "--experiment", q(exp), "--name", "xtok", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(!r.err.contains("skipped"), r.err.constData());
        const auto fit = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(fit["layers"].toArray().size(), core::randomModelPreset("gqa").config.numLayers);
        for (const auto &v : fit["layers"].toArray())
            QVERIFY(std::isfinite(v.toObject()["r2_k"].toDouble()));

        r = runKvwb({"compare", "--experiment", q(exp), "--converter", "xtok", "--held-out", "--limit", "2",
                     "--max-tokens", "4", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto cmp = QJsonDocument::fromJson(r.out).object();
        const auto s = cmp["summary"].toObject();
        QCOMPARE(s["prompts"].toInt(), 2);
        QCOMPARE(s["prompts_token_aligned"].toInt(), 2);
        for (const auto &v : cmp["prompts"].toArray()) {
            const auto p = v.toObject();
            QCOMPARE(p["token_alignment"].toString(), QString("last"));
            QVERIFY(p["prompt_tokens"].toInt() < p["prompt_tokens_a"].toInt());
            QVERIFY(std::isfinite(p["kl"].toDouble()) && p["kl"].toDouble() >= 0);
            QVERIFY(!p["text_transfer"].toString().isNull());
        }

        // B's token features: fitted from the file, stored with the maps, converted through the pairing
        r = runKvwb({"align", "--experiment", q(exp), "--name", "xtf", "--family", "ridge", "--select", "all",
                     "--token-features", "all", "--no-attention", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QCOMPARE(core::loadConverters(exp, "xtf").layers[1].features, (core::TokenFeatures{1, true, 4}));
        r = runKvwb({"compare", "--experiment", q(exp), "--converter", "xtf", "--held-out", "--limit", "2",
                     "--max-tokens", "4", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(
            std::isfinite(QJsonDocument::fromJson(r.out).object()["summary"].toObject()["kl"].toDouble()));
        r = runKvwb({"align", "--experiment", q(exp), "--token-features", "window=7"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("--token-features"), r.err.constData());

        // replay: B's request served from A's cached prefix of the same text through the alignment
        const std::string system = "A long shared system prompt that model a has processed for this tenant. ";
        const auto request = [](int id, const char *model, const std::string &prompt) {
            return fmt::format(
                       R"({{"id":{},"t_ms":{},"tenant":"t0","user":"u{}","model":"{}","intent":"n{}",)"
                       R"("max_tokens":3,"prompt":"{}"}})",
                       id, id * 10, id, model, id, prompt) +
                   "\n";
        };
        test::writeFile(m_dir / "xtok.jsonl",
                        request(0, "a", system + "Q: first?") + request(1, "b", system + "Q: second?"));
        r = runKvwb({"replay", "--workload", q(m_dir / "xtok.jsonl"), "--experiment", q(exp), "--converter",
                     "xtok", "--tiers", "cross", "--block", "4", "--min-cross-tokens", "4", "--no-gate",
                     "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.err.contains("pairs B's tokens with A's by their byte spans ('last')"), r.err.constData());
        const auto rep = QJsonDocument::fromJson(r.out).object();
        const auto cross = rep["tiers"].toObject()["cross"].toObject();
        QCOMPARE(cross["hits"].toInt(), 1);
        // B (merges) reads the shared text in fewer tokens than A (bytes): at least half of its
        // system-prompt tokens come from A's cache
        QVERIFY2(cross["tokens_reused"].toInt() >= 10, qPrintable(QJsonDocument(cross).toJson()));
        r = runKvwb({"replay", "--workload", q(m_dir / "xtok.jsonl"), "--experiment", q(exp), "--converter",
                     "xtok", "--tiers", "cross", "--align-policy", "middle"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("--pair-policy"), r.err.constData()); // the old name is still accepted
    }

    // Multi-turn hand-off: ShareGPT conversations imported as a workload, A serving the first turns
    // and B continuing from the converted cache. On a self pair every later turn matches scratch; on
    // a cross pair the per-turn KL is measured with intervals over conversations.
    void handoffThroughTheCli()
    {
        std::string chats = "[";
        for (int i = 0; i < 4; ++i) {
            chats +=
                std::string(i ? "," : "") + "{\"id\": \"c" + std::to_string(i) + "\", \"conversations\": [";
            for (int t = 0; t < 4; ++t)
                chats += std::string(t ? "," : "") + "{\"from\": \"human\", \"value\": \"q" +
                         std::to_string(t) + " of chat " + std::to_string(i) +
                         "?\"}, {\"from\": \"gpt\", \"value\": \"answer " + std::to_string(i * 10 + t) +
                         " here.\"}";
            chats += "]}";
        }
        chats += "]";
        test::writeFile(m_dir / "chats.json", chats);
        auto r = runKvwb(
            {"workload", "sharegpt", "--input", q(m_dir / "chats.json"), "--out", q(m_dir / "chats.jsonl")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto self = capture("b", "b", "handoff-self.h5");
        r = runKvwb({"align", "--experiment", q(self), "--lambda", "1e-7", "--no-attention"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        r = runKvwb({"compare", "--experiment", q(self), "--handoff", q(m_dir / "chats.jsonl"),
                     "--max-tokens", "4", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["conversations"].toArray().size(), 4);
        auto s = j["summary"].toObject();
        QCOMPARE(s["conversations"].toInt(), 4);
        auto turns = s["turns"].toArray();
        QCOMPARE(turns.size(), 3); // turns 2, 3 and 4 after A's first
        for (int t = 0; t < 3; ++t) {
            const auto row = turns[t].toObject();
            QCOMPARE(row["turn"].toInt(), t + 2);
            QCOMPARE(row["conversations"].toInt(), 4);
            QVERIFY2(row["kl"].toDouble() < 1e-4, qPrintable(QString::number(row["kl"].toDouble())));
            QCOMPARE(row["top1"].toDouble(), 1.0);
            const auto ci = row["kl_ci"].toObject();
            QVERIFY(ci["lo"].toDouble() <= ci["estimate"].toDouble() &&
                    ci["estimate"].toDouble() <= ci["hi"].toDouble());
            QCOMPARE(row["kl_change_vs_first"].isNull(), t == 0);
        }
        // per conversation: the converted prefix ends before every compared answer
        for (const auto &v : j["conversations"].toArray()) {
            const auto c = v.toObject();
            QVERIFY(c["handoff_tokens"].toInt() > 0 &&
                    c["handoff_tokens"].toInt() < c["transcript_tokens"].toInt());
            QCOMPARE(c["turns"].toArray().size(), 3);
            QVERIFY(c["turns"].toArray()[0].toObject()["answer_tokens"].toInt() > 0);
        }

        // a cross pair, handed off after turn 2 and cut at turn 3: one compared turn, a KL above 0
        const auto pair = capture("a", "b", "handoff-pair.h5");
        r = runKvwb({"align", "--experiment", q(pair), "--no-attention"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        r = runKvwb({"compare", "--experiment", q(pair), "--handoff", q(m_dir / "chats.jsonl"),
                     "--handoff-turn", "2", "--turns", "3", "--max-tokens", "4", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        turns = QJsonDocument::fromJson(r.out).object()["summary"].toObject()["turns"].toArray();
        QCOMPARE(turns.size(), 1);
        QCOMPARE(turns[0].toObject()["turn"].toInt(), 3);
        QVERIFY(turns[0].toObject()["kl"].toDouble() > 1e-6);
        QVERIFY(std::isfinite(turns[0].toObject()["kl"].toDouble()));
        // the table
        r = runKvwb({"compare", "--experiment", q(pair), "--handoff", q(m_dir / "chats.jsonl"),
                     "--max-tokens", "2", "--limit", "2"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("2 conversations") && r.out.contains("| 4 | 2 |"), r.out.constData());

        // a user whose prompts do not grow is no conversation; a file of only those is an error
        test::writeFile(m_dir / "flat.jsonl",
                        "{\"t_ms\": 0, \"tenant\": \"t\", \"user\": \"u\", \"prompt\": \"Q: one?\\nA:\", "
                        "\"intent\": \"\", \"model\": \"a\", \"max_tokens\": 4}\n"
                        "{\"t_ms\": 1, \"tenant\": \"t\", \"user\": \"u\", \"prompt\": \"Q: two?\\nA:\", "
                        "\"intent\": \"\", \"model\": \"a\", \"max_tokens\": 4}\n");
        r = runKvwb({"compare", "--experiment", q(pair), "--handoff", q(m_dir / "flat.jsonl")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("not conversations") && r.err.contains("no conversation"), r.err.constData());
        // conversations too short for the hand-off turn are skipped, naming why
        r = runKvwb({"compare", "--experiment", q(pair), "--handoff", q(m_dir / "chats.jsonl"),
                     "--handoff-turn", "4", "--max-tokens", "2"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("a hand-off after turn 4 needs at least 5"), r.err.constData());
        // usage
        QCOMPARE(runKvwb({"compare", "--experiment", q(pair), "--handoff", q(m_dir / "chats.jsonl"),
                          "--prompt", "x"})
                     .exitCode,
                 2);
        QCOMPARE(runKvwb({"compare", "--experiment", q(pair), "--prompt", "x", "--turns", "3"}).exitCode, 2);
        QCOMPARE(runKvwb({"compare", "--experiment", q(pair), "--handoff", q(m_dir / "chats.jsonl"),
                          "--turns", "1"})
                     .exitCode,
                 2);
        QCOMPARE(runKvwb({"compare", "--experiment", q(pair), "--handoff", q(m_dir / "chats.jsonl"),
                          "--baselines"})
                     .exitCode,
                 2);
    }

    void errors()
    {
        const auto exp = capture("a", "b", "err.h5");
        auto r = runKvwb({"align", "--experiment", q(exp), "--select", "nearest"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.err.contains("--select expects proportional, topk or all"));
        r = runKvwb({"compare", "--experiment", q(exp), "--converter", "missing", "--prompt", "x"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("missing") && r.err.contains("err.h5"), r.err.constData());
        // model B is not the one captured: refused naming both fingerprints
        r = runKvwb({"align", "--experiment", q(exp), "--model-b", q(m_dir / "a")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("[config]") && r.err.contains("fingerprint"), r.err.constData());
        r = runKvwb({"align", "--experiment", q(m_dir / "nope.h5")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY(r.err.contains("nope.h5"));
        QCOMPARE(runKvwb({"compare", "--experiment", q(exp)}).exitCode, 2); // no prompt source
    }
};

QTEST_GUILESS_MAIN(TestAlignCli)
#include "tst_align_cli.moc"
