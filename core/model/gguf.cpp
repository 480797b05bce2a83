#include "core/model/gguf.h"

#include "core/model/quant.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

namespace kvwb::core {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMagic = 0x46554747; // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4; // GGML_MAX_DIMS

const char *const kGgmlNames[] = {
    "F32",      "F16",      "Q4_0",    "Q4_1",  "Q4_2",       "Q4_3",       "Q5_0",       "Q5_1",
    "Q8_0",     "Q8_1",     "Q2_K",    "Q3_K",  "Q4_K",       "Q5_K",       "Q6_K",       "Q8_K",
    "IQ2_XXS",  "IQ2_XS",   "IQ3_XXS", "IQ1_S", "IQ4_NL",     "IQ3_S",      "IQ2_S",      "IQ4_XS",
    "I8",       "I16",      "I32",     "I64",   "F64",        "IQ1_M",      "BF16",       "Q4_0_4_4",
    "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",   "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};

struct TypeMap
{
    uint32_t ggml;
    DType dtype;
};
constexpr TypeMap kTypes[] = {{0, DType::F32},   {1, DType::F16},   {2, DType::Q4_0}, {3, DType::Q4_1},
                              {6, DType::Q5_0},  {7, DType::Q5_1},  {8, DType::Q8_0}, {12, DType::Q4_K},
                              {13, DType::Q5_K}, {14, DType::Q6_K}, {30, DType::BF16}};

int scalarBytes(GgufType t)
{
    switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::Bool:
        return 1;
    case GgufType::U16:
    case GgufType::I16:
        return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
        return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
        return 8;
    case GgufType::String:
        return 8; // at least its length
    case GgufType::Array:
        return 12; // at least its element type and count
    }
    return 0;
}

// A bounds-checked cursor over the mapped file: every read names what it was reading.
class Cursor
{
public:
    Cursor(const std::byte *data, uint64_t size, std::string file)
        : m_data(data), m_size(size), m_file(std::move(file))
    {}

    uint64_t pos() const { return m_pos; }
    uint64_t left() const { return m_size - m_pos; }
    const std::string &file() const { return m_file; }

    [[noreturn]] void fail(const std::string &what) const
    {
        throw Error(ErrorCode::Format, fmt::format("{}: {}", m_file, what));
    }

    template <typename T> T read(const std::string &what)
    {
        if (left() < sizeof(T))
            fail(fmt::format("file ends at byte {} inside {} (needs {} more bytes)", m_size, what,
                             sizeof(T) - left()));
        T v;
        std::memcpy(&v, m_data + m_pos, sizeof(T));
        m_pos += sizeof(T);
        return v;
    }

