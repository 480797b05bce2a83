#include "core/store/hdf5_handle.h"

#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/util/atomic_file.h"
#include "core/util/text_util.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace kvwb::core::h5 {

void prepareLibrary() noexcept
{
    static const bool once = [] {
        H5dont_atexit(); // fails harmlessly when something else initialised HDF5 first
        return true;
    }();
    (void)once;
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

std::string lastErrorMessage()
{
    std::string message;
    // Walking upward starts at the innermost frame, where the failure was detected: that message
    // names the cause (errno text, "truncated file", ...); outer frames only say "unable to open".
    const auto visit = [](unsigned n, const H5E_error2_t *e, void *data) -> herr_t {
        auto *out = static_cast<std::string *>(data);
        if (n == 0 && e->desc)
            *out = e->desc;
        return 0;
    };
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, visit, &message);
    return message;
}

// ---- files ----

PropList fileAccess(bool recover)
{
    PropList fapl(H5Pcreate(H5P_FILE_ACCESS));
    // SWMR needs the 1.10 file format (superblock v3, extensible-array chunk indexes).
    H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    // Under SWMR, a metadata block that fails its checksum is read again, in case a writer was
    // half-way through writing it, with a sleep that doubles each time: HDF5's default of 100
    // attempts made one damaged block hang an open for hours. 24 attempts wait ~17 ms in all,
    // ages for a writer's pwrite of one block to land.
    H5Pset_metadata_read_attempts(fapl.get(), 24);
    if (recover) {
        // What `h5clear -s` does: a writer that died in SWMR mode leaves the superblock's
        // "open for writing" flags set, and a plain open refuses such a file. Our commit protocol
        // (offsets written and flushed after the rows they cover) keeps the file consistent, so
        // clearing the flags is safe. The property is private but registered on every fapl.
        hbool_t yes = 1;
        H5Pset(fapl.get(), "clear_status_flags", &yes);
        // A writer that died (or whose close failed on a full disk) can leave the stored end of
        // allocated space past the real end of file: space allocated for an uncommitted prompt
        // whose bytes never reached the disk. Committed rows lie below the real end, so skip the
        // "truncated file" check as `h5clear --increment` does; appending writes past the hole.
        H5Pset(fapl.get(), "skip_eof_check", &yes);
    }
    return fapl;
}

void checkReadable(const std::filesystem::path &path)
{
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        throw Error(ErrorCode::Io, path.string() + ": no such file");
    if (::access(path.c_str(), R_OK) != 0)
        throw Error(ErrorCode::Io, path.string() + ": cannot read: " + std::strerror(errno));
    const htri_t isHdf5 = H5Fis_hdf5(path.c_str());
    if (isHdf5 == 0)
        throw Error(ErrorCode::Format, path.string() + ": not an HDF5 file");
    check(isHdf5, ErrorCode::Io, path.string() + ": cannot read");
}

// The superblock's file consistency flags (superblock version 2 and 3: byte 11): non-zero while a
// writer has the file open, and left set by a writer that died. 0 for a file closed cleanly, for
// older superblocks, and when no superblock is found.
unsigned superblockWriteFlags(const std::filesystem::path &path)
{
    static const unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    unsigned flags = 0;
    // The superblock is at 0, 512, 1024, 2048, ... (a user block may come first).
    for (off_t at = 0; at <= (off_t(1) << 30); at = at == 0 ? 512 : at * 2) {
        unsigned char head[12] = {};
        if (::pread(fd, head, sizeof head, at) != ssize_t(sizeof head))
            break;
        if (std::memcmp(head, kSignature, sizeof kSignature) != 0)
            continue;
        if (head[8] >= 2)
            flags = head[11];
        break;
    }
    ::close(fd);
    return flags;
}

File openForReading(const std::filesystem::path &path, PastEnd pastEnd)
{
    checkReadable(path);
    std::string why;
    {
        PropList fapl = fileAccess(false);
        File f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
        if (f)
            return f;
        why = lastErrorMessage();
    }
    // A file closed cleanly is read as it is: the fallbacks below skip HDF5's end-of-file check,
    // which would read a truncated copy's missing bytes as zeros. They are for files a writer has
    // open or left open (capture appends under SWMR; a killed one leaves the flags set).
    if (pastEnd == PastEnd::Refuse && superblockWriteFlags(path) == 0) {
        throw Error(
            ErrorCode::Format,
            path.string() + ": cannot open as HDF5" + (why.empty() ? "" : ": " + why) +
                (why.find("truncated") != std::string::npos ? " (a copy or download cut short?)" : ""));
    }
    {
        // A live (or dead) SWMR writer: read as an SWMR reader, which skips the end-of-file check
        // that a file still being written can fail.
        PropList fapl = fileAccess(false);
        File f(H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl.get()));
        if (f)
            return f;
    }
    PropList fapl = fileAccess(true);
    return File(check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), ErrorCode::Format,
                      path.string() + ": cannot open as HDF5"));
}

