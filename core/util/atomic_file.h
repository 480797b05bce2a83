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

// Checks, before any work, that a file a command updates in place (an experiment file that capture
// appends to, a ledger stored into an experiment) can be written: an existing path must be a
// writable regular file; a new one needs a writable directory. Error(Io) naming the path and flag.
void checkWritableOutput(const std::filesystem::path &path, const std::string &flag);

// The one rule for what a command may do to what is already at an output it writes whole, checked
// before any work (every writing subcommand calls one of these two; the tests run the rule against
// every such option):
// - nothing there: the parent directory must exist and be writable;
// - a device, FIFO or socket: refused, never replaced;
// - a regular file: replaced only when `force` (the command's --force), else refused naming it;
// - a directory (claimOutputDirectory only; refused for a file): an empty one is used; one with
//   files is replaced only when `force` and only when kvwb wrote it (it holds kOutputMarker).
// Refusals are Error(InvalidArgument) naming the path and `flag`; an empty path is refused too.
inline constexpr const char *kOutputMarker = ".kvwb-output";
void claimOutputFile(const std::filesystem::path &path, const std::string &flag, bool force);
void claimOutputDirectory(const std::filesystem::path &dir, const std::string &flag, bool force);
// Writes kOutputMarker into dir.
void markOutputDirectory(const std::filesystem::path &dir);
// A directory kvwb fills file by file (a report, a ledger directory), after claimOutputDirectory:
// created with its parents, emptied when it held an earlier output (no stale file of that one
// survives), and marked. Error(Io) naming it.
void startOutputDirectory(const std::filesystem::path &dir);

// Writes a whole output directory through a temporary sibling: `write` fills a fresh directory
// (dir + ".kvwb-tmp"), which then takes dir's place, so a failure or a kill leaves dir as it was and
// no file of an old dir survives in the new one. What is at dir must pass claimOutputDirectory (dir
// named by `flag`); the new directory holds kOutputMarker.
void writeDirectoryAtomic(const std::filesystem::path &dir, const std::string &flag, bool force,
                          const std::function<void(const std::filesystem::path &tmp)> &write);

} // namespace kvwb::core
