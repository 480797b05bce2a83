#include "core/model/safetensors.h"

#include "core/model/quant.h"

#include "core/util/atomic_file.h"
#include "core/util/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

namespace kvwb::core {

using nlohmann::json;

int64_t TensorInfo::numel() const
{
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    return n;
}

struct SafetensorsFile::Impl
{
    std::shared_ptr<const MappedFile> file;
    uint64_t dataStart = 0; // bytes: 8 + header length
    std::vector<TensorInfo> tensors;
    std::map<std::string, size_t, std::less<>> byName;
    std::map<std::string, std::string> metadata;
};

namespace {

std::string shapeString(const std::vector<int64_t> &shape)
{
    return fmt::format("[{}]", fmt::join(shape, ", "));
}

uint64_t readU64Le(const std::byte *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i)
        v = (v << 8) | uint64_t(p[i]);
    return v;
}

} // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path &path)
{
    auto impl = std::make_shared<Impl>();
    impl->file = MappedFile::open(path);
    const std::string file = path.string();
    const uint64_t size = impl->file->size();
    if (size < 8)
        throw Error(ErrorCode::Format,
                    fmt::format("{}: file is {} bytes, too short for the 8-byte safetensors header "
                                "length",
                                file, size));
    const uint64_t headerLen = readU64Le(impl->file->data());
    if (headerLen > size - 8)
        throw Error(ErrorCode::Format,
                    fmt::format("{}: header length {} runs past the end of the file ({} bytes)", file,
                                headerLen, size));
    impl->dataStart = 8 + headerLen;
    const uint64_t dataSize = size - impl->dataStart;

    json header;
    try {
        header = json::parse(reinterpret_cast<const char *>(impl->file->data()) + 8,
                             reinterpret_cast<const char *>(impl->file->data()) + 8 + headerLen);
    } catch (const json::exception &e) {
        throw Error(ErrorCode::Format,
                    fmt::format("{}: safetensors header is not valid JSON: {}", file, e.what()));
    }
    if (!header.is_object())
        throw Error(ErrorCode::Format, fmt::format("{}: safetensors header is not a JSON object", file));

    for (const auto &[name, entry] : header.items()) {
        if (name == "__metadata__") {
            if (!entry.is_object())
                throw Error(ErrorCode::Format, fmt::format("{}: __metadata__ is not a JSON object", file));
            for (const auto &[k, v] : entry.items()) {
                if (!v.is_string())
                    throw Error(ErrorCode::Format,
                                fmt::format("{}: __metadata__ value for '{}' is not a string", file, k));
                impl->metadata[k] = v.get<std::string>();
            }
            continue;
        }
        const std::string where = fmt::format("{}: tensor '{}'", file, name);
        if (!entry.is_object())
            throw Error(ErrorCode::Format, where + ": entry is not a JSON object");
        for (const char *field : {"dtype", "shape", "data_offsets"}) {
            if (!entry.contains(field))
                throw Error(ErrorCode::Format, fmt::format("{}: field '{}' is missing", where, field));
        }
        TensorInfo t;
        t.name = name;
        const json &dt = entry["dtype"];
        if (!dt.is_string())
            throw Error(ErrorCode::Format, where + ": dtype is not a string");
        const auto parsed = parseDType(dt.get<std::string>());
        if (!parsed)
            throw Error(ErrorCode::Format,
                        fmt::format("{}: unknown dtype '{}'", where, dt.get<std::string>()));
        t.dtype = *parsed;

        const json &shape = entry["shape"];
        if (!shape.is_array())
            throw Error(ErrorCode::Format, where + ": shape is not an array");
        // numel in 128 bits so that absurd shapes are reported instead of wrapping around.
        unsigned __int128 numel = 1;
        for (const json &d : shape) {
            if (!d.is_number_integer())
                throw Error(ErrorCode::Format,
                            fmt::format("{}: shape {} has a non-integer dimension", where, shape.dump()));
            const int64_t v = d.get<int64_t>();
            if (v < 0)
                throw Error(ErrorCode::Format,
                            fmt::format("{}: shape {} has a negative dimension", where, shape.dump()));
            t.shape.push_back(v);
            numel *= uint64_t(v);
            if (numel > std::numeric_limits<uint64_t>::max())
                throw Error(ErrorCode::Format, fmt::format("{}: shape {} is too large", where, shape.dump()));
        }

        const json &offs = entry["data_offsets"];
        if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() ||
            !offs[1].is_number_unsigned())
            throw Error(ErrorCode::Format,
                        fmt::format("{}: data_offsets {} is not a pair of non-negative integers", where,
                                    offs.dump()));
        const uint64_t begin = offs[0].get<uint64_t>();
        const uint64_t end = offs[1].get<uint64_t>();
        if (begin > end)
            throw Error(ErrorCode::Format,
                        fmt::format("{}: data_offsets [{}, {}] begin after they end", where, begin, end));
        if (end > dataSize)
            throw Error(ErrorCode::Format,
                        fmt::format("{}: data_offsets [{}, {}] end beyond the data section ({} bytes)", where,
                                    begin, end, dataSize));
        const unsigned __int128 need = numel * unsigned(dtypeSize(t.dtype));
        if (need != end - begin)
            throw Error(ErrorCode::Format,
                        fmt::format("{}: data_offsets [{}, {}] hold {} bytes but {} {} needs {}", where,
                                    begin, end, end - begin, dtypeName(t.dtype), shapeString(t.shape),
                                    need > std::numeric_limits<uint64_t>::max()
                                        ? std::string("more than 2^64 bytes")
                                        : std::to_string(uint64_t(need))));
        t.offset = begin;
        t.bytes = end - begin;
        impl->tensors.push_back(std::move(t));
    }

    std::sort(impl->tensors.begin(), impl->tensors.end(), [](const TensorInfo &a, const TensorInfo &b) {
        return a.offset != b.offset ? a.offset < b.offset : a.bytes < b.bytes;
    });
    // After sorting by offset, any overlap shows up between neighbours (empty tensors overlap nothing).
    const TensorInfo *prev = nullptr;
    for (const TensorInfo &t : impl->tensors) {
        if (t.bytes == 0)
            continue;
        if (prev && t.offset < prev->offset + prev->bytes)
            throw Error(ErrorCode::Format,
                        fmt::format("{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}' at [{}, {}]",
                                    file, t.name, t.offset, t.offset + t.bytes, prev->name, prev->offset,
                                    prev->offset + prev->bytes));
        prev = &t;
    }
    for (size_t i = 0; i < impl->tensors.size(); ++i)
        impl->byName.emplace(impl->tensors[i].name, i);

    SafetensorsFile f;
    f.m_impl = std::move(impl);
    return f;
}

