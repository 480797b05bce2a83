#include "core/store/knowledge_store.h"

#include "core/store/experiment_validation.h"
#include "core/store/hdf5_handle.h"
#include "core/util/build_info.h"
#include "core/util/error.h"
#include "core/util/text_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_set>

namespace kvwb::core {

namespace fs = std::filesystem;
using detail::crc32Of;
using h5::check;
using h5::Dims;
using h5::openArray;
using h5::Place;
using h5::readRows;
using h5::Site;
using h5::writeAttr;
using h5::writeDataset;

namespace {

std::string layerName(int l)
{
    return fmt::format("layer_{:03}", l);
}

template <typename T>
void writeVector(const Place &at, const std::string &name, hid_t fileType, hid_t memType,
                 const std::vector<T> &v)
{
    writeDataset(at, name, fileType, memType, {hsize_t(v.size())}, v.data());
}

template <typename T>
std::vector<T> readVector(hid_t f, const std::string &name, const std::string &path, hid_t memType,
                          bool integer, size_t expected = size_t(-1))
{
    Dims d = openArray(f, name, path, 1, integer);
    if (expected != size_t(-1) && d.dims[0] != expected)
        throw Error(ErrorCode::Format, fmt::format("{}: dataset {} holds {} values, expected {}", name, path,
                                                   d.dims[0], expected));
    std::vector<T> out(d.dims[0]);
    if (!out.empty())
        readRows(d.ds.get(), name, path, memType, 0, d.dims[0], out.data());
    return out;
}

void checkModules(const std::string &name, const KnowledgeFile &k)
{
    const auto &m = *k.modules;
    if (m.layers <= 0 || m.kvHeads <= 0 || m.headDim <= 0)
        throw Error(ErrorCode::InvalidArgument,
                    name + ": modules need a positive layer, kv-head and head size");
    std::unordered_set<std::string> seen;
    for (const auto &mod : m.modules) {
        const std::string at = name + ": module of '" + mod.nodeId + "'";
        if (!k.graph.find(mod.nodeId))
            throw Error(ErrorCode::InvalidArgument, at + ": no such node in the graph");
        if (!seen.insert(mod.nodeId).second)
            throw Error(ErrorCode::InvalidArgument, at + " is there twice");
        if (mod.ids.empty())
            throw Error(ErrorCode::InvalidArgument, at + " has no tokens");
        if (int(mod.layers.size()) != m.layers)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("{} has {} layers, expected {}", at, mod.layers.size(), m.layers));
        const size_t want = size_t(m.kvHeads) * mod.ids.size() * size_t(m.headDim);
        for (size_t l = 0; l < mod.layers.size(); ++l)
            if (mod.layers[l].keys.size() != want || mod.layers[l].values.size() != want)
                throw Error(
                    ErrorCode::InvalidArgument,
                    fmt::format("{} layer {} holds {}/{} floats, expected {} ({} kv heads x {} tokens x {})",
                                at, l, mod.layers[l].keys.size(), mod.layers[l].values.size(), want,
                                m.kvHeads, mod.ids.size(), m.headDim));
    }
}

nlohmann::json relationsJson(const ConceptNode &n)
{
    nlohmann::json out = nlohmann::json::array();
    for (const auto &r : n.related)
        out.push_back({relationKindName(r.kind), r.target});
    return out;
}

// Reads /nodes into k.graph (each node added as it is read).
void readNodes(hid_t f, const std::string &name, KnowledgeFile &k)
{
    const auto ids = h5::readStrings(f, name, "/nodes/id");
    const size_t n = ids.size();
    const auto list = [&](const char *field) {
        const std::string p = std::string("/nodes/") + field;
        auto v = h5::readStrings(f, name, p);
        if (v.size() != n)
            throw Error(ErrorCode::Format,
                        fmt::format("{}: dataset {} holds {} strings for {} nodes", name, p, v.size(), n));
        return v;
    };
    const auto names = list("name"), knowledge = list("knowledge"), sources = list("source"),
               synonyms = list("synonyms"), questions = list("questions"), related = list("related");
    const auto confidence = readVector<double>(f, name, "/nodes/confidence", H5T_NATIVE_DOUBLE, false, n);
    const auto verified = readVector<int64_t>(f, name, "/nodes/verified_ms", H5T_NATIVE_INT64, true, n);
    const auto reuse = readVector<int64_t>(f, name, "/nodes/reuse_count", H5T_NATIVE_INT64, true, n);
    const auto stringArray = [&](const std::string &text, const char *field, size_t i) {
        const std::string at = fmt::format("{}: /nodes/{} of node {} ('{}')", name, field, i, ids[i]);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(text);
        } catch (const nlohmann::json::exception &) {
            throw Error(ErrorCode::Format, at + " is not JSON");
        }
        return std::pair{j, at};
    };
    for (size_t i = 0; i < n; ++i) {
        ConceptNode node;
        node.id = ids[i];
        node.name = names[i];
        node.knowledge = knowledge[i];
        node.source = sources[i];
        node.confidence = confidence[i];
        node.verifiedMs = verified[i];
        node.reuseCount = reuse[i];
        for (const char *field : {"synonyms", "questions"}) {
            auto [j, at] = stringArray(field[0] == 's' ? synonyms[i] : questions[i], field, i);
            if (!j.is_array() ||
                !std::all_of(j.begin(), j.end(), [](const auto &v) { return v.is_string(); }))
                throw Error(ErrorCode::Format, at + " is not an array of strings");
            (field[0] == 's' ? node.synonyms : node.questions) = j.template get<std::vector<std::string>>();
        }
        auto [j, at] = stringArray(related[i], "related", i);
        if (!j.is_array())
            throw Error(ErrorCode::Format, at + " is not an array");
        for (const auto &r : j) {
            if (!r.is_array() || r.size() != 2 || !r[0].is_string() || !r[1].is_string())
                throw Error(ErrorCode::Format, at + " holds an entry that is not [kind, node id]");
            const auto kind = parseRelationKind(r[0].get<std::string>());
            if (!kind)
                throw Error(ErrorCode::Format, at + " holds relation kind '" + r[0].get<std::string>() + "'");
            node.related.push_back({*kind, r[1].get<std::string>()});
        }
        try {
            k.graph.add(std::move(node));
        } catch (const Error &e) {
            throw Error(ErrorCode::Format, name + ": " + e.what());
        }
    }
}

