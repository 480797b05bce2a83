#include "core/converter_store.h"

#include "core/error.h"
#include "core/hdf5_handle.h"
#include "core/text_util.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unistd.h>

#ifndef KVWB_VERSION
#define KVWB_VERSION "unknown"
#endif
#ifndef KVWB_GIT_COMMIT
#define KVWB_GIT_COMMIT "unknown"
#endif

namespace kvwb::core {

namespace fs = std::filesystem;

namespace {

std::string join(const std::vector<std::string> &items)
{
    std::string out;
    for (const std::string &s : items)
        out += (out.empty() ? "" : ", ") + s;
    return out;
}

} // namespace

int MetricTable::column(const std::string &name) const
{
    const auto it = std::find(columns.begin(), columns.end(), name);
    return it == columns.end() ? -1 : int(it - columns.begin());
}

double MetricTable::at(size_t row, const std::string &name) const
{
    const int c = column(name);
    if (c < 0)
        throw Error(ErrorCode::InvalidArgument,
                    "metric table has no column '" + name + "' (columns: " + join(columns) + ")");
    if (row >= rows.size() || size_t(c) >= rows[row].size())
        throw Error(ErrorCode::InvalidArgument, "metric table has no row " + std::to_string(row) +
                                                    " in column '" + name + "' (" +
                                                    std::to_string(rows.size()) + " rows)");
    return rows[row][size_t(c)];
}

namespace {

using h5::check;
using h5::createGroup;
using h5::datasetDims;
using h5::openDataset;
using h5::openGroup;
using h5::readIntArrayAttr;
using h5::readIntAttr;
using h5::readRows;
using h5::readStringArrayAttr;
using h5::readStringAttr;
using h5::Site;
using h5::writeAttr;

constexpr const char *kConverters = "/converters";
constexpr const char *kSweeps = "/sweeps";
constexpr const char *kPartialSuffix = ".partial";

std::string shapeText(const std::vector<hsize_t> &dims)
{
    std::string out = "[";
    for (size_t i = 0; i < dims.size(); ++i)
        out += (i ? ", " : "") + std::to_string(dims[i]);
    return out + "]";
}

// Names are HDF5 link names (no '/'); the small alphabet also keeps them safe on command lines and
// in file names. A leading '.' marks a hidden name: never listed, loaded or saved (see Save::link).
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

bool isPartialName(const std::string &name)
{
    const size_t n = std::strlen(kPartialSuffix);
    return name.size() > n + 1 && name.front() == '.' &&
           name.compare(name.size() - n, n, kPartialSuffix) == 0;
}

bool exists(hid_t file, const std::string &path)
{
    // H5Lexists fails (negative) rather than answering 0 when an intermediate group is missing.
    return H5Lexists(file, path.c_str(), H5P_DEFAULT) > 0;
}

// Link names of a group, in HDF5's name order.
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

// ---- validation, all of it before the file is opened for writing ----

void checkSettings(const std::string &where, const std::string &json)
{
    // Empty means "nothing recorded"; anything else is parsed by reports later, so refuse it now.
    if (!json.empty() && !nlohmann::json::accept(json))
        throw Error(ErrorCode::InvalidArgument, where + ": settings is not valid JSON");
}

void checkTable(const std::string &where, const MetricTable &t)
{
    for (size_t i = 0; i < t.rows.size(); ++i)
        if (t.rows[i].size() != t.columns.size())
            throw Error(ErrorCode::InvalidArgument,
                        where + " row " + std::to_string(i) + " has " + std::to_string(t.rows[i].size()) +
                            " values, expected one per column (" + std::to_string(t.columns.size()) + ")");
}

void checkMatrix(const std::string &where, const Matrix &m)
{
    if (m.rows < 0 || m.cols < 0 || m.data.size() != size_t(m.rows) * size_t(m.cols))
        throw Error(ErrorCode::InvalidArgument, where + " has " + std::to_string(m.data.size()) +
                                                    " values, expected rows x cols = " +
                                                    std::to_string(m.rows) + " x " + std::to_string(m.cols));
}

void checkMaps(const std::string &where, const char *kind, const std::vector<LinearMap> &maps, size_t count,
               int inputDim, int outputDim)
{
    if (maps.size() != count)
        throw Error(ErrorCode::InvalidArgument, where + " has " + std::to_string(maps.size()) + " " + kind +
                                                    " maps, expected " + std::to_string(count));
    for (size_t j = 0; j < maps.size(); ++j) {
        const LinearMap &m = maps[j];
        const std::string at = where + " " + kind + " map " + std::to_string(j);
        if (m.inputDim < 0 || m.outputDim < 0 || m.weight.size() != size_t(m.inputDim) * size_t(m.outputDim))
            throw Error(ErrorCode::InvalidArgument,
                        at + " weight has " + std::to_string(m.weight.size()) +
                            " floats, expected inputDim x outputDim = " + std::to_string(m.inputDim) + " x " +
                            std::to_string(m.outputDim));
        if (m.bias.size() != size_t(m.outputDim))
            throw Error(ErrorCode::InvalidArgument,
                        at + " bias has " + std::to_string(m.bias.size()) +
                            " floats, expected outputDim = " + std::to_string(m.outputDim));
        if (m.inputDim != inputDim || m.outputDim != outputDim)
            throw Error(ErrorCode::InvalidArgument,
                        at + " is [inputDim, outputDim] = [" + std::to_string(m.inputDim) + ", " +
                            std::to_string(m.outputDim) + "], the models and source layers need [" +
                            std::to_string(inputDim) + ", " + std::to_string(outputDim) + "]");
    }
}

void checkPromptList(const std::string &where, const char *field, const std::vector<int> &prompts, int count)
{
    for (size_t i = 0; i < prompts.size(); ++i)
        if (prompts[i] < 0 || prompts[i] >= count)
            throw Error(ErrorCode::InvalidArgument, where + " " + field + " entry " + std::to_string(i) +
                                                        " (" + std::to_string(prompts[i]) +
                                                        ") is not a prompt of the file (it has " +
                                                        std::to_string(count) + ")");
}

// Everything saveConverters promises to refuse, checked against the file's models.
void checkRecord(const std::string &file, const ConverterRecord &r, const ExperimentReader &reader)
{
    const std::string where = file + ": converter " + r.name;
    const ModelConfig &a = reader.model('a').config;
    const ModelConfig &b = reader.model('b').config;
    checkSettings(where, r.settingsJson);
    if (r.trainTokens < 0)
        throw Error(ErrorCode::InvalidArgument, where + " train_tokens is negative");
    checkPromptList(where, "train_prompts", r.trainPrompts, reader.promptCount());
    checkPromptList(where, "valid_prompts", r.validPrompts, reader.promptCount());
    checkPromptList(where, "test_prompts", r.testPrompts, reader.promptCount());
    if (r.layers.size() != size_t(b.numLayers))
        throw Error(ErrorCode::InvalidArgument, where + " has " + std::to_string(r.layers.size()) +
                                                    " layers, expected one per layer of model b (" +
                                                    std::to_string(b.numLayers) + ")");
    for (size_t i = 0; i < r.layers.size(); ++i) {
        const LayerConverter &l = r.layers[i];
        const std::string at = where + " layer " + std::to_string(i);
        if (l.targetLayer != int(i))
            throw Error(ErrorCode::InvalidArgument, at + " has target_layer " +
                                                        std::to_string(l.targetLayer) + ", expected " +
                                                        std::to_string(i));
        if (l.sourceLayers.empty())
            throw Error(ErrorCode::InvalidArgument, at + " source_layers is empty");
        for (size_t j = 0; j < l.sourceLayers.size(); ++j) {
            const int s = l.sourceLayers[j];
            if (s < 0 || s >= a.numLayers || (j > 0 && s <= l.sourceLayers[j - 1]))
                throw Error(ErrorCode::InvalidArgument, at + " source_layers entry " + std::to_string(j) +
                                                            " (" + std::to_string(s) +
                                                            ") is not an ascending layer of model a (0.." +
                                                            std::to_string(a.numLayers - 1) + ")");
        }
        const int sources = int(l.sourceLayers.size());
        if (l.headMatched) {
            if (a.numKvHeads != b.numKvHeads)
                throw Error(ErrorCode::InvalidArgument,
                            at + " is head_matched, but model a has " + std::to_string(a.numKvHeads) +
                                " kv heads and model b " + std::to_string(b.numKvHeads));
            checkMaps(at, "keys", l.keys, size_t(b.numKvHeads), sources * a.headDim, b.headDim);
            checkMaps(at, "values", l.values, size_t(b.numKvHeads), sources * a.headDim, b.headDim);
        } else {
            const int in = sources * a.numKvHeads * a.headDim, out = b.numKvHeads * b.headDim;
            checkMaps(at, "keys", l.keys, 1, in, out);
            checkMaps(at, "values", l.values, 1, in, out);
        }
    }
    checkTable(where + " layer metrics", r.layerMetrics);
    checkTable(where + " head metrics", r.headMetrics);
    checkMatrix(where + " cka_keys", r.ckaKeys);
    checkMatrix(where + " cka_values", r.ckaValues);
}

// ---- writing ----

// Where a save writes: an HDF5 location (the record's still unlinked root, or a group in it) and
// the path it will have once linked, for messages.
struct Place
{
    hid_t loc;
    std::string file; // the experiment's path
    std::string path; // e.g. /converters/<name>/layers/3
};

h5::PropList compactGroupCreation()
{
    h5::PropList gcpl(H5Pcreate(H5P_GROUP_CREATE));
    h5::keepAttributesCompact(gcpl.get()); // the record's root carries 10 attributes
    return gcpl;
}

h5::Group newGroup(const Place &parent, const std::string &name)
{
    const h5::PropList gcpl = compactGroupCreation();
    return h5::Group(check(H5Gcreate2(parent.loc, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT),
                           ErrorCode::Io, parent.file + ": cannot create group " + parent.path + "/" + name));
}

// A contiguous dataset of the given shape, written in one go (nothing to write when it has no
// elements: HDF5 accepts zero-sized dimensions). An empty name creates it unlinked (anonymous), to
// be linked as parent.path once complete.
h5::Dataset writeDataset(const Place &parent, const std::string &name, hid_t fileType, hid_t memType,
                         const std::vector<hsize_t> &dims, const void *data)
{
    const std::string path = name.empty() ? parent.path : parent.path + "/" + name;
    h5::Dataspace space(H5Screate_simple(int(dims.size()), dims.data(), nullptr));
    h5::Dataset ds(check(name.empty()
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

void writeInts(const Place &parent, const std::string &name, const std::vector<int> &values)
{
    writeDataset(parent, name, H5T_STD_I32LE, H5T_NATIVE_INT, {hsize_t(values.size())}, values.data());
}

h5::Dataset writeTable(const Place &parent, const std::string &name, const MetricTable &t)
{
    std::vector<double> flat;
    flat.reserve(t.rows.size() * t.columns.size());
    for (const std::vector<double> &row : t.rows)
        flat.insert(flat.end(), row.begin(), row.end());
    h5::Dataset ds = writeDataset(parent, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                                  {hsize_t(t.rows.size()), hsize_t(t.columns.size())}, flat.data());
    writeAttr(ds.get(), Site(parent.file, name.empty() ? parent.path : parent.path + "/" + name), "columns",
              t.columns);
    return ds;
}

void writeMatrix(const Place &parent, const std::string &name, const Matrix &m)
{
    writeDataset(parent, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {hsize_t(m.rows), hsize_t(m.cols)},
                 m.data.data());
}

// <kind>_weight [maps, inputDim, outputDim] f32, <kind>_bias [maps, outputDim] f32,
// <kind>_lambda [maps] f64; checkMaps made every map the same shape.
void writeMaps(const Place &layer, const std::string &kind, const std::vector<LinearMap> &maps)
{
    const hsize_t n = maps.size(), in = hsize_t(maps.front().inputDim), out = hsize_t(maps.front().outputDim);
    std::vector<float> weight, bias;
    std::vector<double> lambda;
    weight.reserve(n * in * out);
    bias.reserve(n * out);
    for (const LinearMap &m : maps) {
        weight.insert(weight.end(), m.weight.begin(), m.weight.end());
        bias.insert(bias.end(), m.bias.begin(), m.bias.end());
        lambda.push_back(m.lambda);
    }
    const h5::Dataset ds =
        writeDataset(layer, kind + "_weight", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {n, in, out}, weight.data());
    writeAttr(ds.get(), Site(layer.file, layer.path + "/" + kind + "_weight"), "layout",
              std::string("[maps, input_dim, output_dim]: y = x W + b for row vectors x"));
    writeDataset(layer, kind + "_bias", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {n, out}, bias.data());
    writeDataset(layer, kind + "_lambda", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {n}, lambda.data());
}

// Fills root (the record's group, not linked yet) with everything below it.
void writeRecord(const Place &root, const ConverterRecord &r)
{
    const Site site(root.file, root.path);
    const hid_t g = root.loc;
    writeAttr(g, site, "key_form", std::string(keyFormName(r.keyForm)));
    writeAttr(g, site, "selection", r.selection);
    writeAttr(g, site, "k", int64_t(r.k));
    writeAttr(g, site, "lambda_mode", r.lambdaMode);
    writeAttr(g, site, "per_head", int64_t(r.perHead ? 1 : 0));
    writeAttr(g, site, "settings", r.settingsJson);
    // provenance the caller left empty is this build's and this moment's
    writeAttr(g, site, "created_utc", r.createdUtc.empty() ? text::utcNowIso8601() : r.createdUtc);
    writeAttr(g, site, "app_version", r.appVersion.empty() ? std::string(KVWB_VERSION) : r.appVersion);
    writeAttr(g, site, "git_commit", r.gitCommit.empty() ? std::string(KVWB_GIT_COMMIT) : r.gitCommit);
    writeAttr(g, site, "train_tokens", int64_t(r.trainTokens));
    writeInts(root, "train_prompts", r.trainPrompts);
    writeInts(root, "valid_prompts", r.validPrompts);
    writeInts(root, "test_prompts", r.testPrompts);
    {
        const h5::Group layers = newGroup(root, "layers");
        for (const LayerConverter &l : r.layers) {
            const std::string name = std::to_string(l.targetLayer);
            const h5::Group lg = newGroup({layers.get(), root.file, root.path + "/layers"}, name);
            const Place layer{lg.get(), root.file, root.path + "/layers/" + name};
            const Site lsite(layer.file, layer.path);
            writeAttr(lg.get(), lsite, "target_layer", int64_t(l.targetLayer));
            writeAttr(lg.get(), lsite, "head_matched", int64_t(l.headMatched ? 1 : 0));
            writeAttr(lg.get(), lsite, "source_layers",
                      std::vector<int64_t>(l.sourceLayers.begin(), l.sourceLayers.end()));
            writeMaps(layer, "keys", l.keys);
            writeMaps(layer, "values", l.values);
        }
    }
    const h5::Group mg = newGroup(root, "metrics");
    const Place metrics{mg.get(), root.file, root.path + "/metrics"};
    writeTable(metrics, "layers", r.layerMetrics);
    writeTable(metrics, "heads", r.headMetrics);
    writeMatrix(metrics, "cka_keys", r.ckaKeys);
    writeMatrix(metrics, "cka_values", r.ckaValues);
}

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
    explicit Save(const fs::path &path) : m_name(path.string())
    {
        if (::access(path.c_str(), W_OK) != 0)
            throw Error(ErrorCode::Io, m_name + ": cannot write: " + std::strerror(errno));
        m_lock = h5::WriterLock::acquire(path);
        m_file = open(path);
    }

    hid_t file() const { return m_file.get(); }

    // Makes object (complete, unlinked) group/<name>, replacing what had that name.
    void link(hid_t object, const char *group, const char *description, const std::string &name)
    {
        const hid_t f = m_file.get();
        const std::string target = std::string(group) + "/" + name;
        h5::flushFile(f, m_name, (target + ", new contents").c_str(), true);
        h5::Group g;
        if (exists(f, group)) {
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
        if (exists(g.get(), name))
            check(H5Ldelete(g.get(), name.c_str(), H5P_DEFAULT), ErrorCode::Io,
                  m_name + ": cannot remove the old " + target);
        check(H5Olink(object, g.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), ErrorCode::Io,
              m_name + ": cannot link " + target);
        h5::flushFile(f, m_name, (target + " linked").c_str(), true);
    }

    // Closes the file; every object handle must be closed before, or HDF5 only defers the close.
    void close() { check(m_file.reset(), ErrorCode::Io, m_name + ": cannot close"); }

private:
    // A file whose superblock still says "open for writing" was left by a killed capture or save
    // (the lock we hold rules out a live one), and is recovered as ExperimentWriter::append does.
    static h5::File open(const fs::path &path)
    {
        {
            const h5::PropList fapl = h5::fileAccess(false);
            h5::File f(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()));
            if (f)
                return f;
        }
        const h5::PropList fapl = h5::fileAccess(true);
        h5::File f(check(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), ErrorCode::Io,
                         path.string() + ": cannot open for writing"));
        // The stored end of allocation can lag behind metadata the killed writer wrote; allocating
        // from it would overwrite live structures.
        check(H5Fincrement_filesize(f.get(), 1 << 20), ErrorCode::Io,
              path.string() + ": cannot recover the end of allocated space");
        return f;
    }

    std::string m_name;
    h5::WriterLock m_lock; // declared before the file: released after it is closed
    h5::File m_file;
};

// ---- reading ----

struct Dims
{
    h5::Dataset ds;
    std::vector<hsize_t> dims;
};

// Opens path and checks its rank (and element class: float, or integer when integer is set).
Dims openArray(hid_t file, const std::string &name, const std::string &path, size_t rank, bool integer)
{
    Dims d{openDataset(file, name, path), {}};
    d.dims = datasetDims(d.ds.get(), name, path);
    h5::Datatype type(H5Dget_type(d.ds.get()));
    const H5T_class_t cls = H5Tget_class(type.get());
    if (d.dims.size() != rank || (integer ? cls != H5T_INTEGER : (cls != H5T_FLOAT && cls != H5T_INTEGER)))
        throw Error(ErrorCode::Format, name + ": dataset " + path + " must be a " + std::to_string(rank) +
                                           "-D " + (integer ? "integer" : "numeric") + " array, not " +
                                           shapeText(d.dims));
    return d;
}

std::vector<int> readInts(hid_t file, const std::string &name, const std::string &path)
{
    Dims d = openArray(file, name, path, 1, true);
    std::vector<int> v(d.dims[0]);
    readRows(d.ds.get(), name, path, H5T_NATIVE_INT, 0, d.dims[0], v.data());
    return v;
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

Matrix readMatrix(hid_t file, const std::string &name, const std::string &path)
{
    Dims d = openArray(file, name, path, 2, false);
    Matrix m;
    m.rows = int(d.dims[0]);
    m.cols = int(d.dims[1]);
    m.data.resize(d.dims[0] * d.dims[1]);
    readRows(d.ds.get(), name, path, H5T_NATIVE_DOUBLE, 0, d.dims[0], m.data.data());
    return m;
}

std::vector<LinearMap> readMaps(hid_t file, const std::string &name, const std::string &group,
                                const std::string &kind)
{
    const std::string wpath = group + "/" + kind + "_weight", bpath = group + "/" + kind + "_bias",
                      lpath = group + "/" + kind + "_lambda";
    Dims w = openArray(file, name, wpath, 3, false);
    Dims b = openArray(file, name, bpath, 2, false);
    Dims l = openArray(file, name, lpath, 1, false);
    const hsize_t n = w.dims[0], in = w.dims[1], out = w.dims[2];
    if (n == 0)
        throw Error(ErrorCode::Format, name + ": dataset " + wpath + " holds no maps");
    const auto expect = [&](const Dims &d, const std::string &path, const std::vector<hsize_t> &want) {
        if (d.dims != want)
            throw Error(ErrorCode::Format, name + ": dataset " + path + " is " + shapeText(d.dims) +
                                               ", expected " + shapeText(want) + " to match " + wpath + " " +
                                               shapeText(w.dims));
    };
    expect(b, bpath, {n, out});
    expect(l, lpath, {n});
    std::vector<float> weight(n * in * out), bias(n * out);
    std::vector<double> lambda(n);
    readRows(w.ds.get(), name, wpath, H5T_NATIVE_FLOAT, 0, n, weight.data());
    readRows(b.ds.get(), name, bpath, H5T_NATIVE_FLOAT, 0, n, bias.data());
    readRows(l.ds.get(), name, lpath, H5T_NATIVE_DOUBLE, 0, n, lambda.data());
    std::vector<LinearMap> maps(n);
    for (hsize_t j = 0; j < n; ++j) {
        LinearMap &m = maps[j];
        m.inputDim = int(in);
        m.outputDim = int(out);
        m.lambda = lambda[j];
        m.weight.assign(weight.begin() + ptrdiff_t(j * in * out),
                        weight.begin() + ptrdiff_t((j + 1) * in * out));
        m.bias.assign(bias.begin() + ptrdiff_t(j * out), bias.begin() + ptrdiff_t((j + 1) * out));
    }
    return maps;
}

// Layer group names are decimal target layers without leading zeros.
int parseLayerName(const std::string &s)
{
    if (s.empty() || s.size() > 9 ||
        !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        (s.size() > 1 && s[0] == '0'))
        return -1;
    return std::stoi(s);
}

LayerConverter readLayer(hid_t file, const std::string &name, const std::string &path, int index)
{
    LayerConverter l;
    {
        h5::Group g = openGroup(file, name, path);
        const Site site(name, path);
        l.targetLayer = int(readIntAttr(g.get(), site, "target_layer"));
        if (l.targetLayer != index)
            throw Error(ErrorCode::Format,
                        site.attr("target_layer") + " is " + std::to_string(l.targetLayer));
        l.headMatched = readIntAttr(g.get(), site, "head_matched") != 0;
        for (int64_t s : readIntArrayAttr(g.get(), site, "source_layers"))
            l.sourceLayers.push_back(int(s));
    }
    l.keys = readMaps(file, name, path, "keys");
    l.values = readMaps(file, name, path, "values");
    const std::string kpath = path + "/keys_weight";
    if (l.keys.size() != l.values.size() || l.keys.front().inputDim != l.values.front().inputDim ||
        l.keys.front().outputDim != l.values.front().outputDim)
        throw Error(ErrorCode::Format,
                    name + ": datasets " + kpath + " and " + path + "/values_weight disagree in shape");
    if (!l.headMatched && l.keys.size() != 1)
        throw Error(ErrorCode::Format, name + ": dataset " + kpath + " holds " +
                                           std::to_string(l.keys.size()) +
                                           " maps, but head_matched is 0 (one map expected)");
    if (l.sourceLayers.empty() || l.keys.front().inputDim % int(l.sourceLayers.size()) != 0)
        throw Error(ErrorCode::Format, name + ": dataset " + kpath + " input dimension " +
                                           std::to_string(l.keys.front().inputDim) +
                                           " is not a multiple of the " +
                                           std::to_string(l.sourceLayers.size()) + " source layers");
    return l;
}

// Names under group (hidden ones skipped), sorted; empty when the group does not exist.
std::vector<std::string> visibleNames(hid_t file, const std::string &name, const char *group)
{
    if (!exists(file, group))
        return {};
    const h5::Group g = openGroup(file, name, group);
    std::vector<std::string> names;
    for (std::string &n : linkNames(g.get(), name, group))
        if (!n.empty() && n.front() != '.')
            names.push_back(std::move(n));
    std::sort(names.begin(), names.end());
    return names;
}

// Opens a kvwb experiment read-only (also one a capture is writing or a killed capture left).
h5::File openExperiment(const fs::path &path)
{
    h5::prepareLibrary();
    h5::File f = h5::openForReading(path);
    h5::checkSchema(f.get(), path.string());
    return f;
}

// Throws InvalidArgument naming the file and the missing object (and what there is instead).
void requireObject(hid_t file, const std::string &name, const char *group, const char *what,
                   const std::string &object)
{
    if (exists(file, std::string(group) + "/" + object))
        return;
    const std::vector<std::string> present = visibleNames(file, name, group);
    throw Error(ErrorCode::InvalidArgument,
                name + ": no " + what + " '" + object + "' (" + group + " holds " +
                    (present.empty() ? std::string("none") : join(present)) + ")");
}

} // namespace

// ---------------------------------------------------------------------------------------------------

void saveConverters(const fs::path &experiment, const ConverterRecord &record)
{
    h5::prepareLibrary();
    const std::string file = experiment.string();
    checkName(file, "converter", record.name);
    {
        // Closed before writing: HDF5 will not open a file for writing that this process reads.
        const ExperimentReader reader = ExperimentReader::open(experiment);
        checkRecord(file, record, reader);
    }
    Save save(experiment);
    const std::string target = std::string(kConverters) + "/" + record.name;
    {
        const h5::PropList gcpl = compactGroupCreation();
        const h5::Group root(check(H5Gcreate_anon(save.file(), gcpl.get(), H5P_DEFAULT), ErrorCode::Io,
                                   file + ": cannot create group " + target));
        writeRecord({root.get(), file, target}, record);
        save.link(root.get(), kConverters,
                  "Fitted KV converters (A to B), one group per converter (docs/experiment-format.md)",
                  record.name);
    }
    save.close();
}

std::vector<std::string> listConverters(const fs::path &experiment)
{
    const h5::File f = openExperiment(experiment);
    return visibleNames(f.get(), experiment.string(), kConverters);
}

ConverterRecord loadConverters(const fs::path &experiment, const std::string &name)
{
    const std::string file = experiment.string();
    checkName(file, "converter", name);
    const h5::File f = openExperiment(experiment);
    const hid_t fid = f.get();
    requireObject(fid, file, kConverters, "converter", name);
    const std::string base = std::string(kConverters) + "/" + name;

    ConverterRecord r;
    r.name = name;
    {
        const h5::Group g = openGroup(fid, file, base);
        const Site site(file, base);
        const std::string form = readStringAttr(g.get(), site, "key_form");
        if (form == keyFormName(KeyForm::PreRope))
            r.keyForm = KeyForm::PreRope;
        else if (form == keyFormName(KeyForm::PostRope))
            r.keyForm = KeyForm::PostRope;
        else
            throw Error(ErrorCode::Format, site.attr("key_form") + " is '" + form + "'");
        r.selection = readStringAttr(g.get(), site, "selection");
        r.k = int(readIntAttr(g.get(), site, "k"));
        r.lambdaMode = readStringAttr(g.get(), site, "lambda_mode");
        r.perHead = readIntAttr(g.get(), site, "per_head") != 0;
        r.settingsJson = readStringAttr(g.get(), site, "settings");
        r.createdUtc = readStringAttr(g.get(), site, "created_utc");
        r.appVersion = readStringAttr(g.get(), site, "app_version");
        r.gitCommit = readStringAttr(g.get(), site, "git_commit");
        r.trainTokens = readIntAttr(g.get(), site, "train_tokens");
    }
    r.trainPrompts = readInts(fid, file, base + "/train_prompts");
    r.validPrompts = readInts(fid, file, base + "/valid_prompts");
    r.testPrompts = readInts(fid, file, base + "/test_prompts");

    const std::string layersPath = base + "/layers";
    std::vector<int> indices;
    {
        const h5::Group g = openGroup(fid, file, layersPath);
        for (const std::string &n : linkNames(g.get(), file, layersPath)) {
            const int index = parseLayerName(n);
            if (index < 0)
                throw Error(ErrorCode::Format,
                            file + ": group " + layersPath + " holds '" + n + "', not a decimal layer index");
            indices.push_back(index);
        }
    }
    std::sort(indices.begin(), indices.end());
    for (size_t i = 0; i < indices.size(); ++i)
        if (indices[i] != int(i))
            throw Error(ErrorCode::Format, file + ": group " + layersPath + " lacks layer " +
                                               std::to_string(i) + " (it holds " +
                                               std::to_string(indices.size()) + " layers)");
    for (int i : indices)
        r.layers.push_back(readLayer(fid, file, layersPath + "/" + std::to_string(i), i));

    r.layerMetrics = readTable(fid, file, base + "/metrics/layers");
    r.headMetrics = readTable(fid, file, base + "/metrics/heads");
    r.ckaKeys = readMatrix(fid, file, base + "/metrics/cka_keys");
    r.ckaValues = readMatrix(fid, file, base + "/metrics/cka_values");
    return r;
}

void saveTable(const fs::path &experiment, const std::string &name, const MetricTable &table,
               const std::string &settingsJson)
{
    h5::prepareLibrary();
    const std::string file = experiment.string();
    checkName(file, "table", name);
    const std::string where = file + ": table " + name;
    checkTable(where, table);
    checkSettings(where, settingsJson);
    openExperiment(experiment); // a kvwb experiment, checked read-only before it is opened for writing
    Save save(experiment);
    {
        const std::string target = std::string(kSweeps) + "/" + name;
        const h5::Dataset ds = writeTable({save.file(), file, target}, "", table);
        writeAttr(ds.get(), Site(file, target), "settings", settingsJson);
        save.link(ds.get(), kSweeps,
                  "Sweep results: one [rows, columns] float64 table per sweep (docs/experiment-format.md)",
                  name);
    }
    save.close();
}

std::vector<std::string> listTables(const fs::path &experiment)
{
    const h5::File f = openExperiment(experiment);
    return visibleNames(f.get(), experiment.string(), kSweeps);
}

MetricTable loadTable(const fs::path &experiment, const std::string &name, std::string *settingsJson)
{
    const std::string file = experiment.string();
    checkName(file, "table", name);
    const h5::File f = openExperiment(experiment);
    requireObject(f.get(), file, kSweeps, "table", name);
    const std::string path = std::string(kSweeps) + "/" + name;
    MetricTable t = readTable(f.get(), file, path);
    if (settingsJson) {
        const h5::Dataset ds = openDataset(f.get(), file, path);
        *settingsJson = readStringAttr(ds.get(), Site(file, path), "settings");
    }
    return t;
}

} // namespace kvwb::core