const std::filesystem::path &SafetensorsFile::path() const
{
    return m_impl->file->path();
}
const std::vector<TensorInfo> &SafetensorsFile::tensors() const
{
    return m_impl->tensors;
}

const TensorInfo *SafetensorsFile::find(std::string_view name) const
{
    const auto it = m_impl->byName.find(name);
    return it == m_impl->byName.end() ? nullptr : &m_impl->tensors[it->second];
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo &t) const
{
    return m_impl->file->bytes().subspan(size_t(m_impl->dataStart + t.offset), size_t(t.bytes));
}

const std::map<std::string, std::string> &SafetensorsFile::metadata() const
{
    return m_impl->metadata;
}
uint64_t SafetensorsFile::fileSize() const
{
    return m_impl->file->size();
}

// ---------------------------------------------------------------------------------------------

WeightSet WeightSet::open(const std::filesystem::path &dirOrFile)
{
    namespace fs = std::filesystem;
    WeightSet ws;
    fs::path single, index;
    if (fs::is_directory(dirOrFile)) {
        if (fs::exists(dirOrFile / "model.safetensors"))
            single = dirOrFile / "model.safetensors";
        else if (fs::exists(dirOrFile / "model.safetensors.index.json"))
            index = dirOrFile / "model.safetensors.index.json";
        else
            throw Error(ErrorCode::Io, fmt::format("{}: no model.safetensors or model.safetensors.index.json",
                                                   dirOrFile.string()));
    } else if (dirOrFile.filename().string().ends_with(".index.json")) {
        index = dirOrFile;
    } else {
        single = dirOrFile;
    }

    if (!single.empty()) {
        ws.m_source = single;
        ws.m_files.push_back(single);
        ws.m_shards.push_back(SafetensorsFile::open(single));
        for (const TensorInfo &t : ws.m_shards[0].tensors())
            ws.m_where.emplace(t.name, 0);
        return ws;
    }

    ws.m_source = index;
    const std::string indexName = index.string();
    std::string text;
    {
        auto mapped = MappedFile::open(index);
        text.assign(reinterpret_cast<const char *>(mapped->data()), size_t(mapped->size()));
    }
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception &e) {
        throw Error(ErrorCode::Format, fmt::format("{}: not valid JSON: {}", indexName, e.what()));
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw Error(ErrorCode::Format,
                    fmt::format("{}: field 'weight_map' is missing or not an object", indexName));

    std::map<std::string, size_t> shardIndex; // shard file name -> index in m_shards
    for (const auto &[tensor, shardJ] : j["weight_map"].items()) {
        if (!shardJ.is_string())
            throw Error(ErrorCode::Format, fmt::format("{}: weight_map entry for tensor '{}' is not a string",
                                                       indexName, tensor));
        const std::string shard = shardJ.get<std::string>();
        auto it = shardIndex.find(shard);
        if (it == shardIndex.end()) {
            const fs::path shardPath = index.parent_path() / shard;
            // a shard is a file name inside the model directory: no absolute paths, no "..", no
            // symlink out of it (the index is data, not a licence to read anything on the machine).
            // One exception, the Hugging Face hub cache: in models--ORG--NAME/snapshots/REV/ every
            // file is a symlink to ../../blobs/SHA, inside the same repository folder.
            std::error_code ec;
            const fs::path dir = fs::weakly_canonical(fs::absolute(index.parent_path()), ec);
            const fs::path resolved = fs::weakly_canonical(fs::absolute(shardPath), ec);
            const auto inside = [&](const fs::path &root) {
                const auto rel = resolved.lexically_relative(root);
                return !rel.empty() && *rel.begin() != "..";
            };
            bool lexicallyPlain = !fs::path(shard).is_absolute();
            for (const auto &part : fs::path(shard))
                lexicallyPlain = lexicallyPlain && part != "..";
            const fs::path repo = dir.parent_path().parent_path();
            const bool hubSnapshot = dir.parent_path().filename() == "snapshots" &&
                                     repo.filename().string().starts_with("models--");
            if (!lexicallyPlain || ec || !(inside(dir) || (hubSnapshot && inside(repo / "blobs"))))
                throw Error(ErrorCode::Format,
                            fmt::format("{}: tensor '{}': shard '{}' is outside the model directory",
                                        indexName, tensor, shard));
            if (!fs::exists(shardPath))
                throw Error(ErrorCode::Io, fmt::format("{}: tensor '{}': shard '{}' does not exist",
                                                       indexName, tensor, shardPath.string()));
            if (!fs::is_regular_file(shardPath))
                throw Error(ErrorCode::Format,
                            fmt::format("{}: tensor '{}': shard '{}' is not a regular file", indexName,
                                        tensor, shardPath.string()));
            ws.m_files.push_back(shardPath);
            ws.m_shards.push_back(SafetensorsFile::open(shardPath));
            it = shardIndex.emplace(shard, ws.m_shards.size() - 1).first;
        }
        if (!ws.m_shards[it->second].find(tensor))
            throw Error(ErrorCode::Format,
                        fmt::format("{}: tensor '{}' is mapped to shard '{}', which lacks it", indexName,
                                    tensor, ws.m_files[it->second].string()));
        ws.m_where.emplace(tensor, it->second);
    }
    return ws;
}