std::string checkSchema(hid_t file, const std::string &name)
{
    if (H5Aexists(file, "schema") <= 0) {
        // Opened past a missing end (the recovery open skips HDF5's end-of-file check): say so,
        // not that the file is something else.
        haddr_t eoa = 0;
        std::error_code ec;
        const uintmax_t size = std::filesystem::file_size(name, ec); // H5Fget_filesize says max(EOF, EOA)
        if (!ec && H5Fget_eoa(file, &eoa) >= 0 && size < eoa)
            throw Error(ErrorCode::Format, name + ": truncated: the file has " + std::to_string(size) +
                                               " bytes, its superblock says " + std::to_string(eoa) +
                                               " (a copy or download cut short?)");
        throw Error(ErrorCode::Format, name + ": not a kvwb experiment file (no schema attribute on /)");
    }
    {
        // kvwb/1 files hold their strings in HDF5's global heap, which HDF5 1.10 reads without
        // checking the lengths it finds there (a damaged file crashes it). Recognised by the type
        // alone, without reading the value.
        const Attribute a(check(H5Aopen(file, "schema", H5P_DEFAULT), ErrorCode::Format,
                                name + ": cannot open attribute schema of /"));
        const Datatype type(H5Aget_type(a.get()));
        if (H5Tget_class(type.get()) == H5T_STRING && H5Tis_variable_str(type.get()) > 0)
            throw Error(ErrorCode::Unsupported,
                        name +
                            ": written by an older kvwb (schema kvwb/1, variable-length strings); "
                            "`kvwb upgrade " +
                            name + "` rewrites it as " + kExperimentSchema);
    }
    const std::string schema = readStringAttr(file, Site(name, "/"), "schema");
    if (schema != kExperimentSchema) {
        if (schema.rfind("kvwb/", 0) == 0)
            throw Error(ErrorCode::Unsupported, name + ": schema " + schema +
                                                    " is not one this kvwb reads (" + kExperimentSchema +
                                                    ")");
        throw Error(ErrorCode::Format, name + ": unknown schema '" + schema + "'");
    }
    return schema;
}

WriterLock WriterLock::acquire(const std::filesystem::path &path)
{
    WriterLock lock;
    lock.m_fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (lock.m_fd < 0)
        throw Error(ErrorCode::Io, path.string() + ": cannot open for writing: " + std::strerror(errno));
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET; // l_start = l_len = 0: the whole file
    if (::fcntl(lock.m_fd, F_OFD_SETLK, &fl) != 0) {
        const int err = errno;
        if (err == EAGAIN || err == EACCES)
            throw Error(ErrorCode::Io, path.string() + ": another kvwb capture is writing this file");
        throw Error(ErrorCode::Io, path.string() + ": cannot lock: " + std::strerror(err));
    }
    return lock;
}

void WriterLock::release() noexcept
{
    if (m_fd >= 0)
        ::close(m_fd);
    m_fd = -1;
}

void flushFile(hid_t file, const std::string &name, const char *stage, bool syncToDisk)
{
    check(H5Fflush(file, H5F_SCOPE_GLOBAL), ErrorCode::Io, name + ": cannot flush (" + stage + ")");
    if (!syncToDisk)
        return;
    int *fd = nullptr;
    check(H5Fget_vfd_handle(file, H5P_DEFAULT, reinterpret_cast<void **>(&fd)), ErrorCode::Io,
          name + ": cannot get file handle");
    if (fd && ::fsync(*fd) != 0)
        throw Error(ErrorCode::Io, name + ": fsync failed (" + stage + "): " + std::strerror(errno));
}

// ---- attributes ----

Datatype fixedString(size_t bytes)
{
    // NULLTERM with a terminator always stored: h5dump prints the text without padding, h5py
    // returns it (as bytes) without the NULs.
    Datatype type(check(H5Tcopy(H5T_C_S1), ErrorCode::Internal, "cannot build an HDF5 string type"));
    check(H5Tset_size(type.get(), bytes + 1), ErrorCode::Internal,
          "cannot build an HDF5 string type of " + std::to_string(bytes) + " bytes");
    H5Tset_strpad(type.get(), H5T_STR_NULLTERM);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    return type;
}

