// Element types of tensors on disk and in memory, and scalar conversions between them.
//
// Pure functions; thread-safe. f16 conversion is IEEE 754 binary16 with round-to-nearest-even;
// bf16 is the top 16 bits of an f32 with round-to-nearest-even (NaN stays NaN).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvwb::core {

enum class DType
{
    F32,
    F16,
    BF16,
    F64,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool
};

// Bytes per element.
int dtypeSize(DType t) noexcept;
// Safetensors spelling: "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL".
const char *dtypeName(DType t) noexcept;
std::optional<DType> parseDType(std::string_view safetensorsName) noexcept;

float halfToFloat(uint16_t h) noexcept;
uint16_t floatToHalf(float f) noexcept;
float bf16ToFloat(uint16_t b) noexcept;
uint16_t floatToBf16(float f) noexcept;

} // namespace kvwb::core
