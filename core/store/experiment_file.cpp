// The experiment file's reader and writer: creating the skeleton, appending prompts under the
// commit protocol, recovering after a crash, reading rows back. What a file must look like when it
// is opened is checked in experiment_validation.cpp.
#include "core/store/experiment_file.h"

#include "core/model/dtype.h"
#include "core/store/experiment_validation.h"
#include "core/store/hdf5_handle.h"
#include "core/util/atomic_file.h"
#include "core/util/build_info.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <random>
#include <unistd.h>

namespace kvwb::core {

namespace fs = std::filesystem;

namespace {

using detail::checkModel;
using detail::checkPromptShapes;
using detail::checkSameModel;
using detail::crc32Of;
using detail::crcIndex;
using detail::crcPath;
using detail::createExtendible;
using detail::FileState;
using detail::joinLayers;
using detail::layerPath;
using detail::loadState;
using detail::ModelDatasets;
using detail::RaggedBytes;
using detail::resolvedLayers;
using detail::roleIndex;
using detail::roleLetter;
using h5::check;
using h5::checkReadable;
using h5::createGroup;
using h5::datasetDims;
using h5::fileAccess;
using h5::keepAttributesCompact;
using h5::openDataset;
using h5::openForReading;
using h5::readRows;
using h5::Site;
using h5::writeAttr;
using h5::WriterLock;

// Rows of ids/offsets/text per chunk. Offsets grow by one int64 per prompt; ids and text by a
// prompt's worth (hundreds of tokens or bytes), so these keep chunk counts small without making a
// partially filled chunk expensive to rewrite at every flush.
constexpr hsize_t kOffsetsChunk = 1024; // 8 KiB
constexpr hsize_t kIdsChunk = 4096;     // 16 KiB
constexpr hsize_t kBytesChunk = 16384;  // 16 KiB
constexpr hsize_t kCrcChunk = 64;       // prompts per chunk of /kv/<m>/crc32

std::string layerGroupPath(int model, int layer)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "/kv/%c/layer_%03d", roleLetter(model), layer);
    return buf;
}

std::string randomHex(int bytes)
{
    static const char *digits = "0123456789abcdef";
    std::random_device rd;
    std::string out;
    for (int i = 0; i < bytes; ++i) {
        const unsigned v = rd() & 0xffu;
        out += digits[v >> 4];
        out += digits[v & 15];
    }
    return out;
}

std::string hdf5Version()
{
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    return std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel);
}

// IEEE 754 binary16, which HDF5 1.10 has no predefined type for: sign bit 15, exponent bits 10-14
// (bias 15), mantissa bits 0-9. h5py and h5dump read it as float16.
h5::Datatype halfType()
{
    h5::Datatype t(H5Tcopy(H5T_IEEE_F32LE));
    if (!t || H5Tset_fields(t.get(), 15, 10, 5, 0, 10) < 0 || H5Tset_precision(t.get(), 16) < 0 ||
        H5Tset_size(t.get(), 2) < 0 || H5Tset_ebias(t.get(), 15) < 0)
        check(-1, ErrorCode::Internal, "cannot build the HDF5 float16 type");
    return t;
}

// The on-disk (and, since we convert ourselves, in-memory) element type of a KV dataset.
h5::Datatype kvFileType(FloatType s)
{
    switch (s) {
    case FloatType::F32:
        return h5::Datatype(H5Tcopy(H5T_IEEE_F32LE));
    case FloatType::F16:
        return halfType();
    case FloatType::BF16:
        return h5::Datatype(H5Tcopy(H5T_STD_U16LE));
    }
    return {};
}

// ---- datasets ----

// Sets the dataset to `rows` rows and writes `count` rows at `first` from buf (memType elements).
void writeRows(hid_t ds, const std::string &fileName, const std::string &path, hid_t memType, hsize_t first,
               hsize_t count, const std::vector<hsize_t> &rest, const void *buf)
{
    const std::string what = fileName + ": cannot write dataset " + path;
    std::vector<hsize_t> dims{first + count};
    dims.insert(dims.end(), rest.begin(), rest.end());
    check(H5Dset_extent(ds, dims.data()), ErrorCode::Io, what);
    if (count == 0)
        return;
    std::vector<hsize_t> start(dims.size(), 0), counts{count};
    start[0] = first;
    counts.insert(counts.end(), rest.begin(), rest.end());
    h5::Dataspace fileSpace(check(H5Dget_space(ds), ErrorCode::Io, what));
    check(H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, start.data(), nullptr, counts.data(), nullptr),
          ErrorCode::Internal, what);
    h5::Dataspace memSpace(H5Screate_simple(int(counts.size()), counts.data(), nullptr));
    check(H5Dwrite(ds, memType, memSpace.get(), fileSpace.get(), H5P_DEFAULT, buf), ErrorCode::Io, what);
}

// ---- the whole file ----

