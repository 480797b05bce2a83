// The quantised weight kernels (core/model/quant_kernels.h) on every instruction-set path this CPU
// runs, against the dequantised reference (core::dequantize): random blocks of all eight types
// (every level pattern, random finite scales), one block to many per row, odd row counts and
// offsets. dequantRows must give the reference's floats bit for bit; dotRows the double-precision
// dot product of the reference's weights with the 8-bit activation (quantizeActivation) within
// 4e-6 of sum |x^| * max |w|, a bound one wrong level exceeds (the f32 sums' own error is about a
// tenth of it at 6,144 columns); and, against the activation as it was, within the rounding bound
// sum |w| * d / 2.
#include "core/model/quant.h"
#include "core/model/quant_kernels.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"

#include <QTest>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

using namespace kvwb::core;
using kvwb::test::expectError;
namespace q = kvwb::core::quant;

Q_DECLARE_METATYPE(kvwb::core::DType)

namespace {

const DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                        DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Offsets of each block's f16 scales (and mins).
std::vector<int> scaleOffsets(DType t)
{
    switch (t) {
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
        return {0, 2};
    case DType::Q6_K:
        return {208};
    default:
        return {0};
    }
}

// rows x k random blocks: every byte random, then each scale a random finite f16 in +-[1e-3, 0.1].
std::vector<std::byte> randomBlocks(DType t, int64_t rows, int64_t k, std::mt19937 &rng)
{
    const int bb = dtypeBlockBytes(t);
    const int64_t blocks = rows * k / dtypeBlockElements(t);
    std::vector<std::byte> out(size_t(blocks * bb));
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> mag(1e-3f, 0.1f);
    for (auto &b : out)
        b = std::byte(uint8_t(byte(rng)));
    for (int64_t i = 0; i < blocks; ++i)
        for (int off : scaleOffsets(t)) {
            const uint16_t h = floatToHalf(byte(rng) % 2 ? mag(rng) : -mag(rng));
            std::memcpy(out.data() + i * bb + off, &h, 2);
        }
    return out;
}

std::vector<q::Isa> pathsHere()
{
    std::vector<q::Isa> out;
    for (q::Isa i : {q::Isa::Portable, q::Isa::Avx2, q::Isa::Avx512})
        if (q::isaSupported(i))
            out.push_back(i);
    return out;
}

// The activation the dot kernels multiply rows of type t with.
std::vector<double> dequantized(const q::QuantizedActivation &a, DType t)
{
    std::vector<double> out(size_t(a.k));
    for (int64_t i = 0; i < a.k; ++i)
        out[size_t(i)] = q::dequantizedActivation(a, t, i);
    return out;
}

// The double-precision dot product of a dequantised row w [k] with the activation xh, and the
// kernels' tolerance for it: 4e-6 of sum |x^| * max |w|.
struct ReferenceDot
{
    double exact = 0, tolerance = 0;
};
ReferenceDot referenceDot(const float *w, const std::vector<double> &xh)
{
    double exact = 0, scale = 0, wmax = 0;
    for (size_t i = 0; i < xh.size(); ++i) {
        exact += xh[i] * w[i];
        scale += std::fabs(xh[i]);
        wmax = std::max(wmax, std::fabs(double(w[i])));
    }
    return {exact, 4e-6 * scale * wmax};
}

struct EnvGuard
{
    explicit EnvGuard(const char *value)
    {
        value ? setenv("KVWB_QUANT_ISA", value, 1) : unsetenv("KVWB_QUANT_ISA");
    }
    ~EnvGuard() { unsetenv("KVWB_QUANT_ISA"); }
};

} // namespace

