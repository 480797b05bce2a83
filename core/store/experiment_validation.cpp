// What an experiment file must look like when it is opened, and what a writer is given; the
// messages name the file and the group, dataset or attribute at fault.
#include "core/store/experiment_validation.h"

#include "core/util/error.h"

#include <algorithm>
#include <cstring>
#include <zlib.h>

namespace kvwb::core::detail {

using h5::datasetDims;
using h5::openDataset;
using h5::openGroup;
using h5::readDoubleAttr;
using h5::readIntArrayAttr;
using h5::readIntAttr;
using h5::readRows;
using h5::readStringAttr;
using h5::Site;

uint32_t crc32Of(const void *data, size_t bytes)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    const auto *p = static_cast<const Bytef *>(data);
    while (bytes > 0) {
        const size_t piece = std::min<size_t>(bytes, size_t(1) << 30);
        crc = crc32(crc, p, uInt(piece));
        p += piece;
        bytes -= piece;
    }
    return uint32_t(crc);
}

h5::Dataset createExtendible(hid_t file, const std::string &fileName, const std::string &path, hid_t type,
                             const std::vector<hsize_t> &rest, hsize_t chunkRows, int deflate)
{
    std::vector<hsize_t> dims{0}, maxDims{H5S_UNLIMITED}, chunk{chunkRows};
    for (hsize_t d : rest) {
        dims.push_back(d);
        maxDims.push_back(d);
        chunk.push_back(d);
    }
    h5::Dataspace space(H5Screate_simple(int(dims.size()), dims.data(), maxDims.data()));
    h5::PropList dcpl(H5Pcreate(H5P_DATASET_CREATE));
    const std::string what = fileName + ": cannot create dataset " + path;
    h5::check(H5Pset_chunk(dcpl.get(), int(chunk.size()), chunk.data()), ErrorCode::Internal, what);
    // Every row is written before the offsets that make it visible, so fill values would only
    // cost a write of each new chunk.
    h5::check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), ErrorCode::Internal, what);
    if (deflate > 0) {
        h5::check(H5Pset_shuffle(dcpl.get()), ErrorCode::Internal, what);
        h5::check(H5Pset_deflate(dcpl.get(), unsigned(deflate)), ErrorCode::Internal, what);
    }
    h5::PropList lcpl(H5Pcreate(H5P_LINK_CREATE));
    H5Pset_create_intermediate_group(lcpl.get(), 1);
    return h5::Dataset(
        h5::check(H5Dcreate2(file, path.c_str(), type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
                  ErrorCode::Io, what));
}

std::string joinLayers(const std::vector<int> &layers)
{
    std::string out;
    for (int l : layers)
        out += (out.empty() ? "" : ", ") + std::to_string(l);
    return out;
}

std::vector<int> resolvedLayers(const ModelInfo &m)
{
    if (!m.capturedLayers.empty())
        return m.capturedLayers;
    std::vector<int> all(size_t(std::max(m.config.numLayers, 0)));
    for (size_t i = 0; i < all.size(); ++i)
        all[i] = int(i);
    return all;
}