// The /modules group's attributes: the model, its KV geometry (checked) and the key form.
KnowledgeModules readModulesHeader(hid_t f, const std::string &name)
{
    KnowledgeModules m;
    const h5::Group g = h5::openGroup(f, name, "/modules");
    const Site site(name, "/modules");
    m.modelFingerprint = h5::readStringAttr(g.get(), site, "model_fingerprint");
    m.modelPath = h5::readStringAttr(g.get(), site, "model_path");
    m.layers = int(h5::readIntAttr(g.get(), site, "layers"));
    m.kvHeads = int(h5::readIntAttr(g.get(), site, "kv_heads"));
    m.headDim = int(h5::readIntAttr(g.get(), site, "head_dim"));
    if (m.layers <= 0 || m.layers > 4096 || m.kvHeads <= 0 || m.kvHeads > 4096 || m.headDim <= 0 ||
        m.headDim > 65536)
        throw Error(ErrorCode::Format, fmt::format("{}: /modules says {} layers, {} kv heads, head size {}",
                                                   name, m.layers, m.kvHeads, m.headDim));
    const std::string form = h5::readStringAttr(g.get(), site, "key_form");
    if (form != "pre_rope")
        throw Error(ErrorCode::Format, site.attr("key_form") + " is '" + form + "', expected pre_rope");
    return m;
}

