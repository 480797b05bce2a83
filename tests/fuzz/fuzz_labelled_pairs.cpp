// Labelled pair files (train-embedder / train-verifier --pairs): every format - plain TSV, a header
// naming the columns, Quora's quoted TSV, JSONL - skips malformed lines with warnings or refuses the
// file with one kvwb error, never a crash; the validation split and the curve hold for what was read.
#include "core/workload/labelled_pairs.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string_view text(reinterpret_cast<const char *>(data), size);
    return kvwb::fuzz::expectOnlyKvwbErrors([&] {
        for (const bool jsonl : {false, true}) {
            try {
                const auto f = kvwb::core::parseLabelledPairs(text, "pairs.tsv", jsonl);
                const auto split = kvwb::core::splitPairsByText(f.pairs, 0.25, 1);
                if (split.train.size() + split.validation.size() != f.pairs.size())
                    __builtin_trap();
                std::vector<double> sims;
                for (size_t i = 0; i < f.pairs.size(); ++i)
                    sims.push_back(double(f.pairs[i].a.size() % 7) / 7.0);
                (void)kvwb::core::precisionRecallCurve(f.pairs, sims, 16);
                (void)kvwb::core::averagePrecision(f.pairs, sims);
            } catch (const kvwb::core::Error &) {
                // a refused file: fine, try the other form
            }
        }
    });
}