void writeAttr(hid_t obj, const Site &site, const char *name, const std::string &value)
{
    const Datatype type = fixedString(value.size());
    Dataspace space(H5Screate(H5S_SCALAR));
    Attribute a(check(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), ErrorCode::Io,
                      "cannot create " + site.attr(name)));
    check(H5Awrite(a.get(), type.get(), value.c_str()), ErrorCode::Io, "cannot write " + site.attr(name));
}

void writeAttr(hid_t obj, const Site &site, const char *name, int64_t value)
{
    Dataspace space(H5Screate(H5S_SCALAR));
    Attribute a(check(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                      ErrorCode::Io, "cannot create " + site.attr(name)));
    check(H5Awrite(a.get(), H5T_NATIVE_INT64, &value), ErrorCode::Io, "cannot write " + site.attr(name));
}

void writeAttr(hid_t obj, const Site &site, const char *name, double value)
{
    Dataspace space(H5Screate(H5S_SCALAR));
    Attribute a(check(H5Acreate2(obj, name, H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                      ErrorCode::Io, "cannot create " + site.attr(name)));
    check(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value), ErrorCode::Io, "cannot write " + site.attr(name));
}

void writeAttr(hid_t obj, const Site &site, const char *name, const std::vector<int64_t> &values)
{
    const hsize_t n = values.size();
    Dataspace space(H5Screate_simple(1, &n, nullptr));
    Attribute a(check(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                      ErrorCode::Io, "cannot create " + site.attr(name)));
    check(H5Awrite(a.get(), H5T_NATIVE_INT64, values.data()), ErrorCode::Io,
          "cannot write " + site.attr(name));
}

void writeAttr(hid_t obj, const Site &site, const char *name, const std::vector<std::string> &values)
{
    size_t longest = 0;
    for (const std::string &v : values)
        longest = std::max(longest, v.size());
    const Datatype type = fixedString(longest);
    const size_t width = longest + 1;
    const hsize_t n = values.size();
    Dataspace space(H5Screate_simple(1, &n, nullptr));
    Attribute a(check(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), ErrorCode::Io,
                      "cannot create " + site.attr(name)));
    std::string buffer(width * values.size(), '\0');
    for (size_t i = 0; i < values.size(); ++i)
        std::memcpy(buffer.data() + i * width, values[i].data(), values[i].size());
    if (n > 0)
        check(H5Awrite(a.get(), type.get(), buffer.data()), ErrorCode::Io, "cannot write " + site.attr(name));
}

Attribute openAttr(hid_t obj, const Site &site, const char *name)
{
    const htri_t exists = H5Aexists(obj, name);
    if (exists <= 0)
        throw Error(ErrorCode::Format, site.attr(name) + " is missing");
    return Attribute(
        check(H5Aopen(obj, name, H5P_DEFAULT), ErrorCode::Format, "cannot open " + site.attr(name)));
}

namespace {

// Strings in kvwb/2 files are fixed-size (NULLTERM, UTF-8); variable-length ones live in HDF5's
// global heap, which HDF5 1.10 reads without checking the lengths stored there, so a reader never
// touches one (checkSchema turns kvwb/1 files away before anything else is read).
void checkFixedString(hid_t type, const std::string &what)
{
    if (H5Tget_class(type) != H5T_STRING)
        throw Error(ErrorCode::Format, what + " is not a string");
    if (H5Tis_variable_str(type) != 0)
        throw Error(ErrorCode::Format, what + " is a variable-length string, which kvwb files never hold");
}

// The bytes of `count` elements of type, checked before they are allocated against
// kMaxAttributeBytes and the size of the file holding obj (an attribute is stored in the file).
size_t attributeBytes(hid_t obj, hid_t type, hsize_t count, const std::string &what)
{
    const size_t width = H5Tget_size(type);
    const uint64_t bytes = uint64_t(width) * count;
    if (width == 0 || (count != 0 && bytes / count != width) || bytes > kMaxAttributeBytes)
        throw Error(ErrorCode::Format, what + " claims " + std::to_string(count) + " elements of " +
                                           std::to_string(width) + " bytes, over the limit of " +
                                           std::to_string(kMaxAttributeBytes) + " bytes");
    hsize_t fileSize = 0;
    const hid_t fid = H5Iget_file_id(obj);
    if (fid >= 0) {
        H5Fget_filesize(fid, &fileSize);
        H5Fclose(fid);
    }
    if (fileSize > 0 && bytes > fileSize)
        throw Error(ErrorCode::Format, what + " claims " + std::to_string(bytes) +
                                           " bytes, more than the whole file (" + std::to_string(fileSize) +
                                           ")");
    return size_t(bytes);
}

// H5Aread fills as many elements as the attribute holds: a single value's read needs exactly one.
void requireScalar(hid_t attr, const std::string &what)
{
    const Dataspace space(H5Aget_space(attr));
    if (H5Sget_simple_extent_npoints(space.get()) != 1)
        throw Error(ErrorCode::Format, what + " holds " +
                                           std::to_string(H5Sget_simple_extent_npoints(space.get())) +
                                           " values, not one");
}

// One fixed-size string without its NULLTERM (or NULLPAD) padding.
std::string unpad(const char *p, size_t width)
{
    size_t n = width;
    while (n > 0 && p[n - 1] == '\0')
        --n;
    return std::string(p, n);
}

} // namespace

