#include "core/store/hdf5_handle.h"

#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
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

File openForReading(const std::filesystem::path &path)
{
    checkReadable(path);
    {
        PropList fapl = fileAccess(false);
        File f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
        if (f)
            return f;
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
    if (H5Aexists(file, "schema") <= 0)
        throw Error(ErrorCode::Format, name + ": not a kvwb experiment file (no schema attribute on /)");
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

void writeAttr(hid_t obj, const Site &site, const char *name, const std::string &value)
{
    Datatype type(check(H5Tcopy(H5T_C_S1), ErrorCode::Internal, site.attr(name)));
    H5Tset_size(type.get(), H5T_VARIABLE);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    Dataspace space(H5Screate(H5S_SCALAR));
    Attribute a(check(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), ErrorCode::Io,
                      "cannot create " + site.attr(name)));
    const char *p = value.c_str();
    check(H5Awrite(a.get(), type.get(), &p), ErrorCode::Io, "cannot write " + site.attr(name));
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
    Datatype type(check(H5Tcopy(H5T_C_S1), ErrorCode::Internal, site.attr(name)));
    H5Tset_size(type.get(), H5T_VARIABLE);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    const hsize_t n = values.size();
    Dataspace space(H5Screate_simple(1, &n, nullptr));
    Attribute a(check(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), ErrorCode::Io,
                      "cannot create " + site.attr(name)));
    std::vector<const char *> pointers;
    for (const std::string &v : values)
        pointers.push_back(v.c_str());
    if (n > 0)
        check(H5Awrite(a.get(), type.get(), pointers.data()), ErrorCode::Io,
              "cannot write " + site.attr(name));
}

Attribute openAttr(hid_t obj, const Site &site, const char *name)
{
    const htri_t exists = H5Aexists(obj, name);
    if (exists <= 0)
        throw Error(ErrorCode::Format, site.attr(name) + " is missing");
    return Attribute(
        check(H5Aopen(obj, name, H5P_DEFAULT), ErrorCode::Format, "cannot open " + site.attr(name)));
}

std::string readStringAttr(hid_t obj, const Site &site, const char *name)
{
    Attribute a = openAttr(obj, site, name);
    Datatype type(H5Aget_type(a.get()));
    if (H5Tget_class(type.get()) != H5T_STRING)
        throw Error(ErrorCode::Format, site.attr(name) + " is not a string");
    const htri_t variable = H5Tis_variable_str(type.get());
    if (variable > 0) {
        Datatype mem(H5Tcopy(H5T_C_S1));
        H5Tset_size(mem.get(), H5T_VARIABLE);
        H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
        char *p = nullptr;
        check(H5Aread(a.get(), mem.get(), &p), ErrorCode::Format, "cannot read " + site.attr(name));
        std::string value = p ? p : "";
        H5free_memory(p);
        return value;
    }
    const size_t size = H5Tget_size(type.get());
    std::string value(size, '\0');
    check(H5Aread(a.get(), type.get(), value.data()), ErrorCode::Format, "cannot read " + site.attr(name));
    value.resize(std::strlen(value.c_str()));
    return value;
}

int64_t readIntAttr(hid_t obj, const Site &site, const char *name)
{
    Attribute a = openAttr(obj, site, name);
    Datatype type(H5Aget_type(a.get()));
    if (H5Tget_class(type.get()) != H5T_INTEGER)
        throw Error(ErrorCode::Format, site.attr(name) + " is not an integer");
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
    double v = 0;
    check(H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v), ErrorCode::Format, "cannot read " + site.attr(name));
    return v;
}

std::vector<std::string> readStringArrayAttr(hid_t obj, const Site &site, const char *name)
{
    Attribute a = openAttr(obj, site, name);
    Datatype type(H5Aget_type(a.get()));
    if (H5Tget_class(type.get()) != H5T_STRING)
        throw Error(ErrorCode::Format, site.attr(name) + " is not a string array");
    Dataspace space(H5Aget_space(a.get()));
    const hssize_t n = H5Sget_simple_extent_npoints(space.get());
    if (n < 0 || H5Sget_simple_extent_ndims(space.get()) > 1)
        throw Error(ErrorCode::Format, site.attr(name) + " is not a 1-D string array");
    std::vector<std::string> values;
    if (n == 0)
        return values;
    if (H5Tis_variable_str(type.get()) > 0) {
        Datatype mem(H5Tcopy(H5T_C_S1));
        H5Tset_size(mem.get(), H5T_VARIABLE);
        H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
        std::vector<char *> pointers(size_t(n), nullptr);
        check(H5Aread(a.get(), mem.get(), pointers.data()), ErrorCode::Format,
              "cannot read " + site.attr(name));
        for (char *p : pointers) {
            values.emplace_back(p ? p : "");
            H5free_memory(p);
        }
        return values;
    }
    const size_t size = H5Tget_size(type.get());
    std::string buffer(size * size_t(n), '\0');
    check(H5Aread(a.get(), type.get(), buffer.data()), ErrorCode::Format, "cannot read " + site.attr(name));
    for (hssize_t i = 0; i < n; ++i) {
        const char *p = buffer.data() + size_t(i) * size;
        values.emplace_back(p, strnlen(p, size));
    }
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
    File f = openForReading(path);
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
    const std::string path = parent.path + "/" + name;
    Datatype type(check(H5Tcopy(H5T_C_S1), ErrorCode::Internal, parent.file + ": " + path));
    H5Tset_size(type.get(), H5T_VARIABLE);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    std::vector<const char *> pointers;
    pointers.reserve(values.size());
    for (const std::string &v : values)
        pointers.push_back(v.c_str());
    writeDataset(parent, name, type.get(), type.get(), {hsize_t(values.size())}, pointers.data());
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
    const Dataset ds = openDataset(file, name, path);
    const std::vector<hsize_t> dims = datasetDims(ds.get(), name, path);
    const Datatype type(H5Dget_type(ds.get()));
    if (dims.size() != 1 || H5Tget_class(type.get()) != H5T_STRING)
        throw Error(ErrorCode::Format,
                    name + ": dataset " + path + " must be a 1-D string array, not " + shapeText(dims));
    const size_t n = dims[0];
    std::vector<std::string> values;
    values.reserve(n);
    if (n == 0)
        return values;
    if (H5Tis_variable_str(type.get()) > 0) {
        Datatype mem(H5Tcopy(H5T_C_S1));
        H5Tset_size(mem.get(), H5T_VARIABLE);
        H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
        std::vector<char *> pointers(n, nullptr);
        readRows(ds.get(), name, path, mem.get(), 0, n, pointers.data());
        for (char *p : pointers) {
            values.emplace_back(p ? p : "");
            H5free_memory(p);
        }
        return values;
    }
    const size_t size = H5Tget_size(type.get());
    std::string buffer(size * n, '\0');
    readRows(ds.get(), name, path, type.get(), 0, n, buffer.data());
    for (size_t i = 0; i < n; ++i) {
        const char *p = buffer.data() + i * size;
        values.emplace_back(p, strnlen(p, size));
    }
    return values;
}

namespace {

// A file whose superblock still says "open for writing" was left by a killed capture or save (the
// lock the caller holds rules out a live one), and is recovered as ExperimentWriter::append does.
File openForSaving(const std::filesystem::path &path)
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

} // namespace

Save::Save(const std::filesystem::path &path) : m_name(path.string())
{
    if (::access(path.c_str(), W_OK) != 0)
        throw Error(ErrorCode::Io, m_name + ": cannot write: " + std::strerror(errno));
    m_lock = WriterLock::acquire(path);
    m_file = openForSaving(path);
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