void writeModelAttrs(hid_t group, const Site &site, const ModelInfo &m, FloatType storage)
{
    const ModelConfig &c = m.config;
    writeAttr(group, site, "architecture", c.architecture);
    writeAttr(group, site, "model_type", c.modelType);
    writeAttr(group, site, "num_layers", int64_t(c.numLayers));
    writeAttr(group, site, "num_heads", int64_t(c.numHeads));
    writeAttr(group, site, "num_kv_heads", int64_t(c.numKvHeads));
    writeAttr(group, site, "head_dim", int64_t(c.headDim));
    writeAttr(group, site, "hidden_size", int64_t(c.hiddenSize));
    writeAttr(group, site, "vocab_size", int64_t(c.vocabSize));
    writeAttr(group, site, "rope_theta", c.ropeTheta);
    writeAttr(group, site, "rope_layout", std::string(ropeLayoutName(c.ropeLayout)));
    writeAttr(group, site, "rope_scaling", c.ropeScaling.type);
    writeAttr(group, site, "rope_scaling_factor", c.ropeScaling.factor);
    writeAttr(group, site, "dtype", std::string(floatTypeName(storage)));
    writeAttr(group, site, "weights_sha256", m.weightsSha256);
    writeAttr(group, site, "tokenizer_sha256", m.tokenizerSha256);
    writeAttr(group, site, "source_path", m.sourcePath);
    // Always explicit, so a reader never has to know that "empty" once meant "all".
    const std::vector<int> layers = resolvedLayers(m);
    writeAttr(group, site, "captured_layers", std::vector<int64_t>(layers.begin(), layers.end()));
}

hsize_t kvCacheBytes(const ExperimentOptions &o, const ModelConfig &c)
{
    // Room for the chunk being filled plus one more, so a prompt straddling a chunk boundary does
    // not read back the chunk it is appending to (w0 = 1 evicts fully written chunks first).
    const hsize_t chunk = hsize_t(o.chunkTokens) * hsize_t(c.numKvHeads) * hsize_t(c.headDim) * 4;
    return std::max<hsize_t>(hsize_t(1) << 20, 2 * chunk + 4096);
}

} // namespace

// ---------------------------------------------------------------------------------------------------
// Writer

struct ExperimentWriter::Impl
{
    WriterLock lock; // declared first: released after the file below is closed
    FileState s;
    bool syncToDisk = true;
    bool broken = false;
    h5::Datatype half;

    void flush(const char *stage) { h5::flushFile(s.file.get(), s.name, stage, syncToDisk); }
};

