// The writers' rule for what is at their output path (core/util/atomic_file.h): a regular file is
// replaced whole; a FIFO, a directory, a character device or a symlink to one of them is refused by
// name and left as it was, with no temporary file left behind.
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

using namespace kvwb;
namespace fs = std::filesystem;

class TestAtomicFile : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void replacesARegularFileWhole()
    {
        QTemporaryDir tmp;
        const fs::path p = fs::path(tmp.path().toStdString()) / "out.txt";
        core::writeFileAtomic(p, "first");
        core::writeFileAtomic(p, "second");
        QCOMPARE(test::readFile(p), std::string("second"));
        QVERIFY(!fs::exists(fs::path(p.string() + ".tmp")));
    }

    void refusesWhatIsNotARegularFile()
    {
        QTemporaryDir tmp;
        const fs::path root = tmp.path().toStdString();
        const fs::path fifo = root / "fifo", dir = root / "dir", link = root / "link-to-fifo";
        QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
        fs::create_directory(dir);
        fs::create_symlink(fifo, link);
        const std::vector<std::pair<fs::path, QString>> cases = {{fifo, "is a FIFO"},
                                                                 {dir, "is a directory"},
                                                                 {link, "is a FIFO"},
                                                                 {"/dev/null", "is a character device"}};
        for (const auto &c : cases) {
            const fs::path path = c.first; // a structured binding cannot be captured (clang 14)
            const QString what = c.second;
            const auto e = test::expectError([&] { core::writeFileAtomic(path, "data"); });
            QCOMPARE(e.code(), core::ErrorCode::Io);
            QVERIFY2(QString(e.what()).startsWith(QString::fromStdString(path.string()) + ": " + what),
                     e.what());
            QVERIFY(!fs::exists(fs::path(path.string() + ".tmp")));
        }
        QVERIFY(fs::is_fifo(fifo));
        QVERIFY(fs::is_directory(dir) && fs::is_empty(dir));
        QVERIFY(fs::is_symlink(link) && fs::is_fifo(link));
        QVERIFY(fs::is_character_file("/dev/null"));
        // syncAndRename (the HDF5 writers' commit) follows the same rule
        core::writeFileAtomic(root / "made.h5", "x");
        const auto e =
            test::expectError([&] { core::syncAndRename(root / "made.h5", fifo, "the file", false); });
        QVERIFY2(QString(e.what()).contains("is a FIFO"), e.what());
        QVERIFY(fs::is_fifo(fifo));
        QVERIFY(fs::exists(root / "made.h5"));
    }
};

QTEST_GUILESS_MAIN(TestAtomicFile)
#include "tst_atomic_file.moc"
