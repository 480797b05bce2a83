// GGUF: the block formats against hand-made blocks, quantise/dequantise error bounds, the container's
// round trip, the corrupt-file corpus (one clear error each, nothing sized from an unchecked count),
// models written as GGUF and read back (same config, same tensors), and the tokenizer in the metadata.
#include "core/model/checkpoint.h"
#include "core/model/gguf.h"
#include "core/model/gguf_model.h"
#include "core/model/quant.h"
#include "core/model/random_model.h"
#include "core/tokenize/gguf_tokenizer.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QTest>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

using namespace kvwb::core;
namespace fs = std::filesystem;
using kvwb::test::expectError;

Q_DECLARE_METATYPE(kvwb::core::DType)
Q_DECLARE_METATYPE(kvwb::core::ErrorCode)

namespace {

std::vector<std::byte> bytesOf(std::initializer_list<int> v)
{
    std::vector<std::byte> out;
    for (int x : v)
        out.push_back(std::byte(uint8_t(x)));
    return out;
}

void putU16(std::vector<std::byte> &b, size_t at, uint16_t v)
{
    std::memcpy(b.data() + at, &v, 2);
}

std::vector<float> decode(DType t, const std::vector<std::byte> &block)
{
    const int n = dtypeBlockElements(t);
    std::vector<float> out(static_cast<size_t>(n));
    dequantize(t, block, n, out.data(), "test block");
    return out;
}

// A GGUF file assembled by hand (not by GgufWriter), remembering where each field is so that the
// corpus can lie in exactly one of them: one string key, one array key, two F32 tensors.
struct HandFile
{
    std::vector<std::byte> b;
    size_t versionAt = 0, nTensorsAt = 0, nKvAt = 0, keyLenAt = 0, arrayCountAt = 0, valueTypeAt = 0;
    size_t t0DimsAt = 0, t0NeAt = 0, t0TypeAt = 0, t0OffsetAt = 0, t1OffsetAt = 0, dataAt = 0;

    template <typename T> size_t put(T v)
    {
        const size_t at = b.size();
        const auto *p = reinterpret_cast<const std::byte *>(&v);
        b.insert(b.end(), p, p + sizeof(T));
        return at;
    }
    size_t str(const std::string &s)
    {
        const size_t at = put(uint64_t(s.size()));
        for (char c : s)
            b.push_back(std::byte(c));
        return at;
    }
    template <typename T> void patch(size_t at, T v) { std::memcpy(b.data() + at, &v, sizeof(T)); }

    HandFile()
    {
        put(uint32_t(0x46554747));
        versionAt = put(uint32_t(3));
        nTensorsAt = put(uint64_t(2));
        nKvAt = put(uint64_t(2));
        keyLenAt = str("general.architecture");
        valueTypeAt = put(uint32_t(8));
        str("llama");
        str("tokenizer.ggml.scores");
        put(uint32_t(9));
        put(uint32_t(6));
        arrayCountAt = put(uint64_t(3));
        for (float f : {0.5f, -1.0f, 2.0f})
            put(f);
        str("a");
        t0DimsAt = put(uint32_t(2));
        t0NeAt = put(uint64_t(8));
        put(uint64_t(2));
        t0TypeAt = put(uint32_t(0));
        t0OffsetAt = put(uint64_t(0));
        str("b");
        put(uint32_t(1));
        put(uint64_t(4));
        put(uint32_t(0));
        t1OffsetAt = put(uint64_t(64));
        while (b.size() % 32)
            b.push_back(std::byte{0});
        dataAt = b.size();
        for (int i = 0; i < 16; ++i)
            put(float(i));
        while (b.size() < dataAt + 64)
            b.push_back(std::byte{0});
        for (int i = 0; i < 4; ++i)
            put(float(100 + i));
    }
};

fs::path writeBytes(const QTemporaryDir &dir, const std::string &name, const std::vector<std::byte> &b)
{
    const fs::path p = fs::path(dir.path().toStdString()) / name;
    kvwb::test::writeFile(p, std::string(reinterpret_cast<const char *>(b.data()), b.size()));
    return p;
}

} // namespace

