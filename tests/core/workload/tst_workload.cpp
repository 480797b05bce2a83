// Workload generator statistics (kinds, tenants, model split, Zipf skew, Poisson arrivals), the
// relation each derived request has to its base, prompt format, and the JSONL reader.
#include "core/util/error.h"
#include "core/workload/corpus.h"
#include "core/workload/workload.h"
#include "tests/support/wordnet_fixture.h"

#include <QHash>
#include <QTemporaryDir>
#include <QTest>

#include <cmath>

using namespace kvwb::core;
namespace fs = std::filesystem;

class TestWorkload : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    std::unique_ptr<WordNet> m_wn;

    Workload make(WorkloadOptions o) const { return WorkloadGenerator(*m_wn, o).generate(); }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        const fs::path dir = fs::path(m_tmp.path().toStdString()) / "wn";
        kvwb::test::writeWordNetFixture(dir, 200);
        m_wn = std::make_unique<WordNet>(WordNet::load(dir));
    }

    void kindsTenantsModelsArrivals()
    {
        WorkloadOptions o;
        o.requests = 20000;
        o.concepts = 100;
        o.tenants = 4;
        o.pRepeat = 0.12;
        o.pParaphrase = 0.15;
        o.pSynonym = 0.08;
        o.pNearMiss = 0.10;
        o.fracB = 0.3;
        o.ratePerSecond = 8.0;
        const Workload w = make(o);
        QCOMPARE(w.requests.size(), size_t(20000));
        QHash<QString, int> kinds, tenants;
        int b = 0;
        for (const auto &r : w.requests) {
            kinds[requestKindName(r.kind)]++;
            tenants[QString::fromStdString(r.tenant)]++;
            b += r.model == ModelRole::B;
        }
        const double n = double(w.requests.size());
        qInfo("kinds: new %d repeat %d paraphrase %d synonym %d near miss %d", kinds["new"],
              kinds["exact_repeat"], kinds["paraphrase"], kinds["synonym_swap"], kinds["near_miss"]);
        // Binomial sd at n = 20000 is <= 0.0035; a derived kind may fall back to "new" when no base
        // in 8 tries can be varied, hence the wider lower bound for synonyms (1-lemma concepts).
        QVERIFY(std::abs(kinds["exact_repeat"] / n - o.pRepeat) < 0.012);
        QVERIFY(std::abs(kinds["paraphrase"] / n - o.pParaphrase) < 0.012);
        QVERIFY(kinds["synonym_swap"] / n > o.pSynonym - 0.02 &&
                kinds["synonym_swap"] / n < o.pSynonym + 0.012);
        QVERIFY(std::abs(kinds["near_miss"] / n - o.pNearMiss) < 0.012);
        QCOMPARE(tenants.size(), 4);
        for (int c : tenants)
            QVERIFY(std::abs(c / n - 0.25) < 0.015);
        QVERIFY(std::abs(b / n - o.fracB) < 0.015);
        // Poisson arrivals: mean inter-arrival 1/rate (t_ms truncates to whole ms).
        const double meanMs = double(w.requests.back().tMs - w.requests.front().tMs) / (n - 1);
        QVERIFY2(std::abs(meanMs - 1000.0 / o.ratePerSecond) < 0.03 * 1000.0 / o.ratePerSecond,
                 qPrintable(QString::number(meanMs)));
        // Exponential: the share of gaps above the mean is e^-1.
        int above = 0;
        for (size_t i = 1; i < w.requests.size(); ++i) {
            QVERIFY(w.requests[i].tMs >= w.requests[i - 1].tMs);
            above += (w.requests[i].tMs - w.requests[i - 1].tMs) > 1000.0 / o.ratePerSecond;
        }
        QVERIFY(std::abs(above / n - std::exp(-1.0)) < 0.02);
    }

    void derivedRequestsRelateToTheirBase()
    {
        WorkloadOptions o;
        o.requests = 5000;
        o.concepts = 100;
        const Workload w = make(o);
        int checked = 0;
        for (const auto &r : w.requests) {
            if (r.kind == RequestKind::New) {
                QCOMPARE(r.ref, int64_t(-1));
                continue;
            }
            QVERIFY(r.ref >= 0 && r.ref < r.id);
            const WorkloadRequest &base = w.requests[size_t(r.ref)];
            QCOMPARE(r.tenant, base.tenant);
            QCOMPARE(r.model, base.model);
            QCOMPARE(r.systemPromptId, base.systemPromptId);
            switch (r.kind) {
            case RequestKind::ExactRepeat:
                QCOMPARE(r.prompt, base.prompt);
                QCOMPARE(r.intent, base.intent);
                break;
            case RequestKind::Paraphrase:
                QCOMPARE(r.intent, base.intent);
                QCOMPARE(r.lemma, base.lemma);
                QVERIFY(r.templateId != base.templateId);
                break;
            case RequestKind::SynonymSwap:
                QCOMPARE(r.intent, base.intent);
                QCOMPARE(r.templateId, base.templateId);
                QVERIFY(r.lemma != base.lemma);
                break;
            case RequestKind::NearMiss: {
                // A co-hyponym: another synset under one of the base's hypernyms, same template.
                QVERIFY(r.intent != base.intent);
                QCOMPARE(r.templateId, base.templateId);
                const auto &h1 = m_wn->find(r.intent)->hypernyms;
                const auto &h2 = m_wn->find(base.intent)->hypernyms;
                QVERIFY(std::any_of(h1.begin(), h1.end(), [&](const std::string &h) {
                    return std::count(h2.begin(), h2.end(), h);
                }));
                break;
            }
            default:
                break;
            }
            ++checked;
        }
        QVERIFY(checked > 1000);
    }

    void zipfSkew_data()
    {
        QTest::addColumn<double>("s");
        QTest::newRow("s=1") << 1.0;
        QTest::newRow("s=0.8") << 0.8;
        QTest::newRow("s=1.5") << 1.5;
    }
    void zipfSkew()
    {
        QFETCH(double, s);
        WorkloadOptions o;
        o.requests = 40000;
        o.concepts = 200;
        o.zipfS = s;
        o.pRepeat = o.pParaphrase = o.pSynonym = o.pNearMiss = 0;
        const Workload w = make(o);
        const auto concepts = selectConcepts(*m_wn, o.concepts);
        QHash<QString, int> byIntent;
        for (const auto &r : w.requests)
            byIntent[QString::fromStdString(r.intent)]++;
        std::vector<double> count;
        for (const auto &c : concepts)
            count.push_back(byIntent.value(QString::fromStdString(c.synset->id)));
        const double ratio = count[0] / count[1];
        QVERIFY2(std::abs(ratio - std::pow(2.0, s)) < 0.12 * std::pow(2.0, s),
                 qPrintable(QString::number(ratio)));
        // Least-squares slope of log(count) on log(rank) over the first 20 ranks is -s.
        double sx = 0, sy = 0, sxx = 0, sxy = 0;
        const int k = 20;
        for (int i = 0; i < k; ++i) {
            const double x = std::log(i + 1.0), y = std::log(count[size_t(i)]);
            sx += x, sy += y, sxx += x * x, sxy += x * y;
        }
        const double slope = (k * sxy - sx * sy) / (k * sxx - sx * sx);
        QVERIFY2(std::abs(slope + s) < 0.08, qPrintable(QString::number(slope)));
    }

    void promptsAndSystemPrompts()
    {
        WorkloadOptions o;
        o.requests = 300;
        o.concepts = 50;
        const Workload w = make(o);
        QCOMPARE(w.systemPrompts.size(), size_t(3 * 3));
        QHash<QString, std::string> text;
        for (const auto &sp : w.systemPrompts) {
            text[QString::fromStdString(sp.id)] = sp.text;
            const int target = std::stoi(sp.id.substr(sp.id.find("-w") + 2));
            QVERIFY(sp.words >= target && sp.words < target + 40);
        }
        for (const char *t : {"t0", "t1", "t2"}) {
            const QString p(t);
            QVERIFY(text[p + "-w60"].starts_with(text[p + "-w10"]));
            QVERIFY(text[p + "-w250"].starts_with(text[p + "-w60"]));
        }
        QVERIFY(text["t0-w250"] != text["t1-w250"]);
        for (const auto &r : w.requests) {
            const std::string &sys = text[QString::fromStdString(r.systemPromptId)];
            QCOMPARE(r.prompt, sys + "\n\nQ: " + r.question + "\nA:");
            QCOMPARE(r.maxTokens, 64);
        }
        o.systemPromptWords = {0};
        const Workload bare = make(o);
        QCOMPARE(bare.requests.front().prompt, "Q: " + bare.requests.front().question + "\nA:");
    }

    void reproducible()
    {
        WorkloadOptions o;
        o.requests = 2000;
        o.seed = 9;
        const std::string a = workloadToJsonl(make(o).requests);
        QCOMPARE(workloadToJsonl(make(o).requests), a);
        o.seed = 10;
        QVERIFY(workloadToJsonl(make(o).requests) != a);
    }

    void badOptions()
    {
        WorkloadOptions o;
        o.pRepeat = 0.6;
        o.pParaphrase = 0.6;
        QVERIFY_THROWS_EXCEPTION(Error, WorkloadGenerator(*m_wn, o));
        o = {};
        o.ratePerSecond = 0;
        QVERIFY_THROWS_EXCEPTION(Error, WorkloadGenerator(*m_wn, o));
    }

    void readerRoundTrip()
    {
        WorkloadOptions o;
        o.requests = 500;
        const auto reqs = make(o).requests;
        QTemporaryDir d;
        const fs::path path = fs::path(d.path().toStdString()) / "w.jsonl";
        writeWorkloadJsonl(path, reqs);
        const auto back = readWorkloadJsonl(path);
        QVERIFY(back.warnings.empty());
        QCOMPARE(back.requests.size(), reqs.size());
        for (size_t i = 0; i < reqs.size(); ++i) {
            const auto &x = reqs[i], &y = back.requests[i];
            QCOMPARE(y.id, x.id);
            QCOMPARE(y.tMs, x.tMs);
            QCOMPARE(y.tenant, x.tenant);
            QCOMPARE(y.user, x.user);
            QCOMPARE(y.model, x.model);
            QCOMPARE(y.systemPromptId, x.systemPromptId);
            QCOMPARE(y.kind, x.kind);
            QCOMPARE(y.intent, x.intent);
            QCOMPARE(y.templateId, x.templateId);
            QCOMPARE(y.lemma, x.lemma);
            QCOMPARE(y.ref, x.ref);
            QCOMPARE(y.maxTokens, x.maxTokens);
            QCOMPARE(y.question, x.question);
            QCOMPARE(y.prompt, x.prompt);
        }
        QCOMPARE(workloadToJsonl(back.requests), workloadToJsonl(reqs));
        QVERIFY_THROWS_EXCEPTION(Error, readWorkloadJsonl(path.parent_path() / "missing.jsonl"));
    }

    void readerWarnings_data()
    {
        QTest::addColumn<QString>("line");
        QTest::addColumn<QString>("warning");
        const QString ok =
            R"("tenant":"t0","user":"u1","model":"a","intent":"n1","max_tokens":8,"prompt":"Q: x\nA:")";
        // found by fuzz_workload: a number beyond a double made the JSON library throw past the reader
        QTest::newRow("number overflow") << R"({"t_ms":1e46333})"
                                         << "not usable JSON";
        QTest::newRow("not json") << "{oops"
                                  << "not valid JSON";
        QTest::newRow("array") << "[1,2]"
                               << "not a JSON object";
        QTest::newRow("negative t_ms") << "{\"t_ms\":-5," + ok + "}"
                                       << "field 't_ms' must be a non-negative integer";
        QTest::newRow("float t_ms") << "{\"t_ms\":1.5," + ok + "}"
                                    << "field 't_ms' must be a non-negative integer";
        QTest::newRow("missing t_ms") << "{" + ok + "}"
                                      << "field 't_ms' is missing";
        QTest::newRow("t_ms 1e15") << "{\"t_ms\":1000000000000000," + ok + "}"
                                   << "field 't_ms' is beyond 30 days (2592000000 ms)";
        QTest::newRow("t_ms just past 30 days") << "{\"t_ms\":2592000001," + ok + "}"
                                                << "field 't_ms' is beyond 30 days";
        QTest::newRow("bad model")
            << R"({"t_ms":1,"tenant":"t0","user":"u1","model":"c","intent":"n1","max_tokens":8,"prompt":"p"})"
            << "field 'model' must be \"a\" or \"b\"";
        QTest::newRow("bad kind") << "{\"t_ms\":1,\"kind\":\"maybe\"," + ok + "}"
                                  << "field 'kind' must be one of";
        QTest::newRow("zero max_tokens")
            << R"({"t_ms":1,"tenant":"t0","user":"u1","model":"a","intent":"n1","max_tokens":0,"prompt":"p"})"
            << "field 'max_tokens' must be a positive integer";
        QTest::newRow("empty prompt")
            << R"({"t_ms":1,"tenant":"t0","user":"u1","model":"a","intent":"n1","max_tokens":3,"prompt":""})"
            << "field 'prompt' must be a non-empty string";
        QTest::newRow("tenant number")
            << R"({"t_ms":1,"tenant":3,"user":"u1","model":"a","intent":"n1","max_tokens":3,"prompt":"p"})"
            << "field 'tenant' must be a non-empty string";
    }
    void readerWarnings()
    {
        QFETCH(QString, line);
        QFETCH(QString, warning);
        const std::string good =
            R"({"t_ms":0,"tenant":"t0","user":"u1","model":"b","intent":"n00002100","max_tokens":16,"prompt":"Q: What is a car?\nA:"})";
        // Line 1 good, line 2 blank (ignored), line 3 bad, line 4 good.
        const std::string text = good + "\n\n" + line.toStdString() + "\n" + good + "\n";
        const auto r = parseWorkloadJsonl(text, "workload.jsonl");
        QCOMPARE(r.requests.size(), size_t(2));
        QCOMPARE(r.lines, size_t(3));
        QCOMPARE(r.warnings.total(), size_t(1));
        const QString msg = QString::fromStdString(r.warnings.messages().front());
        QVERIFY2(msg.startsWith("workload.jsonl:3: " + warning), qPrintable(msg));
        QCOMPARE(r.requests[1].id, int64_t(1)); // ids default to the index among good lines
        QCOMPARE(r.requests[0].kind, RequestKind::New);
        QCOMPARE(r.requests[0].model, ModelRole::B);
    }
};

QTEST_APPLESS_MAIN(TestWorkload)
#include "tst_workload.moc"
