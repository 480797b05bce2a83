// Runs the built kvwb executable (KVWB_BINARY, the front end) or another program for integration
// tests and captures its result.
#pragma once

#include <QByteArray>
#include <QProcess>
#include <QStringList>

#include <cstdint>
#include <filesystem>

namespace kvwb::test {

struct KvwbRun
{
    int exitCode = -1; // -1 when it crashed or timed out
    QProcess::ExitStatus status = QProcess::CrashExit;
    QByteArray out;
    QByteArray err;
};

KvwbRun runKvwb(const QStringList &args, int timeoutMs = 300000);
// The same for another executable, e.g. kvwb-engine run directly or a copy of kvwb.
KvwbRun runProgram(const std::filesystem::path &program, const QStringList &args, int timeoutMs = 300000);

// The same under setrlimit: at most addressSpaceBytes of virtual memory (RLIMIT_AS) and cpuSeconds
// of CPU time (RLIMIT_CPU), so a run that would allocate or loop without bound dies (exitCode -1)
// instead of taking the machine with it.
KvwbRun runKvwbLimited(const QStringList &args, int64_t addressSpaceBytes, int cpuSeconds,
                       int timeoutMs = 60000);

} // namespace kvwb::test