    std::string str(const std::string &what)
    {
        const uint64_t n = read<uint64_t>(what + " length");
        if (n > left())
            fail(fmt::format("{} is {} bytes long but only {} bytes are left in the file", what, n, left()));
        std::string s(reinterpret_cast<const char *>(m_data + m_pos), size_t(n));
        m_pos += n;
        return s;
    }

private:
    const std::byte *m_data;
    uint64_t m_size;
    uint64_t m_pos = 0;
    std::string m_file;
};

bool validType(uint32_t t)
{
    return t <= uint32_t(GgufType::F64);
}

double readNumber(Cursor &c, GgufType t, const std::string &what, int64_t *integer)
{
    switch (t) {
    case GgufType::U8:
        return c.read<uint8_t>(what);
    case GgufType::I8:
        return c.read<int8_t>(what);
    case GgufType::U16:
        return c.read<uint16_t>(what);
    case GgufType::I16:
        return c.read<int16_t>(what);
    case GgufType::U32:
        return c.read<uint32_t>(what);
    case GgufType::I32:
        return c.read<int32_t>(what);
    case GgufType::F32:
        return c.read<float>(what);
    case GgufType::Bool: {
        const uint8_t b = c.read<uint8_t>(what);
        if (b > 1)
            c.fail(fmt::format("{} is a bool holding {}, not 0 or 1", what, b));
        return b;
    }
    case GgufType::U64: {
        const uint64_t v = c.read<uint64_t>(what);
        if (integer)
            *integer = v > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(v);
        return double(v);
    }
    case GgufType::I64: {
        const int64_t v = c.read<int64_t>(what);
        if (integer)
            *integer = v;
        return double(v);
    }
    case GgufType::F64:
        return c.read<double>(what);
    default:
        c.fail(fmt::format("{} has type {} where a number was expected", what, uint32_t(t)));
    }
}

GgufValue readValue(Cursor &c, GgufType type, const std::string &key)
{
    GgufValue v;
    v.type = type;
    if (type == GgufType::String) {
        v.text = c.str(fmt::format("metadata '{}'", key));
        return v;
    }
    if (type != GgufType::Array) {
        v.number = readNumber(c, type, fmt::format("metadata '{}'", key), &v.integer);
        if (v.isInteger() && type != GgufType::U64 && type != GgufType::I64)
            v.integer = int64_t(v.number); // a 32-bit or smaller integer: exact
        return v;
    }
    const uint32_t elem = c.read<uint32_t>(fmt::format("metadata '{}' element type", key));
    if (!validType(elem))
        c.fail(fmt::format("metadata '{}' is an array of unknown type {}", key, elem));
    if (GgufType(elem) == GgufType::Array)
        c.fail(fmt::format("metadata '{}' is an array of arrays, which kvwb does not read", key));
    v.elemType = GgufType(elem);
    const uint64_t n = c.read<uint64_t>(fmt::format("metadata '{}' element count", key));
    const uint64_t minBytes = uint64_t(scalarBytes(v.elemType));
    if (n > c.left() / minBytes)
        c.fail(fmt::format("metadata '{}' claims {} elements of {} but only {} bytes are left in the file",
                           key, n, ggufTypeName(v.elemType), c.left()));
    if (v.elemType == GgufType::String) {
        v.strings.reserve(size_t(n));
        for (uint64_t i = 0; i < n; ++i)
            v.strings.push_back(c.str(fmt::format("metadata '{}' element {}", key, i)));
    } else {
        v.numbers.reserve(size_t(n));
        for (uint64_t i = 0; i < n; ++i)
            v.numbers.push_back(
                readNumber(c, v.elemType, fmt::format("metadata '{}' element {}", key, i), nullptr));
    }
    return v;
}

} // namespace

const char *ggufTypeName(GgufType t) noexcept
{
    switch (t) {
    case GgufType::U8:
        return "u8";
    case GgufType::I8:
        return "i8";
    case GgufType::U16:
        return "u16";
    case GgufType::I16:
        return "i16";
    case GgufType::U32:
        return "u32";
    case GgufType::I32:
        return "i32";
    case GgufType::F32:
        return "f32";
    case GgufType::Bool:
        return "bool";
    case GgufType::String:
        return "string";
    case GgufType::Array:
        return "array";
    case GgufType::U64:
        return "u64";
    case GgufType::I64:
        return "i64";
    case GgufType::F64:
        return "f64";
    }
    return "?";
}

bool GgufValue::isInteger() const
{
    switch (type) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::U16:
    case GgufType::I16:
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::U64:
    case GgufType::I64:
        return true;
    default:
        return false;
    }
}

std::optional<DType> dtypeFromGgml(uint32_t ggmlType) noexcept
{
    for (const TypeMap &m : kTypes)
        if (m.ggml == ggmlType)
            return m.dtype;
    return std::nullopt;
}

uint32_t ggmlFromDtype(DType t)
{
    for (const TypeMap &m : kTypes)
        if (m.dtype == t)
            return m.ggml;
    throw Error(ErrorCode::InvalidArgument, fmt::format("dtype {} has no GGUF tensor type", dtypeName(t)));
}

std::string ggmlTypeName(uint32_t ggmlType)
{
    if (ggmlType < std::size(kGgmlNames))
        return kGgmlNames[ggmlType];
    return fmt::format("type {}", ggmlType);
}

struct GgufFile::Impl
{
    std::shared_ptr<const MappedFile> file;
    uint32_t version = 0;
    uint64_t alignment = kDefaultAlignment;
    uint64_t dataStart = 0;
    std::map<std::string, GgufValue, std::less<>> metadata;
    std::vector<GgufTensor> tensors;
    std::map<std::string, size_t, std::less<>> byName;
};

