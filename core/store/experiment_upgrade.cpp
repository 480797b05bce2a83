#include "core/store/experiment_upgrade.h"

#include "core/store/experiment_file.h"
#include "core/store/experiment_validation.h"
#include "core/store/hdf5_handle.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace kvwb::core {

namespace fs = std::filesystem;

namespace {

using h5::check;

bool isVariableString(hid_t type)
{
    return H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0;
}

// kvwb/1's variable-length strings, read as HDF5 stores them (the one place kvwb still does).
// read: H5Aread or H5Dread of the whole object into the given memory type and buffer.
template <typename Read>
std::vector<std::string> readVariable(hid_t fileType, hsize_t count, const std::string &what, Read read)
{
    h5::Datatype mem(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(fileType));
    std::vector<char *> pointers(size_t(count), nullptr);
    if (count > 0)
        check(read(mem.get(), pointers.data()), ErrorCode::Format, "cannot read " + what);
    std::vector<std::string> values;
    values.reserve(pointers.size());
    for (char *p : pointers) {
        values.emplace_back(p ? p : "");
        H5free_memory(p);
    }
    return values;
}

struct Object
{
    std::string path;
    H5O_type_t type;
};

std::vector<Object> allObjects(hid_t file, const std::string &name)
{
    std::vector<Object> objects;
    const auto visit = [](hid_t, const char *path, const H5O_info_t *info, void *data) -> herr_t {
        static_cast<std::vector<Object> *>(data)->push_back(
            {std::strcmp(path, ".") == 0 ? std::string("/") : "/" + std::string(path), info->type});
        return 0;
    };
    check(H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, visit, &objects, H5O_INFO_BASIC), ErrorCode::Format,
          name + ": cannot list its objects");
    return objects;
}

std::vector<std::string> attributeNames(hid_t object, const std::string &what)
{
    std::vector<std::string> names;
    const auto visit = [](hid_t, const char *attr, const H5A_info_t *, void *data) -> herr_t {
        static_cast<std::vector<std::string> *>(data)->emplace_back(attr);
        return 0;
    };
    check(H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, nullptr, visit, &names), ErrorCode::Format,
          "cannot list the attributes of " + what);
    return names;
}

// Every variable-length string attribute of object, rewritten fixed-size (scalar stays scalar).
int upgradeAttributes(hid_t object, const h5::Site &site)
{
    int rewritten = 0;
    for (const std::string &attr : attributeNames(object, site.file() + ": " + site.object())) {
        bool scalar = true;
        std::vector<std::string> values;
        {
            const h5::Attribute a(check(H5Aopen(object, attr.c_str(), H5P_DEFAULT), ErrorCode::Format,
                                        "cannot open " + site.attr(attr.c_str())));
            const h5::Datatype type(H5Aget_type(a.get()));
            if (!isVariableString(type.get()))
                continue;
            const h5::Dataspace space(H5Aget_space(a.get()));
            scalar = H5Sget_simple_extent_type(space.get()) == H5S_SCALAR;
            const hssize_t n = H5Sget_simple_extent_npoints(space.get());
            values = readVariable(type.get(), hsize_t(std::max<hssize_t>(n, 0)), site.attr(attr.c_str()),
                                  [&](hid_t mem, char **buf) { return H5Aread(a.get(), mem, buf); });
        }
        check(H5Adelete(object, attr.c_str()), ErrorCode::Io, "cannot rewrite " + site.attr(attr.c_str()));
        if (scalar)
            h5::writeAttr(object, site, attr.c_str(), values.empty() ? std::string() : values.front());
        else
            h5::writeAttr(object, site, attr.c_str(), values);
        ++rewritten;
    }
    return rewritten;
}

// A variable-length string dataset, rewritten as writeStrings' bytes + offsets under the same name.
void upgradeStringDataset(hid_t file, const std::string &name, const std::string &path)
{
    std::vector<std::string> values;
    {
        const h5::Dataset ds(check(H5Dopen2(file, path.c_str(), H5P_DEFAULT), ErrorCode::Format,
                                   name + ": cannot open dataset " + path));
        const h5::Datatype type(H5Dget_type(ds.get()));
        const h5::Dataspace space(H5Dget_space(ds.get()));
        const hssize_t n = H5Sget_simple_extent_npoints(space.get());
        values = readVariable(type.get(), hsize_t(std::max<hssize_t>(n, 0)), name + ": dataset " + path,
                              [&](hid_t mem, char **buf) {
                                  return H5Dread(ds.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
                              });
    }
    check(H5Ldelete(file, path.c_str(), H5P_DEFAULT), ErrorCode::Io,
          name + ": cannot rewrite dataset " + path);
    const size_t slash = path.rfind('/');
    const std::string parent = slash == 0 ? "/" : path.substr(0, slash);
    const h5::Group g = h5::openGroup(file, name, parent);
    h5::writeStrings(h5::Place{g.get(), name, parent}, path.substr(slash + 1), values);
}

// /kv/<m>/crc32 for every committed prompt, from the rows as stored.
int addChecksums(detail::FileState &s)
{
    const hid_t f = s.file.get();
    for (int m = 0; m < 2; ++m) {
        const std::string cpath = detail::crcPath(m);
        if (h5::linkExists(f, cpath))
            check(H5Ldelete(f, cpath.c_str(), H5P_DEFAULT), ErrorCode::Io,
                  s.name + ": cannot replace " + cpath);
        const detail::ModelDatasets &d = s.kv[size_t(m)];
        const std::vector<int> &layers = s.models[size_t(m)].capturedLayers;
        const ModelConfig &c = s.models[size_t(m)].config;
        std::vector<uint32_t> crcs(size_t(s.promptCount) * layers.size() * 2);
        std::vector<uint8_t> rows;
        for (size_t i = 0; i < layers.size(); ++i) {
            for (int kind = 0; kind < 2; ++kind) {
                const hid_t ds = (kind == 0 ? d.keys : d.values)[i].get();
                const std::string path = detail::layerPath(m, layers[i], kind == 0 ? "keys" : "values");
                const h5::Datatype type(H5Dget_type(ds)); // read as stored: the checksum is of those bytes
                const size_t rowBytes = size_t(c.numKvHeads) * size_t(c.headDim) * H5Tget_size(type.get());
                for (int p = 0; p < s.promptCount; ++p) {
                    const int64_t first = d.committed[size_t(p)], count = d.committed[size_t(p) + 1] - first;
                    rows.resize(size_t(count) * rowBytes);
                    h5::readRows(ds, s.name, path, type.get(), hsize_t(first), hsize_t(count), rows.data());
                    crcs[detail::crcIndex(size_t(p), i, layers.size(), kind)] =
                        detail::crc32Of(rows.data(), rows.size());
                }
            }
        }
        const h5::Dataset crc =
            detail::createExtendible(f, s.name, cpath, H5T_STD_U32LE, {hsize_t(layers.size()), 2}, 64, 0);
        const hsize_t dims[3] = {hsize_t(s.promptCount), hsize_t(layers.size()), 2};
        check(H5Dset_extent(crc.get(), dims), ErrorCode::Io, s.name + ": cannot write dataset " + cpath);
        if (!crcs.empty())
            check(H5Dwrite(crc.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, crcs.data()),
                  ErrorCode::Io, s.name + ": cannot write dataset " + cpath);
        h5::writeAttr(crc.get(), h5::Site(s.name, cpath), "layout",
                      std::string("[prompts, captured layers, keys|values]: CRC-32 of the stored rows"));
    }
    return s.promptCount;
}

} // namespace