ExperimentWriter::ExperimentWriter(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
ExperimentWriter::ExperimentWriter(ExperimentWriter &&) noexcept = default;
ExperimentWriter &ExperimentWriter::operator=(ExperimentWriter &&) noexcept = default;
ExperimentWriter::~ExperimentWriter() = default;

namespace {

// Reopens path for SWMR writing and loads its state. The caller has made sure the file's status
// flags are clear (a clean close leaves them clear).
std::unique_ptr<FileState> openSwmrWriter(const fs::path &path)
{
    auto s = std::make_unique<FileState>();
    s->path = path;
    s->name = path.string();
    h5::PropList fapl = fileAccess(false);
    s->file = h5::File(check(H5Fopen(path.c_str(), H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, fapl.get()),
                             ErrorCode::Io, s->name + ": cannot open for writing"));
    return s;
}

} // namespace

ExperimentWriter ExperimentWriter::create(const fs::path &path, const ExperimentOptions &options,
                                          const Provenance &provenance, const ModelInfo &a,
                                          const ModelInfo &b)
{
    h5::prepareLibrary();
    checkModel(a, ModelRole::A);
    checkModel(b, ModelRole::B);
    if (options.compress < 0 || options.compress > 9)
        throw Error(ErrorCode::InvalidArgument,
                    "compression level must be 0..9, not " + std::to_string(options.compress));
    if (options.chunkTokens <= 0)
        throw Error(ErrorCode::InvalidArgument, "chunkTokens must be positive");
    if (options.compress > 0 && H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0)
        throw Error(ErrorCode::Unsupported, "this HDF5 library has no deflate filter");
    const std::string name = path.string();
    std::error_code ec;
    if (fs::exists(path, ec))
        throw Error(ErrorCode::InvalidArgument, name + ": exists already (append to it, or remove it first)");

    fs::path tmp = path;
    tmp += ".tmp";
    {
        h5::PropList fapl = fileAccess(false);
        h5::PropList fcpl(H5Pcreate(H5P_FILE_CREATE));
        keepAttributesCompact(fcpl.get()); // the root group's attributes
        h5::File file(check(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), ErrorCode::Io,
                            name + ": cannot create " + tmp.string()));
        TempPathGuard removeTmp(tmp);
        const hid_t f = file.get();
        const Site root(name, "/");
        Provenance p = provenance;
        p.appVersion = appVersion();
        p.gitCommit = gitCommit();
        p.hdf5Version = hdf5Version();
        p.createdUtc = text::utcNowIso8601();
        if (p.runId.empty())
            p.runId = randomHex(16);
        writeAttr(f, root, "schema", std::string(kExperimentSchema));
        writeAttr(f, root, "app_version", p.appVersion);
        writeAttr(f, root, "git_commit", p.gitCommit);
        writeAttr(f, root, "qt_version", p.qtVersion);
        writeAttr(f, root, "torch_version", p.torchVersion);
        writeAttr(f, root, "hdf5_version", p.hdf5Version);
        writeAttr(f, root, "device", p.device);
        writeAttr(f, root, "created_utc", p.createdUtc);
        writeAttr(f, root, "run_id", p.runId);
        writeAttr(f, root, "config_sha256", p.configSha256);

        createGroup(f, name, "/models");
        for (const ModelInfo *m : {&a, &b}) {
            const std::string gpath = std::string("/models/") + roleName(m->role);
            h5::Group g = createGroup(f, name, gpath);
            writeModelAttrs(g.get(), Site(name, gpath), *m, options.storage);
        }

        h5::Group prompts = createGroup(f, name, "/prompts");
        const Site promptsSite(name, "/prompts");
        writeAttr(prompts.get(), promptsSite, "description",
                  std::string("Prompt p: text bytes [text_offsets[p], text_offsets[p+1]) of text (UTF-8); "
                              "token ids [offsets[p], offsets[p+1]) of <model>/ids, which are also its rows "
                              "in /kv/<model>/layer_NNN/{keys,values}"));
        const int64_t zero = 0;
        const auto offsetsDataset = [&](const std::string &path) {
            h5::Dataset ds = createExtendible(f, name, path, H5T_STD_I64LE, {}, kOffsetsChunk, 0);
            writeRows(ds.get(), name, path, H5T_NATIVE_INT64, 0, 1, {}, &zero);
        };
        createExtendible(f, name, "/prompts/text", H5T_STD_U8LE, {}, kBytesChunk, options.compress);
        offsetsDataset("/prompts/text_offsets");
        createExtendible(f, name, "/prompts/label", H5T_STD_U8LE, {}, kBytesChunk, options.compress);
        offsetsDataset("/prompts/label_offsets");
        {
            h5::Dataset text = openDataset(f, name, "/prompts/text");
            writeAttr(text.get(), Site(name, "/prompts/text"), "encoding", std::string("utf-8"));
        }
        prompts.reset(); // every handle must be closed before the file is, or H5Fclose only defers

        createGroup(f, name, "/kv");
        const h5::Datatype kvType = kvFileType(options.storage);
        for (const ModelInfo *m : {&a, &b}) {
            const int mi = roleIndex(m->role);
            const std::string base = std::string("/prompts/") + roleName(m->role);
            createGroup(f, name, base);
            createExtendible(f, name, base + "/ids", H5T_STD_I32LE, {}, kIdsChunk, options.compress);
            {
                h5::Dataset spans = createExtendible(f, name, base + "/spans", H5T_STD_I32LE, {2}, kIdsChunk,
                                                     options.compress);
                writeAttr(spans.get(), Site(name, base + "/spans"), "layout",
                          std::string("[tokens, 2]: byte span [begin, end) of each token in its prompt's "
                                      "text; -1, -1 when unknown"));
            }
            if (m->role == ModelRole::B) {
                h5::Dataset align = createExtendible(f, name, base + "/align", H5T_STD_I32LE, {}, kIdsChunk,
                                                     options.compress);
                writeAttr(align.get(), Site(name, base + "/align"), "layout",
                          std::string("[tokens_b]: for each token of model b the index, within the prompt, "
                                      "of the model-a token its KV row pairs with; -1 throughout a prompt "
                                      "both models tokenised identically"));
            }
            offsetsDataset(base + "/offsets");
            createGroup(f, name, std::string("/kv/") + roleName(m->role));
            {
                const std::string cpath = std::string("/kv/") + roleName(m->role) + "/crc32";
                h5::Dataset crc = createExtendible(f, name, cpath, H5T_STD_U32LE,
                                                   {hsize_t(resolvedLayers(*m).size()), 2}, kCrcChunk, 0);
                writeAttr(crc.get(), Site(name, cpath), "layout",
                          std::string("[prompts, captured layers, keys|values]: CRC-32 of the stored rows"));
            }
            const ModelConfig &c = m->config;
            for (int layer : resolvedLayers(*m)) {
                createGroup(f, name, layerGroupPath(mi, layer));
                for (const char *what : {"keys", "values"}) {
                    const std::string path = layerPath(mi, layer, what);
                    h5::Dataset ds = createExtendible(f, name, path, kvType.get(),
                                                      {hsize_t(c.numKvHeads), hsize_t(c.headDim)},
                                                      hsize_t(options.chunkTokens), options.compress);
                    const Site site(name, path);
                    writeAttr(ds.get(), site, "dtype", std::string(floatTypeName(options.storage)));
                    writeAttr(ds.get(), site, "layer", int64_t(layer));
                    writeAttr(ds.get(), site, "layout", std::string("[tokens, kv_heads, head_dim]"));
                    if (std::strcmp(what, "keys") == 0)
                        writeAttr(ds.get(), site, "key_form", std::string(keyFormName(options.keyForm)));
                }
            }
        }
        const std::pair<const char *, const char *> reserved[] = {
            {"/converters", "Fitted KV converters (A to B) with their metrics: kvwb align"},
            {"/sweeps", "Converter sweep tables: kvwb sweep"},
            {"/ledgers", "Reserved: replay ledgers of cache-tier workloads, filled by later kvwb versions"},
        };
        for (const auto &[gpath, description] : reserved) {
            h5::Group g = createGroup(f, name, gpath);
            writeAttr(g.get(), Site(name, gpath), "description", std::string(description));
        }
        check(H5Fflush(f, H5F_SCOPE_GLOBAL), ErrorCode::Io, name + ": cannot write " + tmp.string());
        check(file.reset(), ErrorCode::Io, name + ": cannot write " + tmp.string());
        syncAndRename(tmp, path, name, options.syncToDisk);
        removeTmp.keep();
    }

    auto impl = std::make_unique<Impl>();
    impl->lock = WriterLock::acquire(path);
    impl->syncToDisk = options.syncToDisk;
    impl->s = std::move(*openSwmrWriter(path));
    loadState(impl->s, std::max(kvCacheBytes(options, a.config), kvCacheBytes(options, b.config)));
    impl->half = halfType();
    return ExperimentWriter(std::move(impl));
}

