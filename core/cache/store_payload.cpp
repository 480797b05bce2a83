#include "core/cache/store_payload.h"

#include "core/util/error.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <cstring>
#include <limits>

namespace kvwb::core {

namespace {

constexpr char kMagic[8] = {'K', 'V', 'W', 'B', 'P', 'A', 'Y', '1'};
constexpr uint32_t kMaxHeader = 65536;

void putU32(std::string &out, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        out += char((v >> (8 * i)) & 0xff);
}

uint32_t getU32(const char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
        v |= uint32_t(uint8_t(p[i])) << (8 * i);
    return v;
}

uint32_t crcOf(const char *data, size_t n)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        const uInt chunk = uInt(std::min<size_t>(n, std::numeric_limits<uInt>::max()));
        crc = crc32(crc, reinterpret_cast<const Bytef *>(data), chunk);
        data += chunk;
        n -= chunk;
    }
    return uint32_t(crc);
}

const char *kindName(PayloadKind k)
{
    return k == PayloadKind::Kv ? "kv" : "response";
}

bool dtypeAllowed(PayloadKind k, DType t)
{
    if (k == PayloadKind::Response)
        return t == DType::U8;
    return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

// product(shape) * size, or nullopt on a negative dimension or overflow past 2^62.
std::optional<int64_t> bodyBytes(const std::vector<int64_t> &shape, DType t)
{
    int64_t n = dtypeSize(t);
    for (int64_t d : shape) {
        if (d < 0 || (d > 0 && n > (int64_t(1) << 62) / d))
            return std::nullopt;
        n *= d;
    }
    return n;
}

std::string hexOf(std::string_view s)
{
    static const char *digits = "0123456789abcdef";
    std::string out;
    out.reserve(s.size() * 2);
    for (unsigned char c : s) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

} // namespace

std::optional<DecodedPayload> decodePayloadImpl(std::string_view bytes, const PayloadExpectation &expect,
                                                std::string *why, bool checkScope);

std::string encodePayload(const PayloadHeader &h, std::string_view body)
{
    if (!dtypeAllowed(h.kind, h.dtype))
        throw Error(ErrorCode::InvalidArgument, std::string("store payload: dtype ") + dtypeName(h.dtype) +
                                                    " is not allowed for a " + kindName(h.kind) + " payload");
    const auto expected = bodyBytes(h.shape, h.dtype);
    if (!expected || *expected != int64_t(body.size()))
        throw Error(ErrorCode::InvalidArgument, "store payload: body of " + std::to_string(body.size()) +
                                                    " bytes does not match its shape and dtype");
    nlohmann::json j = {{"kind", kindName(h.kind)},    {"tier", h.tier},
                        {"tenant", hexOf(h.tenant)},   {"fingerprint", h.fingerprint},
                        {"dtype", dtypeName(h.dtype)}, {"shape", h.shape},
                        {"created_ms", h.createdMs}};
    if (h.kind == PayloadKind::Kv)
        j["key_form"] = keyFormName(h.keyForm);
    const std::string header = j.dump();
    if (header.size() > kMaxHeader)
        throw Error(ErrorCode::InvalidArgument, "store payload: header longer than 64 KiB");
    std::string out;
    out.reserve(8 + 4 + header.size() + body.size() + 4);
    out.append(kMagic, 8);
    putU32(out, uint32_t(header.size()));
    out += header;
    out.append(body.data(), body.size());
    putU32(out, crcOf(out.data(), out.size()));
    return out;
}

namespace {

std::optional<std::string> unhex(const std::string &hex)
{
    if (hex.size() % 2)
        return std::nullopt;
    std::string out;
    for (size_t i = 0; i < hex.size(); i += 2) {
        int v = 0;
        for (int k = 0; k < 2; ++k) {
            const char c = hex[i + size_t(k)];
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0)
                return std::nullopt;
            v = v * 16 + d;
        }
        out += char(v);
    }
    return out;
}

} // namespace

std::optional<DecodedPayload> decodePayloadAnyScope(std::string_view bytes, PayloadKind kind,
                                                    const std::string &tier, std::string *why)
{
    PayloadExpectation e{kind, tier, {}, {}};
    return decodePayloadImpl(bytes, e, why, false);
}

std::optional<DecodedPayload> decodePayload(std::string_view bytes, const PayloadExpectation &expect,
                                            std::string *why)
{
    return decodePayloadImpl(bytes, expect, why, true);
}

