// The envelope every value in a shared store travels in (docs/fleet.md, "Payload envelope"):
//
//   "KVWBPAY1"            8 bytes, magic
//   header length H       uint32 little-endian, 2 <= H <= 65536
//   header                H bytes of JSON: kind ("response" | "kv"), tier, tenant (hex),
//                         fingerprint, dtype ("U8" for responses; "F32" | "F16" | "BF16" for KV),
//                         shape (int64 list; the body is exactly product(shape) * dtype size bytes),
//                         key_form ("pre_rope" | "post_rope"; KV only), created_ms
//   body                  the bytes the header describes
//   CRC-32                uint32 little-endian of everything before it (zlib's crc32)
//
// Decoding checks every count against the bytes received before using it (no allocation from an
// unchecked length), then the checksum, then that the payload is the one asked for: the same
// tenant, model fingerprint and tier. A payload failing any check is refused with one line saying
// which.
//
// Thread-safety: pure functions.
#pragma once

#include "core/cache/cache_tier.h"
#include "core/model/dtype.h"
#include "core/model/kv_types.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::core {

enum class PayloadKind
{
    Response, // a CachedResponse (encodeResponseBody)
    Kv        // a KV cache: [layers, 2 (K, V), kvHeads, tokens, headDim] in dtype
};

struct PayloadHeader
{
    PayloadKind kind = PayloadKind::Response;
    std::string tier;
    std::string tenant;
    std::string fingerprint;
    DType dtype = DType::U8;
    std::vector<int64_t> shape;
    KeyForm keyForm = KeyForm::PostRope; // KV only
    int64_t createdMs = 0;
};

struct DecodedPayload
{
    PayloadHeader header;
    std::string body;
};

// Error(InvalidArgument) when the body's size is not what the header's shape and dtype say, or the
// dtype is not one the kind allows.
std::string encodePayload(const PayloadHeader &header, std::string_view body);

// KV bodies: count float32 values appended to body as F32, F16 or BF16 (little-endian; 16-bit
// types round to nearest even), and read back into out [count]. Error(InvalidArgument) for another
// dtype; unpacking checks that body holds exactly count values of dtype (Error(Format) otherwise).
void appendKvBody(std::string &body, const float *values, size_t count, DType dtype);
void unpackKvBody(std::string_view body, DType dtype, float *out, size_t count);
// The largest magnitude a KV value read from a shared store may have: real models' keys and values
// stay within a few thousand; a block holding more (or NaN or Inf) is refused, counted as refused.
inline constexpr float kMaxStoredKvValue = 1e6f;
bool isKvBodyDType(DType dtype) noexcept; // F32, F16 or BF16

// What the reader expects: the scope and tier it asked under, and the kind.
struct PayloadExpectation
{
    PayloadKind kind;
    std::string tier;
    std::string tenant;
    std::string fingerprint;
};
// nullopt (and *why set, e.g. "checksum mismatch", "fingerprint abc is not def") when the bytes fail
// any check.
std::optional<DecodedPayload> decodePayload(std::string_view bytes, const PayloadExpectation &expect,
                                            std::string *why);

// Every check but the scope's (for a stream entry, whose scope the header names): the header's
// tenant and fingerprint are returned as written.
std::optional<DecodedPayload> decodePayloadAnyScope(std::string_view bytes, PayloadKind kind,
                                                    const std::string &tier, std::string *why);

// A response as an envelope body (shape [bytes], dtype U8), little-endian: text and intent as
// uint32 length + bytes (model output need not be UTF-8), request id int64, output ids as uint32
// count + int32 each.
std::string encodeResponseBody(const CachedResponse &response);
// Error(Format) naming the field that runs past the end (every count is checked against the body
// before anything is allocated) or trailing bytes.
CachedResponse decodeResponseBody(std::string_view body);

// A semantic tier's stream entry body: embedder name, the embedded text, its vector (uint32 dim +
// float32 each), then a response body.
struct SemanticEntryBody
{
    std::string embedder;
    std::string prompt;
    std::vector<float> vector;
    CachedResponse response;
};
std::string encodeSemanticEntryBody(const SemanticEntryBody &entry);
SemanticEntryBody decodeSemanticEntryBody(std::string_view body);

// Convenience: a whole response envelope for a scope and tier.
std::string encodeResponsePayload(const TenantScope &scope, std::string_view tier,
                                  const CachedResponse &response, int64_t createdMs);

} // namespace kvwb::core