ExperimentWriter ExperimentWriter::append(const fs::path &path, const ModelInfo &a, const ModelInfo &b,
                                          bool syncToDisk)
{
    h5::prepareLibrary();
    checkModel(a, ModelRole::A);
    checkModel(b, ModelRole::B);
    const std::string name = path.string();
    checkReadable(path);
    if (::access(path.c_str(), W_OK) != 0)
        throw Error(ErrorCode::Io, name + ": cannot write: " + std::strerror(errno));

    // Held from before recovery until the writer closes.
    WriterLock lock = WriterLock::acquire(path);
    // A file of another kind (a knowledge graph, a converter checkpoint) is refused before it is
    // opened for writing: the recovery below would grow it by a megabyte.
    h5::checkSchema(openForReading(path, h5::PastEnd::Recover).get(), name);

    // Step 1, without SWMR: clear the flags a killed writer left, validate, compare models, and
    // drop rows past the last committed prompt so the next prompt starts from the committed end.
    {
        FileState s;
        s.path = path;
        s.name = name;
        h5::PropList fapl = fileAccess(true);
        s.file = h5::File(check(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), ErrorCode::Format,
                                name + ": cannot open as HDF5 for appending"));
        // A killed SWMR writer leaves the superblock's stored end-of-allocation (EOA) behind the
        // metadata it wrote later; allocating from that stale EOA would overwrite live structures
        // ("addr overflow" on the next write). Move the EOA past the real end of file first, as
        // `h5clear --increment` does (1 MiB, its default).
        check(H5Fincrement_filesize(s.file.get(), 1 << 20), ErrorCode::Io,
              name + ": cannot recover the end of allocated space");
        loadState(s, 0);
        for (int m = 0; m < 2; ++m)
            checkSameModel(name, m, m == 0 ? a : b, s.models[size_t(m)]);
        const auto trim = [&](hid_t ds, const std::string &path, int64_t rows) {
            std::vector<hsize_t> dims = datasetDims(ds, name, path);
            if (dims[0] != hsize_t(rows)) {
                dims[0] = hsize_t(rows);
                check(H5Dset_extent(ds, dims.data()), ErrorCode::Io, name + ": cannot trim dataset " + path);
            }
        };
        const int64_t offsetsRows = s.promptCount + 1;
        for (RaggedBytes *r : {&s.text, &s.label}) {
            trim(r->bytes.get(), r->bytesPath, r->committed.back());
            trim(r->offsets.get(), r->offsetsPath, offsetsRows);
        }
        for (int m = 0; m < 2; ++m) {
            ModelDatasets &d = s.kv[size_t(m)];
            const std::string base = std::string("/prompts/") + roleLetter(m);
            trim(d.ids.get(), base + "/ids", d.committed.back());
            if (s.hasAlignment) {
                trim(d.spans.get(), base + "/spans", d.committed.back());
                if (m == 1)
                    trim(s.align.get(), base + "/align", d.committed.back());
            }
            trim(d.offsets.get(), base + "/offsets", offsetsRows);
            const std::vector<int> &layers = s.models[size_t(m)].capturedLayers;
            trim(d.crc.get(), crcPath(m), s.promptCount);
            for (size_t i = 0; i < layers.size(); ++i) {
                trim(d.keys[i].get(), layerPath(m, layers[i], "keys"), d.committed.back());
                trim(d.values[i].get(), layerPath(m, layers[i], "values"), d.committed.back());
            }
        }
        check(H5Fflush(s.file.get(), H5F_SCOPE_GLOBAL), ErrorCode::Io, name + ": cannot write");
        s.kv = {};
        s.text = {};
        s.label = {};
        s.align = {};
        check(s.file.reset(), ErrorCode::Io, name + ": cannot close after recovery");
    }

    auto impl = std::make_unique<Impl>();
    impl->lock = std::move(lock);
    impl->syncToDisk = syncToDisk;
    impl->s = std::move(*openSwmrWriter(path));
    loadState(impl->s, 0);
    // Now that the file's chunk size is known, reopen KV datasets with a chunk cache that fits it.
    FileState &s = impl->s;
    const hsize_t cache =
        std::max(kvCacheBytes(s.options, s.models[0].config), kvCacheBytes(s.options, s.models[1].config));
    for (int m = 0; m < 2; ++m) {
        const std::vector<int> &layers = s.models[size_t(m)].capturedLayers;
        for (size_t i = 0; i < layers.size(); ++i) {
            s.kv[size_t(m)].keys[i] = openDataset(s.file.get(), name, layerPath(m, layers[i], "keys"), cache);
            s.kv[size_t(m)].values[i] =
                openDataset(s.file.get(), name, layerPath(m, layers[i], "values"), cache);
        }
    }
    impl->half = halfType();
    return ExperimentWriter(std::move(impl));
}