// Reads the modules' prefix, nodes, token ids and timings (not their KV) into m.modules; returns
// the total token count.
size_t readModuleIndex(hid_t f, const std::string &name, const KnowledgeGraph &graph, KnowledgeModules &m)
{
    const auto prefix = readVector<int32_t>(f, name, "/modules/prefix_ids", H5T_NATIVE_INT32, true);
    m.prefixIds.assign(prefix.begin(), prefix.end());
    const auto nodes = h5::readStrings(f, name, "/modules/node");
    const size_t count = nodes.size();
    const auto offsets = readVector<int64_t>(f, name, "/modules/offsets", H5T_NATIVE_INT64, true, count + 1);
    const auto tokenIds = readVector<int32_t>(f, name, "/modules/ids", H5T_NATIVE_INT32, true);
    const auto built = readVector<int64_t>(f, name, "/modules/built_ms", H5T_NATIVE_INT64, true, count);
    const auto compute = readVector<double>(f, name, "/modules/compute_ms", H5T_NATIVE_DOUBLE, false, count);
    if (offsets.front() != 0 || int64_t(tokenIds.size()) != offsets.back())
        throw Error(ErrorCode::Format,
                    fmt::format("{}: /modules/offsets run from {} to {}, but ids holds {} tokens", name,
                                offsets.front(), offsets.back(), tokenIds.size()));
    for (size_t i = 0; i < count; ++i) {
        if (offsets[i + 1] <= offsets[i])
            throw Error(ErrorCode::Format,
                        fmt::format("{}: /modules/offsets entry {} ({}) does not exceed the one before ({})",
                                    name, i + 1, offsets[i + 1], offsets[i]));
        if (offsets[i + 1] > offsets.back()) // checked before slicing ids with it
            throw Error(ErrorCode::Format,
                        fmt::format("{}: /modules/offsets entry {} ({}) is past the end of ids ({} tokens)",
                                    name, i + 1, offsets[i + 1], tokenIds.size()));
        if (!graph.find(nodes[i]))
            throw Error(
                ErrorCode::Format,
                fmt::format("{}: /modules/node entry {} names '{}', which is not a node", name, i, nodes[i]));
        KnowledgeModule mod;
        mod.nodeId = nodes[i];
        mod.ids.assign(tokenIds.begin() + offsets[i], tokenIds.begin() + offsets[i + 1]);
        mod.builtMs = built[i];
        mod.computeMs = compute[i];
        m.modules.push_back(std::move(mod));
    }
    return tokenIds.size();
}

// Layer l's /modules/layer_NNN/crc32 rows ([modules, 2 (keys, values)] flattened), or none.
std::vector<uint32_t> readModuleCrcs(hid_t f, const std::string &name, const KnowledgeModules &m, int l)
{
    // Files written before modules carried checksums have no crc32 dataset.
    std::vector<uint32_t> crcs;
    const std::string crcPath = "/modules/" + layerName(l) + "/crc32";
    if (h5::linkExists(f, crcPath)) {
        Dims cd = openArray(f, name, crcPath, 2, false);
        if (cd.dims != std::vector<hsize_t>{m.modules.size(), 2})
            throw Error(ErrorCode::Format, fmt::format("{}: dataset {} is {}, expected [{}, 2]", name,
                                                       crcPath, h5::shapeText(cd.dims), m.modules.size()));
        crcs.resize(m.modules.size() * 2);
        if (!crcs.empty())
            readRows(cd.ds.get(), name, crcPath, H5T_NATIVE_UINT32, 0, m.modules.size(), crcs.data());
    }
    return crcs;
}

// Reads layer l's keys and values (T tokens in all) into each module's mod.layers[l], checking
// them against the layer's checksums when the file has them.
void readModuleLayer(hid_t f, const std::string &name, KnowledgeModules &m, int l, size_t T)
{
    const size_t H = size_t(m.kvHeads), D = size_t(m.headDim);
    const std::vector<uint32_t> crcs = readModuleCrcs(f, name, m, l);
    for (const char *kind : {"keys", "values"}) {
        const std::string p = "/modules/" + layerName(l) + "/" + kind;
        Dims d = openArray(f, name, p, 3, false);
        if (d.dims != std::vector<hsize_t>{T, H, D})
            throw Error(ErrorCode::Format, fmt::format("{}: dataset {} is {}, expected [{}, {}, {}]", name, p,
                                                       h5::shapeText(d.dims), T, H, D));
        std::vector<float> all(T * H * D);
        if (T > 0)
            readRows(d.ds.get(), name, p, H5T_NATIVE_FLOAT, 0, T, all.data());
        size_t first = 0, index = 0;
        for (auto &mod : m.modules) {
            const size_t n = mod.ids.size();
            if (!crcs.empty() && crc32Of(all.data() + first * H * D, n * H * D * sizeof(float)) !=
                                     crcs[index * 2 + (kind[0] == 'k' ? 0 : 1)])
                throw Error(ErrorCode::Format,
                            fmt::format("{}: {} of node '{}' fail their CRC-32 (the file is damaged)", name,
                                        p, mod.nodeId));
            ++index;
            auto &dst = kind[0] == 'k' ? mod.layers[size_t(l)].keys : mod.layers[size_t(l)].values;
            dst.resize(H * n * D);
            for (size_t h = 0; h < H; ++h)
                for (size_t t = 0; t < n; ++t)
                    std::copy_n(all.data() + ((first + t) * H + h) * D, D, dst.data() + (h * n + t) * D);
            first += n;
        }
    }
}

} // namespace

