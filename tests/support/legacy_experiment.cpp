#include "tests/support/legacy_experiment.h"

#include <hdf5.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace kvwb::test {

namespace fs = std::filesystem;

namespace {

// A failed HDF5 call here is a broken test set-up, not a result: stop loudly.
void check(bool ok)
{
    if (!ok) {
        std::fprintf(stderr, "downgradeToKvwb1: an HDF5 call failed\n");
        std::abort();
    }
}

std::vector<std::string> readFixedStrings(hid_t attr, hid_t type, hsize_t n)
{
    const size_t width = H5Tget_size(type);
    std::string buffer(width * n, '\0');
    if (n > 0)
        H5Aread(attr, type, buffer.data());
    std::vector<std::string> out;
    for (hsize_t i = 0; i < n; ++i)
        out.emplace_back(buffer.c_str() + i * width);
    return out;
}

// Every fixed-size string attribute rewritten variable-length (as kvwb/1 wrote them).
void downgradeAttributes(hid_t object)
{
    std::vector<std::string> names;
    H5Aiterate2(
        object, H5_INDEX_NAME, H5_ITER_INC, nullptr,
        [](hid_t, const char *name, const H5A_info_t *, void *data) -> herr_t {
            static_cast<std::vector<std::string> *>(data)->emplace_back(name);
            return 0;
        },
        &names);
    for (const std::string &name : names) {
        const hid_t a = H5Aopen(object, name.c_str(), H5P_DEFAULT);
        const hid_t type = H5Aget_type(a);
        const hid_t space = H5Aget_space(a);
        const bool isString = H5Tget_class(type) == H5T_STRING;
        const bool scalar = H5Sget_simple_extent_type(space) == H5S_SCALAR;
        const hsize_t n = hsize_t(H5Sget_simple_extent_npoints(space));
        const std::vector<std::string> values =
            isString ? readFixedStrings(a, type, n) : std::vector<std::string>{};
        H5Sclose(space);
        H5Tclose(type);
        H5Aclose(a);
        if (!isString)
            continue;
        check(H5Adelete(object, name.c_str()) >= 0);
        const hid_t vtype = H5Tcopy(H5T_C_S1);
        H5Tset_size(vtype, H5T_VARIABLE);
        H5Tset_cset(vtype, H5T_CSET_UTF8);
        const hid_t vspace = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
        const hid_t va = H5Acreate2(object, name.c_str(), vtype, vspace, H5P_DEFAULT, H5P_DEFAULT);
        std::vector<const char *> pointers;
        for (const std::string &v : values)
            pointers.push_back(v.c_str());
        if (!pointers.empty())
            check(H5Awrite(va, vtype, pointers.data()) >= 0);
        H5Aclose(va);
        H5Sclose(vspace);
        H5Tclose(vtype);
    }
}

template <typename T> std::vector<T> readAll(hid_t file, const std::string &path, hid_t memType)
{
    const hid_t ds = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
    const hid_t space = H5Dget_space(ds);
    std::vector<T> out(size_t(H5Sget_simple_extent_npoints(space)));
    if (!out.empty())
        H5Dread(ds, memType, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
    H5Sclose(space);
    H5Dclose(ds);
    return out;
}

} // namespace

void downgradeToKvwb1(const fs::path &path)
{
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    check(f >= 0);
    std::vector<std::string> objects;
    H5Ovisit2(
        f, H5_INDEX_NAME, H5_ITER_INC,
        [](hid_t, const char *name, const H5O_info_t *, void *data) -> herr_t {
            static_cast<std::vector<std::string> *>(data)->push_back(
                std::strcmp(name, ".") == 0 ? std::string("/") : "/" + std::string(name));
            return 0;
        },
        &objects, H5O_INFO_BASIC);
    for (const std::string &o : objects) {
        const hid_t id = H5Oopen(f, o.c_str(), H5P_DEFAULT);
        downgradeAttributes(id);
        H5Oclose(id);
    }
    for (const std::string &o : objects) {
        const std::string suffix = "_offsets";
        if (o.rfind("/prompts/", 0) == 0 || o.size() <= suffix.size() ||
            o.compare(o.size() - suffix.size(), suffix.size(), suffix) != 0)
            continue;
        const std::string bytesPath = o.substr(0, o.size() - suffix.size());
        const std::vector<char> bytes = readAll<char>(f, bytesPath, H5T_NATIVE_CHAR);
        const std::vector<int64_t> offsets = readAll<int64_t>(f, o, H5T_NATIVE_INT64);
        std::vector<std::string> values;
        for (size_t i = 1; i < offsets.size(); ++i)
            values.emplace_back(bytes.data() + offsets[i - 1], size_t(offsets[i] - offsets[i - 1]));
        check(H5Ldelete(f, o.c_str(), H5P_DEFAULT) >= 0);
        check(H5Ldelete(f, bytesPath.c_str(), H5P_DEFAULT) >= 0);
        const hid_t vtype = H5Tcopy(H5T_C_S1);
        H5Tset_size(vtype, H5T_VARIABLE);
        H5Tset_cset(vtype, H5T_CSET_UTF8);
        const hsize_t n = values.size();
        const hid_t space = H5Screate_simple(1, &n, nullptr);
        const hid_t ds =
            H5Dcreate2(f, bytesPath.c_str(), vtype, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        check(ds >= 0);
        std::vector<const char *> pointers;
        for (const std::string &v : values)
            pointers.push_back(v.c_str());
        if (n > 0)
            check(H5Dwrite(ds, vtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()) >= 0);
        H5Dclose(ds);
        H5Sclose(space);
        H5Tclose(vtype);
    }
    check(H5Ldelete(f, "/kv/a/crc32", H5P_DEFAULT) >= 0);
    check(H5Ldelete(f, "/kv/b/crc32", H5P_DEFAULT) >= 0);
    // the schema, already variable-length, now says kvwb/1
    check(H5Adelete(f, "schema") >= 0);
    const hid_t vtype = H5Tcopy(H5T_C_S1);
    H5Tset_size(vtype, H5T_VARIABLE);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(f, "schema", vtype, space, H5P_DEFAULT, H5P_DEFAULT);
    const char *schema = "kvwb/1";
    check(H5Awrite(a, vtype, &schema) >= 0);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(vtype);
    H5Fclose(f);
}

} // namespace kvwb::test
