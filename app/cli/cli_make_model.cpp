#include "app/cli/cli_make_model.h"

#include "app/cli/cli_util.h"
#include "core/model/checkpoint.h"
#include "core/model/random_model.h"
#include "core/tokenize/tokenizer.h"
#include "core/util/atomic_file.h"
#include "core/util/text_util.h"

#include <QCommandLineParser>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

namespace kvwb::app {

namespace fs = std::filesystem;
using namespace kvwb::app::cli;

int cmdMakeModel(const QStringList &args)
{
    QCommandLineParser p;
    QStringList presets;
    for (const auto &n : core::randomModelPresetNames())
        presets << QString::fromStdString(n);
    p.addOption({"preset", "One of: " + presets.join(", ") + " (default tiny).", "NAME", "tiny"});
    p.addOption({"out", "Output directory (HF layout).", "DIR"});
    addSeedOption(p, "Weight seed");
    p.addOption({"weight-dtype",
                 QString::fromStdString(ggufWeightTypeNames(WeightTypeSet::Unquantised, NameList::Help) +
                                        " safetensors; with --format gguf also " +
                                        ggufWeightTypeNames(WeightTypeSet::Quantised, NameList::Plain) + "."),
                 "DTYPE", "F32"});
    p.addOption({"format", "hf (default: a directory) or gguf (one .gguf file at --out).", "FORMAT", "hf"});
    p.addOption(
        {"tokenizer",
         "A tokenizer.json to ship instead of the byte-level one (e.g. the real model's for a preset of "
         "its geometry); it must fit the preset's vocabulary, and its BOS and end-of-text ids go into "
         "config.json.",
         "FILE"});
    addForceOption(p);
    parse(p, args,
          "Write a random-weight Llama-family model (config.json, model.safetensors, tokenizer.json; or one "
          "GGUF file) for smoke tests and benchmarks.");
    if (!p.isSet("out"))
        throw UsageError{"--out is required"};
    auto spec = core::randomModelPreset(str(p.value("preset")));
    spec.seed = uint64_t(intOption(p, "seed", 1, 0));
    std::string tokenizerJson; // empty: the byte-level tokenizer
    if (p.isSet("tokenizer")) {
        const fs::path path = str(p.value("tokenizer"));
        if (path.extension() != ".json")
            throw UsageError{"--tokenizer takes a tokenizer.json, not " + path.string()};
        const auto tok = core::loadTokenizer(path);
        core::checkTokenizerFitsModel(*tok, spec.config, path.string());
        tokenizerJson = core::text::readWholeFile(path, uint64_t(64) << 20);
        // the BOS it adds (none for Qwen), not a piece that merely has the name
        const auto with = tok->encode("a", true), without = tok->encode("a", false);
        spec.config.bosTokenId =
            with.size() > without.size() ? std::optional<int>(with.front()) : std::nullopt;
        spec.config.eosTokenIds.clear();
        for (const char *end : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>", "<eos>"})
            if (const auto id = tok->pieceToId(end)) {
                spec.config.eosTokenIds = {*id};
                break;
            }
        if (spec.config.eosTokenIds.empty() && tok->eosId())
            spec.config.eosTokenIds = {*tok->eosId()};
    }
    const std::string format = str(p.value("format"));
    if (format == "gguf") {
        const core::DType type = ggufWeightType(str(p.value("weight-dtype")));
        const fs::path out = outputFileOption(p, "out");
        fs::path dir = out;
        dir += ".hf.kvwb-tmp";
        std::error_code ec;
        fs::remove_all(dir, ec);
        const core::TempPathGuard removeDir(dir); // also when writing fails half-way
        // a real geometry goes through bf16 (half the disk; its values are drawn at bf16 precision anyway)
        core::writeRandomHfModel(dir, spec, spec.streamed ? "BF16" : "F32", tokenizerJson);
        writeGgufFrom(core::Checkpoint::open(dir), out, type);
    } else if (format == "hf") {
        core::writeDirectoryAtomic(str(p.value("out")), "--out", p.isSet("force"), [&](const fs::path &tmp) {
            core::writeRandomHfModel(tmp, spec, str(p.value("weight-dtype")), tokenizerJson);
        });
    } else {
        throw UsageError{"--format must be hf or gguf, not " + format};
    }
    std::printf("wrote %s (%s, %.2fM parameters)\n", qPrintable(p.value("out")),
                qPrintable(p.value("preset")), spec.config.parameterCount() / 1e6);
    return 0;
}

} // namespace kvwb::app
