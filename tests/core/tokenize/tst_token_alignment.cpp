// Token alignment between two tokenisations of one text (core/tokenize/token_alignment.h): exact
// answers on hand-built spans (merges across words, a character split into byte-fallback tokens,
// special tokens, text one side dropped) under all three policies, and on real tokenizers: a
// byte-per-token tokenizer.json against a SentencePiece model with byte fallback trained here.
#include "core/model/random_model.h"
#include "core/tokenize/bpe_tokenizer.h"
#include "core/tokenize/token_alignment.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/error.h"

#include "tests/support/test_paths.h"

#include <QTemporaryDir>
#include <QtTest>

#include <sentencepiece_trainer.h>

using kvwb::core::AlignPolicy;
using kvwb::core::AlignSide;
using kvwb::core::alignTokens;

Q_DECLARE_METATYPE(AlignSide)
Q_DECLARE_METATYPE(std::vector<int32_t>)

namespace {

// "0-0* 0-5 5-11": one span per token, "*" marking a special token.
AlignSide side(const QString &spec)
{
    AlignSide s;
    for (const QString &part : spec.split(' ', Qt::SkipEmptyParts)) {
        QString p = part;
        const bool special = p.endsWith('*');
        if (special)
            p.chop(1);
        const auto be = p.split('-');
        s.spans.push_back({be[0].toInt(), be[1].toInt()});
        s.special.push_back(special ? 1 : 0);
    }
    return s;
}

} // namespace

