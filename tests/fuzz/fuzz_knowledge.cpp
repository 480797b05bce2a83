// The knowledge tier's inputs: a JSONL of concepts, a profiles file and a knowledge graph file, each
// read from the same bytes; a graph that reads is verified against a text of the same bytes. Bad
// input is a kvwb Error naming the file, never a crash.
#include "core/knowledge/knowledge_graph.h"
#include "core/knowledge/user_profiles.h"
#include "core/store/knowledge_store.h"
#include "tests/fuzz/fuzz_input.h"

using namespace kvwb::core;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string_view text(reinterpret_cast<const char *>(data), size);
    kvwb::fuzz::expectOnlyKvwbErrors([&] {
        const auto g = graphFromJsonl(kvwb::fuzz::inputFile(data, size, "concepts.jsonl"), 0);
        for (const auto &n : g.nodes())
            (void)g.verify(n.id, text);
    });
    kvwb::fuzz::expectOnlyKvwbErrors([&] {
        for (const auto &p : readProfiles(kvwb::fuzz::inputFile(data, size, "profiles.json")))
            (void)profileInstruction(p);
    });
    kvwb::fuzz::expectOnlyKvwbErrors(
        [&] { (void)loadKnowledge(kvwb::fuzz::inputFile(data, size, "graph.h5")); });
    return 0;
}
