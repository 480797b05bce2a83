// Crash-safe file replacement: write to path + ".tmp", fsync, rename over path.
//
// A crash or error at any point leaves either the old file or the complete new one at `path`, never
// a half-written file. Single-threaded; one AtomicFile per output file. Every failure is an
// Error(Io) naming the final path.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string_view>

namespace kvwb::core {

// Every writer's rule for what is already at its output path: a regular file may be replaced; a
// device, FIFO, socket or directory never is (`--out /dev/null` must not turn the machine's
// /dev/null into a regular file). A symlink is judged by what it points to. Error(Io) naming the
// path and what is there. AtomicFile and syncAndRename check it before they create and again before
// they rename.
void refuseNonRegularTarget(const std::filesystem::path &path);

class AtomicFile
{
public:
    // Creates path + ".tmp" (truncating any stale one). Refuses a non-regular path (above).
    explicit AtomicFile(std::filesystem::path path);
    // Removes the temporary file unless commit() succeeded.
    ~AtomicFile();
    AtomicFile(const AtomicFile &) = delete;
    AtomicFile &operator=(const AtomicFile &) = delete;

    void write(std::span<const std::byte> data);
    void write(std::string_view text);
    // fsync, close, rename over the final path, fsync the directory.
    void commit();

private:
    std::filesystem::path m_path;
    std::filesystem::path m_tmpPath;
    int m_fd = -1;
    bool m_committed = false;
};

// Removes a temporary file (or directory) when destroyed, unless keep() was called: the clean-up
// of a build-then-rename that failed half-way.
class TempPathGuard
{
public:
    explicit TempPathGuard(std::filesystem::path path) : m_path(std::move(path)) {}
    ~TempPathGuard();
    TempPathGuard(const TempPathGuard &) = delete;
    TempPathGuard &operator=(const TempPathGuard &) = delete;
    void keep() noexcept { m_keep = true; }

private:
    std::filesystem::path m_path;
    bool m_keep = false;
};

// fsync of a finished file, then rename(from, to) (same directory): the commit of a file written
// under a temporary name by a library that does its own writes (HDF5). Error(Io) naming `what`
// (the file as the user knows it), the step and the system's reason.
void syncAndRename(const std::filesystem::path &from, const std::filesystem::path &to,
                   const std::string &what, bool syncToDisk);

// Convenience: the whole file in one call.
void writeFileAtomic(const std::filesystem::path &path, std::string_view contents);

// Checks, before any work, that an output named by `flag` can be written: an existing path must be
// a writable regular file; a new one needs a writable directory. Error(Io) naming the path and flag.
void checkWritableOutput(const std::filesystem::path &path, const std::string &flag);

// writeDirectoryAtomic's refusals, checked up front (before a long job that would write dir).
void checkDirectoryOutput(const std::filesystem::path &dir, bool force, const std::string &forceFlag);

// Writes a whole output directory through a temporary sibling: `write` fills a fresh directory
// (dir + ".kvwb-tmp"), which then takes dir's place, so a failure or a kill leaves dir as it was and
// no file of an old dir survives in the new one. An existing dir that is not empty is refused
// (Error(InvalidArgument) naming it and `forceFlag`) unless `force`.
void writeDirectoryAtomic(const std::filesystem::path &dir, bool force, const std::string &forceFlag,
                          const std::function<void(const std::filesystem::path &tmp)> &write);

} // namespace kvwb::core