int ExperimentWriter::appendPrompt(const PromptRecord &prompt)
{
    if (!m_impl || !m_impl->s.file)
        throw Error(ErrorCode::InvalidArgument, "appendPrompt on a closed experiment writer");
    Impl &w = *m_impl;
    FileState &s = w.s;
    if (w.broken)
        throw Error(ErrorCode::Io, s.name + ": an earlier write failed; reopen the file to append");
    const int index = s.promptCount;

    checkPromptShapes(s, prompt);

    try {
        // Phase 1: every row of the prompt (invisible until phase 2 extends the offsets).
        std::vector<uint16_t> converted;
        for (int m = 0; m < 2; ++m) {
            const PromptKv &p = m == 0 ? prompt.a : prompt.b;
            ModelDatasets &d = s.kv[size_t(m)];
            const ModelConfig &c = s.models[size_t(m)].config;
            const hsize_t first = hsize_t(d.committed.back()), count = p.ids.size();
            const std::vector<hsize_t> rest{hsize_t(c.numKvHeads), hsize_t(c.headDim)};
            const std::vector<int> &layers = s.models[size_t(m)].capturedLayers;
            std::vector<uint32_t> crcs(layers.size() * 2);
            for (size_t i = 0; i < layers.size(); ++i) {
                for (int kind = 0; kind < 2; ++kind) {
                    const std::vector<float> &src = (kind == 0 ? p.keys : p.values)[i];
                    uint32_t &crc = crcs[crcIndex(0, i, layers.size(), kind)];
                    const hid_t ds = (kind == 0 ? d.keys : d.values)[i].get();
                    const std::string path = layerPath(m, layers[i], kind == 0 ? "keys" : "values");
                    switch (s.options.storage) {
                    case FloatType::F32:
                        writeRows(ds, s.name, path, H5T_NATIVE_FLOAT, first, count, rest, src.data());
                        crc = crc32Of(src.data(), src.size() * sizeof(float));
                        break;
                    case FloatType::F16:
                        // Converted here (round to nearest even) and written as raw binary16: HDF5's own
                        // float->half soft conversion is bit-by-bit and far slower.
                        converted.resize(src.size());
                        std::transform(src.begin(), src.end(), converted.begin(), floatToHalf);
                        writeRows(ds, s.name, path, w.half.get(), first, count, rest, converted.data());
                        crc = crc32Of(converted.data(), converted.size() * sizeof(uint16_t));
                        break;
                    case FloatType::BF16:
                        converted.resize(src.size());
                        std::transform(src.begin(), src.end(), converted.begin(), floatToBf16);
                        writeRows(ds, s.name, path, H5T_NATIVE_UINT16, first, count, rest, converted.data());
                        crc = crc32Of(converted.data(), converted.size() * sizeof(uint16_t));
                        break;
                    }
                }
            }
            writeRows(d.crc.get(), s.name, crcPath(m), H5T_NATIVE_UINT32, hsize_t(index), 1,
                      {hsize_t(layers.size()), 2}, crcs.data());
            writeRows(d.ids.get(), s.name, std::string("/prompts/") + roleLetter(m) + "/ids",
                      H5T_NATIVE_INT32, first, count, {}, p.ids.data());
            if (s.hasAlignment) {
                const std::vector<int32_t> unknown(p.spans.empty() ? 2 * p.ids.size() : 0, -1);
                writeRows(d.spans.get(), s.name, std::string("/prompts/") + roleLetter(m) + "/spans",
                          H5T_NATIVE_INT32, first, count, {2},
                          p.spans.empty() ? unknown.data() : p.spans.data());
                if (m == 1) {
                    const std::vector<int32_t> none(prompt.alignment.empty() ? p.ids.size() : 0, -1);
                    writeRows(s.align.get(), s.name, "/prompts/b/align", H5T_NATIVE_INT32, first, count, {},
                              prompt.alignment.empty() ? none.data() : prompt.alignment.data());
                }
            }
        }
        writeRows(s.text.bytes.get(), s.name, s.text.bytesPath, H5T_NATIVE_UINT8,
                  hsize_t(s.text.committed.back()), prompt.text.size(), {}, prompt.text.data());
        writeRows(s.label.bytes.get(), s.name, s.label.bytesPath, H5T_NATIVE_UINT8,
                  hsize_t(s.label.committed.back()), prompt.label.size(), {}, prompt.label.data());
        w.flush("prompt rows");

        // Phase 2: the offsets, which make the prompt visible. Rows are on disk before any of these.
        const hsize_t slot = hsize_t(index) + 1;
        std::array<int64_t, 2> ends{};
        for (int m = 0; m < 2; ++m) {
            ModelDatasets &d = s.kv[size_t(m)];
            ends[size_t(m)] = d.committed.back() + int64_t((m == 0 ? prompt.a : prompt.b).ids.size());
            writeRows(d.offsets.get(), s.name, std::string("/prompts/") + roleLetter(m) + "/offsets",
                      H5T_NATIVE_INT64, slot, 1, {}, &ends[size_t(m)]);
        }
        const int64_t labelEnd = s.label.committed.back() + int64_t(prompt.label.size());
        writeRows(s.label.offsets.get(), s.name, s.label.offsetsPath, H5T_NATIVE_INT64, slot, 1, {},
                  &labelEnd);
        const int64_t textEnd = s.text.committed.back() + int64_t(prompt.text.size());
        writeRows(s.text.offsets.get(), s.name, s.text.offsetsPath, H5T_NATIVE_INT64, slot, 1, {}, &textEnd);
        w.flush("prompt offsets");

        s.kv[0].committed.push_back(ends[0]);
        s.kv[1].committed.push_back(ends[1]);
        s.label.committed.push_back(labelEnd);
        s.text.committed.push_back(textEnd);
        ++s.promptCount;
    } catch (const Error &) {
        w.broken = true;
        throw;
    }
    return index;
}

