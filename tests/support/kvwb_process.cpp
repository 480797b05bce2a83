#include "tests/support/kvwb_process.h"

#include "tests/support/test_paths.h"

namespace kvwb::test {

KvwbRun runKvwb(const QStringList &args, int timeoutMs)
{
    QProcess p;
    p.start(QString::fromStdString(kvwbBinary().string()), args);
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
    return r;
}

} // namespace kvwb::test
