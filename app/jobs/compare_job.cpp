#include "app/jobs/compare_job.h"

#include "core/util/text_util.h"

#include <algorithm>

namespace kvwb::app::jobs {

gpu::CompareOutcome compareOne(const ComparePair &pair, const std::string &prompt,
                               const gpu::TokenPairing &tokens, const gpu::CompareOptions &options)
{
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