namespace {

// parseFloatType, or Error(Format) naming the attribute at fault.
FloatType storageAttr(const std::string &s, const std::string &where)
{
    if (const auto storage = parseFloatType(s))
        return *storage;
    throw Error(ErrorCode::Format, where + " is '" + s + "', expected f32, f16 or bf16");
}

ModelInfo readModelAttrs(hid_t group, const Site &site, ModelRole role)
{
    ModelInfo m;
    m.role = role;
    ModelConfig &c = m.config;
    c.architecture = readStringAttr(group, site, "architecture");
    c.modelType = readStringAttr(group, site, "model_type");
    const auto positive = [&](const char *name) {
        const int64_t v = readIntAttr(group, site, name);
        if (v <= 0 || v > (int64_t(1) << 30))
            throw Error(ErrorCode::Format, site.attr(name) + " is " + std::to_string(v));
        return int(v);
    };
    c.numLayers = positive("num_layers");
    c.numHeads = positive("num_heads");
    c.numKvHeads = positive("num_kv_heads");
    c.headDim = positive("head_dim");
    c.hiddenSize = positive("hidden_size");
    c.vocabSize = positive("vocab_size");
    c.ropeTheta = readDoubleAttr(group, site, "rope_theta");
    const std::string layout = readStringAttr(group, site, "rope_layout");
    if (const auto l = parseRopeLayout(layout))
        c.ropeLayout = *l;
    else
        throw Error(ErrorCode::Format, site.attr("rope_layout") + " is '" + layout + "'");
    c.ropeScaling.type = readStringAttr(group, site, "rope_scaling");
    c.ropeScaling.factor = readDoubleAttr(group, site, "rope_scaling_factor");
    m.weightsSha256 = readStringAttr(group, site, "weights_sha256");
    m.tokenizerSha256 = readStringAttr(group, site, "tokenizer_sha256");
    m.sourcePath = readStringAttr(group, site, "source_path");
    // Files written before captured_layers existed store every layer.
    if (H5Aexists(group, "captured_layers") > 0) {
        const std::vector<int64_t> layers = readIntArrayAttr(group, site, "captured_layers");
        if (layers.empty())
            throw Error(ErrorCode::Format, site.attr("captured_layers") + " is empty");
        for (size_t i = 0; i < layers.size(); ++i) {
            if (layers[i] < 0 || layers[i] >= c.numLayers || (i > 0 && layers[i] <= layers[i - 1]))
                throw Error(ErrorCode::Format, site.attr("captured_layers") + " entry " + std::to_string(i) +
                                                   " (" + std::to_string(layers[i]) +
                                                   ") is not a sorted, unique layer below num_layers " +
                                                   std::to_string(c.numLayers));
            m.capturedLayers.push_back(int(layers[i]));
        }
    } else {
        m.capturedLayers = resolvedLayers(m);
    }
    return m;
}

// Reads an offsets dataset, checks it is int64 [n], non-decreasing from 0.
std::vector<int64_t> readOffsets(hid_t ds, const std::string &fileName, const std::string &path)
{
    const std::vector<hsize_t> dims = datasetDims(ds, fileName, path);
    h5::Datatype type(H5Dget_type(ds));
    if (dims.size() != 1 || dims[0] < 1 || H5Tget_class(type.get()) != H5T_INTEGER)
        throw Error(ErrorCode::Format,
                    fileName + ": dataset " + path + " must be a non-empty 1-D integer array");
    h5::checkWholeRead(ds, fileName, path, dims, sizeof(int64_t));
    std::vector<int64_t> v(dims[0]);
    readRows(ds, fileName, path, H5T_NATIVE_INT64, 0, dims[0], v.data());
    if (v[0] != 0)
        throw Error(ErrorCode::Format, fileName + ": dataset " + path + " does not start at 0");
    for (size_t i = 1; i < v.size(); ++i)
        if (v[i] < v[i - 1])
            throw Error(ErrorCode::Format,
                        fileName + ": dataset " + path + " decreases at index " + std::to_string(i));
    return v;
}

// The root group's provenance attributes.
void readProvenance(hid_t f, const Site &root, Provenance &p)
{
    p.appVersion = readStringAttr(f, root, "app_version");
    p.gitCommit = readStringAttr(f, root, "git_commit");
    p.qtVersion = readStringAttr(f, root, "qt_version");
    p.torchVersion = readStringAttr(f, root, "torch_version");
    p.hdf5Version = readStringAttr(f, root, "hdf5_version");
    p.device = readStringAttr(f, root, "device");
    p.createdUtc = readStringAttr(f, root, "created_utc");
    p.runId = readStringAttr(f, root, "run_id");
    p.configSha256 = readStringAttr(f, root, "config_sha256");
}

// Storage options live on the KV datasets; model a's first captured layer's keys define them
// for the file.
void readStorageOptions(FileState &s)
{
    const hid_t f = s.file.get();
    const std::string &n = s.name;
    const std::string kpath = layerPath(0, s.models[0].capturedLayers.front(), "keys");
    h5::Dataset k = openDataset(f, n, kpath);
    const Site site(n, kpath);
    s.options.storage = storageAttr(readStringAttr(k.get(), site, "dtype"), site.attr("dtype"));
    const std::string form = readStringAttr(k.get(), site, "key_form");
    if (form == "pre_rope")
        s.options.keyForm = KeyForm::PreRope;
    else if (form == "post_rope")
        s.options.keyForm = KeyForm::PostRope;
    else
        throw Error(ErrorCode::Format, site.attr("key_form") + " is '" + form + "'");
    h5::PropList dcpl(H5Dget_create_plist(k.get()));
    hsize_t chunk[3] = {0, 0, 0};
    if (H5Pget_chunk(dcpl.get(), 3, chunk) == 3)
        s.options.chunkTokens = int(chunk[0]);
    s.options.compress = 0;
    const int nfilters = H5Pget_nfilters(dcpl.get());
    for (int i = 0; i < nfilters; ++i) {
        unsigned flags = 0, cd[4] = {0, 0, 0, 0};
        size_t ncd = 4;
        if (H5Pget_filter2(dcpl.get(), unsigned(i), &flags, &ncd, cd, 0, nullptr, nullptr) ==
                H5Z_FILTER_DEFLATE &&
            ncd >= 1)
            s.options.compress = int(cd[0]);
    }
}

// Opens the prompts' offsets datasets (and the datasets they index) and sets the committed prompt
// count.
void openPromptDatasets(FileState &s)
{
    const hid_t f = s.file.get();
    const std::string &n = s.name;
    // Offsets: committed prompt count = the shortest offsets dataset; a writer killed between
    // extending them leaves others at most one prompt longer.
    const auto openRagged = [&](RaggedBytes &r, const char *bytesName, const char *offsetsName) {
        r.bytesPath = std::string("/prompts/") + bytesName;
        r.offsetsPath = std::string("/prompts/") + offsetsName;
        r.bytes = openDataset(f, n, r.bytesPath);
        r.offsets = openDataset(f, n, r.offsetsPath);
        r.committed = readOffsets(r.offsets.get(), n, r.offsetsPath);
    };
    openRagged(s.text, "text", "text_offsets");
    openRagged(s.label, "label", "label_offsets");
    for (int m = 0; m < 2; ++m) {
        ModelDatasets &d = s.kv[size_t(m)];
        const std::string base = std::string("/prompts/") + roleLetter(m);
        d.ids = openDataset(f, n, base + "/ids");
        d.offsets = openDataset(f, n, base + "/offsets");
        d.committed = readOffsets(d.offsets.get(), n, base + "/offsets");
    }
    // Token spans and the alignment: all three datasets, or none (a file from before them).
    s.hasAlignment = h5::linkExists(f, "/prompts/b/align");
    if (s.hasAlignment) {
        s.align = openDataset(f, n, "/prompts/b/align");
        for (int m = 0; m < 2; ++m)
            s.kv[size_t(m)].spans = openDataset(f, n, std::string("/prompts/") + roleLetter(m) + "/spans");
    }
    size_t shortest = std::min({s.text.committed.size(), s.label.committed.size(), s.kv[0].committed.size(),
                                s.kv[1].committed.size()});
    const auto trimOffsets = [&](std::vector<int64_t> &v, const std::string &path) {
        if (v.size() > shortest + 1)
            throw Error(ErrorCode::Format, n + ": dataset " + path + " has " + std::to_string(v.size()) +
                                               " entries, other offsets datasets " +
                                               std::to_string(shortest));
        v.resize(shortest);
    };
    trimOffsets(s.text.committed, s.text.offsetsPath);
    trimOffsets(s.label.committed, s.label.offsetsPath);
    trimOffsets(s.kv[0].committed, "/prompts/a/offsets");
    trimOffsets(s.kv[1].committed, "/prompts/b/offsets");
    s.promptCount = int(shortest - 1);
}

// Checks that the 1-D dataset at path holds the `needed` entries its offsets dataset reaches.
void checkLength(const std::string &n, hid_t ds, const std::string &path, int64_t needed,
                 const std::string &offsetsPath)
{
    const std::vector<hsize_t> dims = datasetDims(ds, n, path);
    if (dims.size() != 1)
        throw Error(ErrorCode::Format, n + ": dataset " + path + " must be 1-D");
    if (int64_t(dims[0]) < needed)
        throw Error(ErrorCode::Format, n + ": dataset " + offsetsPath + " reaches " + std::to_string(needed) +
                                           " but " + path + " has only " + std::to_string(dims[0]) +
                                           " entries");
    // The committed rows were all written, so the file must store them: a damaged offset
    // cannot make a reader allocate for rows that are not there.
    h5::checkWholeRead(ds, n, path, {hsize_t(needed)}, 8);
}

// Checks model m's /prompts/<m>/spans: [tokens, 2], covering its committed tokens.
void checkSpans(const FileState &s, int m)
{
    const std::string &n = s.name;
    const ModelDatasets &d = s.kv[size_t(m)];
    const std::string base = std::string("/prompts/") + roleLetter(m);
    const std::string path = base + "/spans";
    const std::vector<hsize_t> dims = datasetDims(d.spans.get(), n, path);
    if (dims.size() != 2 || dims[1] != 2)
        throw Error(ErrorCode::Format, n + ": dataset " + path + " is not [tokens, 2]");
    if (int64_t(dims[0]) < d.committed.back())
        throw Error(ErrorCode::Format, n + ": dataset " + base + "/offsets reaches " +
                                           std::to_string(d.committed.back()) + " but " + path +
                                           " has only " + std::to_string(dims[0]) + " rows");
    h5::checkWholeRead(d.spans.get(), n, path, {hsize_t(d.committed.back()), 2}, 4);
}

// Opens and checks one KV dataset of model m (what: "keys" or "values"): its shape, its committed
// rows, its element type against its dtype attribute and that against the file's storage.
h5::Dataset openKvDataset(const FileState &s, int m, int layer, const char *what,
                          hsize_t kvCacheBytesPerDataset)
{
    const hid_t f = s.file.get();
    const std::string &n = s.name;
    const ModelDatasets &d = s.kv[size_t(m)];
    const ModelConfig &c = s.models[size_t(m)].config;
    const std::string base = std::string("/prompts/") + roleLetter(m);
    const std::string path = layerPath(m, layer, what);
    h5::Dataset ds = openDataset(f, n, path, kvCacheBytesPerDataset);
    const std::vector<hsize_t> dims = datasetDims(ds.get(), n, path);
    if (dims.size() != 3 || dims[1] != hsize_t(c.numKvHeads) || dims[2] != hsize_t(c.headDim))
        throw Error(ErrorCode::Format, n + ": dataset " + path + " is not [tokens, " +
                                           std::to_string(c.numKvHeads) + ", " + std::to_string(c.headDim) +
                                           "] as /models/" + roleLetter(m) + " num_kv_heads/head_dim say");
    if (int64_t(dims[0]) < d.committed.back())
        throw Error(ErrorCode::Format, n + ": dataset " + base + "/offsets reaches token " +
                                           std::to_string(d.committed.back()) + " but " + path +
                                           " has only " + std::to_string(dims[0]) + " rows");
    h5::checkWholeRead(ds.get(), n, path, {hsize_t(d.committed.back()), dims[1], dims[2]}, 4);
    const Site site(n, path);
    const FloatType st = storageAttr(readStringAttr(ds.get(), site, "dtype"), site.attr("dtype"));
    h5::Datatype type(H5Dget_type(ds.get()));
    const H5T_class_t cls = H5Tget_class(type.get());
    const size_t size = H5Tget_size(type.get());
    const bool typeOk = (st == FloatType::F32 && cls == H5T_FLOAT && size == 4) ||
                        (st == FloatType::F16 && cls == H5T_FLOAT && size == 2) ||
                        (st == FloatType::BF16 && cls == H5T_INTEGER && size == 2);
    if (!typeOk) {
        const std::string actual = std::string(cls == H5T_FLOAT     ? "float"
                                               : cls == H5T_INTEGER ? "integer"
                                                                    : "non-numeric") +
                                   " of " + std::to_string(size) + " bytes";
        throw Error(ErrorCode::Format, n + ": dataset " + path + " holds " + actual +
                                           " elements, but its dtype attribute says '" + floatTypeName(st) +
                                           "'");
    }
    if (st != s.options.storage)
        throw Error(ErrorCode::Format, n + ": dataset " + path + " is stored as '" + floatTypeName(st) +
                                           "', the file's storage is '" + floatTypeName(s.options.storage) +
                                           "'");
    return ds;
}

// Opens model m's checksums dataset and reads the committed prompts' rows.
void readChecksums(FileState &s, int m)
{
    const hid_t f = s.file.get();
    const std::string &n = s.name;
    ModelDatasets &d = s.kv[size_t(m)];
    // Checksums: one row per committed prompt at least (a killed writer may have written the
    // next prompt's row before its offsets).
    const std::string cpath = crcPath(m);
    d.crc = openDataset(f, n, cpath);
    const std::vector<hsize_t> cdims = datasetDims(d.crc.get(), n, cpath);
    const h5::Datatype ctype(H5Dget_type(d.crc.get()));
    const size_t layers = s.models[size_t(m)].capturedLayers.size();
    if (cdims.size() != 3 || cdims[1] != layers || cdims[2] != 2 ||
        H5Tget_class(ctype.get()) != H5T_INTEGER || H5Tget_size(ctype.get()) != 4)
        throw Error(ErrorCode::Format, n + ": dataset " + cpath + " must be uint32 [prompts, " +
                                           std::to_string(layers) + ", 2] (one CRC-32 per prompt, " +
                                           "captured layer, keys and values), not " + h5::shapeText(cdims));
    if (cdims[0] < hsize_t(s.promptCount))
        throw Error(ErrorCode::Format, n + ": dataset " + cpath + " has " + std::to_string(cdims[0]) +
                                           " rows for " + std::to_string(s.promptCount) + " prompts");
    const std::vector<hsize_t> committed{hsize_t(s.promptCount), layers, 2};
    h5::checkWholeRead(d.crc.get(), n, cpath, committed, 4);
    d.crcs.assign(size_t(s.promptCount) * layers * 2, 0);
    readRows(d.crc.get(), n, cpath, H5T_NATIVE_UINT32, 0, hsize_t(s.promptCount), d.crcs.data());
}

} // namespace