bool GgufFile::looksLikeGguf(const fs::path &path)
{
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

GgufFile GgufFile::open(const fs::path &path)
{
    auto impl = std::make_shared<Impl>();
    impl->file = MappedFile::open(path);
    const std::string file = path.string();
    Cursor c(impl->file->data(), impl->file->size(), file);
    if (impl->file->size() < 4 || c.read<uint32_t>("magic") != kMagic)
        c.fail("not a GGUF file (no 'GGUF' magic at byte 0)");
    impl->version = c.read<uint32_t>("version");
    if (impl->version == 1)
        throw Error(ErrorCode::Unsupported,
                    file + ": GGUF version 1 (32-bit counts, 2023) is not supported; convert the model again "
                           "with a current llama.cpp");
    if (impl->version != 2 && impl->version != 3) {
        const uint32_t swapped = __builtin_bswap32(impl->version);
        if (swapped == 2 || swapped == 3)
            throw Error(ErrorCode::Unsupported, file + ": big-endian GGUF is not supported");
        throw Error(
            ErrorCode::Unsupported,
            fmt::format("{}: GGUF version {} is not supported (versions 2 and 3 are)", file, impl->version));
    }
    const uint64_t nTensors = c.read<uint64_t>("tensor count");
    const uint64_t nKv = c.read<uint64_t>("metadata count");
    // Smallest encodings: a key/value is an 8-byte key length, a 4-byte type and a 1-byte value;
    // a tensor info is a name length, n_dims, one dimension, a type and an offset.
    if (nKv > c.left() / 13)
        c.fail(fmt::format("header claims {} metadata entries but the file has only {} bytes left", nKv,
                           c.left()));
    if (nTensors > c.left() / 32)
        c.fail(
            fmt::format("header claims {} tensors but the file has only {} bytes left", nTensors, c.left()));

    for (uint64_t i = 0; i < nKv; ++i) {
        std::string key = c.str(fmt::format("metadata key {}", i));
        const uint32_t type = c.read<uint32_t>(fmt::format("metadata '{}' type", key));
        if (!validType(type))
            c.fail(fmt::format("metadata '{}' has unknown value type {}", key, type));
        GgufValue v = readValue(c, GgufType(type), key);
        if (impl->metadata.count(key))
            c.fail(fmt::format("metadata key '{}' appears twice", key));
        impl->metadata.emplace(std::move(key), std::move(v));
    }
    if (const auto it = impl->metadata.find("general.alignment"); it != impl->metadata.end()) {
        const GgufValue &a = it->second;
        if (!a.isInteger() || a.integer <= 0 || (a.integer & (a.integer - 1)) != 0 || a.integer > (1 << 20))
            c.fail(fmt::format("general.alignment is {}, expected a power of two up to 2^20", a.number));
        impl->alignment = uint64_t(a.integer);
    }

    struct Raw
    {
        std::string name;
        std::vector<uint64_t> ne;
        uint32_t type;
        uint64_t offset;
    };
    std::vector<Raw> raws;
    raws.reserve(size_t(nTensors));
    for (uint64_t i = 0; i < nTensors; ++i) {
        Raw r;
        r.name = c.str(fmt::format("tensor {} name", i));
        const std::string what = fmt::format("tensor '{}'", r.name);
        const uint32_t nDims = c.read<uint32_t>(what + " n_dims");
        if (nDims < 1 || nDims > kMaxDims)
            c.fail(fmt::format("{} has {} dimensions, expected 1 to {}", what, nDims, kMaxDims));
        for (uint32_t d = 0; d < nDims; ++d)
            r.ne.push_back(c.read<uint64_t>(fmt::format("{} dimension {}", what, d)));
        r.type = c.read<uint32_t>(what + " type");
        r.offset = c.read<uint64_t>(what + " offset");
        raws.push_back(std::move(r));
    }
    const uint64_t a = impl->alignment;
    impl->dataStart = (c.pos() + a - 1) / a * a;
    if (impl->dataStart > impl->file->size())
        c.fail(fmt::format("file ends at byte {}, before its data section (byte {})", impl->file->size(),
                           impl->dataStart));
    const uint64_t dataBytes = impl->file->size() - impl->dataStart;

    for (Raw &r : raws) {
        const std::string what = fmt::format("tensor '{}'", r.name);
        unsigned __int128 numel = 1;
        for (uint64_t d : r.ne) {
            if (d == 0 || d > (uint64_t(1) << 40))
                c.fail(fmt::format("{} has dimension {}, expected 1 to 2^40", what, d));
            numel *= d;
        }
        if (numel > (unsigned __int128)(1) << 48)
            c.fail(fmt::format("{} has more than 2^48 elements", what));
        const auto dtype = dtypeFromGgml(r.type);
        if (!dtype)
            throw Error(ErrorCode::Unsupported,
                        fmt::format("{}: {} has tensor type {} ({}), which kvwb does not read (it reads F32, "
                                    "F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
                                    file, what, ggmlTypeName(r.type), r.type));
        const int per = dtypeBlockElements(*dtype);
        if (r.ne[0] % uint64_t(per) != 0)
            c.fail(fmt::format("{}: rows of {} elements are not whole {} blocks of {}", what, r.ne[0],
                               dtypeName(*dtype), per));
        const uint64_t bytes = dtypeBytesFor(*dtype, int64_t(numel), file + ": " + what);
        if (r.offset % a != 0)
            c.fail(fmt::format("{} offset {} is not a multiple of the alignment {}", what, r.offset, a));
        if (r.offset > dataBytes || bytes > dataBytes - r.offset)
            c.fail(
                fmt::format("{} ({} bytes at data offset {}) runs past the end of the file ({} data bytes)",
                            what, bytes, r.offset, dataBytes));
        if (impl->byName.count(r.name))
            c.fail(fmt::format("{} appears twice", what));
        GgufTensor t;
        t.info.name = r.name;
        t.info.dtype = *dtype;
        for (auto it = r.ne.rbegin(); it != r.ne.rend(); ++it)
            t.info.shape.push_back(int64_t(*it));
        t.info.offset = r.offset;
        t.info.bytes = bytes;
        t.ggmlType = r.type;
        t.ne = r.ne;
        impl->byName.emplace(r.name, impl->tensors.size());
        impl->tensors.push_back(std::move(t));
    }
    std::vector<const GgufTensor *> order;
    for (const GgufTensor &t : impl->tensors)
        order.push_back(&t);
    std::sort(order.begin(), order.end(),
              [](const GgufTensor *x, const GgufTensor *y) { return x->info.offset < y->info.offset; });
    for (size_t i = 1; i < order.size(); ++i)
        if (order[i - 1]->info.offset + order[i - 1]->info.bytes > order[i]->info.offset)
            c.fail(
                fmt::format("tensors '{}' and '{}' overlap", order[i - 1]->info.name, order[i]->info.name));
    GgufFile f;
    f.m_impl = std::move(impl);
    return f;
}

const fs::path &GgufFile::path() const
{
    return m_impl->file->path();
}
uint32_t GgufFile::version() const
{
    return m_impl->version;
}
uint64_t GgufFile::alignment() const
{
    return m_impl->alignment;
}
const std::map<std::string, GgufValue, std::less<>> &GgufFile::metadata() const
{
    return m_impl->metadata;
}
const GgufValue *GgufFile::find(std::string_view key) const
{
    const auto it = m_impl->metadata.find(key);
    return it == m_impl->metadata.end() ? nullptr : &it->second;
}
const std::vector<GgufTensor> &GgufFile::tensors() const
{
    return m_impl->tensors;
}
const GgufTensor *GgufFile::tensor(std::string_view name) const
{
    const auto it = m_impl->byName.find(name);
    return it == m_impl->byName.end() ? nullptr : &m_impl->tensors[it->second];
}
const std::byte *GgufFile::data(const GgufTensor &t) const
{
    return m_impl->file->data() + m_impl->dataStart + t.info.offset;
}
uint64_t GgufFile::fileSize() const
{
    return m_impl->file->size();
}

namespace {
[[noreturn]] void wrongType(const GgufFile &f, std::string_view key, const GgufValue &v, const char *want)
{
    throw Error(ErrorCode::Format,
                fmt::format("{}: metadata '{}' is {}{}, expected {}", f.path().string(), key,
                            ggufTypeName(v.type),
                            v.isArray() ? std::string(" of ") + ggufTypeName(v.elemType) : "", want));
}
} // namespace

std::optional<int64_t> GgufFile::integer(std::string_view key) const
{
    const GgufValue *v = find(key);
    if (!v)
        return std::nullopt;
    if (!v->isInteger())
        wrongType(*this, key, *v, "an integer");
    return v->integer;
}

std::optional<double> GgufFile::number(std::string_view key) const
{
    const GgufValue *v = find(key);
    if (!v)
        return std::nullopt;
    if (v->isArray() || v->type == GgufType::String || v->type == GgufType::Bool)
        wrongType(*this, key, *v, "a number");
    return v->number;
}

std::optional<std::string> GgufFile::string(std::string_view key) const
{
    const GgufValue *v = find(key);
    if (!v)
        return std::nullopt;
    if (v->type != GgufType::String)
        wrongType(*this, key, *v, "a string");
    return v->text;
}

std::optional<bool> GgufFile::boolean(std::string_view key) const
{
    const GgufValue *v = find(key);
    if (!v)
        return std::nullopt;
    if (v->type != GgufType::Bool)
        wrongType(*this, key, *v, "a bool");
    return v->number != 0;
}

const std::vector<std::string> *GgufFile::stringArray(std::string_view key) const
{
    const GgufValue *v = find(key);
    if (!v)
        return nullptr;
    if (!v->isArray() || v->elemType != GgufType::String)
        wrongType(*this, key, *v, "an array of strings");
    return &v->strings;
}

const std::vector<double> *GgufFile::numberArray(std::string_view key) const
{
    const GgufValue *v = find(key);
    if (!v)
        return nullptr;
    if (!v->isArray() || v->elemType == GgufType::String)
        wrongType(*this, key, *v, "an array of numbers");
    return &v->numbers;
}

// --- writer ---

namespace {
template <typename T> void append(std::vector<std::byte> &out, const T &v)
{
    const auto *p = reinterpret_cast<const std::byte *>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}
void appendString(std::vector<std::byte> &out, std::string_view s)
{
    append(out, uint64_t(s.size()));
    const auto *p = reinterpret_cast<const std::byte *>(s.data());
    out.insert(out.end(), p, p + s.size());
}
} // namespace

void GgufWriter::put(std::string key, GgufType type, std::vector<std::byte> payload)
{
    const auto it = std::find_if(m_kvs.begin(), m_kvs.end(), [&](const Kv &k) { return k.key == key; });
    if (it != m_kvs.end())
        *it = Kv{std::move(key), type, std::move(payload)};
    else
        m_kvs.push_back(Kv{std::move(key), type, std::move(payload)});
}

void GgufWriter::setU32(std::string key, uint32_t v)
{
    std::vector<std::byte> p;
    append(p, v);
    put(std::move(key), GgufType::U32, std::move(p));
}
void GgufWriter::setI32(std::string key, int32_t v)
{
    std::vector<std::byte> p;
    append(p, v);
    put(std::move(key), GgufType::I32, std::move(p));
}
void GgufWriter::setF32(std::string key, float v)
{
    std::vector<std::byte> p;
    append(p, v);
    put(std::move(key), GgufType::F32, std::move(p));
}
void GgufWriter::setBool(std::string key, bool v)
{
    std::vector<std::byte> p;
    append(p, uint8_t(v ? 1 : 0));
    put(std::move(key), GgufType::Bool, std::move(p));
}
void GgufWriter::setString(std::string key, std::string v)
{
    std::vector<std::byte> p;
    appendString(p, v);
    put(std::move(key), GgufType::String, std::move(p));
}
void GgufWriter::setStrings(std::string key, std::vector<std::string> v)
{
    std::vector<std::byte> p;
    append(p, uint32_t(GgufType::String));
    append(p, uint64_t(v.size()));
    for (const auto &s : v)
        appendString(p, s);
    put(std::move(key), GgufType::Array, std::move(p));
}
std::optional<std::vector<std::string>> GgufWriter::strings(std::string_view key) const
{
    const auto it = std::find_if(m_kvs.begin(), m_kvs.end(), [&](const Kv &k) { return k.key == key; });
    if (it == m_kvs.end() || it->type != GgufType::Array)
        return std::nullopt;
    // The payload as setStrings() and setValue() encode it: element type, count, then the strings.
    const std::vector<std::byte> &p = it->payload;
    size_t at = 0;
    const auto read = [&](auto &v) {
        if (p.size() - at < sizeof(v))
            return false;
        std::memcpy(&v, p.data() + at, sizeof(v));
        at += sizeof(v);
        return true;
    };
    uint32_t elem = 0;
    uint64_t n = 0;
    if (!read(elem) || elem != uint32_t(GgufType::String) || !read(n))
        return std::nullopt;
    std::vector<std::string> out;
    for (uint64_t i = 0; i < n; ++i) {
        uint64_t len = 0;
        if (!read(len) || len > p.size() - at)
            return std::nullopt;
        out.emplace_back(reinterpret_cast<const char *>(p.data() + at), size_t(len));
        at += size_t(len);
    }
    return out;
}
void GgufWriter::setF32s(std::string key, std::vector<float> v)
{
    std::vector<std::byte> p;
    append(p, uint32_t(GgufType::F32));
    append(p, uint64_t(v.size()));
    for (float x : v)
        append(p, x);
    put(std::move(key), GgufType::Array, std::move(p));
}
void GgufWriter::setI32s(std::string key, std::vector<int32_t> v)
{
    std::vector<std::byte> p;
    append(p, uint32_t(GgufType::I32));
    append(p, uint64_t(v.size()));
    for (int32_t x : v)
        append(p, x);
    put(std::move(key), GgufType::Array, std::move(p));
}

namespace {
void appendNumber(std::vector<std::byte> &p, GgufType t, double x, int64_t integer)
{
    switch (t) {
    case GgufType::U8:
    case GgufType::Bool:
        append(p, uint8_t(x));
        break;
    case GgufType::I8:
        append(p, int8_t(x));
        break;
    case GgufType::U16:
        append(p, uint16_t(x));
        break;
    case GgufType::I16:
        append(p, int16_t(x));
        break;
    case GgufType::U32:
        append(p, uint32_t(x));
        break;
    case GgufType::I32:
        append(p, int32_t(x));
        break;
    case GgufType::F32:
        append(p, float(x));
        break;
    case GgufType::U64:
        append(p, uint64_t(integer));
        break;
    case GgufType::I64:
        append(p, integer);
        break;
    case GgufType::F64:
        append(p, x);
        break;
    default:
        break;
    }
}
} // namespace

void GgufWriter::setValue(std::string key, const GgufValue &v)
{
    std::vector<std::byte> p;
    if (v.type == GgufType::String) {
        appendString(p, v.text);
    } else if (v.type == GgufType::Array) {
        append(p, uint32_t(v.elemType));
        append(p, uint64_t(v.arraySize()));
        if (v.elemType == GgufType::String)
            for (const auto &s : v.strings)
                appendString(p, s);
        else
            for (double x : v.numbers) // integers were read from this very type, so they fit it
                appendNumber(p, v.elemType, x,
                             x >= 9.2e18    ? INT64_MAX
                             : x <= -9.2e18 ? INT64_MIN
                                            : int64_t(x));
    } else {
        appendNumber(p, v.type, v.number, v.integer);
    }
    put(std::move(key), v.type, std::move(p));
}

void GgufWriter::addTensor(std::string name, DType dtype, std::vector<int64_t> shape,
                           std::vector<std::byte> data)
{
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    const uint64_t need = dtypeBytesFor(dtype, n, "GGUF tensor '" + name + "'");
    if (need != data.size() || shape.empty() || shape.size() > kMaxDims)
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("GGUF tensor '{}': {} bytes for {} {} elements in {} dimensions, expected {}",
                                name, data.size(), n, dtypeName(dtype), shape.size(), need));
    (void)ggmlFromDtype(dtype);
    m_tensors.push_back(Tensor{std::move(name), dtype, std::move(shape), std::move(data)});
}

