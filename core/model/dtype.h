// Element types of tensors on disk and in memory, and scalar conversions between them.
//
// Pure functions; thread-safe. f16 conversion is IEEE 754 binary16 with round-to-nearest-even;
// bf16 is the top 16 bits of an f32 with round-to-nearest-even (NaN stays NaN).
#pragma once

#include "core/util/enum_names.h"

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
    Bool,
    // ggml block-quantised types (GGUF files only): a row of n elements is n / blockElements
    // blocks of blockBytes bytes each; core/model/quant.h converts them.
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4_K,
    Q5_K,
    Q6_K
};

// Bytes per element; 0 for a block-quantised type (see dtypeBlockBytes).
int dtypeSize(DType t) noexcept;
// Safetensors spelling: "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"; the
// quantised types as ggml spells them ("Q4_K", ...).
const char *dtypeName(DType t) noexcept;
// The safetensors types only: a quantised name is not a safetensors dtype.
std::optional<DType> parseDType(std::string_view safetensorsName) noexcept;

bool isBlockQuantized(DType t) noexcept;
// Elements per block (1 for plain types) and bytes per block (dtypeSize for plain types).
int dtypeBlockElements(DType t) noexcept;
int dtypeBlockBytes(DType t) noexcept;

// The floating-point types a job computes in (a model's weights and activations) or keeps KV in (an
// experiment file's datasets, a shared store's blocks): one type and one spelling for every option,
// project, file attribute and report.
enum class FloatType
{
    F32,
    BF16,
    F16
};
// "f32" | "bf16" | "f16"; "float32", "bfloat16" and "float16" are read as the same types.
inline constexpr EnumName<FloatType> kFloatTypeNames[] = {
    {FloatType::F32, "f32"},     {FloatType::BF16, "bf16"},     {FloatType::F16, "f16"},
    {FloatType::F32, "float32"}, {FloatType::BF16, "bfloat16"}, {FloatType::F16, "float16"}};
KVWB_ENUM_NAMES(FloatType, kFloatTypeNames, floatTypeName, parseFloatType)
inline int floatTypeBytes(FloatType t) noexcept // bytes per element: 4 or 2
{
    return t == FloatType::F32 ? 4 : 2;
}
DType toDType(FloatType t) noexcept;
// F32, BF16 or F16 as a FloatType; nullopt for any other dtype.
std::optional<FloatType> toFloatType(DType t) noexcept;

float halfToFloat(uint16_t h) noexcept;
uint16_t floatToHalf(float f) noexcept;
float bf16ToFloat(uint16_t b) noexcept;
uint16_t floatToBf16(float f) noexcept;

} // namespace kvwb::core
