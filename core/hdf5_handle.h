// RAII ownership of HDF5 identifiers (hid_t), the seam where HDF5 status codes become
// kvwb::core::Error, and the small helpers every kvwb HDF5 file uses (opening, the writer lock,
// attributes, groups and datasets with errors naming the file and object), shared by the
// experiment file and the converter store.
//
// Internal to core/: only .cpp files include this header (HDF5 is linked PRIVATE to kvwb_core), so
// no public header exposes hid_t. One Handle owns one identifier and closes it with the matching
// H5*close function when destroyed; handles are move-only, like ggml-cpp.h's unique_ptr deleters.
//
// Thread-safety: none. Debian's HDF5 is built without its thread-safety option, so every HDF5 call
// in the process must come from one thread at a time (in kvwb: the engine thread).
#pragma once

#include "core/error.h"

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace kvwb::core::h5 {

template <herr_t (*Close)(hid_t)> class Handle
{
public:
    Handle() = default;
    explicit Handle(hid_t id) : m_id(id) {}
    ~Handle() { reset(); }
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    Handle(Handle &&other) noexcept : m_id(std::exchange(other.m_id, H5I_INVALID_HID)) {}
    Handle &operator=(Handle &&other) noexcept
    {
        if (this != &other) {
            reset();
            m_id = std::exchange(other.m_id, H5I_INVALID_HID);
        }
        return *this;
    }

    hid_t get() const noexcept { return m_id; }
    bool valid() const noexcept { return m_id >= 0; }
    explicit operator bool() const noexcept { return valid(); }

    // Closes now; returns the close status (negative on failure) so callers that must know
    // (H5Fclose flushes) can report it. Destructors ignore it.
    herr_t reset() noexcept
    {
        herr_t status = 0;
        if (m_id >= 0)
            status = Close(m_id);
        m_id = H5I_INVALID_HID;
        return status;
    }

private:
    hid_t m_id = H5I_INVALID_HID;
};

using File = Handle<H5Fclose>;
using Group = Handle<H5Gclose>;
using Dataset = Handle<H5Dclose>;
using Dataspace = Handle<H5Sclose>;
using Datatype = Handle<H5Tclose>;
using Attribute = Handle<H5Aclose>;
using PropList = Handle<H5Pclose>;

// Call before the first HDF5 call of every public operation (idempotent):
// - turns off HDF5's automatic printing of its error stack to stderr (we report errors ourselves);
// - on the first call in the process, asks HDF5 not to run its atexit clean-up. When a file's
//   close fails (a full disk), HDF5 1.10.8 leaves a dangling file id that its atexit handler then
//   dereferences (SIGSEGV at exit). Our writers close their files explicitly and every committed
//   prompt is flushed already, so the atexit clean-up has nothing to save.
void prepareLibrary() noexcept;

// The most specific message on the current thread's HDF5 error stack (e.g. "unable to open file:
// name = 'x.h5', errno = 13, error message = 'Permission denied'"), or "" when the stack is empty.
std::string lastErrorMessage();

// Throws Error(code, what + ": " + lastErrorMessage()) when status is negative; returns status.
template <typename T> T check(T status, ErrorCode code, const std::string &what)
{
    if (status < 0) {
        std::string message = what;
        const std::string detail = lastErrorMessage();
        if (!detail.empty())
            message += " (HDF5: " + detail + ")";
        throw Error(code, message);
    }
    return status;
}

// ---- files ----

// File access properties of every kvwb HDF5 file: the 1.10 format (SWMR needs superblock v3 and
// extensible-array chunk indexes). recover adds what `h5clear -s` and `h5clear --increment` do for
// a file whose SWMR writer died: clear the "open for writing" flags and skip the end-of-file check.
PropList fileAccess(bool recover);
// Error(Io) for a missing or unreadable path, Error(Format) when it is not HDF5.
void checkReadable(const std::filesystem::path &path);
// Opens read-only, accepting a file whose writer is still running or was killed (plain open, then
// SWMR reader, then with recover's properties); never modifies the file.
File openForReading(const std::filesystem::path &path);
// The root's schema attribute, checked to be kExperimentSchema: Error(Format) when it is missing or
// unknown, Error(Unsupported) for a newer kvwb/N. name: the path, for messages.
std::string checkSchema(hid_t file, const std::string &name);
// H5Fflush, then (syncToDisk) fsync of the file's descriptor; Error(Io) naming name and stage.
void flushFile(hid_t file, const std::string &name, const char *stage, bool syncToDisk);

// One writer per file. HDF5's own guard (the superblock's "open for writing" flags) is exactly
// what crash recovery clears, so a second capture appending to a file that a running capture is
// writing would get through and interleave rows. An open-file-description lock (Linux OFD lock) on
// the whole file stops it. It is independent of the flock() HDF5 takes, so readers (kvwb, h5py
// with swmr=True) still open the file during a capture; unlike a classic POSIX record lock it is
// not dropped when HDF5 closes its own descriptor of the same file; the kernel releases it when
// the writer dies.
class WriterLock
{
public:
    WriterLock() = default;
    // Error(Io) when the file cannot be opened for writing or another writer holds the lock.
    static WriterLock acquire(const std::filesystem::path &path);
    WriterLock(WriterLock &&other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}
    WriterLock &operator=(WriterLock &&other) noexcept
    {
        if (this != &other) {
            release();
            m_fd = std::exchange(other.m_fd, -1);
        }
        return *this;
    }
    ~WriterLock() { release(); }
    void release() noexcept;

private:
    int m_fd = -1;
};

// ---- attributes ----

// Where an attribute or dataset lives, for error messages.
class Site
{
public:
    // file: the experiment's path for messages; object: the HDF5 path of the object at hand.
    Site(std::string file, std::string object) : m_file(std::move(file)), m_object(std::move(object)) {}
    std::string at(const std::string &what) const { return m_file + ": " + m_object + " " + what; }
    std::string attr(const char *name) const { return m_file + ": attribute " + name + " of " + m_object; }
    const std::string &object() const { return m_object; }
    const std::string &file() const { return m_file; }

private:
    std::string m_file;
    std::string m_object;
};

// Strings are variable-length UTF-8 (h5py returns str); integers int64; reals float64.
void writeAttr(hid_t obj, const Site &site, const char *name, const std::string &value);
void writeAttr(hid_t obj, const Site &site, const char *name, int64_t value);
void writeAttr(hid_t obj, const Site &site, const char *name, double value);
void writeAttr(hid_t obj, const Site &site, const char *name, const std::vector<int64_t> &values);
void writeAttr(hid_t obj, const Site &site, const char *name, const std::vector<std::string> &values);

// Error(Format) naming the attribute when it is missing or of another type.
Attribute openAttr(hid_t obj, const Site &site, const char *name);
std::string readStringAttr(hid_t obj, const Site &site, const char *name);
int64_t readIntAttr(hid_t obj, const Site &site, const char *name);
std::vector<int64_t> readIntArrayAttr(hid_t obj, const Site &site, const char *name);
double readDoubleAttr(hid_t obj, const Site &site, const char *name);
// A 1-D array of strings, variable-length or fixed-size.
std::vector<std::string> readStringArrayAttr(hid_t obj, const Site &site, const char *name);

// ---- groups and datasets ----

// Keep up to 64 attributes in the object header itself ("compact"), not in a fractal heap and
// B-tree: our groups carry 10-16 attributes, above HDF5's default of 8, and HDF5 1.10.8 fails to
// rewrite an attribute held in dense storage (H5A__dense_write), which tools that edit
// provenance in place would hit.
void keepAttributesCompact(hid_t ocpl);

// file: the path for messages; path: the object's HDF5 path relative to parent.
Group createGroup(hid_t parent, const std::string &file, const std::string &path);
Group openGroup(hid_t parent, const std::string &file, const std::string &path);
// cacheBytes > 0 sets the dataset's chunk cache.
Dataset openDataset(hid_t file, const std::string &fileName, const std::string &path, hsize_t cacheBytes = 0);
std::vector<hsize_t> datasetDims(hid_t ds, const std::string &fileName, const std::string &path);
// Reads rows [first, first + count) along the first dimension (all of the others) into buf, as
// memType elements.
void readRows(hid_t ds, const std::string &fileName, const std::string &path, hid_t memType, hsize_t first,
              hsize_t count, void *buf);

} // namespace kvwb::core::h5
