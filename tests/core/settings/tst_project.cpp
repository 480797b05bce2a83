// Project files: round trip with relative paths, unknown sections preserved, the capture, alignment
// and replay settings sections (every field round-tripped, defaults when absent, unknown keys inside
// them kept), and errors that name the field.
#include "core/settings/project.h"
#include "core/util/error.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>

#include <fstream>

using namespace kvwb;
namespace fs = std::filesystem;

class TestProject : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void roundTripRelativeAndExtra()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        test::writeFile(dir / "p.kvwb", R"({"schema": "kvwb-project/1", "name": "demo",
            "models": {"a": {"path": "models/a"}, "b": {"path": "models/b", "dtype": "bf16", "context": 8192}},
            "workloads": ["workloads/w.jsonl"], "corpus": "corpus.jsonl",
            "tiers": {"semantic": {"threshold": 0.8}}})");
        const auto p = core::Project::load(dir / "p.kvwb");
        QCOMPARE(p.name, std::string("demo"));
        QCOMPARE(p.modelA.path, fs::path("models/a"));
        QCOMPARE(p.modelA.device, std::string("cpu"));
        QCOMPARE(p.modelB.dtype, std::string("bf16"));
        QCOMPARE(p.modelA.context, 0);
        QCOMPARE(p.modelB.context, 8192);
        const auto r = p.resolved(dir / "p.kvwb");
        QCOMPARE(r.modelB.path, dir / "models/b");
        QCOMPARE(r.workloads.at(0), dir / "workloads/w.jsonl");
        // saving the resolved project writes relative paths again and keeps the unknown section
        r.save(dir / "copy.kvwb");
        const std::string text = test::readFile(dir / "copy.kvwb");
        QVERIFY(text.find("\"models/b\"") != std::string::npos);
        QVERIFY(text.find("\"threshold\": 0.8") != std::string::npos);
        const auto again = core::Project::load(dir / "copy.kvwb");
        QCOMPARE(again.corpus.value(), fs::path("corpus.jsonl"));
        QCOMPARE(again.modelB.context, 8192);
        QVERIFY(text.find("\"context\": 8192") != std::string::npos);
        QCOMPARE(text.find("\"context\": 0"), std::string::npos); // the model's own: not written
    }

    // replay.embedder: a name stays a name; a model path is relative to the project file like the
    // models', resolved on load and written back relative.
    void embedderPathIsRelativeToTheProject()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        test::writeFile(dir / "p.kvwb", R"({"schema": "kvwb-project/1", "models": {"a": {"path": "a"},
            "b": {"path": "b"}}, "replay": {"embedder": "models/embedder"}})");
        const auto r = core::Project::load(dir / "p.kvwb").resolved(dir / "p.kvwb");
        QCOMPARE(fs::path(r.replay.embedder), dir / "models/embedder");
        r.save(dir / "copy.kvwb");
        QVERIFY(test::readFile(dir / "copy.kvwb").find("\"embedder\": \"models/embedder\"") !=
                std::string::npos);
        test::writeFile(dir / "n.kvwb", R"({"schema": "kvwb-project/1", "models": {"a": {"path": "a"},
            "b": {"path": "b"}}, "replay": {"embedder": "lexical-idf"}})");
        QCOMPARE(core::Project::load(dir / "n.kvwb").resolved(dir / "n.kvwb").replay.embedder,
                 std::string("lexical-idf"));
    }

    void sectionsDefaultWhenAbsent()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        test::writeFile(dir / "old.kvwb", R"({"schema": "kvwb-project/1",
            "models": {"a": {"path": "a"}, "b": {"path": "b"}}})");
        const auto p = core::Project::load(dir / "old.kvwb");
        const core::CaptureSettings c;
        const core::ProjectAlignment a;
        const core::ReplaySettings r;
        QVERIFY(p.capture.storage == c.storage);
        QCOMPARE(p.capture.compress, c.compress);
        QVERIFY(p.alignment.fit.selection == a.fit.selection);
        QCOMPARE(p.alignment.fit.lambda, a.fit.lambda);
        QCOMPARE(p.alignment.fit.name, a.fit.name);
        QCOMPARE(p.replay.tiers, r.tiers);
        QCOMPARE(p.replay.threshold, r.threshold);
        QCOMPARE(p.replay.gate, r.gate);
        QCOMPARE(p.extraJson, std::string("{}"));
        // Saving writes all three sections.
        p.save(dir / "new.kvwb");
        const std::string text = test::readFile(dir / "new.kvwb");
        for (const char *key : {"\"capture\"", "\"alignment\"", "\"replay\"", "\"gate_signal\": \"tail_kl\""})
            QVERIFY2(text.find(key) != std::string::npos, key);
    }

    void sectionsRoundTrip()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        test::writeFile(dir / "s.kvwb", R"({"schema": "kvwb-project/1",
            "models": {"a": {"path": "a"}, "b": {"path": "b"}},
            "capture": {"storage": "bf16", "compress": 4, "max_tokens": 512, "limit": 20, "post_rope": true,
                        "future_flag": {"x": 1}},
            "alignment": {"name": "fit-2", "selection": "topk", "k": 3, "auto_lambda": true, "lambda": 0.25,
                          "per_head": true, "family": "mlp", "rank": 12, "mlp_hidden": 64, "mlp_epochs": 9,
                          "budget_seconds": 90.5, "auto_prompts": 7, "token_features": "b,offsets=8",
                          "objective": "kl", "kl_epochs": 5, "kl_learning_rate": 0.002,
                          "max_train_tokens": 5000000000, "in_use": "fit-1"},
            "replay": {"tiers": ["cross", "knowledge", "exact"], "threshold": -0.5, "embedder": "model",
                       "gate_signal": "kv_cos", "gate_threshold": 0.875, "gate": false, "max_tokens": 64,
                       "limit": 7, "store": "memory", "store_kv_dtype": "bf16", "prices": "deepseek-chat"},
            "compare": {"prompt": "Why?", "max_tokens": 12, "gate_signal": "nll", "gate_threshold": 2.5,
                        "limit": 5, "baselines": true, "recompute": 0.5, "prompts": "q.txt"},
            "knowledge": {"graph": "kg/graph.h5", "profiles": "users.json", "use_in_replays": true},
            "later_section": [1, 2]})");
        const auto check = [](const core::Project &p) {
            QVERIFY(p.capture.storage == core::FloatType::BF16);
            QCOMPARE(p.capture.compress, 4);
            QCOMPARE(p.capture.maxTokens, 512);
            QCOMPARE(p.capture.limit, 20);
            QCOMPARE(p.capture.postRope, true);
            QCOMPARE(p.alignment.fit.name, std::string("fit-2"));
            QVERIFY(p.alignment.fit.selection == core::LayerSelection::TopK);
            QCOMPARE(p.alignment.fit.k, 3);
            QCOMPARE(p.alignment.fit.autoLambda, true);
            QCOMPARE(p.alignment.fit.lambda, 0.25);
            QCOMPARE(p.alignment.fit.perHead, true);
            QVERIFY(p.alignment.fit.family == core::ConverterFamily::Mlp);
            QCOMPARE(p.alignment.fit.rank, 12);
            QCOMPARE(p.alignment.fit.mlpHidden, 64);
            QCOMPARE(p.alignment.fit.mlpEpochs, 9);
            QCOMPARE(p.alignment.fit.budgetSeconds, 90.5);
            QCOMPARE(p.alignment.fit.autoPrompts, 7);
            QCOMPARE(p.alignment.fit.tokenFeatures, (core::TokenFeatures{0, true, 8}));
            QCOMPARE(p.alignment.fit.objective, core::FitObjective::Kl);
            QCOMPARE(p.alignment.fit.klEpochs, 5);
            QCOMPARE(p.alignment.fit.klLearningRate, 0.002);
            QCOMPARE(p.alignment.fit.maxTrainTokens, int64_t(5000000000));
            QCOMPARE(p.alignment.inUse, std::string("fit-1"));
            QCOMPARE(p.replay.tiers,
                     (std::vector<core::TierKind>{core::TierKind::Cross, core::TierKind::Knowledge,
                                                  core::TierKind::Exact}));
            QCOMPARE(p.replay.store, std::string("memory"));
            QCOMPARE(p.replay.storeKvDtype, core::FloatType::BF16);
            QCOMPARE(p.replay.prices, std::string("deepseek-chat"));
            QCOMPARE(p.replay.threshold, -0.5);
            QCOMPARE(p.replay.embedder, std::string("model"));
            QCOMPARE(p.replay.gateSignal, core::GateSignal::KvCos);
            QCOMPARE(p.replay.gateThreshold, 0.875);
            QCOMPARE(p.replay.gate, false);
            QCOMPARE(p.replay.maxTokens, 64);
            QCOMPARE(p.replay.limit, 7);
            QCOMPARE(p.compare.prompt, std::string("Why?"));
            QCOMPARE(p.compare.maxTokens, 12);
            QCOMPARE(p.compare.gateSignal, core::GateSignal::Nll);
            QCOMPARE(p.compare.gateThreshold, 2.5);
            QCOMPARE(p.compare.limit, 5);
            QVERIFY(p.compare.baselines);
            QCOMPARE(p.compare.recompute.share, 0.5);
            QCOMPARE(p.compare.promptsFile, std::string("q.txt"));
            QCOMPARE(p.knowledge.graph, fs::path("kg/graph.h5"));
            QCOMPARE(p.knowledge.profiles, fs::path("users.json"));
            QVERIFY(p.knowledge.useInReplays);
            // Known keys are not also kept verbatim; unknown ones (in a section too) are.
            QVERIFY2(p.extraJson.find("storage") == std::string::npos, p.extraJson.c_str());
            QVERIFY2(p.extraJson.find("\"tiers\"") == std::string::npos, p.extraJson.c_str());
            QVERIFY2(p.extraJson.find("future_flag") != std::string::npos, p.extraJson.c_str());
            QVERIFY2(p.extraJson.find("later_section") != std::string::npos, p.extraJson.c_str());
        };
        auto p = core::Project::load(dir / "s.kvwb");
        check(p);
        p.save(dir / "s2.kvwb");
        auto again = core::Project::load(dir / "s2.kvwb");
        check(again);
        const std::string text = test::readFile(dir / "s2.kvwb");
        QVERIFY2(text.find("\"future_flag\"") != std::string::npos, text.c_str());

        // Edited values are what save writes.
        again.capture.storage = core::FloatType::F16;
        again.alignment.fit.k = 9;
        again.replay.tiers = {core::TierKind::Exact, core::TierKind::Semantic, core::TierKind::Prefix,
                              core::TierKind::Cross};
        again.replay.gateSignal = core::GateSignal::Nll;
        again.save(dir / "s3.kvwb");
        const auto third = core::Project::load(dir / "s3.kvwb");
        QVERIFY(third.capture.storage == core::FloatType::F16);
        QCOMPARE(third.alignment.fit.k, 9);
        QCOMPARE(third.replay.tiers, again.replay.tiers);
        QCOMPARE(third.replay.gateSignal, core::GateSignal::Nll);
        QCOMPARE(third.capture.compress, 4);
        // the knowledge section's paths resolve against the project file; no graph stays no graph
        QCOMPARE(third.resolved(dir / "s3.kvwb").knowledge.graph, dir / "kg/graph.h5");
        auto none = third;
        none.knowledge = {};
        none.save(dir / "s4.kvwb");
        const auto fourth = core::Project::load(dir / "s4.kvwb").resolved(dir / "s4.kvwb");
        QVERIFY(fourth.knowledge.graph.empty());
        QVERIFY(!fourth.knowledge.useInReplays);
        QVERIFY(fourth.modelA.path == dir / "a");
    }

    void errors_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("mention");
        QTest::newRow("not json") << "{" << int(core::ErrorCode::Format) << "not JSON";
        QTest::newRow("schema") << R"({"schema": "kvwb-project/9"})" << int(core::ErrorCode::Format)
                                << "kvwb-project/9";
        QTest::newRow("no models") << R"({"schema": "kvwb-project/1"})" << int(core::ErrorCode::Config)
                                   << "'models'";
        QTest::newRow("no b") << R"({"schema": "kvwb-project/1", "models": {"a": {"path": "x"}}})"
                              << int(core::ErrorCode::Config) << "'models.b'";
        const auto bad = [](const char *section) {
            return QString(
                       R"({"schema": "kvwb-project/1", "models": {"a": {"path": "x"}, "b": {"path": "y"}}, %1})")
                .arg(section);
        };
        const int config = int(core::ErrorCode::Config);
        QTest::newRow("context")
            << R"({"schema": "kvwb-project/1", "models": {"a": {"path": "x", "context": -4}, "b": {"path": "y"}}})"
            << config
            << "field 'models.a.context' must be an integer in 0..16777216 (0: the model's own), got -4";
        QTest::newRow("context type")
            << R"({"schema": "kvwb-project/1", "models": {"a": {"path": "x"}, "b": {"path": "y", "context": "4k"}}})"
            << config << "field 'models.b.context' must be an integer";
        QTest::newRow("capture not object")
            << bad(R"("capture": [1])") << config << "field 'capture' must be an object";
        QTest::newRow("storage") << bad(R"("capture": {"storage": "f64"})") << config
                                 << "field 'capture.storage' must be f32, f16 or bf16, got 'f64'";
        QTest::newRow("compress") << bad(R"("capture": {"compress": 10})") << config
                                  << "field 'capture.compress' must be in 0..9, got 10";
        QTest::newRow("compress type") << bad(R"("capture": {"compress": 1.5})") << config
                                       << "field 'capture.compress' must be an integer";
        QTest::newRow("max_tokens") << bad(R"("capture": {"max_tokens": -1})") << config
                                    << "field 'capture.max_tokens' must be >= 0, got -1";
        QTest::newRow("capture limit") << bad(R"("capture": {"limit": -3})") << config << "'capture.limit'";
        QTest::newRow("post_rope") << bad(R"("capture": {"post_rope": 1})") << config
                                   << "field 'capture.post_rope' must be true or false";
        QTest::newRow("knowledge graph type")
            << bad(R"("knowledge": {"graph": 3})") << config << "field 'knowledge.graph' must be a string";
        QTest::newRow("use_in_replays type") << bad(R"("knowledge": {"use_in_replays": "yes"})") << config
                                             << "field 'knowledge.use_in_replays' must be true or false";
        QTest::newRow("compare gate_signal")
            << bad(R"("compare": {"gate_signal": "loudness"})") << config << "field 'compare.gate_signal'";
        QTest::newRow("selection")
            << bad(R"("alignment": {"selection": "best"})") << config
            << "field 'alignment.selection' must be proportional, topk or all, got 'best'";
        QTest::newRow("objective") << bad(R"("alignment": {"objective": "mse"})") << config
                                   << "field 'alignment.objective'";
        QTest::newRow("token_features")
            << bad(R"("alignment": {"token_features": "b,window=9"})") << config
            << "field 'alignment.token_features' must be none, all or a comma list";
        QTest::newRow("family") << bad(R"("alignment": {"family": "cubic"})") << config
                                << "ridge, attn_ridge, low_rank";
        QTest::newRow("k") << bad(R"("alignment": {"k": 0})") << config
                           << "field 'alignment.k' must be >= 1, got 0";
        QTest::newRow("lambda") << bad(R"("alignment": {"lambda": 0})") << config
                                << "field 'alignment.lambda' must be > 0";
        QTest::newRow("lambda type") << bad(R"("alignment": {"lambda": "0.1"})") << config
                                     << "field 'alignment.lambda' must be a number";
        QTest::newRow("auto_lambda") << bad(R"("alignment": {"auto_lambda": "yes"})") << config
                                     << "'alignment.auto_lambda'";
        QTest::newRow("per_head") << bad(R"("alignment": {"per_head": null})") << config
                                  << "'alignment.per_head'";
        QTest::newRow("max_train_tokens") << bad(R"("alignment": {"max_train_tokens": -1})") << config
                                          << "'alignment.max_train_tokens' must be >= 0";
        QTest::newRow("name") << bad(R"("alignment": {"name": 3})") << config
                              << "field 'alignment.name' must be a string";
        QTest::newRow("in_use") << bad(R"("alignment": {"in_use": false})") << config << "'alignment.in_use'";
        QTest::newRow("tiers type") << bad(R"("replay": {"tiers": "exact"})") << config
                                    << "field 'replay.tiers' must be a list";
        QTest::newRow("unknown tier")
            << bad(R"("replay": {"tiers": ["exact", "prefix", "foo"]})") << config
            << "field 'replay.tiers' expects a comma-separated list of exact, semantic, prefix, cross, "
               "knowledge (or 'none'), got 'foo'";
        QTest::newRow("duplicate tier") << bad(R"("replay": {"tiers": ["exact", "cross", "exact"]})")
                                        << config << "field 'replay.tiers' names 'exact' twice";
        QTest::newRow("tier type") << bad(R"("replay": {"tiers": [1]})") << config
                                   << "field 'replay.tiers' must be a list of strings";
        QTest::newRow("threshold") << bad(R"("replay": {"threshold": 1.5})") << config
                                   << "field 'replay.threshold' expects a number in [-1, 1], got '1.5'";
        QTest::newRow("threshold low") << bad(R"("replay": {"threshold": -1.01})") << config
                                       << "field 'replay.threshold' expects a number in [-1, 1], got '-1.01'";
        QTest::newRow("embedder") << bad(R"("replay": {"embedder": ""})") << config
                                  << "field 'replay.embedder' is empty";
        QTest::newRow("gate_signal")
            << bad(R"("replay": {"gate_signal": "kl"})") << config
            << "field 'replay.gate_signal' expects tail_kl, kv_cos, attn_cos or nll, got 'kl'";
        QTest::newRow("gate_threshold") << bad(R"("replay": {"gate_threshold": "x"})") << config
                                        << "'replay.gate_threshold' must be a number";
        QTest::newRow("gate") << bad(R"("replay": {"gate": "on"})") << config
                              << "'replay.gate' must be true or false";
        QTest::newRow("replay max_tokens") << bad(R"("replay": {"max_tokens": -5})") << config
                                           << "'replay.max_tokens' expects an integer >= 0, got '-5'";
        QTest::newRow("replay limit")
            << bad(R"("replay": {"limit": 2.0})") << config << "'replay.limit' must be an integer";
        QTest::newRow("replay store") << bad(R"("replay": {"store": "redis:localhost"})") << config
                                      << "field 'replay.store' is not a store URL";
        QTest::newRow("bad device")
            << R"({"schema": "kvwb-project/1", "models": {"a": {"path": "x", "device": "tpu"}, "b": {"path": "y"}}})"
            << int(core::ErrorCode::Config) << "models.a.device";
    }
    void errors()
    {
        QFETCH(QString, text);
        QFETCH(int, code);
        QFETCH(QString, mention);
        QTemporaryDir tmp;
        const fs::path file = fs::path(tmp.path().toStdString()) / "bad.kvwb";
        test::writeFile(file, text.toStdString());
        try {
            core::Project::load(file);
            QFAIL("accepted");
        } catch (const core::Error &e) {
            QCOMPARE(int(e.code()), code);
            QVERIFY2(QString(e.what()).contains(mention) && QString(e.what()).contains("bad.kvwb"), e.what());
        }
    }

    // `kvwb open /dev/zero` read until memory ran out (an uncaught bad_alloc): a project is a regular
    // file of at most 64 MiB, checked before it is read.
    void endlessAndHugeFilesAreRefusedBeforeReading()
    {
        try {
            core::Project::load("/dev/zero");
            QFAIL("accepted /dev/zero");
        } catch (const core::Error &e) {
            QCOMPARE(e.code(), core::ErrorCode::Io);
            QVERIFY2(QString(e.what()).contains("/dev/zero: not a regular file"), e.what());
        }
        QTemporaryDir tmp;
        const fs::path file = fs::path(tmp.path().toStdString()) / "huge.kvwb";
        {
            std::ofstream out(file, std::ios::binary);
            out.seekp((std::streamoff(64) << 20) + 1); // sparse: 64 MiB + 2 bytes, nothing allocated
            out.put('{');
        }
        try {
            core::Project::load(file);
            QFAIL("accepted a 64 MiB project");
        } catch (const core::Error &e) {
            QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
            QVERIFY2(QString(e.what()).contains("64.0 MiB, more than the 64.0 MiB"), e.what());
        }
    }
};

QTEST_APPLESS_MAIN(TestProject)
#include "tst_project.moc"
