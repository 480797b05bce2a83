// `kvwb replay` end to end on a random model and a workload built here: exact-tier hits equal the
// exact repeats within a tenant; no response is ever served across tenants; prefix hits generate
// what a miss generates (shadow verification); a cross-model hit on a model paired with itself
// reproduces B's own output; the ledger CSV and the experiment's /ledgers hold every request; bad
// input fails with the right exit code and a message naming the request or line.
#include "core/ledger/replay_ledger.h"
#include "core/model/random_model.h"
#include "core/store/ledger_store.h"
#include "core/util/text_util.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/tenant_workload.h"
#include "tests/support/test_paths.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <fmt/format.h>

#include <map>

using namespace kvwb;
namespace fs = std::filesystem;
using test::runKvwb;

namespace {
QString q(const fs::path &p)
{
    return QString::fromStdString(p.string());
}

std::string line(int id, const std::string &tenant, const std::string &model, const std::string &intent,
                 const std::string &prompt, int maxTokens = 4)
{
    return fmt::format(
               R"({{"id":{},"t_ms":{},"tenant":"{}","user":"u{}","model":"{}","intent":"{}","max_tokens":{},"prompt":"{}"}})",
               id, id * 10, tenant, id, model, intent, maxTokens, prompt) +
           "\n";
}
} // namespace

class TestReplayCli : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    fs::path m_dir;
    std::map<int64_t, std::string> m_tenantOf;
    int m_exactRepeats = 0;

