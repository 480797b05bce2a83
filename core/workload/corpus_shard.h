// Deterministic parts of a corpus (`kvwb train --shard I/N`, `kvwb eval-qa --shard I/N`): two models
// trained on different shards of one corpus learn different concepts from the same kind of text.
// Thread-safety: pure functions.
#pragma once

#include "core/workload/text_corpus.h"

namespace kvwb::core {

// One of `count` disjoint parts whose union is the whole corpus.
struct CorpusShard
{
    int index = 0; // 0 <= index < count
    int count = 1; // 1 = the whole corpus
};

// The documents of `shard`, in their order: those whose key mod count == index, the key being the
// concept's popularity rank when the document has one (so a concept's training and validation
// phrasings fall into the same shard, and two shards know different concepts), else the document's
// position among the documents of its split (plain text: every count-th training line and every
// count-th validation line). Warnings and the skip count are kept. Error(InvalidArgument) unless
// 0 <= index < count.
TextCorpus selectShard(const TextCorpus &corpus, CorpusShard shard);

} // namespace kvwb::core
