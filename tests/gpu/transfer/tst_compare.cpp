// One prompt three ways (gpu/transfer/compare.h): with identity maps from a model to itself the transfer
// path is B's scratch path token for token (KL 0, top-1 1, no divergence, the gate passes, the
// converted prefix reused), the per-token pieces rebuild the decoded text, and prompts a transfer
// cannot serve are refused with the reason.
#include "core/tokenize/tokenizer.h"
#include "core/util/error.h"
#include "gpu/transfer/compare.h"
#include "tests/support/expect_error.h"
#include "tests/support/identity_map.h"
#include "tests/support/test_paths.h"

#include <QtTest>

#include <numeric>

using namespace kvwb;
namespace fs = std::filesystem;

namespace {

std::string joined(const std::vector<std::string> &pieces)
{
    return std::accumulate(pieces.begin(), pieces.end(), std::string());
}

} // namespace

class TestCompare : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void identityTransferMatchesScratch()
    {
        const fs::path dir = test::sourceDir() / "projects/demo/models/a";
        auto a = gpu::Model::load(dir, {});
        auto b = gpu::Model::load(dir, {});
        const auto tok = core::loadTokenizer(dir / "tokenizer.model");
        const auto &c = b->config();
        core::ConverterRecord set = test::identityConverter(c);
        const auto conv = gpu::Converter::create(set, *a, *b);
        gpu::CompareOptions o;
        o.maxTokens = 12;
        const std::string prompt = "Question: what is a dog?\nAnswer:";
        const auto ids = gpu::comparablePrompt(prompt, *a, *tok, *b, *tok, o.maxTokens);
        QCOMPARE(ids, tok->encode(prompt, true));
        const auto out = gpu::compareTransfer(*a, *tok, *b, *tok, conv, ids, o);
        const auto &s = out.sample;
        QVERIFY(!s.scratch.ids.empty());
        QCOMPARE(s.transfer.ids, s.scratch.ids);
        QCOMPARE(s.a.ids, s.scratch.ids); // A is B here
        QCOMPARE(s.firstDivergence, -1);
        QCOMPARE(s.transfer.kl.size(), s.scratch.ids.size());
        for (double kl : s.transfer.kl)
            QVERIFY2(kl < 1e-4, qPrintable(QString::number(kl)));
        QCOMPARE(s.top1, 1.0);
        QVERIFY(s.klNoPrefix > 0.01); // the floor is worse than a perfect transfer
        QCOMPARE(s.rougeL, 1.0);
        QVERIFY(s.gatePassed);
        QCOMPARE(s.gateSignal, std::string("tail_kl"));
        QCOMPARE(s.transfer.reusedTokens, int(ids.size()) - 1);
        QCOMPARE(s.scratch.reusedTokens, 0);
        QCOMPARE(s.scratch.promptTokens, int(ids.size()));
        for (const auto *p : {&s.a, &s.scratch, &s.transfer}) {
            QCOMPARE(p->pieces.size(), p->ids.size());
            QCOMPARE(p->logprobs.size(), p->ids.size());
            QCOMPARE(joined(p->pieces), p->text);
            for (float lp : p->logprobs)
                QVERIFY(lp <= 0.0f);
            QVERIFY(p->ttftMs > 0);
        }
        // the transfer's TTFT is its whole cost: A's prefill + conversion + B's first step
        QVERIFY(s.transfer.ttftMs >= s.sourcePrefillMs + s.convertMs);
        QVERIFY(out.ttftCachedMs <= s.transfer.ttftMs);
    }

    void piecesRebuildTheText()
    {
        const fs::path dir = test::sourceDir() / "projects/demo/models/a";
        const auto tok = core::loadTokenizer(dir / "tokenizer.model");
        const std::string text = "A dog is a domesticated canine; dogs bark.\nCats: no.";
        const auto ids = tok->encode(text, false);
        const auto pieces = gpu::tokenPieces(*tok, ids);
        QCOMPARE(pieces.size(), ids.size());
        QCOMPARE(joined(pieces), tok->decode(ids, true));
    }

    void promptsATransferCannotServeAreRefused()
    {
        const fs::path dir = test::sourceDir() / "projects/demo/models/a";
        auto a = gpu::Model::load(dir, {});
        const auto tok = core::loadTokenizer(dir / "tokenizer.model");
        auto e = test::expectError([&] { gpu::comparablePrompt("", *a, *tok, *a, *tok, 8); });
        QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
        QVERIFY2(std::string(e.what()).find("at least 3") != std::string::npos, e.what());
        std::string longPrompt;
        for (int i = 0; i < 400; ++i)
            longPrompt += "dog ";
        e = test::expectError([&] { gpu::comparablePrompt(longPrompt, *a, *tok, *a, *tok, 8); });
        QCOMPARE(e.code(), core::ErrorCode::InvalidArgument);
        QVERIFY2(std::string(e.what()).find("room for 8 more") != std::string::npos, e.what());
    }
};

QTEST_GUILESS_MAIN(TestCompare)
#include "tst_compare.moc"
