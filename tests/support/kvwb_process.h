// Runs the built kvwb executable (KVWB_BINARY) for integration tests and captures its result.
#pragma once

#include <QByteArray>
#include <QProcess>
#include <QStringList>

namespace kvwb::test {

struct KvwbRun
{
    int exitCode = -1; // -1 when it crashed or timed out
    QProcess::ExitStatus status = QProcess::CrashExit;
    QByteArray out;
    QByteArray err;
};

KvwbRun runKvwb(const QStringList &args, int timeoutMs = 300000);

} // namespace kvwb::test
