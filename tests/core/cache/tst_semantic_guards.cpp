// Guards on semantic hits, on hand-built question pairs: each guard blocks the pairs it is for
// (negations and opposites, numbers, named entities, question words) and passes paraphrases; a guard
// that is off does not fire; the semantic tier does not serve a blocked candidate (nor count a use)
// and says which guard held it and whether the candidate's intent was the request's.
#include "core/cache/semantic_guards.h"
#include "core/cache/semantic_tier.h"

#include <QtTest>

using namespace kvwb::core;

namespace {
SemanticGuard blocked(const std::string &a, const std::string &b, SemanticGuards on = SemanticGuards::all())
{
    return checkGuards(a, b, on).blocked;
}
} // namespace

class TestSemanticGuards : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void negationAndPolarity()
    {
        QCOMPARE(blocked("Is aspirin safe for children?", "Is aspirin not safe for children?"),
                 SemanticGuard::Negation);
        QCOMPARE(blocked("Why doesn't my code compile?", "Why does my code compile?"),
                 SemanticGuard::Negation);
        QCOMPARE(blocked("Why doesnt my code compile?", "Why does my code compile?"),
                 SemanticGuard::Negation);
        QCOMPARE(blocked("Is it legal to record calls?", "Is it illegal to record calls?"),
                 SemanticGuard::Negation);
        QCOMPARE(blocked("Which metal is the most dense?", "Which metal is the least dense?"),
                 SemanticGuard::Negation);
        QCOMPARE(blocked("What happened before the war?", "What happened after the war?"),
                 SemanticGuard::Negation);
        // two negations in one, none in the other: the same polarity
        QCOMPARE(blocked("Is it not true that nobody came?", "Is it true that all came?"),
                 SemanticGuard::None);
        QCOMPARE(blocked("Is it not unusual?", "Is it not unusual at all?"), SemanticGuard::None);
        const auto d = checkGuards("Is X safe?", "Is X not safe?", SemanticGuards::all());
        QCOMPARE(d.detail, std::string("negation: 'not' in one question only"));
    }

    void numbers()
    {
        QCOMPARE(blocked("How long do I boil 3 eggs?", "How long do I boil 4 eggs?"), SemanticGuard::Number);
        QCOMPARE(blocked("What is 2 + 2?", "What is two plus two?"), SemanticGuard::None); // words as digits
        QCOMPARE(blocked("Population in 1,000 BC?", "Population in 1000 BC?"), SemanticGuard::None);
        QCOMPARE(blocked("What was the price in 2019?", "What was the price in 2020?"),
                 SemanticGuard::Number);
        QCOMPARE(checkGuards("3 eggs?", "4 eggs?", SemanticGuards::all()).detail,
                 std::string("number: 3 vs 4"));
    }

    void entities()
    {
        QCOMPARE(blocked("Who founded Apple?", "Who founded Google?"), SemanticGuard::Entity);
        QCOMPARE(blocked("Is the NFL bigger than the NBA?", "Is the NBA bigger than the NHL?"),
                 SemanticGuard::Entity);
        QCOMPARE(blocked("Who founded Apple?", "Who was the founder of Apple?"), SemanticGuard::None);
        // a capitalised first word is no name
        QCOMPARE(blocked("Tell me how to learn python", "Explain how to learn python"), SemanticGuard::None);
    }

    void questionWords()
    {
        QCOMPARE(blocked("Who wrote the Odyssey?", "When was the Odyssey written?"),
                 SemanticGuard::QuestionWord);
        QCOMPARE(blocked("How many people live in Paris?", "How much do people pay in Paris?"),
                 SemanticGuard::QuestionWord);
        QCOMPARE(blocked("How do I learn to swim?", "How can I learn swimming?"), SemanticGuard::None);
    }

    void paraphrasesPassAndOffGuardsDoNotFire()
    {
        QCOMPARE(blocked("How do I make my hair grow faster?", "How can I make my hair grow faster?"),
                 SemanticGuard::None);
        QCOMPARE(blocked("What is the best way to learn guitar?", "What's the best way to learn the guitar?"),
                 SemanticGuard::None);
        SemanticGuards onlyNumbers;
        onlyNumbers.number = true;
        QCOMPARE(blocked("Is X safe?", "Is X not safe?", onlyNumbers), SemanticGuard::None);
        QCOMPARE(blocked("Who founded Apple?", "Who founded Google?", SemanticGuards{}), SemanticGuard::None);
        QCOMPARE(blocked("", "", SemanticGuards::all()), SemanticGuard::None);
    }

    void names()
    {
        QCOMPARE(parseSemanticGuards("all"), std::optional(SemanticGuards::all()));
        QCOMPARE(parseSemanticGuards("none"), std::optional(SemanticGuards{}));
        const auto two = parseSemanticGuards("number,question-word");
        QVERIFY(two && two->number && two->questionWord && !two->negation && !two->entity);
        QCOMPARE(semanticGuardsName(*two), std::string("number,question-word"));
        QCOMPARE(semanticGuardsName(SemanticGuards::all()), std::string("all"));
        QVERIFY(!parseSemanticGuards("numbers"));
        QVERIFY(!parseSemanticGuards("number,"));
    }

    // The tier holds back a guarded candidate (no hit, no use counted) and notes why.
    void theTierDoesNotServeAGuardedCandidate()
    {
        LexicalEmbedder embedder;
        SemanticTier tier({}, embedder, 0.5);
        tier.setGuards(SemanticGuards::all());
        const std::vector<int> tokens{1, 2};
        const std::string sampling = "greedy", none;
        const auto request = [&](int64_t id, const std::string &text, const std::string &intent) {
            return TierRequest{TenantScope("t", "m"),
                               ModelRole::A,
                               id,
                               0,
                               text,
                               text,
                               tokens,
                               sampling,
                               intent,
                               none,
                               text,
                               8};
        };
        CachedResponse answer;
        answer.text = "yes";
        answer.intent = "safe";
        const std::string cachedText = "Is aspirin safe for children?",
                          asked = "Is aspirin not safe for children?";
        std::unique_ptr<KvPayload> kv;
        tier.insert(request(1, cachedText, "safe"), TierInsert{answer, kv});
        const auto near = tier.lookup(request(2, asked, "unsafe"));
        QVERIFY(!near.hit);
        QVERIFY(near.nearestSimilarity && *near.nearestSimilarity >= 0.5); // above the threshold
        QCOMPARE(near.guard, SemanticGuard::Negation);
        QCOMPARE(near.guardedSameIntent, 0); // a false hit prevented
        tier.setGuards({});
        const auto served = tier.lookup(request(3, asked, "unsafe"));
        QVERIFY(served.hit);
        QCOMPARE(served.guard, SemanticGuard::None);
    }
};

QTEST_APPLESS_MAIN(TestSemanticGuards)
#include "tst_semantic_guards.moc"
