// The knowledge graph file: nodes and modules round trip bit for bit (modules' KV re-laid between
// the file's token-major rows and the engine's head-major layout); the graph alone reads without
// the modules' floats; modules that disagree with their geometry or name absent nodes are refused
// before anything is written; a file of another kind is refused naming its schema.
#include "core/store/converter_store.h"
#include "core/store/knowledge_store.h"
#include "core/util/error.h"
#include "tests/support/expect_error.h"

#include <QTemporaryDir>
#include <QtTest>

#include <hdf5.h>

#include <fstream>

using namespace kvwb;
using namespace kvwb::core;
namespace fs = std::filesystem;

namespace {

KnowledgeFile sample()
{
    KnowledgeFile k;
    k.description = "two concepts";
    for (int i = 0; i < 2; ++i) {
        ConceptNode n;
        n.id = "c" + std::to_string(i);
        n.name = i == 0 ? "car" : "bus";
        n.synonyms = {i == 0 ? "auto" : "autobus"};
        n.questions = {"What is a " + n.name + "?"};
        n.related = {{RelationKind::Sibling, i == 0 ? "c1" : "c0"}};
        n.knowledge = "Knowledge of " + n.name + ", \xc3\xa9t\xc3\xa9.";
        n.source = "test";
        n.confidence = 0.25 * (i + 1);
        n.verifiedMs = 1000 + i;
        n.reuseCount = 3 * i;
        k.graph.add(n);
    }
    KnowledgeModules m;
    m.modelFingerprint = "abc";
    m.modelPath = "/models/b";
    m.layers = 2;
    m.kvHeads = 2;
    m.headDim = 3;
    m.prefixIds = {1, 7};
    float x = 0.5f;
    for (int i = 0; i < 2; ++i) {
        KnowledgeModule mod;
        mod.nodeId = "c" + std::to_string(1 - i); // any order
        mod.ids = std::vector<int>(size_t(3 + i), 40 + i);
        mod.builtMs = 500 + i;
        mod.computeMs = 1.5 + i;
        for (int l = 0; l < 2; ++l) {
            HeadMajorKv kv;
            for (size_t j = 0; j < 2 * mod.ids.size() * 3; ++j) {
                kv.keys.push_back(x += 0.25f);
                kv.values.push_back(-x);
            }
            mod.layers.push_back(kv);
        }
        m.modules.push_back(mod);
    }
    k.modules = m;
    return k;
}

} // namespace

