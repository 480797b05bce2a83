#include "core/store/converter_store.h"

#include "core/store/hdf5_handle.h"
#include "core/util/build_info.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <algorithm>
#include <limits>

namespace kvwb::core {

KvMap identityMap(int dim)
{
    KvMap s;
    s.inputDim = s.outputDim = dim;
    s.weight.assign(size_t(dim) * size_t(dim), 0.0f);
    for (int i = 0; i < dim; ++i)
        s.weight[size_t(i) * size_t(dim) + size_t(i)] = 1.0f;
    s.bias.assign(size_t(dim), 0.0f);
    return s;
}

int64_t KvMap::parameterCount() const
{
    const int64_t in = inputDim, out = outputDim;
    int64_t n = out; // bias
    n += rank > 0 ? int64_t(rank) * (in + out) : in * out;
    if (hidden > 0)
        n += int64_t(hidden) * (in + 1 + out);
    return n;
}

ConverterFamily KvMap::family() const
{
    if (rank > 0)
        return ConverterFamily::LowRank;
    if (hidden > 0)
        return ConverterFamily::Mlp;
    return ConverterFamily::Ridge;
}

void checkTokenFeatures(const TokenFeatures &f, const std::string &where)
{
    if (f.window < 0 || f.window > 4)
        throw Error(ErrorCode::InvalidArgument,
                    where + ": token feature window " + std::to_string(f.window) + " is outside 0..4");
    if (f.offsets != 0 && (f.offsets < 2 || f.offsets > 64))
        throw Error(ErrorCode::InvalidArgument, where + ": token feature offsets " +
                                                    std::to_string(f.offsets) + " is neither 0 nor in 2..64");
}

std::string describeTokenFeatures(const TokenFeatures &f)
{
    if (!f.any())
        return "none";
    std::vector<std::string> parts;
    if (f.window > 0)
        parts.push_back("window " + std::to_string(f.window));
    if (f.targetTokens)
        parts.push_back("B tokens");
    if (f.offsets > 0)
        parts.push_back("offsets " + std::to_string(f.offsets));
    std::string out;
    for (const auto &p : parts)
        out += (out.empty() ? "" : ", ") + p;
    return out;
}

std::optional<TokenFeatures> parseTokenFeatures(const std::string &text)
{
    if (text == "none")
        return TokenFeatures{};
    if (text == "all")
        return TokenFeatures{1, true, 4};
    TokenFeatures f;
    bool seen[3] = {false, false, false};
    size_t at = 0;
    while (at <= text.size()) {
        const size_t comma = std::min(text.find(',', at), text.size());
        const std::string item = text.substr(at, comma - at);
        at = comma + 1;
        const size_t eq = item.find('=');
        const std::string key = item.substr(0, eq);
        std::optional<int> value;
        if (eq != std::string::npos) {
            const std::string v = item.substr(eq + 1);
            if (v.empty() || v.size() > 3 ||
                !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
                return std::nullopt;
            value = std::stoi(v);
        }
        if (key == "b" && !value && !seen[0]) {
            f.targetTokens = true;
            seen[0] = true;
        } else if (key == "window" && !seen[1]) {
            f.window = value.value_or(1);
            seen[1] = true;
        } else if (key == "offsets" && !seen[2]) {
            f.offsets = value.value_or(4);
            seen[2] = true;
        } else
            return std::nullopt;
    }
    if (f.window < 0 || f.window > 4 || (f.offsets != 0 && (f.offsets < 2 || f.offsets > 64)))
        return std::nullopt;
    return f;
}

std::string tokenFeaturesText(const TokenFeatures &f)
{
    if (!f.any())
        return "none";
    std::string out;
    const auto add = [&](const std::string &part) { out += (out.empty() ? "" : ",") + part; };
    if (f.targetTokens)
        add("b");
    if (f.window > 0)
        add("window=" + std::to_string(f.window));
    if (f.offsets > 0)
        add("offsets=" + std::to_string(f.offsets));
    return out;
}

TokenFeaturePlan tokenFeaturePlan(const TokenFeatures &f, const std::vector<int32_t> &pairing, int64_t n)
{
    if (!pairing.empty() && int64_t(pairing.size()) != n)
        throw Error(ErrorCode::InvalidArgument, "token features: " + std::to_string(pairing.size()) +
                                                    " paired positions for " + std::to_string(n) + " tokens");
    // runStart[t]: the first position of the run of positions paired with t's A token
    std::vector<int32_t> runStart(size_t(std::max<int64_t>(n, 0)));
    for (int64_t t = 0; t < n; ++t)
        runStart[size_t(t)] = t > 0 && !pairing.empty() && pairing[size_t(t)] == pairing[size_t(t - 1)]
                                  ? runStart[size_t(t - 1)]
                                  : int32_t(t);
    TokenFeaturePlan plan;
    plan.windowRows.resize(size_t(n) * size_t(f.window));
    for (int64_t t = 0; t < n; ++t) {
        int32_t start = runStart[size_t(t)];
        for (int w = 0; w < f.window; ++w) {
            const int32_t prev = start - 1; // the last position of the A token before
            plan.windowRows[size_t(t) * size_t(f.window) + size_t(w)] = prev;
            start = prev >= 0 ? runStart[size_t(prev)] : 0;
            if (prev < 0)
                for (int rest = w + 1; rest < f.window; ++rest)
                    plan.windowRows[size_t(t) * size_t(f.window) + size_t(rest)] = -1;
            if (prev < 0)
                break;
        }
    }
    if (f.offsets > 0) {
        plan.offset.resize(size_t(n));
        for (int64_t t = 0; t < n; ++t)
            plan.offset[size_t(t)] = std::min<int32_t>(int32_t(t) - runStart[size_t(t)], f.offsets - 1);
    }
    return plan;
}

int64_t LayerConverter::parameterCount() const
{
    int64_t n = 0;
    for (const auto *list : {&keys, &values})
        for (const KvMap &m : *list)
            n += m.parameterCount();
    return n;
}

int64_t ConverterRecord::parameterCount() const
{
    int64_t n = 0;
    for (const LayerConverter &l : layers)
        n += l.parameterCount();
    return n;
}

namespace fs = std::filesystem;

namespace {

using h5::check;
using h5::checkName;
using h5::Dims;
using h5::linkNames;
using h5::newGroup;
using h5::openArray;
using h5::openDataset;
using h5::openExperiment;
using h5::openGroup;
using h5::openRecord;
using h5::Place;
using h5::readIntArrayAttr;
using h5::readIntAttr;
using h5::readRows;
using h5::readStringAttr;
using h5::readTable;
using h5::RecordFile;
using h5::recordNames;
using h5::Save;
using h5::shapeText;
using h5::Site;
using h5::writeAttr;
using h5::writeDataset;
using h5::writeTable;

constexpr const char *kConverters = "/converters";
constexpr const char *kSweeps = "/sweeps";

// ---- validation, all of it before the file is opened for writing ----

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

void checkSize(const std::string &at, const char *part, size_t have, int64_t rows, int64_t cols,
               const char *shape)
{
    if (have != size_t(rows) * size_t(cols))
        throw Error(ErrorCode::InvalidArgument, at + " " + part + " has " + std::to_string(have) +
                                                    " floats, expected " + shape + " = " +
                                                    std::to_string(rows) + " x " + std::to_string(cols));
}

// Every map of a list is stacked into one dataset per part, so all must have one family, rank and
// width; family is the record's.
void checkMaps(const std::string &where, const char *kind, const std::vector<KvMap> &maps, size_t count,
               int inputDim, int outputDim, ConverterFamily family)
{
    if (maps.size() != count)
        throw Error(ErrorCode::InvalidArgument, where + " has " + std::to_string(maps.size()) + " " + kind +
                                                    " maps, expected " + std::to_string(count));
    for (size_t j = 0; j < maps.size(); ++j) {
        const KvMap &m = maps[j];
        const std::string at = where + " " + kind + " map " + std::to_string(j);
        if (m.inputDim != inputDim || m.outputDim != outputDim)
            throw Error(ErrorCode::InvalidArgument,
                        at + " is [inputDim, outputDim] = [" + std::to_string(m.inputDim) + ", " +
                            std::to_string(m.outputDim) + "], the models and source layers need [" +
                            std::to_string(inputDim) + ", " + std::to_string(outputDim) + "]");
        if (m.family() != family)
            throw Error(ErrorCode::InvalidArgument, at + " is a " + converterFamilyName(m.family()) +
                                                        " map in a " + converterFamilyName(family) +
                                                        " converter");
        if (m.rank != maps[0].rank || m.hidden != maps[0].hidden)
            throw Error(ErrorCode::InvalidArgument, at + " has rank " + std::to_string(m.rank) +
                                                        " and width " + std::to_string(m.hidden) +
                                                        ", map 0 has " + std::to_string(maps[0].rank) +
                                                        " and " + std::to_string(maps[0].hidden));
        if (m.rank < 0 || m.hidden < 0 || m.rank > std::min(inputDim, outputDim))
            throw Error(ErrorCode::InvalidArgument,
                        at + " rank " + std::to_string(m.rank) + " or width " + std::to_string(m.hidden) +
                            " is out of range (rank at most min(inputDim, outputDim) = " +
                            std::to_string(std::min(inputDim, outputDim)) + ")");
        checkSize(at, "bias", m.bias.size(), 1, m.outputDim, "outputDim");
        if (m.rank > 0) {
            checkSize(at, "weight", m.weight.size(), 0, 0, "nothing (low-rank)");
            checkSize(at, "down", m.down.size(), m.inputDim, m.rank, "inputDim x rank");
            checkSize(at, "up", m.up.size(), m.rank, m.outputDim, "rank x outputDim");
        } else {
            checkSize(at, "weight", m.weight.size(), m.inputDim, m.outputDim, "inputDim x outputDim");
        }
        if (m.hidden > 0) {
            checkSize(at, "hidden weight", m.hiddenWeight.size(), m.inputDim, m.hidden, "inputDim x hidden");
            checkSize(at, "hidden bias", m.hiddenBias.size(), 1, m.hidden, "hidden");
            checkSize(at, "out weight", m.outWeight.size(), m.hidden, m.outputDim, "hidden x outputDim");
        }
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
    const ModelConfig &a = reader.model(core::ModelRole::A).config;
    const ModelConfig &b = reader.model(core::ModelRole::B).config;
    h5::checkSettingsJson(where, r.settingsJson);
    if (r.trainTokens < 0)
        throw Error(ErrorCode::InvalidArgument, where + " train_tokens is negative");
    if (!(r.fitSeconds >= 0) || !(r.convertMsPer1k >= 0))
        throw Error(ErrorCode::InvalidArgument, where + " fit_seconds or convert_ms_per_1k is not >= 0");
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
        checkTokenFeatures(l.features, at);
        if (l.headMatched && l.features.any())
            throw Error(ErrorCode::InvalidArgument,
                        at + " is head_matched and has token features (full maps only)");
        if (l.features.any() && r.keyForm != KeyForm::PreRope)
            throw Error(ErrorCode::InvalidArgument, at + " has token features, which need pre-RoPE keys");
        if (l.headMatched) {
            if (a.numKvHeads != b.numKvHeads)
                throw Error(ErrorCode::InvalidArgument,
                            at + " is head_matched, but model a has " + std::to_string(a.numKvHeads) +
                                " kv heads and model b " + std::to_string(b.numKvHeads));
            checkMaps(at, "keys", l.keys, size_t(b.numKvHeads), sources * a.headDim, b.headDim, r.family);
            checkMaps(at, "values", l.values, size_t(b.numKvHeads), sources * a.headDim, b.headDim, r.family);
        } else {
            const int in = int(
                          sources * a.numKvHeads * a.headDim +
                          l.features.extraDim(sources, a.numKvHeads * a.headDim, b.numKvHeads * b.headDim)),
                      out = b.numKvHeads * b.headDim;
            checkMaps(at, "keys", l.keys, 1, in, out, r.family);
            checkMaps(at, "values", l.values, 1, in, out, r.family);
        }
    }
    checkTable(where + " layer metrics", r.layerMetrics);
    checkTable(where + " head metrics", r.headMetrics);
    checkMatrix(where + " cka_keys", r.ckaKeys);
    checkMatrix(where + " cka_values", r.ckaValues);
}

// ---- writing ----

void writeInts(const Place &parent, const std::string &name, const std::vector<int> &values)
{
    writeDataset(parent, name, H5T_STD_I32LE, H5T_NATIVE_INT, {hsize_t(values.size())}, values.data());
}

void writeMatrix(const Place &parent, const std::string &name, const Matrix &m)
{
    writeDataset(parent, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {hsize_t(m.rows), hsize_t(m.cols)},
                 m.data.data());
}

// Stacked over the list's maps (checkMaps made them one shape): <kind>_bias [maps, outputDim] f32,
// <kind>_lambda [maps] f64 and, by family, <kind>_weight [maps, inputDim, outputDim] (ridge, MLP),
// <kind>_down [maps, inputDim, rank] and <kind>_up [maps, rank, outputDim] (low-rank),
// <kind>_hidden_weight [maps, inputDim, hidden], <kind>_hidden_bias [maps, hidden] and
// <kind>_out_weight [maps, hidden, outputDim] (MLP).
void writeMaps(const Place &layer, const std::string &kind, const std::vector<KvMap> &maps)
{
    const KvMap &first = maps.front();
    const hsize_t n = maps.size(), in = hsize_t(first.inputDim), out = hsize_t(first.outputDim),
                  rank = hsize_t(first.rank), hidden = hsize_t(first.hidden);
    const auto stacked = [&](std::vector<float> KvMap::*part, const std::string &suffix,
                             std::vector<hsize_t> dims) {
        std::vector<float> all;
        for (const KvMap &m : maps)
            all.insert(all.end(), (m.*part).begin(), (m.*part).end());
        dims.insert(dims.begin(), n);
        return writeDataset(layer, kind + suffix, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, dims, all.data());
    };
    if (rank == 0) {
        const h5::Dataset ds = stacked(&KvMap::weight, "_weight", {in, out});
        writeAttr(ds.get(), Site(layer.file, layer.path + "/" + kind + "_weight"), "layout",
                  std::string("[maps, input_dim, output_dim]: y = x W + b for row vectors x"));
    } else {
        const h5::Dataset ds = stacked(&KvMap::down, "_down", {in, rank});
        writeAttr(ds.get(), Site(layer.file, layer.path + "/" + kind + "_down"), "layout",
                  std::string("[maps, input_dim, rank]: y = (x D) U + b for row vectors x"));
        stacked(&KvMap::up, "_up", {rank, out});
    }
    if (hidden > 0) {
        const h5::Dataset ds = stacked(&KvMap::hiddenWeight, "_hidden_weight", {in, hidden});
        writeAttr(
            ds.get(), Site(layer.file, layer.path + "/" + kind + "_hidden_weight"), "layout",
            std::string("[maps, input_dim, hidden]: y = x W + b + gelu(x W1 + b1) W2 for row vectors x"));
        stacked(&KvMap::hiddenBias, "_hidden_bias", {hidden});
        stacked(&KvMap::outWeight, "_out_weight", {hidden, out});
    }
    stacked(&KvMap::bias, "_bias", {out});
    std::vector<double> lambda;
    for (const KvMap &m : maps)
        lambda.push_back(m.lambda);
    writeDataset(layer, kind + "_lambda", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {n}, lambda.data());
}

// parent/<name>: one B layer's attributes and maps.
void writeLayer(const Place &parent, const std::string &name, const LayerConverter &l)
{
    const h5::Group lg = newGroup(parent, name);
    const Place layer{lg.get(), parent.file, parent.path + "/" + name};
    const Site lsite(layer.file, layer.path);
    writeAttr(lg.get(), lsite, "target_layer", int64_t(l.targetLayer));
    writeAttr(lg.get(), lsite, "head_matched", int64_t(l.headMatched ? 1 : 0));
    writeAttr(lg.get(), lsite, "source_layers",
              std::vector<int64_t>(l.sourceLayers.begin(), l.sourceLayers.end()));
    if (l.features.any()) { // absent: none (every file before token features)
        writeAttr(lg.get(), lsite, "token_window", int64_t(l.features.window));
        writeAttr(lg.get(), lsite, "token_target", int64_t(l.features.targetTokens ? 1 : 0));
        writeAttr(lg.get(), lsite, "token_offsets", int64_t(l.features.offsets));
    }
    writeMaps(layer, "keys", l.keys);
    writeMaps(layer, "values", l.values);
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
    writeAttr(g, site, "family", std::string(converterFamilyName(r.family)));
    writeAttr(g, site, "fit_seconds", r.fitSeconds);
    writeAttr(g, site, "convert_ms_per_1k", r.convertMsPer1k);
    writeAttr(g, site, "settings", r.settingsJson);
    // provenance the caller left empty is this build's and this moment's
    writeAttr(g, site, "created_utc", r.createdUtc.empty() ? text::utcNowIso8601() : r.createdUtc);
    writeAttr(g, site, "app_version", r.appVersion.empty() ? std::string(appVersion()) : r.appVersion);
    writeAttr(g, site, "git_commit", r.gitCommit.empty() ? std::string(gitCommit()) : r.gitCommit);
    writeAttr(g, site, "train_tokens", int64_t(r.trainTokens));
    writeInts(root, "train_prompts", r.trainPrompts);
    writeInts(root, "valid_prompts", r.validPrompts);
    writeInts(root, "test_prompts", r.testPrompts);
    {
        const h5::Group layers = newGroup(root, "layers");
        for (const LayerConverter &l : r.layers)
            writeLayer({layers.get(), root.file, root.path + "/layers"}, std::to_string(l.targetLayer), l);
    }
    const h5::Group mg = newGroup(root, "metrics");
    const Place metrics{mg.get(), root.file, root.path + "/metrics"};
    writeTable(metrics, "layers", r.layerMetrics);
    writeTable(metrics, "heads", r.headMetrics);
    writeMatrix(metrics, "cka_keys", r.ckaKeys);
    writeMatrix(metrics, "cka_values", r.ckaValues);
}

// ---- reading ----

std::vector<int> readInts(hid_t file, const std::string &name, const std::string &path)
{
    Dims d = openArray(file, name, path, 1, true);
    std::vector<int> v(d.dims[0]);
    readRows(d.ds.get(), name, path, H5T_NATIVE_INT, 0, d.dims[0], v.data());
    return v;
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

std::vector<KvMap> readMaps(hid_t file, const std::string &name, const std::string &group,
                            const std::string &kind, bool withData)
{
    const std::string base = group + "/" + kind;
    const std::string bpath = base + "_bias", lpath = base + "_lambda";
    Dims b = openArray(file, name, bpath, 2, false);
    Dims l = openArray(file, name, lpath, 1, false);
    const hsize_t n = b.dims[0], out = b.dims[1];
    if (n == 0)
        throw Error(ErrorCode::Format, name + ": dataset " + bpath + " holds no maps");
    const auto expect = [&](const Dims &d, const std::string &path, const std::vector<hsize_t> &want) {
        if (d.dims != want)
            throw Error(ErrorCode::Format, name + ": dataset " + path + " is " + shapeText(d.dims) +
                                               ", expected " + shapeText(want) + " to match " + bpath + " " +
                                               shapeText(b.dims));
    };
    expect(l, lpath, {n});
    // The parts present say the family: <kind>_down (low-rank) or <kind>_weight (ridge, MLP).
    const bool lowRank = h5::linkExists(file, base + "_down");
    const bool mlp = h5::linkExists(file, base + "_hidden_weight");
    struct Part
    {
        std::vector<float> KvMap::*field;
        std::string path;
        Dims dims;
        hsize_t rows = 0, cols = 0; // per map
    };
    std::vector<Part> parts;
    hsize_t in = 0, rank = 0, hidden = 0;
    if (lowRank) {
        Dims d = openArray(file, name, base + "_down", 3, false);
        if (d.dims[0] != n || d.dims[2] == 0)
            throw Error(ErrorCode::Format, name + ": dataset " + base + "_down is " + shapeText(d.dims) +
                                               ", expected [" + std::to_string(n) +
                                               ", input_dim, rank >= 1]");
        in = d.dims[1];
        rank = d.dims[2];
        Dims u = openArray(file, name, base + "_up", 3, false);
        expect(u, base + "_up", {n, rank, out});
        parts.push_back({&KvMap::down, base + "_down", std::move(d), in, rank});
        parts.push_back({&KvMap::up, base + "_up", std::move(u), rank, out});
    } else {
        Dims w = openArray(file, name, base + "_weight", 3, false);
        if (w.dims[0] != n || w.dims[2] != out)
            throw Error(ErrorCode::Format, name + ": dataset " + base + "_weight is " + shapeText(w.dims) +
                                               ", expected [" + std::to_string(n) + ", input_dim, " +
                                               std::to_string(out) + "] to match " + bpath);
        in = w.dims[1];
        parts.push_back({&KvMap::weight, base + "_weight", std::move(w), in, out});
    }
    if (in == 0 || rank > std::min(in, out))
        throw Error(ErrorCode::Format, name + ": the " + kind + " maps of " + group + " take " +
                                           std::to_string(in) + " inputs at rank " + std::to_string(rank) +
                                           " (rank at most min(inputs, outputs))");
    if (mlp) {
        if (lowRank)
            throw Error(ErrorCode::Format,
                        name + ": " + group + " holds both " + kind + "_down and " + kind + "_hidden_weight");
        Dims h = openArray(file, name, base + "_hidden_weight", 3, false);
        if (h.dims[0] != n || h.dims[1] != in || h.dims[2] == 0)
            throw Error(ErrorCode::Format, name + ": dataset " + base + "_hidden_weight is " +
                                               shapeText(h.dims) + ", expected [" + std::to_string(n) + ", " +
                                               std::to_string(in) + ", hidden >= 1]");
        hidden = h.dims[2];
        Dims hb = openArray(file, name, base + "_hidden_bias", 2, false);
        expect(hb, base + "_hidden_bias", {n, hidden});
        Dims o = openArray(file, name, base + "_out_weight", 3, false);
        expect(o, base + "_out_weight", {n, hidden, out});
        parts.push_back({&KvMap::hiddenWeight, base + "_hidden_weight", std::move(h), in, hidden});
        parts.push_back({&KvMap::hiddenBias, base + "_hidden_bias", std::move(hb), 1, hidden});
        parts.push_back({&KvMap::outWeight, base + "_out_weight", std::move(o), hidden, out});
    }
    parts.push_back({&KvMap::bias, bpath, std::move(b), 1, out});
    if (in > hsize_t(std::numeric_limits<int>::max()) || out > hsize_t(std::numeric_limits<int>::max()) ||
        hidden > hsize_t(std::numeric_limits<int>::max()))
        throw Error(ErrorCode::Format, name + ": the " + kind + " maps of " + group + " are too large");
    std::vector<double> lambda(n);
    readRows(l.ds.get(), name, lpath, H5T_NATIVE_DOUBLE, 0, n, lambda.data());
    std::vector<KvMap> maps(n);
    for (hsize_t j = 0; j < n; ++j) {
        maps[j].inputDim = int(in);
        maps[j].outputDim = int(out);
        maps[j].rank = int(rank);
        maps[j].hidden = int(hidden);
        maps[j].lambda = lambda[j];
    }
    if (!withData)
        return maps;
    for (Part &p : parts) {
        const hsize_t each = p.rows * p.cols; // openArray checked the whole dataset can be read
        std::vector<float> all(n * each);
        readRows(p.dims.ds.get(), name, p.path, H5T_NATIVE_FLOAT, 0, n, all.data());
        for (hsize_t j = 0; j < n; ++j)
            (maps[j].*p.field)
                .assign(all.begin() + ptrdiff_t(j * each), all.begin() + ptrdiff_t((j + 1) * each));
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

LayerConverter readLayer(hid_t file, const std::string &name, const std::string &path, int index,
                         bool withData)
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
        // token features: all three attributes or none (none: a converter of A's rows alone)
        int present = 0;
        for (const char *attr : {"token_window", "token_target", "token_offsets"}) {
            const htri_t e = H5Aexists(g.get(), attr);
            if (e < 0)
                throw Error(ErrorCode::Format, site.attr(attr) + " cannot be read");
            present += e > 0 ? 1 : 0;
        }
        if (present != 0 && present != 3)
            throw Error(ErrorCode::Format, name + ": " + path +
                                               " has some of token_window, token_target and token_offsets; "
                                               "all three or none");
        if (present == 3) {
            const int64_t w = readIntAttr(g.get(), site, "token_window"),
                          t = readIntAttr(g.get(), site, "token_target"),
                          o = readIntAttr(g.get(), site, "token_offsets");
            if (w < 0 || w > 4 || (t != 0 && t != 1) || (o != 0 && (o < 2 || o > 64)))
                throw Error(ErrorCode::Format, site.attr("token_window") +
                                                   ", token_target or token_offsets is out of range (" +
                                                   std::to_string(w) + ", " + std::to_string(t) + ", " +
                                                   std::to_string(o) + ")");
            l.features = {int(w), t != 0, int(o)};
        }
    }
    l.keys = readMaps(file, name, path, "keys", withData);
    l.values = readMaps(file, name, path, "values", withData);
    const std::string kpath = path + "/keys_bias";
    if (l.keys.size() != l.values.size() || l.keys.front().inputDim != l.values.front().inputDim ||
        l.keys.front().outputDim != l.values.front().outputDim ||
        l.keys.front().family() != l.values.front().family())
        throw Error(ErrorCode::Format,
                    name + ": the key and value maps of " + path + " disagree in shape or family");
    if (!l.headMatched && l.keys.size() != 1)
        throw Error(ErrorCode::Format, name + ": dataset " + kpath + " holds " +
                                           std::to_string(l.keys.size()) +
                                           " maps, but head_matched is 0 (one map expected)");
    if (l.features.any() && l.headMatched)
        throw Error(ErrorCode::Format, name + ": " + path + " is head_matched and has token features");
    if (l.sourceLayers.empty() ||
        (!l.features.any() && l.keys.front().inputDim % int(l.sourceLayers.size()) != 0))
        throw Error(ErrorCode::Format, name + ": dataset " + kpath + " input dimension " +
                                           std::to_string(l.keys.front().inputDim) +
                                           " is not a multiple of the " +
                                           std::to_string(l.sourceLayers.size()) + " source layers");
    return l;
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
        const h5::PropList gcpl = h5::compactGroupCreation();
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
    return recordNames(experiment, kConverters);
}

ConverterRecord loadConverters(const fs::path &experiment, const std::string &name, ConverterParts parts)
{
    const RecordFile record = openRecord(experiment, kConverters, "converter", name);
    const std::string &file = record.file, &base = record.path;
    const hid_t fid = record.handle.get();

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
        // Records written before converter families are ridge, of unknown cost.
        if (H5Aexists(g.get(), "family") > 0) {
            const std::string family = readStringAttr(g.get(), site, "family");
            const auto parsed = parseConverterFamily(family);
            if (!parsed || family == "low-rank" || *parsed == ConverterFamily::Auto ||
                *parsed == ConverterFamily::AttnRidge) // fit settings: stored as what their maps are
                throw Error(ErrorCode::Format, site.attr("family") + " is '" + family + "'");
            r.family = *parsed;
            r.fitSeconds = readDoubleAttr(g.get(), site, "fit_seconds");
            r.convertMsPer1k = readDoubleAttr(g.get(), site, "convert_ms_per_1k");
            if (!(r.fitSeconds >= 0) || !(r.convertMsPer1k >= 0))
                throw Error(ErrorCode::Format,
                            site.attr("fit_seconds") + " or convert_ms_per_1k is not >= 0");
        }
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
    for (int i : indices) {
        r.layers.push_back(
            readLayer(fid, file, layersPath + "/" + std::to_string(i), i, parts == ConverterParts::WithMaps));
        if (r.layers.back().features.any() && r.keyForm != KeyForm::PreRope)
            throw Error(ErrorCode::Format, file + ": layer " + std::to_string(i) + " of converter " + name +
                                               " has token features, but its keys are post-RoPE");
        if (r.layers.back().keys.front().family() != r.family)
            throw Error(ErrorCode::Format,
                        file + ": layer " + std::to_string(i) + " of converter " + name + " holds " +
                            converterFamilyName(r.layers.back().keys.front().family()) +
                            " maps, but the converter's family is " + converterFamilyName(r.family));
    }

    r.layerMetrics = readTable(fid, file, base + "/metrics/layers");
    r.headMetrics = readTable(fid, file, base + "/metrics/heads");
    r.ckaKeys = readMatrix(fid, file, base + "/metrics/cka_keys");
    r.ckaValues = readMatrix(fid, file, base + "/metrics/cka_values");
    return r;
}

constexpr const char *kCheckpointSchema = "kvwb-layer-checkpoint/1";

void saveLayerCheckpoint(const fs::path &path, const LayerCheckpoint &c)
{
    h5::prepareLibrary();
    const std::string name = path.string();
    const LayerConverter &l = c.layer;
    if (l.keys.empty() || l.values.empty() || l.sourceLayers.empty() || l.targetLayer < 0)
        throw Error(ErrorCode::InvalidArgument, name + ": a layer checkpoint needs a fitted layer");
    for (const KvMap &m : l.keys)
        if (m.family() != c.family)
            throw Error(ErrorCode::InvalidArgument, name + ": the layer's maps are " +
                                                        converterFamilyName(m.family()) + ", not " +
                                                        converterFamilyName(c.family));
    h5::checkSettingsJson(name + " fit key", c.fitKey);
    h5::checkSettingsJson(name + " stats", c.statsJson);
    h5::writeWholeFile(path, [&](hid_t f) {
        const Site root(name, "/");
        writeAttr(f, root, "schema", std::string(kCheckpointSchema));
        writeAttr(f, root, "family", std::string(converterFamilyName(c.family)));
        writeAttr(f, root, "fit_key", c.fitKey);
        writeAttr(f, root, "stats", c.statsJson);
        writeAttr(f, root, "created_utc", text::utcNowIso8601());
        writeLayer({f, name, ""}, "layer", l);
    });
}

LayerCheckpoint loadLayerCheckpoint(const fs::path &path)
{
    h5::prepareLibrary();
    const std::string name = path.string();
    const h5::File f = h5::openForReading(path);
    const Site root(name, "/");
    const std::string schema = readStringAttr(f.get(), root, "schema");
    if (schema != kCheckpointSchema)
        throw Error(ErrorCode::Format,
                    root.attr("schema") + " is '" + schema + "', expected " + kCheckpointSchema);
    LayerCheckpoint c;
    const std::string family = readStringAttr(f.get(), root, "family");
    const auto parsed = parseConverterFamily(family);
    if (!parsed || family == "low-rank")
        throw Error(ErrorCode::Format, root.attr("family") + " is '" + family + "'");
    c.family = *parsed;
    c.fitKey = readStringAttr(f.get(), root, "fit_key");
    c.statsJson = readStringAttr(f.get(), root, "stats");
    h5::checkSettingsJson(root.attr("stats"), c.statsJson);
    // the target layer is whatever the file says; readLayer compares it with the index it is given
    int target = 0;
    {
        const h5::Group g = openGroup(f.get(), name, "/layer");
        target = int(readIntAttr(g.get(), Site(name, "/layer"), "target_layer"));
        if (target < 0)
            throw Error(ErrorCode::Format, Site(name, "/layer").attr("target_layer") + " is negative");
    }
    c.layer = readLayer(f.get(), name, "/layer", target, true);
    for (const auto *maps : {&c.layer.keys, &c.layer.values})
        for (const KvMap &m : *maps)
            if (m.family() != c.family)
                throw Error(ErrorCode::Format, name + ": /layer holds " + converterFamilyName(m.family()) +
                                                   " maps, but the checkpoint's family is " + family);
    return c;
}

void saveTable(const fs::path &experiment, const std::string &name, const MetricTable &table,
               const std::string &settingsJson)
{
    h5::prepareLibrary();
    const std::string file = experiment.string();
    checkName(file, "table", name);
    const std::string where = file + ": table " + name;
    checkTable(where, table);
    h5::checkSettingsJson(where, settingsJson);
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
    return recordNames(experiment, kSweeps);
}

MetricTable loadTable(const fs::path &experiment, const std::string &name, std::string *settingsJson)
{
    const RecordFile record = openRecord(experiment, kSweeps, "table", name);
    const std::string &file = record.file, &path = record.path;
    MetricTable t = readTable(record.handle.get(), file, path);
    if (settingsJson) {
        const h5::Dataset ds = openDataset(record.handle.get(), file, path);
        *settingsJson = readStringAttr(ds.get(), Site(file, path), "settings");
    }
    return t;
}

} // namespace kvwb::core