std::optional<DecodedPayload> decodePayloadImpl(std::string_view bytes, const PayloadExpectation &expect,
                                                std::string *why, bool checkScope)
{
    const auto refuse = [&](const std::string &reason) -> std::optional<DecodedPayload> {
        if (why)
            *why = reason;
        return std::nullopt;
    };
    if (bytes.size() < 8 + 4 + 4 || std::memcmp(bytes.data(), kMagic, 8) != 0)
        return refuse("not a kvwb payload (bad magic or too short)");
    const uint32_t headerLen = getU32(bytes.data() + 8);
    if (headerLen < 2 || headerLen > kMaxHeader || size_t(headerLen) > bytes.size() - 16)
        return refuse("header length " + std::to_string(headerLen) + " does not fit the " +
                      std::to_string(bytes.size()) + " bytes received");
    const size_t crcAt = bytes.size() - 4;
    if (getU32(bytes.data() + crcAt) != crcOf(bytes.data(), crcAt))
        return refuse("checksum mismatch");
    DecodedPayload out;
    PayloadHeader &h = out.header;
    try {
        const auto j = nlohmann::json::parse(bytes.substr(12, headerLen));
        const std::string kind = j.at("kind").get<std::string>();
        if (kind != "response" && kind != "kv")
            return refuse("field kind: '" + kind + "' is not response or kv");
        h.kind = kind == "kv" ? PayloadKind::Kv : PayloadKind::Response;
        h.tier = j.at("tier").get<std::string>();
        h.tenant = j.at("tenant").get<std::string>(); // hex, compared hex to hex below
        h.fingerprint = j.at("fingerprint").get<std::string>();
        const auto dtype = parseDType(j.at("dtype").get<std::string>());
        if (!dtype || !dtypeAllowed(h.kind, *dtype))
            return refuse("field dtype: '" + j.at("dtype").get<std::string>() + "' is not allowed for " +
                          kind);
        h.dtype = *dtype;
        h.shape = j.at("shape").get<std::vector<int64_t>>();
        if (h.shape.size() > 8)
            return refuse("field shape: more than 8 dimensions");
        h.createdMs = j.at("created_ms").get<int64_t>();
        if (h.kind == PayloadKind::Kv) {
            const std::string form = j.at("key_form").get<std::string>();
            if (form != keyFormName(KeyForm::PreRope) && form != keyFormName(KeyForm::PostRope))
                return refuse("field key_form: '" + form + "'");
            h.keyForm = form == keyFormName(KeyForm::PreRope) ? KeyForm::PreRope : KeyForm::PostRope;
        }
    } catch (const nlohmann::json::exception &e) {
        return refuse(std::string("header: ") + e.what());
    }
    const size_t bodyAt = 12 + headerLen;
    const size_t bodyLen = crcAt - bodyAt;
    const auto expected = bodyBytes(h.shape, h.dtype);
    if (!expected || *expected != int64_t(bodyLen))
        return refuse("body of " + std::to_string(bodyLen) + " bytes does not match its shape and dtype");
    if (h.kind != expect.kind)
        return refuse(std::string("a ") + kindName(h.kind) + " payload where a " + kindName(expect.kind) +
                      " payload was expected");
    if (h.tier != expect.tier)
        return refuse("tier '" + h.tier + "' is not '" + expect.tier + "'");
    if (!checkScope) {
        const auto tenant = unhex(h.tenant);
        if (!tenant)
            return refuse("field tenant: not hex");
        h.tenant = *tenant;
    } else {
        if (h.tenant != hexOf(expect.tenant))
            return refuse("payload of another tenant");
        if (h.fingerprint != expect.fingerprint)
            return refuse("model fingerprint " + h.fingerprint.substr(0, 12) + " is not " +
                          expect.fingerprint.substr(0, 12));
        h.tenant = expect.tenant;
    }
    out.body.assign(bytes.data() + bodyAt, bodyLen);
    return out;
}

namespace {

// Length-prefixed little-endian fields: text stays bytes (model output need not be UTF-8).
struct Writer
{
    std::string out;
    void u32(uint32_t v) { putU32(out, v); }
    void i64(int64_t v)
    {
        for (int i = 0; i < 8; ++i)
            out += char((uint64_t(v) >> (8 * i)) & 0xff);
    }
    void bytes(std::string_view s)
    {
        u32(uint32_t(s.size()));
        out.append(s.data(), s.size());
    }
    void raw(const void *p, size_t n) { out.append(static_cast<const char *>(p), n); }
};

struct Reader
{
    std::string_view in;
    size_t at = 0;
    std::string what;
    void need(size_t n, const char *field)
    {
        if (n > in.size() - at)
            throw Error(ErrorCode::Format, std::string("store payload: ") + what + " field " + field +
                                               " runs past the end of the body");
    }
    uint32_t u32(const char *field)
    {
        need(4, field);
        const uint32_t v = getU32(in.data() + at);
        at += 4;
        return v;
    }
    int64_t i64(const char *field)
    {
        need(8, field);
        uint64_t v = 0;
        for (int i = 0; i < 8; ++i)
            v |= uint64_t(uint8_t(in[at + size_t(i)])) << (8 * i);
        at += 8;
        return int64_t(v);
    }
    std::string bytes(const char *field)
    {
        const uint32_t n = u32(field);
        need(n, field);
        std::string s(in.substr(at, n));
        at += n;
        return s;
    }
    void end()
    {
        if (at != in.size())
            throw Error(ErrorCode::Format, "store payload: " + what + " body has " +
                                               std::to_string(in.size() - at) + " bytes past its last field");
    }
};

void writeResponse(Writer &w, const CachedResponse &r)
{
    w.bytes(r.text);
    w.bytes(r.intent);
    w.i64(r.requestId);
    w.u32(uint32_t(r.outputIds.size()));
    for (int id : r.outputIds)
        w.u32(uint32_t(id));
}

CachedResponse readResponse(Reader &rd)
{
    CachedResponse r;
    r.text = rd.bytes("text");
    r.intent = rd.bytes("intent");
    r.requestId = rd.i64("request_id");
    const uint32_t n = rd.u32("output_ids");
    rd.need(size_t(n) * 4, "output_ids"); // checked against the body before allocating
    r.outputIds.resize(n);
    for (uint32_t i = 0; i < n; ++i)
        r.outputIds[i] = int(rd.u32("output_ids"));
    return r;
}

} // namespace

