// Writes the fuzz targets' seed corpora from the project's own writers: a random model's
// config.json, tokenizer.json and a small safetensors file, a llama2.c checkpoint and tokenizer.bin,
// a SentencePiece tokenizer.model (when the demo's is given), workload lines, a project file and
// small experiment files (prompts, a converter, a table, a ledger).
// Usage: kvwb_fuzz_seeds OUT_DIR [DEMO_TOKENIZER_MODEL]
#include "core/cache/store_payload.h"
#include "core/knowledge/knowledge_graph.h"
#include "core/knowledge/user_profiles.h"
#include "core/ledger/replay_ledger.h"
#include "core/model/checkpoint.h"
#include "core/model/gguf_model.h"
#include "core/model/quant.h"
#include "core/model/random_model.h"
#include "core/model/safetensors.h"
#include "core/settings/project.h"
#include "core/settings/run_archive.h"
#include "core/store/converter_store.h"
#include "core/store/experiment_file.h"
#include "core/store/knowledge_store.h"
#include "core/store/ledger_store.h"
#include "core/tokenize/gguf_tokenizer.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace fs = std::filesystem;
using namespace kvwb::core;

namespace {

void put(const fs::path &dir, const std::string &name, const std::string &bytes)
{
    fs::create_directories(dir);
    std::ofstream(dir / name, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read(const fs::path &p)
{
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string tokenizerBin()
{
    std::string s;
    auto i32 = [&](int32_t v) { s.append(reinterpret_cast<const char *>(&v), 4); };
    auto entry = [&](float score, const std::string &piece) {
        s.append(reinterpret_cast<const char *>(&score), 4);
        i32(int32_t(piece.size()));
        s += piece;
    };
    i32(8);
    entry(0, "<unk>");
    entry(0, "\n<s>\n");
    entry(0, "\n</s>\n");
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        entry(0, buf);
    }
    for (const char *p : {" ", "h", "e", "l", "o", "he", "ll", "hello", " hello"})
        entry(-float(std::strlen(p)), p);
    return s;
}

ModelInfo tinyInfo(ModelRole role)
{
    ModelInfo m;
    m.role = role;
    ModelConfig &c = m.config;
    c.architecture = "LlamaForCausalLM";
    c.modelType = "llama";
    c.numLayers = 2;
    c.numHeads = 2;
    c.numKvHeads = 1;
    c.headDim = 4;
    c.hiddenSize = 8;
    c.vocabSize = 100;
    c.ropeTheta = 10000.0;
    c.ropeScaling.type = "default";
    c.ropeScaling.factor = 1.0;
    m.weightsSha256 = std::string(64, role == ModelRole::A ? 'a' : 'b');
    m.tokenizerSha256 = std::string(64, '1');
    m.sourcePath = "/models/x";
    return m;
}

// Two prompts (both models, both layers), then a converter, a table and a ledger when full.
void writeExperimentSeed(const fs::path &path, FloatType storage, int compress, bool full)
{
    fs::create_directories(path.parent_path());
    fs::remove(path);
    ExperimentOptions o;
    o.storage = storage;
    o.compress = compress;
    o.syncToDisk = false;
    o.chunkTokens = 8;
    const ModelInfo a = tinyInfo(ModelRole::A), b = tinyInfo(ModelRole::B);
    ExperimentWriter w = ExperimentWriter::create(path, o, Provenance{}, a, b);
    for (int p = 0; p < 2; ++p) {
        PromptRecord r;
        r.text = "prompt " + std::to_string(p);
        r.label = p ? "intent" : "";
        for (PromptKv *kv : {&r.a, &r.b}) {
            for (int t = 0; t < 3 + p; ++t)
                kv->ids.push_back(t);
            for (int l = 0; l < 2; ++l) {
                std::vector<float> v(kv->ids.size() * 4);
                for (size_t i = 0; i < v.size(); ++i)
                    v[i] = float(i % 7) * 0.25f - float(l);
                kv->keys.push_back(v);
                kv->values.push_back(v);
            }
        }
        w.appendPrompt(r);
    }
    w.close();
    if (!full)
        return;
    ConverterRecord c;
    c.name = "ridge";
    c.selection = "proportional";
    c.lambdaMode = "fixed";
    c.settingsJson = "{}";
    c.trainPrompts = {0};
    c.validPrompts = {1};
    c.trainTokens = 3;
    for (int l = 0; l < 2; ++l) {
        LayerConverter lc;
        lc.targetLayer = l;
        lc.sourceLayers = {l};
        KvMap m;
        m.inputDim = 4;
        m.outputDim = 4;
        m.weight.assign(16, 0.5f);
        m.bias.assign(4, 0.0f);
        lc.keys = {m};
        lc.values = {m};
        c.layers.push_back(lc);
    }
    c.layerMetrics.columns = {"layer", "r2_k"};
    c.layerMetrics.rows = {{0, 0.5}, {1, 0.25}};
    c.headMetrics.columns = {"layer", "head", "r2_k"};
    c.headMetrics.rows = {{0, 0, 0.5}, {1, 0, 0.25}};
    c.ckaKeys = Matrix{2, 2, {1, 0.5, 0.5, 1}};
    c.ckaValues = c.ckaKeys;
    saveConverters(path, c);
    // the same maps with B's token features (core::TokenFeatures): wider inputs, three attributes
    ConverterRecord f = c;
    f.name = "features";
    for (auto &lc : f.layers) {
        lc.features = {1, true, 2};
        KvMap m = lc.keys[0];
        m.inputDim = int(4 + lc.features.extraDim(1, 4, 4));
        m.weight.assign(size_t(m.inputDim) * 4, 0.25f);
        lc.keys = {m};
        lc.values = {m};
    }
    saveConverters(path, f);
    saveTable(path, "sweep", MetricTable{{"k", "r2"}, {{1, 0.5}}}, "{}");
    LedgerRow row;
    row.tenant = "t1";
    row.model = ModelRole::B;
    row.intent = "cat";
    row.tierHits = {{TierKind::Exact, false}};
    row.promptTokens = 4;
    row.tokensComputed = 6;
    row.generatedTokens = 2;
    saveLedger(path, "run", {row, row}, "{}");
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR [DEMO_TOKENIZER_MODEL]\n", argv[0]);
        return 2;
    }
    const fs::path out = argv[1];
    RandomModelSpec spec = randomModelPreset("tiny");
    put(out / "config_json", "tiny.json", spec.config.toHfJson());
    // Gemma's fields: soft-caps, layer_types, sliding_window_pattern, rope_local_base_freq
    put(out / "config_json", "gemma2.json", randomModelPreset("gemma2").config.toHfJson());
    put(out / "config_json", "gemma3.json", randomModelPreset("gemma3-b").config.toHfJson());
    put(out / "tokenizer_json", "byte_level.json", byteLevelTokenizerJson());
    put(out / "wordpiece", "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##s\n,\n!\n");
    put(out / "wordpiece", "tokenizer.json",
        R"({"version": "1.0", "added_tokens": [{"id": 1, "content": "[UNK]", "special": true},
  {"id": 2, "content": "[CLS]", "special": true}, {"id": 3, "content": "[SEP]", "special": true}],
 "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
  "strip_accents": null, "lowercase": true},
 "pre_tokenizer": {"type": "BertPreTokenizer"},
 "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 2], "sep": ["[SEP]", 3]},
 "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
 "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
  "max_input_chars_per_word": 100,
  "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5, "##s": 6, ",": 7}}})");
    {
        SafetensorsWriter w;
        const std::vector<float> a{1, 2, 3, 4, 5, 6}, b{0.5f, -1};
        w.addF32("a.weight", {2, 3}, a);
        w.addF32("b.bias", {2}, b);
        w.setMetadata("format", "pt");
        fs::create_directories(out / "safetensors");
        w.write(out / "safetensors" / "small.safetensors");
    }
    put(out / "tokenizer_bin", "small.bin", tokenizerBin());
    {
        ModelConfig c = spec.config;
        c.numLayers = 1;
        c.hiddenSize = 8;
        c.intermediateSize = 16;
        c.numHeads = 2;
        c.numKvHeads = 1;
        c.headDim = 4;
        c.vocabSize = 32;
        c.maxPositionEmbeddings = 16;
        c.ropeLayout = RopeLayout::Interleaved;
        c.bosTokenId = 1;
        c.eosTokenIds = {2};
        RandomModelSpec s2{c, 1};
        const auto weights = randomWeights(s2);
        fs::create_directories(out / "llama2c");
        writeLlama2c(out / "llama2c" / "legacy.bin", c, weights, 0);
        writeLlama2c(out / "llama2c" / "v1.bin", c, weights, 1);
    }
    {
        // a whole small model as GGUF, F32 and Q8_0, its byte-level tokenizer in the metadata
        RandomModelSpec tiny = randomModelPreset("tiny");
        const fs::path hf = out / "gguf.hf.tmp";
        writeRandomHfModel(hf, tiny);
        fs::create_directories(out / "gguf");
        for (DType t : {DType::F32, DType::Q8_0}) {
            GgufWriter w;
            writeTokenizerToGguf(hf / "tokenizer.json", w);
            writeGguf(Checkpoint::open(hf), out / "gguf" / (std::string("tiny-") + dtypeName(t) + ".gguf"), t,
                      std::move(w));
        }
        fs::remove_all(hf);
    }
    put(out / "labelled_pairs", "plain.tsv",
        "How do I cook rice?\tWhat is the way to cook rice?\t1\nIs aspirin safe?\tIs aspirin not safe?\t0\n");
    put(out / "labelled_pairs", "quora.tsv",
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\tHow do I cook rice?\t\"What is "
        "\"\"the\"\" "
        "way?\"\t1\n1\t3\t4\tIs it safe?\tIs it not safe?\t0\n");
    put(out / "labelled_pairs", "glue.tsv", "label\tsentence1\tsentence2\r\n1\ta b\tc d\r\n0\te f\tg h\r\n");
    put(out / "labelled_pairs", "pairs.jsonl",
        "{\"question1\": \"a b\", \"question2\": \"c d\", \"is_duplicate\": 1}\n{\"a\": \"e\", \"b\": \"f\", "
        "\"label\": false}\n");
    put(out / "error_curve", "sweep.json",
        R"({"points": [{"threshold": 0.5, "hits": 100, "correct_hits": 50}, {"threshold": 0.7, "hits": 60, )"
        R"("correct_hits": 52}, {"threshold": 0.9, "hits": 20, "correct_hits": 19}]})");
    put(out / "error_curve", "train_log.json",
        R"({"validation_pairs": 10, "evaluation": {"trained": {"curve": [{"threshold": 0.9, "precision": 1.0, )"
        R"("recall": 0.5, "served": 2}, {"threshold": 0.1, "precision": 0.4, "recall": 1.0, "served": 10}]}}})");
    put(out / "error_curve", "old_log.json",
        R"({"validation_pairs": 10, "evaluation": {"trained": {"curve": [{"threshold": 0.9, "precision": 0.0, )"
        R"("recall": 0.0}, {"threshold": 0.1, "precision": 0.4, "recall": 1.0}]}}})");
    put(out / "workload", "lines.jsonl",
        R"({"id":1,"t_ms":0,"tenant":"t1","user":"u1","model":"a","intent":"cat","prompt":"What is a cat?","max_tokens":8})"
        "\n"
        R"({"id":2,"t_ms":5,"tenant":"t2","user":"u2","model":"b","intent":"","prompt":"hi","max_tokens":2,"kind":"paraphrase","ref":1})"
        "\n");
    {
        // a response envelope, a semantic stream entry envelope, a KV envelope and a presets file
        const TenantScope scope("t", "fp");
        CachedResponse r{"An answer.", {5, 6, 7}, "n1", 3};
        put(out / "store_payload", "response.bin", encodeResponsePayload(scope, "exact", r, 1));
        PayloadHeader h;
        h.tier = "semantic";
        h.tenant = "t";
        h.fingerprint = "fp";
        const std::string entry =
            encodeSemanticEntryBody(SemanticEntryBody{"lexical-512", "What?", {0.5f, 0.25f}, r});
        h.shape = {int64_t(entry.size())};
        put(out / "store_payload", "semantic.bin", encodePayload(h, entry));
        PayloadHeader kv;
        kv.kind = PayloadKind::Kv;
        kv.tier = "prefix";
        kv.dtype = DType::F32;
        kv.shape = {1, 2, 1, 2, 2};
        put(out / "store_payload", "kv.bin", encodePayload(kv, std::string(32, '\x01')));
        put(out / "store_payload", "prices.json",
            R"({"schema":"kvwb-prices/1","presets":[{"id":"x","provider":"p","model":"m","currency":"USD","input":1,"cached_input":0.1,"cache_write":1.25,"output":4,"storage_per_million_tokens_hour":0,"min_cacheable_tokens":0,"source":"https://example.com","as_of":"2025-01-01"}]})");
    }
    put(out / "knowledge", "concepts.jsonl",
        R"({"id":"car","name":"car","synonyms":["auto"],"knowledge":"A motor vehicle.","related":[{"kind":"sibling","id":"bus"}],"questions":["What is a car?"]})"
        "\n"
        R"({"id":"bus","name":"bus","knowledge":"A large vehicle.","confidence":0.5,"verified_ms":3})"
        "\n");
    put(out / "knowledge", "profiles.json", profilesToJson(generateProfiles({"u1", "u2"}, 1), 1));
    {
        KnowledgeFile k;
        k.graph = graphFromJsonl(out / "knowledge" / "concepts.jsonl", 0);
        KnowledgeModules m;
        m.layers = 1;
        m.kvHeads = 1;
        m.headDim = 2;
        m.prefixIds = {1};
        KnowledgeModule mod;
        mod.nodeId = "car";
        mod.ids = {5, 6};
        mod.layers = {HeadMajorKv{{0.5f, 1, 2, 3}, {4, 5, 6, 7}}};
        m.modules.push_back(mod);
        k.modules = m;
        saveKnowledge(out / "knowledge" / "graph.h5", k);
    }
    {
        Project p;
        p.name = "fuzz";
        fs::create_directories(out / "project");
        p.save(out / "project" / "seed.kvwb");
        // a run archive of it, with one data file
        fs::create_directories(out / "archive");
        const fs::path stage = out / "archive-stage";
        fs::create_directories(stage);
        std::ofstream(stage / "prompts.txt") << "first prompt\nsecond prompt\n";
        p.promptSets = {stage / "prompts.txt"};
        p.save(stage / "seed.kvwb");
        exportRunArchive(stage / "seed.kvwb", out / "archive" / "seed.zip", true);
        fs::remove_all(stage);
    }
    writeExperimentSeed(out / "experiment" / "plain.h5", FloatType::F16, 0, false);
    writeExperimentSeed(out / "experiment" / "records.h5", FloatType::F32, 0, true);
    writeExperimentSeed(out / "experiment" / "deflate.h5", FloatType::BF16, 1, true);
    if (argc > 2)
        put(out / "tokenizer_model", "demo.model", read(argv[2]));
    // quant: type byte, rows byte, then blocks (fuzz_quant.cpp): one row of 512 smooth values per type
    {
        const DType types[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                               DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
        std::vector<float> values(512);
        for (size_t i = 0; i < values.size(); ++i)
            values[i] = float(std::sin(double(i) * 0.37) * 0.05);
        for (int i = 0; i < 8; ++i) {
            const auto blocks = quantize(types[i], values, "seed");
            std::string bytes{char(i), char(0)};
            bytes.append(reinterpret_cast<const char *>(blocks.data()), blocks.size());
            put(out / "quant", std::string(dtypeName(types[i])) + ".bin", bytes);
        }
    }
    return 0;
}
