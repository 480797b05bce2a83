#include "app/jobs/compare_job.h"

#include "app/jobs/job_inputs.h"
#include "core/metrics/text_metrics.h"
#include "core/util/error.h"
#include "core/util/system_memory.h"
#include "core/util/text_util.h"
#include "gpu/align/alignment.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace kvwb::app::jobs {

gpu::CompareOutcome compareOne(const ComparePair &pair, const std::string &prompt,
                               const gpu::TokenPairing &tokens, const gpu::CompareOptions &options)
{
    // A's cache, B's from scratch and B's from the converted one, each with its f32 copy and the
    // tokens it generates, against what the machine has left with both models loaded.
    const int64_t na = int64_t(tokens.idsA.size()), nb = int64_t(tokens.idsB.size()) + options.maxTokens;
    core::checkWorkingSet(
        "comparing a prompt", requestWorkingSetBytes(pair.a, na) + 2 * requestWorkingSetBytes(pair.b, nb),
        fmt::format("{} tokens of A; {} of B, from scratch and from the converted cache", na, nb),
        "a shorter prompt or --kv-dtype bf16");
    auto outcome = gpu::compareTransfer(pair.a, pair.tokenizerA, pair.b, pair.tokenizerB, pair.converter,
                                        tokens, options);
    if (outcome.cancelled)
        return outcome;
    outcome.sample.prompt = prompt;
    outcome.sample.converter = pair.converterName;
    outcome.sample.createdUtc = core::text::utcNowIso8601();
    return outcome;
}

void storeComparisons(const std::filesystem::path &experiment, const std::string &name,
                      const std::vector<core::ComparisonSample> &samples, bool append)
{
    std::vector<core::ComparisonSample> list;
    if (append) {
        const auto names = core::listComparisons(experiment);
        if (std::find(names.begin(), names.end(), name) != names.end())
            list = core::loadComparisons(experiment, name);
    }
    list.insert(list.end(), samples.begin(), samples.end());
    core::saveComparisons(experiment, name, list);
}

std::string versusOverlapWarning(const core::ConverterRecord &record, const core::ConverterRecord &versus,
                                 size_t n)
{
    std::vector<int> seen(versus.trainPrompts.begin(), versus.trainPrompts.end());
    seen.insert(seen.end(), versus.validPrompts.begin(), versus.validPrompts.end());
    n = std::min(n, record.testPrompts.size());
    int overlap = 0;
    for (size_t i = 0; i < n; ++i)
        overlap += std::count(seen.begin(), seen.end(), record.testPrompts[i]) > 0;
    if (overlap == 0)
        return {};
    return fmt::format(
        "{} of the {} held-out prompts of '{}' were fitting or validation prompts of '{}': the "
        "comparison favours '{}'",
        overlap, n, record.name, versus.name, versus.name);
}

CompareSetOptions compareSetOptions(const core::CompareSettings &settings)
{
    CompareSetOptions o;
    o.compare.maxTokens = settings.maxTokens;
    o.compare.gateSignal = settings.gateSignal;
    o.compare.gateThreshold = settings.gateThreshold;
    o.compare.gateTail = settings.gateTail;
    o.compare.recompute = settings.recompute;
    o.alignPolicy = settings.alignPolicy;
    o.baselines = settings.baselines;
    o.matchTokens = settings.matchTokens;
    return o;
}

CompareSetRun compareSet(const ComparePair &pair, const core::ConverterRecord &record,
                         const std::vector<std::string> &texts, const CompareSetOptions &options, bool &warm,
                         const CompareSetProgress &progress)
{
    CompareSetRun run;
    run.gateSignal = options.compare.gateSignal;
    run.gateThreshold = options.compare.gateThreshold;
    run.matchTokens = options.matchTokens;
    struct Other
    {
        gpu::Converter converter;
        std::string name;
        uint64_t shuffleSeed = 0; // the shuffled-positions baseline
    };
    std::vector<Other> converters;
    const auto addOther = [&](const char *key, const core::ConverterRecord &rec, uint64_t shuffleSeed = 0) {
        run.others.push_back({key, rec, {}, {}, {}});
        converters.push_back({gpu::Converter::create(rec, pair.a, pair.b), rec.name, shuffleSeed});
    };
    if (options.versus)
        addOther("versus", *options.versus);
    if (options.baselines) {
        const auto &ca = pair.a.config(), &cb = pair.b.config();
        if (auto raw = gpu::rawSourceRecord(record, ca.numLayers, ca.numKvHeads * ca.headDim, cb.numLayers,
                                            cb.numKvHeads * cb.headDim))
            addOther("raw_source_kv", *raw);
        else
            run.warnings.push_back(fmt::format("no raw-source-KV baseline: A's KV rows are {} wide, B's {}",
                                               ca.numKvHeads * ca.headDim, cb.numKvHeads * cb.headDim));
        addOther("random_map", gpu::randomMapRecord(record, 1));
        addOther("shuffled_positions", record, 1); // this converter, its rows at the wrong positions
    }
    gpu::CompareOptions co = options.compare;
    for (size_t i = 0; i < texts.size(); ++i) {
        if (progress && !progress(i, texts.size(), nullptr)) {
            run.cancelled = true;
            break;
        }
        ComparedPrompt c;
        c.index = i;
        try {
            c.tokens = gpu::comparablePair(texts[i], pair.a, pair.tokenizerA, pair.b, pair.tokenizerB,
                                           co.maxTokens, options.alignPolicy);
        } catch (const core::Error &e) {
            run.warnings.push_back(fmt::format("prompt {} skipped: {}", i, e.what()));
            continue;
        }
        co.warmUp = !warm;
        c.outcome = compareOne(pair, texts[i], c.tokens, co);
        if (c.outcome.cancelled) {
            run.cancelled = true;
            break;
        }
        warm = true;
        std::vector<gpu::CompareOutcome> others;
        for (const auto &o : converters) {
            const ComparePair other{pair.a, pair.tokenizerA, pair.b, pair.tokenizerB, o.converter, o.name};
            gpu::CompareOptions oo = co;
            oo.recompute.shuffleSeed = o.shuffleSeed;
            others.push_back(compareOne(other, texts[i], c.tokens, oo));
            if (others.back().cancelled)
                break;
        }
        if (others.size() < converters.size() || (!others.empty() && others.back().cancelled)) {
            run.cancelled = true; // a prompt counts only with every converter's measurement
            break;
        }
        for (size_t k = 0; k < others.size(); ++k) {
            run.others[k].kl.push_back(others[k].sample.meanKl);
            run.others[k].top1.push_back(others[k].sample.top1);
            run.others[k].rougeL.push_back(others[k].sample.rougeL);
        }
        const auto &sample = c.outcome.sample;
        c.rougeLA = core::rougeL(sample.a.text, sample.scratch.text);
        if (i < options.answers.size())
            c.outcome.sample.expectedAnswer = options.answers[i];
        run.prompts.push_back(std::move(c));
        if (progress && !progress(i, texts.size(), &run.prompts.back())) {
            run.cancelled = i + 1 < texts.size();
            break;
        }
    }
    return run;
}

