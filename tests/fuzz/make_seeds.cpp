// Writes the fuzz targets' seed corpora from the project's own writers: a random model's
// config.json, tokenizer.json and a small safetensors file, a llama2.c checkpoint and tokenizer.bin,
// a SentencePiece tokenizer.model (when the demo's is given), workload lines and a project file.
// Usage: kvwb_fuzz_seeds OUT_DIR [DEMO_TOKENIZER_MODEL]
#include "core/model/checkpoint.h"
#include "core/model/random_model.h"
#include "core/model/safetensors.h"
#include "core/store/project.h"

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
    put(out / "tokenizer_json", "byte_level.json", byteLevelTokenizerJson());
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
    put(out / "workload", "lines.jsonl",
        R"({"id":1,"t_ms":0,"tenant":"t1","user":"u1","model":"a","intent":"cat","prompt":"What is a cat?","max_tokens":8})"
        "\n"
        R"({"id":2,"t_ms":5,"tenant":"t2","user":"u2","model":"b","intent":"","prompt":"hi","max_tokens":2,"kind":"paraphrase","ref":1})"
        "\n");
    {
        Project p;
        p.name = "fuzz";
        fs::create_directories(out / "project");
        p.save(out / "project" / "seed.kvwb");
    }
    if (argc > 2)
        put(out / "tokenizer_model", "demo.model", read(argv[2]));
    return 0;
}
