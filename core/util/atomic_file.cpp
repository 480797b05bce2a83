#include "core/util/atomic_file.h"

#include "core/util/error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvwb::core {

namespace {

[[noreturn]] void fail(const std::filesystem::path &path, const char *what, int err)
{
    throw Error(ErrorCode::Io, path.string() + ": cannot " + what + ": " + std::strerror(err));
}

} // namespace

void refuseNonRegularTarget(const std::filesystem::path &path)
{
    struct stat st
    {
    };
    if (::stat(path.c_str(), &st) != 0)
        return; // nothing there (or a dangling link): a new file
    if (S_ISREG(st.st_mode))
        return;
    const char *kind = S_ISCHR(st.st_mode)    ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                                              : "not a regular file";
    throw Error(ErrorCode::Io, path.string() + ": is " + kind +
                                   "; kvwb writes its files whole and replaces only regular files, never "
                                   "a device, FIFO, socket or directory");
}

AtomicFile::AtomicFile(std::filesystem::path path) : m_path(std::move(path))
{
    refuseNonRegularTarget(m_path);
    m_tmpPath = m_path;
    m_tmpPath += ".tmp";
    m_fd = ::open(m_tmpPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (m_fd < 0)
        fail(m_path, "create file", errno);
}

AtomicFile::~AtomicFile()
{
    if (m_fd >= 0)
        ::close(m_fd);
    if (!m_committed)
        ::unlink(m_tmpPath.c_str());
}

void AtomicFile::write(std::span<const std::byte> data)
{
    const std::byte *p = data.data();
    size_t left = data.size();
    while (left > 0) {
        const ssize_t n = ::write(m_fd, p, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fail(m_path, "write", errno);
        }
        p += n;
        left -= size_t(n);
    }
}

void AtomicFile::write(std::string_view text)
{
    write(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

void AtomicFile::commit()
{
    if (::fsync(m_fd) != 0)
        fail(m_path, "fsync", errno);
    const int fd = m_fd;
    m_fd = -1;
    if (::close(fd) != 0)
        fail(m_path, "close", errno);
    refuseNonRegularTarget(m_path); // it may have appeared while the file was written
    if (std::rename(m_tmpPath.c_str(), m_path.c_str()) != 0)
        fail(m_path, "rename temporary file into place", errno);
    m_committed = true;
    // Make the rename itself durable; failure here is not worth an error (the data is complete).
    const std::filesystem::path dir = m_path.has_parent_path() ? m_path.parent_path() : ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

TempPathGuard::~TempPathGuard()
{
    if (!m_keep) {
        std::error_code ignored;
        std::filesystem::remove_all(m_path, ignored);
    }
}

void syncAndRename(const std::filesystem::path &from, const std::filesystem::path &to,
                   const std::string &what, bool syncToDisk)
{
    refuseNonRegularTarget(to);
    if (syncToDisk) {
        const int fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || ::fsync(fd) != 0) {
            const int err = errno;
            if (fd >= 0)
                ::close(fd);
            throw Error(ErrorCode::Io, what + ": cannot sync " + from.string() + ": " + std::strerror(err));
        }
        ::close(fd);
    }
    if (std::rename(from.c_str(), to.c_str()) != 0)
        throw Error(ErrorCode::Io,
                    what + ": cannot rename " + from.string() + " into place: " + std::strerror(errno));
}

void writeFileAtomic(const std::filesystem::path &path, std::string_view contents)
{
    AtomicFile f(path);
    f.write(contents);
    f.commit();
}

void checkWritableOutput(const std::filesystem::path &path, const std::string &flag)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto fail = [&](const std::string &why) {
        throw Error(ErrorCode::Io, path.string() + " (" + flag + "): cannot be written: " + why);
    };
    if (fs::exists(path, ec)) {
        if (!fs::is_regular_file(path, ec))
            fail("not a regular file");
        if (::access(path.c_str(), W_OK) != 0)
            fail(std::strerror(errno));
        return;
    }
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    if (!fs::is_directory(dir, ec))
        fail("no directory " + dir.string());
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
        fail(dir.string() + ": " + std::strerror(errno));
}

namespace {

const char *nonRegularKind(const struct stat &st)
{
    return S_ISCHR(st.st_mode)    ? "a character device"
           : S_ISBLK(st.st_mode)  ? "a block device"
           : S_ISFIFO(st.st_mode) ? "a FIFO"
           : S_ISSOCK(st.st_mode) ? "a socket"
           : S_ISDIR(st.st_mode)  ? "a directory"
                                  : "not a regular file";
}

[[noreturn]] void refuseOutput(const std::filesystem::path &path, const std::string &flag,
                               const std::string &why)
{
    throw Error(ErrorCode::InvalidArgument, path.string() + " (" + flag + "): " + why);
}

// The parent of a new output must be a writable directory.
void checkNewOutputParent(const std::filesystem::path &path, const std::string &flag)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    if (!fs::is_directory(dir, ec))
        refuseOutput(path, flag, "cannot be written: no directory " + dir.string());
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
        refuseOutput(path, flag, "cannot be written: " + dir.string() + ": " + std::strerror(errno));
}

} // namespace

void claimOutputFile(const std::filesystem::path &path, const std::string &flag, bool force)
{
    if (path.empty())
        throw Error(ErrorCode::InvalidArgument, flag + ": an empty path");
    struct stat st
    {
    };
    if (::stat(path.c_str(), &st) != 0) {
        checkNewOutputParent(path, flag);
        return;
    }
    if (!S_ISREG(st.st_mode))
        refuseOutput(path, flag,
                     std::string("is ") + nonRegularKind(st) +
                         "; kvwb replaces only regular files, never a device, FIFO, socket or directory");
    if (!force)
        refuseOutput(path, flag, "exists; pass --force to replace it");
    if (::access(path.c_str(), W_OK) != 0)
        refuseOutput(path, flag, std::string("cannot be written: ") + std::strerror(errno));
}

void claimOutputDirectory(const std::filesystem::path &dir, const std::string &flag, bool force)
{
    namespace fs = std::filesystem;
    if (dir.empty())
        throw Error(ErrorCode::InvalidArgument, flag + ": an empty path");
    struct stat st
    {
    };
    if (::stat(dir.c_str(), &st) != 0) {
        fs::path target = dir;
        if (target.filename().empty())
            target = target.parent_path(); // "out/" names "out"
        // Parents are created, so only an existing ancestor that is not a directory is refused.
        for (fs::path up = target.parent_path(); !up.empty(); up = up.parent_path()) {
            std::error_code ec;
            if (fs::exists(up, ec)) {
                if (!fs::is_directory(up, ec))
                    refuseOutput(dir, flag, up.string() + " is not a directory");
                break;
            }
            if (up == up.parent_path())
                break;
        }
        return;
    }
    if (!S_ISDIR(st.st_mode))
        refuseOutput(dir, flag,
                     std::string("is ") + (S_ISREG(st.st_mode) ? "a file" : nonRegularKind(st)) +
                         ", not a directory");
    std::error_code ec;
    if (fs::is_empty(dir, ec) && !ec)
        return;
    if (!force)
        refuseOutput(dir, flag, "exists and is not empty; pass --force to replace it");
    if (!fs::exists(dir / kOutputMarker, ec))
        refuseOutput(dir, flag,
                     std::string("holds files kvwb did not write (no ") + kOutputMarker +
                         "); kvwb replaces only directories it wrote: choose another path");
}

void startOutputDirectory(const std::filesystem::path &dir)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(dir / kOutputMarker, ec)) // claimOutputDirectory let it through: ours, --force
        for (const auto &e : fs::directory_iterator(dir, ec))
            fs::remove_all(e.path(), ec);
    fs::create_directories(dir, ec);
    if (ec)
        throw Error(ErrorCode::Io, dir.string() + ": cannot create directory: " + ec.message());
    markOutputDirectory(dir);
}

