// The replay set-up `kvwb replay` and the window's engine worker share (app/jobs/replay_job.h),
// driven directly: reading and trimming a workload (malformed lines counted, nothing left refused
// naming the file), the embedders by name, the settings JSON stored beside a ledger, and the
// working-set refusal with the machine's free memory injected.
#include "app/jobs/replay_job.h"

#include "core/model/random_model.h"
#include "core/util/error.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

std::string requestLine(int id, const std::string &question)
{
    return nlohmann::json{{"id", id},
                          {"t_ms", id * 10},
                          {"tenant", "t0"},
                          {"user", "u1"},
                          {"model", "a"},
                          {"kind", "new"},
                          {"intent", "n1"},
                          {"max_tokens", 4},
                          {"question", question},
                          {"prompt", "Q: " + question + "\nA:"}}
        .dump();
}

struct MemoryGuard
{
    explicit MemoryGuard(const char *bytes) { setenv("KVWB_TEST_MEM_AVAILABLE", bytes, 1); }
    ~MemoryGuard() { unsetenv("KVWB_TEST_MEM_AVAILABLE"); }
};

} // namespace

class TestReplayJob : public QObject
{
    Q_OBJECT

    QTemporaryDir m_tmp;
    std::unique_ptr<gpu::Model> m_model;
    std::unique_ptr<core::Tokenizer> m_tok;
    fs::path dir() const { return m_tmp.path().toStdString(); }

private Q_SLOTS:
    void initTestCase()
    {
        core::writeRandomHfModel(dir() / "m", core::randomModelPreset("gqa"));
        m_model = gpu::Model::load(dir() / "m", {});
        m_tok = core::loadTokenizer(dir() / "m");
    }

    void readsAndTrimsWorkloads()
    {
        const fs::path file = dir() / "w.jsonl";
        test::writeFile(file, requestLine(0, "What is a car?") + "\n{not json\n" +
                                  requestLine(1, "What is a dog?") + "\n" + requestLine(2, "What is a cat?") +
                                  "\n");
        const auto all = app::jobs::readReplayRequests(file.string(), 0);
        QCOMPARE(all.requests.size(), size_t(3));
        QCOMPARE(all.warnings.messages().size(), size_t(1)); // the malformed line, skipped
        const auto two = app::jobs::readReplayRequests(file.string(), 2);
        QCOMPARE(two.requests.size(), size_t(2));
        QCOMPARE(two.requests[1].question, std::string("What is a dog?"));

        const fs::path bad = dir() / "bad.jsonl";
        test::writeFile(bad, "{not json\n");
        try {
            app::jobs::readReplayRequests(bad.string(), 0);
            QFAIL("no error");
        } catch (const core::Error &e) {
            QCOMPARE(e.code(), core::ErrorCode::Format);
            QVERIFY2(std::string(e.what()).find("bad.jsonl") != std::string::npos, e.what());
            QVERIFY2(std::string(e.what()).find("no requests to replay") != std::string::npos, e.what());
        }
    }

    void embeddersByName()
    {
        const auto lexical = app::jobs::makeEmbedder("lexical", -1, *m_model, *m_tok);
        QCOMPARE(lexical->name(), std::string("lexical-512"));
        const auto idf = app::jobs::makeEmbedder("lexical-idf", -1, *m_model, *m_tok,
                                                 {"What is a car?", "What is a dog?"});
        QCOMPARE(idf->name(), std::string("lexical-idf-512"));
        // the idf weights tell the two questions apart more than the plain counts do
        const auto cos = [](const std::vector<float> &x, const std::vector<float> &y) {
            double s = 0;
            for (size_t i = 0; i < x.size(); ++i)
                s += double(x[i]) * y[i];
            return s;
        };
        QVERIFY(cos(idf->embed("What is a car?"), idf->embed("What is a dog?")) <
                cos(lexical->embed("What is a car?"), lexical->embed("What is a dog?")));
        const auto model = app::jobs::makeEmbedder("model", -1, *m_model, *m_tok);
        QCOMPARE(model->dim(), m_model->config().hiddenSize);
        QVERIFY(!app::jobs::makeEmbedder("lexical", -1, *m_model, *m_tok)->embed("a car").empty());
        try { // a path that is no embedding model
            app::jobs::makeEmbedder((dir() / "missing").string(), -1, *m_model, *m_tok);
            QFAIL("no error");
        } catch (const core::Error &) {
        }
    }

    void settingsJsonRecordsTheJob()
    {
        app::jobs::ReplayJob job;
        job.workloadPath = "w.jsonl";
        job.limit = 7;
        job.converter = "ridge";
        job.options.tiers = {core::TierKind::Exact, core::TierKind::Semantic};
        job.options.threshold = 0.85;
        job.options.maxTokens = 5;
        const auto embedder = app::jobs::makeEmbedder("lexical", -1, *m_model, *m_tok);
        const auto j = nlohmann::json::parse(
            app::jobs::ledgerSettingsJson(job, embedder.get(), *m_model, nullptr, true));
        QCOMPARE(j.at("workload").get<std::string>(), std::string("w.jsonl"));
        QCOMPARE(j.at("tiers").get<std::string>(), std::string("exact,semantic"));
        QCOMPARE(j.at("threshold").get<double>(), 0.85);
        QCOMPARE(j.at("embedder").get<std::string>(), std::string("lexical-512"));
        QCOMPARE(j.at("max_tokens").get<int>(), 5);
        QCOMPARE(j.at("limit").get<int>(), 7);
        QCOMPARE(j.at("converter").get<std::string>(), std::string()); // no cross tier: no converter
        QCOMPARE(j.at("cancelled").get<bool>(), true);
        job.options.tiers.push_back(core::TierKind::Cross);
        const auto cross =
            nlohmann::json::parse(app::jobs::ledgerSettingsJson(job, nullptr, *m_model, nullptr, false));
        QCOMPARE(cross.at("converter").get<std::string>(), std::string("ridge"));
        QCOMPARE(cross.at("embedder").get<std::string>(),
                 std::string("lexical")); // no embedder built: its name
    }

    void refusesAWorkingSetThatDoesNotFit()
    {
        const fs::path file = dir() / "fit.jsonl";
        test::writeFile(file, requestLine(0, "What is a car?") + "\n");
        const auto requests = app::jobs::readReplayRequests(file.string(), 0).requests;
        app::jobs::ReplayJob job;
        job.workloadPath = "w.jsonl";
        job.options.tiers = {core::TierKind::Prefix};
        job.options.prefixLimits.maxBytes = int64_t(3) << 30; // 3 GB per model
        {
            MemoryGuard guard("1000000000"); // 1 GB free
            try {
                app::jobs::checkReplayWorkingSet(job, requests, *m_model, *m_tok, nullptr, nullptr);
                QFAIL("no error");
            } catch (const core::Error &e) {
                QCOMPARE(e.code(), core::ErrorCode::Device);
                QVERIFY2(std::string(e.what()).find("replaying w.jsonl") != std::string::npos, e.what());
                QVERIFY2(std::string(e.what()).find("prefix tier") != std::string::npos, e.what());
            }
        }
        MemoryGuard plenty("100000000000"); // 100 GB free
        app::jobs::checkReplayWorkingSet(job, requests, *m_model, *m_tok, nullptr, nullptr);
    }
};

QTEST_GUILESS_MAIN(TestReplayJob)
#include "tst_replay_job.moc"
