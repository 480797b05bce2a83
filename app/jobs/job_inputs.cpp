#include "app/jobs/job_inputs.h"

#include "core/util/error.h"
#include "core/workload/text_corpus.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvwb::app::jobs {

std::vector<PromptText> readPromptFile(const std::string &path, const PromptFileOptions &o,
                                       std::vector<std::string> &warnings)
{
    auto corpus = core::readTextCorpus(path);
    warnings.insert(warnings.end(), corpus.warnings.begin(), corpus.warnings.end());
    if (corpus.skipped > corpus.warnings.size())
        warnings.push_back(fmt::format("{}: {} malformed lines skipped in all",
                                       std::filesystem::path(path).filename().string(), corpus.skipped));
    std::vector<PromptText> out;
    int inGroup = 0;
    for (auto &d : corpus.documents) {
        if ((o.split == "train" && d.validation) || (o.split == "validation" && !d.validation))
            continue;
        const bool prompt = !o.wholeText && !d.prompt.empty();
        std::string text = prompt ? d.prompt : d.text;
        while (!text.empty() && text.back() == '\n')
            text.pop_back();
        if (inGroup == 0)
            out.push_back({std::move(text), d.synset, prompt && o.join <= 1 ? d.answer : std::string()});
        else
            out.back().text += "\n" + text;
        inGroup = (inGroup + 1) % std::max(1, o.join);
    }
    if (out.empty())
        throw core::Error(core::ErrorCode::Format,
                          fmt::format("{}: no prompts of split '{}'", path, o.split));
    return out;
}

std::filesystem::path modelTokenizerPath(const gpu::Model &model)
{
    const auto found = model.checkpoint().tokenizerPath();
    if (!found)
        throw core::Error(core::ErrorCode::Tokenizer,
                          model.checkpoint().path().string() + ": no tokenizer beside the model");
    return *found;
}

std::unique_ptr<core::Tokenizer> loadModelTokenizer(const gpu::Model &model)
{
    const auto path = modelTokenizerPath(model);
    auto tok = core::loadTokenizer(path);
    core::checkTokenizerFitsModel(*tok, model.config(), path.string());
    return tok;
}

int64_t requestWorkingSetBytes(const gpu::Model &model, int64_t tokens)
{
    const int positions = int(std::clamp<int64_t>(tokens, 0, model.contextLimit()));
    return core::requestWorkingSetBytes(model.config(), gpu::floatTypeBytes(model.options().dtype),
                                        gpu::floatTypeBytes(model.kvDtype()), positions,
                                        model.options().prefillChunk);
}

} // namespace kvwb::app::jobs
