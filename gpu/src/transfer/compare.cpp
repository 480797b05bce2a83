#include "gpu/transfer/compare.h"

#include "core/metrics/text_metrics.h"
#include "core/util/clock.h"
#include "core/util/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace kvwb::gpu {

using core::Clock;
using core::msSince;

std::vector<int> comparablePrompt(const std::string &prompt, const Model &a, const core::Tokenizer &tokA,
                                  const Model &b, const core::Tokenizer &tokB, int maxTokens)
{
    const auto ids = tokB.encode(prompt, true);
    if (tokA.encode(prompt, true) != ids)
        throw core::Error(core::ErrorCode::InvalidArgument,
                          "A and B tokenise the prompt differently: a transfer needs the same tokens");
    const int limit = std::min(a.contextLimit(), b.contextLimit());
    if (ids.size() < 3 || int(ids.size()) + maxTokens > limit)
        throw core::Error(
            core::ErrorCode::InvalidArgument,
            fmt::format("the prompt has {} tokens: a transfer needs at least 3, and room for {} "
                        "more in the context of {}",
                        ids.size(), maxTokens, limit));
    return ids;
}

TokenPairing comparablePair(const std::string &prompt, const Model &a, const core::Tokenizer &tokA,
                            const Model &b, const core::Tokenizer &tokB, int maxTokens,
                            core::AlignPolicy policy)
{
    TokenPairing p = pairTokens(prompt, tokA, tokB, policy);
    const int limit = std::min(a.contextLimit(), b.contextLimit());
    const size_t longest = std::max(p.idsA.size(), p.idsB.size());
    if (p.idsB.size() < 3 || int(longest) + maxTokens > limit)
        throw core::Error(
            core::ErrorCode::InvalidArgument,
            fmt::format("the prompt has {} tokens of model B (and {} of A): a transfer needs at "
                        "least 3, and room for {} more in the context of {}",
                        p.idsB.size(), p.idsA.size(), maxTokens, limit));
    return p;
}

std::vector<std::string> tokenPieces(const core::Tokenizer &tok, const std::vector<int> &ids)
{
    std::vector<std::string> pieces;
    pieces.reserve(ids.size());
    std::string before;
    std::vector<int> prefix;
    for (int id : ids) {
        prefix.push_back(id);
        std::string now = tok.decode(prefix, true);
        if (now.size() >= before.size() && now.compare(0, before.size(), before) == 0)
            pieces.push_back(now.substr(before.size()));
        else
            pieces.push_back(tok.isSpecial(id) ? std::string() : tok.piece(id));
        before = std::move(now);
    }
    return pieces;
}

namespace {

core::ComparisonPath path(const GenerateResult &g, const core::Tokenizer &tok)
{
    core::ComparisonPath p;
    p.ids = g.outputIds;
    p.pieces = tokenPieces(tok, g.outputIds);
    p.logprobs = g.logprobs;
    p.logprobs.resize(p.ids.size());
    p.text = tok.decode(g.outputIds, true);
    p.promptTokens = g.stats.promptTokens;
    p.reusedTokens = g.stats.reusedTokens;
    p.ttftMs = g.stats.ttftMs;
    p.decodeTokPerS = g.stats.decodeTokPerS;
    return p;
}

} // namespace

CompareOutcome compareTransfer(const Model &a, const core::Tokenizer &tokA, const Model &b,
                               const core::Tokenizer &tokB, const Converter &converter,
                               const std::vector<int> &ids, const CompareOptions &options)
{
    return compareTransfer(a, tokA, b, tokB, converter, samePairing(ids), options);
}