class TestGguf : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    // Hand-made blocks with values worked out from the format description, not from the decoder.
    void knownBlocks()
    {
        { // Q8_0: d = 0.25 (f16 0x3400), qs = -16..15
            auto b = bytesOf({0x00, 0x34});
            for (int j = 0; j < 32; ++j)
                b.push_back(std::byte(uint8_t(int8_t(j - 16))));
            const auto y = decode(DType::Q8_0, b);
            for (int j = 0; j < 32; ++j)
                QCOMPARE(y[size_t(j)], 0.25f * float(j - 16));
        }
        { // Q4_0: d = 0.5, byte j = j | (15 - j) << 4 -> y[j] = (j - 8) d, y[j + 16] = (7 - j) d
            auto b = bytesOf({0x00, 0x38});
            for (int j = 0; j < 16; ++j)
                b.push_back(std::byte(uint8_t(j | ((15 - j) << 4))));
            const auto y = decode(DType::Q4_0, b);
            for (int j = 0; j < 16; ++j) {
                QCOMPARE(y[size_t(j)], 0.5f * float(j - 8));
                QCOMPARE(y[size_t(j + 16)], 0.5f * float(7 - j));
            }
        }
        { // Q4_1: d = 1, m = -2, byte j = j | j << 4 -> y[j] = y[j + 16] = j - 2
            auto b = bytesOf({0x00, 0x3C, 0x00, 0xC0});
            for (int j = 0; j < 16; ++j)
                b.push_back(std::byte(uint8_t(j | (j << 4))));
            const auto y = decode(DType::Q4_1, b);
            for (int j = 0; j < 16; ++j) {
                QCOMPARE(y[size_t(j)], float(j - 2));
                QCOMPARE(y[size_t(j + 16)], float(j - 2));
            }
        }
        { // Q5_0: d = 1, high bits set for elements 16..31 only -> y[j] = j - 16, y[j + 16] = j
            auto b = bytesOf({0x00, 0x3C, 0x00, 0x00, 0xFF, 0xFF});
            for (int j = 0; j < 16; ++j)
                b.push_back(std::byte(uint8_t(j | (j << 4))));
            const auto y = decode(DType::Q5_0, b);
            for (int j = 0; j < 16; ++j) {
                QCOMPARE(y[size_t(j)], float(j - 16));
                QCOMPARE(y[size_t(j + 16)], float(j));
            }
        }
        { // Q5_1: d = 0.5, m = 1, high bits for elements 0..15 -> y[j] = (16 + j) / 2 + 1, y[j + 16] = j / 2
          // + 1
            auto b = bytesOf({0x00, 0x38, 0x00, 0x3C, 0xFF, 0xFF, 0x00, 0x00});
            for (int j = 0; j < 16; ++j)
                b.push_back(std::byte(uint8_t(j | (j << 4))));
            const auto y = decode(DType::Q5_1, b);
            for (int j = 0; j < 16; ++j) {
                QCOMPARE(y[size_t(j)], 0.5f * float(16 + j) + 1.0f);
                QCOMPARE(y[size_t(j + 16)], 0.5f * float(j) + 1.0f);
            }
        }
        // Q4_K / Q5_K: d = 1, dmin = 0.5; sub-block s has scale s + 1 and min 2 s (all below 16, so
        // the packed high bits are zero); every quant byte 0x21 (low nibble 1, high nibble 2). Sub-block
        // s covers elements 32 s .. 32 s + 31: the low nibbles of a 64-element chunk's bytes go to its
        // first 32 elements, the high nibbles to the next 32.
        for (DType t : {DType::Q4_K, DType::Q5_K}) {
            const bool five = t == DType::Q5_K;
            std::vector<std::byte> b(size_t(dtypeBlockBytes(t)), std::byte{0});
            putU16(b, 0, 0x3C00);
            putU16(b, 2, 0x3800);
            for (int s = 0; s < 8; ++s) {
                const int sc = s + 1, mn = 2 * s;
                if (s < 4) {
                    b[size_t(4 + s)] = std::byte(uint8_t(sc));
                    b[size_t(4 + s + 4)] = std::byte(uint8_t(mn));
                } else {
                    b[size_t(4 + s + 4)] = std::byte(uint8_t((sc & 0xF) | ((mn & 0xF) << 4)));
                }
            }
            const size_t qs = five ? 48 : 16;
            for (size_t i = 0; i < 128; ++i)
                b[qs + i] = std::byte{0x21};
            if (five)
                for (size_t i = 0; i < 32; ++i)
                    b[16 + i] = std::byte{0x01}; // fifth bit for the first 32 elements only
            const auto y = decode(t, b);
            for (int e = 0; e < 256; ++e) {
                const int s = e / 32;
                int q = (e % 64) < 32 ? 1 : 2;
                if (five && e < 32)
                    q += 16;
                QCOMPARE(y[size_t(e)], 1.0f * float(s + 1) * float(q) - 0.5f * float(2 * s));
            }
        }
        { // Q6_K: d = 0.5, 16 scales s + 1; ql bytes 0x31, qh bytes 0xE4: the four 32-element groups of
          // each 128 get 6-bit quants 1, 17, 35, 51 (minus 32: -31, -15, 3, 19); sub-block e / 16
            std::vector<std::byte> b(210, std::byte{0});
            for (size_t i = 0; i < 128; ++i)
                b[i] = std::byte{0x31};
            for (size_t i = 0; i < 64; ++i)
                b[128 + i] = std::byte{0xE4};
            for (int s = 0; s < 16; ++s)
                b[size_t(192 + s)] = std::byte(uint8_t(s + 1));
            putU16(b, 208, 0x3800);
            const auto y = decode(DType::Q6_K, b);
            const int q[4] = {-31, -15, 3, 19};
            for (int e = 0; e < 256; ++e)
                QCOMPARE(y[size_t(e)], 0.5f * float(e / 16 + 1) * float(q[(e % 128) / 32]));
        }
    }

    void quantiseErrorBounded_data()
    {
        QTest::addColumn<DType>("type");
        QTest::addColumn<double>("maxRelRms"); // RMS error / RMS value
        QTest::newRow("F16") << DType::F16 << 1e-3;
        QTest::newRow("BF16") << DType::BF16 << 5e-3;
        QTest::newRow("Q8_0") << DType::Q8_0 << 0.01;
        QTest::newRow("Q4_0") << DType::Q4_0 << 0.12;
        QTest::newRow("Q4_1") << DType::Q4_1 << 0.12;
        QTest::newRow("Q5_0") << DType::Q5_0 << 0.06;
        QTest::newRow("Q5_1") << DType::Q5_1 << 0.06;
        QTest::newRow("Q4_K") << DType::Q4_K << 0.12;
        QTest::newRow("Q5_K") << DType::Q5_K << 0.06;
        QTest::newRow("Q6_K") << DType::Q6_K << 0.03;
    }
    void quantiseErrorBounded()
    {
        QFETCH(DType, type);
        QFETCH(double, maxRelRms);
        std::mt19937 rng(7);
        std::normal_distribution<float> nd(0.0f, 0.3f);
        std::vector<float> x(1024);
        for (float &v : x)
            v = nd(rng);
        x[5] = 2.5f; // an outlier in one block
        const auto q = quantize(type, x, "x");
        QCOMPARE(q.size(), size_t(dtypeBytesFor(type, 1024, "x")));
        std::vector<float> y(1024);
        dequantize(type, q, 1024, y.data(), "x");
        double err = 0, ref = 0, worst = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            err += double(y[i] - x[i]) * double(y[i] - x[i]);
            ref += double(x[i]) * double(x[i]);
            worst = std::max(worst, double(std::fabs(y[i] - x[i])));
        }
        QVERIFY2(std::sqrt(err / ref) < maxRelRms, qPrintable(QString::number(std::sqrt(err / ref))));
        QVERIFY(worst < 0.4); // no value lands far from its input (2.5 is the largest)
        // the block is decoded as written: quantising the decoded values again changes nothing
        // for the plain-scale formats
        if (type == DType::Q8_0) {
            const auto q2 = quantize(type, y, "y");
            QVERIFY(q2 == q);
        }
    }

    void wholeBlocksOnly()
    {
        const std::vector<float> x(48, 1.0f);
        QCOMPARE(expectError([&] { (void)quantize(DType::Q8_0, x, "t"); }).code(), ErrorCode::Shape);
        std::vector<std::byte> b(34);
        float out[32];
        QCOMPARE(expectError([&] { dequantize(DType::Q8_0, std::span(b).first(33), 32, out, "t"); }).code(),
                 ErrorCode::Shape);
        putU16(b, 0, 0x7C00); // d = +inf
        const auto e = expectError([&] { dequantize(DType::Q8_0, b, 32, out, "t"); });
        QCOMPARE(e.code(), ErrorCode::Format);
        QVERIFY(QString::fromStdString(e.what()).contains("block 0"));
    }

    void containerRoundTrip()
    {
        QTemporaryDir dir;
        GgufWriter w;
        w.setString("general.architecture", "llama");
        w.setU32("u", 7);
        w.setI32("i", -3);
        w.setF32("f", 0.25f);
        w.setBool("b", true);
        w.setStrings("s", {"x", "", "yz"});
        w.setF32s("fs", {1.5f, -2.0f});
        w.setI32s("is", {1, -1, 3});
        const std::vector<float> a{1, 2, 3, 4, 5, 6};
        w.addTensor("a", DType::F32, {2, 3}, quantize(DType::F32, a, "a"));
        std::vector<float> big(64);
        for (size_t i = 0; i < big.size(); ++i)
            big[i] = float(i) / 8.0f;
        w.addTensor("q", DType::Q8_0, {2, 32}, quantize(DType::Q8_0, big, "q"));
        const fs::path p = fs::path(dir.path().toStdString()) / "x.gguf";
        w.write(p);
        QVERIFY(GgufFile::looksLikeGguf(p));
        const auto f = GgufFile::open(p);
        QCOMPARE(f.version(), 3u);
        QCOMPARE(*f.string("general.architecture"), std::string("llama"));
        QCOMPARE(*f.integer("u"), int64_t(7));
        QCOMPARE(*f.integer("i"), int64_t(-3));
        QCOMPARE(*f.number("f"), 0.25);
        QCOMPARE(*f.boolean("b"), true);
        QCOMPARE(*f.stringArray("s"), (std::vector<std::string>{"x", "", "yz"}));
        QCOMPARE(*f.numberArray("fs"), (std::vector<double>{1.5, -2.0}));
        QCOMPARE(*f.numberArray("is"), (std::vector<double>{1, -1, 3}));
        QCOMPARE(expectError([&] { (void)f.string("u"); }).code(), ErrorCode::Format);
        QCOMPARE(f.tensors().size(), size_t(2));
        const GgufTensor *t = f.tensor("a");
        QVERIFY(t);
        QCOMPARE(t->info.shape, (std::vector<int64_t>{2, 3}));
        QCOMPARE(t->ne, (std::vector<uint64_t>{3, 2}));
        QCOMPARE(std::memcmp(f.data(*t), a.data(), 24), 0);
        const GgufTensor *q = f.tensor("q");
        QCOMPARE(q->info.dtype, DType::Q8_0);
        QCOMPARE(q->info.offset % 32, uint64_t(0));
        std::vector<float> back(64);
        dequantize(DType::Q8_0, {f.data(*q), size_t(q->info.bytes)}, 64, back.data(), "q");
        for (size_t i = 0; i < back.size(); ++i)
            QVERIFY(std::fabs(back[i] - big[i]) <= 0.5f * 7.875f / 127.0f + 1e-3f); // half a step
    }

    void handFileReads()
    {
        QTemporaryDir dir;
        HandFile h;
        const auto f = GgufFile::open(writeBytes(dir, "ok.gguf", h.b));
        QCOMPARE(*f.string("general.architecture"), std::string("llama"));
        QCOMPARE(f.tensor("b")->info.shape, std::vector<int64_t>{4});
        float v;
        std::memcpy(&v, f.data(*f.tensor("b")), 4);
        QCOMPARE(v, 100.0f);
    }

    // Each corrupt file is one Error naming the file; nothing crashes, hangs or allocates from the
    // lying count.
    void corruptCorpus_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<ErrorCode>("code");
        QTest::addColumn<QString>("mentions");
        const auto row = [](const char *name, const std::vector<std::byte> &b, ErrorCode c, const char *m) {
            QTest::newRow(name) << QByteArray(reinterpret_cast<const char *>(b.data()), qsizetype(b.size()))
                                << c << QString(m);
        };
        const HandFile base;
        for (size_t cut : {size_t(0), size_t(3), size_t(6), size_t(20), base.keyLenAt + 4, base.keyLenAt + 20,
                           base.arrayCountAt + 4, base.t0NeAt + 3, base.t1OffsetAt + 2, base.dataAt + 10,
                           base.b.size() - 1}) {
            HandFile h;
            h.b.resize(cut);
            row(qPrintable(QString("truncated at %1").arg(cut)), h.b, ErrorCode::Format,
                cut < 4 ? "magic" : "");
        }
        {
            HandFile h;
            h.b[0] = std::byte{'X'};
            row("bad magic", h.b, ErrorCode::Format, "magic");
        }
        {
            HandFile h;
            h.patch(h.versionAt, uint32_t(1));
            row("version 1", h.b, ErrorCode::Unsupported, "version 1");
        }
        {
            HandFile h;
            h.patch(h.versionAt, uint32_t(0x03000000));
            row("big-endian", h.b, ErrorCode::Unsupported, "big-endian");
        }
        {
            HandFile h;
            h.patch(h.nTensorsAt, uint64_t(1) << 60);
            row("huge tensor count", h.b, ErrorCode::Format, "tensors");
        }
        {
            HandFile h;
            h.patch(h.nKvAt, ~uint64_t(0));
            row("huge metadata count", h.b, ErrorCode::Format, "metadata entries");
        }
        {
            HandFile h;
            h.patch(h.keyLenAt, uint64_t(1) << 40);
            row("string longer than the file", h.b, ErrorCode::Format, "bytes long");
        }
        {
            HandFile h;
            h.patch(h.arrayCountAt, uint64_t(1) << 61);
            row("huge array count", h.b, ErrorCode::Format, "tokenizer.ggml.scores");
        }
        {
            HandFile h;
            h.patch(h.valueTypeAt, uint32_t(99));
            row("unknown value type", h.b, ErrorCode::Format, "unknown value type 99");
        }
        {
            HandFile h;
            h.patch(h.t0TypeAt, uint32_t(10));
            row("unknown tensor type", h.b, ErrorCode::Unsupported, "Q2_K");
        }
        {
            HandFile h;
            h.patch(h.t0TypeAt, uint32_t(4000));
            row("tensor type beyond ggml's", h.b, ErrorCode::Unsupported, "type 4000");
        }
        {
            HandFile h;
            h.patch(h.t1OffsetAt, uint64_t(1) << 50);
            row("offset past the end", h.b, ErrorCode::Format, "runs past the end");
        }
        {
            HandFile h;
            h.patch(h.t1OffsetAt, uint64_t(36));
            row("misaligned offset", h.b, ErrorCode::Format, "alignment");
        }
        {
            HandFile h;
            h.patch(h.t1OffsetAt, uint64_t(32));
            row("overlapping tensors", h.b, ErrorCode::Format, "overlap");
        }
        {
            HandFile h;
            h.patch(h.t0NeAt, uint64_t(1) << 39);
            row("dimension beyond the data", h.b, ErrorCode::Format, "tensor 'a'");
        }
        {
            HandFile h;
            h.patch(h.t0NeAt, uint64_t(0));
            row("zero dimension", h.b, ErrorCode::Format, "dimension 0");
        }
        {
            HandFile h;
            h.patch(h.t0DimsAt, uint32_t(9));
            row("too many dimensions", h.b, ErrorCode::Format, "9 dimensions");
        }
        {
            HandFile h;
            h.patch(h.t0TypeAt, uint32_t(8)); // Q8_0 rows of 8 elements
            row("rows not whole blocks", h.b, ErrorCode::Format, "blocks");
        }
    }
    void corruptCorpus()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(ErrorCode, code);
        QFETCH(QString, mentions);
        QTemporaryDir dir;
        std::vector<std::byte> b(size_t(bytes.size()));
        if (!b.empty())
            std::memcpy(b.data(), bytes.data(), b.size());
        const fs::path p = writeBytes(dir, "bad.gguf", b);
        const auto e = expectError([&] { (void)GgufFile::open(p); });
        QCOMPARE(e.code(), code);
        const QString msg = QString::fromStdString(e.what());
        QVERIFY2(msg.contains("bad.gguf"), qPrintable(msg));
        QVERIFY2(msg.contains(mentions), qPrintable(msg));
        QVERIFY2(!msg.contains('\n'), qPrintable(msg));
        // and through Checkpoint, the same single line
        QCOMPARE(expectError([&] { (void)Checkpoint::open(p); }).code(), code);
    }

    void duplicateKeyAndAlignment()
    {
        QTemporaryDir dir;
        {
            std::vector<std::byte> b;
            const auto put = [&](auto v) {
                const auto *p = reinterpret_cast<const std::byte *>(&v);
                b.insert(b.end(), p, p + sizeof(v));
            };
            put(uint32_t(0x46554747));
            put(uint32_t(3));
            put(uint64_t(0));
            put(uint64_t(2));
            for (int i = 0; i < 2; ++i) {
                put(uint64_t(1));
                b.push_back(std::byte{'k'});
                put(uint32_t(4));
                put(uint32_t(i));
            }
            const auto e = expectError([&] { (void)GgufFile::open(writeBytes(dir, "dup.gguf", b)); });
            QCOMPARE(e.code(), ErrorCode::Format);
            QVERIFY(QString::fromStdString(e.what()).contains("'k' appears twice"));
        }
        {
            GgufWriter w;
            w.setU32("general.alignment", 3);
            const fs::path p = fs::path(dir.path().toStdString()) / "align.gguf";
            w.write(p);
            const auto e = expectError([&] { (void)GgufFile::open(p); });
            QVERIFY(QString::fromStdString(e.what()).contains("general.alignment"));
        }
    }

    // Qwen2/Qwen3's NFC normalizer has no GGUF field: it is kept as tokenizer.kvwb.normalizer and
    // read back, so a decomposed accent tokenises as the tokenizer.json does; another normalizer is
    // refused, not dropped.
    void nfcNormalizerRoundTrip()
    {
        QTemporaryDir dir;
        const fs::path root = dir.path().toStdString();
        auto spec = randomModelPreset("qwen2");
        writeRandomHfModel(root / "hf", spec);
        const auto hf = Checkpoint::open(root / "hf");
        auto j = nlohmann::json::parse(std::ifstream(*hf.tokenizerPath()));
        j["normalizer"] = {{"type", "NFC"}};
        std::ofstream(root / "nfc.json") << j.dump();
        const auto original = loadTokenizer(root / "nfc.json");
        GgufWriter w;
        writeTokenizerToGguf(root / "nfc.json", w, hf.config().vocabSize);
        QVERIFY(writeGguf(hf, root / "m.gguf", DType::F32, std::move(w)).empty());
        const auto f = GgufFile::open(root / "m.gguf");
        QCOMPARE(f.string("tokenizer.kvwb.normalizer"), std::optional<std::string>("NFC"));
        const auto back = tokenizerFromGguf(f);
        const std::string decomposed = "caf\x65\xcc\x81 na\x69\xcc\x88ve"; // e + U+0301, i + U+0308
        const std::string composed = "caf\xc3\xa9 na\xc3\xafve";
        QCOMPARE(back->encode(decomposed, false), original->encode(decomposed, false));
        QCOMPARE(back->encode(decomposed, false), back->encode(composed, false));
        j["normalizer"] = {{"type", "Lowercase"}};
        std::ofstream(root / "lower.json") << j.dump();
        GgufWriter refused;
        const auto e = expectError([&] { writeTokenizerToGguf(root / "lower.json", refused, 300); });
        QCOMPARE(e.code(), ErrorCode::Unsupported);
        QVERIFY(QString::fromStdString(e.what()).contains("Lowercase"));
    }

    // A model written as GGUF reads back with the same configuration and the same tensors; the
    // llama architecture's q/k rows go through llama.cpp's permutation and back.
    void modelRoundTrip_data()
    {
        QTest::addColumn<QString>("preset");
        for (const char *p : {"gqa", "qwen2", "qwen3", "phi3", "phi3-longrope", "smollm", "llama3", "bias",
                              "gemma2", "gemma3", "gemma3-b"})
            QTest::newRow(p) << QString(p);
    }
    void modelRoundTrip()
    {
        QFETCH(QString, preset);
        QTemporaryDir dir;
        const fs::path root = dir.path().toStdString();
        auto spec = randomModelPreset(preset.toStdString());
        writeRandomHfModel(root / "hf", spec);
        const auto hf = Checkpoint::open(root / "hf");
        GgufWriter w;
        writeTokenizerToGguf(*hf.tokenizerPath(), w, hf.config().vocabSize);
        QVERIFY(writeGguf(hf, root / "m.gguf", DType::F32, std::move(w)).empty());
        const auto g = Checkpoint::open(root / "m.gguf");
        // llama.cpp sizes token_embd from the token list: it covers every embedding row (300 rows,
        // 258 tokenizer pieces), the rest as unused [PAD<id>] tokens
        {
            // llama.cpp takes a general.name with "phi3" or "phi-3" for Microsoft's Phi-3 and looks
            // up its special tokens, failing on any other vocabulary ("error loading model
            // vocabulary"): without them the name says "phi 3"
            const auto f = GgufFile::open(root / "m.gguf");
            QString name = QString::fromStdString(*f.string("general.name")).toLower();
            QVERIFY2(!name.contains("phi3") && !name.contains("phi-3"), qPrintable(name));
        }
        if (preset.startsWith("phi3")) {
            const fs::path named = root / "phi3-mini";
            fs::rename(root / "hf", named);
            GgufWriter again;
            writeTokenizerToGguf(*Checkpoint::open(named).tokenizerPath(), again, hf.config().vocabSize);
            QVERIFY(
                writeGguf(Checkpoint::open(named), root / "n.gguf", DType::F32, std::move(again)).empty());
            QCOMPARE(*GgufFile::open(root / "n.gguf").string("general.name"), std::string("phi 3-mini"));
            fs::rename(named, root / "hf");
        }
        {
            const auto f = GgufFile::open(root / "m.gguf");
            const auto *tokens = f.stringArray("tokenizer.ggml.tokens");
            QVERIFY(tokens);
            QCOMPARE(int(tokens->size()), hf.config().vocabSize);
            QCOMPARE(tokens->back(), "[PAD" + std::to_string(hf.config().vocabSize - 1) + "]");
        }
        QCOMPARE(g.format(), CheckpointFormat::Gguf);
        ModelConfig a = hf.config(), b = g.config();
        a.torchDtype = b.torchDtype = "";
        QCOMPARE(b.toHfJson(), a.toHfJson());
        QVERIFY(b == a);
        for (const std::string &name : hf.tensorNames()) {
            if (a.tieWordEmbeddings && name == "lm_head.weight")
                continue;
            QVERIFY2(g.contains(name), name.c_str());
            auto x = toFloatVector(g.require(name, {})), y = toFloatVector(hf.require(name, {}));
            if (a.unitOffsetNorm && name.ends_with("norm.weight")) // Gemma's 1 + w, as the engine uses it
                for (size_t i = 0; i < x.size(); ++i) {
                    x[i] += 1.0f;
                    y[i] += 1.0f;
                }
            QVERIFY2(x == y, name.c_str());
        }
        // the tokenizer came along
        const auto t1 = loadTokenizer(*hf.tokenizerPath());
        const auto t2 = loadTokenizer(*g.tokenizerPath());
        for (const char *s : {"Hello world", " two  spaces\n", "ünï 日本 🙂 123"})
            QCOMPARE(t2->encode(s, true), t1->encode(s, true));
    }

    void quantisedModelClose()
    {
        QTemporaryDir dir;
        const fs::path root = dir.path().toStdString();
        auto spec = randomModelPreset("gqa");
        spec.config.hiddenSize = 256; // whole 256-element rows, so the K-quants apply everywhere
        spec.config.intermediateSize = 512;
        spec.config.numHeads = 4;
        spec.config.numKvHeads = 2;
        spec.config.headDim = 64;
        writeRandomHfModel(root / "hf", spec);
        const auto hf = Checkpoint::open(root / "hf");
        for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
            const fs::path p = root / (std::string(dtypeName(t)) + ".gguf");
            QVERIFY(writeGguf(hf, p, t).empty());
            const auto g = Checkpoint::open(p);
            const std::string name = "model.layers.1.self_attn.k_proj.weight";
            QCOMPARE(g.require(name, {}).info->dtype, t);
            QCOMPARE(g.require("model.layers.1.input_layernorm.weight", {}).info->dtype, DType::F32);
            const auto x = toFloatVector(hf.require(name, {})), y = toFloatVector(g.require(name, {}));
            double err = 0, ref = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                err += double(y[i] - x[i]) * double(y[i] - x[i]);
                ref += double(x[i]) * double(x[i]);
            }
            QVERIFY2(std::sqrt(err / ref) < 0.15, dtypeName(t));
            const auto s = ggufSummary(GgufFile::open(p));
            QVERIFY(std::any_of(s.types.begin(), s.types.end(),
                                [&](const auto &c) { return c.type == dtypeName(t); }));
        }
    }

    void sentencePieceTokenizerThroughGguf()
    {
        const fs::path spm = kvwb::test::sourceDir() / "projects/demo/models/a/tokenizer.model";
        if (!fs::exists(spm))
            QSKIP("demo tokenizer not built");
        QTemporaryDir dir;
        GgufWriter w;
        writeTokenizerToGguf(spm, w);
        const fs::path p = fs::path(dir.path().toStdString()) / "t.gguf";
        w.write(p);
        const auto a = loadTokenizer(spm);
        const auto b = loadTokenizer(p);
        QCOMPARE(b->kind(), std::string("sentencepiece"));
        QCOMPARE(b->vocabSize(), a->vocabSize());
        for (const char *s : {"Hello world", " leading space", "The cat sat on the mat.\nNew line\tand tab",
                              "ünïcödé 日本語 🙂", "123456789 1.5e10", ""}) {
            QCOMPARE(b->encode(s, true), a->encode(s, true));
            QCOMPARE(b->decode(b->encode(s, false)), a->decode(a->encode(s, false)));
            // byte spans through the GGUF tokenizer: its ids, in order, inside the text, BOS empty
            const auto e = b->encodeWithOffsets(s, true);
            QCOMPARE(e.ids, b->encode(s, true));
            QCOMPARE(e.spans.front(), (TokenSpan{0, 0}));
            int32_t at = 0;
            for (const auto &span : e.spans) {
                QVERIFY(span.begin >= at && span.end >= span.begin && span.end <= int32_t(std::strlen(s)));
                at = span.begin;
            }
        }
    }

    void refusals()
    {
        QTemporaryDir dir;
        const fs::path root = dir.path().toStdString();
        {
            GgufWriter w;
            w.setString("general.architecture", "mamba");
            w.write(root / "a.gguf");
            const auto e = expectError([&] { (void)Checkpoint::open(root / "a.gguf"); });
            QCOMPARE(e.code(), ErrorCode::Unsupported);
            QVERIFY(QString::fromStdString(e.what()).contains("'mamba'"));
            QVERIFY(QString::fromStdString(e.what()).contains("qwen3"));
        }
        {
            GgufWriter w;
            w.setString("tokenizer.ggml.model", "gpt2");
            w.setString("tokenizer.ggml.pre", "falcon");
            w.setStrings("tokenizer.ggml.tokens", {"a", "b"});
            w.write(root / "t.gguf");
            const auto e = expectError([&] { (void)loadTokenizer(root / "t.gguf"); });
            QCOMPARE(e.code(), ErrorCode::Unsupported);
            QVERIFY(QString::fromStdString(e.what()).contains("'falcon'"));
        }
        {
            GgufWriter w;
            w.setString("tokenizer.ggml.model", "gpt2");
            w.setString("tokenizer.ggml.pre", "gpt-2");
            w.setStrings("tokenizer.ggml.tokens", {"a", "\xc3\x81\x81", "b"});
            w.write(root / "utf8.gguf");
            const auto e = expectError([&] { (void)loadTokenizer(root / "utf8.gguf"); });
            QCOMPARE(e.code(), ErrorCode::Tokenizer);
            QVERIFY(QString::fromStdString(e.what()).contains("entry 1 is not valid UTF-8"));
        }
        {
            // a tensor kvwb does not know is refused, not ignored
            auto spec = randomModelPreset("tiny");
            writeRandomHfModel(root / "hf", spec);
            GgufWriter w;
            std::vector<float> one(32, 1.0f);
            w.addTensor("blk.0.mystery.weight", DType::F32, {32}, quantize(DType::F32, one, "m"));
            writeGguf(Checkpoint::open(root / "hf"), root / "m.gguf", DType::F32, std::move(w));
            const auto e = expectError([&] { (void)Checkpoint::open(root / "m.gguf"); });
            QCOMPARE(e.code(), ErrorCode::Unsupported);
            QVERIFY(QString::fromStdString(e.what()).contains("blk.0.mystery.weight"));
        }
        // tensors and config agree exactly: a 2-layer model whose config says 1 layer is refused,
        // naming the first tensor past them (it used to run truncated), as safetensors and as GGUF
        {
            auto spec = randomModelPreset("tiny");
            QCOMPARE(spec.config.numLayers, 2);
            writeRandomHfModel(root / "hf-l", spec);
            writeGguf(Checkpoint::open(root / "hf-l"), root / "l.gguf", DType::F32);
            std::string cfg = kvwb::test::readFile(root / "hf-l" / "config.json");
            const size_t at = cfg.find("\"num_hidden_layers\": 2");
            QVERIFY(at != std::string::npos);
            cfg.replace(at, std::strlen("\"num_hidden_layers\": 2"), "\"num_hidden_layers\": 1");
            kvwb::test::writeFile(root / "hf-l" / "config.json", cfg);
            auto e = expectError([&] { (void)Checkpoint::open(root / "hf-l"); });
            QCOMPARE(e.code(), ErrorCode::Config);
            QVERIFY2(QString(e.what()).contains("tensor 'model.layers.1.") &&
                         QString(e.what()).contains("gives 1 layer(s)"),
                     e.what());
            std::string bytes = kvwb::test::readFile(root / "l.gguf");
            const size_t bc = bytes.find("block_count");
            QVERIFY(bc != std::string::npos);
            uint32_t type = 0, layers = 0;
            std::memcpy(&type, bytes.data() + bc + 11, 4);
            QCOMPARE(type, uint32_t(4)); // GGUF_TYPE_UINT32
            std::memcpy(&layers, bytes.data() + bc + 15, 4);
            QCOMPARE(layers, uint32_t(2));
            layers = 1;
            std::memcpy(bytes.data() + bc + 15, &layers, 4);
            kvwb::test::writeFile(root / "l.gguf", bytes);
            e = expectError([&] { (void)Checkpoint::open(root / "l.gguf"); });
            QCOMPARE(e.code(), ErrorCode::Config);
            QVERIFY2(QString(e.what()).contains("tensor 'model.layers.1.") &&
                         QString(e.what()).contains("gives 1 layer(s)"),
                     e.what());
        }
        // float fields: +inf (or NaN) in a written file is refused by field, not loaded
        for (const auto &[key, field] : {std::pair{"attention.layer_norm_rms_epsilon", "rms_norm_eps"},
                                         std::pair{"rope.freq_base", "rope_theta"}}) {
            for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
                auto spec = randomModelPreset("tiny");
                writeRandomHfModel(root / "hf-f", spec);
                writeGguf(Checkpoint::open(root / "hf-f"), root / "f.gguf", DType::F32);
                std::string bytes = kvwb::test::readFile(root / "f.gguf");
                const size_t at = bytes.find(key);
                QVERIFY(at != std::string::npos);
                const size_t value = at + std::strlen(key) + 4; // the key, its u32 type (f32), the value
                uint32_t type = 0;
                std::memcpy(&type, bytes.data() + at + std::strlen(key), 4);
                QCOMPARE(type, uint32_t(6)); // GGUF_TYPE_FLOAT32
                std::memcpy(bytes.data() + value, &bad, 4);
                kvwb::test::writeFile(root / "f.gguf", bytes);
                const auto e = expectError([&] { (void)Checkpoint::open(root / "f.gguf"); });
                QCOMPARE(e.code(), ErrorCode::Config);
                QVERIFY2(QString::fromStdString(e.what()).contains(QString("field '%1' is ").arg(field)),
                         e.what());
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestGguf)
#include "tst_gguf.moc"