void loadState(FileState &s, hsize_t kvCacheBytesPerDataset, bool checksums)
{
    const hid_t f = s.file.get();
    const std::string &n = s.name;
    const Site root(n, "/");
    s.schema = h5::checkSchema(f, n);
    readProvenance(f, root, s.provenance);

    for (int m = 0; m < 2; ++m) {
        const std::string gpath = std::string("/models/") + roleLetter(m);
        h5::Group g = openGroup(f, n, gpath);
        s.models[size_t(m)] = readModelAttrs(g.get(), Site(n, gpath), roleOf(m));
    }
    readStorageOptions(s);
    openPromptDatasets(s);

    checkLength(n, s.text.bytes.get(), s.text.bytesPath, s.text.committed.back(), s.text.offsetsPath);
    checkLength(n, s.label.bytes.get(), s.label.bytesPath, s.label.committed.back(), s.label.offsetsPath);

    if (s.hasAlignment)
        checkLength(n, s.align.get(), "/prompts/b/align", s.kv[1].committed.back(), "/prompts/b/offsets");
    for (int m = 0; m < 2; ++m) {
        ModelDatasets &d = s.kv[size_t(m)];
        const std::string base = std::string("/prompts/") + roleLetter(m);
        checkLength(n, d.ids.get(), base + "/ids", d.committed.back(), base + "/offsets");
        if (s.hasAlignment)
            checkSpans(s, m);
        for (int layer : s.models[size_t(m)].capturedLayers) {
            for (const char *what : {"keys", "values"}) {
                h5::Dataset ds = openKvDataset(s, m, layer, what, kvCacheBytesPerDataset);
                (std::strcmp(what, "keys") == 0 ? d.keys : d.values).push_back(std::move(ds));
            }
        }
        if (checksums)
            readChecksums(s, m);
    }
}