const KnowledgeModule *KnowledgeModules::find(const std::string &nodeId) const
{
    const auto it = std::find_if(modules.begin(), modules.end(),
                                 [&](const KnowledgeModule &m) { return m.nodeId == nodeId; });
    return it == modules.end() ? nullptr : &*it;
}

void saveKnowledge(const fs::path &path, const KnowledgeFile &k)
{
    h5::prepareLibrary();
    const std::string name = path.string();
    k.graph.checkRelations();
    if (k.modules)
        checkModules(name, k);
    h5::writeWholeFile(path, [&](hid_t f) {
        const Site root(name, "/");
        writeAttr(f, root, "schema", std::string(kKnowledgeSchema));
        writeAttr(f, root, "created_utc", k.createdUtc.empty() ? text::utcNowIso8601() : k.createdUtc);
        writeAttr(f, root, "app_version", std::string(appVersion()));
        writeAttr(f, root, "description", k.description);
        {
            const h5::Group g = h5::createGroup(f, name, "/nodes");
            const Place at{g.get(), name, "/nodes"};
            std::vector<std::string> ids, names, knowledge, sources, synonyms, questions, related;
            std::vector<double> confidence;
            std::vector<int64_t> verified, reuse;
            for (const auto &n : k.graph.nodes()) {
                ids.push_back(n.id);
                names.push_back(n.name);
                knowledge.push_back(n.knowledge);
                sources.push_back(n.source);
                synonyms.push_back(nlohmann::json(n.synonyms).dump());
                questions.push_back(nlohmann::json(n.questions).dump());
                related.push_back(relationsJson(n).dump());
                confidence.push_back(n.confidence);
                verified.push_back(n.verifiedMs);
                reuse.push_back(n.reuseCount);
            }
            writeAttr(
                g.get(), Site(name, "/nodes"), "description",
                std::string("Node i: string i of each string list (<list> bytes, <list>_offsets); "
                            "synonyms, questions and related are JSON arrays (related: [kind, node id])"));
            h5::writeStrings(at, "id", ids);
            h5::writeStrings(at, "name", names);
            h5::writeStrings(at, "knowledge", knowledge);
            h5::writeStrings(at, "source", sources);
            h5::writeStrings(at, "synonyms", synonyms);
            h5::writeStrings(at, "questions", questions);
            h5::writeStrings(at, "related", related);
            writeVector(at, "confidence", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, confidence);
            writeVector(at, "verified_ms", H5T_STD_I64LE, H5T_NATIVE_INT64, verified);
            writeVector(at, "reuse_count", H5T_STD_I64LE, H5T_NATIVE_INT64, reuse);
        }
        if (k.modules) {
            const auto &m = *k.modules;
            const h5::Group g = h5::createGroup(f, name, "/modules");
            const Place at{g.get(), name, "/modules"};
            const Site site(name, "/modules");
            writeAttr(g.get(), site, "model_fingerprint", m.modelFingerprint);
            writeAttr(g.get(), site, "model_path", m.modelPath);
            writeAttr(g.get(), site, "layers", int64_t(m.layers));
            writeAttr(g.get(), site, "kv_heads", int64_t(m.kvHeads));
            writeAttr(g.get(), site, "head_dim", int64_t(m.headDim));
            writeAttr(g.get(), site, "key_form", std::string("pre_rope"));
            writeAttr(g.get(), site, "description",
                      std::string("Module i: tokens [offsets[i], offsets[i+1]) of ids and of each "
                                  "layer_NNN/{keys,values} [tokens, kv_heads, head_dim] (keys before RoPE), "
                                  "computed by the model after prefix_ids"));
            std::vector<std::string> nodes;
            std::vector<int64_t> offsets{0}, built;
            std::vector<int32_t> ids;
            std::vector<double> compute;
            for (const auto &mod : m.modules) {
                nodes.push_back(mod.nodeId);
                ids.insert(ids.end(), mod.ids.begin(), mod.ids.end());
                offsets.push_back(int64_t(ids.size()));
                built.push_back(mod.builtMs);
                compute.push_back(mod.computeMs);
            }
            writeVector(at, "prefix_ids", H5T_STD_I32LE, H5T_NATIVE_INT32,
                        std::vector<int32_t>(m.prefixIds.begin(), m.prefixIds.end()));
            h5::writeStrings(at, "node", nodes);
            writeVector(at, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, offsets);
            writeVector(at, "ids", H5T_STD_I32LE, H5T_NATIVE_INT32, ids);
            writeVector(at, "built_ms", H5T_STD_I64LE, H5T_NATIVE_INT64, built);
            writeVector(at, "compute_ms", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, compute);
            const size_t H = size_t(m.kvHeads), D = size_t(m.headDim), T = ids.size();
            for (int l = 0; l < m.layers; ++l) {
                const h5::Group lg = h5::createGroup(g.get(), name, layerName(l));
                const Place lat{lg.get(), name, "/modules/" + layerName(l)};
                std::vector<float> keys(T * H * D), values(T * H * D);
                size_t first = 0;
                for (const auto &mod : m.modules) {
                    const size_t n = mod.ids.size();
                    const auto &src = mod.layers[size_t(l)];
                    for (size_t h = 0; h < H; ++h)
                        for (size_t t = 0; t < n; ++t) {
                            std::copy_n(src.keys.data() + (h * n + t) * D, D,
                                        keys.data() + ((first + t) * H + h) * D);
                            std::copy_n(src.values.data() + (h * n + t) * D, D,
                                        values.data() + ((first + t) * H + h) * D);
                        }
                    first += n;
                }
                writeDataset(lat, "keys", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {T, H, D}, keys.data());
                writeDataset(lat, "values", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {T, H, D}, values.data());
                // Each module's rows of keys and values, CRC-32 as stored: [modules, 2 (keys, values)]
                std::vector<uint32_t> crcs;
                size_t from = 0;
                for (const auto &mod : m.modules) {
                    const size_t bytes = mod.ids.size() * H * D * sizeof(float);
                    crcs.push_back(crc32Of(keys.data() + from * H * D, bytes));
                    crcs.push_back(crc32Of(values.data() + from * H * D, bytes));
                    from += mod.ids.size();
                }
                writeDataset(lat, "crc32", H5T_STD_U32LE, H5T_NATIVE_UINT32, {m.modules.size(), 2},
                             crcs.data());
            }
        }
    });
}

