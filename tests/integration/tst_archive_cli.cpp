// `kvwb archive export|import|show` end to end on the demo project: the archive round-trips, the
// models are named and remapped, refusals are one line with their exit code.
#include "core/settings/project.h"
#include "tests/support/kvwb_process.h"
#include "tests/support/test_paths.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>

using kvwb::test::runKvwb;
namespace fs = std::filesystem;

class TestArchiveCli : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void exportShowImport()
    {
        QTemporaryDir dir;
        const fs::path demo = kvwb::test::sourceDir() / "projects" / "demo";
        // The demo project on "machine one", with model B in a folder that will not travel.
        const fs::path one = fs::path(dir.path().toStdString()) / "one";
        fs::create_directories(one);
        fs::copy(demo / "models" / "b", one / "b", fs::copy_options::recursive);
        kvwb::core::Project p = kvwb::core::Project::load(demo / "demo.kvwb").resolved(demo / "demo.kvwb");
        p.modelB.path = one / "b";
        p.save(one / "demo.kvwb");
        const QString zip = dir.filePath("run.zip");

        auto r = runKvwb({"archive", "export", QString::fromStdString((one / "demo.kvwb").string())});
        QCOMPARE(r.exitCode, 2);
        QVERIFY(r.err.contains("--out is required"));
        r = runKvwb(
            {"archive", "export", QString::fromStdString((one / "demo.kvwb").string()), "--out", zip});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(r.out.contains("run/demo.kvwb"));
        QVERIFY(r.out.contains("run/data/demo.jsonl")); // the demo's workload travels with it
        QVERIFY(r.out.contains(
            QString("model b: %1").arg(QString::fromStdString((one / "b").string())).toUtf8()));
        // an existing archive needs --force
        r = runKvwb(
            {"archive", "export", QString::fromStdString((one / "demo.kvwb").string()), "--out", zip});
        QCOMPARE(r.exitCode, 1);
        QVERIFY(r.err.contains("--force"));

        r = runKvwb({"archive", "show", zip});
        QCOMPARE(r.exitCode, 0);
        QVERIFY(r.out.contains("project run/demo.kvwb"));
        QVERIFY(r.out.contains("model embedder:")); // the Replay step's embedding model, by path

        fs::remove_all(one);
        const QString into = dir.filePath("two");
        r = runKvwb({"archive", "import", zip, "--into", into, "--json"});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonObject j = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(j["project"].toString(), into + "/run/demo.kvwb");
        QCOMPARE(j["missing_models"].toObject().keys(), QStringList{"b"});
        const auto q = kvwb::core::Project::load((into + "/run/demo.kvwb").toStdString());
        QCOMPARE(q.workloads.at(0), fs::path("data/demo.jsonl")); // relative to the project, inside the run

        // a remap on import; the folder must be new or empty
        r = runKvwb({"archive", "import", zip, "--into", into});
        QCOMPARE(r.exitCode, 1);
        QVERIFY(r.err.contains("--into"));
        const QString three = dir.filePath("three");
        r = runKvwb({"archive", "import", zip, "--into", three, "--model-b",
                     QString::fromStdString((demo / "models" / "b").string())});
        QVERIFY2(r.exitCode == 0, r.err.constData());
        QVERIFY(!r.out.contains("is not at"));
        QCOMPARE(kvwb::core::Project::load((three + "/run/demo.kvwb").toStdString()).modelB.path,
                 demo / "models" / "b");

        r = runKvwb({"archive", "import", dir.filePath("nothing.zip"), "--into", dir.filePath("four")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY(r.err.contains("nothing.zip: not a file"));
        QVERIFY(!QFileInfo::exists(dir.filePath("four")));
        r = runKvwb({"archive", "unpack"});
        QCOMPARE(r.exitCode, 2);
    }
};

QTEST_APPLESS_MAIN(TestArchiveCli)
#include "tst_archive_cli.moc"
