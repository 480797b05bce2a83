#include "core/workload/corpus_shard.h"

#include "core/util/error.h"

#include <string>

namespace kvwb::core {

TextCorpus selectShard(const TextCorpus &corpus, CorpusShard shard)
{
    if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count)
        throw Error(ErrorCode::InvalidArgument, "corpus shard " + std::to_string(shard.index) + "/" +
                                                    std::to_string(shard.count) + " is not 0 <= I < N");
    TextCorpus out;
    out.warnings = corpus.warnings;
    out.skipped = corpus.skipped;
    size_t position[2] = {0, 0}; // documents seen so far in each split: training, validation
    for (const auto &d : corpus.documents) {
        size_t &seen = position[d.validation ? 1 : 0];
        const size_t key = d.rank >= 0 ? size_t(d.rank) : seen;
        ++seen;
        if (key % size_t(shard.count) == size_t(shard.index))
            out.documents.push_back(d);
    }
    return out;
}

} // namespace kvwb::core
