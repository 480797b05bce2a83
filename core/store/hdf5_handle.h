// RAII ownership of HDF5 identifiers (hid_t), the seam where HDF5 status codes become
// kvwb::core::Error, and the small helpers every kvwb HDF5 file uses (opening, the writer lock,
// attributes, groups and datasets with errors naming the file and object), shared by the
// experiment file, the converter store and the replay ledgers; and the saving protocol of named
// records (/converters, /sweeps, /ledgers: validated, built unlinked, linked in place).
//
// Internal to core/: only .cpp files include this header (HDF5 is linked PRIVATE to kvwb_core), so
// no public header exposes hid_t. One Handle owns one identifier and closes it with the matching
// H5*close function when destroyed; handles are move-only, like ggml-cpp.h's unique_ptr deleters.
//
// Thread-safety: none. Debian's HDF5 is built without its thread-safety option, so every HDF5 call
// in the process must come from one thread at a time (in kvwb: the engine thread).
#pragma once

#include "core/util/error.h"

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kvwb::core {
struct MetricTable; // core/store/converter_store.h
}

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
// Opens read-only; never modifies the file. A file whose superblock says a writer has it open (or
// left it open when it was killed) is opened as an SWMR reader, then with recover's properties.
// A file closed cleanly that HDF5 will not open (a copy cut short) is refused, unless pastEnd is
// Recover: experiment files, whose readers trust only committed, checksummed prompts, are also
// read when a writer's close failed on a full disk and left the stored end past the real one.
enum class PastEnd
{
    Refuse,
    Recover
};
File openForReading(const std::filesystem::path &path, PastEnd pastEnd = PastEnd::Refuse);
// The root's schema attribute, checked to be kExperimentSchema: Error(Format) when it is missing or
// unknown, Error(Unsupported) for a newer kvwb/N. name: the path, for messages.
std::string checkSchema(hid_t file, const std::string &name);
// Opens for writing without SWMR; the caller holds the WriterLock. A file whose superblock still
// says "open for writing" was left by a killed capture or save (the lock rules out a live one) and
// is recovered as ExperimentWriter::append does.
File openForUpdate(const std::filesystem::path &path);
// H5Fflush, then (syncToDisk) fsync of the file's descriptor; Error(Io) naming name and stage.
void flushFile(hid_t file, const std::string &name, const char *stage, bool syncToDisk);
// A small HDF5 file written whole (a layer checkpoint, a knowledge graph): fill(file) writes into
// path + ".tmp", which is then flushed, fsync'd and renamed over path, so the file is complete or
// absent (the temporary is removed when fill throws). Error(Io) naming path.
void writeWholeFile(const std::filesystem::path &path, const std::function<void(hid_t file)> &fill);

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

// What a reader allocates for one attribute, and for one dataset read whole, at most (bigger
// claims are damage, refused naming the object before anything is allocated). A converter for two
// 70B-class models is ~1 GiB per layer group at most; attributes hold settings and names.
inline constexpr uint64_t kMaxAttributeBytes = uint64_t(16) << 20;
inline constexpr uint64_t kMaxDatasetBytes = uint64_t(4) << 30;

// Strings are fixed-size UTF-8, NULL-terminated (h5py returns bytes): never variable-length, whose
// global-heap storage HDF5 1.10 reads without checking it. Integers int64; reals float64.
// The type of a string of up to `bytes` bytes (plus its terminator).
Datatype fixedString(size_t bytes);
void writeAttr(hid_t obj, const Site &site, const char *name, const std::string &value);
void writeAttr(hid_t obj, const Site &site, const char *name, int64_t value);
void writeAttr(hid_t obj, const Site &site, const char *name, double value);
void writeAttr(hid_t obj, const Site &site, const char *name, const std::vector<int64_t> &values);
void writeAttr(hid_t obj, const Site &site, const char *name, const std::vector<std::string> &values);

// Error(Format) naming the attribute when it is missing, of another type or shape (a scalar read
// of an array), variable-length, or larger than kMaxAttributeBytes or the file.
Attribute openAttr(hid_t obj, const Site &site, const char *name);
std::string readStringAttr(hid_t obj, const Site &site, const char *name);
int64_t readIntAttr(hid_t obj, const Site &site, const char *name);
std::vector<int64_t> readIntArrayAttr(hid_t obj, const Site &site, const char *name);
double readDoubleAttr(hid_t obj, const Site &site, const char *name);
// A 1-D array of fixed-size strings.
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
// Before a dataset is read whole into memory: Error(Format) naming it when its shape claims more
// than kMaxDatasetBytes (at memBytes per element), or more than the file can hold for it: without
// filters, the bytes it has allocated (plus one chunk not yet written); with filters, 1100 times
// that (deflate's ratio is at most ~1032). Returns the element count.
hsize_t checkWholeRead(hid_t ds, const std::string &fileName, const std::string &path,
                       const std::vector<hsize_t> &dims, size_t memBytes);
// Reads rows [first, first + count) along the first dimension (all of the others) into buf, as
// memType elements.
void readRows(hid_t ds, const std::string &fileName, const std::string &path, hid_t memType, hsize_t first,
              hsize_t count, void *buf);

// ---- named records: /converters/<name>, /sweeps/<name>, /ledgers/<name> ----