CompareSetSummary summarizeCompareSet(const CompareSetRun &run)
{
    CompareSetSummary s;
    s.prompts = int(run.prompts.size());
    std::vector<double> kl, top1, rouge, klFloor, top1Floor, rougeA, klFirst, klFloorFirst;
    s.gateSignal = core::gateSignalName(run.gateSignal);
    s.gateThreshold = run.gateThreshold;
    s.matchTokens = run.matchTokens;
    std::vector<double> klFirstToken, answerScratch, answerTransfer, answerA;
    for (const auto &c : run.prompts) {
        if (const auto hits = core::answerHits(c.outcome.sample)) {
            answerScratch.push_back(hits->scratch ? 1 : 0);
            answerTransfer.push_back(hits->transfer ? 1 : 0);
            answerA.push_back(hits->a ? 1 : 0);
        }
        const auto &sample = c.outcome.sample;
        const bool match = core::firstTokensMatch(sample.firstDivergence, run.matchTokens);
        s.matching += match ? 1 : 0;
        s.passed += sample.gatePassed ? 1 : 0;
        s.passedMatching += sample.gatePassed && match ? 1 : 0;
        klFirstToken.push_back(sample.transfer.kl.empty() ? 0.0 : sample.transfer.kl.front());
        klFirst.push_back(c.outcome.klFirst);
        klFloorFirst.push_back(c.outcome.klNoPrefixFirst);
        kl.push_back(c.outcome.sample.meanKl);
        top1.push_back(c.outcome.sample.top1);
        rouge.push_back(c.outcome.sample.rougeL);
        klFloor.push_back(c.outcome.sample.klNoPrefix);
        top1Floor.push_back(c.outcome.top1NoPrefix);
        rougeA.push_back(c.rougeLA);
    }
    const auto mean = [](const std::vector<double> &v) {
        return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    };
    const auto interval = [&](auto &&f) -> std::optional<core::Interval> {
        if (s.prompts < 2)
            return std::nullopt;
        try {
            return f();
        } catch (const core::Error &) {
            return std::nullopt;
        }
    };
    s.kl = mean(kl);
    s.top1 = mean(top1);
    s.rougeL = mean(rouge);
    s.klNoPrefix = mean(klFloor);
    s.top1NoPrefix = mean(top1Floor);
    s.rougeLA = mean(rougeA);
    s.klGapClosed = interval([&] { return core::gapClosed(kl, klFloor); });
    s.klFirst = mean(klFirst);
    s.klFirstToken = mean(klFirstToken);
    s.klNoPrefixFirst = mean(klFloorFirst);
    s.klGapClosedFirst = interval([&] { return core::gapClosed(klFirst, klFloorFirst); });
    s.top1Gain = interval([&] { return core::meanDifference(top1, top1Floor); });
    s.rougeLGainVsA = interval([&] { return core::meanDifference(rouge, rougeA); });
    s.answered = int(answerScratch.size());
    s.answerScratch = mean(answerScratch);
    s.answerTransfer = mean(answerTransfer);
    s.answerA = mean(answerA);
    if (s.answered >= 2)
        s.answerDifference = interval([&] { return core::meanDifference(answerTransfer, answerScratch); });
    for (const auto &o : run.others) {
        core::CompareOtherSummary d;
        d.key = o.key;
        d.converter = o.record.name;
        d.kl = mean(o.kl);
        d.top1 = mean(o.top1);
        d.rougeL = mean(o.rougeL);
        d.klDifference = interval([&] { return core::meanDifference(kl, o.kl); });
        d.top1Difference = interval([&] { return core::meanDifference(top1, o.top1); });
        d.rougeLDifference = interval([&] { return core::meanDifference(rouge, o.rougeL); });
        d.klGapClosed = interval([&] { return core::gapClosed(kl, o.kl); });
        s.others.push_back(std::move(d));
    }
    return s;
}

} // namespace kvwb::app::jobs