std::string readStringAttr(hid_t obj, const Site &site, const char *name)
{
    Attribute a = openAttr(obj, site, name);
    Datatype type(H5Aget_type(a.get()));
    checkFixedString(type.get(), site.attr(name));
    requireScalar(a.get(), site.attr(name));
    std::string value(attributeBytes(obj, type.get(), 1, site.attr(name)), '\0');
    check(H5Aread(a.get(), type.get(), value.data()), ErrorCode::Format, "cannot read " + site.attr(name));
    return unpad(value.data(), value.size());
}

int64_t readIntAttr(hid_t obj, const Site &site, const char *name)
{
    Attribute a = openAttr(obj, site, name);
    Datatype type(H5Aget_type(a.get()));
    if (H5Tget_class(type.get()) != H5T_INTEGER)
        throw Error(ErrorCode::Format, site.attr(name) + " is not an integer");
    requireScalar(a.get(), site.attr(name));
    int64_t v = 0;
    check(H5Aread(a.get(), H5T_NATIVE_INT64, &v), ErrorCode::Format, "cannot read " + site.attr(name));
    return v;
}

std::vector<int64_t> readIntArrayAttr(hid_t obj, const Site &site, const char *name)
{
    Attribute a = openAttr(obj, site, name);
    Datatype type(H5Aget_type(a.get()));
    if (H5Tget_class(type.get()) != H5T_INTEGER)
        throw Error(ErrorCode::Format, site.attr(name) + " is not an integer array");
    Dataspace space(H5Aget_space(a.get()));
    const hssize_t n = H5Sget_simple_extent_npoints(space.get());
    if (n < 0 || H5Sget_simple_extent_ndims(space.get()) > 1)
        throw Error(ErrorCode::Format, site.attr(name) + " is not a 1-D integer array");
    attributeBytes(obj, type.get(), hsize_t(n), site.attr(name));
    std::vector<int64_t> v(static_cast<size_t>(n));
    if (n > 0)
        check(H5Aread(a.get(), H5T_NATIVE_INT64, v.data()), ErrorCode::Format,
              "cannot read " + site.attr(name));
    return v;
}

double readDoubleAttr(hid_t obj, const Site &site, const char *name)
{
    Attribute a = openAttr(obj, site, name);
    Datatype type(H5Aget_type(a.get()));
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_FLOAT && cls != H5T_INTEGER)
        throw Error(ErrorCode::Format, site.attr(name) + " is not a number");
    requireScalar(a.get(), site.attr(name));
    double v = 0;
    check(H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v), ErrorCode::Format, "cannot read " + site.attr(name));
    return v;
}

std::vector<std::string> readStringArrayAttr(hid_t obj, const Site &site, const char *name)
{
    Attribute a = openAttr(obj, site, name);
    Datatype type(H5Aget_type(a.get()));
    checkFixedString(type.get(), site.attr(name));
    Dataspace space(H5Aget_space(a.get()));
    const hssize_t n = H5Sget_simple_extent_npoints(space.get());
    if (n < 0 || H5Sget_simple_extent_ndims(space.get()) > 1)
        throw Error(ErrorCode::Format, site.attr(name) + " is not a 1-D string array");
    std::vector<std::string> values;
    if (n == 0)
        return values;
    const size_t width = H5Tget_size(type.get());
    std::string buffer(attributeBytes(obj, type.get(), hsize_t(n), site.attr(name)), '\0');
    check(H5Aread(a.get(), type.get(), buffer.data()), ErrorCode::Format, "cannot read " + site.attr(name));
    values.reserve(size_t(n));
    for (hssize_t i = 0; i < n; ++i)
        values.push_back(unpad(buffer.data() + size_t(i) * width, width));
    return values;
}