void markOutputDirectory(const std::filesystem::path &dir)
{
    writeFileAtomic(dir / kOutputMarker,
                    "Written by kvwb; kvwb replaces this directory only with --force.\n");
}

void writeDirectoryAtomic(const std::filesystem::path &dir, const std::string &flag, bool force,
                          const std::function<void(const std::filesystem::path &tmp)> &write)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    claimOutputDirectory(dir, flag, force);
    const bool exists = fs::exists(dir, ec);
    fs::path target = dir;
    if (target.filename().empty())
        target = target.parent_path(); // "out/" names "out"
    const fs::path tmp = fs::path(target.string() + ".kvwb-tmp"),
                   old = fs::path(target.string() + ".kvwb-old");
    fs::remove_all(tmp, ec);
    if (target.has_parent_path())
        fs::create_directories(target.parent_path(), ec);
    if (!fs::create_directory(tmp, ec) || ec)
        throw Error(ErrorCode::Io, tmp.string() + ": cannot create directory: " + ec.message());
    try {
        write(tmp);
        markOutputDirectory(tmp);
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
    if (exists) {
        fs::remove_all(old, ec);
        fs::rename(target, old, ec);
        if (ec) {
            fs::remove_all(tmp, ec);
            throw Error(ErrorCode::Io,
                        target.string() + ": cannot move the old directory aside: " + ec.message());
        }
    }
    fs::rename(tmp, target, ec);
    if (ec) {
        const std::string why = ec.message();
        fs::remove_all(tmp, ec); // no complete copy left behind under the temporary name
        if (exists)
            fs::rename(old, target, ec); // put the old one back
        throw Error(ErrorCode::Io, target.string() + ": cannot move the new directory in place: " + why);
    }
    if (exists)
        fs::remove_all(old, ec);
}

} // namespace kvwb::core