CompareOutcome compareTransfer(const Model &a, const core::Tokenizer &tokA, const Model &b,
                               const core::Tokenizer &tokB, const Converter &converter,
                               const TokenPairing &pairing, const CompareOptions &options)
{
    const std::vector<int> &ids = pairing.idsB; // B's prompt: scratch and transfer paths
    if (ids.size() < 3)
        throw core::Error(core::ErrorCode::InvalidArgument, "a transfer needs a prompt of at least 3 tokens");
    GenerateOptions go;
    go.maxTokens = options.maxTokens;
    CompareOutcome out;
    const auto stop = [&] { return options.cancel && options.cancel->load(); };
    // A's prompt prefix the transfer reads: all but the last token, or across tokenizers the A
    // tokens B's prefix is paired with
    const std::vector<int> prefix(pairing.idsA.begin(), pairing.idsA.begin() + sourceTokensNeeded(pairing));
    if (options.warmUp) {
        b.generate(ids, go, {}, options.cancel);
        auto warm = a.newCache();
        transferGenerate(a, b, converter, pairing, go, &warm, options.recompute);
    }
    if (stop()) {
        out.cancelled = true;
        return out;
    }
    const auto scratch = b.generate(ids, go, {}, options.cancel);
    const auto selfA = a.generate(pairing.idsA, go, {}, options.cancel);
    if (stop()) {
        out.cancelled = true;
        return out;
    }
    auto cacheA = a.newCache();
    const auto t0 = Clock::now();
    a.forward(prefix, cacheA);
    const double prefillA = msSince(t0);
    if (pairing.crossTokenizer()) {
        const KvCache paired = pairedSourceCache(a, cacheA, pairing, converter.keyForm());
        out.gate = qualityGate(b, converter, paired, ids.back(), options.gateTail, options.gateSignal,
                               options.gateThreshold);
    } else {
        out.gate = qualityGate(b, converter, cacheA, ids.back(), options.gateTail, options.gateSignal,
                               options.gateThreshold);
    }
    const auto tr = transferGenerate(a, b, converter, pairing, go, &cacheA, options.recompute);
    if (stop()) {
        out.cancelled = true;
        return out;
    }
    const auto agree = teacherForcedAgreement(a, b, converter, pairing, scratch.outputIds, options.recompute);
    const auto floor = noPrefixAgreement(b, ids, scratch.outputIds);
    auto &s = out.sample;
    s.a = path(selfA, tokA);
    s.scratch = path(scratch, tokB);
    s.transfer = path(tr.generation, tokB);
    s.transfer.kl = agree.kl;
    s.transfer.ttftMs = prefillA + tr.convertMs + tr.generation.stats.ttftMs;
    s.sourcePrefillMs = prefillA;
    s.convertMs = tr.convertMs;
    const auto &x = scratch.outputIds, &y = tr.generation.outputIds;
    for (size_t j = 0; j < std::max(x.size(), y.size()); ++j)
        if (j >= x.size() || j >= y.size() || x[j] != y[j]) {
            s.firstDivergence = int(j);
            break;
        }
    s.meanKl = agree.meanKl();
    s.top1 = agree.top1Rate();
    s.klNoPrefix = floor.meanKl();
    out.top1NoPrefix = floor.top1Rate();
    const auto firstMean = [](const std::vector<double> &kl) {
        const size_t n = std::min(kl.size(), size_t(kFirstTokens));
        return n == 0 ? 0.0 : std::accumulate(kl.begin(), kl.begin() + long(n), 0.0) / double(n);
    };
    out.klFirst = firstMean(agree.kl);
    out.klNoPrefixFirst = firstMean(floor.kl);
    s.rougeL = core::rougeL(s.transfer.text, s.scratch.text);
    s.gateSignal = gateSignalName(out.gate.signal);
    s.gateValue = out.gate.value;
    s.gateThreshold = out.gate.threshold;
    s.gatePassed = out.gate.passed;
    out.ttftCachedMs = tr.convertMs + tr.generation.stats.ttftMs;
    out.ttftGatedMs = prefillA + out.gate.ms +
                      (out.gate.passed ? tr.convertMs + tr.generation.stats.ttftMs : scratch.stats.ttftMs);
    return out;
}

} // namespace kvwb::gpu