void keepAttributesCompact(hid_t ocpl)
{
    H5Pset_attr_phase_change(ocpl, 64, 64);
}

Group createGroup(hid_t parent, const std::string &file, const std::string &path)
{
    PropList gcpl(H5Pcreate(H5P_GROUP_CREATE));
    keepAttributesCompact(gcpl.get());
    return Group(check(H5Gcreate2(parent, path.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), ErrorCode::Io,
                       file + ": cannot create group " + path));
}

Group openGroup(hid_t parent, const std::string &file, const std::string &path)
{
    if (H5Lexists(parent, path.c_str(), H5P_DEFAULT) <= 0)
        throw Error(ErrorCode::Format, file + ": group " + path + " is missing");
    return Group(check(H5Gopen2(parent, path.c_str(), H5P_DEFAULT), ErrorCode::Format,
                       file + ": cannot open group " + path));
}

std::vector<hsize_t> datasetDims(hid_t ds, const std::string &fileName, const std::string &path)
{
    Dataspace space(check(H5Dget_space(ds), ErrorCode::Format, fileName + ": dataset " + path));
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0)
        throw Error(ErrorCode::Format, fileName + ": dataset " + path + " has no simple dataspace");
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    return dims;
}

hsize_t checkWholeRead(hid_t ds, const std::string &fileName, const std::string &path,
                       const std::vector<hsize_t> &dims, size_t memBytes)
{
    const std::string what = fileName + ": dataset " + path + " " + shapeText(dims);
    const uint64_t limit = kMaxDatasetBytes / std::max<size_t>(memBytes, 1);
    uint64_t elements = 1;
    for (hsize_t d : dims) {
        if (d != 0 && elements > limit / d)
            throw Error(ErrorCode::Format,
                        what + " claims more than " + std::to_string(kMaxDatasetBytes) + " bytes");
        elements *= d;
    }
    const Datatype type(H5Dget_type(ds));
    const uint64_t claimed = elements * std::max<size_t>(H5Tget_size(type.get()), 1);
    const PropList dcpl(H5Dget_create_plist(ds));
    uint64_t slack = 0; // one chunk, which a killed writer may have extended over but not written
    if (dcpl && H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
        std::vector<hsize_t> chunk(dims.size() ? dims.size() : 1, 1);
        if (H5Pget_chunk(dcpl.get(), int(chunk.size()), chunk.data()) >= 0) {
            slack = std::max<size_t>(H5Tget_size(type.get()), 1);
            for (hsize_t c : chunk)
                slack *= c;
        }
    }
    const bool filtered = dcpl && H5Pget_nfilters(dcpl.get()) > 0;
    const uint64_t stored = H5Dget_storage_size(ds);
    const uint64_t room = (filtered ? stored * 1100 : stored) + slack;
    if (claimed > room)
        throw Error(ErrorCode::Format, what + " claims " + std::to_string(claimed) +
                                           " bytes but the file stores " + std::to_string(stored) +
                                           " for it");
    return elements;
}

void readRows(hid_t ds, const std::string &fileName, const std::string &path, hid_t memType, hsize_t first,
              hsize_t count, void *buf)
{
    if (count == 0)
        return;
    const std::string what = fileName + ": cannot read dataset " + path;
    Dataspace fileSpace(check(H5Dget_space(ds), ErrorCode::Format, what));
    const int rank = H5Sget_simple_extent_ndims(fileSpace.get());
    std::vector<hsize_t> dims(size_t(std::max(rank, 1)));
    H5Sget_simple_extent_dims(fileSpace.get(), dims.data(), nullptr);
    std::vector<hsize_t> start(dims.size(), 0), counts = dims;
    start[0] = first;
    counts[0] = count;
    check(H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, start.data(), nullptr, counts.data(), nullptr),
          ErrorCode::Format, what);
    Dataspace memSpace(H5Screate_simple(int(counts.size()), counts.data(), nullptr));
    check(H5Dread(ds, memType, memSpace.get(), fileSpace.get(), H5P_DEFAULT, buf), ErrorCode::Format, what);
}

