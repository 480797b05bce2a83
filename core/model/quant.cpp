#include "core/model/quant.h"

#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvwb::core {

namespace {

using u8 = uint8_t;

void putF16(u8 *p, float v)
{
    const uint16_t h = floatToHalf(v);
    std::memcpy(p, &h, 2);
}

void packScaleMinK4(const int (&sc)[8], const int (&mn)[8], u8 *q)
{
    std::memset(q, 0, 12);
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            q[j] = u8(sc[j]);
            q[j + 4] = u8(mn[j]);
        } else {
            q[j + 4] = u8((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
            q[j - 4] |= u8((sc[j] >> 4) << 6);
            q[j] |= u8((mn[j] >> 4) << 6);
        }
    }
}

void dequantBlock(DType t, const u8 *b, float *y)
{
    switch (t) {
    case DType::Q4_0: {
        const float d = f16At(b);
        for (int j = 0; j < 16; ++j) {
            y[j] = float((b[2 + j] & 0x0F) - 8) * d;
            y[j + 16] = float((b[2 + j] >> 4) - 8) * d;
        }
        return;
    }
    case DType::Q4_1: {
        const float d = f16At(b), m = f16At(b + 2);
        for (int j = 0; j < 16; ++j) {
            y[j] = float(b[4 + j] & 0x0F) * d + m;
            y[j + 16] = float(b[4 + j] >> 4) * d + m;
        }
        return;
    }
    case DType::Q5_0:
    case DType::Q5_1: {
        const bool hasMin = t == DType::Q5_1;
        const float d = f16At(b), m = hasMin ? f16At(b + 2) : 0.0f;
        const u8 *qhp = b + (hasMin ? 4 : 2);
        uint32_t qh;
        std::memcpy(&qh, qhp, 4);
        const u8 *qs = qhp + 4;
        for (int j = 0; j < 16; ++j) {
            const int xh0 = int(((qh >> j) << 4) & 0x10);
            const int xh1 = int((qh >> (j + 12)) & 0x10);
            const int x0 = (qs[j] & 0x0F) | xh0, x1 = (qs[j] >> 4) | xh1;
            if (hasMin) {
                y[j] = float(x0) * d + m;
                y[j + 16] = float(x1) * d + m;
            } else {
                y[j] = float(x0 - 16) * d;
                y[j + 16] = float(x1 - 16) * d;
            }
        }
        return;
    }
    case DType::Q8_0: {
        const float d = f16At(b);
        for (int j = 0; j < 32; ++j)
            y[j] = float(int8_t(b[2 + j])) * d;
        return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
        const bool five = t == DType::Q5_K;
        const float d = f16At(b), dmin = f16At(b + 2);
        const u8 *scales = b + 4;
        const u8 *qh = b + 16;
        const u8 *q = b + (five ? 48 : 16);
        int is = 0;
        u8 u1 = 1, u2 = 2;
        for (int j = 0; j < 256; j += 64) {
            u8 sc, m;
            scaleMinK4(is, scales, sc, m);
            const float d1 = d * sc, m1 = dmin * m;
            scaleMinK4(is + 1, scales, sc, m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * float((q[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * float((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
            q += 32;
            is += 2;
            u1 = u8(u1 << 2);
            u2 = u8(u2 << 2);
        }
        return;
    }
    case DType::Q6_K: {
        const u8 *ql = b, *qh = b + 128;
        const int8_t *sc = reinterpret_cast<const int8_t *>(b + 192);
        const float d = f16At(b + 208);
        for (int n = 0; n < 256; n += 128) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * float(sc[is]) * float(q1);
                y[l + 32] = d * float(sc[is + 2]) * float(q2);
                y[l + 64] = d * float(sc[is + 4]) * float(q3);
                y[l + 96] = d * float(sc[is + 6]) * float(q4);
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
        return;
    }
    default:
        return;
    }
}

int nearest(float v)
{
    return int(std::lround(v));
}

// Q4_0 / Q5_0 (t): ggml's scheme: the value of largest magnitude maps to the most negative level.
void quantQ4_0Q5_0(DType t, const float *x, u8 *b)
{
    const int levels = t == DType::Q4_0 ? 8 : 16;
    float amax = 0, vmax = 0;
    for (int j = 0; j < 32; ++j)
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            vmax = x[j];
        }
    const float d = vmax / float(-levels);
    putF16(b, d);
    const float dq = halfToFloat(floatToHalf(d));
    const float id = dq != 0 ? 1.0f / dq : 0.0f;
    int q[32];
    for (int j = 0; j < 32; ++j)
        q[j] = std::clamp(nearest(x[j] * id) + levels, 0, 2 * levels - 1);
    if (t == DType::Q4_0) {
        for (int j = 0; j < 16; ++j)
            b[2 + j] = u8(q[j] | (q[j + 16] << 4));
    } else {
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            b[6 + j] = u8((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
            qh |= uint32_t((q[j] & 0x10) >> 4) << j;
            qh |= uint32_t((q[j + 16] & 0x10) >> 4) << (j + 16);
        }
        std::memcpy(b + 2, &qh, 4);
    }
}

// Q4_1 / Q5_1 (t): an f16 scale and minimum per block of 32.
void quantQ4_1Q5_1(DType t, const float *x, u8 *b)
{
    const int top = t == DType::Q4_1 ? 15 : 31;
    const float lo = *std::min_element(x, x + 32), hi = *std::max_element(x, x + 32);
    const float d = (hi - lo) / float(top);
    putF16(b, d);
    putF16(b + 2, lo);
    const float dq = halfToFloat(floatToHalf(d)), mq = halfToFloat(floatToHalf(lo));
    const float id = dq != 0 ? 1.0f / dq : 0.0f;
    int q[32];
    for (int j = 0; j < 32; ++j)
        q[j] = std::clamp(nearest((x[j] - mq) * id), 0, top);
    if (t == DType::Q4_1) {
        for (int j = 0; j < 16; ++j)
            b[4 + j] = u8(q[j] | (q[j + 16] << 4));
    } else {
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            b[8 + j] = u8((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
            qh |= uint32_t((q[j] & 0x10) >> 4) << j;
            qh |= uint32_t((q[j + 16] & 0x10) >> 4) << (j + 16);
        }
        std::memcpy(b + 4, &qh, 4);
    }
}

// Q8_0: an f16 scale (the largest magnitude / 127) per block of 32.
void quantQ8_0(const float *x, u8 *b)
{
    float amax = 0;
    for (int j = 0; j < 32; ++j)
        amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    putF16(b, d);
    const float dq = halfToFloat(floatToHalf(d));
    const float id = dq != 0 ? 1.0f / dq : 0.0f;
    for (int j = 0; j < 32; ++j)
        b[2 + j] = u8(int8_t(std::clamp(nearest(x[j] * id), -127, 127)));
}

// Q4_K / Q5_K (t): super-blocks of 256 values in eight sub-blocks of 32.
void quantQ4_KQ5_K(DType t, const float *x, u8 *b)
{
    const bool five = t == DType::Q5_K;
    const int top = five ? 31 : 15;
    // Per 32-value sub-block: y = scale * q - min with min >= 0 (the sub-block's lowest value,
    // or 0 when every value is positive), then the eight scales and mins as 6-bit multiples of
    // the super-block's d and dmin.
    float scale[8], mins[8];
    float maxScale = 0, maxMin = 0;
    for (int s = 0; s < 8; ++s) {
        const float *v = x + 32 * s;
        const float lo = std::min(0.0f, *std::min_element(v, v + 32));
        const float hi = *std::max_element(v, v + 32);
        scale[s] = (hi - lo) / float(top);
        mins[s] = -lo;
        maxScale = std::max(maxScale, scale[s]);
        maxMin = std::max(maxMin, mins[s]);
    }
    const float d = maxScale / 63.0f, dmin = maxMin / 63.0f;
    putF16(b, d);
    putF16(b + 2, dmin);
    const float dq = halfToFloat(floatToHalf(d)), dminq = halfToFloat(floatToHalf(dmin));
    int sc[8], mn[8];
    for (int s = 0; s < 8; ++s) {
        sc[s] = dq > 0 ? std::clamp(int(std::ceil(scale[s] / dq)), 0, 63) : 0;
        mn[s] = dminq > 0 ? std::clamp(nearest(mins[s] / dminq), 0, 63) : 0;
    }
    packScaleMinK4(sc, mn, b + 4);
    int L[256];
    for (int s = 0; s < 8; ++s) {
        const float step = dq * float(sc[s]), off = dminq * float(mn[s]);
        for (int i = 0; i < 32; ++i)
            L[32 * s + i] = step > 0 ? std::clamp(nearest((x[32 * s + i] + off) / step), 0, top) : 0;
    }
    u8 *qh = b + 16;
    u8 *ql = b + (five ? 48 : 16);
    if (five)
        std::memset(qh, 0, 32);
    u8 m1 = 1, m2 = 2;
    for (int n = 0; n < 256; n += 64) {
        for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (five && l1 > 15) {
                l1 -= 16;
                qh[j] |= m1;
            }
            if (five && l2 > 15) {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[j] = u8(l1 | (l2 << 4));
        }
        m1 = u8(m1 << 2);
        m2 = u8(m2 << 2);
        ql += 32;
    }
}

// Q6_K: super-blocks of 256 values in sixteen sub-blocks of 16.
void quantQ6_K(const float *x, u8 *b)
{
    float scale[16];
    float maxScale = 0;
    for (int s = 0; s < 16; ++s) {
        float amax = 0;
        for (int i = 0; i < 16; ++i)
            amax = std::max(amax, std::fabs(x[16 * s + i]));
        scale[s] = amax / 31.0f;
        maxScale = std::max(maxScale, scale[s]);
    }
    const float d = maxScale / 127.0f;
    const float dq = halfToFloat(floatToHalf(d));
    int8_t *sc = reinterpret_cast<int8_t *>(b + 192);
    int L[256];
    for (int s = 0; s < 16; ++s) {
        sc[s] = int8_t(dq > 0 ? std::clamp(int(std::ceil(scale[s] / dq)), 0, 127) : 0);
        const float step = dq * float(sc[s]);
        for (int i = 0; i < 16; ++i)
            L[16 * s + i] = (step > 0 ? std::clamp(nearest(x[16 * s + i] / step), -32, 31) : 0) + 32;
    }
    putF16(b + 208, d);
    u8 *ql = b, *qh = b + 128;
    for (int j = 0; j < 256; j += 128) {
        for (int l = 0; l < 32; ++l) {
            const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF,
                      q4 = L[j + l + 96] & 0xF;
            ql[l] = u8(q1 | (q3 << 4));
            ql[l + 32] = u8(q2 | (q4 << 4));
            qh[l] = u8((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                       ((L[j + l + 96] >> 4) << 6));
        }
        ql += 64;
        qh += 32;
    }
}

// Round-to-nearest quantisers, one block at a time; x has dtypeBlockElements(t) values.
void quantBlock(DType t, const float *x, u8 *b)
{
    switch (t) {
    case DType::Q4_0:
    case DType::Q5_0:
        quantQ4_0Q5_0(t, x, b);
        return;
    case DType::Q4_1:
    case DType::Q5_1:
        quantQ4_1Q5_1(t, x, b);
        return;
    case DType::Q8_0:
        quantQ8_0(x, b);
        return;
    case DType::Q4_K:
    case DType::Q5_K:
        quantQ4_KQ5_K(t, x, b);
        return;
    case DType::Q6_K:
        quantQ6_K(x, b);
        return;
    default:
        return;
    }
}

// Offsets of a block's f16 scales, to check them for NaN/inf before decoding.
std::vector<int> scaleOffsets(DType t)
{
    switch (t) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
        return {0};
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
        return {0, 2};
    case DType::Q6_K:
        return {208};
    default:
        return {};
    }
}

} // namespace

float f16At(const uint8_t *p) noexcept
{
    uint16_t h;
    std::memcpy(&h, p, 2);
    return halfToFloat(h);
}

void scaleMinK4(int j, const uint8_t *q, uint8_t &d, uint8_t &m) noexcept
{
    if (j < 4) {
        d = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

uint64_t dtypeBytesFor(DType t, int64_t n, const std::string &what)
{
    const int per = dtypeBlockElements(t);
    if (n < 0 || n % per != 0)
        throw Error(ErrorCode::Shape, fmt::format("{}: {} elements are not a whole number of {} blocks of {}",
                                                  what, n, dtypeName(t), per));
    return uint64_t(n / per) * uint64_t(dtypeBlockBytes(t));
}

void dequantize(DType t, std::span<const std::byte> bytes, int64_t n, float *out, const std::string &what)
{
    const uint64_t need = dtypeBytesFor(t, n, what);
    if (bytes.size() != need)
        throw Error(ErrorCode::Shape, fmt::format("{}: {} bytes for {} {} elements, expected {}", what,
                                                  bytes.size(), n, dtypeName(t), need));
    const u8 *p = reinterpret_cast<const u8 *>(bytes.data());
    switch (t) {
    case DType::F32:
        std::memcpy(out, p, size_t(n) * 4);
        return;
    case DType::F16:
    case DType::BF16:
        for (int64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            out[i] = t == DType::F16 ? halfToFloat(h) : bf16ToFloat(h);
        }
        return;
    default:
        break;
    }
    if (!isBlockQuantized(t))
        throw Error(ErrorCode::Shape,
                    fmt::format("{}: dtype {} cannot be converted to float", what, dtypeName(t)));
    const int per = dtypeBlockElements(t), bb = dtypeBlockBytes(t);
    checkScales(t, bytes, what);
    for (int64_t blk = 0; blk < n / per; ++blk)
        dequantBlock(t, p + blk * bb, out + blk * per);
}

void checkScales(DType t, std::span<const std::byte> bytes, const std::string &what)
{
    if (!isBlockQuantized(t))
        return;
    const int bb = dtypeBlockBytes(t);
    if (bytes.size() % size_t(bb) != 0)
        throw Error(ErrorCode::Shape,
                    fmt::format("{}: {} bytes are not a whole number of {} blocks of {} bytes", what,
                                bytes.size(), dtypeName(t), bb));
    const std::vector<int> scales = scaleOffsets(t);
    const u8 *p = reinterpret_cast<const u8 *>(bytes.data());
    const int64_t blocks = int64_t(bytes.size() / size_t(bb));
    for (int64_t blk = 0; blk < blocks; ++blk)
        for (int off : scales) {
            uint16_t h;
            std::memcpy(&h, p + blk * bb + off, 2);
            if ((h & 0x7C00u) == 0x7C00u) // exponent all ones: infinity or NaN
                throw Error(ErrorCode::Format, fmt::format("{}: {} block {} has a scale that is not finite",
                                                           what, dtypeName(t), blk));
        }
}

void dequantizeBlock(DType t, const std::byte *block, float *out) noexcept
{
    dequantBlock(t, reinterpret_cast<const u8 *>(block), out);
}

std::vector<std::byte> quantize(DType t, std::span<const float> values, const std::string &what)
{
    const int64_t n = int64_t(values.size());
    std::vector<std::byte> out(size_t(dtypeBytesFor(t, n, what)));
    u8 *p = reinterpret_cast<u8 *>(out.data());
    switch (t) {
    case DType::F32:
        std::memcpy(p, values.data(), size_t(n) * 4);
        return out;
    case DType::F16:
    case DType::BF16:
        for (int64_t i = 0; i < n; ++i) {
            const uint16_t h =
                t == DType::F16 ? floatToHalf(values[size_t(i)]) : floatToBf16(values[size_t(i)]);
            std::memcpy(p + 2 * i, &h, 2);
        }
        return out;
    default:
        break;
    }
    if (!isBlockQuantized(t))
        throw Error(ErrorCode::InvalidArgument, fmt::format("{}: cannot write dtype {}", what, dtypeName(t)));
    const int per = dtypeBlockElements(t), bb = dtypeBlockBytes(t);
    for (int64_t blk = 0; blk < n / per; ++blk)
        quantBlock(t, values.data() + blk * per, p + blk * bb);
    return out;
}

} // namespace kvwb::core