private Q_SLOTS:
    void initTestCase()
    {
        m_dir = m_tmp.path().toStdString();
        core::writeRandomHfModel(m_dir / "m", core::randomModelPreset("gqa"));
        // 3 tenants asking overlapping questions behind one long shared system prompt; repeats
        // within a tenant are exact hits, the same text from another tenant must miss.
        const test::TenantWorkload w = test::threeTenantWorkload();
        m_tenantOf = w.tenantOf;
        m_exactRepeats = w.exactRepeats;
        test::writeFile(m_dir / "w.jsonl", w.jsonl);
    }

    void exactHitsAreTheRepeatsWithinATenant()
    {
        const auto r = runKvwb({"replay", "--workload", q(m_dir / "w.jsonl"), "--model-a", q(m_dir / "m"),
                                "--tiers", "exact", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto j = QJsonDocument::fromJson(r.out).object();
        const auto exact = j["tiers"].toObject()["exact"].toObject();
        QCOMPARE(exact["requests"].toInt(), 36);
        QCOMPARE(exact["hits"].toInt(), m_exactRepeats);
        QCOMPARE(exact["false_hits"].toInt(), 0);
        QCOMPARE(j["total"].toObject()["requests"].toInt(), 36);
        for (const char *k : {"tokens_reused", "tokens_computed", "ttft_ms_p50", "ttft_ms_p95"})
            QVERIFY2(exact.contains(k), k);
    }

    void noTenantIsServedAnotherTenantsEntry()
    {
        const fs::path csv = m_dir / "ledger.csv";
        const auto r = runKvwb({"replay", "--workload", q(m_dir / "w.jsonl"), "--model-a", q(m_dir / "m"),
                                "--tiers", "exact,semantic,prefix", "--threshold", "0.995", "--block", "4",
                                "--shadow", "1", "--ledger", q(csv), "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto rows = core::ledgerFromCsv(test::readFile(csv), "ledger.csv");
        QCOMPARE(rows.size(), size_t(36));
        std::map<int64_t, const core::LedgerRow *> byId;
        for (const auto &row : rows)
            byId[row.requestId] = &row;
        int responseHits = 0, prefixHits = 0;
        for (const auto &row : rows) {
            QCOMPARE(row.tenant, m_tenantOf.at(row.requestId));
            QVERIFY(!row.question.empty()); // the workload's question field
            QVERIFY(row.question.find("\n") == std::string::npos);
            if (row.answeredBy == core::TierKind::Exact || row.answeredBy == core::TierKind::Semantic) {
                ++responseHits;
                QCOMPARE(m_tenantOf.at(row.cachedRequestId), row.tenant); // never across tenants
                // a response hit's answer is the cached one: the answer of the request it came from
                QCOMPARE(row.answer, byId.at(row.cachedRequestId)->answer);
                QCOMPARE(row.tokensComputed, 0);
            }
            if (row.answeredBy == core::TierKind::Prefix) {
                ++prefixHits;
                QVERIFY(row.tokensReused > 0 && row.tokensReused % 4 == 0);
                // a prefix hit generates exactly what a miss generates
                QCOMPARE(row.shadowExact, 1);
                QVERIFY2(row.shadowKl >= 0 && row.shadowKl < 1e-6, qPrintable(QString::number(row.shadowKl)));
            }
        }
        QVERIFY(responseHits > 0);
        QVERIFY(prefixHits > 0); // first request of each tenant with a new question shares the system prompt
    }

    // tier_stores: what each tier held and evicted. Under a limit the tier holds no more than it,
    // evicts (counted) and serves fewer hits; unlimited, nothing is evicted.
    void capacityLimitsHoldAndAreReported()
    {
        const auto replay = [&](QStringList extra) {
            QStringList args{"replay",
                             "--workload",
                             q(m_dir / "w.jsonl"),
                             "--model-a",
                             q(m_dir / "m"),
                             "--tiers",
                             "exact,semantic,prefix",
                             "--block",
                             "4",
                             "--json"};
            auto r = runKvwb(args + extra);
            if (r.exitCode != 0)
                qWarning("%s", r.err.constData());
            return QJsonDocument::fromJson(r.out).object();
        };
        const auto free = replay({});
        const auto freeStores = free["tier_stores"].toObject();
        QCOMPARE(freeStores.keys(), (QStringList{"exact", "prefix", "semantic"}));
        for (const auto &tier : freeStores.keys()) {
            QCOMPARE(freeStores[tier].toObject()["evictions"].toInt(), 0);
            QVERIFY(freeStores[tier].toObject()["entries"].toInt() > 0);
        }
        const qint64 prefixBytes = freeStores["prefix"].toObject()["bytes"].toInteger();
        const qint64 limit = prefixBytes / 4;
        const auto capped = replay({"--prefix-bytes", QString::number(limit), "--exact-entries", "1",
                                    "--semantic-entries", "1", "--eviction", "lfu"});
        const auto stores = capped["tier_stores"].toObject();
        const auto prefix = stores["prefix"].toObject();
        QVERIFY2(prefix["bytes"].toInteger() <= limit,
                 qPrintable(QString::number(prefix["bytes"].toInteger())));
        QVERIFY(prefix["evictions"].toInt() > 0);
        for (const char *tier : {"exact", "semantic"}) {
            QVERIFY(stores[tier].toObject()["entries"].toInt() <= 1);
            QVERIFY2(stores[tier].toObject()["evictions"].toInt() > 0,
                     QJsonDocument(stores).toJson(QJsonDocument::Compact).constData());
        }
        QVERIFY(capped["total"].toObject()["token_hit_rate"].toDouble() <
                free["total"].toObject()["token_hit_rate"].toDouble());
    }

    void crossModelTierOnAModelPairedWithItself()
    {
        // A = B: identity-like converters, so a cross hit must reproduce B's own output
        std::string prompts;
        for (int i = 0; i < 12; ++i)
            prompts += "Calibration line " + std::to_string(i) + " about items and their many names.\n";
        test::writeFile(m_dir / "cal.txt", prompts);
        const fs::path exp = m_dir / "self.h5";
        auto r = runKvwb({"capture", "--model-a", q(m_dir / "m"), "--model-b", q(m_dir / "m"), "--prompts",
                          q(m_dir / "cal.txt"), "--out", q(exp)});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        r = runKvwb({"align", "--experiment", q(exp), "--lambda", "1e-7", "--no-attention"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const std::string system =
            "A long shared system prompt that model a has already processed for this tenant today. ";
        test::writeFile(m_dir / "ab.jsonl", line(0, "t0", "a", "n1", system + "Q: first?") +
                                                line(1, "t0", "b", "n2", system + "Q: second?") +
                                                line(2, "t1", "b", "n2", system + "Q: second?"));
        r = runKvwb({"replay", "--workload", q(m_dir / "ab.jsonl"), "--experiment", q(exp), "--tiers",
                     "cross", "--block", "4", "--min-cross-tokens", "4", "--shadow", "1", "--ledger",
                     q(m_dir / "ab.csv"), "--save-ledger", "ab", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto rows = core::ledgerFromCsv(test::readFile(m_dir / "ab.csv"), "ab.csv");
        QCOMPARE(rows.size(), size_t(3));
        QCOMPARE(rows[1].answeredBy, core::TierKind::Cross);
        QCOMPARE(rows[1].gate, core::GateDecision::Pass);
        QVERIFY(rows[1].tokensReused >= 16);
        QCOMPARE(rows[1].shadowExact, 1);
        QCOMPARE(rows[2].answeredBy, core::TierKind::None); // tenant t1 never sees t0's cache
        QVERIFY2(r.err.contains("gate: request 1"), r.err.constData());
        QCOMPARE(core::loadLedger(exp, "ab").size(), size_t(3));
    }

    // kvwb sweep-semantic: exact repeats are left to the exact tier unless asked for; with them,
    // every repeat has an earlier duplicate at similarity 1, so at 0.99 precision is 1 and recall 1.
    void sweepSemantic()
    {
        auto r =
            runKvwb({"sweep-semantic", "--workload", q(m_dir / "w.jsonl"), "--embed", "prompt", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["should_hit"].toInt(), 0);
        QCOMPARE(j["exact_skipped"].toInt(), m_exactRepeats);
        QCOMPARE(j["embedder"].toString(), QString("lexical-512"));
        QCOMPARE(j["points"].toArray().size(), 50);
        r = runKvwb({"sweep-semantic", "--workload", q(m_dir / "w.jsonl"), "--embed", "prompt",
                     "--include-exact", "--embedder", "lexical-idf", "--target", "0", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["embedder"].toString(), QString("lexical-idf-512"));
        QCOMPARE(j["should_hit"].toInt(), m_exactRepeats);
        const QJsonObject last = j["points"].toArray().last().toObject();
        QCOMPARE(last["threshold"].toDouble(), 0.99);
        QCOMPARE(last["correct_hits"].toInt(), m_exactRepeats);
        QCOMPARE(last["recall"].toDouble(), 1.0);
        QVERIFY(!j["at_target"].isNull());
        QCOMPARE(
            runKvwb({"sweep-semantic", "--workload", q(m_dir / "w.jsonl"), "--embedder", "bert"}).exitCode,
            2);
        QCOMPARE(
            runKvwb({"sweep-semantic", "--workload", q(m_dir / "w.jsonl"), "--embedder", "model"}).exitCode,
            2);
        QCOMPARE(runKvwb({"sweep-semantic", "--workload", q(m_dir / "w.jsonl"), "--target", "2"}).exitCode,
                 2);
    }

    // An embedding model by its path: the demo's own sentence embedder, on the demo workload's
    // labelled requests (held-out wordings included), reaches 90% precision at over half the recall;
    // and a replay takes it as its semantic embedder.
    void sweepWithAnEmbeddingModel()
    {
        const fs::path demo = test::sourceDir() / "projects" / "demo";
        const QString embedder = q(demo / "models" / "embedder");
        auto r = runKvwb({"sweep-semantic", "--workload", q(demo / "workloads" / "demo.jsonl"), "--limit",
                          "1000", "--embedder", embedder, "--threads", "1", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["embedder"].toString(), QString("encoder-embedder-128"));
        bool met = false;
        for (const auto &v : j["points"].toArray()) {
            const auto pt = v.toObject();
            met = met || (pt["precision"].toDouble() >= 0.9 && pt["recall"].toDouble() >= 0.5);
        }
        QVERIFY2(met, r.out.constData());
        r = runKvwb({"replay", "--workload", q(m_dir / "w.jsonl"), "--model-a", q(m_dir / "m"), "--tiers",
                     "semantic", "--embedder", embedder, "--threshold", "0.9", "--threads", "1", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto settings = QJsonDocument::fromJson(r.out).object()["settings"].toObject();
        QCOMPARE(settings["embedder"].toString(), embedder);                             // as given
        QCOMPARE(settings["embedder_name"].toString(), QString("encoder-embedder-128")); // as loaded
        r = runKvwb({"sweep-semantic", "--workload", q(m_dir / "w.jsonl"), "--embedder", embedder,
                     "--embedder-prefix", "query: ", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(QJsonDocument::fromJson(r.out).object()["embedder"].toString().startsWith(
            "encoder-embedder-128-p"));
        QCOMPARE(
            runKvwb({"sweep-semantic", "--workload", q(m_dir / "w.jsonl"), "--embedder-prefix", "query: "})
                .exitCode,
            2);                          // a prefix is for a model given by path
        r = runKvwb({"info", embedder}); // loaded like any model: its card
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const auto card = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(card["kind"].toString(), QString("sentence encoder"));
        QCOMPARE(card["pooling"].toString(), QString("mean"));
        QCOMPARE(card["normalize"].toBool(), true);
        QCOMPARE(card["tokenizer"].toObject()["kind"].toString(), QString("wordpiece"));
        r = runKvwb(
            {"sweep-semantic", "--workload", q(m_dir / "w.jsonl"), "--embedder", q(m_dir / "no-such-model")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("the path of an embedding model"), r.err.constData());
    }

    // --verifier: a cross-encoder trained by `kvwb train-verifier` judges every semantic candidate;
    // at a threshold every score passes, the hits are the replay's without it; at 1 none serves and
    // each is a rejection in the ledger; it needs the semantic tier.
    void verifierJudgesEverySemanticCandidate()
    {
        const fs::path demo = test::sourceDir() / "projects" / "demo";
        std::string pairs;
        for (int i = 0; i < 40; ++i) {
            const std::string n = std::to_string(i);
            pairs += "how do i bake loaf " + n + "\twhat is the way to bake loaf " + n + "\t1\n";
            pairs += "can i bake loaf " + n + "\tcan i bake cake " + n + "\t0\n";
        }
        test::writeFile(m_dir / "vpairs.tsv", pairs);
        auto r = runKvwb({"train-verifier",
                          "--pairs",
                          q(m_dir / "vpairs.tsv"),
                          "--out",
                          q(m_dir / "verifier"),
                          "--vocab",
                          "80",
                          "--hidden",
                          "16",
                          "--layers",
                          "1",
                          "--heads",
                          "2",
                          "--intermediate",
                          "32",
                          "--max-positions",
                          "32",
                          "--steps",
                          "4",
                          "--batch",
                          "8",
                          "--eval-every",
                          "2",
                          "--validation",
                          "0.25",
                          "--threads",
                          "1"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QStringList base = {"replay",
                                  "--workload",
                                  q(demo / "workloads" / "demo.jsonl"),
                                  "--limit",
                                  "150",
                                  "--model-a",
                                  q(demo / "models" / "a"),
                                  "--model-b",
                                  q(demo / "models" / "b"),
                                  "--tiers",
                                  "semantic",
                                  "--guards",
                                  "none",
                                  "--max-tokens",
                                  "1",
                                  "--threads",
                                  "1",
                                  "--json"};
        r = runKvwb(base);
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const int hits = QJsonDocument::fromJson(r.out).object()["total"].toObject()["hits"].toInt();
        QVERIFY(hits > 0);
        r = runKvwb(base +
                    QStringList{"--verifier", q(m_dir / "verifier"), "--verifier-threshold", "0.000001"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        auto j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["total"].toObject()["hits"].toInt(), hits);
        auto v = j["total"].toObject()["verifier"].toObject();
        QCOMPARE(v["candidates"].toInt(), hits);
        QCOMPARE(v["passed"].toInt(), hits);
        QCOMPARE(j["settings"].toObject()["verifier_name"].toString(), QString("cross-verifier"));
        r = runKvwb(base + QStringList{"--verifier", q(m_dir / "verifier"), "--verifier-threshold", "1",
                                       "--ledger", q(m_dir / "verified.csv")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["total"].toObject()["hits"].toInt(), 0);
        v = j["total"].toObject()["verifier"].toObject();
        QCOMPARE(v["rejected"].toInt(), hits);
        QCOMPARE(v["false_hits_prevented"].toInt() + v["hits_lost"].toInt(),
                 hits); // the demo's intents are known
        const auto rows =
            core::ledgerFromCsv(core::text::readWholeFile(m_dir / "verified.csv"), "verified.csv");
        int rejected = 0;
        for (const auto &row : rows) {
            rejected += row.verifier == core::VerifierVerdict::Reject;
            if (row.verifier != core::VerifierVerdict::None)
                QVERIFY(row.verifierScore >= 0 && row.verifierScore < 1);
        }
        QCOMPARE(rejected, hits);
        // sweep-semantic --verifier: at verifier threshold 0 every scored candidate passes, so its
        // point is the similarity sweep's at --threshold; higher thresholds pass fewer
        r = runKvwb({"sweep-semantic", "--workload", q(demo / "workloads" / "demo.jsonl"), "--limit", "150",
                     "--verifier", q(m_dir / "verifier"), "--threshold", "0.8", "--threads", "1", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        j = QJsonDocument::fromJson(r.out).object();
        const auto vs = j["verifier"].toObject();
        QCOMPARE(vs["name"].toString(), QString("cross-verifier"));
        QCOMPARE(vs["errors"].toInt(), 0);
        QJsonObject at80;
        for (const auto &pt : j["points"].toArray())
            if (std::abs(pt.toObject()["threshold"].toDouble() - 0.8) < 1e-9)
                at80 = pt.toObject();
        const auto vpoints = vs["points"].toArray();
        QCOMPARE(vpoints.size(), qsizetype(100));
        QVERIFY(vs["candidates"].toInt() > 0);
        QCOMPARE(vs["candidates"].toInt(), at80["hits"].toInt());
        QCOMPARE(vs["correct_candidates"].toInt(), at80["correct_hits"].toInt());
        QCOMPARE(vpoints[0].toObject()["hits"].toInt(), at80["hits"].toInt());
        QCOMPARE(vpoints[0].toObject()["recall"].toDouble(), at80["recall"].toDouble());
        for (int i = 1; i < vpoints.size(); ++i)
            QVERIFY(vpoints[i].toObject()["hits"].toInt() <= vpoints[i - 1].toObject()["hits"].toInt());
        r = runKvwb(
            {"sweep-semantic", "--workload", q(demo / "workloads" / "demo.jsonl"), "--threshold", "0.7"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("--threshold sets the verifier's candidates: it needs --verifier"),
                 r.err.constData());
        r = runKvwb({"replay", "--workload", q(demo / "workloads" / "demo.jsonl"), "--model-a",
                     q(demo / "models" / "a"), "--tiers", "exact", "--verifier", q(m_dir / "verifier")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("--verifier needs 'semantic' in --tiers"), r.err.constData());
    }

    void badInput()
    {
        test::writeFile(m_dir / "bad.jsonl", line(0, "t0", "a", "n1", "Q: fine?") + "{not json\n" +
                                                 line(2, "t0", "c", "n1", "Q: who?") +
                                                 line(3, "t0", "a", "n1", "Q: also fine?"));
        auto r = runKvwb({"replay", "--workload", q(m_dir / "bad.jsonl"), "--model-a", q(m_dir / "m"),
                          "--tiers", "exact", "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.err.contains("bad.jsonl:2") && r.err.contains("bad.jsonl:3"), r.err.constData());
        QCOMPARE(QJsonDocument::fromJson(r.out).object()["requests"].toInt(), 2);
        // a prompt longer than the context: the others are served, it is marked not served (it
        // used to stop the whole replay)
        std::string longPrompt;
        for (int i = 0; i < 400; ++i)
            longPrompt += "word ";
        test::writeFile(m_dir / "long.jsonl", line(0, "t0", "a", "n1", "Q: ok?") +
                                                  line(7, "t0", "a", "n1", longPrompt) +
                                                  line(8, "t0", "a", "n1", "Q: ok?"));
        r = runKvwb({"replay", "--workload", q(m_dir / "long.jsonl"), "--model-a", q(m_dir / "m"), "--tiers",
                     "exact", "--json", "--ledger", q(m_dir / "long.csv")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.err.contains("1 requests for model a do not fit its context") &&
                     r.err.contains("the first is request 7"),
                 r.err.constData());
        const auto total = QJsonDocument::fromJson(r.out).object()["total"].toObject();
        QCOMPARE(total["requests"].toInt(), 2);
        QCOMPARE(total["not_served"].toInt(), 1);
        QCOMPARE(total["hits"].toInt(), 1); // request 8 repeats request 0
        const auto rows = core::ledgerFromCsv(test::readFile(m_dir / "long.csv"), "long.csv");
        QCOMPARE(int(rows.size()), 3);
        QCOMPARE(rows[1].requestId, int64_t(7));
        QCOMPARE(rows[1].notServed, core::NotServed::Context);
        QCOMPARE(rows[1].tokensComputed, 0);
        QVERIFY(rows[0].notServed == core::NotServed::No && rows[2].notServed == core::NotServed::No);
        r = runKvwb({"replay", "--workload", q(m_dir / "long.jsonl"), "--model-a", q(m_dir / "m"), "--tiers",
                     "exact"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("not served: 1 requests (context 1;"), r.out.constData());
        QVERIFY2(r.out.contains("approximate hits 0 (never cached again)"), r.out.constData()); // exact only
        // --fits: the workload command counts what a model's context cannot take
        test::writeFile(m_dir / "pairs.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\t" +
                                                 longPrompt + "\tshort?\t0\n");
        r = runKvwb({"workload", "quora", "--input", q(m_dir / "pairs.tsv"), "--out", q(m_dir / "fits.jsonl"),
                     "--fits", q(m_dir / "m")});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY2(r.err.contains("warning: 1 of 2 requests do not fit") &&
                     r.err.contains("the first is request 0"),
                 r.err.constData());
        // on the clock, a workload whose span at --speed is beyond 30 days is refused before any wait
        test::writeFile(
            m_dir / "far.jsonl",
            fmt::format(
                R"({{"id":0,"t_ms":{},"tenant":"t","user":"u","model":"a","intent":"","max_tokens":2,"prompt":"hi"}})",
                int64_t(29) * 86400000) +
                "\n");
        r = runKvwb({"replay", "--workload", q(m_dir / "far.jsonl"), "--model-a", q(m_dir / "m"), "--tiers",
                     "exact", "--clock", "--speed", "0.5"});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("58.0 days away"), r.err.constData());
        r = runKvwb(
            {"replay", "--workload", q(m_dir / "w.jsonl"), "--model-a", q(m_dir / "m"), "--tiers", "cross"});
        QCOMPARE(r.exitCode, 2);
        r = runKvwb({"replay", "--workload", q(m_dir / "w.jsonl"), "--model-a", q(m_dir / "m"), "--tiers",
                     "exact,foo"});
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.err.contains("foo"));
        // two outputs naming one file: one would overwrite the other
        r = runKvwb({"replay", "--workload", q(m_dir / "w.jsonl"), "--model-a", q(m_dir / "m"), "--ledger",
                     q(m_dir / "same.csv"), "--outputs", q(m_dir / "." / "same.csv")});
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("--ledger and --outputs name the same file"), r.err.constData());
        r = runKvwb({"replay", "--workload", q(m_dir / "none.jsonl"), "--model-a", q(m_dir / "m")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY(r.err.contains("none.jsonl"));
    }
};

QTEST_GUILESS_MAIN(TestReplayCli)
#include "tst_replay_cli.moc"