KnowledgeFile loadKnowledge(const fs::path &path, bool withModules)
{
    h5::prepareLibrary();
    const std::string name = path.string();
    const h5::File file = h5::openForReading(path);
    const hid_t f = file.get();
    const Site root(name, "/");
    const std::string schema = h5::readStringAttr(f, root, "schema");
    if (schema != kKnowledgeSchema)
        throw Error(ErrorCode::Format, fmt::format("{} is '{}': not a knowledge graph file ({})",
                                                   root.attr("schema"), schema, kKnowledgeSchema));
    KnowledgeFile k;
    k.createdUtc = h5::readStringAttr(f, root, "created_utc");
    k.description = h5::readStringAttr(f, root, "description");
    readNodes(f, name, k);
    try {
        k.graph.checkRelations();
    } catch (const Error &e) {
        throw Error(ErrorCode::Format, name + ": " + e.what());
    }
    if (!h5::linkExists(f, "/modules"))
        return k;

    KnowledgeModules m = readModulesHeader(f, name);
    const size_t T = readModuleIndex(f, name, k.graph, m);
    if (withModules) {
        for (auto &mod : m.modules)
            mod.layers.resize(size_t(m.layers));
        for (int l = 0; l < m.layers; ++l)
            readModuleLayer(f, name, m, l, T);
    }
    k.modules = std::move(m);
    return k;
}

} // namespace kvwb::core