ExperimentOptions ExperimentWriter::storage() const
{
    return m_impl->s.options;
}

int ExperimentWriter::promptCount() const
{
    return m_impl->s.promptCount;
}

int64_t ExperimentWriter::totalTokens(ModelRole model) const
{
    return m_impl->s.total(roleIndex(model));
}

const fs::path &ExperimentWriter::path() const
{
    return m_impl->s.path;
}

const std::vector<int> &ExperimentWriter::capturedLayers(ModelRole model) const
{
    return m_impl->s.models[size_t(roleIndex(model))].capturedLayers;
}

bool ExperimentWriter::storesAlignment() const
{
    return m_impl->s.hasAlignment;
}

void ExperimentWriter::close()
{
    if (!m_impl || !m_impl->s.file)
        return;
    FileState &s = m_impl->s;
    s.kv = {};
    s.text = {};
    s.label = {};
    s.align = {};
    const herr_t status = s.file.reset();
    m_impl->lock.release();
    if (status < 0 && !m_impl->broken)
        check(status, ErrorCode::Io, s.name + ": cannot close");
}

// ---------------------------------------------------------------------------------------------------
// Reader

struct ExperimentReader::Impl
{
    FileState s;
    h5::Datatype half;
    // Per model, crcIndex -> 1 once that prompt's rows of that layer and kind passed their CRC.
    mutable std::array<std::vector<uint8_t>, 2> verified;

