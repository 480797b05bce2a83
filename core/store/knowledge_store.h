// The knowledge graph file (`kvwb knowledge build --out GRAPH.h5`): the concept graph's nodes and,
// for one model B, each node's knowledge text as a KV module (keys before RoPE, so a module can be
// placed at any position). Layout in docs/knowledge.md; schema "kvwb-knowledge/1".
//
// The file is written whole under a temporary name and renamed (complete or absent, never half
// written). Reading checks every count and shape against the file before allocating.
//
// Threading: the calling thread; HDF5 is serialised by the caller (one job at a time).
#pragma once

#include "core/knowledge/knowledge_graph.h"
#include "core/model/kv_types.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kvwb::core {

inline constexpr const char *kKnowledgeSchema = "kvwb-knowledge/1";

// One node's knowledge text as model B computed it, in the context `KnowledgeModules::prefix`.
struct KnowledgeModule
{
    std::string nodeId;
    std::vector<int> ids;            // the text's tokens (B's tokenizer, no BOS)
    int64_t builtMs = 0;             // Unix ms when computed
    double computeMs = 0;            // B's forward over the text: the cost of building it once
    std::vector<HeadMajorKv> layers; // per B layer [kvHeads, ids.size(), headDim]; keys pre-RoPE
};

struct KnowledgeModules
{
    std::string modelFingerprint; // model B's weights sha256
    std::string modelPath;        // as given to build (a hint; the fingerprint decides)
    int layers = 0, kvHeads = 0, headDim = 0;
    std::vector<int> prefixIds;           // what preceded each module when it was computed (BOS [+ system])
    std::vector<KnowledgeModule> modules; // one per node that has one, any order
    const KnowledgeModule *find(const std::string &nodeId) const;
};

struct KnowledgeFile
{
    KnowledgeGraph graph;
    std::optional<KnowledgeModules> modules;
    std::string createdUtc;
    std::string description; // how it was built ("wordnet-3.0: 1000 concepts", a JSONL path)
};

// Error(InvalidArgument) for modules that disagree with their stated geometry or name nodes the
// graph lacks; Error(Io) naming the file when it cannot be written.
void saveKnowledge(const std::filesystem::path &path, const KnowledgeFile &file);
// withModules false reads the graph and the modules' metadata only (ids, times; empty layers).
// Error(Format) naming the file and dataset for anything malformed or foreign.
KnowledgeFile loadKnowledge(const std::filesystem::path &path, bool withModules = true);

} // namespace kvwb::core