void checkModel(const ModelInfo &m, ModelRole expectedRole)
{
    if (m.role != expectedRole)
        throw Error(ErrorCode::InvalidArgument, std::string("model info for role '") +
                                                    roleName(expectedRole) + "' has role '" +
                                                    roleName(m.role) + "'");
    const ModelConfig &c = m.config;
    if (c.numLayers <= 0 || c.numKvHeads <= 0 || c.headDim <= 0)
        throw Error(ErrorCode::InvalidArgument,
                    std::string("model ") + roleName(expectedRole) +
                        ": num_layers, num_kv_heads and head_dim must be positive");
    const std::vector<int> &layers = m.capturedLayers;
    for (size_t i = 0; i < layers.size(); ++i) {
        if (layers[i] < 0 || layers[i] >= c.numLayers)
            throw Error(ErrorCode::InvalidArgument, std::string("model ") + roleName(expectedRole) +
                                                        ": captured layer " + std::to_string(layers[i]) +
                                                        " is outside 0.." + std::to_string(c.numLayers - 1));
        if (i > 0 && layers[i] <= layers[i - 1])
            throw Error(ErrorCode::InvalidArgument, std::string("model ") + roleName(expectedRole) +
                                                        ": captured layer " + std::to_string(layers[i]) +
                                                        " is not above the one before it (the list must be "
                                                        "sorted and unique)");
    }
}

