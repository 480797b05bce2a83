// Transfer across tokenizers through the public cache and converter calls (no tensors here): A's rows
// are gathered on the host into B's positions, then converted as any source cache is.
#include "gpu/transfer/cross_tokenizer.h"

#include "core/metrics/distributions.h"
#include "core/util/clock.h"
#include "core/util/error.h"
#include "gpu/src/model/kv_cache_p.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvwb::gpu {

using core::Clock;
using core::Error;
using core::ErrorCode;
using core::msSince;

TokenPairing pairTokens(const std::string &prompt, const core::Tokenizer &tokA, const core::Tokenizer &tokB,
                        core::AlignPolicy policy)
{
    const auto ea = tokA.encodeWithOffsets(prompt, true), eb = tokB.encodeWithOffsets(prompt, true);
    TokenPairing p;
    p.idsA = ea.ids;
    p.idsB = eb.ids;
    p.policy = policy;
    if (p.idsA != p.idsB)
        p.alignment = core::alignTokens(core::alignSide(ea, tokA), core::alignSide(eb, tokB), policy);
    return p;
}

TokenPairing samePairing(const std::vector<int> &ids)
{
    TokenPairing p;
    p.idsA = ids;
    p.idsB = ids;
    return p;
}

int sourceTokensNeeded(const TokenPairing &p)
{
    if (p.idsB.size() < 2)
        return 0;
    if (!p.crossTokenizer())
        return int(p.idsA.size()) - 1;
    const auto last = std::max_element(p.alignment.begin(), p.alignment.end() - 1);
    return int(*last) + 1;
}

KvCache pairedSourceCache(const Model &source, const KvCache &cacheA, const TokenPairing &p,
                          core::KeyForm form)
{
    if (p.idsB.size() < 2)
        throw Error(ErrorCode::InvalidArgument, "a transfer needs a prompt of at least 2 tokens of model B");
    if (p.crossTokenizer() && p.alignment.size() != p.idsB.size())
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("token alignment has {} entries for model B's {} tokens", p.alignment.size(),
                                p.idsB.size()));
    const int needed = sourceTokensNeeded(p);
    if (cacheA.tokens() < needed)
        throw Error(
            ErrorCode::InvalidArgument,
            fmt::format("model A's cache holds {} positions; B's prefix reads {}", cacheA.tokens(), needed));
    const size_t n = p.idsB.size() - 1, have = size_t(cacheA.tokens());
    const size_t heads = size_t(cacheA.numKvHeads()), hd = size_t(cacheA.headDim());
    std::vector<HeadMajorKv> layers;
    for (int l = 0; l < cacheA.numLayers(); ++l) {
        const HeadMajorKv own = cacheA.layer(l, form); // [kvA, have, hdA]
        HeadMajorKv g;
        g.keys.resize(heads * n * hd);
        g.values.resize(heads * n * hd);
        for (size_t h = 0; h < heads; ++h)
            for (size_t t = 0; t < n; ++t) {
                const size_t row = p.crossTokenizer() ? size_t(p.alignment[t]) : t;
                const size_t from = (h * have + row) * hd, to = (h * n + t) * hd;
                std::copy_n(own.keys.data() + from, hd, g.keys.data() + to);
                std::copy_n(own.values.data() + from, hd, g.values.data() + to);
            }
        layers.push_back(std::move(g));
    }
    KvCache out = source.newCache();
    out.assign(std::vector<int>(p.idsB.begin(), p.idsB.end() - 1), layers, form);
    if (p.crossTokenizer())
        out.impl()->sourceIndex.assign(p.alignment.begin(), p.alignment.begin() + long(n));
    return out;
}

TransferResult transferGenerate(const Model &source, const Model &target, const Converter &converter,
                                const TokenPairing &p, const GenerateOptions &options, KvCache *sourceCache,
                                const core::RecomputePlan &recompute)
{
    if (!p.crossTokenizer())
        return transferGenerate(source, target, converter, p.idsB, options, sourceCache, recompute);
    if (p.idsB.size() < 2)
        throw Error(ErrorCode::InvalidArgument, "transfer needs a prompt of at least 2 tokens");
    TransferResult r;
    const std::vector<int> prefixA(p.idsA.begin(), p.idsA.begin() + sourceTokensNeeded(p));
    KvCache local;
    KvCache *cacheA = sourceCache;
    if (!cacheA || cacheA->tokenIds() != prefixA) {
        if (!cacheA) {
            local = source.newCache();
            cacheA = &local;
        }
        cacheA->clear();
        const auto t0 = Clock::now();
        source.forward(prefixA, *cacheA);
        r.sourcePrefillMs = msSince(t0);
    }
    const auto t1 = Clock::now();
    const KvCache paired = pairedSourceCache(source, *cacheA, p, converter.keyForm());
    auto cacheB = target.newCache();
    converter.convert(paired, cacheB);
    r.recomputed = recomputeConverted(target, cacheB, recompute);
    r.convertMs = msSince(t1);
    r.generation = target.generate(p.idsB, cacheB, options);
    r.generation.stats.reusedTokens -= r.recomputed; // B computed those itself
    return r;
}

Agreement teacherForcedAgreement(const Model &source, const Model &target, const Converter &converter,
                                 const TokenPairing &p, const std::vector<int> &continuation,
                                 const core::RecomputePlan &recompute)
{
    if (!p.crossTokenizer())
        return teacherForcedAgreement(source, target, converter, p.idsB, continuation, recompute);
    if (p.idsB.size() < 2)
        throw Error(ErrorCode::InvalidArgument, "agreement needs a prompt of at least 2 tokens");
    std::vector<int> fed = {p.idsB.back()};
    if (!continuation.empty())
        fed.insert(fed.end(), continuation.begin(), continuation.end() - 1);
    const std::vector<int> prefixB(p.idsB.begin(), p.idsB.end() - 1);
    auto scratch = target.newCache();
    target.forward(prefixB, scratch);
    const auto ls = target.forward(fed, scratch, true); // [fed, vocab]
    auto cacheA = source.newCache();
    source.forward(std::vector<int>(p.idsA.begin(), p.idsA.begin() + sourceTokensNeeded(p)), cacheA);
    const KvCache paired = pairedSourceCache(source, cacheA, p, converter.keyForm());
    auto transfer = target.newCache();
    converter.convert(paired, transfer);
    recomputeConverted(target, transfer, recompute);
    const auto lt = target.forward(fed, transfer, true);
    const size_t vocab = ls.size() / fed.size();
    Agreement a;
    for (size_t i = 0; i < fed.size(); ++i) {
        const float *x = ls.data() + i * vocab, *y = lt.data() + i * vocab;
        a.kl.push_back(core::klDivergence(x, y, vocab));
        a.top1.push_back(std::max_element(x, x + vocab) - x == std::max_element(y, y + vocab) - y ? 1 : 0);
    }
    return a;
}

} // namespace kvwb::gpu
