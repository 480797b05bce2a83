#include "app/cli/cli_convert.h"

#include "app/cli/cli_util.h"
#include "core/model/checkpoint.h"
#include "core/model/gguf.h"
#include "core/tokenize/gguf_tokenizer.h"
#include "core/util/atomic_file.h"

#include <QCommandLineParser>

#include <cstdio>
#include <filesystem>
#include <string>

namespace kvwb::app {

namespace fs = std::filesystem;
using namespace kvwb::app::cli;

int cmdConvert(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption({"model", "Model to convert (HF directory, .gguf file or llama2.c .bin).", "PATH"});
    p.addOption({"out", "Output HF directory, or .gguf file with --to gguf.", "PATH"});
    p.addOption({"to", "hf (default) or gguf.", "FORMAT", "hf"});
    p.addOption(
        {"weight-type",
         QString::fromStdString("With --to gguf: " + ggufWeightTypeNames(WeightTypeSet::All, NameList::Help) +
                                " for the matrices (norms and biases stay F32)."),
         "TYPE", "F32"});
    addForceOption(p);
    parse(
        p, args,
        "Convert a checkpoint to a Hugging Face directory (llama2.c and GGUF llama q/k rows are permuted to "
        "rotate-half RoPE order; GGUF tensors are dequantised to F32), or to a GGUF file with the tokenizer "
        "in its metadata.");
    if (!p.isSet("model") || !p.isSet("out"))
        throw UsageError{"--model and --out are required"};
    const auto ck = core::Checkpoint::open(str(p.value("model")));
    const std::string to = str(p.value("to"));
    if (to == "gguf") {
        const core::DType type = ggufWeightType(str(p.value("weight-type")));
        writeGgufFrom(ck, outputFileOption(p, "out"), type);
    } else if (to == "hf") {
        core::writeDirectoryAtomic(str(p.value("out")), "--out", p.isSet("force"), [&](const fs::path &tmp) {
            core::convertToHf(ck, tmp);
            if (ck.format() == core::CheckpointFormat::Gguf && ck.tokenizerPath()) {
                const auto t = core::ggufTokenizerFile(core::GgufFile::open(ck.path()));
                core::writeFileAtomic(tmp / t.name, t.bytes);
            }
        });
    } else {
        throw UsageError{"--to must be hf or gguf, not " + to};
    }
    std::printf("wrote %s\n", qPrintable(p.value("out")));
    return 0;
}

} // namespace kvwb::app