Dataset openDataset(hid_t file, const std::string &fileName, const std::string &path, hsize_t cacheBytes)
{
    if (H5Lexists(file, path.c_str(), H5P_DEFAULT) <= 0)
        throw Error(ErrorCode::Format, fileName + ": dataset " + path + " is missing");
    PropList dapl(H5Pcreate(H5P_DATASET_ACCESS));
    if (cacheBytes > 0)
        H5Pset_chunk_cache(dapl.get(), 521, cacheBytes, 1.0);
    return Dataset(check(H5Dopen2(file, path.c_str(), dapl.get()), ErrorCode::Format,
                         fileName + ": cannot open dataset " + path));
}

// ---- named records ----

namespace {

constexpr const char *kPartialSuffix = ".partial";

bool isPartialName(const std::string &name)
{
    const size_t n = std::strlen(kPartialSuffix);
    return name.size() > n + 1 && name.front() == '.' &&
           name.compare(name.size() - n, n, kPartialSuffix) == 0;
}

} // namespace

void checkName(const std::string &file, const char *what, const std::string &name)
{
    const bool charsOk = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
               c == '.' || c == '-';
    });
    if (!charsOk || name.front() == '.')
        throw Error(ErrorCode::InvalidArgument, file + ": " + what + " name '" + name +
                                                    "' must be letters, digits, '_', '.' or '-' and not "
                                                    "start with '.'");
}

void checkSettingsJson(const std::string &where, const std::string &json)
{
    if (!json.empty() && !nlohmann::json::accept(json))
        throw Error(ErrorCode::InvalidArgument, where + ": settings is not valid JSON");
}

bool linkExists(hid_t loc, const std::string &path)
{
    // H5Lexists fails (negative) rather than answering 0 when an intermediate group is missing.
    return H5Lexists(loc, path.c_str(), H5P_DEFAULT) > 0;
}

std::vector<std::string> linkNames(hid_t group, const std::string &file, const std::string &path)
{
    std::vector<std::string> names;
    const auto visit = [](hid_t, const char *name, const H5L_info_t *, void *data) -> herr_t {
        static_cast<std::vector<std::string> *>(data)->emplace_back(name);
        return 0;
    };
    check(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr, visit, &names), ErrorCode::Format,
          file + ": cannot list group " + path);
    return names;
}

std::vector<std::string> visibleNames(hid_t file, const std::string &name, const char *group)
{
    if (!linkExists(file, group))
        return {};
    const Group g = openGroup(file, name, group);
    std::vector<std::string> names;
    for (std::string &n : linkNames(g.get(), name, group))
        if (!n.empty() && n.front() != '.')
            names.push_back(std::move(n));
    std::sort(names.begin(), names.end());
    return names;
}

File openExperiment(const std::filesystem::path &path)
{
    prepareLibrary();
    File f = openForReading(path, PastEnd::Recover);
    checkSchema(f.get(), path.string());
    return f;
}

void requireObject(hid_t file, const std::string &name, const char *group, const char *what,
                   const std::string &object)
{
    if (linkExists(file, std::string(group) + "/" + object))
        return;
    const std::vector<std::string> present = visibleNames(file, name, group);
    throw Error(ErrorCode::InvalidArgument,
                name + ": no " + what + " '" + object + "' (" + group + " holds " +
                    (present.empty() ? std::string("none") : text::join(present)) + ")");
}

std::vector<std::string> recordNames(const std::filesystem::path &experiment, const char *group)
{
    const File f = openExperiment(experiment);
    return visibleNames(f.get(), experiment.string(), group);
}

RecordFile openRecord(const std::filesystem::path &experiment, const char *group, const char *what,
                      const std::string &name)
{
    RecordFile r;
    r.file = experiment.string();
    checkName(r.file, what, name);
    r.handle = openExperiment(experiment);
    requireObject(r.handle.get(), r.file, group, what, name);
    r.path = std::string(group) + "/" + name;
    return r;
}

std::string shapeText(const std::vector<hsize_t> &dims)
{
    std::string out = "[";
    for (size_t i = 0; i < dims.size(); ++i)
        out += (i ? ", " : "") + std::to_string(dims[i]);
    return out + "]";
}

PropList compactGroupCreation()
{
    PropList gcpl(H5Pcreate(H5P_GROUP_CREATE));
    keepAttributesCompact(gcpl.get()); // a converter's root carries 10 attributes
    return gcpl;
}

