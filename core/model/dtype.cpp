#include "core/model/dtype.h"

#include <bit>
#include <cmath>

namespace kvwb::core {

int dtypeSize(DType t) noexcept
{
    switch (t) {
    case DType::F64:
    case DType::I64:
        return 8;
    case DType::F32:
    case DType::I32:
        return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16:
        return 2;
    case DType::I8:
    case DType::U8:
    case DType::Bool:
        return 1;
    default:
        return 0;
    }
}

DType toDType(FloatType t) noexcept
{
    switch (t) {
    case FloatType::BF16:
        return DType::BF16;
    case FloatType::F16:
        return DType::F16;
    case FloatType::F32:
        break;
    }
    return DType::F32;
}

std::optional<FloatType> toFloatType(DType t) noexcept
{
    switch (t) {
    case DType::F32:
        return FloatType::F32;
    case DType::BF16:
        return FloatType::BF16;
    case DType::F16:
        return FloatType::F16;
    default:
        return std::nullopt;
    }
}

namespace {

// Safetensors' spellings first (parseDType reads only those), then ggml's quantised types.
constexpr EnumName<DType> kDTypeNames[] = {
    {DType::F32, "F32"},   {DType::F16, "F16"},   {DType::BF16, "BF16"}, {DType::F64, "F64"},
    {DType::I64, "I64"},   {DType::I32, "I32"},   {DType::I16, "I16"},   {DType::I8, "I8"},
    {DType::U8, "U8"},     {DType::Bool, "BOOL"}, {DType::Q4_0, "Q4_0"}, {DType::Q4_1, "Q4_1"},
    {DType::Q5_0, "Q5_0"}, {DType::Q5_1, "Q5_1"}, {DType::Q8_0, "Q8_0"}, {DType::Q4_K, "Q4_K"},
    {DType::Q5_K, "Q5_K"}, {DType::Q6_K, "Q6_K"}};

} // namespace

const char *dtypeName(DType t) noexcept
{
    const char *name = enumName(kDTypeNames, t);
    return *name ? name : "?";
}

bool isBlockQuantized(DType t) noexcept
{
    return dtypeBlockElements(t) > 1;
}

int dtypeBlockElements(DType t) noexcept
{
    switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
        return 32;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
        return 256;
    default:
        return 1;
    }
}

int dtypeBlockBytes(DType t) noexcept
{
    switch (t) {
    case DType::Q4_0:
        return 18; // f16 d, 16 bytes of nibbles
    case DType::Q4_1:
        return 20; // f16 d, f16 m, 16 bytes of nibbles
    case DType::Q5_0:
        return 22; // f16 d, 4 bytes of high bits, 16 bytes of nibbles
    case DType::Q5_1:
        return 24;
    case DType::Q8_0:
        return 34; // f16 d, 32 int8
    case DType::Q4_K:
        return 144; // f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
    case DType::Q5_K:
        return 176; // as Q4_K plus 32 bytes of high bits
    case DType::Q6_K:
        return 210; // 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, f16 d
    default:
        return dtypeSize(t);
    }
}

std::optional<DType> parseDType(std::string_view s) noexcept
{
    const auto t = parseEnum(kDTypeNames, s);
    if (t && isBlockQuantized(*t)) // a quantised name is not a safetensors dtype
        return std::nullopt;
    return t;
}

float halfToFloat(uint16_t h) noexcept
{
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { // subnormal: value = mant * 2^-24
            float v = std::ldexp(float(mant), -24);
            return sign ? -v : v;
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    return std::bit_cast<float>(bits);
}

uint16_t floatToHalf(float f) noexcept
{
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
    const uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) // inf or nan
        return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u);
    if (absx >= 0x477ff000u) // rounds to >= 65520: overflow to inf
        return sign | 0x7c00u;
    if (absx < 0x38800000u) { // below smallest normal half (2^-14): subnormal or zero
        // value / 2^-24 rounded to nearest even gives the subnormal mantissa.
        const float v = std::bit_cast<float>(absx);
        const float scaled = v * 16777216.0f; // 2^24, exact
        return sign | uint16_t(std::nearbyint(scaled));
    }
    // normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even
    uint32_t mant = absx & 0x7fffffu;
    uint32_t exp = (absx >> 23) - 112;
    uint32_t half = (exp << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
        ++half; // carry into exponent is the correct rounding
    return sign | uint16_t(half);
}

float bf16ToFloat(uint16_t b) noexcept
{
    return std::bit_cast<float>(uint32_t(b) << 16);
}

uint16_t floatToBf16(float f) noexcept
{
    uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return uint16_t((x >> 16) | 0x40u); // quiet NaN
    const uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb;
    return uint16_t(x >> 16);
}

} // namespace kvwb::core