class TestTokenAlignment : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void policies_data()
    {
        QTest::addColumn<AlignSide>("a");
        QTest::addColumn<AlignSide>("b");
        QTest::addColumn<std::vector<int32_t>>("first");
        QTest::addColumn<std::vector<int32_t>>("last");
        QTest::addColumn<std::vector<int32_t>>("longest");
        using V = std::vector<int32_t>;
        // "Hello world": B merged across the words, A did not; BOS to BOS
        QTest::newRow("b merges across words")
            << side("0-0* 0-5 5-11") << side("0-0* 0-11") << V{0, 1} << V{0, 2} << V{0, 2};
        // the other way round: both B tokens inside A's one token
        QTest::newRow("a merges across words")
            << side("0-11") << side("0-5 5-11") << V{0, 0} << V{0, 0} << V{0, 0};
        // "abcde": A as a | bcd | e, B as one token: the three policies differ
        QTest::newRow("policies differ") << side("0-1 1-4 4-5") << side("0-5") << V{0} << V{2} << V{1};
        // "é x": B spells é as its two byte-fallback tokens, A has the character
        QTest::newRow("byte fallback in b")
            << side("0-2 2-4") << side("0-1 1-2 2-4") << V{0, 0, 1} << V{0, 0, 1} << V{0, 0, 1};
        // "hé!": A spells é as bytes; B's "hé" overlaps h and both bytes (equal overlaps: the later)
        QTest::newRow("byte fallback in a")
            << side("0-1 1-2 2-3 3-4") << side("0-3 3-4") << V{0, 3} << V{2, 3} << V{2, 3};
        // B's prepended space token (empty, not special) takes the A token at the text's start
        QTest::newRow("synthetic space at start")
            << side("0-0* 0-2") << side("0-0* 0-0 0-2") << V{0, 1, 1} << V{0, 1, 1} << V{0, 1, 1};
        // an empty token inside the text takes what A has read up to it
        QTest::newRow("empty inside")
            << side("0-1 1-4") << side("0-2 2-2 2-4") << V{0, 1, 1} << V{1, 1, 1} << V{1, 1, 1};
        // B's EOS finds no second special in A: A's last token
        QTest::newRow("eos without partner")
            << side("0-0* 0-2") << side("0-0* 0-2 2-2*") << V{0, 1, 1} << V{0, 1, 1} << V{0, 1, 1};
        // B's BOS with no BOS in A: A's first token
        QTest::newRow("bos without partner")
            << side("0-2 2-3") << side("0-0* 0-3") << V{0, 0} << V{0, 1} << V{0, 0};
        // A dropped "cd" (a normaliser): B's "cd" takes the last A token starting before its end
        QTest::newRow("text a dropped")
            << side("0-2 4-6") << side("0-2 2-4 4-6") << V{0, 0, 1} << V{0, 0, 1} << V{0, 0, 1};
        QTest::newRow("empty b") << side("0-1") << side("") << V{} << V{} << V{};
    }

    void policies()
    {
        QFETCH(AlignSide, a);
        QFETCH(AlignSide, b);
        QFETCH(std::vector<int32_t>, first);
        QFETCH(std::vector<int32_t>, last);
        QFETCH(std::vector<int32_t>, longest);
        QCOMPARE(alignTokens(a, b, AlignPolicy::First), first);
        QCOMPARE(alignTokens(a, b, AlignPolicy::Last), last);
        QCOMPARE(alignTokens(a, b, AlignPolicy::Longest), longest);
        QCOMPARE(alignTokens(a, b), last); // the default
    }

    void identicalTokenisation()
    {
        const AlignSide s = side("0-0* 0-3 3-4 4-9 9-9*");
        QCOMPARE(alignTokens(s, s, AlignPolicy::First), (std::vector<int32_t>{0, 1, 2, 3, 4}));
        QCOMPARE(alignTokens(s, s, AlignPolicy::Last), (std::vector<int32_t>{0, 1, 2, 3, 4}));
        QCOMPARE(alignTokens(s, s, AlignPolicy::Longest), (std::vector<int32_t>{0, 1, 2, 3, 4}));
    }

    void badInput()
    {
        try {
            alignTokens(side(""), side("0-1"));
            QFAIL("no error");
        } catch (const kvwb::core::Error &e) {
            QCOMPARE(int(e.code()), int(kvwb::core::ErrorCode::InvalidArgument));
            QVERIFY2(QString(e.what()).contains("model a has no tokens"), e.what());
        }
        AlignSide bad = side("0-1 1-2");
        bad.special.pop_back();
        try {
            alignTokens(bad, side("0-1"));
            QFAIL("no error");
        } catch (const kvwb::core::Error &e) {
            QCOMPARE(int(e.code()), int(kvwb::core::ErrorCode::InvalidArgument));
        }
    }

    void policyNames()
    {
        for (AlignPolicy p : {AlignPolicy::First, AlignPolicy::Last, AlignPolicy::Longest})
            QCOMPARE(kvwb::core::parseAlignPolicy(kvwb::core::alignPolicyName(p)), std::optional(p));
        QCOMPARE(kvwb::core::parseAlignPolicy("middle"), std::nullopt);
    }

    void realTokenizers()
    {
        // A: one token per byte after BOS, so A's token covering byte k is k + 1. B: SentencePiece
        // with byte fallback (merged words, the dummy-prefix ▁, é and € as byte pieces).
        QTemporaryDir dir;
        const std::filesystem::path root = dir.path().toStdString();
        const auto bytes =
            kvwb::core::BpeTokenizer::fromJsonText(kvwb::core::byteLevelTokenizerJson(), "bytes");
        std::string corpus;
        for (int i = 0; i < 200; ++i)
            corpus += "the quick brown fox jumps over the lazy dog near the river stone\n";
        kvwb::test::writeFile(root / "corpus.txt", corpus);
        const auto status = sentencepiece::SentencePieceTrainer::Train(
            "--input=" + (root / "corpus.txt").string() + " --model_prefix=" + (root / "sp").string() +
            " --vocab_size=300 --model_type=bpe --character_coverage=1.0 --byte_fallback=true"
            " --hard_vocab_limit=false");
        QVERIFY2(status.ok(), status.ToString().c_str());
        const auto sp = kvwb::core::loadTokenizer(root / "sp.model");
        const std::string text = "the quick fox \xC3\xA9 jumps \xE2\x82\xAC over";
        const auto ea = bytes->encodeWithOffsets(text, true);
        const auto eb = sp->encodeWithOffsets(text, true);
        QCOMPARE(int(ea.ids.size()), int(text.size()) + 1);
        QVERIFY(eb.ids.size() < ea.ids.size());
        const auto sa = kvwb::core::alignSide(ea, *bytes), sb = kvwb::core::alignSide(eb, *sp);
        const auto last = alignTokens(sa, sb, AlignPolicy::Last);
        const auto first = alignTokens(sa, sb, AlignPolicy::First);
        QCOMPARE(last.front(), 0); // BOS
        QCOMPARE(first.front(), 0);
        for (size_t t = 1; t < eb.ids.size(); ++t) {
            const auto s = eb.spans[t];
            if (s.empty())
                continue;
            QCOMPARE(last[t], s.end);        // the byte token of B's last byte
            QCOMPARE(first[t], s.begin + 1); // the byte token of B's first byte
        }
        // the reverse direction: every byte token of A to the B token covering it
        const auto back = alignTokens(sb, sa, AlignPolicy::Last);
        QCOMPARE(back.front(), 0);
        for (size_t k = 1; k < ea.ids.size(); ++k) {
            const auto s = eb.spans[size_t(back[k])];
            QVERIFY(s.begin <= int32_t(k - 1) && int32_t(k - 1) < s.end);
        }
    }
};

QTEST_APPLESS_MAIN(TestTokenAlignment)
#include "tst_token_alignment.moc"
