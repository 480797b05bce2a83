// The semantic tier's verifier (core/cache/semantic_verifier.h) with a hand-built verifier: a pass
// serves, a score under the threshold does not, a NaN score and a throwing verifier fail closed (not
// served, the error said); a guarded candidate is not verified unless the verifier may overrule the
// guards, and then serves on a pass; the same under a per-entry error bound; the ledger summary
// counts the verdicts and keeps an overruled guard out of its false-hits-prevented count.
#include "core/cache/semantic_tier.h"
#include "core/cache/semantic_verifier.h"
#include "core/ledger/replay_ledger.h"
#include "core/util/error.h"

#include <QtTest>

#include <cmath>
#include <map>
#include <stdexcept>

using namespace kvwb::core;

namespace {

// Scores by the request's text: a fixed table; "throw" throws.
class TableVerifier : public PairVerifier
{
public:
    std::map<std::string, double> scores;
    int calls = 0;
    double score(const std::string &, const std::string &request) override
    {
        ++calls;
        if (request.find("throw") != std::string::npos)
            throw std::runtime_error("the model failed");
        const auto it = scores.find(request);
        return it == scores.end() ? 0.0 : it->second;
    }
    std::string name() const override { return "table"; }
};

struct Fixture
{
    LexicalEmbedder embedder;
    SemanticTier tier{{}, embedder, 0.3};
    const std::vector<int> tokens{1, 2};
    const std::string sampling = "greedy", none;
    std::vector<std::string> texts; // kept alive: TierRequest holds references

    TierRequest request(int64_t id, const std::string &text, const std::string &intent)
    {
        texts.push_back(text);
        texts.push_back(intent);
        const std::string &t = texts[texts.size() - 2];
        const std::string &i = texts.back();
        return TierRequest{TenantScope("t", "m"), ModelRole::A, id, 0, t, t, tokens, sampling, i, none, t, 8};
    }

    Fixture()
    {
        texts.reserve(64);
        CachedResponse answer;
        answer.text = "yes";
        answer.intent = "safe";
        std::unique_ptr<KvPayload> kv;
        tier.insert(request(1, "Is aspirin safe for young children?", "safe"), TierInsert{answer, kv});
    }
};

} // namespace

