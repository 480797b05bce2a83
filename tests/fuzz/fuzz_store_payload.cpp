// Shared-store payloads (core/cache/store_payload.h): whatever a Redis key holds (another writer's
// bytes, a truncated or corrupted value) is decoded or refused, never a crash or an allocation from
// an unchecked count; the bodies inside (a response, a semantic stream entry) likewise; and a price
// presets file (core/ledger/prices.h) parses or fails with kvwb::core::Error.
#include "core/cache/store_payload.h"
#include "core/ledger/prices.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string_view bytes(reinterpret_cast<const char *>(data), size);
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        using namespace kvwb::core;
        std::string why;
        for (const auto kind : {PayloadKind::Response, PayloadKind::Kv}) {
            if (auto p =
                    decodePayloadAnyScope(bytes, kind, kind == PayloadKind::Kv ? "prefix" : "exact", &why)) {
                if (kind == PayloadKind::Response)
                    (void)decodeResponseBody(p->body);
            }
        }
        (void)decodePayload(bytes, PayloadExpectation{PayloadKind::Response, "semantic", "t", "fp"}, &why);
        try {
            (void)decodeResponseBody(bytes);
        } catch (const Error &) {
        }
        try {
            (void)decodeSemanticEntryBody(bytes);
        } catch (const Error &) {
        }
        (void)parsePricePresets(std::string(bytes), "prices.json");
    });
}
