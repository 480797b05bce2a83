// Cross-model KV transfer: convert model A's cache of a prompt into model B's KV space with fitted
// per-layer maps (gpu/align/alignment.h, stored by core/store/converter_store.h), place it in B's cache (B's
// RoPE applied on the way in), and let B continue from there without prefilling the converted
// prefix. Also the measurements around it: teacher-forced agreement with B's own prefill and a
// cheap per-request quality gate.
//
// Threading: runs on the calling thread (the engine thread); models, caches and converters stay on
// it. A Converter holds its maps on the target model's device and is immutable after creation.
#pragma once

#include "core/cache/gate_signal.h"
#include "core/cache/recompute_plan.h"
#include "core/store/converter_store.h"
#include "gpu/align/alignment.h"
#include "gpu/model/model.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvwb::gpu {

class Converter
{
public:
    struct Impl;
    // Validates every map against A's and B's geometry (Error(Shape) naming the layer and map at
    // fault) and uploads the maps to B's device (float32; conversion computes in float32). Keeps
    // no reference to the models (their caches are recognised by their RoPE tables), except to B
    // when a map reads B's own layer-0 rows (core::TokenFeatures::targetTokens): then target must
    // outlive the converter, and convert() runs B's token-local projection of the ids.
    static Converter create(const core::ConverterRecord &record, const Model &source, const Model &target);
    Converter();
    ~Converter();
    Converter(Converter &&) noexcept;
    Converter &operator=(Converter &&) noexcept;

    // Replaces target's contents with source's positions 0..n-1 converted (n = source.tokens(),
    // token ids copied). Both caches must come from the models given to create().
    void convert(const KvCache &source, KvCache &target) const;
    // The same, to the host: [B layers] of [kvHeadsB, n, headDimB], keys in keyForm().
    std::vector<HeadMajorKv> convertToHost(const KvCache &source) const;
    core::KeyForm keyForm() const;

private:
    std::unique_ptr<Impl> m_impl;
};

// Selective recompute (core/cache/recompute_plan.h) of a converted cache of B: the plan's positions
// are run through B itself in order, each run of them on top of the cache before it (converted and
// already recomputed positions alike), and their K/V replace the converted ones; the positions after
// a run keep their converted K/V. A plan of share 1 gives exactly B's own prefill, share 0 leaves the
// cache as converted. With plan.shuffleSeed the converted positions are first shuffled (a baseline).
// Returns the positions recomputed.
int recomputeConverted(const Model &target, KvCache &cache, const core::RecomputePlan &plan);

struct TransferResult
{
    GenerateResult generation;  // B's output; stats.reusedTokens = converted positions
    double sourcePrefillMs = 0; // A's forward over the prefix
    double convertMs = 0;       // maps applied, B's cache filled and the recomputed positions run
    int recomputed = 0;         // prefix positions B recomputed itself (RecomputePlan)
    // ttft of the transfer path: sourcePrefillMs + convertMs + generation.stats.ttftMs
    double ttftMs() const { return sourcePrefillMs + convertMs + generation.stats.ttftMs; }
};

// A prefills prompt[0 .. n-2] (unless sourceCache already holds that prefix, then its prefill is
// skipped and reported as 0), its cache is converted into B's (the plan's share of it then
// recomputed by B), and B processes the last prompt token and generates. prompt must have at least
// 2 tokens and be valid for both models.
TransferResult transferGenerate(const Model &source, const Model &target, const Converter &converter,
                                const std::vector<int> &prompt, const GenerateOptions &options,
                                KvCache *sourceCache = nullptr, const core::RecomputePlan &recompute = {});

// Teacher-forced agreement of two continuations of the same prompt: B from its own prefill vs B
// from the converted cache, both fed prompt's last token + continuation[0 .. m-2] and compared on
// their next-token distributions at each of those m positions.
struct Agreement
{
    std::vector<double> kl; // [m] KL(scratch || transfer) in nats per position
    std::vector<int> top1;  // [m] 1 where both argmaxes agree
    double meanKl() const;
    double top1Rate() const;
};
Agreement teacherForcedAgreement(const Model &source, const Model &target, const Converter &converter,
                                 const std::vector<int> &prompt, const std::vector<int> &continuation,
                                 const core::RecomputePlan &recompute = {});
// The floor a converted cache has to beat: the same comparison with B given no prefix at all (only
// the prompt's last token, at position 0) instead of the converted cache.
Agreement noPrefixAgreement(const Model &target, const std::vector<int> &prompt,
                            const std::vector<int> &continuation);

// Multi-turn hand-off: A served the first turns of a conversation and holds the cache of
// tokens[0 .. handoff-1]; B takes over from that cache converted and processes the rest of the
// conversation itself. Both B from its own prefill of the whole conversation and B from the
// converted cache are fed `tokens` (teacher-forced) and compared on the positions that predict the
// tokens of each span [begin, end) (e.g. each later turn's answer): one Agreement per span, in the
// order given, kl[i] at the position predicting tokens[begin + i]. Spans must be non-empty, start
// after the hand-off (begin > handoff >= 1) and not overlap, in increasing order, end <=
// tokens.size(); Error(InvalidArgument) otherwise. Logits are taken only where a span needs them,
// so a long conversation costs two prefills, not [tokens, vocab] floats.
std::vector<Agreement> handoffAgreement(const Model &source, const Model &target, const Converter &converter,
                                        const std::vector<int> &tokens, int handoff,
                                        const std::vector<std::pair<int, int>> &spans);

// The quality gate, computed before committing to a converted cache of prompt[0 .. n-2] (in
// sourceCache, A's cache of those positions). B recomputes the last `tail` converted positions
// itself on top of the converted cache of the positions before them, then processes the prompt's
// last token both ways. Four signals, all from these tail + 2 token steps of B:
//  - kvCos: cosine between B's own K/V at the tail positions and the converted K/V there, averaged
//    over layers, keys and values (1 = the conversion reproduces B there);
//  - tailKl: KL between B's next-token distribution after the last prompt token with the tail
//    recomputed and with the fully converted cache (0 = recomputing changes nothing);
//  - nll: B's mean negative log-likelihood of the tail's following tokens given the converted
//    prefix (how plausible B finds the prompt it is about to continue);
//  - attnCos: B's attention output at the tail with its own K/V there against with the converted
//    K/V there. B's queries of the tail positions and of the last prompt token (from the recompute,
//    post-RoPE) attend over the tail's keys and values only (tail query i over tail keys 0..i, the
//    last token over all of them; the positions before the tail hold converted K/V both ways and
//    are left out of both softmaxes); the cosine of the two outputs per query over
//    [heads * headDim], averaged over queries and layers. kvCos weighs every direction of K and V
//    alike, this one only what B's queries read (1 = the conversion changes nothing B reads there).
// The gate passes when the chosen signal clears the threshold (kvCos, attnCos >= t; tailKl, nll <= t).
// The signal enum and its names are core's (core/cache/gate_signal.h).
using core::defaultGateThreshold;
using core::GateSignal;
using core::gateSignalName;
using core::parseGateSignal;

struct GateResult
{
    double kvCos = 0;
    double tailKl = 0;
    double nll = 0;
    double attnCos = 0;
    int tail = 0;
    GateSignal signal = GateSignal::TailKl;
    double threshold = 0;
    double value = 0; // the chosen signal's value
    bool passed = false;
    double ms = 0;
};
GateResult qualityGate(const Model &target, const Converter &converter, const KvCache &sourceCache,
                       int lastToken, int tail, GateSignal signal, double threshold);

} // namespace kvwb::gpu