    std::vector<float> readKv(int m, int layer, int64_t first, int64_t count, bool keys) const
    {
        const ModelConfig &c = s.models[size_t(m)].config;
        if (layer < 0 || layer >= c.numLayers)
            throw Error(ErrorCode::InvalidArgument,
                        s.name + ": model " + roleLetter(m) + " has no layer " + std::to_string(layer));
        const std::vector<int> &captured = s.models[size_t(m)].capturedLayers;
        const auto it = std::lower_bound(captured.begin(), captured.end(), layer);
        if (it == captured.end() || *it != layer)
            throw Error(ErrorCode::InvalidArgument,
                        s.name + ": layer " + std::to_string(layer) + " of model " + roleLetter(m) +
                            " was not captured (captured: " + joinLayers(captured) + ")");
        const size_t slot = size_t(it - captured.begin());
        if (first < 0 || count < 0 || first + count > s.total(m))
            throw Error(ErrorCode::InvalidArgument, s.name + ": token range [" + std::to_string(first) +
                                                        ", " + std::to_string(first + count) +
                                                        ") is outside model " + roleLetter(m) + "'s " +
                                                        std::to_string(s.total(m)) + " tokens");
        const std::string path = layerPath(m, layer, keys ? "keys" : "values");
        const ModelDatasets &d = s.kv[size_t(m)];
        const hid_t ds = (keys ? d.keys : d.values)[slot].get();
        const int kind = keys ? 0 : 1;
        const size_t rowElements = size_t(c.numKvHeads) * size_t(c.headDim);
        const bool f32 = s.options.storage == FloatType::F32;
        const size_t elementBytes = f32 ? 4 : 2;
        const hid_t memType =
            f32 ? H5T_NATIVE_FLOAT : (s.options.storage == FloatType::F16 ? half.get() : H5T_NATIVE_UINT16);

        // Every prompt the range touches is checked against its CRC-32 once per reader, so rows
        // damaged on disk are refused rather than fitted. An unchecked prompt is read whole.
        const std::vector<int64_t> &committed = d.committed;
        std::vector<uint8_t> &checked = verified[size_t(m)];
        checked.resize(d.crcs.size(), 0);
        const size_t layers = captured.size();
        int64_t spanFirst = first, spanEnd = first + count;
        size_t pa = 0, pb = 0;
        bool unchecked = false;
        if (count > 0) {
            pa = size_t(std::upper_bound(committed.begin(), committed.end(), first) - committed.begin() - 1);
            pb = size_t(std::upper_bound(committed.begin(), committed.end(), first + count - 1) -
                        committed.begin() - 1);
            for (size_t p = pa; p <= pb; ++p)
                unchecked = unchecked || !checked[crcIndex(p, slot, layers, kind)];
            if (unchecked) {
                spanFirst = committed[pa];
                spanEnd = committed[pb + 1];
            }
        }
        const size_t rowBytes = rowElements * elementBytes;
        std::vector<uint8_t> raw(size_t(spanEnd - spanFirst) * rowBytes);
        readRows(ds, s.name, path, memType, hsize_t(spanFirst), hsize_t(spanEnd - spanFirst), raw.data());
        if (unchecked) {
            for (size_t p = pa; p <= pb; ++p) {
                const size_t at = crcIndex(p, slot, layers, kind);
                if (checked[at])
                    continue;
                const uint8_t *rows = raw.data() + size_t(committed[p] - spanFirst) * rowBytes;
                const uint32_t got = crc32Of(rows, size_t(committed[p + 1] - committed[p]) * rowBytes);
                if (got != d.crcs[at]) {
                    char hex[32];
                    std::snprintf(hex, sizeof hex, "%08x, stored %08x", got, d.crcs[at]);
                    throw Error(ErrorCode::Format,
                                s.name + ": " + path + " rows " + std::to_string(committed[p]) + ".." +
                                    std::to_string(committed[p + 1] - 1) + " (model " + roleLetter(m) +
                                    ", layer " + std::to_string(layer) + ", prompt " + std::to_string(p) +
                                    ") fail their CRC-32 (computed " + hex + "): the file is damaged");
                }
                checked[at] = 1;
            }
        }
        const size_t n = size_t(count) * rowElements;
        const uint8_t *src = raw.data() + size_t(first - spanFirst) * rowBytes;
        std::vector<float> out(n);
        if (f32) {
            if (n > 0)
                std::memcpy(out.data(), src, n * sizeof(float));
        } else {
            const auto *u = reinterpret_cast<const uint16_t *>(src);
            std::transform(u, u + n, out.begin(),
                           s.options.storage == FloatType::F16 ? halfToFloat : bf16ToFloat);
        }
        // NaN or Inf is never a key or a value a model made: a damaged file or a broken capture.
        // Refused here, every reader (fitting, scoring, comparison) gets finite rows only.
        const auto bad = std::find_if(out.begin(), out.end(), [](float v) { return !std::isfinite(v); });
        if (bad != out.end()) {
            const int64_t row = first + int64_t(bad - out.begin()) / (int64_t(c.numKvHeads) * c.headDim);
            const auto prompt =
                std::upper_bound(committed.begin(), committed.end(), row) - committed.begin() - 1;
            throw Error(ErrorCode::Format, s.name + ": " + path + " holds " + std::to_string(*bad) +
                                               " at token " + std::to_string(row) + " (model " +
                                               roleLetter(m) + ", layer " + std::to_string(layer) +
                                               ", prompt " + std::to_string(prompt) + "): KV must be finite");
        }
        return out;
    }

    void checkPrompt(int index) const
    {
        if (index < 0 || index >= s.promptCount)
            throw Error(ErrorCode::InvalidArgument, s.name + ": no prompt " + std::to_string(index) +
                                                        " (file has " + std::to_string(s.promptCount) + ")");
    }

    std::string readBytes(const RaggedBytes &r, int index) const
    {
        const int64_t first = r.committed[size_t(index)], end = r.committed[size_t(index) + 1];
        std::string out(size_t(end - first), '\0');
        readRows(r.bytes.get(), s.name, r.bytesPath, H5T_NATIVE_UINT8, hsize_t(first), hsize_t(end - first),
                 out.data());
        return out;
    }
};