class TestSemanticVerifier : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void verifyJudgesAndFailsClosed()
    {
        TableVerifier v;
        v.scores = {{"ok", 0.8}, {"low", 0.2}, {"nan", std::nan("")}, {"edge", 0.5}};
        const VerifierSettings s{&v, 0.5, false};
        QCOMPARE(verify(s, "a", "ok").verdict, VerifierVerdict::Pass);
        QCOMPARE(verify(s, "a", "ok").score, 0.8);
        QCOMPARE(verify(s, "a", "edge").verdict, VerifierVerdict::Pass); // >= the threshold
        QCOMPARE(verify(s, "a", "low").verdict, VerifierVerdict::Reject);
        const auto nan = verify(s, "a", "nan");
        QCOMPARE(nan.verdict, VerifierVerdict::Error);
        QCOMPARE(nan.score, -1.0);
        QCOMPARE(nan.error, std::string("the verifier's score is not a number"));
        const auto thrown = verify(s, "a", "throw");
        QCOMPARE(thrown.verdict, VerifierVerdict::Error);
        QCOMPARE(thrown.error, std::string("the model failed"));
        QCOMPARE(verify(VerifierSettings{}, "a", "ok").verdict, VerifierVerdict::None);
        QCOMPARE(verifierVerdictName(VerifierVerdict::Reject), std::string("reject"));
    }

    void theTierServesOnlyWhatTheVerifierPasses()
    {
        Fixture f;
        TableVerifier v;
        const std::string same = "Is aspirin safe for young kids?";
        v.scores = {{same, 0.9}};
        f.tier.setVerifier({&v, 0.5, false});
        const auto pass = f.tier.lookup(f.request(2, same, "safe"));
        QVERIFY(pass.hit);
        QCOMPARE(pass.verifier, VerifierVerdict::Pass);
        QCOMPARE(pass.verifierScore, 0.9);
        v.scores[same] = 0.1;
        const auto reject = f.tier.lookup(f.request(3, same, "safe"));
        QVERIFY(!reject.hit);
        QCOMPARE(reject.verifier, VerifierVerdict::Reject);
        v.scores[same] = std::nan("");
        const auto nan = f.tier.lookup(f.request(4, same, "safe"));
        QVERIFY(!nan.hit);
        QCOMPARE(nan.verifier, VerifierVerdict::Error);
        QCOMPARE(nan.warnings.size(), size_t(1));
        QVERIFY(QString::fromStdString(nan.warnings[0]).contains("verifier table"));
        const auto thrown = f.tier.lookup(f.request(5, "Is aspirin safe for young children? throw", "safe"));
        QVERIFY(!thrown.hit);
        QCOMPARE(thrown.verifier, VerifierVerdict::Error);
        // below the similarity threshold the verifier is not asked
        const int before = v.calls;
        const auto far = f.tier.lookup(f.request(6, "Who painted the Mona Lisa?", "art"));
        QVERIFY(!far.hit);
        QCOMPARE(far.verifier, VerifierVerdict::None);
        QCOMPARE(v.calls, before);
        // a NaN threshold is refused
        bool refused = false;
        try {
            f.tier.setVerifier({&v, std::nan(""), false});
        } catch (const Error &e) {
            refused = e.code() == ErrorCode::InvalidArgument;
        }
        QVERIFY(refused);
    }

    void guardsAndTheirOverrule()
    {
        Fixture f;
        TableVerifier v;
        const std::string negated = "Is aspirin not safe for young children?";
        v.scores = {{negated, 0.95}};
        f.tier.setGuards(SemanticGuards::all());
        f.tier.setVerifier({&v, 0.5, false});
        const auto held = f.tier.lookup(f.request(2, negated, "unsafe"));
        QVERIFY(!held.hit);
        QCOMPARE(held.guard, SemanticGuard::Negation);
        QCOMPARE(held.verifier, VerifierVerdict::None); // not asked: the guard decided
        QCOMPARE(v.calls, 0);
        f.tier.setVerifier({&v, 0.5, true});
        const auto overruled = f.tier.lookup(f.request(3, negated, "unsafe"));
        QVERIFY(overruled.hit);
        QCOMPARE(overruled.guard, SemanticGuard::Negation);
        QCOMPARE(overruled.verifier, VerifierVerdict::Pass);
        v.scores[negated] = 0.1;
        const auto kept = f.tier.lookup(f.request(4, negated, "unsafe"));
        QVERIFY(!kept.hit);
        QCOMPARE(kept.verifier, VerifierVerdict::Reject);
    }

    void underAnErrorBound()
    {
        Fixture f;
        TableVerifier v;
        const std::string same = "Is aspirin safe for young kids?";
        v.scores = {{same, 0.1}};
        EntryBoundOptions bound;
        bound.errorBound = 0.5;
        f.tier.setErrorBound(bound);
        f.tier.setVerifier({&v, 0.5, false});
        const auto r = f.tier.lookup(f.request(2, same, "safe"));
        QVERIFY(!r.hit);
        QCOMPARE(r.verifier, VerifierVerdict::Reject);
        QCOMPARE(r.semanticDecision, SemanticDecision::None); // computed, not explored
    }

    void theSummaryCountsVerdicts()
    {
        std::vector<LedgerRow> rows(5);
        for (size_t i = 0; i < rows.size(); ++i) {
            rows[i].requestId = int64_t(i);
            rows[i].intent = "i";
        }
        rows[0].verifier = VerifierVerdict::Pass;
        rows[0].verifierMs = 2;
        rows[0].answeredBy = TierKind::Semantic;
        rows[1].verifier = VerifierVerdict::Reject;
        rows[1].verifierMs = 4;
        rows[1].verifiedSameIntent = 0;
        rows[2].verifier = VerifierVerdict::Error;
        rows[2].verifiedSameIntent = 1;
        rows[3].verifier = VerifierVerdict::Pass; // overruled a guard
        rows[3].semanticGuard = SemanticGuard::Number;
        rows[3].guardedSameIntent = 0;
        rows[3].answeredBy = TierKind::Semantic;
        rows[4].semanticGuard = SemanticGuard::Entity;
        rows[4].guardedSameIntent = 0;
        const auto s = summarize(rows);
        QCOMPARE(s.verified, int64_t(4));
        QCOMPARE(s.verifierPassed, int64_t(2));
        QCOMPARE(s.verifierRejected, int64_t(1));
        QCOMPARE(s.verifierErrors, int64_t(1));
        QCOMPARE(s.verifierPrevented, int64_t(1));
        QCOMPARE(s.verifierLost, int64_t(1));
        QCOMPARE(s.verifierMeanMs, 1.5);
        QCOMPARE(s.guarded, int64_t(2));
        QCOMPARE(s.guardOverruled, int64_t(1));
        QCOMPARE(s.guardPrevented, int64_t(1)); // the overruled one served: nothing prevented
    }
};

QTEST_APPLESS_MAIN(TestSemanticVerifier)
#include "tst_semantic_verifier.moc"
