#include "tests/support/redis_server.h"

#include <QElapsedTimer>
#include <QStandardPaths>
#include <QThread>

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <stdexcept>

namespace kvwb::test {

namespace {

int freePort()
{
    // Bind port 0 on loopback, read the port the kernel chose, release it.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
        port = ntohs(a.sin_port);
    ::close(fd);
    return port;
}

} // namespace

RedisServer::RedisServer(QStringList extraArgs) : m_extra(std::move(extraArgs)) {}

RedisServer::~RedisServer()
{
    kill();
}

bool RedisServer::start()
{
    const QString exe = QStandardPaths::findExecutable("redis-server");
    if (exe.isEmpty()) {
        m_error = "redis-server is not installed (packaging/setup.sh installs it)";
        return false;
    }
    for (int attempt = 0; attempt < 5; ++attempt) {
        if (m_port == 0 || attempt > 0)
            m_port = freePort();
        m_proc = std::make_unique<QProcess>();
        m_proc->setProcessChannelMode(QProcess::MergedChannels);
        m_proc->setWorkingDirectory(m_dir.path());
        QStringList args = {"--port",
                            QString::number(m_port),
                            "--bind",
                            "127.0.0.1",
                            "--save",
                            "",
                            "--appendonly",
                            "no",
                            "--daemonize",
                            "no",
                            "--dir",
                            m_dir.path(),
                            "--protected-mode",
                            "yes"};
        args += m_extra;
        m_proc->start(exe, args);
        if (!m_proc->waitForStarted(5000)) {
            m_error = "redis-server did not start: " + m_proc->errorString();
            return false;
        }
        QElapsedTimer t;
        t.start();
        while (t.elapsed() < 5000 && m_proc->state() == QProcess::Running) {
            if (cli({"PING"}).trimmed() == "PONG")
                return true;
            QThread::msleep(20);
        }
        m_proc->waitForFinished(100);
        m_error = "redis-server on port " + QString::number(m_port) +
                  " did not answer: " + QString::fromUtf8(m_proc->readAll()).left(400);
        m_proc->kill();
        m_proc->waitForFinished(2000);
    }
    return false;
}

void RedisServer::kill()
{
    if (m_proc && m_proc->state() != QProcess::NotRunning) {
        m_proc->kill();
        m_proc->waitForFinished(5000);
    }
}

void RedisServer::stop()
{
    if (m_proc && m_proc->state() != QProcess::NotRunning) {
        m_proc->terminate();
        if (!m_proc->waitForFinished(5000)) {
            m_proc->kill();
            m_proc->waitForFinished(5000);
        }
    }
}

QByteArray RedisServer::cli(const QStringList &args) const
{
    QProcess p;
    p.start(QStandardPaths::findExecutable("redis-cli"),
            QStringList{"-h", "127.0.0.1", "-p", QString::number(m_port)} + args);
    if (!p.waitForFinished(5000)) {
        p.kill();
        p.waitForFinished(1000);
        return {};
    }
    return p.readAllStandardOutput();
}

namespace {

std::unique_ptr<redisContext, void (*)(redisContext *)> connectTo(int port)
{
    std::unique_ptr<redisContext, void (*)(redisContext *)> c(redisConnect("127.0.0.1", port), &redisFree);
    if (!c || c->err)
        throw std::runtime_error("cannot connect to the test's redis-server");
    return c;
}

} // namespace

std::string RedisServer::getBytes(const std::string &key) const
{
    auto c = connectTo(m_port);
    auto *r = static_cast<redisReply *>(redisCommand(c.get(), "GET %b", key.data(), key.size()));
    std::string out;
    if (r && r->type == REDIS_REPLY_STRING)
        out.assign(r->str, r->len);
    freeReplyObject(r);
    return out;
}

void RedisServer::setBytes(const std::string &key, const std::string &value) const
{
    auto c = connectTo(m_port);
    auto *r = static_cast<redisReply *>(
        redisCommand(c.get(), "SET %b %b", key.data(), key.size(), value.data(), value.size()));
    freeReplyObject(r);
}

} // namespace kvwb::test
