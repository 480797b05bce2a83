// Project files: round trip with relative paths, unknown sections preserved, and errors that name
// the field.
#include "core/error.h"
#include "core/project.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>

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
            "models": {"a": {"path": "models/a"}, "b": {"path": "models/b", "dtype": "bf16"}},
            "workloads": ["workloads/w.jsonl"], "corpus": "corpus.jsonl",
            "tiers": {"semantic": {"threshold": 0.8}}})");
        const auto p = core::Project::load(dir / "p.kvwb");
        QCOMPARE(p.name, std::string("demo"));
        QCOMPARE(p.modelA.path, fs::path("models/a"));
        QCOMPARE(p.modelA.device, std::string("cpu"));
        QCOMPARE(p.modelB.dtype, std::string("bf16"));
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
};

QTEST_APPLESS_MAIN(TestProject)
#include "tst_project.moc"
