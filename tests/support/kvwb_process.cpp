#include "tests/support/kvwb_process.h"

#include "tests/support/test_paths.h"

#include <QtTest>

#include <sys/resource.h>

namespace kvwb::test {

namespace {

KvwbRun run(QProcess &p, const std::filesystem::path &program, const QStringList &args, int timeoutMs)
{
    p.start(QString::fromStdString(program.string()), args);
    KvwbRun r;
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        return r;
    }
    r.status = p.exitStatus();
    r.exitCode = r.status == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    // A subcommand that reads an option its parser never defined gets Qt's warning, and the
    // option silently reads as unset: a bug in that subcommand, whatever the test checks.
    if (r.err.contains("QCommandLineParser: option not defined"))
        QTest::qFail(qPrintable("kvwb " + args.join(' ') +
                                " read an undefined option: " + QString::fromUtf8(r.err).section('\n', 0, 0)),
                     __FILE__, __LINE__);
    return r;
}

} // namespace

KvwbRun runKvwb(const QStringList &args, int timeoutMs)
{
    QProcess p;
    return run(p, kvwbBinary(), args, timeoutMs);
}

KvwbRun runProgram(const std::filesystem::path &program, const QStringList &args, int timeoutMs)
{
    QProcess p;
    return run(p, program, args, timeoutMs);
}

KvwbRun runKvwbLimited(const QStringList &args, int64_t addressSpaceBytes, int cpuSeconds, int timeoutMs)
{
    QProcess p;
    p.setChildProcessModifier([addressSpaceBytes, cpuSeconds] {
        const rlimit as{rlim_t(addressSpaceBytes), rlim_t(addressSpaceBytes)};
        setrlimit(RLIMIT_AS, &as);
        const rlimit cpu{rlim_t(cpuSeconds), rlim_t(cpuSeconds)};
        setrlimit(RLIMIT_CPU, &cpu);
    });
    return run(p, kvwbBinary(), args, timeoutMs);
}

} // namespace kvwb::test
