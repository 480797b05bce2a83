// Compare job set-up shared by `kvwb compare` and the window's Compare panel (engine thread): one
// prompt answered by A, by B from scratch and by B from A's converted cache (gpu/transfer/compare.h),
// the sample labelled with its prompt, converter and time, and samples stored in the experiment
// file's /comparisons/<name>.
//
// Threading: the engine thread (or a subcommand's main thread), which owns the models.
#pragma once

#include "core/store/comparison_store.h"
#include "core/tokenize/tokenizer.h"
#include "gpu/model/model.h"
#include "gpu/transfer/compare.h"
#include "gpu/transfer/cross_tokenizer.h"
#include "gpu/transfer/transfer.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kvwb::app::jobs {

// The loaded pair and the converter between them; all must outlive the calls.
struct ComparePair
{
    const gpu::Model &a;
    const core::Tokenizer &tokenizerA;
    const gpu::Model &b;
    const core::Tokenizer &tokenizerB;
    const gpu::Converter &converter;
    std::string converterName; // /converters/<name> the converter came from
};

// gpu::compareTransfer on the prompt as both models tokenise it (gpu::comparablePair: paired token
// by token when their tokenizers differ), the sample labelled with prompt, converter name and the
// current UTC time. A cancelled outcome is returned as it is.
gpu::CompareOutcome compareOne(const ComparePair &pair, const std::string &prompt,
                               const gpu::TokenPairing &tokens, const gpu::CompareOptions &options);

// Stores samples as /comparisons/<name>: after the ones already there when `append`, else in
// their place.
void storeComparisons(const std::filesystem::path &experiment, const std::string &name,
                      const std::vector<core::ComparisonSample> &samples, bool append);

} // namespace kvwb::app::jobs
