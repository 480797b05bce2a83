// A redis-server of the test's own (Debian's redis-server, installed by packaging/setup.sh) on a free
// loopback port, without persistence, in a scratch folder; stopped (or killed) by the test or on
// destruction. Tests of the Redis store and of fleet replays start one each, so they run in parallel
// and never touch a server they did not start.
#pragma once

#include <QProcess>
#include <QStringList>
#include <QTemporaryDir>

#include <memory>
#include <string>

namespace kvwb::test {

class RedisServer
{
public:
    // extraArgs e.g. {"--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"}. start() fails the
    // calling test (QFAIL-style message through the returned false + error()) when redis-server is
    // missing or does not answer within 5 s.
    explicit RedisServer(QStringList extraArgs = {});
    ~RedisServer();
    bool start(); // on a free port the first time, on the same port after kill()/stop()
    void kill();  // SIGKILL, as a crash would
    void stop();  // SIGTERM and wait
    int port() const { return m_port; }
    std::string url() const { return "redis://127.0.0.1:" + std::to_string(m_port); }
    QString error() const { return m_error; }
    // One command through redis-cli (e.g. {"CONFIG", "SET", "maxmemory", "1mb"}); its stdout.
    QByteArray cli(const QStringList &args) const;
    // Binary-safe GET and SET of one key (hiredis), for tests that rewrite stored payloads; GET of
    // an absent key gives "".
    std::string getBytes(const std::string &key) const;
    void setBytes(const std::string &key, const std::string &value) const;

private:
    QStringList m_extra;
    QTemporaryDir m_dir;
    std::unique_ptr<QProcess> m_proc;
    int m_port = 0;
    QString m_error;
};

} // namespace kvwb::test
