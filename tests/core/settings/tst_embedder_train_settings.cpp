// The embedder training settings' table (core/settings/embedder_train_settings.h): unique flags and
// keys, each row reads what it writes, the bounds and their messages, and the defaults the command
// line has always had.
#include "core/settings/embedder_train_settings.h"
#include "core/util/error.h"
#include "tests/support/setting_message.h"

#include <QTest>

#include <set>

using namespace kvwb::core;

namespace {

std::string messageOf(const char *flag, const std::string &value)
{
    return kvwb::test::rowMessage(*findEmbedderTrainFlag(flag), value);
}

} // namespace

class TestEmbedderTrainSettings : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void rowsAreUniqueAndReadWhatTheyWrite()
    {
        EmbedderTrainSettings full;
        full.out = "/tmp/emb";
        full.wordnetDir = "/opt/wn";
        full.concepts = 300;
        full.holdOutEvery = 0;
        full.vocabSize = 512;
        full.hidden = 64;
        full.layers = 3;
        full.heads = 2;
        full.intermediate = 96;
        full.maxPositions = 32;
        full.steps = 7;
        full.batch = 8;
        full.lr = 0.25;
        full.warmup = 3;
        full.temperature = 0.5;
        full.evalPairs = 40;
        full.seed = uint64_t(1) << 40;
        full.pairs = "/data/pairs.tsv";
        full.init = "/models/enc";
        full.validationShare = 0.2;
        full.evalEvery = 50;
        full.patience = 2;
        full.margin = 0.3;
        full.resume = true;
        full.force = true;
        std::set<std::string> names, keys;
        for (const auto &f : embedderTrainFlags()) {
            QVERIFY2(names.insert(f.name).second, f.name);
            QVERIFY2(keys.insert(f.key()).second, f.name);
            EmbedderTrainSettings s;
            QVERIFY2(f.get(s) != f.get(full), f.name); // every field above differs from its default
            f.set(s, f.kind == SettingKind::Switch ? "" : f.get(full).at(0));
            QVERIFY2(f.get(s) == f.get(full), f.name);
        }
        QCOMPARE(names.size(), size_t(25));
        EmbedderTrainSettings s;
        for (const auto &f : embedderTrainFlags())
            f.set(s, f.kind == SettingKind::Switch ? "" : f.get(full).at(0));
        QVERIFY(s == full);
        QCOMPARE(s.out.string(), std::string("/tmp/emb"));
        QCOMPARE(s.seed, uint64_t(1) << 40);
    }

    void defaultsAndBounds()
    {
        const EmbedderTrainSettings d;
        QCOMPARE(d.wordnetDir.string(), std::string("/usr/share/wordnet"));
        QCOMPARE(d.concepts, size_t(1000));
        QCOMPARE(d.vocabSize, 4000);
        QCOMPARE(d.steps, 1500);
        QCOMPARE(d.lr, 1e-3);
        QCOMPARE(messageOf("hidden", "4097"), std::string("expects an integer in [8, 4096], got '4097'"));
        QCOMPARE(messageOf("concepts", "1"), std::string("expects an integer >= 2, got '1'"));
        // the seed stays within what the settings JSON reads back (a signed 64-bit integer)
        QCOMPARE(messageOf("seed", "-1"),
                 std::string("expects an integer in [0, 9223372036854775807], got '-1'"));
        QCOMPARE(messageOf("seed", "9223372036854775808"),
                 std::string("expects an integer in [0, 9223372036854775807], got '9223372036854775808'"));
        QCOMPARE(messageOf("seed", "9223372036854775807"), std::string("(accepted)"));
        QCOMPARE(messageOf("temperature", "0"), std::string("expects a number in [0.0001, 10], got '0'"));
        QCOMPARE(messageOf("lr", "nan"), std::string("expects a number in [0, 10], got 'nan'"));
        QCOMPARE(messageOf("eval-pairs", "10"), std::string("(accepted)"));
    }
};

QTEST_GUILESS_MAIN(TestEmbedderTrainSettings)
#include "tst_embedder_train_settings.moc"