ExperimentReader::ExperimentReader(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
ExperimentReader::ExperimentReader(ExperimentReader &&) noexcept = default;
ExperimentReader &ExperimentReader::operator=(ExperimentReader &&) noexcept = default;
ExperimentReader::~ExperimentReader() = default;

ExperimentReader ExperimentReader::open(const fs::path &path)
{
    h5::prepareLibrary();
    auto impl = std::make_unique<Impl>();
    impl->s.path = path;
    impl->s.name = path.string();
    impl->s.file = openForReading(path, h5::PastEnd::Recover);
    loadState(impl->s, 0);
    impl->half = halfType();
    return ExperimentReader(std::move(impl));
}

const std::string &ExperimentReader::schema() const
{
    return m_impl->s.schema;
}
const Provenance &ExperimentReader::provenance() const
{
    return m_impl->s.provenance;
}
const ModelInfo &ExperimentReader::model(ModelRole role) const
{
    return m_impl->s.models[size_t(roleIndex(role))];
}
ExperimentOptions ExperimentReader::storage() const
{
    return m_impl->s.options;
}
bool ExperimentReader::storesAlignment() const
{
    return m_impl->s.hasAlignment;
}
int ExperimentReader::promptCount() const
{
    return m_impl->s.promptCount;
}
int64_t ExperimentReader::totalTokens(ModelRole model) const
{
    return m_impl->s.total(roleIndex(model));
}
const fs::path &ExperimentReader::path() const
{
    return m_impl->s.path;
}

PromptInfo ExperimentReader::prompt(int index) const
{
    m_impl->checkPrompt(index);
    const FileState &s = m_impl->s;
    PromptInfo info;
    info.text = m_impl->readBytes(s.text, index);
    info.label = m_impl->readBytes(s.label, index);
    for (int m = 0; m < 2; ++m) {
        const ModelDatasets &d = s.kv[size_t(m)];
        PromptTokens &t = m == 0 ? info.a : info.b;
        t.firstToken = d.committed[size_t(index)];
        const int64_t count = d.committed[size_t(index) + 1] - t.firstToken;
        t.ids.resize(size_t(count));
        readRows(d.ids.get(), s.name, std::string("/prompts/") + roleLetter(m) + "/ids", H5T_NATIVE_INT32,
                 hsize_t(t.firstToken), hsize_t(count), t.ids.data());
        if (!s.hasAlignment)
            continue;
        // counts come from the committed offsets, checked against every dataset's length at open
        const std::string path = std::string("/prompts/") + roleLetter(m) + "/spans";
        t.spans.resize(size_t(count) * 2);
        readRows(d.spans.get(), s.name, path, H5T_NATIVE_INT32, hsize_t(t.firstToken), hsize_t(count),
                 t.spans.data());
        if (std::all_of(t.spans.begin(), t.spans.end(), [](int32_t v) { return v == -1; })) {
            t.spans.clear();
            continue;
        }
        const int64_t textBytes = int64_t(info.text.size());
        for (size_t i = 0; i < t.spans.size(); i += 2)
            if (t.spans[i] < 0 || t.spans[i + 1] < t.spans[i] || t.spans[i + 1] > textBytes)
                throw Error(ErrorCode::Format,
                            s.name + ": " + path + " row " + std::to_string(t.firstToken + int64_t(i / 2)) +
                                " (prompt " + std::to_string(index) + ") holds [" +
                                std::to_string(t.spans[i]) + ", " + std::to_string(t.spans[i + 1]) +
                                "), not a byte span of the prompt's " + std::to_string(textBytes) +
                                "-byte text");
    }
    if (s.hasAlignment) {
        std::vector<int32_t> al(info.b.ids.size());
        readRows(s.align.get(), s.name, "/prompts/b/align", H5T_NATIVE_INT32, hsize_t(info.b.firstToken),
                 hsize_t(al.size()), al.data());
        if (!std::all_of(al.begin(), al.end(), [](int32_t v) { return v == -1; })) {
            for (size_t t = 0; t < al.size(); ++t)
                if (al[t] < 0 || size_t(al[t]) >= info.a.ids.size())
                    throw Error(ErrorCode::Format,
                                s.name + ": /prompts/b/align row " +
                                    std::to_string(info.b.firstToken + int64_t(t)) + " (prompt " +
                                    std::to_string(index) + ", token " + std::to_string(t) + ") is " +
                                    std::to_string(al[t]) + ", not one of model a's " +
                                    std::to_string(info.a.ids.size()) + " tokens of the prompt");
            info.alignment = std::move(al);
        }
    }
    return info;
}

std::vector<float> ExperimentReader::keys(ModelRole model, int layer, int prompt) const
{
    m_impl->checkPrompt(prompt);
    const int m = roleIndex(model);
    const std::vector<int64_t> &o = m_impl->s.kv[size_t(m)].committed;
    return m_impl->readKv(m, layer, o[size_t(prompt)], o[size_t(prompt) + 1] - o[size_t(prompt)], true);
}

std::vector<float> ExperimentReader::values(ModelRole model, int layer, int prompt) const
{
    m_impl->checkPrompt(prompt);
    const int m = roleIndex(model);
    const std::vector<int64_t> &o = m_impl->s.kv[size_t(m)].committed;
    return m_impl->readKv(m, layer, o[size_t(prompt)], o[size_t(prompt) + 1] - o[size_t(prompt)], false);
}

std::vector<float> ExperimentReader::keyRange(ModelRole model, int layer, int64_t firstToken,
                                              int64_t count) const
{
    return m_impl->readKv(roleIndex(model), layer, firstToken, count, true);
}

std::vector<float> ExperimentReader::valueRange(ModelRole model, int layer, int64_t firstToken,
                                                int64_t count) const
{
    return m_impl->readKv(roleIndex(model), layer, firstToken, count, false);
}

} // namespace kvwb::core
