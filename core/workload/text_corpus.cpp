#include "core/workload/text_corpus.h"

#include "core/util/error.h"
#include "core/util/text_util.h"
#include "core/util/warning_list.h"

#include <nlohmann/json.hpp>

#include <fstream>

namespace kvwb::core {

TextCorpus readTextCorpus(const std::filesystem::path &path)
{
    text::checkInputFile(path); // a regular file of bounded size: /dev/urandom never ends
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw Error(ErrorCode::Io, path.string() + ": cannot read corpus");
    const bool jsonl = path.extension() == ".jsonl" || path.extension() == ".json";
    TextCorpus c;
    WarningList warnings(20);
    auto warn = [&](size_t line, const std::string &why) {
        ++c.skipped;
        warnings.add(path.filename().string() + ":" + std::to_string(line) + ": " + why);
    };
    std::string line;
    size_t lineNo = 0, plain = 0;
    bool sawJson = false;
    while (std::getline(in, line)) {
        ++lineNo;
        if (!line.empty() && line.back() == '\r')
            line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos)
            continue;
        if (!jsonl) {
            if (!sawJson && line[line.find_first_not_of(" \t")] == '{' &&
                nlohmann::json::parse(line, nullptr, false).is_object()) {
                sawJson = true; // once: a JSONL file under another name is taken as plain text
                warnings.add(path.filename().string() + ":" + std::to_string(lineNo) +
                             ": a JSON object in a plain-text file, taken as literal text (name the file "
                             "*.jsonl to read its \"text\" or \"prompt\")");
            }
            TextDocument d;
            d.text = line;
            d.validation = (plain++ % 20) == 19;
            c.documents.push_back(std::move(d));
            continue;
        }
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception &) {
            warn(lineNo, "not a JSON object");
            continue;
        }
        // corpus lines carry "text"; workload lines only a "prompt", which then is the text
        const char *field = j.is_object() && !j.contains("text") && j.contains("prompt") ? "prompt" : "text";
        if (!j.is_object() || !j.contains(field) || !j[field].is_string()) {
            warn(lineNo, "field 'text' (or 'prompt') is missing or not a string");
            continue;
        }
        TextDocument d;
        d.text = j[field].get<std::string>();
        while (!d.text.empty() && (d.text.back() == '\n' || d.text.back() == ' '))
            d.text.pop_back(); // the document's end is marked by EOS, not by a newline
        if (j.contains("split")) {
            if (!j["split"].is_string()) {
                warn(lineNo, "field 'split' must be a string");
                continue;
            }
            const auto split = j["split"].get<std::string>();
            if (split == "validation" || split == "val")
                d.validation = true;
            else if (split != "train") {
                warn(lineNo, "field 'split' must be train or validation, got '" + split + "'");
                continue;
            }
        }
        if (j.contains("prompt") && j["prompt"].is_string())
            d.prompt = j["prompt"].get<std::string>();
        if (j.contains("answer") && j["answer"].is_string())
            d.answer = j["answer"].get<std::string>();
        for (const char *label : {"synset", "intent"}) // corpus, workload
            if (d.synset.empty() && j.contains(label) && j[label].is_string())
                d.synset = j[label].get<std::string>();
        if (j.contains("rank") && j["rank"].is_number_integer())
            d.rank = j["rank"].get<int>();
        c.documents.push_back(std::move(d));
    }
    if (c.documents.empty())
        throw Error(
            ErrorCode::Format,
            path.string() + ": no documents" +
                (warnings.empty() ? std::string() : " (first problem: " + warnings.messages()[0] + ")"));
    c.warnings = warnings.messages();
    return c;
}

} // namespace kvwb::core