std::vector<std::string> WeightSet::names() const
{
    std::vector<std::string> out;
    out.reserve(m_where.size());
    for (const auto &[name, shard] : m_where)
        out.push_back(name);
    return out; // std::map keeps them sorted
}

bool WeightSet::contains(std::string_view name) const
{
    return m_where.find(name) != m_where.end();
}

TensorRef WeightSet::get(std::string_view name) const
{
    const auto it = m_where.find(name);
    if (it == m_where.end())
        throw Error(ErrorCode::Shape, fmt::format("{}: tensor '{}' is missing", m_source.string(), name));
    const SafetensorsFile &shard = m_shards[it->second];
    const TensorInfo *info = shard.find(name);
    TensorRef ref;
    ref.info = info;
    ref.data = shard.bytes(*info).data();
    ref.file = shard.path();
    return ref;
}

const std::vector<std::filesystem::path> &WeightSet::files() const
{
    return m_files;
}

uint64_t WeightSet::totalBytes() const
{
    uint64_t total = 0;
    for (const auto &[name, shard] : m_where)
        total += m_shards[shard].find(name)->bytes;
    return total;
}

// ---------------------------------------------------------------------------------------------

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                            std::span<const std::byte> data)
{
    Entry e{std::move(name), dtype, std::move(shape), {}};
    TensorInfo probe;
    probe.shape = e.shape;
    const uint64_t need = uint64_t(probe.numel()) * uint64_t(dtypeSize(dtype));
    if (need != data.size())
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("SafetensorsWriter: tensor '{}': {} bytes given but {} {} needs {}", e.name,
                                data.size(), dtypeName(dtype), shapeString(e.shape), need));
    if (e.name == "__metadata__")
        throw Error(ErrorCode::InvalidArgument,
                    "SafetensorsWriter: '__metadata__' is not a valid tensor name");
    for (const Entry &o : m_entries) {
        if (o.name == e.name)
            throw Error(ErrorCode::InvalidArgument,
                        fmt::format("SafetensorsWriter: tensor '{}' added twice", e.name));
    }
    e.data.assign(data.begin(), data.end());
    m_entries.push_back(std::move(e));
}

