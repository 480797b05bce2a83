// Safetensors reader/writer, sharded WeightSet, dtype conversion and sha256.
#include "core/model/safetensors.h"
#include "core/util/error.h"
#include "core/util/sha256.h"
#include "tests/support/expect_error.h"
#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QTest>

#include <cstring>
#include <fstream>

using namespace kvwb::core;
namespace fs = std::filesystem;

Q_DECLARE_METATYPE(kvwb::core::ErrorCode)

namespace {

std::string rawFile(const std::string &header, size_t dataBytes, uint64_t lengthField = UINT64_MAX)
{
    const uint64_t n = lengthField == UINT64_MAX ? header.size() : lengthField;
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i)
        out[size_t(i)] = char((n >> (8 * i)) & 0xff);
    out += header;
    out.append(dataBytes, '\x01');
    return out;
}

void writeBytes(const fs::path &p, const std::string &bytes)
{
    kvwb::test::writeFile(p, bytes);
}
std::string readBytes(const fs::path &p)
{
    return kvwb::test::readFile(p);
}

using kvwb::test::expectError;

std::vector<std::byte> patternBytes(size_t n, int seed)
{
    std::vector<std::byte> v(n);
    for (size_t i = 0; i < n; ++i)
        v[i] = std::byte((i * 31 + size_t(seed) * 7 + 3) & 0xff);
    return v;
}

} // namespace

