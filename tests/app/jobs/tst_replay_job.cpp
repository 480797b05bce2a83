// The replay set-up `kvwb replay` and the window's engine worker share (app/jobs/replay_job.h),
// driven directly: reading and trimming a workload (malformed lines counted, nothing left refused
// naming the file), the embedders by name, prepare -> replay -> finish on a tiny model (the options
// derived from the settings, the ledger and answers written), what prepare refuses, the settings
// JSON stored beside a ledger (read back as the same settings), and the working-set refusal with the
// machine's free memory injected.
#include "app/jobs/replay_job.h"

#include "core/model/random_model.h"
#include "core/util/error.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
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
        const fs::path file = dir() / "rec.jsonl";
        test::writeFile(file,
                        requestLine(0, "What is a car?") + "\n" + requestLine(1, "What is a dog?") + "\n");
        core::ReplaySettings settings;
        settings.workload = file.string();
        settings.limit = 7;
        settings.converter = "ridge";
        settings.tiers = {core::TierKind::Exact, core::TierKind::Semantic};
        settings.threshold = 0.85;
        settings.maxTokens = 5;
        const auto job =
            app::jobs::prepareReplay(settings, app::jobs::readReplayRequests(file.string(), 7).requests,
                                     {m_model.get(), nullptr, m_tok.get(), nullptr, {}});
        // the limit past the workload's end is said, not silently capped
        QCOMPARE(job.warnings.size(), size_t(1));
        QVERIFY2(job.warnings[0].find("limit of 7") != std::string::npos, job.warnings[0].c_str());
        const auto j = nlohmann::json::parse(app::jobs::ledgerSettingsJson(job, true));
        QCOMPARE(j.at("workload").get<std::string>(), file.string());
        QCOMPARE(j.at("tiers"), nlohmann::json({"exact", "semantic"}));
        QCOMPARE(j.at("threshold").get<double>(), 0.85);
        QCOMPARE(j.at("embedder").get<std::string>(), std::string("lexical"));
        QCOMPARE(j.at("embedder_name").get<std::string>(), std::string("lexical-512"));
        QCOMPARE(j.at("max_tokens").get<int>(), 5);
        QCOMPARE(j.at("limit").get<int>(), 7);
        QCOMPARE(j.at("converter").get<std::string>(), std::string("ridge"));
        QCOMPARE(j.at("cancelled").get<bool>(), true);
        QCOMPARE(j.at("model_a").get<std::string>(), m_model->checkpoint().fingerprint());
        QVERIFY(!j.contains("ledger")); // where this run wrote is not a setting
        // The stored settings read back as the same settings.
        const auto again = core::replaySettingsFromJson(j, "ledger", "settings");
        QVERIFY(again == job.settings);
    }

    void preparedReplayRunsAndFinishes()
    {
        const fs::path file = dir() / "run.jsonl";
        test::writeFile(file, requestLine(0, "What is a car?") + "\n" + requestLine(1, "What is a car?") +
                                  "\n" + requestLine(2, "What is a dog?") + "\n");
        core::ReplaySettings settings;
        settings.workload = file.string();
        settings.tiers = {core::TierKind::Exact, core::TierKind::Prefix};
        settings.prefixBlock = 4;
        settings.ledgerCsv = (dir() / "run.csv").string();
        settings.outputs = (dir() / "run-outputs.jsonl").string();
        const auto job =
            app::jobs::prepareReplay(settings, app::jobs::readReplayRequests(file.string(), 0).requests,
                                     {m_model.get(), nullptr, m_tok.get(), nullptr, {}});
        QCOMPARE(job.options.prefixBlock, 4);
        QCOMPARE(job.options.tiers, settings.tiers);
        QVERIFY(job.models.embedder && !job.models.converter && !job.store);
        const auto r = gpu::replayWorkload(job.requests, job.models, job.options);
        QCOMPARE(r.rows.size(), size_t(3));
        QCOMPARE(r.rows[1].answeredBy, core::TierKind::Exact); // the same question again
        app::jobs::finishReplay(job, r);
        const std::string csv = test::readFile(dir() / "run.csv");
        QCOMPARE(std::count(csv.begin(), csv.end(), '\n'), 4L); // header and three rows
        const std::string outputs = test::readFile(dir() / "run-outputs.jsonl");
        QCOMPARE(std::count(outputs.begin(), outputs.end(), '\n'), 3L);
        QVERIFY(outputs.find(nlohmann::json(r.outputs[0])
                                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) !=
                std::string::npos);
    }

    void prepareRefusesWhatTheSettingsCannotRun()
    {
        const fs::path file = dir() / "refuse.jsonl";
        test::writeFile(file, requestLine(0, "What is a car?") + "\n");
        const auto requests = app::jobs::readReplayRequests(file.string(), 0).requests;
        const auto refused = [&](core::ReplaySettings s, const char *expected) {
            s.workload = file.string();
            try {
                app::jobs::prepareReplay(s, requests, {m_model.get(), nullptr, m_tok.get(), nullptr, {}});
                QFAIL("no error");
            } catch (const core::Error &e) {
                QVERIFY2(std::string(e.what()).find(expected) != std::string::npos, e.what());
            }
        };
        core::ReplaySettings cross;
        cross.tiers = {core::TierKind::Cross};
        refused(cross, "the cross tier needs --experiment");
        cross.experiment = (dir() / "none.h5").string();
        refused(cross, "need model B loaded");
        core::ReplaySettings knowledge;
        knowledge.tiers = {core::TierKind::Knowledge};
        refused(knowledge, "the knowledge tier needs --knowledge");
        core::ReplaySettings ttl;
        ttl.eviction = core::Eviction::Ttl;
        refused(ttl, "--eviction ttl needs --ttl-ms > 0");
        core::ReplaySettings store;
        store.storeKvDtype = core::FloatType::BF16;
        refused(store, "--store-kv-dtype needs --store");
    }

    void refusesAWorkingSetThatDoesNotFit()
    {
        const fs::path file = dir() / "fit.jsonl";
        test::writeFile(file, requestLine(0, "What is a car?") + "\n");
        const auto requests = app::jobs::readReplayRequests(file.string(), 0).requests;
        core::ReplaySettings job;
        job.workload = "w.jsonl";
        job.tiers = {core::TierKind::Prefix};
        job.prefixBytes = int64_t(3) << 30; // 3 GB per model
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
