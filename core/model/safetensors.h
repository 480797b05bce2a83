// Safetensors reader (single file and sharded index) and writer.
//
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
// optional "__metadata__" (string -> string), then the data section. The reader validates everything
// before handing out a pointer: header inside the file, JSON well-formed, offsets inside the data
// section, no overlapping tensors, byte count == numel * dtype size. Every failure is an
// Error(Format) whose message names the file and, where relevant, the tensor.
//
// Thread-safety: SafetensorsFile and WeightSet are immutable after open (share freely);
// SafetensorsWriter is a plain single-threaded builder.
#pragma once

#include "core/model/dtype.h"
#include "core/util/mapped_file.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

struct TensorInfo
{
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape; // torch order
    uint64_t offset = 0;        // bytes, relative to the start of the data section
    uint64_t bytes = 0;         // bytes
    int64_t numel() const;
};

// A tensor's bytes in some mapped file, plus where it came from (for error messages).
struct TensorRef
{
    const TensorInfo *info = nullptr;
    const std::byte *data = nullptr; // info->bytes bytes, little-endian, row-major
    std::filesystem::path file;
};

class SafetensorsFile
{
public:
    static SafetensorsFile open(const std::filesystem::path &path);

    const std::filesystem::path &path() const;
    const std::vector<TensorInfo> &tensors() const; // in file order of offsets
    const TensorInfo *find(std::string_view name) const;
    std::span<const std::byte> bytes(const TensorInfo &t) const;
    const std::map<std::string, std::string> &metadata() const;
    uint64_t fileSize() const; // bytes

private:
    struct Impl;
    std::shared_ptr<const Impl> m_impl;
};

// All tensors of a model: one model.safetensors, or the shards listed in
// model.safetensors.index.json ("weight_map": tensor -> shard file). A tensor named in the index but
// missing from its shard, or a shard file missing, is an Error naming both.
class WeightSet
{
public:
    // dir holds model.safetensors or model.safetensors.index.json; a path to either file works too.
    static WeightSet open(const std::filesystem::path &dirOrFile);

    std::vector<std::string> names() const; // sorted
    bool contains(std::string_view name) const;
    // Throws Error(Shape) naming the tensor and file when it is missing.
    TensorRef get(std::string_view name) const;
    const std::vector<std::filesystem::path> &files() const; // shard paths in order
    uint64_t totalBytes() const;                             // sum of tensor bytes
    // model.safetensors or model.safetensors.index.json: the file to name in error messages.
    const std::filesystem::path &source() const { return m_source; }

private:
    std::filesystem::path m_source; // model.safetensors or the index file, for error messages
    std::vector<std::filesystem::path> m_files;
    std::vector<SafetensorsFile> m_shards;
    std::map<std::string, size_t, std::less<>> m_where; // tensor -> shard index
};

class SafetensorsWriter
{
public:
    void add(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const std::byte> data);
    void addF32(std::string name, std::vector<int64_t> shape, std::span<const float> data);
    void setMetadata(std::string key, std::string value);
    // Writes to path + ".tmp", fsyncs, renames over path: a crash never leaves a half file at path.
    // Error(Io) names the path on any failure (unwritable directory, disk full).
    void write(const std::filesystem::path &path) const;

private:
    struct Entry
    {
        std::string name;
        DType dtype;
        std::vector<int64_t> shape;
        std::vector<std::byte> data;
    };
    std::vector<Entry> m_entries;
    std::map<std::string, std::string> m_metadata;
};

// What precedes the tensor data of a safetensors file: the header's length (uint64 LE) and the
// header JSON, padded with spaces so the data starts 8-byte aligned (as the reference writer does,
// so readers can map tensors of any dtype in place). For writers that stream the data after it.
std::string safetensorsPreamble(std::string headerJson);

// A F32/F16/BF16 or GGUF block-quantised tensor as floats. Error(Shape) for other dtypes.
std::vector<float> toFloatVector(const TensorRef &t);

} // namespace kvwb::core