class TestKnowledgeStore : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void roundTrip()
    {
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "g.h5";
        const KnowledgeFile k = sample();
        saveKnowledge(path, k);
        QVERIFY(!fs::exists(path.string() + ".tmp"));
        const KnowledgeFile got = loadKnowledge(path);
        QCOMPARE(got.description, k.description);
        QVERIFY(!got.createdUtc.empty());
        QCOMPARE(got.graph.nodes(), k.graph.nodes());
        QVERIFY(got.modules.has_value());
        const auto &a = *got.modules, &b = *k.modules;
        QCOMPARE(a.modelFingerprint, b.modelFingerprint);
        QCOMPARE(a.modelPath, b.modelPath);
        QCOMPARE(a.prefixIds, b.prefixIds);
        QCOMPARE(a.modules.size(), size_t(2));
        for (size_t i = 0; i < 2; ++i) {
            QCOMPARE(a.modules[i].nodeId, b.modules[i].nodeId);
            QCOMPARE(a.modules[i].ids, b.modules[i].ids);
            QCOMPARE(a.modules[i].builtMs, b.modules[i].builtMs);
            QCOMPARE(a.modules[i].computeMs, b.modules[i].computeMs);
            for (size_t l = 0; l < 2; ++l) {
                QVERIFY(a.modules[i].layers[l].keys == b.modules[i].layers[l].keys);
                QVERIFY(a.modules[i].layers[l].values == b.modules[i].layers[l].values);
            }
        }
        QCOMPARE(a.find("c1")->ids.size(), size_t(3));
        const KnowledgeFile lean = loadKnowledge(path, false);
        QCOMPARE(lean.modules->modules[1].ids, b.modules[1].ids);
        QVERIFY(lean.modules->modules[1].layers.empty());

        KnowledgeFile graphOnly = k;
        graphOnly.modules.reset();
        saveKnowledge(path, graphOnly);
        QVERIFY(!loadKnowledge(path).modules.has_value());
    }

    void badModulesAreRefusedBeforeWriting()
    {
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "g.h5";
        KnowledgeFile k = sample();
        k.modules->modules[0].nodeId = "c7";
        auto e = test::expectError([&] { saveKnowledge(path, k); });
        QVERIFY2(QString(e.what()).contains("module of 'c7': no such node"), e.what());
        k = sample();
        k.modules->modules[1].layers[1].values.pop_back();
        e = test::expectError([&] { saveKnowledge(path, k); });
        QVERIFY2(QString(e.what()).contains("module of 'c0' layer 1 holds 24/23 floats, expected 24"),
                 e.what());
        k = sample();
        k.modules->modules[1].nodeId = "c1";
        e = test::expectError([&] { saveKnowledge(path, k); });
        QVERIFY2(QString(e.what()).contains("is there twice"), e.what());
        QVERIFY(!fs::exists(path));
    }

    // A copy cut short is refused (its missing bytes used to read as zeros and serve hits), and a
    // module whose stored floats changed fails its CRC-32, naming the node.
    void damagedFilesAreRefused()
    {
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "g.h5";
        saveKnowledge(path, sample());
        std::string bytes;
        {
            std::ifstream in(path, std::ios::binary);
            bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        const fs::path cut = fs::path(tmp.path().toStdString()) / "cut.h5";
        {
            std::ofstream out(cut, std::ios::binary);
            out.write(bytes.data(), std::streamsize(bytes.size() * 9 / 10));
        }
        auto e = test::expectError([&] { loadKnowledge(cut); });
        QCOMPARE(e.code(), ErrorCode::Format);
        QVERIFY2(QString(e.what()).contains("cut.h5: cannot open as HDF5") &&
                     QString(e.what()).contains("truncated"),
                 e.what());

        // the first key of the first module in the file (node c1, layer 0) is 0.75f
        const float first = 0.75f;
        const size_t at = bytes.find(std::string(reinterpret_cast<const char *>(&first), sizeof first));
        QVERIFY(at != std::string::npos);
        bytes[at] = char(bytes[at] ^ 1);
        const fs::path flipped = fs::path(tmp.path().toStdString()) / "flipped.h5";
        {
            std::ofstream out(flipped, std::ios::binary);
            out.write(bytes.data(), std::streamsize(bytes.size()));
        }
        e = test::expectError([&] { loadKnowledge(flipped); });
        QCOMPARE(e.code(), ErrorCode::Format);
        QVERIFY2(QString(e.what()).contains("/modules/layer_000/keys of node 'c1' fail their CRC-32"),
                 e.what());
    }

    // An offset past the end of ids is refused before it slices anything (a fuzzed file once made the
    // reader copy 2^33 tokens).
    void moduleOffsetsPastTheEndAreRefused()
    {
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "g.h5";
        saveKnowledge(path, sample()); // modules of 3 and 4 tokens: offsets {0, 3, 7}
        {
            const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
            QVERIFY(f >= 0);
            const hid_t d = H5Dopen2(f, "/modules/offsets", H5P_DEFAULT);
            QVERIFY(d >= 0);
            const int64_t bad[3] = {0, int64_t(1) << 33, 7};
            QVERIFY(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, bad) >= 0);
            H5Dclose(d);
            H5Fclose(f);
        }
        const auto e = test::expectError([&] { loadKnowledge(path); });
        QCOMPARE(e.code(), ErrorCode::Format);
        QVERIFY2(QString(e.what()).contains(
                     "/modules/offsets entry 1 (8589934592) is past the end of ids (7 tokens)"),
                 e.what());
    }

    void otherFilesAreRefused()
    {
        QTemporaryDir tmp;
        const fs::path path = fs::path(tmp.path().toStdString()) / "layer.h5";
        LayerCheckpoint c; // an HDF5 file of another kind
        c.layer.targetLayer = 0;
        c.layer.sourceLayers = {0};
        c.layer.keys = c.layer.values = {identityMap(2)};
        c.fitKey = "{}";
        c.statsJson = "{}";
        saveLayerCheckpoint(path, c);
        auto e = test::expectError([&] { loadKnowledge(path); });
        QCOMPARE(e.code(), ErrorCode::Format);
        QVERIFY2(QString(e.what()).contains("is 'kvwb-layer-checkpoint/1': not a knowledge graph file"),
                 e.what());
        e = test::expectError([&] { loadKnowledge(fs::path(tmp.path().toStdString()) / "absent.h5"); });
        QVERIFY2(QString(e.what()).contains("absent.h5"), e.what());
    }
};

QTEST_GUILESS_MAIN(TestKnowledgeStore)
#include "tst_knowledge_store.moc"