void GgufWriter::write(const fs::path &path) const
{
    std::vector<std::byte> head;
    append(head, kMagic);
    append(head, uint32_t(3));
    append(head, uint64_t(m_tensors.size()));
    append(head, uint64_t(m_kvs.size()));
    for (const Kv &kv : m_kvs) {
        appendString(head, kv.key);
        append(head, uint32_t(kv.type));
        head.insert(head.end(), kv.payload.begin(), kv.payload.end());
    }
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const Tensor &t : m_tensors) {
        appendString(head, t.name);
        append(head, uint32_t(t.shape.size()));
        for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
            append(head, uint64_t(*it));
        append(head, ggmlFromDtype(t.dtype));
        append(head, offset);
        offsets.push_back(offset);
        offset = (offset + t.data.size() + kDefaultAlignment - 1) / kDefaultAlignment * kDefaultAlignment;
    }
    head.resize((head.size() + kDefaultAlignment - 1) / kDefaultAlignment * kDefaultAlignment, std::byte{0});
    AtomicFile f(path);
    f.write(head);
    uint64_t at = 0;
    for (size_t i = 0; i < m_tensors.size(); ++i) {
        if (offsets[i] > at) {
            const std::vector<std::byte> pad(size_t(offsets[i] - at), std::byte{0});
            f.write(pad);
        }
        f.write(m_tensors[i].data);
        at = offsets[i] + m_tensors[i].data.size();
    }
    f.commit();
}

} // namespace kvwb::core