void checkSameModel(const std::string &fileName, int model, const ModelInfo &want, const ModelInfo &have)
{
    if (want.weightsSha256 != have.weightsSha256)
        throw Error(ErrorCode::Config, fileName + ": model " + roleLetter(model) + " weights fingerprint " +
                                           want.weightsSha256 + " differs from the file's " +
                                           have.weightsSha256 + "; append needs the same models");
    // the same weights with another tokenizer would put two tokenizations in one file
    if (!want.tokenizerSha256.empty() && !have.tokenizerSha256.empty() &&
        want.tokenizerSha256 != have.tokenizerSha256)
        throw Error(ErrorCode::Config, fileName + ": model " + roleLetter(model) + " tokenizer fingerprint " +
                                           want.tokenizerSha256 + " differs from the file's " +
                                           have.tokenizerSha256 + "; append needs the same tokenizers");
    const ModelConfig &wc = want.config, &hc = have.config;
    if (wc.numLayers != hc.numLayers || wc.numKvHeads != hc.numKvHeads || wc.headDim != hc.headDim)
        throw Error(ErrorCode::Config, fileName + ": model " + roleLetter(model) +
                                           " geometry (layers, kv heads, "
                                           "head dim) differs from the file's /models/" +
                                           roleLetter(model));
    const std::vector<int> wantLayers = resolvedLayers(want);
    if (wantLayers != have.capturedLayers)
        throw Error(ErrorCode::Config, fileName + ": model " + roleLetter(model) + " captured layers (" +
                                           joinLayers(wantLayers) + ") differ from the file's (" +
                                           joinLayers(have.capturedLayers) +
                                           "); append needs the same layers");
}

