// A tiny WordNet database in the real wndb format (data.noun, index.noun, cntlist.rev) for tests:
// two small taxonomies (vehicles, fruit), an instance (Paris), an ambiguous lemma ("car" also
// names a railcar), a synset without a definition, and malformed lines at known places.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kvwb::test {

struct WordNetFixture
{
    std::vector<int> badDataLines;        // 1-based line numbers of malformed lines in data.noun
    std::vector<int> badIndexLines;       // ... in index.noun
    std::vector<int> badCountLines;       // ... in cntlist.rev
    std::vector<int> unmatchedCountLines; // cntlist.rev keys that name no synset (unknown lemma)
};

// Writes the files into dir (created if needed). extraLeaves > 0 adds that many "gadget <k>"
// synsets under "gadget", with tag counts decreasing in k, for statistics over many concepts.
WordNetFixture writeWordNetFixture(const std::filesystem::path &dir, int extraLeaves = 0,
                                   bool withMalformed = true);

} // namespace kvwb::test
