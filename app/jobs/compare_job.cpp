#include "app/jobs/compare_job.h"

#include "app/jobs/job_inputs.h"
#include "core/util/system_memory.h"
#include "core/util/text_util.h"

#include <fmt/format.h>

#include <algorithm>

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

} // namespace kvwb::app::jobs