UpgradeResult upgradeExperiment(const fs::path &path, bool syncToDisk)
{
    h5::prepareLibrary();
    const std::string name = path.string();
    h5::checkReadable(path);
    if (::access(path.c_str(), W_OK) != 0)
        throw Error(ErrorCode::Io, name + ": cannot write: " + std::strerror(errno));
    const h5::WriterLock lock = h5::WriterLock::acquire(path);

    UpgradeResult result;
    {
        const h5::File f = h5::openForReading(path, h5::PastEnd::Recover);
        if (H5Aexists(f.get(), "schema") <= 0)
            throw Error(ErrorCode::Format, name + ": not a kvwb experiment file (no schema attribute on /)");
        const h5::Attribute a(check(H5Aopen(f.get(), "schema", H5P_DEFAULT), ErrorCode::Format,
                                    name + ": cannot open attribute schema of /"));
        const h5::Datatype type(H5Aget_type(a.get()));
        if (!isVariableString(type.get())) {
            result.fromSchema = h5::checkSchema(f.get(), name); // kvwb/2 already, or the reason not
            return result;
        }
        const std::vector<std::string> schema =
            readVariable(type.get(), 1, name + ": attribute schema of /",
                         [&](hid_t mem, char **buf) { return H5Aread(a.get(), mem, buf); });
        if (schema.front() != "kvwb/1")
            throw Error(ErrorCode::Format,
                        name + ": schema '" + schema.front() + "' is not one kvwb upgrade knows (kvwb/1)");
        result.fromSchema = schema.front();
    }

    fs::path tmp = path;
    tmp += ".upgrade.tmp";
    std::error_code ec;
    fs::copy_file(path, tmp, fs::copy_options::overwrite_existing, ec);
    if (ec)
        throw Error(ErrorCode::Io, name + ": cannot copy to " + tmp.string() + ": " + ec.message());
    TempPathGuard removeTmp(tmp);

    {
        detail::FileState s;
        s.path = path;
        s.name = name;
        s.file = h5::openForUpdate(tmp);
        const hid_t f = s.file.get();
        std::vector<std::string> stringDatasets;
        for (const Object &o : allObjects(f, name)) {
            const hid_t id = H5Oopen(f, o.path.c_str(), H5P_DEFAULT);
            check(id, ErrorCode::Format, name + ": cannot open " + o.path);
            struct Close
            {
                hid_t id;
                ~Close() { H5Oclose(id); }
            } close{id};
            result.attributes += upgradeAttributes(id, h5::Site(name, o.path));
            if (o.type == H5O_TYPE_DATASET) {
                const h5::Datatype type(H5Dget_type(id));
                if (isVariableString(type.get()))
                    stringDatasets.push_back(o.path);
            }
        }
        for (const std::string &ds : stringDatasets)
            upgradeStringDataset(f, name, ds);
        result.stringDatasets = int(stringDatasets.size());
        check(H5Adelete(f, "schema"), ErrorCode::Io, name + ": cannot rewrite attribute schema of /");
        h5::writeAttr(f, h5::Site(name, "/"), "schema", std::string(kExperimentSchema));

        detail::loadState(s, 0, /*checksums=*/false);
        result.checksummedPrompts = addChecksums(s);
        check(H5Fflush(f, H5F_SCOPE_GLOBAL), ErrorCode::Io, name + ": cannot write " + tmp.string());
        s.kv = {};
        s.text = {};
        s.label = {};
        check(s.file.reset(), ErrorCode::Io, name + ": cannot write " + tmp.string());
    }
    {
        // The copy must read back as a kvwb/2 experiment before it replaces the original.
        detail::FileState verify;
        verify.path = tmp;
        verify.name = name;
        verify.file = h5::openForReading(tmp);
        detail::loadState(verify, 0);
    }
    syncAndRename(tmp, path, name, syncToDisk);
    removeTmp.keep();
    result.upgraded = true;
    return result;
}

} // namespace kvwb::core
