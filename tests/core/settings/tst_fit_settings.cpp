// The fit settings' table (core/settings/fit_settings.h): unique flags and keys, each row reads what
// it writes, topk's own default k before --k, lambda's "auto", and the calibration-token floor.
#include "core/settings/fit_settings.h"
#include "core/util/error.h"
#include "tests/support/setting_message.h"

#include <QTest>

#include <set>

using namespace kvwb::core;

namespace {

std::string messageOf(const char *flag, const std::string &value)
{
    return kvwb::test::rowMessage(*findFitFlag(flag), value);
}

} // namespace

class TestFitSettings : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void rowsAreUniqueAndReadWhatTheyWrite()
    {
        FitSettings full;
        full.experiment = "e.h5";
        full.selection = LayerSelection::All;
        full.k = 3;
        full.lambda = 0.5;
        full.perHead = true;
        full.family = ConverterFamily::Mlp;
        full.rank = 5;
        full.mlpHidden = 64;
        full.mlpEpochs = 4;
        full.mlpBatch = 32;
        full.learningRate = 0.01;
        full.patience = 2;
        full.budgetSeconds = 90;
        full.autoPrompts = 12;
        full.tokenFeatures = {2, true, 8};
        full.objective = FitObjective::Kl;
        full.klEpochs = 3;
        full.klLearningRate = 0.005;
        full.maxTrainTokens = 5000;
        full.name = "n";
        full.attentionPrompts = 8;
        full.attention = false;
        full.dryRun = true;
        full.replace = true;
        full.resume = true;
        full.validFraction = 0.2;
        full.testFraction = 0.25;
        full.seed = 7;
        std::set<std::string> names, keys;
        for (const auto &f : fitFlags()) {
            QVERIFY2(names.insert(f.name).second, f.name);
            QVERIFY2(keys.insert(f.key()).second, f.name);
            FitSettings s;
            s.selection = full.selection; // --select sets k's default: the k row is checked on its own
            f.set(s, f.kind == SettingKind::Switch ? "" : f.get(full).at(0));
            QVERIFY2(f.get(s) == f.get(full), f.name);
        }
        QCOMPARE(names.size(), size_t(28));
    }

    void defaultsThatDependOnOtherSettings()
    {
        FitSettings s;
        findFitFlag("select")->set(s, "topk");
        QCOMPARE(s.k, 8);
        findFitFlag("k")->set(s, "2");
        QCOMPARE(s.k, 2);
        findFitFlag("lambda")->set(s, "auto");
        QVERIFY(s.autoLambda);
        QCOMPARE(findFitFlag("lambda")->get(s).at(0), std::string("auto"));
        findFitFlag("lambda")->set(s, "0.5");
        QVERIFY(!s.autoLambda);
        QCOMPARE(s.lambda, 0.5);
        QCOMPARE(messageOf("max-train-tokens", "1"), std::string("expects an integer >= 2, got '1'"));
        QCOMPARE(messageOf("max-train-tokens", "0"), std::string("(accepted)"));
        QCOMPARE(messageOf("lambda", "-1"), std::string("expects a number in [0, 1000000], got '-1'"));
        QCOMPARE(messageOf("family", "cubic"),
                 std::string("expects auto, ridge, attn-ridge, low-rank or mlp, got 'cubic'"));
        QCOMPARE(messageOf("budget", "-1"), std::string("expects a number in [0, 1000000000], got '-1'"));
        QCOMPARE(messageOf("auto-prompts", "0"), std::string("expects an integer >= 1, got '0'"));
        QCOMPARE(messageOf("token-features", "window=9"),
                 std::string("expects none, all or a comma list of b, window[=N] (N 0-4) and offsets[=N] (N "
                             "2-64), got 'window=9'"));
        QCOMPARE(messageOf("token-features", "all"), std::string("(accepted)"));
        QCOMPARE(messageOf("objective", "mse"), std::string("expects kv or kl, got 'mse'"));
        QCOMPARE(FitSettings{}.objective, FitObjective::Kv); // opt-in: the KL objective loads and trains B
        QCOMPARE(messageOf("kl-epochs", "0"), std::string("expects an integer >= 1, got '0'"));
        QCOMPARE(FitSettings{}.family, ConverterFamily::Auto); // the default: the fit picks the family
        QCOMPARE(messageOf("family", "low-rank"), std::string("(accepted)"));
    }
};

QTEST_GUILESS_MAIN(TestFitSettings)
#include "tst_fit_settings.moc"