// Names are HDF5 link names (no '/'); the small alphabet also keeps them safe on command lines and
// in file names. A leading '.' marks a hidden name: never listed, loaded or saved (see Save::link).
// Error(InvalidArgument) naming file, what ("converter", "table", "ledger") and the name.
void checkName(const std::string &file, const char *what, const std::string &name);
// Empty means "nothing recorded"; anything else is parsed by reports later, so refuse it now:
// Error(InvalidArgument) "<where>: settings is not valid JSON".
void checkSettingsJson(const std::string &where, const std::string &json);
// H5Lexists that answers false (instead of failing) when an intermediate group is missing.
bool linkExists(hid_t loc, const std::string &path);
// Link names of a group, in HDF5's name order.
std::vector<std::string> linkNames(hid_t group, const std::string &file, const std::string &path);
// Names under group (hidden ones skipped), sorted; empty when the group does not exist.
std::vector<std::string> visibleNames(hid_t file, const std::string &name, const char *group);
// Opens a kvwb experiment read-only (also one a capture is writing or a killed capture left).
File openExperiment(const std::filesystem::path &path);
// Error(InvalidArgument) naming the file and the missing object (and what the group holds instead).
void requireObject(hid_t file, const std::string &name, const char *group, const char *what,
                   const std::string &object);
// The names of an experiment's records under group (visibleNames of the file opened read-only).
std::vector<std::string> recordNames(const std::filesystem::path &experiment, const char *group);
// A named record of an experiment opened for reading: the name checked (checkName), the file opened
// read-only (openExperiment), the record required under group (requireObject), in that order.
struct RecordFile
{
    std::string file; // the experiment's path, for messages
    File handle;
    std::string path; // group/name
};
RecordFile openRecord(const std::filesystem::path &experiment, const char *group, const char *what,
                      const std::string &name);
// "[2, 3]"
std::string shapeText(const std::vector<hsize_t> &dims);

// Where a save writes: an HDF5 location (the record's still unlinked root, or a group in it) and
// the path it will have once linked, for messages.
struct Place
{
    hid_t loc;
    std::string file; // the experiment's path
    std::string path; // e.g. /converters/<name>/layers/3
};

// Group creation properties of record groups (attributes kept compact, see keepAttributesCompact).
PropList compactGroupCreation();
Group newGroup(const Place &parent, const std::string &name);
// A contiguous dataset of the given shape, written in one go (nothing to write when it has no
// elements: HDF5 accepts zero-sized dimensions). An empty name creates it unlinked (anonymous), to
// be linked as parent.path once complete.
Dataset writeDataset(const Place &parent, const std::string &name, hid_t fileType, hid_t memType,
                     const std::vector<hsize_t> &dims, const void *data);
// A list of strings as two datasets, like the prompts' text: <name> uint8 [bytes] (UTF-8, all
// strings concatenated) and <name>_offsets int64 [strings + 1] (string i is bytes
// [offsets[i], offsets[i+1])).
void writeStrings(const Place &parent, const std::string &name, const std::vector<std::string> &values);
// A [rows, columns] float64 dataset with a "columns" attribute (fixed-size UTF-8 strings).
Dataset writeTable(const Place &parent, const std::string &name, const MetricTable &t);

struct Dims
{
    Dataset ds;
    std::vector<hsize_t> dims;
};
// Opens path and checks its rank (and element class: float, or integer when integer is set) and,
// by checkWholeRead (8 bytes per element), that it can be read whole.
Dims openArray(hid_t file, const std::string &name, const std::string &path, size_t rank, bool integer);
// writeTable's dataset back; Error(Format) when "columns" does not match the second dimension.
MetricTable readTable(hid_t file, const std::string &name, const std::string &path);
// writeStrings' datasets back; Error(Format) naming the dataset when they are missing, of another
// type, or their offsets do not start at 0, decrease or pass the end of the bytes.
std::vector<std::string> readStrings(hid_t file, const std::string &name, const std::string &path);

// One save: holds the writer lock and the file open for writing without SWMR (HDF5 1.10 cannot
// create objects under SWMR).
//
// The new object is built unlinked (H5Gcreate_anon/H5Dcreate_anon), flushed and fsync'd, and only
// then linked in place of the old one. Until that last step nothing that an existing object points
// to is modified, so a failure while the bulk is written (a full disk, a killed process) leaves
// every existing object as it was; HDF5 just never reuses the space. Built under a linked hidden name
// instead, the parent group's header would point at the new object's metadata from the start: a
// full disk then left a header pointing past the stored end of the file (readers: "addr
// overflow"), and a hidden object whose header failed its checksum, which no later save could
// delete.
class Save
{
public:
    // Error(Io) when the file is not writable or another writer holds it. A file whose superblock
    // still says "open for writing" was left by a killed capture or save (the lock we hold rules out
    // a live one), and is recovered as ExperimentWriter::append does.
    explicit Save(const std::filesystem::path &path);

    hid_t file() const { return m_file.get(); }

    // Makes object (complete, unlinked) group/<name>, replacing what had that name; creates group
    // (with a description attribute) in files that lack it.
    void link(hid_t object, const char *group, const char *description, const std::string &name);

    // Closes the file; every object handle must be closed before, or HDF5 only defers the close.
    void close();

private:
    std::string m_name;
    WriterLock m_lock; // declared before the file: released after it is closed
    File m_file;
};

} // namespace kvwb::core::h5