std::string encodeResponseBody(const CachedResponse &r)
{
    Writer w;
    writeResponse(w, r);
    return std::move(w.out);
}

CachedResponse decodeResponseBody(std::string_view body)
{
    Reader rd{body, 0, "response"};
    CachedResponse r = readResponse(rd);
    rd.end();
    return r;
}

std::string encodeSemanticEntryBody(const SemanticEntryBody &e)
{
    Writer w;
    w.bytes(e.embedder);
    w.bytes(e.prompt);
    w.u32(uint32_t(e.vector.size()));
    w.raw(e.vector.data(), e.vector.size() * sizeof(float));
    writeResponse(w, e.response);
    return std::move(w.out);
}

SemanticEntryBody decodeSemanticEntryBody(std::string_view body)
{
    Reader rd{body, 0, "semantic entry"};
    SemanticEntryBody e;
    e.embedder = rd.bytes("embedder");
    e.prompt = rd.bytes("prompt");
    const uint32_t dim = rd.u32("vector");
    rd.need(size_t(dim) * sizeof(float), "vector");
    e.vector.resize(dim);
    if (dim > 0) // memcpy's pointers must not be null, even for 0 bytes
        std::memcpy(e.vector.data(), body.data() + rd.at, size_t(dim) * sizeof(float));
    rd.at += size_t(dim) * sizeof(float);
    e.response = readResponse(rd);
    rd.end();
    return e;
}

std::string encodeResponsePayload(const TenantScope &scope, std::string_view tier,
                                  const CachedResponse &response, int64_t createdMs)
{
    const std::string body = encodeResponseBody(response);
    PayloadHeader h;
    h.kind = PayloadKind::Response;
    h.tier = std::string(tier);
    h.tenant = scope.tenant();
    h.fingerprint = scope.modelFingerprint();
    h.dtype = DType::U8;
    h.shape = {int64_t(body.size())};
    h.createdMs = createdMs;
    return encodePayload(h, body);
}

bool isKvBodyDType(DType dtype) noexcept
{
    return dtypeAllowed(PayloadKind::Kv, dtype);
}

void appendKvBody(std::string &body, const float *values, size_t count, DType dtype)
{
    if (!isKvBodyDType(dtype))
        throw Error(ErrorCode::InvalidArgument,
                    std::string("store payload: KV values cannot travel as ") + dtypeName(dtype));
    const size_t at = body.size();
    body.resize(at + count * size_t(dtypeSize(dtype)));
    char *dst = body.data() + at;
    if (dtype == DType::F32) {
        std::memcpy(dst, values, count * sizeof(float));
        return;
    }
    for (size_t i = 0; i < count; ++i) {
        const uint16_t v = dtype == DType::BF16 ? floatToBf16(values[i]) : floatToHalf(values[i]);
        std::memcpy(dst + i * 2, &v, 2);
    }
}

void unpackKvBody(std::string_view body, DType dtype, float *out, size_t count)
{
    if (!isKvBodyDType(dtype))
        throw Error(ErrorCode::InvalidArgument,
                    std::string("store payload: KV values cannot travel as ") + dtypeName(dtype));
    if (body.size() != count * size_t(dtypeSize(dtype)))
        throw Error(ErrorCode::Format, "store payload: a KV body of " + std::to_string(body.size()) +
                                           " bytes does not hold " + std::to_string(count) + " " +
                                           dtypeName(dtype) + " values");
    if (dtype == DType::F32) {
        std::memcpy(out, body.data(), count * sizeof(float));
        return;
    }
    for (size_t i = 0; i < count; ++i) {
        uint16_t v;
        std::memcpy(&v, body.data() + i * 2, 2);
        out[i] = dtype == DType::BF16 ? bf16ToFloat(v) : halfToFloat(v);
    }
}

} // namespace kvwb::core