Group newGroup(const Place &parent, const std::string &name)
{
    const PropList gcpl = compactGroupCreation();
    return Group(check(H5Gcreate2(parent.loc, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT),
                       ErrorCode::Io, parent.file + ": cannot create group " + parent.path + "/" + name));
}

Dataset writeDataset(const Place &parent, const std::string &name, hid_t fileType, hid_t memType,
                     const std::vector<hsize_t> &dims, const void *data)
{
    const std::string path = name.empty() ? parent.path : parent.path + "/" + name;
    Dataspace space(H5Screate_simple(int(dims.size()), dims.data(), nullptr));
    Dataset ds(check(name.empty()
                         ? H5Dcreate_anon(parent.loc, fileType, space.get(), H5P_DEFAULT, H5P_DEFAULT)
                         : H5Dcreate2(parent.loc, name.c_str(), fileType, space.get(), H5P_DEFAULT,
                                      H5P_DEFAULT, H5P_DEFAULT),
                     ErrorCode::Io, parent.file + ": cannot create dataset " + path));
    hsize_t elements = 1;
    for (hsize_t d : dims)
        elements *= d;
    if (elements > 0)
        check(H5Dwrite(ds.get(), memType, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), ErrorCode::Io,
              parent.file + ": cannot write dataset " + path);
    return ds;
}

void writeStrings(const Place &parent, const std::string &name, const std::vector<std::string> &values)
{
    std::string bytes;
    std::vector<int64_t> offsets{0};
    offsets.reserve(values.size() + 1);
    for (const std::string &v : values) {
        bytes += v;
        offsets.push_back(int64_t(bytes.size()));
    }
    writeDataset(parent, name, H5T_STD_U8LE, H5T_NATIVE_UINT8, {hsize_t(bytes.size())}, bytes.data());
    writeDataset(parent, name + "_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, {hsize_t(offsets.size())},
                 offsets.data());
}

Dataset writeTable(const Place &parent, const std::string &name, const MetricTable &t)
{
    std::vector<double> flat;
    flat.reserve(t.rows.size() * t.columns.size());
    for (const std::vector<double> &row : t.rows)
        flat.insert(flat.end(), row.begin(), row.end());
    Dataset ds = writeDataset(parent, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                              {hsize_t(t.rows.size()), hsize_t(t.columns.size())}, flat.data());
    writeAttr(ds.get(), Site(parent.file, name.empty() ? parent.path : parent.path + "/" + name), "columns",
              t.columns);
    return ds;
}

Dims openArray(hid_t file, const std::string &name, const std::string &path, size_t rank, bool integer)
{
    Dims d{openDataset(file, name, path), {}};
    d.dims = datasetDims(d.ds.get(), name, path);
    Datatype type(H5Dget_type(d.ds.get()));
    const H5T_class_t cls = H5Tget_class(type.get());
    if (d.dims.size() != rank || (integer ? cls != H5T_INTEGER : (cls != H5T_FLOAT && cls != H5T_INTEGER)))
        throw Error(ErrorCode::Format, name + ": dataset " + path + " must be a " + std::to_string(rank) +
                                           "-D " + (integer ? "integer" : "numeric") + " array, not " +
                                           shapeText(d.dims));
    checkWholeRead(d.ds.get(), name, path, d.dims, 8);
    return d;
}

MetricTable readTable(hid_t file, const std::string &name, const std::string &path)
{
    Dims d = openArray(file, name, path, 2, false);
    MetricTable t;
    t.columns = readStringArrayAttr(d.ds.get(), Site(name, path), "columns");
    if (t.columns.size() != d.dims[1])
        throw Error(ErrorCode::Format, name + ": dataset " + path + " is " + shapeText(d.dims) + " but has " +
                                           std::to_string(t.columns.size()) + " columns");
    std::vector<double> flat(d.dims[0] * d.dims[1]);
    readRows(d.ds.get(), name, path, H5T_NATIVE_DOUBLE, 0, d.dims[0], flat.data());
    t.rows.resize(d.dims[0]);
    for (size_t i = 0; i < t.rows.size(); ++i)
        t.rows[i].assign(flat.begin() + ptrdiff_t(i * d.dims[1]),
                         flat.begin() + ptrdiff_t((i + 1) * d.dims[1]));
    return t;
}