class TestQuantKernels : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void rowsAgainstReference_data()
    {
        QTest::addColumn<DType>("type");
        QTest::addColumn<int>("blocksPerRow");
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("firstRow");
        for (DType t : kTypes)
            for (int blocks : {1, 3, 9, 18, 24})
                for (auto [rows, first] : {std::pair{1, 0}, std::pair{3, 2}, std::pair{7, 1}})
                    QTest::addRow("%s x%d rows %d from %d", dtypeName(t), blocks, rows, first)
                        << t << blocks << rows << first;
    }
    void rowsAgainstReference()
    {
        QFETCH(DType, type);
        QFETCH(int, blocksPerRow);
        QFETCH(int, rows);
        QFETCH(int, firstRow);
        std::mt19937 rng(uint32_t(int(type) * 1000 + blocksPerRow * 10 + rows));
        const int64_t k = int64_t(blocksPerRow) * dtypeBlockElements(type), total = firstRow + rows;
        const auto w = randomBlocks(type, total, k, rng);
        std::vector<float> ref(size_t(total * k));
        dequantize(type, w, total * k, ref.data(), "w");
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(k));
        for (auto &v : x)
            v = normal(rng) + 0.5f; // a mean, so the min terms matter
        q::QuantizedActivation xa;
        q::quantizeActivation(x.data(), k, xa);
        const auto xh = dequantized(xa, type);
        const auto paths = pathsHere();
        QVERIFY(!paths.empty());
        for (q::Isa isa : paths) {
            std::vector<float> rowsOut(size_t(rows * k), -1.0f);
            q::dequantRows(type, w.data(), k, firstRow, total, rowsOut.data(), isa);
            QVERIFY2(std::memcmp(rowsOut.data(), ref.data() + firstRow * k, rowsOut.size() * 4) == 0,
                     q::isaName(isa));
            std::vector<float> y(size_t(rows), NAN);
            q::dotRows(type, w.data(), firstRow, total, xa, y.data(), isa);
            for (int r = 0; r < rows; ++r) {
                const auto [exact, tol] = referenceDot(ref.data() + (firstRow + r) * k, xh);
                if (!(std::fabs(double(y[size_t(r)]) - exact) <= tol))
                    QFAIL(qPrintable(QString("%1 row %2: %3, reference %4 (tolerance %5)")
                                         .arg(q::isaName(isa))
                                         .arg(firstRow + r)
                                         .arg(double(y[size_t(r)]), 0, 'g', 9)
                                         .arg(exact, 0, 'g', 9)
                                         .arg(tol)));
            }
        }
    }

    // A prompt's integer product (every block type on AVX-512 VNNI): every (row, token) within
    // dotRows' bound of the double-precision product of the dequantised row with that token's
    // rounded activation (per 256 elements for the K-quants, per 32 for the others), for token counts on and
    // off its groups of 8, rows on and off its panels of 16, from an offset row, into a strided output (the
    // columns past the rows untouched). Refused on the other paths and types.
    void promptRowsAgainstReference_data()
    {
        QTest::addColumn<DType>("type");
        QTest::addColumn<int>("blocksPerRow");
        QTest::addColumn<int>("tokens");
        for (DType t : kTypes)
            for (int blocks : {1, 3})
                for (int tokens : {1, 8, 11})
                    QTest::addRow("%s x%d tokens %d", dtypeName(t), blocks, tokens) << t << blocks << tokens;
    }
    void promptRowsAgainstReference()
    {
        QFETCH(DType, type);
        QFETCH(int, blocksPerRow);
        QFETCH(int, tokens);
        std::mt19937 rng(uint32_t(int(type) * 100 + blocksPerRow * 10 + tokens));
        const int64_t k = int64_t(blocksPerRow) * 256, firstRow = 3, total = 40, rows = total - firstRow;
        const int block = q::promptBlock(type);
        const auto w = randomBlocks(type, total, k, rng);
        std::vector<float> ref(size_t(total * k));
        dequantize(type, w, total * k, ref.data(), "w");
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> x(size_t(tokens * k));
        for (auto &v : x)
            v = normal(rng) + 0.5f;
        x[7] = 30.0f; // one block with a large value
        q::PromptActivations xs;
        q::quantizePrompt(x.data(), tokens, k, block, xs);
        for (q::Isa isa : pathsHere()) {
            std::vector<float> y(size_t(tokens * (rows + 2)), -1.0f);
            if (!q::hasPromptRows(type, k, isa)) {
                QCOMPARE(expectError([&] {
                             q::promptRows(type, w.data(), firstRow, total, xs, y.data(), rows + 2, isa);
                         }).code(),
                         ErrorCode::Unsupported);
                continue;
            }
            q::promptRows(type, w.data(), firstRow, total, xs, y.data(), rows + 2, isa);
            for (int i = 0; i < tokens; ++i) {
                q::QuantizedActivation one;
                q::quantizeActivation(x.data() + i * k, k, one);
                QCOMPARE(
                    std::memcmp((block == 256 ? one.q256 : one.q).data(), xs.q.data() + i * k, size_t(k)), 0);
                const auto xh = dequantized(one, type);
                for (int64_t r = 0; r < rows; ++r) {
                    const auto [exact, tol] = referenceDot(ref.data() + (firstRow + r) * k, xh);
                    const double got = y[size_t(i * (rows + 2) + r)];
                    if (!(std::fabs(got - exact) <= tol))
                        QFAIL(qPrintable(QString("%1 token %2 row %3: %4, reference %5 (tolerance %6)")
                                             .arg(q::isaName(isa))
                                             .arg(i)
                                             .arg(firstRow + r)
                                             .arg(got, 0, 'g', 9)
                                             .arg(exact, 0, 'g', 9)
                                             .arg(tol)));
                }
                QCOMPARE(y[size_t(i * (rows + 2) + rows)], -1.0f);
                QCOMPARE(y[size_t(i * (rows + 2) + rows + 1)], -1.0f);
            }
        }
        std::vector<float> y(1);
        QCOMPARE(expectError([&] {
                     q::promptRows(DType::F32, w.data(), 0, 1, xs, y.data(), 1, q::Isa::Avx512);
                 }).code(),
                 ErrorCode::Unsupported);
        if (q::hasPromptRows(type, k, q::Isa::Avx512)) { // the prompt rounded per the other block
            q::quantizePrompt(x.data(), tokens, k, block == 256 ? 32 : 256, xs);
            QCOMPARE(expectError([&] {
                         q::promptRows(type, w.data(), 0, 1, xs, y.data(), 1, q::Isa::Avx512);
                     }).code(),
                     ErrorCode::InvalidArgument);
        }
        QCOMPARE(expectError([&] { q::quantizePrompt(x.data(), 1, 100, 256, xs); }).code(), ErrorCode::Shape);
        QCOMPARE(expectError([&] { q::quantizePrompt(x.data(), 1, 256, 64, xs); }).code(), ErrorCode::Shape);
    }

    void activationRounding()
    {
        std::mt19937 rng(11);
        std::normal_distribution<float> normal(0.0f, 3.0f);
        std::vector<float> x(96);
        for (auto &v : x)
            v = normal(rng);
        std::fill(x.begin() + 32, x.begin() + 64, 0.0f); // an all-zero block
        x[70] = 1e30f;                                   // a block with one huge value
        q::QuantizedActivation a;
        q::quantizeActivation(x.data(), 96, a);
        QCOMPARE(a.k, int64_t(96));
        for (int i = 0; i < 96; ++i) {
            const float d = a.d[size_t(i / 32)];
            QVERIFY(a.q[size_t(i)] >= -127 && a.q[size_t(i)] <= 127);
            QVERIFY(std::fabs(double(d) * a.q[size_t(i)] - x[size_t(i)]) <= double(d) / 2 * (1 + 1e-6));
        }
        QCOMPARE(a.d[1], 0.0f);
        QCOMPARE(a.xs[1], 0.0f);
        int sum0 = 0;
        for (int i = 0; i < 32; ++i)
            sum0 += a.q[size_t(i)];
        QCOMPARE(a.xs[0], a.d[0] * float(sum0));
        // a NaN or infinity poisons its block's products instead of being rounded away
        x[5] = NAN;
        x[40] = INFINITY;
        q::quantizeActivation(x.data(), 96, a);
        QVERIFY(std::isnan(a.d[0]) && std::isnan(a.d[1]) && !std::isnan(a.d[2]));
        QCOMPARE(expectError([&] { q::quantizeActivation(x.data(), 48, a); }).code(), ErrorCode::Shape);
    }

    // One wrong level in a row of 768 exceeds the bound: Q8_0 blocks of one scale, one level moved.
    void boundCatchesOneWrongLevel()
    {
        std::mt19937 rng(7);
        const int64_t k = 768;
        auto w = randomBlocks(DType::Q8_0, 1, k, rng);
        const uint16_t d = floatToHalf(0.01f);
        for (int64_t b = 0; b < k / 32; ++b)
            std::memcpy(w.data() + b * dtypeBlockBytes(DType::Q8_0), &d, 2);
        std::vector<float> x(static_cast<size_t>(k), 1.0f), ref(static_cast<size_t>(k));
        q::QuantizedActivation xa;
        q::quantizeActivation(x.data(), k, xa);
        dequantize(DType::Q8_0, w, k, ref.data(), "w");
        double wmax = 0;
        for (float v : ref)
            wmax = std::max(wmax, double(std::fabs(v)));
        auto moved = w;
        const int8_t level = int8_t(w[2 + 5]);
        moved[2 + 5] = std::byte(uint8_t(level == 127 ? 126 : level + 1));
        for (q::Isa isa : pathsHere()) {
            float good = 0, bad = 0;
            q::dotRows(DType::Q8_0, w.data(), 0, 1, xa, &good, isa);
            q::dotRows(DType::Q8_0, moved.data(), 0, 1, xa, &bad, isa);
            QVERIFY(std::fabs(double(good) - double(bad)) > 4e-6 * double(k) * wmax);
        }
    }

    void realisticBlocks()
    {
        // quantize()'s blocks of smooth values against the activation as it was: every path within
        // the activation's rounding bound, sum |w| * d / 2, plus 1e-5 of sum |x w| for the f32 sums
        std::mt19937 rng(3);
        std::normal_distribution<float> normal(0.0f, 0.02f);
        const int64_t k = 1024;
        std::vector<float> values(static_cast<size_t>(4 * k)), x(static_cast<size_t>(k));
        for (auto &v : values)
            v = normal(rng);
        for (auto &v : x)
            v = normal(rng) * 50.0f;
        q::QuantizedActivation xa;
        q::quantizeActivation(x.data(), k, xa);
        for (DType t : kTypes) {
            const auto w = quantize(t, values, "w");
            std::vector<float> ref(values.size());
            dequantize(t, w, int64_t(values.size()), ref.data(), "w");
            for (q::Isa isa : pathsHere()) {
                std::vector<float> y(4);
                q::dotRows(t, w.data(), 0, 4, xa, y.data(), isa);
                for (int r = 0; r < 4; ++r) {
                    double exact = 0, bound = 0;
                    for (int64_t i = 0; i < k; ++i) {
                        const double wi = ref[size_t(r * k + i)];
                        exact += double(x[size_t(i)]) * wi;
                        const double d =
                            dtypeBlockElements(t) == 256 ? xa.d256[size_t(i / 256)] : xa.d[size_t(i / 32)];
                        bound += std::fabs(wi) * d / 2 + 1e-5 * std::fabs(x[size_t(i)] * wi);
                    }
                    QVERIFY2(std::fabs(y[size_t(r)] - exact) <= bound, dtypeName(t));
                }
            }
        }
    }

    void pathOverride()
    {
        {
            EnvGuard g(nullptr);
            QCOMPARE(q::activeIsa(), q::detectedIsa());
        }
        for (q::Isa isa : pathsHere()) {
            EnvGuard g(q::isaName(isa));
            QCOMPARE(q::activeIsa(), isa);
        }
        {
            EnvGuard g("sse9");
            const auto e = expectError([] { (void)q::activeIsa(); });
            QCOMPARE(e.code(), ErrorCode::InvalidArgument);
            QVERIFY(QString::fromStdString(e.what()).contains("KVWB_QUANT_ISA"));
        }
        for (q::Isa isa : {q::Isa::Avx2, q::Isa::Avx512})
            if (!q::isaSupported(isa)) {
                EnvGuard g(q::isaName(isa));
                QCOMPARE(expectError([] { (void)q::activeIsa(); }).code(), ErrorCode::Unsupported);
            }
        QCOMPARE(q::parseIsa("avx512"), std::optional(q::Isa::Avx512));
        QVERIFY(!q::parseIsa("AVX512"));
    }

    void refusals()
    {
        std::mt19937 rng(1);
        auto w = randomBlocks(DType::Q8_0, 1, 64, rng);
        float y = 0, x[64] = {};
        q::QuantizedActivation xa, bad;
        q::quantizeActivation(x, 64, xa);
        q::quantizeActivation(x, 64, bad);
        bad.k = 48; // not whole Q8_0 blocks
        QCOMPARE(
            expectError([&] { q::dotRows(DType::Q8_0, w.data(), 0, 1, bad, &y, q::Isa::Portable); }).code(),
            ErrorCode::Shape);
        QCOMPARE(
            expectError([&] { q::dotRows(DType::F32, w.data(), 0, 1, xa, &y, q::Isa::Portable); }).code(),
            ErrorCode::Unsupported);
        // a NaN scale in block 1 is named before any product uses it
        const uint16_t nan = 0x7E00;
        std::memcpy(w.data() + dtypeBlockBytes(DType::Q8_0), &nan, 2);
        const auto e = expectError([&] { checkScales(DType::Q8_0, w, "blk.0.attn_q.weight"); });
        QCOMPARE(e.code(), ErrorCode::Format);
        QVERIFY(QString::fromStdString(e.what()).contains("blk.0.attn_q.weight: Q8_0 block 1"));
        checkScales(DType::Q8_0, std::span(w).first(size_t(dtypeBlockBytes(DType::Q8_0))), "first block");
    }
};

QTEST_GUILESS_MAIN(TestQuantKernels)
#include "tst_quant_kernels.moc"