void checkPromptShapes(const FileState &s, const PromptRecord &prompt)
{
    const int index = s.promptCount;
    for (int m = 0; m < 2; ++m) {
        const PromptKv &p = m == 0 ? prompt.a : prompt.b;
        const ModelConfig &c = s.models[size_t(m)].config;
        const std::vector<int> &layers = s.models[size_t(m)].capturedLayers;
        const size_t expected = p.ids.size() * size_t(c.numKvHeads) * size_t(c.headDim);
        if (p.keys.size() != layers.size() || p.values.size() != layers.size())
            throw Error(ErrorCode::Shape,
                        s.name + ": prompt " + std::to_string(index) + " model " + roleLetter(m) + " has " +
                            std::to_string(p.keys.size()) + " key and " + std::to_string(p.values.size()) +
                            " value layers, expected one per captured layer (" + joinLayers(layers) + ")");
        for (size_t i = 0; i < layers.size(); ++i)
            if (p.keys[i].size() != expected || p.values[i].size() != expected)
                throw Error(ErrorCode::Shape,
                            s.name + ": prompt " + std::to_string(index) + " model " + roleLetter(m) +
                                " layer " + std::to_string(layers[i]) + " keys/values have " +
                                std::to_string(p.keys[i].size()) + "/" + std::to_string(p.values[i].size()) +
                                " floats, expected [" + std::to_string(p.ids.size()) + ", " +
                                std::to_string(c.numKvHeads) + ", " + std::to_string(c.headDim) +
                                "] = " + std::to_string(expected));
        if (!p.spans.empty() && p.spans.size() != 2 * p.ids.size())
            throw Error(ErrorCode::Shape, s.name + ": prompt " + std::to_string(index) + " model " +
                                              roleLetter(m) + " has " + std::to_string(p.spans.size()) +
                                              " span values for " + std::to_string(p.ids.size()) +
                                              " tokens, expected 2 per token or none");
    }
    const auto &al = prompt.alignment;
    if (!al.empty() && al.size() != prompt.b.ids.size())
        throw Error(ErrorCode::Shape, s.name + ": prompt " + std::to_string(index) + " alignment has " +
                                          std::to_string(al.size()) + " entries for model b's " +
                                          std::to_string(prompt.b.ids.size()) + " tokens");
    for (size_t t = 0; t < al.size(); ++t)
        if (al[t] < 0 || size_t(al[t]) >= prompt.a.ids.size())
            throw Error(ErrorCode::Shape, s.name + ": prompt " + std::to_string(index) + " alignment[" +
                                              std::to_string(t) + "] is " + std::to_string(al[t]) +
                                              ", not a token of model a's " +
                                              std::to_string(prompt.a.ids.size()));
}

} // namespace kvwb::core::detail