std::vector<std::string> readStrings(hid_t file, const std::string &name, const std::string &path)
{
    const Dims bytes = openArray(file, name, path, 1, true);
    const std::string offsetsPath = path + "_offsets";
    const Dims offsets = openArray(file, name, offsetsPath, 1, true);
    if (offsets.dims[0] < 1)
        throw Error(ErrorCode::Format, name + ": dataset " + offsetsPath + " is empty (it starts with 0)");
    std::vector<int64_t> ends(offsets.dims[0]);
    readRows(offsets.ds.get(), name, offsetsPath, H5T_NATIVE_INT64, 0, ends.size(), ends.data());
    if (ends[0] != 0)
        throw Error(ErrorCode::Format, name + ": dataset " + offsetsPath + " does not start at 0");
    for (size_t i = 1; i < ends.size(); ++i)
        if (ends[i] < ends[i - 1] || uint64_t(ends[i]) > bytes.dims[0])
            throw Error(ErrorCode::Format,
                        name + ": dataset " + offsetsPath + " entry " + std::to_string(i) + " (" +
                            std::to_string(ends[i]) + ") " +
                            (ends[i] < ends[i - 1] ? "decreases"
                                                   : "passes the end of " + path + " (" +
                                                         std::to_string(bytes.dims[0]) + " bytes)"));
    std::string all(size_t(bytes.dims[0]), '\0');
    readRows(bytes.ds.get(), name, path, H5T_NATIVE_UINT8, 0, bytes.dims[0], all.data());
    std::vector<std::string> values;
    values.reserve(ends.size() - 1);
    for (size_t i = 1; i < ends.size(); ++i)
        values.emplace_back(all, size_t(ends[i - 1]), size_t(ends[i] - ends[i - 1]));
    return values;
}

void writeWholeFile(const std::filesystem::path &path, const std::function<void(hid_t file)> &fill)
{
    prepareLibrary();
    const std::string name = path.string();
    std::filesystem::path tmp = path;
    tmp += ".tmp";
    {
        const PropList fapl = fileAccess(false);
        const File file(check(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), ErrorCode::Io,
                              name + ": cannot create " + tmp.string()));
        TempPathGuard removeTmp(tmp);
        fill(file.get());
        flushFile(file.get(), name, "written", false);
        removeTmp.keep();
    }
    syncAndRename(tmp, path, name, true);
}

File openForUpdate(const std::filesystem::path &path)
{
    {
        const PropList fapl = fileAccess(false);
        File f(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()));
        if (f)
            return f;
    }
    const PropList fapl = fileAccess(true);
    File f(check(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), ErrorCode::Io,
                 path.string() + ": cannot open for writing"));
    // The stored end of allocation can lag behind metadata the killed writer wrote; allocating
    // from it would overwrite live structures.
    check(H5Fincrement_filesize(f.get(), 1 << 20), ErrorCode::Io,
          path.string() + ": cannot recover the end of allocated space");
    return f;
}

Save::Save(const std::filesystem::path &path) : m_name(path.string())
{
    if (::access(path.c_str(), W_OK) != 0)
        throw Error(ErrorCode::Io, m_name + ": cannot write: " + std::strerror(errno));
    m_lock = WriterLock::acquire(path);
    m_file = openForUpdate(path);
}

void Save::link(hid_t object, const char *group, const char *description, const std::string &name)
{
    const hid_t f = m_file.get();
    const std::string target = std::string(group) + "/" + name;
    flushFile(f, m_name, (target + ", new contents").c_str(), true);
    Group g;
    if (linkExists(f, group)) {
        g = openGroup(f, m_name, group);
    } else { // a file from before the group existed, or edited by hand
        g = createGroup(f, m_name, group);
        writeAttr(g.get(), Site(m_name, group), "description", std::string(description));
    }
    // Hidden names are never listed; a ".<name>.partial" is what an interrupted staged write
    // leaves. Best effort: one whose own metadata is damaged cannot be unlinked, and it
    // must not block saving.
    for (const std::string &n : linkNames(g.get(), m_name, group))
        if (isPartialName(n))
            H5Ldelete(g.get(), n.c_str(), H5P_DEFAULT);
    if (linkExists(g.get(), name))
        check(H5Ldelete(g.get(), name.c_str(), H5P_DEFAULT), ErrorCode::Io,
              m_name + ": cannot remove the old " + target);
    check(H5Olink(object, g.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), ErrorCode::Io,
          m_name + ": cannot link " + target);
    flushFile(f, m_name, (target + " linked").c_str(), true);
}

void Save::close()
{
    check(m_file.reset(), ErrorCode::Io, m_name + ": cannot close");
}

} // namespace kvwb::core::h5
