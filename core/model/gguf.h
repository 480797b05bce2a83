// GGUF (llama.cpp's model file, versions 2 and 3) reader and writer: the container only, metadata
// and tensors. What the metadata means for a model (configuration, tensor names, tokenizer) is in
// gguf_model.h and core/tokenize/gguf_tokenizer.h.
//
// Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count, the metadata (key string,
// u32 type, value), the tensor infos (name, u32 n_dims, u64 ne[n_dims] innermost first, u32 ggml
// type, u64 offset), padding to general.alignment (default 32), the data. Strings are u64 length +
// bytes. All little-endian.
//
// The reader trusts nothing: every count and length is checked against the bytes left in the file
// before anything is sized from it, every tensor must lie inside the data section, aligned, not
// overlapping another, and of a type it can read. Every failure is one Error(Format) (or
// Error(Unsupported) for a well-formed file using something kvwb does not read) naming the file and
// the key or tensor at fault.
//
// Thread-safety: GgufFile is immutable after open (share freely); GgufWriter is a plain builder.
#pragma once

#include "core/model/dtype.h"
#include "core/model/safetensors.h"
#include "core/util/mapped_file.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

enum class GgufType : uint32_t
{
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12
};
const char *ggufTypeName(GgufType t) noexcept;

// One metadata value. Scalars: the number in `number` (exact for every integer type up to 2^53 and
// for f32/f64; u64/i64 also in `integer`), a string in `text`. Arrays: element type in `elemType`
// and the values in `numbers` or `strings` (arrays of arrays are refused).
struct GgufValue
{
    GgufType type = GgufType::U32;
    GgufType elemType = GgufType::U32;
    double number = 0;
    int64_t integer = 0;
    std::string text;
    std::vector<double> numbers;
    std::vector<std::string> strings;

    bool isInteger() const;
    bool isArray() const { return type == GgufType::Array; }
    size_t arraySize() const { return elemType == GgufType::String ? strings.size() : numbers.size(); }
};

// A ggml type id (ggml.h's enum ggml_type) as kvwb's DType, or nullopt for a type kvwb does not read.
std::optional<DType> dtypeFromGgml(uint32_t ggmlType) noexcept;
uint32_t ggmlFromDtype(DType t); // Error(InvalidArgument) for types GGUF cannot hold
// ggml's name of a type id, known or not ("Q2_K", "IQ4_XS", ...), or "type N".
std::string ggmlTypeName(uint32_t ggmlType);

struct GgufTensor
{
    TensorInfo info;          // name, dtype, shape in torch order (ne reversed), offset from data start
    uint32_t ggmlType = 0;    // as stored
    std::vector<uint64_t> ne; // as stored: innermost dimension first
};

class GgufFile
{
public:
    static GgufFile open(const std::filesystem::path &path);
    // Whether the file starts with the GGUF magic (cheap; reads 4 bytes).
    static bool looksLikeGguf(const std::filesystem::path &path);

    const std::filesystem::path &path() const;
    uint32_t version() const;
    uint64_t alignment() const;
    const std::map<std::string, GgufValue, std::less<>> &metadata() const;
    const GgufValue *find(std::string_view key) const;
    const std::vector<GgufTensor> &tensors() const; // in file order
    const GgufTensor *tensor(std::string_view name) const;
    // The tensor's bytes inside the mapping.
    const std::byte *data(const GgufTensor &t) const;
    uint64_t fileSize() const;

    // Typed lookups. nullopt when the key is absent; Error(Format) naming the file and key when it
    // holds another type (any integer type is accepted for an integer, any number for a float).
    std::optional<int64_t> integer(std::string_view key) const;
    std::optional<double> number(std::string_view key) const;
    std::optional<std::string> string(std::string_view key) const;
    std::optional<bool> boolean(std::string_view key) const;
    // An array of `elem` (strings) or of numbers (any numeric elem), else Error(Format).
    const std::vector<std::string> *stringArray(std::string_view key) const;
    const std::vector<double> *numberArray(std::string_view key) const;

private:
    struct Impl;
    std::shared_ptr<const Impl> m_impl;
};

// Builds a GGUF v3 file. Values keep their insertion order; tensors are laid out in order, each
// aligned to 32 bytes.
class GgufWriter
{
public:
    void setU32(std::string key, uint32_t v);
    void setI32(std::string key, int32_t v);
    void setF32(std::string key, float v);
    void setBool(std::string key, bool v);
    void setString(std::string key, std::string v);
    void setStrings(std::string key, std::vector<std::string> v);
    void setF32s(std::string key, std::vector<float> v);
    void setI32s(std::string key, std::vector<int32_t> v);
    // Any value read from a file, in its own type.
    void setValue(std::string key, const GgufValue &v);
    // The strings of a string-array value set on this writer; nullopt when the key is absent or
    // holds another type.
    std::optional<std::vector<std::string>> strings(std::string_view key) const;
    // shape in torch order; data already in `dtype`'s layout (quantize() for block types).
    void addTensor(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<std::byte> data);
    // Writes to path + ".tmp", fsyncs, renames over path. Error(Io) names the path.
    void write(const std::filesystem::path &path) const;

private:
    struct Kv
    {
        std::string key;
        GgufType type;
        std::vector<std::byte> payload; // the value's encoding after the u32 type
    };
    struct Tensor
    {
        std::string name;
        DType dtype;
        std::vector<int64_t> shape;
        std::vector<std::byte> data;
    };
    void put(std::string key, GgufType type, std::vector<std::byte> payload);
    std::vector<Kv> m_kvs;
    std::vector<Tensor> m_tensors;
};

} // namespace kvwb::core
