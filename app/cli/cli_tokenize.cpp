#include "app/cli/cli_tokenize.h"

#include "app/cli/cli_util.h"
#include "core/tokenize/tokenizer.h"

#include <QCommandLineParser>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace kvwb::app {

using nlohmann::json;
using namespace kvwb::app::cli;

int cmdTokenize(const QStringList &args)
{
    QCommandLineParser p;
    p.addOption(
        {"tokenizer", "tokenizer.json, tokenizer.model, tokenizer.bin, or a model directory.", "PATH"});
    p.addOption({"text", "Text to encode.", "STR"});
    p.addOption({"text-file", "File whose whole contents are encoded.", "FILE"});
    p.addOption({"add-special", "Add the tokenizer's special tokens (e.g. BOS)."});
    p.addOption({"json", "Print JSON with ids and pieces."});
    parse(p, args, "Encode text and print the token ids.");
    if (!p.isSet("tokenizer"))
        throw UsageError{"--tokenizer is required"};
    if (p.isSet("text") == p.isSet("text-file"))
        throw UsageError{"give exactly one of --text or --text-file"};
    const std::string text =
        p.isSet("text") ? str(p.value("text")) : readTextFile(p.value("text-file"), core::kMaxTextBytes);
    const auto tok = core::loadTokenizer(str(p.value("tokenizer")));
    const auto ids = tok->encode(text, p.isSet("add-special"));
    if (p.isSet("json")) {
        json j = {{"ids", ids}, {"count", ids.size()}, {"kind", tok->kind()}};
        json ps = json::array();
        for (int id : ids)
            ps.push_back(tok->piece(id));
        j["pieces"] = ps;
        std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    } else {
        std::string line;
        for (size_t i = 0; i < ids.size(); ++i)
            line += (i ? " " : "") + std::to_string(ids[i]);
        std::printf("%s\n", line.c_str());
    }
    return 0;
}

} // namespace kvwb::app