void SafetensorsWriter::addF32(std::string name, std::vector<int64_t> shape, std::span<const float> data)
{
    add(std::move(name), DType::F32, std::move(shape), std::as_bytes(data));
}

void SafetensorsWriter::setMetadata(std::string key, std::string value)
{
    m_metadata[std::move(key)] = std::move(value);
}

std::string safetensorsPreamble(std::string headerJson)
{
    headerJson.append((8 - headerJson.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i)
        out[size_t(i)] = char((uint64_t(headerJson.size()) >> (8 * i)) & 0xff);
    return out + headerJson;
}

void SafetensorsWriter::write(const std::filesystem::path &path) const
{
    json header = json::object();
    if (!m_metadata.empty())
        header["__metadata__"] = m_metadata;
    uint64_t offset = 0;
    for (const Entry &e : m_entries) {
        header[e.name] = {{"dtype", dtypeName(e.dtype)},
                          {"shape", e.shape},
                          {"data_offsets", {offset, offset + e.data.size()}}};
        offset += e.data.size();
    }
    AtomicFile out(path);
    out.write(safetensorsPreamble(header.dump()));
    for (const Entry &e : m_entries)
        out.write(e.data);
    out.commit();
}

std::vector<float> toFloatVector(const TensorRef &t)
{
    const TensorInfo &info = *t.info;
    const int64_t n = info.numel();
    const std::string what = fmt::format("{}: tensor '{}'", t.file.string(), info.name);
    if (info.dtype != DType::F32 && info.dtype != DType::F16 && info.dtype != DType::BF16 &&
        !isBlockQuantized(info.dtype))
        throw Error(ErrorCode::Shape,
                    fmt::format("{} has dtype {}, expected F32, F16, BF16 or a GGUF quantised type", what,
                                dtypeName(info.dtype)));
    std::vector<float> out(static_cast<size_t>(n));
    dequantize(info.dtype, {t.data, size_t(info.bytes)}, n, out.data(), what);
    return out;
}

} // namespace kvwb::core
