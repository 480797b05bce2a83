// Run archives (core/settings/run_archive.h): a project's run round-trips through one zip file to
// another folder with every file byte for byte, the models named by path and fingerprint, secrets
// and missing files left out and said so; hostile or damaged archives are refused in one line
// naming the entry, leaving no folder behind.
#include "core/settings/project.h"
#include "core/settings/run_archive.h"
#include "core/util/error.h"
#include "core/util/sha256.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"
#include "tests/support/tiny_experiment.h"

#include <QTemporaryDir>
#include <QTest>

#include <archive.h>
#include <archive_entry.h>

#include <filesystem>
#include <fstream>

using namespace kvwb;
using namespace kvwb::core;
namespace fs = std::filesystem;
using kvwb::test::expectError;

namespace {

void writeFile(const fs::path &p, const std::string &text)
{
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
}

std::string readFile(const fs::path &p)
{
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

struct Entry
{
    std::string name;
    std::string data;
    int type = AE_IFREG;
};

// A zip with these entries, in this order, written with libarchive as an attacker would.
void writeZip(const fs::path &path, const std::vector<Entry> &entries)
{
    archive *a = archive_write_new();
    archive_write_set_format_zip(a);
    QCOMPARE(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
    for (const Entry &e : entries) {
        archive_entry *x = archive_entry_new();
        archive_entry_set_pathname(x, e.name.c_str());
        archive_entry_set_filetype(x, unsigned(e.type));
        archive_entry_set_perm(x, 0644);
        if (e.type == AE_IFLNK)
            archive_entry_set_symlink(x, e.data.c_str());
        else
            archive_entry_set_size(x, la_int64_t(e.data.size()));
        archive_write_header(a, x);
        if (e.type == AE_IFREG)
            archive_write_data(a, e.data.data(), e.data.size());
        archive_entry_free(x);
    }
    archive_write_close(a);
    archive_write_free(a);
}

std::string manifestFor(const std::vector<Entry> &files, const std::string &project = "run/p.kvwb")
{
    ArchiveManifest m;
    m.project = project;
    m.createdUtc = "2026-01-01T00:00:00Z";
    m.appVersion = "test";
    for (const Entry &f : files)
        m.files.push_back({f.name, f.data.size(), sha256Hex(std::string_view(f.data))});
    return m.toJson();
}

const std::string kProject =
    R"({"schema": "kvwb-project/1", "name": "p", "models": {"a": {"path": ""}, "b": {"path": ""}}})";

// f throws Error(code) whose message contains `part`.
template <typename F> void expectFailure(ErrorCode code, const std::string &part, F &&f)
{
    const Error e = expectError(std::forward<F>(f));
    QVERIFY2(e.code() == code, e.what());
    QVERIFY2(std::string(e.what()).find(part) != std::string::npos, e.what());
}

} // namespace

class TestRunArchive : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void roundTrip();
    void refusesWhatIsThere();
    void hostileArchives_data();
    void hostileArchives();
};

// A run on "machine one" (the models in its folder) is exported and imported into a new folder:
// the project there opens its own copies of the experiment and the data files, names the models
// where they were, and says which of them are missing; --model-a style remaps rewrite the path.
void TestRunArchive::roundTrip()
{
    QTemporaryDir dir;
    const fs::path one = fs::path(dir.path().toStdString()) / "machine-one";
    fs::create_directories(one / "models" / "a");
    fs::create_directories(one / "models" / "b");
    const fs::path experiment = kvwb::test::makeTinyExperiment(dir);
    fs::rename(experiment, one / "run.h5");
    writeFile(one / "prompts" / "set.txt", "first prompt\nsecond prompt\n");
    writeFile(one / "other" / "set.txt", "a second file of the same name\n");
    writeFile(one / "w.jsonl", "{\"id\":0}\n");
    Project p;
    p.name = "round trip";
    p.modelA.path = one / "models" / "a";
    p.modelB.path = one / "models" / "b";
    p.experiment = one / "run.h5";
    p.promptSets = {one / "prompts" / "set.txt", one / "other" / "set.txt"};
    p.workloads = {one / "w.jsonl", one / "prompts" / ".." / "w.jsonl"}; // the same file: archived once
    p.knowledge.graph = one / "gone.kvkg";                               // named, but not there
    const fs::path projectFile = one / "p.kvwb";
    p.save(projectFile);

    const fs::path zip = fs::path(dir.path().toStdString()) / "run.zip";
    const ArchiveManifest m = exportRunArchive(projectFile, zip);
    QVERIFY(fs::exists(zip));
    QVERIFY(!fs::exists(zip.string() + ".tmp"));
    QCOMPARE(m.project, std::string("run/p.kvwb"));
    std::vector<std::string> paths;
    for (const auto &f : m.files)
        paths.push_back(f.path);
    QCOMPARE(paths, (std::vector<std::string>{"run/p.kvwb", "run/run.h5", "run/data/set.txt",
                                              "run/data/set-2.txt", "run/data/w.jsonl"}));
    QCOMPARE(m.models.size(), size_t(2));
    QCOMPARE(m.models[0].role, std::string("a"));
    QCOMPARE(m.models[0].path, (one / "models" / "a").string());
    QCOMPARE(m.models[0].weightsSha256, std::string(64, 'a')); // the experiment file's record
    QCOMPARE(m.models[1].weightsSha256, std::string(64, 'b'));
    QCOMPARE(m.leftOut.size(), size_t(1));
    QVERIFY(m.leftOut[0].find("gone.kvkg: not found") != std::string::npos);
    // The manifest reads back as written.
    QCOMPARE(readArchiveManifest(zip).toJson(), m.toJson());

    // Same machine: the models are where the project says.
    const fs::path two = fs::path(dir.path().toStdString()) / "machine-two";
    const ImportedRun run = importRunArchive(zip, two);
    QCOMPARE(run.project, two / "run" / "p.kvwb");
    QVERIFY(run.missingModels.empty());
    const Project q = Project::load(run.project).resolved(run.project);
    QCOMPARE(q.name, std::string("round trip"));
    QCOMPARE(*q.experiment, two / "run" / "run.h5");
    QCOMPARE(readFile(*q.experiment), readFile(one / "run.h5"));
    QCOMPARE(q.promptSets.size(), size_t(2));
    QCOMPARE(readFile(q.promptSets[0]), readFile(one / "prompts" / "set.txt"));
    QCOMPARE(readFile(q.promptSets[1]), readFile(one / "other" / "set.txt"));
    QCOMPARE(q.workloads,
             (std::vector<fs::path>{two / "run" / "data" / "w.jsonl", two / "run" / "data" / "w.jsonl"}));
    QCOMPARE(q.modelA.path, one / "models" / "a");
    QCOMPARE(q.knowledge.graph, one / "gone.kvkg"); // left out: still named, where it was

    // Another machine: model A is not there; a remap points B elsewhere.
    fs::remove_all(one / "models" / "a");
    fs::create_directories(dir.path().toStdString() + "/here/b");
    const fs::path three = fs::path(dir.path().toStdString()) / "machine-three";
    const ImportedRun moved =
        importRunArchive(zip, three, {{"b", fs::path(dir.path().toStdString()) / "here" / "b"}});
    QCOMPARE(moved.missingModels.size(), size_t(1));
    QCOMPARE(moved.missingModels.at("a"), (one / "models" / "a").string());
    const Project r = Project::load(moved.project).resolved(moved.project);
    QCOMPARE(r.modelB.path, fs::path(dir.path().toStdString()) / "here" / "b");
    expectFailure(ErrorCode::InvalidArgument, "role 'c'", [&] {
        importRunArchive(zip, three / "x", {{"c", "/x"}});
    });
}

// Nothing is replaced without being asked: an existing archive needs replace, and an import goes
// into a new or empty folder only.
void TestRunArchive::refusesWhatIsThere()
{
    QTemporaryDir dir;
    const fs::path root = dir.path().toStdString();
    writeFile(root / "p" / "p.kvwb", kProject);
    const fs::path zip = root / "run.zip";
    writeFile(zip, "the user's file");
    expectFailure(ErrorCode::InvalidArgument, "--force",
                  [&] { exportRunArchive(root / "p" / "p.kvwb", zip); });
    QCOMPARE(readFile(zip), std::string("the user's file"));
    exportRunArchive(root / "p" / "p.kvwb", zip, true);
    QCOMPARE(readArchiveManifest(zip).files.size(), size_t(1));

    writeFile(root / "full" / "notes.txt", "the user's notes");
    expectFailure(ErrorCode::InvalidArgument, "--into", [&] { importRunArchive(zip, root / "full"); });
    QCOMPARE(readFile(root / "full" / "notes.txt"), std::string("the user's notes"));
    fs::create_directories(root / "empty");
    QCOMPARE(importRunArchive(zip, root / "empty").project, root / "empty" / "run" / "p.kvwb");
}

void TestRunArchive::hostileArchives_data()
{
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("message");
    QTest::newRow("not a zip") << "garbage"
                               << "not a run archive";
    QTest::newRow("manifest not first") << "late manifest"
                                        << "its first entry is 'run/p.kvwb'";
    QTest::newRow("parent path") << "dotdot"
                                 << "is not a plain path inside run/";
    QTest::newRow("absolute path") << "absolute"
                                   << "is not a plain path inside run/";
    QTest::newRow("entry not listed") << "extra"
                                      << "entry 'run/evil.sh' is not in the manifest";
    QTest::newRow("entry twice") << "twice"
                                 << "is not in the manifest (or appears twice)";
    QTest::newRow("damaged") << "damaged"
                             << "does not match its SHA-256";
    QTest::newRow("longer") << "longer"
                            << "is longer than the manifest's";
    QTest::newRow("missing") << "missing"
                             << "'run/data/x.txt' is in the manifest but not in the archive";
    QTest::newRow("symlink") << "symlink"
                             << "is not a regular file";
    QTest::newRow("newer schema") << "schema"
                                  << "is not kvwb-archive/1";
    QTest::newRow("project not listed") << "no project"
                                        << "is not a listed .kvwb file";
    QTest::newRow("truncated") << "truncated"
                               << "run.zip";
}

// Each is refused with Error(Format) naming the archive and what is wrong; the target folder is not
// created and no temporary folder is left beside it.
void TestRunArchive::hostileArchives()
{
    QFETCH(QString, kind);
    QFETCH(QString, message);
    QTemporaryDir dir;
    const fs::path root = dir.path().toStdString();
    const fs::path zip = root / "run.zip";
    const Entry project{"run/p.kvwb", kProject};
    const Entry data{"run/data/x.txt", "some data\n"};
    const std::string good = manifestFor({project, data});
    const std::string k = kind.toStdString();
    if (k == "garbage")
        writeFile(zip, std::string(4096, 'z'));
    else if (k == "late manifest")
        writeZip(zip, {project, {kArchiveManifestName, good}, data});
    else if (k == "dotdot")
        writeZip(zip, {{kArchiveManifestName, manifestFor({project, {"run/../evil", "x"}})}, project});
    else if (k == "absolute")
        writeZip(zip, {{kArchiveManifestName, manifestFor({project, {"/etc/evil", "x"}})}, project});
    else if (k == "extra")
        writeZip(zip, {{kArchiveManifestName, good}, project, data, {"run/evil.sh", "rm -rf ~"}});
    else if (k == "twice")
        writeZip(zip, {{kArchiveManifestName, good}, project, data, data});
    else if (k == "damaged")
        writeZip(zip, {{kArchiveManifestName, good}, project, {data.name, "some dat4\n"}});
    else if (k == "longer")
        writeZip(zip, {{kArchiveManifestName, good}, project, {data.name, data.data + "more"}});
    else if (k == "missing")
        writeZip(zip, {{kArchiveManifestName, good}, project});
    else if (k == "symlink")
        writeZip(zip, {{kArchiveManifestName, good}, project, {data.name, "/etc/passwd", AE_IFLNK}});
    else if (k == "schema") {
        std::string m = good;
        m.replace(m.find("kvwb-archive/1"), 14, "kvwb-archive/9");
        writeZip(zip, {{kArchiveManifestName, m}, project, data});
    } else if (k == "no project")
        writeZip(zip, {{kArchiveManifestName, manifestFor({data}, "run/p.kvwb")}, data});
    else if (k == "truncated") {
        writeZip(zip, {{kArchiveManifestName, good}, project, {data.name, std::string(200000, 'd')}});
        const std::string bytes = readFile(zip);
        writeFile(zip, bytes.substr(0, bytes.size() / 2));
    }
    const fs::path into = root / "into";
    try {
        importRunArchive(zip, into);
        QFAIL("imported");
    } catch (const Error &e) {
        QVERIFY2(e.code() == ErrorCode::Format || e.code() == ErrorCode::Io, e.what());
        QVERIFY2(std::string(e.what()).find(message.toStdString()) != std::string::npos, e.what());
        QVERIFY2(std::string(e.what()).find("run.zip") != std::string::npos, e.what());
    }
    QVERIFY(!fs::exists(into));
    for (const auto &x : fs::directory_iterator(root))
        QVERIFY2(x.path().filename().string().rfind(".kvwb-import", 0) != 0, x.path().c_str());
    QVERIFY(!fs::exists(root / "evil") && !fs::exists("/etc/evil"));
}

QTEST_APPLESS_MAIN(TestRunArchive)
#include "tst_run_archive.moc"