class TestSafetensors : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void roundTripAllDtypes()
    {
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "all.safetensors";
        const std::vector<DType> types{DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64,
                                       DType::I32, DType::I16, DType::I8,   DType::U8,  DType::Bool};
        SafetensorsWriter w;
        std::vector<std::vector<std::byte>> payloads;
        int seed = 0;
        for (DType t : types) {
            // Odd element counts (3 * 5) so that unpadded tensors misalign their successors.
            payloads.push_back(patternBytes(size_t(15 * dtypeSize(t)), seed++));
            w.add(std::string("t_") + dtypeName(t), t, {3, 5}, payloads.back());
        }
        w.add("scalar", DType::F32, {}, patternBytes(4, 99));
        w.add("empty", DType::F16, {0, 3}, {});
        w.setMetadata("format", "pt");
        w.setMetadata("note", "kvwb test");
        w.write(path);
        QVERIFY(!fs::exists(path.string() + ".tmp"));

        // Header length is a multiple of 8 and padded with spaces, as the reference writer does.
        const std::string raw = readBytes(path);
        uint64_t headerLen = 0;
        std::memcpy(&headerLen, raw.data(), 8);
        QCOMPARE(headerLen % 8, uint64_t(0));
        QVERIFY(raw.substr(8, headerLen).find('}') != std::string::npos);
        const std::string header = raw.substr(8, headerLen);
        QCOMPARE(header.find_last_not_of(' '), header.rfind('}'));

        const SafetensorsFile f = SafetensorsFile::open(path);
        QCOMPARE(f.tensors().size(), types.size() + 2);
        QCOMPARE(f.fileSize(), uint64_t(raw.size()));
        QCOMPARE(f.metadata().at("format"), std::string("pt"));
        QCOMPARE(f.metadata().at("note"), std::string("kvwb test"));
        for (size_t i = 0; i < types.size(); ++i) {
            const TensorInfo *t = f.find(std::string("t_") + dtypeName(types[i]));
            QVERIFY(t);
            QCOMPARE(t->dtype, types[i]);
            QCOMPARE(t->shape, (std::vector<int64_t>{3, 5}));
            QCOMPARE(t->numel(), int64_t(15));
            const auto b = f.bytes(*t);
            QVERIFY(std::equal(b.begin(), b.end(), payloads[i].begin(), payloads[i].end()));
            // Insertion order is file order.
            QCOMPARE(f.tensors()[i].name, t->name);
        }
        QVERIFY(f.find("scalar")->shape.empty());
        QCOMPARE(f.find("scalar")->bytes, uint64_t(4));
        QCOMPARE(f.find("empty")->bytes, uint64_t(0));
        QVERIFY(!f.find("nope"));
    }

    void halfAndBf16Exact_data()
    {
        QTest::addColumn<bool>("bf16");
        QTest::addColumn<int>("bits");
        QTest::addColumn<float>("value");
        QTest::newRow("f16 one") << false << 0x3C00 << 1.0f;
        QTest::newRow("f16 -two") << false << 0xC000 << -2.0f;
        QTest::newRow("f16 third") << false << 0x3555 << 0.333251953125f;
        QTest::newRow("f16 max") << false << 0x7BFF << 65504.0f;
        QTest::newRow("f16 min subnormal") << false << 0x0001 << 5.9604644775390625e-08f;
        QTest::newRow("f16 -zero") << false << 0x8000 << -0.0f;
        QTest::newRow("bf16 one") << true << 0x3F80 << 1.0f;
        QTest::newRow("bf16 pi") << true << 0x4049 << 3.140625f;
        QTest::newRow("bf16 -123.5") << true << 0xC2F7 << -123.5f;
        QTest::newRow("bf16 1e-3ish") << true << 0x3A83 << 0.00099945068359375f;
    }
    void halfAndBf16Exact()
    {
        QFETCH(bool, bf16);
        QFETCH(int, bits);
        QFETCH(float, value);
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "h.safetensors";
        const uint16_t h = uint16_t(bits);
        const uint16_t data[2] = {h, h};
        SafetensorsWriter w;
        w.add("x", bf16 ? DType::BF16 : DType::F16, {2}, std::as_bytes(std::span(data)));
        w.write(path);
        const WeightSet ws = WeightSet::open(path);
        const std::vector<float> v = toFloatVector(ws.get("x"));
        QCOMPARE(v.size(), size_t(2));
        QCOMPARE(std::bit_cast<uint32_t>(v[0]), std::bit_cast<uint32_t>(value));
        QCOMPARE(std::bit_cast<uint32_t>(v[1]), std::bit_cast<uint32_t>(value));
        // And back: the value is representable, so conversion to the 16-bit type is exact.
        QCOMPARE(bf16 ? floatToBf16(value) : floatToHalf(value), h);
    }

    void toFloatRejectsIntegers()
    {
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "i.safetensors";
        const int32_t data[2] = {1, 2};
        SafetensorsWriter w;
        w.add("ids", DType::I32, {2}, std::as_bytes(std::span(data)));
        w.write(path);
        const WeightSet ws = WeightSet::open(path);
        const Error e = expectError([&] { toFloatVector(ws.get("ids")); });
        QCOMPARE(e.code(), ErrorCode::Shape);
        QVERIFY(std::string(e.what()).find("'ids'") != std::string::npos);
        QVERIFY(std::string(e.what()).find(path.string()) != std::string::npos);
    }

    void badFiles_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<ErrorCode>("code");
        QTest::addColumn<QString>("tensor"); // must appear in the message when non-empty
        QTest::addColumn<QString>("phrase"); // must appear in the message

        const auto row = [](const char *name, const std::string &bytes, ErrorCode code, const char *tensor,
                            const char *phrase) {
            QTest::newRow(name) << QByteArray(bytes.data(), qsizetype(bytes.size())) << code
                                << QString(tensor) << QString(phrase);
        };
        const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
        row("empty file", "", ErrorCode::Format, "", "too short");
        row("truncated length", std::string("\x10\x00\x00", 3), ErrorCode::Format, "", "too short");
        row("header length past end", rawFile(ok, 8, 4096), ErrorCode::Format, "", "past the end");
        row("header length huge", rawFile(ok, 8, UINT64_MAX - 1), ErrorCode::Format, "", "past the end");
        row("header not json", rawFile("{not json", 8), ErrorCode::Format, "", "not valid JSON");
        row("header truncated json", rawFile(ok.substr(0, ok.size() - 3), 8), ErrorCode::Format, "",
            "not valid JSON");
        row("header not object", rawFile("[1, 2]", 8), ErrorCode::Format, "", "not a JSON object");
        row("missing dtype", rawFile(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8), ErrorCode::Format,
            "a", "'dtype' is missing");
        row("missing shape", rawFile(R"({"w.b":{"dtype":"F32","data_offsets":[0,8]}})", 8), ErrorCode::Format,
            "w.b", "'shape' is missing");
        row("missing offsets", rawFile(R"({"a":{"dtype":"F32","shape":[2]}})", 8), ErrorCode::Format, "a",
            "'data_offsets' is missing");
        row("unknown dtype", rawFile(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", 8),
            ErrorCode::Format, "a", "unknown dtype 'F8_E4M3'");
        row("negative dim", rawFile(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
            ErrorCode::Format, "a", "negative");
        row("offsets begin after end",
            rawFile(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8), ErrorCode::Format, "a",
            "begin after they end");
        row("offsets negative", rawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8),
            ErrorCode::Format, "a", "data_offsets");
        row("offsets outside data", rawFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
            ErrorCode::Format, "a", "beyond the data section");
        row("byte count vs shape",
            rawFile(R"({"model.norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", 16),
            ErrorCode::Format, "model.norm.weight", "hold 12 bytes but F32 [4] needs 16");
        row("byte count vs dtype", rawFile(R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,16]}})", 16),
            ErrorCode::Format, "a", "F16 [4] needs 8");
        row("overlapping",
            rawFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                    R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                    24),
            ErrorCode::Format, "b", "overlap tensor 'a'");
        row("overlapping out of order",
            rawFile(R"({"z":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                    R"("y":{"dtype":"F32","shape":[1],"data_offsets":[16,20]},)"
                    R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                    20),
            ErrorCode::Format, "z", "overlap tensor 'x'");
        row("metadata not string",
            rawFile(R"({"__metadata__":{"format":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                    8),
            ErrorCode::Format, "", "'format' is not a string");
    }
    void badFiles()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(ErrorCode, code);
        QFETCH(QString, tensor);
        QFETCH(QString, phrase);
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "bad.safetensors";
        writeBytes(path, bytes.toStdString());
        const Error e = expectError([&] { SafetensorsFile::open(path); });
        const std::string msg = e.what();
        QCOMPARE(e.code(), code);
        QVERIFY2(msg.find(path.string()) != std::string::npos, msg.c_str());
        if (!tensor.isEmpty())
            QVERIFY2(msg.find("'" + tensor.toStdString() + "'") != std::string::npos, msg.c_str());
        QVERIFY2(msg.find(phrase.toStdString()) != std::string::npos, msg.c_str());
        QVERIFY2(msg.find('\n') == std::string::npos, msg.c_str());
    }

    void missingFileIsIo()
    {
        const Error e = expectError([] { SafetensorsFile::open("/nonexistent/kvwb/x.safetensors"); });
        QCOMPARE(e.code(), ErrorCode::Io);
        QVERIFY(std::string(e.what()).find("/nonexistent/kvwb/x.safetensors") != std::string::npos);
    }

    void shardedIndex()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        const float a[3] = {1, 2, 3}, b[2] = {4, 5}, c[1] = {6};
        SafetensorsWriter w1, w2;
        w1.addF32("model.a", {3}, a);
        w1.addF32("model.b", {2}, b);
        w2.addF32("lm_head.weight", {1, 1}, c);
        w1.write(dir / "model-00001-of-00002.safetensors");
        w2.write(dir / "model-00002-of-00002.safetensors");
        kvwbWriteIndex(dir, {{"model.a", "model-00001-of-00002.safetensors"},
                             {"model.b", "model-00001-of-00002.safetensors"},
                             {"lm_head.weight", "model-00002-of-00002.safetensors"}});
        const WeightSet ws = WeightSet::open(dir);
        QCOMPARE(ws.names(), (std::vector<std::string>{"lm_head.weight", "model.a", "model.b"}));
        QCOMPARE(ws.files().size(), size_t(2));
        QVERIFY(ws.contains("model.b"));
        QVERIFY(!ws.contains("model.c"));
        QCOMPARE(ws.totalBytes(), uint64_t(24));
        QCOMPARE(toFloatVector(ws.get("model.b")), (std::vector<float>{4, 5}));
        QCOMPARE(ws.get("lm_head.weight").file, dir / "model-00002-of-00002.safetensors");
        QCOMPARE(toFloatVector(ws.get("lm_head.weight")), (std::vector<float>{6}));
        // The index file path works as well as the directory.
        QCOMPARE(WeightSet::open(dir / "model.safetensors.index.json").names().size(), size_t(3));

        const Error missing = expectError([&] { ws.get("model.c"); });
        QCOMPARE(missing.code(), ErrorCode::Shape);
        QVERIFY(std::string(missing.what()).find("'model.c'") != std::string::npos);
        QVERIFY(std::string(missing.what()).find("model.safetensors.index.json") != std::string::npos);
    }

    // The Hugging Face hub cache: snapshots/REV/ holds symlinks to ../../blobs/SHA of the same
    // repository folder (models--ORG--NAME): accepted. A symlink to a blob of another repository, or
    // anywhere else, stays refused.
    void hubCacheSymlinks()
    {
        QTemporaryDir tmp;
        const fs::path repo = fs::path(tmp.path().toStdString()) / "models--org--tiny";
        const fs::path blobs = repo / "blobs", snap = repo / "snapshots" / "0123abcd";
        fs::create_directories(blobs);
        fs::create_directories(snap);
        const float a[2] = {1, 2}, b[1] = {3};
        SafetensorsWriter w1, w2;
        w1.addF32("model.a", {2}, a);
        w2.addF32("model.b", {1}, b);
        w1.write(blobs / "aaa111");
        w2.write(blobs / "bbb222");
        fs::create_symlink("../../blobs/aaa111", snap / "model-00001-of-00002.safetensors");
        fs::create_symlink("../../blobs/bbb222", snap / "model-00002-of-00002.safetensors");
        kvwbWriteIndex(blobs, {{"model.a", "model-00001-of-00002.safetensors"},
                               {"model.b", "model-00002-of-00002.safetensors"}});
        fs::rename(blobs / "model.safetensors.index.json", blobs / "ccc333");
        fs::create_symlink("../../blobs/ccc333", snap / "model.safetensors.index.json");
        const WeightSet ws = WeightSet::open(snap);
        QCOMPARE(toFloatVector(ws.get("model.b")), (std::vector<float>{3}));
        // another repository's blob, or a file beside the cache, is still outside the model
        const fs::path other = fs::path(tmp.path().toStdString()) / "models--org--other" / "blobs";
        fs::create_directories(other);
        w2.write(other / "ddd444");
        for (const fs::path &target :
             {fs::path("../../../models--org--other/blobs/ddd444"), fs::path("../../../x")}) {
            if (target.filename() == "x")
                w2.write(fs::path(tmp.path().toStdString()) / "x");
            fs::remove(snap / "model-00002-of-00002.safetensors");
            fs::create_symlink(target, snap / "model-00002-of-00002.safetensors");
            const Error e = expectError([&] { WeightSet::open(snap); });
            QVERIFY2(std::string(e.what()).find("is outside the model directory") != std::string::npos,
                     e.what());
        }
    }

    void shardedIndexFaults_data()
    {
        QTest::addColumn<QString>("tensor");
        QTest::addColumn<QString>("shard");
        QTest::addColumn<ErrorCode>("code");
        QTest::newRow("tensor not in shard") << "model.zzz"
                                             << "model-00001-of-00001.safetensors" << ErrorCode::Format;
        QTest::newRow("shard file missing") << "model.a"
                                            << "model-00009-of-00009.safetensors" << ErrorCode::Io;
    }
    void shardedIndexFaults()
    {
        QFETCH(QString, tensor);
        QFETCH(QString, shard);
        QFETCH(ErrorCode, code);
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        const float a[2] = {1, 2};
        SafetensorsWriter w;
        w.addF32("model.a", {2}, a);
        w.write(dir / "model-00001-of-00001.safetensors");
        kvwbWriteIndex(dir, {{tensor.toStdString(), shard.toStdString()}});
        const Error e = expectError([&] { WeightSet::open(dir); });
        const std::string msg = e.what();
        QCOMPARE(e.code(), code);
        QVERIFY2(msg.find("model.safetensors.index.json") != std::string::npos, msg.c_str());
        QVERIFY2(msg.find("'" + tensor.toStdString() + "'") != std::string::npos, msg.c_str());
        QVERIFY2(msg.find(shard.toStdString()) != std::string::npos, msg.c_str());
    }

    void indexNotJson()
    {
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        writeBytes(dir / "model.safetensors.index.json", "{\"weight_map\": ");
        const Error e = expectError([&] { WeightSet::open(dir); });
        QCOMPARE(e.code(), ErrorCode::Format);
        QVERIFY(std::string(e.what()).find("model.safetensors.index.json") != std::string::npos);
    }

    void writerUnwritableDirectory()
    {
        SafetensorsWriter w;
        const float a[1] = {1};
        w.addF32("a", {1}, a);
        const fs::path path = "/nonexistent-kvwb-dir/sub/model.safetensors";
        const Error e = expectError([&] { w.write(path); });
        QCOMPARE(e.code(), ErrorCode::Io);
        QVERIFY2(std::string(e.what()).find(path.string()) != std::string::npos, e.what());
    }

    void writerReplacesAtomically()
    {
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "m.safetensors";
        const float a[1] = {1}, b[2] = {2, 3};
        SafetensorsWriter w1, w2;
        w1.addF32("a", {1}, a);
        w2.addF32("b", {2}, b);
        w1.write(path);
        w2.write(path);
        const SafetensorsFile f = SafetensorsFile::open(path);
        QVERIFY(!f.find("a"));
        QVERIFY(f.find("b"));
        QVERIFY(!fs::exists(path.string() + ".tmp"));
    }

    void writerRejectsWrongByteCount()
    {
        SafetensorsWriter w;
        const float a[3] = {1, 2, 3};
        const Error e = expectError([&] { w.addF32("a", {2, 2}, a); });
        QCOMPARE(e.code(), ErrorCode::InvalidArgument);
    }

    void sha256Known()
    {
        QCOMPARE(sha256Hex(std::string_view("abc")),
                 std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
        QCOMPARE(sha256Hex(std::string_view("")),
                 std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
        QTemporaryDir tmp;
        const fs::path dir = tmp.path().toStdString();
        // Spans the 1 MiB chunk boundary so streaming is exercised.
        std::string big(3 * (1 << 20) + 17, 'x');
        for (size_t i = 0; i < big.size(); i += 4093)
            big[i] = char(i & 0x7f);
        writeBytes(dir / "a", big);
        writeBytes(dir / "b", "abc");
        QCOMPARE(sha256Files({dir / "a", dir / "b"}), sha256Hex(std::string_view(big + "abc")));
        const Error e = expectError([&] { sha256Files({dir / "missing"}); });
        QCOMPARE(e.code(), ErrorCode::Io);
        QVERIFY(std::string(e.what()).find((dir / "missing").string()) != std::string::npos);
    }

private:
    static void kvwbWriteIndex(const fs::path &dir,
                               const std::vector<std::pair<std::string, std::string>> &map)
    {
        std::string text = R"({"metadata": {"total_size": 0}, "weight_map": {)";
        for (size_t i = 0; i < map.size(); ++i)
            text += (i ? "," : "") + ("\"" + map[i].first + "\": \"" + map[i].second + "\"");
        text += "}}";
        writeBytes(dir / "model.safetensors.index.json", text);
    }
};

QTEST_GUILESS_MAIN(TestSafetensors)
#include "tst_safetensors.moc"
